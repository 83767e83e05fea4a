"""What ``sapo-env bench-ratio`` runs: the learner, the sweep's settings, one run.

Policies are named by labels (:mod:`sapo_experiments.bench_ratio.policies`).

Every run is one swarm of a scenario (:mod:`sapo_experiments.bench_ratio.scenarios`) played by the
learner of a track (:mod:`sapo_experiments.bench_ratio.tracks`: ``sim``, simulated learners, by
default; ``real``, tiny real learners) under the paper's protocol. Seeds: the env and learner
seeds of seed k come from ``base_seed`` as in ``sapo-env reproduce``; the policies' own
randomness and the scenario's scripted nodes from two more children of the same seed. Every
policy of a scenario plays the same swarm under the same seeds (common random numbers), so
their differences are paired. Held-out seeds are 0 .. seeds - 1; the tuning and the oracle's
search use seeds from ``TRAINING_SEED_START`` on, which no table is computed on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sapo_env.validation import check_int
from sapo_experiments import learners
from sapo_experiments.bench_ratio.policies import (
    POLICIES,
    TUNING_GRID,
    file_label,
    needs_model,
    policy_label,
    policy_source_digest,
    spec_of,
)
from sapo_experiments.bench_ratio.scenarios import SCENARIOS
from sapo_experiments.bench_ratio.tracks import (  # noqa: F401 - the sim track's, named here too
    BENCH_LEARNER,
    DEFAULT_SCENARIOS,
    FULL,
    QUICK,
    TRACKS,
    Track,
)
from sapo_experiments.learners import AgentFactory
from sapo_experiments.sweep import RunSpecBase, SweepConfig, run_key, seeds_of

TRAINING_SEED_START = 1000  #: tuning and the oracle search use seeds 1000, 1001, ...
TUNED_FILE = Path(__file__).with_name("tuned.json")
"""The committed tuning and oracle search (``sapo-env bench-ratio --tune`` rewrites its entry
for the settings it ran with)."""


@dataclass(frozen=True)
class BenchConfig(SweepConfig):
    """Settings of the ratio benchmark (and ``SweepConfig``'s: ``out``, ``seeds``, ``rounds``,
    ``jobs``, ``ray``, ...). A field left at None takes its track's full preset, or with
    ``quick=True`` its quick one. ``sim`` (``FULL``, ``QUICK``): held-out seeds per policy and
    scenario 10, quick 2 (paired across policies); rounds per run 300, quick 40 (a smoke test of
    seconds, too short to conclude anything, as its table says); output folder
    ``out/bench-ratio``, quick ``out/bench-ratio-quick``. ``real``: ``tracks.REAL_FULL`` and
    ``tracks.REAL_QUICK``. On Ray, the learner factory and ``sb3_model`` must be importable and
    readable where the tasks run."""

    track: str = "sim"
    """The world the policies are ranked in (:mod:`sapo_experiments.bench_ratio.tracks`):
    ``"sim"`` or ``"real"``; it gives the defaults of the fields left at None."""
    policies: tuple[Any, ...] | None = None
    """Policies to evaluate: labels (built-in, ``fixed-J``, ``schedule-...``, ``"module:Name"``
    of your own; ``"all"``: every built-in one) or your own policy classes and functions (see
    the module docstring); ``ppo`` is added when ``sb3_model`` is given. The best fixed ratio
    and the oracle of each scenario are added from the tuning. None: the track's (``sim``:
    ``DEFAULT_POLICIES``)."""
    scenarios: tuple[str, ...] | None = None
    """Scenarios of :mod:`sapo_experiments.bench_ratio.scenarios` (``SCENARIOS``; None: the
    track's, ``sim`` ``DEFAULT_SCENARIOS``, quick focal and adversarial; ``real`` all)."""
    sb3_model: str | None = None
    """A trained stable-baselines3 model (``examples/train_meta_agent.py`` saves one)."""
    tune_seeds: int | None = None
    """Training seeds of the tuning and the oracle search (None: the track's, ``sim`` 3, quick
    2; ``real`` 2)."""
    n_agents: int = 8
    """Nodes per swarm at the start (at least 2; churn adds as many joiners as leave)."""
    learner: AgentFactory | None = None
    """Who plays the nodes (see ``sapo_experiments.learners``; None: the track's):
    ``BENCH_LEARNER`` (simulated, past the Aha), the calibrated simulated learner
    (``learners.simulated_learners``), tiny real learners (``learners.TinyLearners``, e.g.
    ``tracks.REAL_LEARNER``: their tasks and empty system prompt go into every swarm, their
    warm starts are trained first) or any agent factory."""
    held_out_questions: int | None = None
    """Held-out questions every node answers at each evaluation, one sample each (0: no
    evaluation; None: the track's, ``sim`` 0, ``real`` 256, quick 64). Tiny learners are also
    evaluated before round 0."""
    held_out_every: int | None = None
    """Rounds between held-out evaluations, and one after the last round (None: 50)."""
    tuned: str | Path | None = TUNED_FILE
    """The tuning file: the built-in policies' tuned settings and, per scenario, the best fixed
    ratio and the oracle found on the training seeds, for these settings (learner, rounds,
    nodes, base seed). None, or a file without an entry for these settings: defaults, no
    oracle, and the best fixed ratio chosen on the held-out seeds (the table says so)."""
    tuning: Mapping[str, Any] = field(default=None, init=False, repr=False, compare=False)
    """The entry of ``tuned`` for these settings, or {} (read at construction)."""

    def presets(self) -> dict[str, Any]:
        return {**self.track_spec.presets(self.quick),
                "policies": self.track_spec.default_policies(self.quick),
                "learner": self.track_spec.learner}

    @property
    def track_spec(self) -> Track:
        """The track named ``track``."""
        if self.track not in TRACKS:
            raise ValueError(f"track must be one of {list(TRACKS)}, got {self.track!r}")
        return TRACKS[self.track]

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("held_out_questions", self.held_out_questions, 0)
        check_int("held_out_every", self.held_out_every, 1)
        labels = []
        for policy in self.policies:
            if policy == "all":
                labels += [p for p in POLICIES if not needs_model(p) or self.sb3_model is not None]
            else:
                labels.append(policy_label(policy))
        if self.sb3_model is not None:  # the policies played from a trained model
            labels += [p for p in POLICIES if needs_model(p)]
        policies = tuple(dict.fromkeys(labels))
        if not policies:
            raise ValueError("policies is empty")
        for label in policies:
            spec_of(label)  # a clear error for an unknown label or a path that does not import
            if needs_model(label) and self.sb3_model is None:
                raise ValueError(f"policies include {label!r} but sb3_model is None: give the "
                                 "path of a trained model (examples/train_meta_agent.py saves "
                                 "one)")
        if self.sb3_model is not None and not Path(self.sb3_model).exists():
            raise ValueError(f"sb3_model {self.sb3_model!r} does not exist")
        object.__setattr__(self, "policies", policies)
        bad = [s for s in self.scenarios if s not in SCENARIOS]
        if bad or not self.scenarios:
            raise ValueError(f"scenarios must be among {list(SCENARIOS)}, got "
                             f"{list(self.scenarios)}")
        object.__setattr__(self, "scenarios", tuple(dict.fromkeys(self.scenarios)))
        for name in ("tune_seeds", "n_agents"):
            check_int(name, getattr(self, name), 1)
        if self.seeds > TRAINING_SEED_START:
            raise ValueError(f"seeds must be <= {TRAINING_SEED_START} (seeds from "
                             f"{TRAINING_SEED_START} on are the training seeds), got {self.seeds}")
        if self.n_agents < 2:
            raise ValueError(f"n_agents must be >= 2 (sharing needs two nodes), "
                             f"got {self.n_agents}")
        object.__setattr__(self, "tuning", read_tuning(self.tuned, tuning_key(self)))
        files = [file_label(p) for p in self.all_policies()]
        if len(set(files)) < len(files):
            raise ValueError(f"two policies would share run files: {list(policies)}")

    def kwargs_of(self, label: str) -> dict[str, Any]:
        """The tuned settings of a built-in policy ({}: its defaults)."""
        return dict(self.tuning.get("policies", {}).get(label, {}).get("kwargs", {}))

    def best_fixed(self, scenario: str) -> str | None:
        """The fixed ratio of ``scenario`` with the highest cumulative reward on the training
        seeds (None without a tuning entry)."""
        return self.tuning.get("scenarios", {}).get(scenario, {}).get("best_fixed")

    def oracle(self, scenario: str) -> str | None:
        """The ``schedule-...`` label the oracle search chose for ``scenario`` (None without a
        tuning entry)."""
        return self.tuning.get("scenarios", {}).get(scenario, {}).get("oracle")

    def all_policies(self) -> tuple[str, ...]:
        """``policies`` with every scenario's best fixed ratio and oracle added."""
        extra = [p for s in self.scenarios for p in (self.best_fixed(s), self.oracle(s)) if p]
        return tuple(dict.fromkeys(self.policies + tuple(extra)))

    def policies_of(self, scenario: str) -> tuple[str, ...]:
        """The policies played in ``scenario``: ``policies``, its best fixed ratio, its oracle."""
        extra = [p for p in (self.best_fixed(scenario), self.oracle(scenario)) if p]
        return tuple(dict.fromkeys(self.policies + tuple(extra)))

    def specs(self) -> list[RunSpec]:
        """Every held-out run, seed-major, so that the runs of one seed (which share their
        questions) follow each other in a worker."""
        return [RunSpec(p, s, k, self) for k in range(self.seeds) for s in self.scenarios
                for p in self.policies_of(s)]

    def prepare(self, jobs: int) -> None:
        self.train_warm_starts(jobs, range(self.seeds))

    def train_warm_starts(self, jobs: int, seed_indices: Any) -> None:
        """The tiny learners' warm starts of the seeds ``seed_indices`` (a common base per
        seed, or the specialists' for every seed), trained once, not by every run at the
        same time; nothing for other learners."""
        if isinstance(self.learner, learners.TinyLearners):
            self.learner.warm_starts(jobs, [seeds_of(self.base_seed, k)[1] for k in seed_indices],
                                     progress=self.progress)

    def settings(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name != "tuning"}
        out["out"] = str(self.out)
        out["tuned"] = None if self.tuned is None else str(self.tuned)
        out["learner"] = learners.describe(self.learner)
        out["ray"] = None if self.ray is None else dataclasses.asdict(self.ray)
        return out


@dataclass(frozen=True)
class RunSpec(RunSpecBase):
    """One run: a policy in a scenario under one seed (plain data, for worker processes)."""

    policy: str
    scenario: str
    seed_index: int
    config: BenchConfig
    setting: int | None = None
    """For the tuning: the index of the ``TUNING_GRID`` setting to build the policy with (None:
    the config's tuned settings). Tuning runs go to ``out/tuning``, held-out ones to
    ``out/runs``."""

    @property
    def name(self) -> str:
        setting = "" if self.setting is None else f"_setting{self.setting}"
        return f"{self.scenario}_{file_label(self.policy)}{setting}_seed{self.seed_index}"

    @property
    def folder(self) -> str:
        return "runs" if self.seed_index < TRAINING_SEED_START else "tuning"

    def key(self) -> str:
        c = self.config
        model = None
        if needs_model(self.policy):
            model = hashlib.sha256(Path(c.sb3_model).read_bytes()).hexdigest()[:16]
        # held-out evaluation enters the key only where there is one: the sim track's keys
        # stay those of its committed runs
        held_out = ({"held_out": [c.held_out_every, c.held_out_questions]}
                    if c.held_out_questions else {})
        return run_key({"policy": self.policy, "scenario": self.scenario,
                        "seed": self.seed_index, "base_seed": c.base_seed, "rounds": c.rounds,
                        "n_agents": c.n_agents, "learner": learners.describe(c.learner),
                        "model": model, "policy_source": policy_source_digest(self.policy),
                        "kwargs": self.kwargs, **held_out})

    @property
    def kwargs(self) -> dict[str, Any]:
        """The settings its policy is built with."""
        if self.setting is not None:
            return dict(TUNING_GRID[self.policy][self.setting])
        return self.config.kwargs_of(self.policy)


def tuning_key(config: BenchConfig) -> dict[str, Any]:
    """What a tuning entry must have been made with to apply to ``config``."""
    return {"learner": learners.describe(config.learner), "rounds": config.rounds,
            "n_agents": config.n_agents, "base_seed": config.base_seed,
            "tune_seeds": config.tune_seeds}


def read_tuning(path: str | Path | None, key: Mapping[str, Any]) -> dict[str, Any]:
    """The entry of the tuning file ``path`` made with ``key``'s settings, or {}."""
    if path is None or not Path(path).exists():
        return {}
    entries = json.loads(Path(path).read_text())
    return next((e for e in entries if e.get("key") == dict(key)), {})


def swarm_settings(config: BenchConfig) -> dict[str, Any]:
    """``SwarmConfig`` fields the learner needs in every swarm (the tiny learner's tasks)."""
    if isinstance(config.learner, learners.TinyLearners):
        return config.learner.swarm_settings()
    return {}
