"""The policies ``sapo-env bench-ratio`` can play, by label.

A ratio policy is named by a label:

- a built-in one (``POLICIES``): every policy of the registry (:mod:`agents.ratio.registry`)
  by its label (but ``FixedRatio`` and ``ScheduledRatio``, played by the two forms below),
  built with the settings its tuning chose (``TUNING_GRID``, its entry's ``tuning``;
  :mod:`sapo_experiments.bench_ratio.tuning`);
- ``fixed-J`` for any J in [0, 8] (``FixedRatio``);
- ``schedule-J1,J2,...,Jk``: J1 for the first k-th of the run, J2 for the next, ... (the
  oracle's form, :class:`agents.ratio.ScheduledRatio`);
- the import path of your own, ``"mypkg.mod:MyPolicy"``: a class or function called as
  ``MyPolicy(node, seed)`` (the node's name and an int seed) that returns a
  ``sapo_env.runtime.RatioPolicy`` (``choose(observation) -> J``, ``update(reward, info)``).

Worker processes build every policy from its label, so a run is described by plain data; a
policy class or function itself may be given too (``BenchConfig(policies=(MyPolicy,
"fixed-4"))``): its import path is used, so it must be defined at the top level of an
importable module. A policy registered (:func:`agents.ratio.registry.ratio_policy`) in a
module outside the package has a label in the processes that import that module: with
``jobs=1`` (no worker process), or entered by its import path.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.ratio.registry import GRID_ARMS, RatioPolicyEntry, ratio_policies
from sapo_env.registry import NamesView, TableView

if TYPE_CHECKING:
    from sapo_experiments.bench_ratio.config import BenchConfig

ADAPTIVE_START_J = 4  #: round 0's J of an adaptive policy (its choices start with round 1)
TRAIN_BUDGET = 8  #: I + J of every benchmark swarm (the paper's)
FIXED_GRID = tuple(GRID_ARMS)
"""The fixed ratios the best fixed J is chosen from, and the J values of the oracle's phases
(J = 8 answers nothing and earns 0, so it is never best)."""


@dataclass(frozen=True)
class PolicySpec:
    """How to build one benchmarked policy for one node."""

    label: str
    description: str
    initial_num_external: int  #: J in force in round 0, before the policy has chosen
    #: (seed, node, config, kwargs) -> a ``sapo_env.runtime.RatioPolicy``; kwargs are its tuned
    # settings
    build: Callable[[np.random.SeedSequence, str, BenchConfig, Mapping[str, Any]], Any]
    adaptive: bool = True


def _fixed(j: int) -> PolicySpec:
    def build(seed, node, config, kwargs):
        from agents.ratio import FixedRatio

        return FixedRatio(j)

    return PolicySpec(f"fixed-{j}", f"FixedRatio({j}): {TRAIN_BUDGET - j}/{j}", j, build,
                      adaptive=False)


def schedule_label(phases: tuple[int, ...]) -> str:
    """The label of the schedule of equal phases ``phases`` (one J each)."""
    return "schedule-" + ",".join(map(str, phases))


def schedule_phases(label: str) -> tuple[int, ...]:
    """The J of each phase of a ``schedule-...`` label."""
    return tuple(int(j) for j in label.removeprefix("schedule-").split(","))


def _schedule(phases: tuple[int, ...]) -> PolicySpec:
    def build(seed, node, config, kwargs):
        from agents.ratio import ScheduledRatio

        rounds = config.rounds
        starts = [k * rounds // len(phases) for k in range(len(phases))]
        # equal phases that would start in the same round (runs shorter than the phases) merge
        merged = dict(zip(starts, phases))
        return ScheduledRatio(sorted(merged.items()))

    return PolicySpec(schedule_label(phases), f"ScheduledRatio: J = {', '.join(map(str, phases))}"
                      f" in {len(phases)} equal phases", phases[0], build, adaptive=False)


def _registered(entry: RatioPolicyEntry) -> PolicySpec:
    def build(seed, node, config, kwargs):
        if "path" in entry.needs and config.sb3_model is None:
            raise ValueError(f"policy {entry.label!r} needs a trained model: pass sb3_model "
                             "(--sb3-model), e.g. the one examples/train_meta_agent.py saves")
        context = {"seed": seed, "max_rounds": config.rounds, "path": config.sb3_model}
        return entry.make(**{n: context[n] for n in entry.needs},
                          **{k: tuple(v) if isinstance(v, list) else v
                             for k, v in kwargs.items()})

    return PolicySpec(entry.label, f"{entry.shown_as}: {entry.rule}", ADAPTIVE_START_J, build,
                      adaptive=entry.kind != "fixed")


LABEL_FORMS = ("fixed-J", "schedule-J1,J2,...")
"""The registered labels that are forms, which ``spec_of`` parses: ``fixed-4``,
``schedule-6,0``."""


def _policies() -> dict[str, PolicySpec]:
    return {**{f"fixed-{j}": _fixed(j) for j in FIXED_GRID},
            **{e.label: _registered(e) for e in ratio_policies() if e.label not in LABEL_FORMS}}


POLICIES = TableView(_policies)
"""Every built-in policy by label, as registered when read: the fixed grid's, then the
registry's (but the ``LABEL_FORMS``)."""
ADAPTIVE = NamesView(lambda: [e.label for e in ratio_policies() if e.tuning])
"""The built-in adaptive policies that are tuned and benchmarked by default: those registered
with a tuning."""
DEFAULT_POLICIES = NamesView(lambda: [f"fixed-{j}" for j in FIXED_GRID] + list(ADAPTIVE))
TUNING_GRID = TableView(lambda: {e.label: list(e.tuning) for e in ratio_policies() if e.tuning})
"""The tuning budget: four settings per built-in adaptive policy (its entry's ``tuning``), the
first its defaults, the same number for each; the one with the highest mean gain over the best
fixed ratio on the training seeds of the default scenarios is kept
(:mod:`sapo_experiments.bench_ratio.tuning`)."""


def needs_model(label: str) -> bool:
    """Whether the built-in policy ``label`` is built from a trained model (``sb3_model``)."""
    return any(e.label == label and "path" in e.needs for e in ratio_policies())


def spec_of(label: str) -> PolicySpec:
    """The spec of a policy label: built-in, ``fixed-J``, ``schedule-...`` or ``module:Name``."""
    if label in POLICIES:
        return POLICIES[label]
    if ":" in label:
        return _entered(label)
    expected = (f"expected one of {list(POLICIES)}, fixed-J for J in [0, {TRAIN_BUDGET}], "
                f"schedule-J1,J2,... or the import path of your own, 'mypkg.mod:MyPolicy'")
    if label.startswith("schedule-"):
        parts = label.removeprefix("schedule-").split(",")
        if not all(p.isdigit() and int(p) <= TRAIN_BUDGET for p in parts):
            raise ValueError(f"policy {label!r}: a schedule's phases must be J values in [0, "
                             f"{TRAIN_BUDGET}], comma-separated; {expected}")
        return _schedule(tuple(int(p) for p in parts))
    prefix, _, j = label.partition("fixed-")
    if prefix or not j.isdigit() or int(j) > TRAIN_BUDGET:
        raise ValueError(f"unknown policy {label!r}; {expected}")
    return _fixed(int(j))


def _entered(path: str) -> PolicySpec:
    """Your own policy, ``"module:Name"``: ``Name(node, seed)`` builds it for one node."""
    factory = resolve(path)
    check_signature(path, factory)

    def build(seed, node, config, kwargs):
        return factory(node, int(seed.generate_state(1)[0]))

    doc = (inspect.getdoc(factory) or path).splitlines()[0]
    return PolicySpec(path, doc, ADAPTIVE_START_J, build)


def resolve(path: str) -> Callable[..., Any]:
    """The object an import path ``"module:Name"`` names, with a clear error."""
    module, _, name = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"policy {path!r} cannot be imported ({error}); give "
                         "'module:Name' of a class or function at the top level of an "
                         "importable module") from None
    if not callable(obj):
        raise ValueError(f"policy {path!r} is not a class or function")
    return obj


def check_signature(path: str, factory: Callable[..., Any]) -> None:
    """A ``ValueError`` in one line, here and now, unless ``factory`` can be called as
    ``factory(node, seed)``: in a worker process the ``TypeError`` would come minutes later,
    through a traceback of ``concurrent.futures``."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without one: the call will tell
        return
    try:
        signature.bind("node_0", 0)
    except TypeError as error:
        raise ValueError(f"policy {path!r} is called as {path.rpartition(':')[2]}(node, seed) "
                         f"(the node's name and an int seed), but its signature is {signature}"
                         f" ({error})") from None


def policy_label(policy: str | Callable[..., Any]) -> str:
    """A policy's label: a string as it is, a class or function as its import path."""
    if isinstance(policy, str):
        return policy
    path = f"{policy.__module__}:{policy.__qualname__}"
    try:
        found = resolve(path)
    except ValueError:
        found = None
    if found is not policy:
        raise ValueError(f"policy {policy!r} must be defined at the top level of an importable "
                         f"module (worker processes import it as {path!r})")
    return path


def policy_source_digest(label: str) -> str | None:
    """A digest of the source of an entered policy's module (its runs rerun when it changes)."""
    if ":" not in label:
        return None
    module = importlib.import_module(label.partition(":")[0])
    try:
        return hashlib.sha256(inspect.getsource(module).encode()).hexdigest()[:16]
    except (OSError, TypeError):
        return None


def file_label(label: str) -> str:
    """A label as it can appear in a file name: an import path's last name."""
    return label.rpartition(":")[2].replace(".", "-") if ":" in label else label
