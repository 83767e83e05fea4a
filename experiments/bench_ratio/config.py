"""What ``sapo-env bench-ratio`` runs: the policies, the three settings, the sweep's settings.

A ratio policy is named by a label: a built-in one (``POLICIES``), ``fixed-J`` for any J in
[0, 8], or the import path of your own, ``"mypkg.mod:MyPolicy"``: a class or function called
as ``MyPolicy(node, seed)`` (the node's name and an int seed) that returns a
``sapo_env.RatioPolicy`` (``choose(observation) -> J``, ``update(reward, info)``). Worker
processes build every policy from its label, so a run is described by plain data; a policy
class or function itself may be given too (``BenchConfig(policies=(MyPolicy, "fixed-4"))``):
its import path is used, so it must be defined at the top level of an importable module.

Every run is one swarm of simulated learners (or the nodes of any agent factory) under the
paper's protocol, in one of three settings:

``all``
    every node follows the policy (does the policy starve the pool when everyone uses it?);
``focal``
    ``node_0`` follows it among nodes fixed at J = 4, the paper's best ratio (is it a good
    choice for one node, whatever it does to the others?);
``mixed``
    the first half of the nodes follow it, the rest are fixed at J = 0, 2, 6 and 8 in turn: a
    giver, two moderate nodes and a free rider (does it hold up in a heterogeneous swarm?).

Seeds are held out: the env and learner seeds come from ``base_seed`` exactly as in
``sapo-env reproduce`` (so ``fixed-2`` in the ``all`` setting is the reproduce sweep's 6/2,
number for number), the policies' own randomness from a third child of the same seed; the
meta-agent example draws its training episodes from a branch of its own ``--seed``, so no
benchmark swarm was ever a training episode, and nothing here was tuned on these seeds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from experiments import learners
from experiments.learners import AgentFactory
from experiments.ray_runs import RayOptions, check_ray
from sapo_env.validation import check_int

Setting = Literal["all", "focal", "mixed"]
SETTINGS: tuple[Setting, ...] = ("all", "focal", "mixed")
FOCAL_COMPANION_J = 4  #: J of the other nodes in the focal setting
MIXED_COMPANION_J = (0, 2, 6, 8)  #: J of the non-policy nodes of the mixed setting, in turn
ADAPTIVE_START_J = 4  #: round 0's J of an adaptive policy (its choices start with round 1)


@dataclass(frozen=True)
class PolicySpec:
    """How to build one benchmarked policy for one node."""

    label: str
    description: str
    initial_num_external: int  #: J in force in round 0, before the policy has chosen
    #: (seed, max_rounds, sb3_model, node) -> a ``sapo_env.RatioPolicy``
    build: Callable[[np.random.SeedSequence, int, str | None, str], Any]
    adaptive: bool = True


def _fixed(j: int) -> PolicySpec:
    def build(seed, max_rounds, model, node):
        from agents.ratio import FixedRatio

        return FixedRatio(j)

    return PolicySpec(f"fixed-{j}", f"FixedRatio({j}): {8 - j}/{j}", j, build, adaptive=False)


def _adaptive(label: str, description: str, make: Callable[..., Any]) -> PolicySpec:
    return PolicySpec(label, description, ADAPTIVE_START_J, make)


def _pool_quality(seed, max_rounds, model, node):
    from agents.ratio import PoolQuality

    return PoolQuality()


def _learning_progress(seed, max_rounds, model, node):
    from agents.ratio import LearningProgress

    return LearningProgress()


def _ucb(seed, max_rounds, model, node):
    from agents.ratio import DiscountedUCB

    return DiscountedUCB()  # deterministic: no seed


def _exp3(seed, max_rounds, model, node):
    from agents.ratio import EXP3

    return EXP3(seed=seed)


def _thompson(seed, max_rounds, model, node):
    from agents.ratio import ThompsonSampling

    return ThompsonSampling(seed=seed)


def _ppo(seed, max_rounds, model, node):
    from agents.ratio import SB3Ratio

    if model is None:
        raise ValueError("policy 'ppo' needs a trained model: pass sb3_model (--sb3-model), "
                         "e.g. the one examples/train_meta_agent.py saves")
    return SB3Ratio.load(model, max_rounds=max_rounds)


POLICIES: dict[str, PolicySpec] = {p.label: p for p in [
    _fixed(0), _fixed(2), _fixed(4), _fixed(6), _fixed(7),
    _adaptive("pool-quality", "PoolQuality: more J while the pool beats your reward",
              _pool_quality),
    _adaptive("learning-progress", "LearningProgress: genrl's 10-round window rule on J",
              _learning_progress),
    _adaptive("discounted-ucb", "DiscountedUCB over J", _ucb),
    _adaptive("exp3", "EXP3 over J", _exp3),
    _adaptive("thompson", "discounted Thompson sampling over J", _thompson),
    _adaptive("ppo", "SB3Ratio: PPO trained on the meta env (needs --sb3-model)", _ppo),
]}
DEFAULT_POLICIES = tuple(p for p in POLICIES if p not in ("fixed-0", "ppo"))


def spec_of(label: str) -> PolicySpec:
    """The spec of a policy label: a built-in one, ``fixed-J``, or ``"module:Name"``."""
    if label in POLICIES:
        return POLICIES[label]
    if ":" in label:
        return _entered(label)
    prefix, _, j = label.partition("fixed-")
    if prefix or not j.isdigit() or int(j) > 8:
        raise ValueError(f"unknown policy {label!r}; expected one of {list(POLICIES)}, fixed-J "
                         "for J in [0, 8], or the import path of your own, 'mypkg.mod:MyPolicy'")
    return _fixed(int(j))


def _entered(path: str) -> PolicySpec:
    """Your own policy, ``"module:Name"``: ``Name(node, seed)`` builds it for one node."""
    factory = resolve(path)

    def build(seed, max_rounds, model, node):
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


FULL = {"rounds": 600, "seeds": 3}
QUICK = {"rounds": 40, "seeds": 2}


@dataclass(frozen=True)
class BenchConfig:
    """Settings of the ratio benchmark. ``quick=True`` changes the defaults marked (quick)."""

    out: str | Path | None = None
    """Output folder (None: ``out/bench-ratio``, quick ``out/bench-ratio-quick``)."""
    policies: tuple[Any, ...] = DEFAULT_POLICIES
    """Policies to evaluate: labels (built-in, ``fixed-J``, ``"module:Name"`` of your own;
    ``"all"``: every built-in one) or your own policy classes and functions (see the module
    docstring); ``ppo`` is added when ``sb3_model`` is given."""
    settings: tuple[str, ...] = SETTINGS
    """``all``, ``focal`` and/or ``mixed`` (see the module docstring)."""
    sb3_model: str | None = None
    """A trained stable-baselines3 model (``examples/train_meta_agent.py`` saves one)."""
    seeds: int | None = None
    """Seeds per policy and setting (None: 3, quick 2), paired across policies."""
    base_seed: int = 0
    """Root of every seed (the env and learner seeds are ``sapo-env reproduce``'s)."""
    rounds: int | None = None
    """Rounds per run (None: 600, quick 40)."""
    n_agents: int = 8
    """Nodes per swarm (at least 2; the mixed setting needs 2 or more)."""
    learner: AgentFactory = learners.simulated_learners
    """Who plays the nodes (see ``experiments.learners``): the simulated learner, tiny real
    learners (``learners.TinyLearners()``: their tasks and empty system prompt go into every
    swarm, their warm starts are trained first) or any agent factory."""
    jobs: int | None = None
    """Runs in parallel processes; None: one per CPU core."""
    ray: RayOptions | None = None
    """Run each run as a Ray task on this Ray instead (``experiments.ray_runs``; ``jobs`` left
    at None): same runs, scheduled by Ray. None: processes on this machine. The learner
    factory and ``sb3_model`` must be importable and readable where the tasks run."""
    resume: bool = True
    """Reuse finished runs in ``out/runs`` whose settings match."""
    plots: bool = True
    """Write the figure of J over time (needs matplotlib)."""
    progress: bool = True
    """Show a progress bar over runs."""
    quick: bool = False
    """A smoke test of under a minute: too short to conclude anything, and its table says so."""

    def __post_init__(self) -> None:
        for name, value in (QUICK if self.quick else FULL).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        if self.out is None:
            object.__setattr__(self, "out", "out/bench-ratio-quick" if self.quick
                               else "out/bench-ratio")
        object.__setattr__(self, "out", Path(self.out))
        labels = []
        for policy in self.policies:
            if policy == "all":
                labels += [p for p in POLICIES if p != "ppo" or self.sb3_model is not None]
            else:
                labels.append(policy_label(policy))
        policies = tuple(dict.fromkeys(labels))
        if self.sb3_model is not None and "ppo" not in policies:
            policies += ("ppo",)
        if not policies:
            raise ValueError("policies is empty")
        for label in policies:
            spec_of(label)  # a clear error for an unknown label or a path that does not import
        files = [file_label(p) for p in policies]
        if len(set(files)) < len(files):
            raise ValueError(f"two policies would share run files: {list(policies)}")
        if "ppo" in policies and self.sb3_model is None:
            raise ValueError("policies include 'ppo' but sb3_model is None: give the path of "
                             "a trained model (examples/train_meta_agent.py saves one)")
        if self.sb3_model is not None and not Path(self.sb3_model).exists():
            raise ValueError(f"sb3_model {self.sb3_model!r} does not exist")
        object.__setattr__(self, "policies", policies)
        bad = [s for s in self.settings if s not in SETTINGS]
        if bad or not self.settings:
            raise ValueError(f"settings must be among {list(SETTINGS)}, got {list(self.settings)}")
        object.__setattr__(self, "settings", tuple(dict.fromkeys(self.settings)))
        for name in ("seeds", "rounds", "n_agents"):
            check_int(name, getattr(self, name), 1)
        if self.n_agents < 2:
            raise ValueError(f"n_agents must be >= 2 (sharing needs two nodes), "
                             f"got {self.n_agents}")
        if self.jobs is not None:
            check_int("jobs", self.jobs, 1)
        check_ray(self.ray, self.jobs)

    def specs(self) -> list[RunSpec]:
        return [RunSpec(p, s, k, self) for s in self.settings for p in self.policies
                for k in range(self.seeds)]


@dataclass(frozen=True)
class RunSpec:
    """One run: a policy in a setting under one seed (plain data, for worker processes)."""

    policy: str
    setting: str
    seed_index: int
    config: BenchConfig

    @property
    def name(self) -> str:
        return f"{self.setting}_{file_label(self.policy)}_seed{self.seed_index}"

    @property
    def path(self) -> Path:
        return Path(self.config.out) / "runs" / f"{self.name}.npz"

    def roles(self) -> dict[str, str]:
        """Node -> the label of the policy it follows."""
        names = [f"node_{i}" for i in range(self.config.n_agents)]
        if self.setting == "all":
            return {a: self.policy for a in names}
        if self.setting == "focal":
            return {a: self.policy if i == 0 else f"fixed-{FOCAL_COMPANION_J}"
                    for i, a in enumerate(names)}
        half = (len(names) + 1) // 2
        return {a: self.policy if i < half else
                f"fixed-{MIXED_COMPANION_J[(i - half) % len(MIXED_COMPANION_J)]}"
                for i, a in enumerate(names)}

    def key(self) -> str:
        """A digest of everything that determines the run's outcome (for resuming)."""
        from sapo_env import __version__

        c = self.config
        model = None
        if self.policy == "ppo":
            model = hashlib.sha256(Path(c.sb3_model).read_bytes()).hexdigest()[:16]
        payload = {"version": __version__, "policy": self.policy, "setting": self.setting,
                   "seed": self.seed_index, "base_seed": c.base_seed, "rounds": c.rounds,
                   "n_agents": c.n_agents, "learner": learners.describe(c.learner),
                   "model": model, "policy_source": policy_source_digest(self.policy)}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def swarm_settings(config: BenchConfig) -> dict[str, Any]:
    """``SwarmConfig`` fields the learner needs in every swarm (the tiny learner's tasks)."""
    if isinstance(config.learner, learners.TinyLearners):
        return config.learner.swarm_settings()
    return {}


def settings_dict(config: BenchConfig) -> dict[str, Any]:
    """The settings as JSON-ready data (for summary.json)."""
    out = dataclasses.asdict(config)
    out["out"] = str(config.out)
    out["learner"] = learners.describe(config.learner)
    return out
