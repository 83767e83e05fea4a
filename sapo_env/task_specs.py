"""The question mix: ``TaskSpec`` (one reasoning-gym task, its weight, difficulty and first
round) and ``PAPER_TASKS``, the paper's nine.

Example::

    from sapo_env import SwarmConfig, TaskSpec
    config = SwarmConfig(tasks=["basic_arithmetic", TaskSpec("spell_backward", first_round=100)])
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import reasoning_gym
from reasoning_gym.factory import DATASETS

from sapo_env.validation import check_int


@dataclass(frozen=True)
class TaskSpec:
    """One reasoning-gym task in the question mix."""

    name: str
    """A task registered in reasoning-gym (``reasoning_gym.factory.DATASETS``)."""
    weight: float = 1.0
    """Relative probability of drawing this task for a question."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of the task's reasoning-gym config (difficulty); not seed or size."""
    first_round: int = 0
    """The round from which the task is in the mix: a curriculum that adds tasks mid-run.
    Before it the task's weight is 0 and the other tasks' weights are renormalised; from it on
    it is drawn by ``weight`` like the others. Held-out evaluation draws from the whole mix
    from round 0."""

    def __post_init__(self) -> None:
        if self.name not in DATASETS:
            raise ValueError(
                f"tasks: unknown reasoning-gym task {self.name!r}; "
                f"expected one of reasoning_gym.factory.DATASETS ({len(DATASETS)} tasks)"
            )
        weight = self.weight
        if (isinstance(weight, bool) or not isinstance(weight, (int, float))
                or not math.isfinite(weight) or weight <= 0):
            raise ValueError(f"tasks: weight of {self.name!r} must be a number > 0, got {weight!r}")
        object.__setattr__(self, "weight", float(weight))  # int weights would be an int array
        check_int(f"tasks: first_round of {self.name!r}", self.first_round, 0)
        bad = {"seed", "size"} & set(self.config)
        if bad:
            raise ValueError(
                f"tasks: config of {self.name!r} must not set {sorted(bad)}; "
                "the env chooses seeds and sizes so questions never repeat"
            )
        try:
            json.dumps(dict(self.config))
        except TypeError as error:
            raise ValueError(
                f"tasks: config of {self.name!r} must be JSON-serialisable (it travels in "
                f"every question's ref): {error}"
            ) from None
        try:  # fail now, not at the first round, on a config reasoning-gym rejects
            reasoning_gym.create_dataset(self.name, seed=0, size=1, **self.config)
        except (TypeError, ValueError, AssertionError) as error:
            raise ValueError(f"tasks: invalid config for {self.name!r}: {error}") from None
        object.__setattr__(self, "config", dict(self.config))

    @classmethod
    def coerce(cls, spec: TaskSpecLike) -> TaskSpec:
        """Accept a task name, a ``(name, weight, config)`` tuple, a mapping or a TaskSpec."""
        if isinstance(spec, TaskSpec):
            return spec
        if isinstance(spec, str):
            return cls(spec)
        if isinstance(spec, Mapping):
            return cls(**spec)
        if isinstance(spec, Sequence) and 1 <= len(spec) <= 4:
            return cls(*spec)
        raise ValueError(f"tasks: expected a task name, (name, weight, config[, first_round]) "
                         f"or TaskSpec, got {spec!r}")


TaskSpecLike = Union[TaskSpec, str, tuple, Mapping[str, Any]]  # noqa: UP007 (runtime alias)

PAPER_TASKS: tuple[TaskSpec, ...] = (
    TaskSpec("arc_1d", 1.0, {"min_size": 10, "max_size": 30}),
    TaskSpec(
        "basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 6, "min_digits": 1, "max_digits": 4}
    ),
    TaskSpec("base_conversion", 1.0, {"min_base": 2, "max_base": 16, "min_value": 0,
                                      "max_value": 1000}),
    TaskSpec("bf", 1.0, {"difficulty": 1}),
    TaskSpec("binary_matrix", 1.0, {"min_n": 3, "max_n": 10, "p_zero": 0.25}),
    TaskSpec("calendar_arithmetic", 1.0, {"year": 2023}),
    TaskSpec(
        "decimal_arithmetic",
        1.0,
        {"min_terms": 2, "max_terms": 6, "min_num_decimal_places": 1, "max_num_decimal_places": 3},
    ),
    TaskSpec("fraction_simplification", 1.0, {"min_value": 1, "max_value": 100}),
    TaskSpec("propositional_logic", 1.0, {"min_vars": 2, "max_vars": 4}),
)
"""The nine tasks of the paper, with the reference implementation's difficulty, equal weights."""

# reasoning-gym derives item i of seed s from seed s + i, so each question stream gets its own
# block of 2**24 seeds; this bounds how many questions one stream may draw.
MAX_QUESTIONS_PER_STREAM = 2**24


def coerce_tasks(value: Any, where: str, max_rounds: int) -> tuple[TaskSpec, ...]:
    if isinstance(value, (str, TaskSpec)) or not isinstance(value, Sequence):
        raise ValueError(f"{where}: expected a sequence of task specs, got {value!r}")
    specs = tuple(TaskSpec.coerce(spec) for spec in value)
    if not specs:
        raise ValueError(f"{where}: expected at least one task, got an empty sequence")
    if min(s.first_round for s in specs) > 0:
        raise ValueError(f"{where}: at least one task must have first_round 0 (round 0 needs a "
                         f"task), got first rounds {[s.first_round for s in specs]}")
    late = [s.name for s in specs if s.first_round >= max_rounds]
    if late:
        raise ValueError(f"{where}: first_round of {late} is not before max_rounds="
                         f"{max_rounds}: the task would never be drawn")
    return specs
