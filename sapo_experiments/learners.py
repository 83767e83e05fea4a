"""Who plays the nodes of an experiment: agent factories (``reproduce``, ``bench-ratio`` and the
meta environments build their nodes with one).

An agent factory builds the nodes of one run::

    factory(names, num_external, seed) -> agents

one agent per node name, each asking for ``num_external`` (J) external groups every round, all
seeded from ``seed`` (a ``numpy.random.SeedSequence``, the same for seed k in every
configuration). Pass one as ``ReproduceConfig(learner=factory)`` to run your own agent through
the sweep, or ``--learner package.module:factory`` on the command line. Sweeps run in worker
processes or Ray tasks, so a factory must be picklable: a module-level function, or an
instance of a module-level class (on a Ray cluster, of a module every machine can import).
``describe(factory)`` names it in each run's resume key: change the factory (or its ``repr``)
and the runs are done again.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sapo_experiments.tiny_learners import (  # noqa: F401 - the tiny factory, exported here
    CORRECTIONS,
    FTIS_STATISTICS,
    GATES,
    OPERATORS,
    TinyLearners,
    base_seed,
    warm_starts,
)

AgentFactory = Callable[[Sequence[str], int, np.random.SeedSequence], Sequence[Any]]


def simulated_learners(names: Sequence[str], num_external: int,
                       seed: np.random.SeedSequence) -> list:
    """``agents.sim.simulated.SimulatedLearner`` nodes with their default (calibrated) settings."""
    from agents.sim.simulated import simulated_swarm

    return list(simulated_swarm(names, seed=seed, num_external=num_external).values())


@dataclass(frozen=True)
class SimulatedLearners:
    """``agents.sim.simulated.SimulatedLearner`` nodes with some fields of their config changed,
    the same for every node: ``SimulatedLearners({"start_tag_prob": 0.3})``."""

    overrides: Mapping[str, Any] = field(default_factory=dict)
    """``SimulatedLearnerConfig`` fields and their values (checked on construction)."""

    def __post_init__(self) -> None:
        from agents.sim.simulated import SimulatedLearnerConfig

        try:
            SimulatedLearnerConfig(**self.overrides)
        except TypeError as error:
            raise ValueError(f"SimulatedLearners overrides: {error}") from None
        object.__setattr__(self, "overrides", dict(self.overrides))

    def __call__(self, names: Sequence[str], num_external: int,
                 seed: np.random.SeedSequence) -> list:
        from agents.sim.simulated import simulated_swarm

        overrides = {**self.overrides, "num_external": num_external}
        return list(simulated_swarm(names, seed=seed, **overrides).values())

    def __hash__(self) -> int:  # a frozen dataclass holding a dict: hash its items
        return hash(tuple(sorted(self.overrides.items())))


@dataclass(frozen=True)
class GRPOLearners:
    """``agents.GRPOAgent`` language-model nodes, one model copy each."""

    model: str  #: a hub id, a path or "smollm2-135m"
    max_new_tokens: int = 256  #: tokens generated per completion

    def __call__(self, names: Sequence[str], num_external: int,
                 seed: np.random.SeedSequence) -> list:
        from agents import GRPOAgent, GRPOConfig

        config = GRPOConfig(max_new_tokens=self.max_new_tokens)
        return [GRPOAgent(self.model, config=config, num_external=num_external, seed=s)
                for s in seed.spawn(len(names))]


def describe(factory: AgentFactory) -> str:
    """A stable description of a factory and the defaults it builds with (for resume keys)."""
    if factory is simulated_learners:
        from agents.sim.simulated import SimulatedLearnerConfig

        return f"simulated_learners {SimulatedLearnerConfig()!r}"
    if isinstance(factory, SimulatedLearners):
        from agents.sim.simulated import SimulatedLearnerConfig

        return f"{factory!r} {SimulatedLearnerConfig(**factory.overrides)!r}"
    if isinstance(factory, GRPOLearners):
        from agents import GRPOConfig

        return f"{factory!r} {GRPOConfig()!r}"
    if isinstance(factory, TinyLearners):
        from agents import GRPOConfig

        return f"{factory!r} {factory.warm_start_configs()!r} {GRPOConfig()!r}"
    name = getattr(factory, "__qualname__", None)
    if name is not None:  # a function: its import path
        return f"{factory.__module__}:{name}"
    return repr(factory)


def load(path: str) -> AgentFactory:
    """The factory at ``"package.module:name"``."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"learner must be 'sim', 'tiny', 'grpo' or 'package.module:factory', "
                         f"got {path!r}")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"learner: cannot import {path!r}: {error}") from None
    if not callable(factory):
        raise ValueError(f"learner: {path!r} is not callable")
    return factory
