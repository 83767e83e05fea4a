"""Running a swarm: ``run(env, agents)`` drives the act → step → learn loop and records it.

An agent is any object with ``act(observation) -> action`` and ``learn(batch) -> dict | None``
(the metrics of its update); nodes that act together (a LoRA swarm on one base) or run
elsewhere (Ray actors) are described in ``sapo_env.agent_calls``, which calls them.

A ``RatioPolicy`` chooses a node's J (the external groups of its next round) in place of the
agent: ``run(env, agents, ratio_policies={"node_0": policy})``. Any agent combines with any
policy, since the runner, not the agent, applies it: each round it calls
``policy.choose(observation)`` and puts the J in the node's action, steps the env, lets the
agents learn, then tells the policy the outcome with ``policy.update(reward, info)``, where
``info["num_external"]`` is the J that was in force in that round (chosen a round earlier, or
``SwarmConfig.num_external`` in round 0). Policies live in ``agents.ratio``. In a loop of your
own, do the same::

    actions[node]["num_external"] = policy.choose(observations[node])
    observations, rewards, terminations, truncations, infos = env.step(actions)
    policy.update(rewards[node], infos[node])

Cumulative reward, two definitions (``History``):
    ``cumulative_reward``: sum over rounds of the swarm's mean reward. The paper's 1093.31 for
        4/4 over 2000 rounds is most likely this one: a per-node reward is a mean score in
        [0, 1], and 1093.31 / 2000 = 0.55 is a plausible mean accuracy, whereas a sum over 8
        nodes as well would mean a per-node accuracy of 0.07.
    ``cumulative_reward_total``: sum over rounds and nodes.

Example::

    >>> import sapo_env
    >>> from agents import DemonstratorAgent, RandomAgent
    >>> env = sapo_env.parallel_env(n=3, max_rounds=5)
    >>> agents = [DemonstratorAgent(seed=0), DemonstratorAgent(accuracy=0.5, seed=1),
    ...           RandomAgent(seed=2)]
    >>> history = sapo_env.run(env, agents, seed=0, progress=False)
    >>> history.rewards.shape
    (5, 3)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from tqdm.auto import tqdm

from sapo_env import checkpoint as checkpoints
from sapo_env.agent_calls import (  # noqa: F401 - the protocols, importable from here too
    Agent,
    ConcurrentAgent,
    ConcurrentJointActor,
    JointActor,
    JointMember,
    NodeFailure,
    Refusals,
    act_all,
    learn_all,
)
from sapo_env.checkpoint import Checkpoint
from sapo_env.churn import is_leave, is_pending
from sapo_env.config import SwarmConfig
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
    (``sapo_env.agent_calls.Refusals``)."""


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
    rewards: np.ndarray  #: (rounds, n) per-node reward; NaN where a node did not act
    #: (rounds, n) J in force each round (the external groups its training set asked for,
    #: chosen by the node's action of the round before); -1 where it did not act
    num_external: np.ndarray
    #: (rounds, n) completions each node generated (its generation cost); 0 where it did not act
    generated: np.ndarray
    infos: list[dict[str, dict[str, Any]]] = field(default_factory=list)
    learn_metrics: list[dict[str, dict[str, float]]] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return len(self.rewards)

    @property
    def swarm_mean(self) -> np.ndarray:
        """(rounds,) mean reward over the nodes that acted."""
        return np.nanmean(self.rewards, axis=1)

    @property
    def cumulative_reward(self) -> float:
        """Sum over rounds of the swarm-mean reward (most likely the paper's measure)."""
        return float(self.swarm_mean.sum())

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


def run(
    env: Any,
    agents: Mapping[str, Agent] | Sequence[Agent],
    rounds: int | None = None,
    callbacks: Iterable[Callback] = (),
    progress: bool = True,
    seed: int | None = None,
    ratio_policies: Mapping[str, RatioPolicy] | None = None,
    checkpoint: Checkpoint | None = None,
    deadline: float | None = None,
    remove_after_refusals: int | None = 3,
) -> History:
    """Reset ``env`` and run ``rounds`` rounds (default: until every node is truncated).

    Each round (``play_round``): every live node acts on its observation, the env steps, then
    every node learns from the batch the env assembled for it. ``agents`` is a mapping node
    name -> agent, or a sequence in ``env.possible_agents`` order. ``seed`` is passed to
    ``env.reset``. ``ratio_policies`` maps some or all nodes to a ``RatioPolicy`` that chooses
    their J in place of the agent (see the module docstring). ``checkpoint``, a
    ``Checkpoint(path, every=50)``, saves the run every ``every`` rounds and resumes it from
    ``path`` when the file exists (:mod:`sapo_env.checkpoint`): the same ``History`` as
    without the interruption, bit for bit. ``deadline`` (seconds) makes the rounds
    asynchronous: a round waits at most that long for the remote nodes, and those not done
    play it as pending (:mod:`sapo_env.asynchronous`). A remote node whose action the env
    would refuse sits the round out (``RoundRecord.refused`` has the error), and is removed
    after ``remove_after_refusals`` such rounds in a row (None: never); a local node's bad
    action raises, since it is a bug in the caller's code.
    """
    agents = _by_name(env, agents)
    refusals = Refusals(remove_after_refusals)
    if deadline is not None:
        from sapo_env.asynchronous import AsyncRounds  # built on this module: imported here

        asynchronous = AsyncRounds(agents, deadline, refusals)
    policies = dict(ratio_policies or {})
    unknown = sorted(set(policies) - set(env.possible_agents))
    if unknown:
        raise ValueError(f"ratio_policies names nodes that are not in the swarm: {unknown}; "
                         f"the nodes are {list(env.possible_agents)}")
    not_policies = sorted(a for a, p in policies.items() if not isinstance(p, RatioPolicy))
    if not_policies:
        raise TypeError(f"ratio_policies of {not_policies} need choose(observation) and "
                        "update(reward, info) (see sapo_env.RatioPolicy)")
    callbacks = list(callbacks)
    if deadline is not None and checkpoint is not None:
        raise ValueError("checkpoint needs synchronous rounds (deadline=None): an asynchronous "
                         "run has work in flight that a checkpoint cannot hold")
    identity = checkpoints.run_identity(seed, agents, policies,
                                        checkpoint.run_id if checkpoint is not None else None)
    saved = None
    if checkpoint is not None:
        checkpoints.require_state_dicts(agents, policies)
        if checkpoint.resume and checkpoint.path.exists():
            saved = checkpoints.read(checkpoint.path)
            checkpoints.check(saved, checkpoint.path, identity)
    if saved is None:
        observations, _ = env.reset(seed=seed)
    else:
        observations, _ = env.reset(options={"state": saved["env"]})
    total = env.config.max_rounds if rounds is None else min(rounds, env.config.max_rounds)
    names = tuple(env.possible_agents)
    column = {a: i for i, a in enumerate(names)}
    rewards = np.full((total, len(names)), np.nan)
    num_external = np.full((total, len(names)), -1, dtype=np.int64)
    generated = np.zeros((total, len(names)), dtype=np.int64)
    history = History(names, env.config, rewards, num_external, generated)
    start = 0 if saved is None else _resume_history(history, saved["history"], checkpoint.path)
    for callback in callbacks:
        callback.on_run_start(env, agents)
    if saved is not None:
        checkpoints.restore(saved, agents, policies, callbacks)

    for t in tqdm(range(start, total), desc="rounds", disable=not progress, unit="round",
                  initial=start, total=total):
        if not env.agents:
            history.rewards, history.num_external = rewards[:t], num_external[:t]
            history.generated = generated[:t]
            break
        chosen = {a: _chosen_j(a, policies[a], observations[a], env.config.train_budget)
                  for a in env.agents if a in policies}
        record = play_round(env, agents, observations, chosen, refusals) if deadline is None \
            else asynchronous.play(env, observations, chosen)
        observations, infos = record.observations, record.infos
        for a, r in record.rewards.items():
            if a in policies:
                policies[a].update(r, infos[a])
            rewards[t, column[a]] = r
            num_external[t, column[a]] = infos[a]["num_external"]
            generated[t, column[a]] = infos[a]["generated_completions"]
        history.infos.append(infos)
        history.learn_metrics.append(record.learn_metrics)
        for callback in callbacks:
            callback.on_round_end(record)
        if checkpoint is not None and (t + 1) % checkpoint.every == 0:
            checkpoints.write(checkpoint.path, checkpoints.capture(
                env, agents, policies, callbacks, _history_so_far(history, t + 1), identity))

    if deadline is not None:  # the updates still in flight, counted in the last round
        for a, metrics in asynchronous.finish().items():
            if history.learn_metrics:
                history.learn_metrics[-1].setdefault(a, {}).update(metrics)
    for callback in callbacks:
        callback.on_run_end(history)
    return history


def play_round(
    env: Any,
    agents: Mapping[str, Agent],
    observations: Mapping[str, Observation],
    num_external: Mapping[str, int] | None = None,
    refusals: Refusals | None = None,
) -> RoundRecord:
    """One round: every live node acts (its action's ``num_external`` replaced where
    ``num_external`` names the node), the env steps, every node that got a reward learns.
    The record's ``round`` is the round played and its ``observations`` those after the step.
    ``refusals`` screens the remote nodes' actions and counts refusals across rounds (None:
    a fresh ``Refusals()``, which counts this round only)."""
    round_ = env.round
    actions = with_num_external(act_all(agents, {a: observations[a] for a in env.agents}),
                                num_external)
    refused = (refusals or Refusals()).screen(env, agents, observations, actions)
    observations, rewards, _, _, infos = env.step(actions)
    played = online(rewards, infos)
    learned = learn_all(agents, {a: observations[a]["batch"] for a in played})
    return RoundRecord(round_, observations, actions, {a: rewards[a] for a in played},
                       {a: infos[a] for a in played}, learned, refused)


def with_num_external(actions: dict[str, Any], num_external: Mapping[str, int] | None
                      ) -> dict[str, Any]:
    """``actions`` with the ratio policies' J in those of the nodes that play."""
    for a, j in (num_external or {}).items():
        action = actions[a]  # None, leave or pending: the node does not play
        if action is not None and not is_leave(action) and not is_pending(action):
            actions[a] = {**action, "num_external": j}
    return actions


def online(rewards: Mapping[str, float], infos: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The nodes that played the round: only they learn and are recorded
    (``sapo_env.churn``)."""
    return [a for a in rewards if infos[a].get("status", "online") == "online"]


def _history_so_far(history: History, rounds: int) -> dict[str, Any]:
    return {"rounds": rounds, "rewards": history.rewards[:rounds].copy(),
            "num_external": history.num_external[:rounds].copy(),
            "generated": history.generated[:rounds].copy(), "infos": list(history.infos),
            "learn_metrics": list(history.learn_metrics)}


def _resume_history(history: History, saved: Mapping[str, Any], path: Any) -> int:
    """Fill ``history`` with a checkpoint's rounds; the number of rounds already played."""
    rounds = saved["rounds"]
    if rounds > len(history.rewards):
        raise ValueError(f"{path} holds {rounds} rounds, more than the {len(history.rewards)} "
                         "this run plays")
    for key in ("rewards", "num_external", "generated"):
        getattr(history, key)[:rounds] = saved[key]
    history.infos[:] = saved["infos"]
    history.learn_metrics[:] = saved["learn_metrics"]
    return rounds


def _chosen_j(node: str, policy: RatioPolicy, observation: Observation, budget: int) -> int:
    """The J ``policy`` chooses for ``node``, checked here so that the error names it."""
    j = policy.choose(observation)
    if isinstance(j, bool) or not isinstance(j, (int, np.integer)) or not 0 <= j <= budget:
        raise ValueError(f"ratio policy {type(policy).__name__} of {node} chose "
                         f"num_external={j!r}; expected an int in [0, {budget}] (train_budget)")
    return int(j)


def _by_name(env: Any, agents: Mapping[str, Agent] | Sequence[Agent]) -> dict[str, Agent]:
    names = list(env.possible_agents)
    if isinstance(agents, Mapping):
        missing = [a for a in names if a not in agents]
        extra = sorted(set(agents) - set(names))
        if missing or extra:
            raise ValueError(f"agents must name every node {names}; missing {missing}, "
                             f"unknown {extra}")
        agents = dict(agents)
    else:
        agents = list(agents)
        if len(agents) != len(names):
            raise ValueError(f"expected {len(names)} agents (one per node), got {len(agents)}")
        agents = dict(zip(names, agents))
    for a, agent in agents.items():
        if not isinstance(agent, Agent):
            raise TypeError(f"the agent of {a} needs act(observation) -> action and "
                            f"learn(batch) -> metrics or None (sapo_env.Agent); got {agent!r}")
    return agents
