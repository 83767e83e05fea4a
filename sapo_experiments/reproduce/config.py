"""What a sweep runs: its conditions (the paper's I/J configurations and the controls), the
sweep's settings, and one run's spec."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sapo_env.deprecation import renamed
from sapo_env.validation import check_int, unknown_names
from sapo_experiments import learners
from sapo_experiments.learners import AgentFactory
from sapo_experiments.sweep import (
    RunSpecBase,
    SweepConfig,
    canonical_labels,
    run_key,
    seeds_of,  # (also imported from here by benchmarks/calibrate_sim.py, its old home)
)

Learner = Literal["sim", "tiny", "grpo"]
Protocol = Literal["paper", "fixed"]


@dataclass(frozen=True)
class Condition:
    """One condition of the sweep: an I/J configuration, or a control."""

    label: str  #: as printed in the table, e.g. ``"4/4"``
    slug: str  #: file-name form, e.g. ``"4-4"``
    num_external: int  #: J (I = train budget - J)
    overrides: dict[str, Any] = field(default_factory=dict)  #: ``SwarmConfig`` changes
    paper: float | None = None  #: the paper's cumulative reward (8 nodes, 2000 rounds)
    note: str = ""


CONDITIONS: tuple[Condition, ...] = (
    Condition("8/0", "8-0", 0, {}, 561.79, "no sharing (the paper's baseline)"),
    Condition("6/2", "6-2", 2, {}, 854.43),
    Condition("4/4", "4-4", 4, {}, 1093.31, "the paper's best"),
    Condition("2/6", "2-6", 6, {}, 945.87, "oscillates in the paper"),
    Condition("8/0 oversampled + filtered", "8-0-oversampled-filtered", 0,
               {"questions_per_round": 16, "filter_local": True}, None,
               "control: 16 questions, trains on up to 8 informative own groups"),
    Condition("4/4 self-replay", "4-4-self-replay", 4,
               {"external_source": "self_replay", "pool_window": 2}, None,
               "control: J slots from the node's own groups of the last round"),
    Condition("8/0 filtered", "8-0-filtered", 0, {"filter_local": True}, None,
               "control: 8 questions, own zero-advantage groups dropped (same budget)"),
    Condition("4/4 answering 8", "4-4-answering-8", 4, {"questions_per_round": 8}, None,
               "control: answers 8 questions, trains on 4 own + 4 external"),
    Condition("4/0", "4-0", 0, {"train_budget": 4}, None,
               "control: answers 4 questions, trains on its 4 groups (4/4's generation and "
               "steps, without sharing)"),
    Condition("8/0 16 completions", "8-0-16-completions", 0,
               {"completions_per_question": 16}, None,
               "control: twice the rollouts per question, no sharing"),
    Condition("8/0 rescue", "8-0-rescue", 0, {"shared_questions": True, "rescue": True}, None,
               "every node answers the same 8 questions; an own all-fail group is replaced by "
               "a peer's group on that question with some successes"),
)
"""The paper's four configurations and seven controls: the reviewers' two (oversampled +
filtered, self-replay), filtering at the same budget, 4/4 without the saved generation, 4/0
(4/4's generation and optimizer steps without sharing), twice the rollouts, and rescue of
all-fail groups (``SwarmConfig.rescue``)."""

PAPER_AND_TWO_CONTROLS: tuple[str, ...] = tuple(e.label for e in CONDITIONS[:6])
"""What a sweep runs by default: the paper's four configurations and the reviewers' two
controls (the runs in records/reproduce/ and records/tiny-reproduce/)."""

BY_LABEL = {e.label: e for e in CONDITIONS} | {e.slug: e for e in CONDITIONS}

COMPUTE_MATCHED: dict[str, str] = {"4/4": "4/0"}
"""A sharing configuration -> its compute-matched control: the isolated configuration that
generates as many completions and takes as many optimizer steps a round, without sharing.
Reports compare the two beside the ratio to 8/0 where a sweep runs both."""


FULL: dict[str, Any] = {"rounds": 2000, "seeds": 3, "held_out_every": 100,
                        "held_out_questions": 64, "out": "out/reproduce",
                        "experiments": PAPER_AND_TWO_CONTROLS}
"""The sweep's settings where a field is left at None: the paper's 2000 rounds."""
QUICK: dict[str, Any] = {"rounds": 100, "seeds": 2, "held_out_every": 25,
                         "held_out_questions": 16, "out": "out/reproduce-quick",
                         "experiments": PAPER_AND_TWO_CONTROLS}
"""The same with ``quick=True``: a smoke test of the pipeline (about a minute on a CPU)."""
TINY_FULL: dict[str, Any] = {"rounds": 200, "seeds": 3, "held_out_every": 50,
                             "held_out_questions": 32, "out": "out/reproduce-tiny",
                             "experiments": PAPER_AND_TWO_CONTROLS}
"""The tiny learner's sweep (``learner="tiny"``): 200 rounds, the run in records/tiny-reproduce/
(2000 rounds were not run)."""
TINY_QUICK: dict[str, Any] = {"rounds": 40, "seeds": 4, "held_out_every": 40,
                              "held_out_questions": 16, "out": "out/reproduce-tiny-quick",
                              "experiments": ("8/0", "4/0", "4/4")}
"""The tiny learner's quick run (``make demo``): 4/4 against 8/0 (per round) and against 4/0
(at equal generation and optimizer steps) for 40 rounds, 4 seeds."""


@dataclass(frozen=True)
class ReproduceConfig(SweepConfig):
    """Settings of a reproduction sweep (and ``SweepConfig``'s: ``out``, ``seeds``, ``rounds``,
    ``jobs``, ``ray``, ...). Fields documented "None: ..." take their value from ``presets``:
    ``FULL`` or ``QUICK``, or with the tiny learner ``TINY_FULL`` or ``TINY_QUICK``: seeds per
    configuration 3, sim quick 2, tiny quick 4; rounds 2000, quick 100, tiny 200, tiny quick 40.
    ``quick=True`` is a quick run: with the simulated learner a smoke test (about a minute on a
    CPU) whose table says it is too short to conclude anything; with the tiny learner 8/0, 4/0
    and 4/4 for 40 rounds (``make demo``), whose tables say whether its seeds decide the
    differences. On Ray (``ray``), ``gpus_per_run=1`` puts each GRPO learner on a GPU, and
    checkpoints and TensorBoard runs are written where a task runs."""

    learner: Learner | AgentFactory = "sim"
    """Who plays the nodes: ``"sim"``, simulated learners (CPU; the full sweep takes minutes; a
    surrogate whose sharing pays by construction); ``"tiny"``, tiny transformer specialists trained
    by GRPO (CPU, real learners; ``tiny`` sets them up); ``"grpo"``, language models (GPUs); or an
    agent factory of your own (see ``sapo_experiments.learners``)."""
    tiny: learners.TinyLearners = field(default_factory=learners.TinyLearners)
    """The tiny learner's settings (``learner="tiny"``): specialties, learning rate, ...; its
    tasks and empty system prompt go into every configuration's swarm (``swarm`` overrides)."""
    model: str | None = None
    """Model of the GRPO learner: a hub id, a path or ``"smollm2-135m"``."""
    experiments: tuple[str, ...] | None = None
    """Conditions to run, by label or slug (see ``CONDITIONS``; None: the paper's four
    and the reviewers' two controls, or tiny quick 8/0, 4/0 and 4/4)."""
    protocol: Protocol = "paper"
    """``"paper"``: a node with J external groups answers I = 8 - J questions (the paper's
    Section 5); ``"fixed"``: every node answers 8 questions whatever its J and trains on I of
    them (sapo-env's protocol before 0.2, kept for comparison). The oversampled control draws
    16 under both."""
    n_agents: int = 8
    """Nodes per swarm."""
    held_out_every: int | None = None
    """Rounds between held-out evaluations (None: 100, quick 25; tiny 50, tiny quick 40)."""
    held_out_questions: int | None = None
    """Questions in the held-out set (None: 64, quick 16; tiny 32)."""
    tensorboard: bool = True
    """Write TensorBoard runs (skipped with a warning if tensorboard is not installed)."""
    wandb: bool = False
    """Log each run to W&B as well (``sapo_env.runtime.wandb_logger``: project ``sapo-env`` or
    ``WANDB_PROJECT``, group the ``out`` folder's name, files in ``out/wandb``; where W&B sends
    them is its own setting: ``WANDB_MODE=offline`` sends nothing; skipped with a warning if
    wandb is not installed)."""
    checkpoint_every: int = 100
    """Rounds between a run's checkpoints (``out/runs/<run>.<key>.ckpt``, removed when the run
    finishes), from which an interrupted sweep resumes mid-run with the same results (with
    ``resume``); 0: none. Runs whose agents have no ``state_dict`` (the GRPO learner) are not
    checkpointed."""
    grpo_max_new_tokens: int = 256
    """GRPO learner only: tokens generated per completion."""
    swarm: Mapping[str, Any] = field(default_factory=dict)
    """Extra ``SwarmConfig`` fields for every configuration, e.g. ``{"answer_format":
    "lenient"}`` for small models that never write ``<answer>`` tags, or another task mix.
    I, J, ``filter_local`` and ``external_source`` are the experiments' to set."""

    def presets(self) -> dict[str, Any]:
        if self.learner == "tiny":
            return TINY_QUICK if self.quick else TINY_FULL
        return QUICK if self.quick else FULL

    def __post_init__(self) -> None:
        super().__post_init__()
        if not callable(self.learner) and self.learner not in ("sim", "tiny", "grpo"):
            raise ValueError(f"learner must be 'sim', 'tiny', 'grpo' or an agent factory, "
                             f"got {self.learner!r}")
        if self.protocol not in ("paper", "fixed"):
            raise ValueError(f"protocol must be 'paper' or 'fixed', got {self.protocol!r}")
        if self.learner == "grpo" and not self.model:
            raise ValueError("model must name a model when learner='grpo' (e.g. "
                             "'Qwen/Qwen2.5-0.5B-Instruct' or 'smollm2-135m'), got None")
        object.__setattr__(self, "experiments",
                           canonical_labels("experiments", self.experiments, BY_LABEL))
        for name in ("n_agents", "held_out_every", "held_out_questions", "grpo_max_new_tokens"):
            check_int(name, getattr(self, name), 1)
        check_int("checkpoint_every", self.checkpoint_every, 0)
        if self.n_agents < 2:
            raise ValueError(f"n_agents must be >= 2 (sharing needs two nodes), "
                             f"got {self.n_agents}")
        if self.learner == "tiny":
            self.tiny.check_swarm_size(self.n_agents)
        from sapo_env.config import SwarmConfig

        fields = SwarmConfig.field_names()
        unknown = sorted(set(self.swarm) - set(fields))
        reserved = sorted(set(self.swarm) & {"n_agents", "max_rounds", "filter_local",
                                             "external_source", "train_budget",
                                             "questions_per_round", "num_external"})
        if unknown:
            raise ValueError(f"swarm: unknown SwarmConfig field {unknown_names(unknown, fields)}"
                             "; see help(sapo_env.SwarmConfig)")
        if reserved:
            raise ValueError(f"swarm: {reserved} are set by the sweep itself, not by --swarm")
        try:
            json.dumps(dict(self.swarm))
        except TypeError as error:
            raise ValueError(f"swarm must be JSON-serialisable (it names the runs): {error}"
                             ) from None
        object.__setattr__(self, "swarm", dict(self.swarm))
        for label in self.experiments:  # fail now, not in a worker process minutes later
            try:
                self.swarm_config(BY_LABEL[label])
            except ValueError as error:
                raise ValueError(f"swarm: {error} (in configuration {label!r})") from None

    def specs(self) -> list[RunSpec]:
        """Every run, configuration by configuration, seeds in order."""
        return [RunSpec(e, s, self) for e in self.experiments for s in range(self.seeds)]

    def processes(self) -> int:
        # GPU models stay in one process (on Ray, each run reserves ray.gpus_per_run)
        return 1 if self.learner == "grpo" else super().processes()

    def prepare(self, jobs: int) -> None:
        if self.learner == "tiny":
            # trained once, not by every run at the same time
            self.tiny.warm_starts(jobs, [seeds_of(self.base_seed, k)[1]
                                         for k in range(self.seeds)], progress=self.progress)

    def agent_factory(self) -> AgentFactory:
        """The factory that builds each run's nodes."""
        if self.learner == "sim":
            return learners.simulated_learners
        if self.learner == "grpo":
            return learners.GRPOLearners(self.model, self.grpo_max_new_tokens)
        if self.learner == "tiny":
            return self.tiny
        return self.learner

    def swarm_config(self, condition: Condition) -> Any:
        """The ``SwarmConfig`` of one condition of the sweep."""
        from sapo_env.config import SwarmConfig

        protocol = {} if self.protocol == "paper" else {"questions_per_round": 8}
        learner = self.tiny.swarm_settings() if self.learner == "tiny" else {}
        return SwarmConfig(n_agents=self.n_agents, max_rounds=self.rounds,
                           num_external=condition.num_external,
                           **{**learner, **self.swarm, **protocol, **condition.overrides})


@dataclass(frozen=True)
class RunSpec(RunSpecBase):
    """One run of the sweep: an experiment under one seed (picklable, for worker processes)."""

    experiment: str
    seed_index: int
    config: ReproduceConfig

    @property
    def name(self) -> str:
        return f"{BY_LABEL[self.experiment].slug}_seed{self.seed_index}"

    @property
    def checkpoint_path(self) -> Path:
        """Where the unfinished run's checkpoint is kept (its key in the name: a run whose
        settings changed does not resume from it)."""
        return Path(self.config.out) / "runs" / f"{self.name}.{self.key()}.ckpt"

    def key(self) -> str:
        c = self.config
        return run_key({
            "experiment": dataclasses.asdict(BY_LABEL[self.experiment]),
            "seed": self.seed_index, "protocol": c.protocol,
            "base_seed": c.base_seed, "rounds": c.rounds, "n_agents": c.n_agents,
            "learner": learners.describe(c.agent_factory()),
            "held_out": [c.held_out_every, c.held_out_questions], "swarm": c.swarm,
        })


__getattr__ = renamed(__name__, {"Experiment": "Condition", "EXPERIMENTS": "CONDITIONS"})
