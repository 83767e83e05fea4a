"""The question mix: ``TaskSpec`` (one reasoning-gym task, its weight, difficulty and first
round) and ``PAPER_TASKS``, the paper's nine.

Example::

    from sapo_env import SwarmConfig, TaskSpec
    config = SwarmConfig(tasks=["basic_arithmetic", TaskSpec("spell_backward", first_round=100)])
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from sapo_env.scoring.rg_fixes import load_reasoning_gym
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
        # What reasoning-gym says of the name and config is checked when a SwarmConfig takes
        # the spec (``coerce_tasks``): that loads reasoning-gym, which ``import sapo_env``
        # does not, and PAPER_TASKS is built at import.
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
        object.__setattr__(self, "config", dict(self.config))

    def check_with_reasoning_gym(self) -> None:
        """``ValueError`` unless reasoning-gym registers the task and accepts its config (loads
        reasoning-gym; each distinct spec is checked once)."""
        _check_with_reasoning_gym(self.name, json.dumps(self.config, sort_keys=True))

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


@functools.lru_cache(maxsize=1024)
def _check_with_reasoning_gym(name: str, config_json: str) -> None:
    reasoning_gym = load_reasoning_gym()
    registered = reasoning_gym.factory.DATASETS
    if name not in registered:
        raise ValueError(f"tasks: unknown reasoning-gym task {name!r}; expected one of "
                         f"reasoning_gym.factory.DATASETS ({len(registered)} tasks)")
    try:  # fail now, not at the first round, on a config reasoning-gym rejects
        reasoning_gym.create_dataset(name, seed=0, size=1, **json.loads(config_json))
    except (TypeError, ValueError, AssertionError) as error:
        raise ValueError(f"tasks: invalid config for {name!r}: {error}") from None


def coerce_tasks(value: Any, where: str, max_rounds: int) -> tuple[TaskSpec, ...]:
    """``value`` as TaskSpecs, each checked with reasoning-gym (``ValueError`` naming
    ``where``)."""
    if isinstance(value, (str, TaskSpec)) or not isinstance(value, Sequence):
        raise ValueError(f"{where}: expected a sequence of task specs, got {value!r}")
    specs = tuple(TaskSpec.coerce(spec) for spec in value)
    for spec in specs:
        spec.check_with_reasoning_gym()
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
