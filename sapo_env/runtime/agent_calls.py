"""Calling a swarm's agents: what an agent is, and ``AgentCalls``, which calls every node's
agent for a round, each the way it needs (decided once per run), starting the remote ones first
so that they all work at once.

- An ``Agent`` has ``act(observation) -> action`` and ``learn(batch) -> dict | None`` (the
  metrics of its update).
- Agents that generate faster together (LoRA nodes sharing one base model) are
  ``JointMember``s: they expose the same ``joint_actor`` (a ``JointActor``), which acts for all
  of them in one ``act_jointly({node: observation, ...})`` call.
- A joint actor that also has ``learn_jointly({node: batch, ...})`` (a ``JointLearner``: small
  models whose forward passes are batched across nodes, ``agents.tiny.batched_swarm``) learns
  for all of them in one call too.
- A ``ConcurrentAgent`` runs elsewhere (a Ray actor, ``agents.remote.remote``):
  ``submit_act``/``submit_learn`` start a call and return a ``concurrent.futures.Future``;
  ``submit_ready`` a future that resolves once the node is up.
- A ``ConcurrentJointActor`` runs several nodes elsewhere (``agents.remote.remote_joint``):
  ``submit_act_jointly``/``submit_learn_jointly`` start one call for all its nodes, so a round
  costs two remote calls per actor however many nodes it holds.

A node that is gone (its process or machine died) raises ``NodeFailure``: its act becomes
``{"leave": True}`` and it leaves the swarm; a lost update is logged. Any other exception is a
bug and propagates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

from sapo_env.actions import parse_action
from sapo_env.churn import LEAVE, is_leave, is_pending
from sapo_env.types import Action, Group, Observation

logger = logging.getLogger(__name__)


@runtime_checkable
class Agent(Protocol):
    def act(self, observation: Observation) -> Action: ...

    def learn(self, batch: Sequence[Group]) -> Mapping[str, float] | None: ...


class JointActor(Protocol):
    """Acts for several nodes in one call (one batched generation for a LoRA swarm)."""

    def act_jointly(self, observations: Mapping[str, Observation]) -> dict[str, Action]: ...


@runtime_checkable
class JointLearner(JointActor, Protocol):
    """A ``JointActor`` that also learns for its nodes in one call (node -> learn metrics)."""

    def learn_jointly(self, batches: Mapping[str, Sequence[Group]]
                      ) -> Mapping[str, Mapping[str, float] | None]: ...


@runtime_checkable
class ConcurrentJointActor(Protocol):
    """A ``JointActor`` that runs elsewhere: one started call acts, or learns, for all its
    nodes (futures of node -> action, and of node -> learn metrics)."""

    def submit_act_jointly(self, observations: Mapping[str, Observation]) -> Future: ...

    def submit_learn_jointly(self, batches: Mapping[str, Sequence[Group]]) -> Future: ...


@runtime_checkable
class JointMember(Agent, Protocol):
    """An agent that acts through a ``JointActor`` shared with other agents (None: it acts
    alone, through its own ``act``)."""

    joint_actor: JointActor | None


@runtime_checkable
class ConcurrentAgent(Agent, Protocol):
    """An agent that runs elsewhere (a Ray actor: ``agents.remote``): ``submit_act`` and
    ``submit_learn`` start the call and return a ``concurrent.futures.Future`` of its result,
    so the runner starts every such node's call before it waits for any. ``submit_ready``'s
    future resolves once the node is built and answers calls: an asynchronous run waits for
    it before its first round, so start-up does not count against a deadline."""

    def submit_act(self, observation: Observation) -> Future: ...

    def submit_learn(self, batch: Sequence[Group]) -> Future: ...

    def submit_ready(self) -> Future: ...


@runtime_checkable
class Evaluable(Protocol):
    """An agent whose ``act`` draws randomness that an evaluation must not consume:
    ``evaluation_scope()`` is a context in which ``act`` leaves no trace (``GRPOAgent``'s puts
    its random state back). Held-out evaluation (``sapo_env.runtime.held_out``) enters it."""

    def evaluation_scope(self) -> Any: ...


@runtime_checkable
class Stateful(Protocol):
    """An agent (or ratio policy, or callback) whose state a checkpoint holds
    (``sapo_env.runtime.checkpoint``)."""

    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class NodeFailure(RuntimeError):
    """A node is gone (its process or machine died). Raised by its ``act`` (or the future of
    it), the runner logs it and sends ``{"leave": True}`` for the node, and the run goes on;
    raised by ``learn``, the update is lost (logged) and the node leaves when its next ``act``
    fails too. ``agents.remote`` raises it when an actor dies; any other exception is a bug
    and stops the run."""


class AgentCalls:
    """How each node's agent is called, decided once, when a run starts: alone in this process
    (``act``/``learn``), elsewhere (a ``ConcurrentAgent``: ``submit_act``/``submit_learn``),
    or through the joint actor it shares with other nodes (in this process, or elsewhere: a
    ``ConcurrentJointActor``). :meth:`act` and :meth:`learn` call every node of a round that
    way, starting the calls that run elsewhere first, so that they all work at once."""

    def __init__(self, agents: Mapping[str, Agent]):
        self.agents = dict(agents)
        self.joint: dict[str, JointActor] = {
            a: agent.joint_actor for a, agent in self.agents.items()
            if isinstance(agent, JointMember) and agent.joint_actor is not None}
        self.concurrent = {a for a, agent in self.agents.items()
                           if isinstance(agent, ConcurrentAgent)}
        actors = {id(actor): actor for actor in self.joint.values()}
        self._remote_joint = {k for k, actor in actors.items()
                              if isinstance(actor, ConcurrentJointActor)}
        self._joint_learners = {k for k, actor in actors.items()
                                if isinstance(actor, JointLearner) and k not in self._remote_joint}

    def is_remote(self, node: str) -> bool:
        """Whether ``node`` runs elsewhere: a ``ConcurrentAgent``, or a member of a
        ``ConcurrentJointActor``."""
        return node in self.concurrent or (
            node in self.joint and id(self.joint[node]) in self._remote_joint)

    def act(self, observations: Mapping[str, Observation]) -> dict[str, Action]:
        """The action of each node of ``observations``: nodes sharing a joint actor act in one
        call, remote nodes and remote joint actors all at once, while the others act."""
        joint = self._by_actor(observations)
        remote_joint = {k: (group, actor.submit_act_jointly(group))
                        for k, (actor, group) in joint.items() if k in self._remote_joint}
        pending = {a: self.agents[a].submit_act(o) for a, o in observations.items()
                   if a in self.concurrent and a not in self.joint}  # work while others act
        actions = {a: unless_failed(a, self.agents[a].act, o, failed=LEAVE)
                   for a, o in observations.items() if a not in pending and a not in self.joint}
        calls = [(group, actor.act_jointly, group) for k, (actor, group) in joint.items()
                 if k not in remote_joint]
        calls += [(group, future.result) for group, future in remote_joint.values()]
        for group, call, *args in calls:
            acted = unless_failed(", ".join(group), call, *args, failed=None)
            actions.update(acted if acted is not None else dict.fromkeys(group, LEAVE))
        actions.update({a: unless_failed(a, future.result, failed=LEAVE)
                        for a, future in pending.items()})
        return {a: actions[a] for a in observations}

    def learn(self, batches: Mapping[str, Sequence[Group]]) -> dict[str, dict[str, float]]:
        """Each node's learn metrics from its batch; remote nodes, and the nodes of each remote
        joint actor in one call, learn at the same time; the nodes of an in-process joint
        learner learn in one call; the other members of an in-process joint actor learn
        alone."""
        joint = {k: (actor, group) for k, (actor, group) in self._by_actor(batches).items()
                 if k in self._remote_joint or k in self._joint_learners}
        remote_joint = [(group, actor.submit_learn_jointly(group))
                        for k, (actor, group) in joint.items() if k in self._remote_joint]
        grouped = {a for _, group in joint.values() for a in group}
        pending = {a: self.agents[a].submit_learn(b) for a, b in batches.items()
                   if a in self.concurrent and a not in grouped}
        learned = {a: unless_failed(a, self.agents[a].learn, b, failed=None)
                   for a, b in batches.items() if a not in pending and a not in grouped}
        for k, (actor, group) in joint.items():
            if k in self._joint_learners:
                learned.update(unless_failed(", ".join(group), actor.learn_jointly, group,
                                             failed=None) or dict.fromkeys(group))
        for group, future in remote_joint:
            learned.update(unless_failed(", ".join(group), future.result, failed=None)
                           or dict.fromkeys(group))
        learned.update({a: unless_failed(a, future.result, failed=None)
                        for a, future in pending.items()})
        return {a: dict(learned[a] or {}) for a in batches}

    def _by_actor(self, inputs: Mapping[str, Any]) -> dict[int, tuple[Any, dict[str, Any]]]:
        """The nodes of ``inputs`` that act through a joint actor, grouped by it:
        id(actor) -> (actor, {node: input})."""
        groups: dict[int, tuple[Any, dict[str, Any]]] = {}
        for a, value in inputs.items():
            if a in self.joint:
                actor = self.joint[a]
                groups.setdefault(id(actor), (actor, {}))[1][a] = value
        return groups


class Refusals:
    """Check the actions of remote nodes before the env sees them, round after round.

    :meth:`screen` turns an action the env would refuse into ``None`` (the node sits the round
    out, ``sapo_env.churn``) and returns the errors by node (also logged), so one remote node's
    bad action cannot stop the round for all. A node refused ``limit`` rounds in a row is
    removed instead (its action becomes ``{"leave": True}``): a node that keeps sending what
    the env refuses is broken or hostile, and keeps costing every round a check. An accepted
    action resets its count; a round it sits out (offline, pending) leaves it as it is.
    ``limit`` None never removes. A local node's bad action is a bug in the caller's code and
    still raises in ``env.step``."""

    def __init__(self, limit: int | None = 3):
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise ValueError(f"remove_after_refusals must be an int >= 1 or None, got {limit!r}")
        self.limit = limit
        self.in_a_row: dict[str, int] = {}  #: remote node -> rounds refused in a row

    def screen(self, env: Any, calls: AgentCalls, observations: Mapping[str, Observation],
               actions: dict[str, Any]) -> dict[str, str]:
        """Refuse, in place, the remote nodes' actions the env would refuse; the errors."""
        refused = {}
        for a, action in actions.items():
            if action is None or is_leave(action) or is_pending(action) \
                    or not calls.is_remote(a):
                continue
            try:
                parse_action(a, action, len(observations[a]["questions"]), env.config)
            except ValueError as error:
                refused[a] = str(error)
                self.in_a_row[a] = self.in_a_row.get(a, 0) + 1
                if self.limit is not None and self.in_a_row[a] >= self.limit:
                    actions[a] = LEAVE
                    refused[a] += f" (refused {self.in_a_row[a]} rounds in a row: removed)"
                    logger.warning("%s is removed from the swarm: its action was refused %d "
                                   "rounds in a row; the last: %s", a, self.in_a_row[a], error)
                else:
                    actions[a] = None
                    logger.warning("%s sent an action the env refuses; it sits this round "
                                   "out: %s", a, error)
            else:
                self.in_a_row.pop(a, None)
        return refused


def unless_failed(node: str, call: Any, *args: Any, failed: Any) -> Any:
    """``call(*args)``, or ``failed`` when it raises ``NodeFailure`` (logged)."""
    try:
        return call(*args)
    except NodeFailure as failure:
        logger.warning("%s failed and is removed from the swarm: %s", node, failure)
        return failed
