"""Running a swarm: ``run(env, agents)`` drives the act → step → learn loop and records it.

An agent is any object with ``act(observation) -> action`` and ``learn(batch) -> dict | None``
(the metrics of its update); nodes that act together (a LoRA swarm on one base) or run
elsewhere (Ray actors) are described in ``sapo_env.runtime.agent_calls``, which calls them.

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
    ``cumulative_reward``: sum over rounds of the swarm's mean reward, most likely the paper's
        definition (docs/provenance.md, "Cumulative reward").
    ``cumulative_reward_total``: sum over rounds and nodes.

Example::

    >>> import sapo_env.runtime
    >>> from agents import DemonstratorAgent, RandomAgent
    >>> env = sapo_env.parallel_env(n=3, max_rounds=5)
    >>> agents = [DemonstratorAgent(seed=0), DemonstratorAgent(accuracy=0.5, seed=1),
    ...           RandomAgent(seed=2)]
    >>> history = sapo_env.runtime.run(env, agents, seed=0, progress=False)
    >>> history.rewards.shape
    (5, 3)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sapo_env.runtime import checkpoint as checkpoints
from sapo_env.runtime.agent_calls import Agent, AgentCalls, Refusals
from sapo_env.runtime.asynchronous import AsyncRounds
from sapo_env.runtime.checkpoint import Checkpoint
from sapo_env.runtime.records import (
    Callback,
    History,
    RatioPolicy,
    RoundRecord,
    online,
    with_num_external,
)
from sapo_env.types import Observation


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
    ``path`` when the file exists (:mod:`sapo_env.runtime.checkpoint`): the same ``History`` as
    without the interruption, bit for bit. ``deadline`` (seconds) makes the rounds
    asynchronous: a round waits at most that long for the remote nodes, and those not done
    play it as pending (:mod:`sapo_env.runtime.asynchronous`). A remote node whose action the env
    would refuse sits the round out (``RoundRecord.refused`` has the error), and is removed
    after ``remove_after_refusals`` such rounds in a row (None: never); a local node's bad
    action raises, since it is a bug in the caller's code.
    """
    agents = _by_name(env, agents)
    calls = AgentCalls(agents)  # how each node is called, decided once for the run
    refusals = Refusals(remove_after_refusals)
    if deadline is not None:
        asynchronous = AsyncRounds(calls, deadline, refusals)
    policies = _checked_policies(env, ratio_policies)
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
            saved = checkpoints.read(checkpoint.path, checkpoint.max_state_bytes)
            checkpoints.check(saved, checkpoint.path, identity)
    if saved is None:
        observations, _ = env.reset(seed=seed)
    else:
        observations, _ = env.reset(options={"state": saved["env"]})
    total = env.config.max_rounds if rounds is None else min(rounds, env.config.max_rounds)
    names = tuple(env.possible_agents)
    column = {a: i for i, a in enumerate(names)}
    history = History(names, env.config, np.full((total, len(names)), np.nan),
                      np.full((total, len(names)), -1, dtype=np.int64),
                      np.zeros((total, len(names)), dtype=np.int64))
    start = 0 if saved is None else _resume_history(history, saved["history"], checkpoint.path)
    for callback in callbacks:
        callback.on_run_start(env, agents)
    if saved is not None:
        checkpoints.restore(saved, agents, policies, callbacks)

    for t in tqdm(range(start, total), desc="rounds", disable=not progress, unit="round",
                  initial=start, total=total):
        if not env.agents:
            _truncate(history, t)
            break
        chosen = {a: _chosen_j(a, policies[a], observations[a], env.config.train_budget)
                  for a in env.agents if a in policies}
        record = play_round(env, calls, observations, chosen, refusals) if deadline is None \
            else asynchronous.play(env, observations, chosen)
        observations, infos = record.observations, record.infos
        for a, r in record.rewards.items():
            if a in policies:
                policies[a].update(r, infos[a])
        _record(history, t, record, column)
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


def _checked_policies(env: Any, ratio_policies: Mapping[str, RatioPolicy] | None
                      ) -> dict[str, RatioPolicy]:
    """``ratio_policies`` as a dict, once every key is a node and every value a policy."""
    policies = dict(ratio_policies or {})
    unknown = sorted(set(policies) - set(env.possible_agents))
    if unknown:
        raise ValueError(f"ratio_policies names nodes that are not in the swarm: {unknown}; "
                         f"the nodes are {list(env.possible_agents)}")
    not_policies = sorted(a for a, p in policies.items() if not isinstance(p, RatioPolicy))
    if not_policies:
        raise TypeError(f"ratio_policies of {not_policies} need choose(observation) and "
                        "update(reward, info) (see sapo_env.runtime.RatioPolicy)")
    return policies


def _record(history: History, t: int, record: RoundRecord, column: Mapping[str, int]) -> None:
    """Round ``t``'s record into ``history``'s arrays and lists."""
    for a, r in record.rewards.items():
        history.rewards[t, column[a]] = r
        history.num_external[t, column[a]] = record.infos[a]["num_external"]
        history.generated[t, column[a]] = record.infos[a]["generated_completions"]
    for a, seconds in record.act_cpu_seconds.items():
        history.act_cpu_seconds[t, column[a]] = seconds
    for a, seconds in record.learn_cpu_seconds.items():
        history.learn_cpu_seconds[t, column[a]] = seconds
    history.infos.append(record.infos)
    history.learn_metrics.append(record.learn_metrics)


def _truncate(history: History, rounds: int) -> None:
    """Keep ``history``'s first ``rounds`` rounds (a run that ended early)."""
    for key in ("rewards", "num_external", "generated", "act_cpu_seconds",
                "learn_cpu_seconds"):
        setattr(history, key, getattr(history, key)[:rounds])


def play_round(
    env: Any,
    agents: AgentCalls | Mapping[str, Agent],
    observations: Mapping[str, Observation],
    num_external: Mapping[str, int] | None = None,
    refusals: Refusals | None = None,
) -> RoundRecord:
    """One round: every live node acts (its action's ``num_external`` replaced where
    ``num_external`` names the node), the env steps, every node that got a reward learns.
    The record's ``round`` is the round played and its ``observations`` those after the step.
    ``refusals`` screens the remote nodes' actions and counts refusals across rounds (None:
    a fresh ``Refusals()``, which counts this round only): nothing a remote node sends stops
    the round, it costs at most that node's round. ``agents``: node -> agent, or the
    ``AgentCalls`` of a run that plays many rounds (``run`` builds it once). The CPU seconds
    the act and learn calls took, by node, are in the record's ``act_cpu_seconds`` and
    ``learn_cpu_seconds`` (``AgentCalls.act``'s ``cpu``): timings, kept out of ``infos``,
    which a seeded run reproduces."""
    calls = agents if isinstance(agents, AgentCalls) else AgentCalls(agents)
    round_ = env.round
    act_cpu: dict[str, float] = {}
    learn_cpu: dict[str, float] = {}
    acted = calls.act({a: observations[a] for a in env.agents}, cpu=act_cpu)
    calls.require_an_action(round_, acted)
    actions = with_num_external(acted, num_external)
    refused = (refusals or Refusals()).screen(env, calls, observations, actions)
    observations, rewards, _, _, infos = env.step(actions)
    played = online(rewards, infos)
    learned = calls.learn({a: observations[a]["batch"] for a in played}, cpu=learn_cpu)
    return RoundRecord(round_, observations, actions, {a: rewards[a] for a in played},
                       {a: infos[a] for a in played}, learned, refused, act_cpu, learn_cpu)


_ARRAYS = ("rewards", "num_external", "generated", "act_cpu_seconds", "learn_cpu_seconds")
"""The ``History`` arrays a checkpoint holds (the CPU seconds may be missing from one written
before they were recorded)."""


def _history_so_far(history: History, rounds: int) -> dict[str, Any]:
    return {"rounds": rounds, **{key: getattr(history, key)[:rounds].copy() for key in _ARRAYS},
            "infos": list(history.infos), "learn_metrics": list(history.learn_metrics)}


def _resume_history(history: History, saved: Mapping[str, Any], path: Any) -> int:
    """Fill ``history`` with a checkpoint's rounds; the number of rounds already played. The
    CPU seconds of a checkpoint that has none stay NaN. ``ValueError`` naming the field of a
    history that does not fit this run."""
    rounds = saved["rounds"]
    if rounds > len(history.rewards):
        raise ValueError(f"{path} holds {rounds} rounds, more than the {len(history.rewards)} "
                         "this run plays")
    for key in ("infos", "learn_metrics"):
        if len(saved[key]) != rounds or not all(type(x) is dict for x in saved[key]):
            raise ValueError(f"{path}: its history's {key} must be {rounds} dicts, one a round")
    for key in (k for k in _ARRAYS if k in saved):
        shape = (rounds, *getattr(history, key).shape[1:])
        if saved[key].shape != shape or saved[key].dtype.kind not in "biuf":
            raise ValueError(f"{path}: its history's {key} must be a numeric array of shape "
                             f"{shape}, got {saved[key].dtype} of shape {saved[key].shape}")
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
