"""What a run records and hands out: ``RoundRecord`` (one round, for callbacks), ``History``
(the whole run), ``Callback`` (what watches a run) and ``RatioPolicy`` (what chooses a node's
J in place of its agent). The synchronous loop (``sapo_env.runtime.runner``) and the
asynchronous one (``sapo_env.runtime.asynchronous``) both build on this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from sapo_env.churn import is_leave, is_offline, is_pending
from sapo_env.config import SwarmConfig
from sapo_env.runtime.agent_calls import Agent
from sapo_env.types import Action, Observation


@runtime_checkable
class RatioPolicy(Protocol):
    """Chooses a node's J from what the node has seen, and learns from the outcome."""

    def choose(self, observation: Observation) -> int:
        """J for the node's next round, in [0, ``observation["train_budget"]``]."""
        ...

    def update(self, reward: float, info: Mapping[str, Any]) -> None:
        """The outcome of the round just played: the node's reward and its infos entry
        (``info["num_external"]`` is the J that was in force in that round)."""
        ...


@dataclass
class RoundRecord:
    """What happened in one round, handed to callbacks. ``rewards`` and ``infos`` hold the
    nodes that played it: not those offline, leaving or joining (``sapo_env.churn``)."""

    round: int
    observations: dict[str, Observation]  #: after the step (holding the assembled batches)
    actions: dict[str, Action | None]  #: None: the node sat the round out
    rewards: dict[str, float]
    infos: dict[str, dict[str, Any]]
    learn_metrics: dict[str, dict[str, float]]
    refused: dict[str, str] = field(default_factory=dict)
    """Remote nodes whose action the env would have refused, with the error: they sat the
    round out, or were removed after ``remove_after_refusals`` such rounds in a row
    (``sapo_env.runtime.agent_calls.Refusals``)."""
    act_cpu_seconds: dict[str, float] = field(default_factory=dict)
    """CPU seconds of this process each node's ``act`` took this round, for the nodes acted
    for in this process (``AgentCalls.act``'s ``cpu``; a timing, so never in ``infos``)."""
    learn_cpu_seconds: dict[str, float] = field(default_factory=dict)
    """The same for ``learn`` (``AgentCalls.learn``'s ``cpu``)."""


class Callback:
    """Override any of these to watch a run (logging, evaluation, checkpoints)."""

    def on_run_start(self, env: Any, agents: Mapping[str, Agent]) -> None:
        """Called once after reset, before the first round."""

    def on_round_end(self, record: RoundRecord) -> None:
        """Called after every round, once every node has learned."""

    def on_run_end(self, history: History) -> None:
        """Called once when the run ends."""


@dataclass
class History:
    """Everything ``run`` recorded, one row per round."""

    agents: tuple[str, ...]
    config: SwarmConfig
    rewards: np.ndarray  #: (rounds, n) per-node reward; NaN where a node did not play
    #: (rounds, n) J in force each round (the external groups its training set asked for,
    #: chosen by the node's action of the round before); -1 where it did not act
    num_external: np.ndarray
    #: (rounds, n) completions each node generated (its generation cost); 0 where it did not act
    generated: np.ndarray
    infos: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    learn_metrics: list[dict[str, dict[str, float]]] = field(default_factory=list)
    #: (rounds, n) CPU seconds of the running process that each node's ``act`` took
    #: (``time.process_time``, every thread of the process); NaN where the node was not asked
    #: to act or acted elsewhere (a remote node: its CPU is not this process's). Nodes that
    #: act in one call (a joint actor, e.g. a batched swarm) cannot be told apart: each holds
    #: the call's time divided evenly over the nodes it acted for. A timing: it differs from
    #: run to run where every other array is reproducible. None: all NaN.
    act_cpu_seconds: np.ndarray | None = None
    #: (rounds, n) the same for ``learn``: NaN where the node did not learn (it did not play
    #: the round) or learned elsewhere; a joint learner's call divided evenly over its nodes.
    learn_cpu_seconds: np.ndarray | None = None

    def __post_init__(self) -> None:
        for key in ("act_cpu_seconds", "learn_cpu_seconds"):
            if getattr(self, key) is None:
                setattr(self, key, np.full(self.rewards.shape, np.nan))

    @property
    def rounds(self) -> int:
        return len(self.rewards)

    @property
    def swarm_mean(self) -> np.ndarray:
        """(rounds,) mean reward over the nodes that played; NaN in a round no node played."""
        return nanmean(self.rewards, axis=1)

    @property
    def cumulative_reward(self) -> float:
        """Sum over rounds of the swarm-mean reward (most likely the paper's measure); a round
        no node played adds nothing."""
        return float(np.nansum(self.swarm_mean))

    @property
    def cumulative_reward_total(self) -> float:
        """Sum over rounds and nodes of the per-node reward."""
        return float(np.nansum(self.rewards))

    @property
    def generated_per_node_round(self) -> float:
        """Completions a node generated per round, on average: the swarm's generation cost."""
        return float(self.generated.mean()) if self.generated.size else 0.0

    def node_rewards(self, agent: str) -> np.ndarray:
        return self.rewards[:, self.agents.index(agent)]


def nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    """Mean along ``axis`` ignoring NaN; NaN, without numpy's "Mean of empty slice" warning,
    where there is no value (a round no node played, a node that never played)."""
    present = ~np.isnan(values)
    counts = present.sum(axis=axis)
    sums = np.where(present, values, 0.0).sum(axis=axis)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def with_num_external(actions: Mapping[str, Any], num_external: Mapping[str, int] | None
                      ) -> dict[str, Any]:
    """A copy of ``actions`` in which each node of ``num_external`` that plays has that J: the
    one place where a ratio policy's J replaces the one its node's agent chose (synchronous and
    asynchronous rounds both call it; the agent's own choice is ignored, and the round's
    record holds the J the env saw). Only a mapping gets one: anything else a remote node sent
    is the runner's screen's to refuse, not an error here."""
    playing = {a: j for a, j in (num_external or {}).items() if isinstance(actions[a], Mapping)
               and not is_leave(actions[a]) and not is_pending(actions[a])
               and not is_offline(actions[a])}
    return {a: {**action, "num_external": playing[a]} if a in playing else action
            for a, action in actions.items()}


def online(rewards: Mapping[str, float], infos: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The nodes that played the round: only they learn and are recorded
    (``sapo_env.churn``)."""
    return [a for a in rewards if infos[a].get("status", "online") == "online"]
