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
- A ``ConcurrentAgent`` runs elsewhere (a Ray actor, ``agents.wrappers.remote.remote``):
  ``submit_act``/``submit_learn`` start a call and return a ``concurrent.futures.Future``;
  ``submit_ready`` a future that resolves once the node is up.
- A ``ConcurrentJointActor`` runs several nodes elsewhere (``agents.wrappers.remote.remote_joint``):
  ``submit_act_jointly``/``submit_learn_jointly`` start one call for all its nodes, so a round
  costs two remote calls per actor however many nodes it holds.

An ``act`` that returns ``None`` sits the round out (``sapo_env.churn``), but ``None`` is also
what an ``act`` that forgot to ``return`` gives: :meth:`AgentCalls.act` warns once per node that
does, and :meth:`AgentCalls.require_an_action` (``run`` calls it every round) stops a run in
which every node's does. ``sapo_env.churn.OFFLINE`` is the way to sit a round out.

A node that is gone (its process or machine died) raises ``NodeFailure``: its act becomes
``{"leave": True}`` and it leaves the swarm; a lost update is logged. Any other exception from
an agent in this process is a bug and propagates.

Trust: the agents in this process are trusted; what a remote node (a ``ConcurrentAgent``, a
``ConcurrentJointActor``) sends back is not. Its action is screened by the env's own parser
(``Refusals``); what it cannot send as an action (``unreadable``: junk, an error of its agent)
costs it the round like an action the env refuses; a joint actor answers only for the nodes
the runner asked it for (other keys are dropped, ``AgentCalls.foreign_keys``); its learn
metrics are kept only as names -> numbers. None of it can stop the run or touch another node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

import numpy as np

from sapo_env.actions import parse_action
from sapo_env.churn import LEAVE, absence
from sapo_env.types import Action, Group, Observation

logger = logging.getLogger(__name__)

UNREADABLE = "unreadable"


def unreadable(reason: str) -> Mapping[str, str]:
    """What stands for a remote node's action when it sent none the runner can read (junk, no
    action for the node, an error of its agent): ``Refusals.screen`` refuses it with
    ``reason``, so the node sits the round out, counted like any refusal. A read-only mapping,
    so that a ratio policy's J can be put in it like in any action (it is refused all the
    same)."""
    return MappingProxyType({UNREADABLE: reason[:500]})


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
    """An agent that runs elsewhere (a Ray actor: ``agents.wrappers.remote``): ``submit_act`` and
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
    fails too. ``agents.wrappers.remote`` raises it when an actor dies (or its agent could not
    be built); any other exception from an agent in this process is a bug and stops the run."""


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
        self._hosts = {k: ", ".join(a for a, actor in self.joint.items() if id(actor) == k)
                       for k in actors}  # the nodes this run maps to each joint actor
        #: remote joint actor (the nodes it hosts, "node_0, node_1") -> keys it sent back for
        #: nodes it was not asked for, dropped (the first time logged)
        self.foreign_keys: dict[str, int] = {}
        self.returned_none: set[str] = set()  #: nodes whose act returned None (warned once)

    def is_remote(self, node: str) -> bool:
        """Whether ``node`` runs elsewhere: a ``ConcurrentAgent``, or a member of a
        ``ConcurrentJointActor``."""
        return node in self.concurrent or (
            node in self.joint and id(self.joint[node]) in self._remote_joint)

    def act(self, observations: Mapping[str, Observation],
            cpu: dict[str, float] | None = None) -> dict[str, Action]:
        """The action of each node of ``observations``: nodes sharing a joint actor act in one
        call, remote nodes and remote joint actors all at once, while the others act. A joint
        actor's answer counts only for the nodes it was asked for (``_answers``).

        ``cpu``, when given, receives the CPU seconds of this process (``time.process_time``)
        each call in this process took, by node: a joint actor's call divided evenly over the
        nodes it acted for, since one batched call cannot be split honestly. Remote nodes get
        no entry (their CPU is another process's)."""
        joint = self._by_actor(observations)
        remote_joint = {k: (group, actor.submit_act_jointly(group))
                        for k, (actor, group) in joint.items() if k in self._remote_joint}
        pending = {a: self.agents[a].submit_act(o) for a, o in observations.items()
                   if a in self.concurrent and a not in self.joint}  # work while others act
        actions = {a: timed(cpu, [a], unless_failed, a, self.agents[a].act, o, failed=LEAVE)
                   for a, o in observations.items() if a not in pending and a not in self.joint}
        calls = [(group, False, actor.act_jointly, group) for k, (actor, group) in joint.items()
                 if k not in remote_joint]
        calls += [(group, True, future.result) for group, future in remote_joint.values()]
        for group, remote, call, *args in calls:
            acted = timed(None if remote else cpu, list(group), unless_failed, ", ".join(group),
                          call, *args, failed=None)
            actions.update(dict.fromkeys(group, LEAVE) if acted is None
                           else self._answers(group, acted, remote, learned=False))
        actions.update({a: unless_failed(a, future.result, failed=LEAVE)
                        for a, future in pending.items()})
        for a in observations:
            if actions[a] is None and a not in self.returned_none:
                self.returned_none.add(a)
                logger.warning("%s: its agent's act returned None, which sits the round out "
                               "(offline); did act forget to return? Return the node's "
                               "completions, or sapo_env.churn.OFFLINE to sit a round out "
                               "(warned once per node)", a)
        return {a: actions[a] for a in observations}

    def require_an_action(self, round_: int, actions: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` when every node of ``actions`` runs in this process and its
        ``act`` returned None: no node plays, round after round, and a run would end with only
        NaN rewards. (A remote node's None cannot stop a run: it only sits the round out.)"""
        if actions and all(v is None for v in actions.values()) \
                and not any(self.is_remote(a) for a in actions):
            raise ValueError(f"round {round_}: the act of every node ({', '.join(actions)}) "
                             "returned None, so no node plays; does act end with `return "
                             "action`? Return the node's completions (sapo_env.runtime.Agent), or "
                             "sapo_env.churn.OFFLINE for a node that sits a round out")

    def learn(self, batches: Mapping[str, Sequence[Group]],
              cpu: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
        """Each node's learn metrics from its batch; remote nodes, and the nodes of each remote
        joint actor in one call, learn at the same time; the nodes of an in-process joint
        learner learn in one call; the other members of an in-process joint actor learn
        alone. A remote node's metrics are kept only as names -> numbers (``plain_metrics``).
        ``cpu``: as in :meth:`act`, for the learn calls made in this process."""
        joint = {k: (actor, group) for k, (actor, group) in self._by_actor(batches).items()
                 if k in self._remote_joint or k in self._joint_learners}
        remote_joint = [(group, actor.submit_learn_jointly(group))
                        for k, (actor, group) in joint.items() if k in self._remote_joint]
        grouped = {a for _, group in joint.values() for a in group}
        pending = {a: self.agents[a].submit_learn(b) for a, b in batches.items()
                   if a in self.concurrent and a not in grouped}
        learned = {a: timed(cpu, [a], unless_failed, a, self.agents[a].learn, b, failed=None)
                   for a, b in batches.items() if a not in pending and a not in grouped}
        answers = [(group, False, timed(cpu, list(group), unless_failed, ", ".join(group),
                                        actor.learn_jointly, group, failed=None))
                   for k, (actor, group) in joint.items() if k in self._joint_learners]
        answers += [(group, True, unless_failed(", ".join(group), future.result, failed=None))
                    for group, future in remote_joint]
        for group, remote, metrics in answers:
            learned.update(dict.fromkeys(group) if metrics is None
                           else self._answers(group, metrics, remote, learned=True))
        learned.update({a: unless_failed(a, future.result, failed=None)
                        for a, future in pending.items()})
        return {a: plain_metrics(a, learned[a]) if self.is_remote(a) else dict(learned[a] or {})
                for a in batches}

    def _answers(self, group: Mapping[str, Any], answers: Any, remote: bool, learned: bool
                 ) -> dict[str, Any]:
        """A joint actor's ``answers`` (node -> action, or -> learn metrics) for the nodes of
        ``group``, the ones it was asked for: the runner's own assignment, never the actor's
        word. From a remote actor, a key for any other node is dropped (counted in
        ``foreign_keys``, logged once), and a node it sent nothing for sits the round out
        (``unreadable``; no metrics for an update). An in-process actor is trusted: its other
        keys are ignored, and a missing action is a bug (``ValueError``)."""
        label = ", ".join(group)
        if not isinstance(answers, Mapping):
            if not remote:
                raise TypeError(f"the joint actor of {label} returned a "
                                f"{type(answers).__name__}, not a dict node -> action")
            return dict.fromkeys(group, None if learned else unreadable(
                f"its joint actor sent back a {type(answers).__name__}, not node -> action"))
        if remote:
            foreign = sum(1 for key in answers if key not in group)
            hosts = self._hosts[id(self.joint[next(iter(group))])]
            if foreign:
                if hosts not in self.foreign_keys:
                    logger.warning("the remote joint actor of %s answered for %d node(s) it was "
                                   "not asked for: dropped (and counted in foreign_keys from "
                                   "now on)", hosts, foreign)
                self.foreign_keys[hosts] = self.foreign_keys.get(hosts, 0) + foreign
        missing = [a for a in group if a not in answers]
        if missing and not remote and not learned:
            raise ValueError(f"the joint actor of {label} returned no action for {missing}")
        return {a: answers[a] if a in answers else None if learned else
                unreadable("its joint actor sent back no action for it") for a in group}

    def _by_actor(self, inputs: Mapping[str, Any]) -> dict[int, tuple[Any, dict[str, Any]]]:
        """The nodes of ``inputs`` that act through a joint actor, grouped by it:
        id(actor) -> (actor, {node: input})."""
        groups: dict[int, tuple[Any, dict[str, Any]]] = {}
        for a, value in inputs.items():
            if a in self.joint:
                actor = self.joint[a]
                groups.setdefault(id(actor), (actor, {}))[1][a] = value
        return groups


def plain_metrics(node: str, metrics: Any) -> dict[str, float]:
    """A remote node's learn metrics as the runner records them: the entries of a mapping that
    name a number (None: no metrics). Anything else is dropped, with a warning: what a remote
    node reports never reaches the history as an object."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        logger.warning("%s sent learn metrics that are a %s, not names -> numbers: dropped",
                       node, type(metrics).__name__)
        return {}
    kept = {k: v for k, v in metrics.items() if type(k) is str
            and isinstance(v, (int, float, np.integer, np.floating))}
    if len(kept) < len(metrics):
        logger.warning("%s sent %d learn metrics that are not names -> numbers: dropped", node,
                       len(metrics) - len(kept))
    return kept


class Refusals:
    """Check the actions of remote nodes before the env sees them, round after round.

    :meth:`screen` turns what the env would refuse into ``None`` (the node sits the round out,
    ``sapo_env.churn``) and returns the errors by node (also logged), so one remote node's
    bad action cannot stop the round for all. It reads an action exactly as the env does
    (``sapo_env.churn.absence``, then ``sapo_env.actions.parse_action``): a malformed leave or
    pending action, an ``unreadable`` one, and any exception while reading it are refusals.
    A node refused ``limit`` rounds in a row is removed instead (its action becomes
    ``{"leave": True}``): a node that keeps sending what the env refuses is broken or hostile,
    and keeps costing every round a check. An accepted action resets its count; a round it
    sits out (offline, pending) leaves it as it is. ``limit`` None never removes. A local
    node's bad action is a bug in the caller's code and still raises in ``env.step``."""

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
            if not calls.is_remote(a):
                continue
            error = _refusal(a, action, len(observations[a]["questions"]), env.config)
            if error is None:
                if absence(a, action) is None:
                    self.in_a_row.pop(a, None)
                continue
            refused[a] = error
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
        return refused


def _refusal(node: str, action: Any, num_questions: int, config: Any) -> str | None:
    """Why the env would refuse a remote node's ``action`` (None: it takes it)."""
    try:
        if isinstance(action, Mapping) and UNREADABLE in action:
            return f"{node}: {str(action[UNREADABLE])[:500]}"
        if absence(node, action) is None:
            parse_action(node, action, num_questions, config)
        return None
    except ValueError as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - whatever a remote node's data raises: refused
        return f"{node}: its action cannot be read ({type(error).__name__}: {error})"[:500]


def timed(cpu: dict[str, float] | None, nodes: Sequence[str], call: Any, *args: Any,
          **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``; when ``cpu`` is a dict, the CPU seconds of this process it
    took (``time.process_time``) are added to it, divided evenly over ``nodes``, the nodes the
    call served."""
    if cpu is None:
        return call(*args, **kwargs)
    start = time.process_time()
    try:
        return call(*args, **kwargs)
    finally:
        share = (time.process_time() - start) / max(len(nodes), 1)
        for a in nodes:
            cpu[a] = cpu.get(a, 0.0) + share


def unless_failed(node: str, call: Any, *args: Any, failed: Any) -> Any:
    """``call(*args)``, or ``failed`` when it raises ``NodeFailure`` (logged)."""
    try:
        return call(*args)
    except NodeFailure as failure:
        logger.warning("%s failed and is removed from the swarm: %s", node, failure)
        return failed
