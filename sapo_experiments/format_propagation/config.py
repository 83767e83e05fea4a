"""What the format-propagation experiment runs: its conditions, its settings, one run's spec."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sapo_env.validation import check_int
from sapo_experiments.learners import warm_starts
from sapo_experiments.sweep import RunSpecBase, SweepConfig, canonical_labels, run_key

#: ``model`` may be a factory returning ``(model, tokenizer)`` (tests use a tiny model).
ModelFactory = Callable[[], tuple[Any, Any]]


@dataclass(frozen=True)
class Condition:
    """One condition of the experiment."""

    label: str  #: as printed in the table
    slug: str  #: file-name form, also accepted by ``--conditions``
    num_external: int  #: J of every LM node (external groups per training set)
    demonstrator: bool  #: one scripted demonstrator node in the swarm
    leaves: bool = False  #: the demonstrator stops publishing from ``leave_round`` on
    note: str = ""


CONDITIONS: tuple[Condition, ...] = (
    Condition("isolated", "isolated", 0, False, note="J = 0: each node trains on its own groups"),
    Condition("LM sharing", "sharing", 4, False, note="LM nodes share among themselves"),
    Condition("LM + demonstrator", "demonstrator", 4, True,
              note="one scripted node: right answers, tagged half the time"),
    Condition("demonstrator leaves", "demonstrator-leaves", 4, True, True,
              note="it publishes nothing from the middle round on"),
)
BY_NAME = {c.label: c for c in CONDITIONS} | {c.slug: c for c in CONDITIONS}

EASY_ARITHMETIC = ({"name": "basic_arithmetic", "weight": 1.0,
                    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                               "max_digits": 1, "operators": ["+", "-"],
                               "allow_parentheses": False, "allow_negation": False}},)
"""Two one-digit terms, + and - only: SmolLM2-135M gets some right, so format and arithmetic
can be told apart."""

SHORT_SYSTEM_PROMPT = ("Answer the question. Give only the final answer, inside "
                       "<answer></answer> tags.")
"""A short prompt (reasoning-gym's default is ~80 tokens, read on every generated row) that
still asks for the tag the strict verifier reads."""

@dataclass(frozen=True)
class TinyNodes:
    """Tiny transformer nodes (``agents.tiny``, trained by GRPO on the CPU) in place of the
    SmolLM2 LoRA nodes, and no script: every LM node is warm-started on ``task`` to write the
    bare answer (it knows answers, never the format, so the strict verifier scores it 0), and
    the demonstrator, in the conditions that have one, is a tiny node too, warm-started to put
    ``FormatConfig.demo_tag_probability`` of its answers in tags. It learns from its own groups like
    any node (J = 0), and its accuracy is what its warm start reached (``demo_accuracy`` does
    not apply). Whatever spreads, spreads from one language model's text to the others'."""

    task: str = "spell_backward"
    """The task of every node (``agents.tiny.SPECIALIST_TASKS``): spelling, where a warm
    start reaches ~0.5 in 200 steps, so that most groups of the demonstrator mix tagged right
    answers with the rest."""
    warm_start_steps: int = 200
    """Supervised steps of each warm start (no accuracy target: untagged nodes earn none)."""

    def __post_init__(self) -> None:
        from agents.tiny.config import SPECIALIST_TASKS

        if self.task not in SPECIALIST_TASKS:
            raise ValueError(f"task must be one of {list(SPECIALIST_TASKS)}, got {self.task!r}")
        check_int("warm_start_steps", self.warm_start_steps, 1)

    def warm_start(self, tag_probability: float, max_new_tokens: int) -> Any:
        """The warm start of a node that tags ``tag_probability`` of its answers."""
        from agents.tiny.config import SPECIALIST_TASKS, WarmStartConfig

        return WarmStartConfig(tasks=[SPECIALIST_TASKS[self.task]], target_accuracy=None,
                               max_steps=self.warm_start_steps, tag_probability=tag_probability,
                               max_new_tokens=max_new_tokens)

    def task_specs(self) -> tuple[dict[str, Any], ...]:
        from agents.tiny.config import SPECIALIST_TASKS

        spec = SPECIALIST_TASKS[self.task]
        return ({"name": spec.name, "weight": 1.0, "config": dict(spec.config)},)


FULL: dict[str, Any] = {"rounds": 36, "seeds": 2, "out": "out/format-propagation"}
"""The sweep's settings where a field is left at None: 8 runs of 36 rounds (hours on a CPU; the
committed runs' times: BENCHMARKS.md, "Figures the code cites")."""
QUICK: dict[str, Any] = {"rounds": 4, "seeds": 1, "out": "out/format-propagation-quick"}
"""``quick=True``: a smoke test of the pipeline."""


@dataclass(frozen=True)
class FormatConfig(SweepConfig):
    """Settings of the format-propagation experiment (see the package docstring), and
    ``SweepConfig``'s: ``out``, ``seeds``, ``rounds``, ``jobs``, ``ray``, ... A field left at
    None takes ``FULL``'s value, or with ``quick=True`` (a smoke test) ``QUICK``'s: seeds per
    condition 2, quick 1 (seed k is the same in every condition); rounds per run 36, quick 4;
    output folder ``out/format-propagation``, quick ``...-quick``.

    ``jobs`` runs go at once, each in its own process (None: one per CPU core on a CPU, 1 on a
    GPU); on 2 cores two runs of one thread each do twice the work of one run on both, as a
    generate call of 32 rows keeps one core busy, no more. On Ray (``ray``), ``gpus_per_run=1``
    puts each run on a GPU, TensorBoard runs are written where a task runs, and the progress
    bar counts runs; elsewhere each run shows a bar of its rounds (``progress``)."""

    # --- sweep ---
    conditions: tuple[str, ...] = tuple(c.label for c in CONDITIONS)
    """Conditions to run, by label or slug (see ``CONDITIONS``)."""

    # --- swarm ---
    tiny: TinyNodes | None = None
    """Tiny transformer nodes instead of SmolLM2 LoRA ones, the demonstrator a tiny node too
    (``--learner tiny``; see ``TinyNodes``). None: SmolLM2 and a scripted demonstrator."""
    model: str | ModelFactory = "smollm2-135m"
    """Base model of the LoRA swarm: a hub id, a path, ``"smollm2-135m"`` (offline), or a
    factory returning ``(model, tokenizer)``."""
    lm_nodes: int = 2
    """Language-model nodes (the demonstrator, where there is one, comes on top)."""
    questions: int = 4
    """B: questions every node answers per round (the fixed protocol: the same whatever J)."""
    completions: int = 4
    """L: completions per question."""
    num_external: int | None = None
    """J of the LM nodes in the sharing conditions (None: each condition's own, 4). The
    training set is the B own groups plus J external ones (train budget B + J)."""
    system_prompt: str = SHORT_SYSTEM_PROMPT
    """The system prompt of every node."""

    # --- demonstrator ---
    demo_accuracy: float = 1.0
    """Probability that a demonstrator completion carries the right answer."""
    demo_tag_probability: float = 0.5
    """Probability that it writes the answer inside ``<answer>`` tags. Strictly between 0 and
    1, or its groups teach nothing about the format (see ``agents.scripted.demonstrator``)."""
    leave_round: int | None = None
    """First round in which a leaving demonstrator publishes nothing (None: rounds // 2)."""

    # --- GRPO (LoRA) ---
    learning_rate: float = 3e-4
    """Adam step of each LoRA adapter: 3e-4, between two sourced values and chosen by a pilot
    (docs/provenance.md, "Format propagation: the LoRA learning rate")."""
    max_new_tokens: int | None = None
    """Longest completion in tokens (None: 48 for SmolLM2, whose tagged one-number answer
    needs ~10; 12 for tiny nodes, whose tokens are characters)."""
    threads: int | None = None
    """torch CPU threads of each run (None: the CPU cores over ``jobs``; on Ray, the run's
    ``cpus_per_run``)."""
    device: str = "auto"
    """Device of the LM nodes: auto (cuda, mps, cpu) or a torch device string."""

    # --- output ---
    tensorboard: bool = True
    """Write TensorBoard runs under ``out/tensorboard``."""
    wandb: bool = False
    """Log each run to W&B as well (``sapo_env.runtime.wandb_logger``: files in ``out/wandb``;
    ``WANDB_MODE=offline`` sends nothing)."""

    def presets(self) -> dict[str, Any]:
        return QUICK if self.quick else FULL

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_new_tokens is None:
            object.__setattr__(self, "max_new_tokens", 48 if self.tiny is None else 12)
        if self.tiny is not None and not isinstance(self.tiny, TinyNodes):
            raise ValueError(f"tiny must be a TinyNodes or None, got {self.tiny!r:.80}")
        object.__setattr__(self, "conditions",
                           canonical_labels("conditions", self.conditions, BY_NAME))
        for name in ("lm_nodes", "questions", "completions", "max_new_tokens"):
            check_int(name, getattr(self, name), 1)
        for name in ("num_external", "threads"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        for name in ("demo_accuracy", "demo_tag_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.leave_round is not None and not 1 <= self.leave_round <= self.rounds:
            raise ValueError(f"leave_round must be in [1, rounds={self.rounds}], "
                             f"got {self.leave_round!r}")
        if not isinstance(self.model, str) and not callable(self.model):
            raise ValueError(f"model must be a name or a factory, got {self.model!r}")

    def specs(self) -> list[RunSpec]:
        """Every run, condition by condition, seeds in order."""
        return [RunSpec(c, s, self) for c in self.conditions for s in range(self.seeds)]

    def processes(self) -> int:
        """``jobs``, else one per CPU core, or 1 on a GPU (one device)."""
        if self.jobs is not None:
            return self.jobs
        from agents.lm.models import resolve_device

        return 1 if resolve_device(self.device).type != "cpu" else (os.cpu_count() or 1)

    def prepare(self, jobs: int) -> None:
        if self.tiny is not None:  # trained once, not by every run at the same time
            warm_starts(self.tiny_warm_starts(), jobs)

    def for_runs(self, jobs: int) -> FormatConfig:
        """The config the runs are computed with when they go ``jobs`` at a time: one thread
        per core a run has (its Ray task's ``cpus_per_run``, its process's share) unless
        ``threads`` says otherwise, so that each keeps its cores busy, and no bar of rounds
        from a Ray task. One at a time in this process: this config."""
        if not self.ray and jobs <= 1:
            return self
        cores = self.ray.cpus_per_run if self.ray else (os.cpu_count() or 1) // jobs
        return dataclasses.replace(self, threads=self.threads or max(1, int(cores)),
                                   progress=self.progress and not self.ray)

    def settings(self) -> dict[str, Any]:
        return {f.name: (getattr(self, f.name) if f.name != "model" else self.model_name())
                for f in dataclasses.fields(self)}

    @property
    def first_absent_round(self) -> int:
        """The first round in which a leaving demonstrator publishes nothing."""
        return self.rounds // 2 if self.leave_round is None else self.leave_round

    def external(self, condition: Condition) -> int:
        """J of the LM nodes in ``condition``."""
        if condition.num_external == 0 or self.num_external is None:
            return condition.num_external
        return self.num_external

    def swarm_config(self, condition: Condition) -> Any:
        """The ``SwarmConfig`` of one condition (the demonstrator is the last node)."""
        from sapo_env.config import SwarmConfig

        J = self.external(condition)
        n = self.lm_nodes + condition.demonstrator
        num_external = {f"node_{i}": J if i < self.lm_nodes else 0 for i in range(n)}
        # tiny nodes were warm-started under an empty system prompt, on their own task
        tiny = self.tiny is not None
        return SwarmConfig(
            n_agents=n, max_rounds=self.rounds,
            tasks=self.tiny.task_specs() if tiny else EASY_ARITHMETIC,
            questions_per_round=self.questions, completions_per_question=self.completions,
            train_budget=self.questions + J, num_external=num_external,
            system_prompt="" if tiny else self.system_prompt, answer_format="tag",
        )

    def tiny_warm_starts(self) -> list[Any]:
        """With tiny nodes: the warm start of the untagged nodes, then the demonstrator's if a
        condition has one."""
        if self.tiny is None:
            return []
        configs = [self.tiny.warm_start(0.0, self.max_new_tokens)]
        if any(BY_NAME[c].demonstrator for c in self.conditions):
            configs.append(self.tiny.warm_start(self.demo_tag_probability, self.max_new_tokens))
        return configs

    def model_name(self) -> str:
        """The model as named in resume keys and tables."""
        if self.tiny is not None:
            return f"tiny transformers ({self.tiny.task})"
        if isinstance(self.model, str):
            return self.model
        return f"{self.model.__module__}:{getattr(self.model, '__qualname__', repr(self.model))}"


#: fields that change no run's numbers (left out of the resume key)
_OUTPUT_ONLY = {"out", "conditions", "seeds", "quick", "tensorboard", "wandb", "plots", "resume",
                "progress", "jobs", "threads", "ray", "model"}


@dataclass(frozen=True)
class RunSpec(RunSpecBase):
    """One run: a condition under one seed."""

    condition: str
    seed_index: int
    config: FormatConfig

    @property
    def name(self) -> str:
        return f"{BY_NAME[self.condition].slug}_seed{self.seed_index}"

    def key(self) -> str:
        settings = {f.name: getattr(self.config, f.name)
                    for f in dataclasses.fields(self.config) if f.name not in _OUTPUT_ONLY}
        condition = BY_NAME[self.condition]
        settings["leave_round"] = self.config.first_absent_round if condition.leaves else None
        return run_key({"condition": dataclasses.asdict(condition), "seed": self.seed_index,
                        "model": self.config.model_name(), **settings})
