"""The tiny models' configurations: ``TinyModelConfig`` (a model's shape) and
``WarmStartConfig`` (what a warm start trains and when it stops), with no torch import, so
that command lines can show their defaults cheaply.

Every field is documented beside it and checked on construction; a bad value raises
``ValueError`` naming the field and the value. The models and the training are in
:mod:`agents.tiny.model` and :mod:`agents.tiny.warm_start`, which re-export these.

Example::

    >>> from agents.tiny.config import SPECIALIST_TASKS, WarmStartConfig
    >>> specialist = WarmStartConfig(tasks=[SPECIALIST_TASKS["spell_backward"]],
    ...                              eval_tasks=list(SPECIALIST_TASKS.values()))
    >>> specialist.targets()
    {'spell_backward': 0.2}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sapo_env.config import MAX_QUESTIONS_PER_STREAM, TaskSpec
from sapo_env.validation import check_int


@dataclass(frozen=True)
class TinyModelConfig:
    """The shape of a tiny Llama; ``WarmStartConfig``'s defaults were chosen for this one."""

    hidden_size: int = 128
    """Width of the residual stream (the token embedding size)."""
    num_layers: int = 4
    """Decoder layers."""
    num_heads: int = 4
    """Attention (query) heads; must divide ``hidden_size`` (head size 32 by default)."""
    num_kv_heads: int = 4
    """Key/value heads (grouped-query attention when fewer than ``num_heads``); must divide
    ``num_heads``. Equal by default: at this size the saved parameters buy nothing."""
    intermediate_size: int = 384
    """Width of the SwiGLU MLP (three ``hidden_size x intermediate_size`` matrices a layer)."""
    max_position_embeddings: int = 2048
    """Longest prompt + completion the model is meant for, in tokens (= characters). Rotary
    embeddings have no weights, so this costs nothing; the longest question of the paper's
    nine tasks is 872 characters (arc_1d), plus ~40 for the chat frame and the completion."""
    rope_theta: float = 10000.0
    """Base of the rotary embedding frequencies (Llama's default)."""
    rms_norm_eps: float = 1e-5
    """Epsilon of the RMSNorm layers."""
    initializer_range: float = 0.02
    """Standard deviation of the normal initial weights (transformers' Llama default)."""
    tie_word_embeddings: bool = True
    """Share the input embedding with the output head: with a character vocabulary both are
    small, and tying is what most small language models do."""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "intermediate_size", "max_position_embeddings"):
            check_int(name, getattr(self, name), 1)
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads "
                             f"({self.num_heads})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be divisible by num_kv_heads "
                             f"({self.num_kv_heads})")
        if (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"hidden_size / num_heads must be even (rotary embeddings rotate "
                             f"pairs), got {self.hidden_size} / {self.num_heads}")
        for name in ("rope_theta", "rms_norm_eps", "initializer_range"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(f"tie_word_embeddings must be a bool, got "
                             f"{self.tie_word_embeddings!r}")

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (JSON, cache keys)."""
        return dataclasses.asdict(self)


SPECIALIST_TASKS: dict[str, TaskSpec] = {
    "basic_arithmetic": TaskSpec("basic_arithmetic", 1.0, {
        "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}),
    "spell_backward": TaskSpec("spell_backward", 1.0, {"min_word_len": 3, "max_word_len": 5}),
}
"""Tasks a tiny model learns in minutes on one CPU core, at a difficulty it can reach:
two one-digit terms (reasoning-gym's operators, parentheses and negation), words of 3-5
letters (answers fit in 12 new tokens)."""


def _coerce_specs(value: Any, name: str, unique: bool = True) -> tuple[TaskSpec, ...]:
    if isinstance(value, (str, TaskSpec)) or not isinstance(value, Sequence) or not value:
        raise ValueError(f"{name} must be a non-empty sequence of task specs, got {value!r:.80}")
    specs = tuple(TaskSpec.coerce(spec) for spec in value)
    names = [s.name for s in specs]
    if unique and len(set(names)) != len(names):
        raise ValueError(f"{name} must name each task once, got {names} (eval_labels lets "
                         f"eval_tasks hold one task at several settings)")
    return specs


@dataclass(frozen=True)
class WarmStartConfig:
    """What a warm start trains and when it stops; the whole config keys the cache."""

    # --- tasks ---
    tasks: tuple[TaskSpec, ...] = (SPECIALIST_TASKS["basic_arithmetic"],)
    """Training tasks: names, ``(name, weight, config)`` tuples or ``TaskSpec``; each training
    question's task is drawn by weight. One task: a specialist."""
    eval_tasks: tuple[TaskSpec, ...] | None = None
    """Tasks whose accuracy is measured (None: ``tasks``); add tasks the node is not trained
    on to see what a specialist knows of them."""
    eval_labels: tuple[str, ...] | None = None
    """The names the evaluated tasks' accuracies (and targets) go by, one per task of
    ``eval_tasks`` (None: the task names). Distinct labels let one task be evaluated at
    several settings, e.g. the part of its question space a node is trained on and the whole:
    ``eval_tasks=[plus_only, plus_and_minus], eval_labels=("+", "+ -")``. A single-number
    ``target_accuracy`` then applies to the labels whose task equals a training task. Left
    out of the cache key while None, so that warm starts cached before it keep their keys."""
    target_accuracy: float | Mapping[str, float] | None = 0.2
    """Stop once every targeted task reaches its target at an evaluation: one number for every
    training task, a mapping from eval-task name to target, or None (train ``max_steps``).
    0.2 leaves GRPO room to learn and a signal to learn from (a group of 8 completions at
    accuracy 0.2 has both right and wrong answers 83% of the time); what the default
    specialists reach by ``max_steps``: docs/provenance.md, "Tiny learner"."""
    tag_probability: float = 1.0
    """Probability that a training target wraps its answer in ``<answer>`` tags; the others
    are the bare answer, which the strict verifier scores 0. 1: a node that earns reward; 0:
    one that knows answers but never the format (set ``target_accuracy`` None, since it
    reaches no reward); in between, a node whose groups mix both, so that the tag alone
    separates reward 1 from 0 (``sapo-env format-propagation --learner tiny``)."""
    # --- optimisation ---
    max_steps: int = 600
    """Most optimizer steps (each on ``batch_size`` questions); 600: enough for both default
    specialists to reach ``target_accuracy`` (docs/provenance.md, "Tiny learner")."""
    batch_size: int = 32
    """Questions per step (why 32: docs/provenance.md, "Tiny learner")."""
    learning_rate: float = 1e-3
    """Adam step size (constant); 1e-3: a larger one stalls basic_arithmetic
    (docs/provenance.md, "Tiny learner")."""
    max_grad_norm: float | None = 1.0
    """Gradients are clipped to this global norm; None disables clipping."""
    # --- evaluation ---
    eval_every: int = 50
    """Steps between evaluations; the last step is always evaluated."""
    eval_size: int = 128
    """Held-out questions per evaluation task (one sampled completion each): a standard error
    of 0.035 at accuracy 0.2, for a small share of a warm start's time (docs/provenance.md,
    "Tiny learner")."""
    max_new_tokens: int = 12
    """Most tokens sampled per evaluation completion: set it to the node's
    ``GRPOConfig.max_new_tokens``."""
    # --- model and seed ---
    model: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Shape of the model trained."""
    seed: int = 0
    """Root of every random choice: initial weights, training questions, evaluation samples."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tasks", _coerce_specs(self.tasks, "tasks"))
        if self.eval_tasks is not None:
            object.__setattr__(self, "eval_tasks", _coerce_specs(
                self.eval_tasks, "eval_tasks", unique=self.eval_labels is None))
        if self.eval_labels is not None:
            object.__setattr__(self, "eval_labels", self._checked_labels())
        for name, minimum in (("max_steps", 1), ("batch_size", 1), ("eval_every", 1),
                              ("eval_size", 1), ("max_new_tokens", 1), ("seed", 0)):
            check_int(name, getattr(self, name), minimum)
        if self.max_steps * self.batch_size > MAX_QUESTIONS_PER_STREAM:
            raise ValueError(f"max_steps * batch_size must be <= {MAX_QUESTIONS_PER_STREAM} "
                             f"(one seed block per task), got {self.max_steps} * "
                             f"{self.batch_size}")
        if self.eval_size > MAX_QUESTIONS_PER_STREAM:
            raise ValueError(f"eval_size must be <= {MAX_QUESTIONS_PER_STREAM}, "
                             f"got {self.eval_size}")
        if not _positive(self.learning_rate):
            raise ValueError(f"learning_rate must be a number > 0, got {self.learning_rate!r}")
        if self.max_grad_norm is not None and not _positive(self.max_grad_norm):
            raise ValueError(f"max_grad_norm must be a number > 0 or None, "
                             f"got {self.max_grad_norm!r}")
        if not isinstance(self.model, TinyModelConfig):
            raise ValueError(f"model must be a TinyModelConfig, got {self.model!r:.80}")
        if isinstance(self.tag_probability, bool) or not isinstance(
                self.tag_probability, (int, float)) or not 0 <= self.tag_probability <= 1:
            raise ValueError(f"tag_probability must be a number in [0, 1], "
                             f"got {self.tag_probability!r}")
        if self.tag_probability == 0 and self.target_accuracy is not None:
            raise ValueError("tag_probability 0 earns no reward under the strict verifier, so "
                             "no target_accuracy is ever reached: set target_accuracy=None "
                             "and train max_steps")
        targets = self.targets()  # validates target_accuracy
        if isinstance(self.target_accuracy, Mapping):
            object.__setattr__(self, "target_accuracy", dict(targets))

    def _checked_labels(self) -> tuple[str, ...]:
        """``eval_labels`` as a tuple, or ``ValueError`` unless it gives one distinct,
        non-empty string per evaluated task."""
        labels, evaluated = self.eval_labels, self.evaluated
        if (isinstance(labels, str) or not isinstance(labels, Sequence)
                or any(not isinstance(x, str) or not x for x in labels)
                or len(set(labels)) != len(labels) or len(labels) != len(evaluated)):
            raise ValueError(f"eval_labels must be {len(evaluated)} distinct non-empty strings, "
                             f"one per evaluated task {[s.name for s in evaluated]}, "
                             f"got {labels!r:.120}")
        return tuple(labels)

    @property
    def evaluated(self) -> tuple[TaskSpec, ...]:
        """The tasks evaluated: ``eval_tasks``, or the training tasks."""
        return self.eval_tasks if self.eval_tasks is not None else self.tasks

    def labelled(self) -> dict[str, TaskSpec]:
        """The evaluated tasks by the name their accuracy goes by (``eval_labels`` or the
        task names), in order."""
        specs = self.evaluated
        labels = self.eval_labels if self.eval_labels is not None else [s.name for s in specs]
        return dict(zip(labels, specs))

    def targets(self) -> dict[str, float]:
        """Target accuracy per evaluated task (by label) that has one."""
        target, names = self.target_accuracy, list(self.labelled())
        if target is None:
            return {}
        if isinstance(target, Mapping):
            unknown = sorted(set(target) - set(names))
            if unknown:
                raise ValueError(f"target_accuracy names tasks that are not evaluated: "
                                 f"{unknown}; evaluated: {names}")
            chosen = dict(target)
        elif self.eval_labels is not None:
            chosen = {label: target for label, spec in self.labelled().items()
                      if spec in self.tasks}
            missing = [s.name for s in self.tasks if s not in self.evaluated]
            if missing:
                raise ValueError(f"target_accuracy applies to the training tasks, but "
                                 f"eval_tasks holds none equal to the training task(s) "
                                 f"{missing}")
        else:
            chosen = {s.name: target for s in self.tasks}
            missing = sorted(set(chosen) - set(names))
            if missing:
                raise ValueError(f"target_accuracy applies to the training tasks, but eval_tasks "
                                 f"leaves out {missing}")
        for name, value in chosen.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 < value <= 1:
                raise ValueError(f"target_accuracy of {name!r} must be a number in (0, 1], "
                                 f"got {value!r}")
        return {name: float(value) for name, value in chosen.items()}

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON data (what the cache key hashes)."""
        def specs(value: tuple[TaskSpec, ...] | None) -> list | None:
            return None if value is None else [[s.name, s.weight, dict(s.config)] for s in value]

        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(tasks=specs(self.tasks), eval_tasks=specs(self.eval_tasks),
                    model=self.model.to_dict())
        if self.eval_labels is None:  # the keys of warm starts cached before it existed
            del data["eval_labels"]
        else:
            data["eval_labels"] = list(self.eval_labels)
        return data

    def __repr__(self) -> str:
        # eval_labels is left out while None, as in to_dict: the descriptions of earlier
        # sweeps' learners (their resume keys) stay what they were
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                 if f.repr and not (f.name == "eval_labels" and self.eval_labels is None)]
        return f"{type(self).__qualname__}({', '.join(shown)})"


def _positive(value: Any) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and math.isfinite(value) and value > 0)
