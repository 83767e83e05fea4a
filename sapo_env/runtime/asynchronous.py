"""Asynchronous rounds: ``sapo_env.runtime.run(env, agents, deadline=2.0)`` waits at most
``deadline`` seconds a round for the remote nodes (``ConcurrentAgent``: ``agents.wrappers.remote``),
so nodes of different speeds do not wait for each other.

Each round: every live remote node that is not already working is given its observation
(``submit_act``), the other nodes act as in synchronous rounds (in process, or through a joint
actor such as ``agents.wrappers.remote.remote_joint``'s: the round waits for them), and the
round waits until every remote node is done or ``deadline`` seconds have passed since it began. A
node that is not done plays the round as pending (``{"pending": True}``, ``sapo_env.churn``): it
contributes nothing, keeps its questions and keeps working. When its action arrives, in a later
round, it is scored against the questions it answered, its groups go to the pool stamped with
their questions' round (so only while that round is inside ``pool_window``:
``infos[node]["staleness"]``), and it trains on the batch of that round: ``submit_learn`` is
started and not waited for, and its next ``act`` (queued behind it in the node's actor) starts
in the next round.

What it changes:
- Learn metrics are recorded in the round in which the update finished (``RoundRecord.
  learn_metrics``), not in the round it learned from; when two updates of one node finish in
  the same round, that round holds the later one's. ``run`` waits for every update still in
  flight before it returns (their metrics go to the last round).
- Which round a late action lands in depends on timing: an asynchronous run is not reproducible
  bit for bit. When every node makes every deadline, it is the synchronous run.
- No checkpoints (their state would miss the work in flight).
- The deadline bounds the wait for actions; scoring what arrived comes after it and is bounded
  per node by ``SwarmConfig.scoring_budget`` (``sapo_env.scoring.guard``), so a round lasts at
  most the deadline plus, for each node, its budget (a hostile node costs the round its budget,
  not more; with ``round_score_budget`` all of them together cost at most that). Scoring is
  not cut at the deadline: one cut shared by all would let one node's slow completions cost
  the others their scores.
- A node whose act raises ``NodeFailure`` (its actor died) leaves, as in synchronous rounds.
- CPU seconds (``History.act_cpu_seconds``, ``learn_cpu_seconds``) are measured for the nodes
  that act and learn in this process, as in synchronous rounds; a remote node's are NaN, since
  its work is another process's and a round holds what finished in it, not what it cost.

Before the first round the run waits for every remote node to be up (``submit_ready``), at
most ``startup_timeout`` seconds, so that starting an actor (a process, a model load) does not
count against round 0's deadline; a node still not up after it plays round 0 as pending.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import Future, wait
from typing import Any

from sapo_env.churn import LEAVE, PENDING
from sapo_env.runtime.agent_calls import AgentCalls, Refusals, unless_failed
from sapo_env.runtime.records import RoundRecord, online, with_num_external
from sapo_env.types import Observation


class AsyncRounds:
    """Plays a run's rounds with a deadline (see the module docstring); holds the calls in
    flight from one round to the next."""

    def __init__(self, calls: AgentCalls, deadline: float,
                 refusals: Refusals | None = None, startup_timeout: float = 600.0):
        if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or deadline <= 0:
            raise ValueError(f"deadline must be a number of seconds > 0, got {deadline!r}")
        if not calls.concurrent:
            raise ValueError("deadline applies to remote nodes (agents.wrappers.remote: "
                             "ConcurrentAgents), which it waits for at most that long; none of "
                             "the agents is one")
        self.calls, self.deadline = calls, float(deadline)
        self.refusals = refusals or Refusals()
        self.startup_timeout, self.started = startup_timeout, False
        self.acting: dict[str, Future] = {}  # remote node -> its act in flight
        self.learning: list[tuple[str, Future]] = []  # remote updates in flight

    def play(self, env: Any, observations: Mapping[str, Observation],
             num_external: Mapping[str, int] | None = None) -> RoundRecord:
        """One round (``sapo_env.runtime.runner.play_round``'s contract, with the deadline)."""
        agents = self.calls.agents
        remote = [a for a in env.agents if a in self.calls.concurrent]
        if not self.started:
            wait([agents[a].submit_ready() for a in remote], timeout=self.startup_timeout)
            self.started = True
        round_, began = env.round, time.monotonic()
        for a in remote:
            if a not in self.acting:
                self.acting[a] = agents[a].submit_act(observations[a])
        act_cpu: dict[str, float] = {}
        learn_cpu: dict[str, float] = {}
        actions = self.calls.act({a: observations[a] for a in env.agents if a not in self.acting},
                                 cpu=act_cpu)
        self._wait_until(began + self.deadline)
        for a in remote:
            if self.acting[a].done():
                actions[a] = unless_failed(a, self.acting.pop(a).result, failed=LEAVE)
            else:
                actions[a] = PENDING
        actions = with_num_external({a: actions[a] for a in env.agents}, num_external)
        refused = self.refusals.screen(env, self.calls, observations, actions)
        observations, rewards, _, _, infos = env.step(actions)
        played = online(rewards, infos)
        learned = self.calls.learn({a: observations[a]["batch"] for a in played
                                    if a not in remote}, cpu=learn_cpu)
        self.learning += [(a, agents[a].submit_learn(observations[a]["batch"]))
                          for a in played if a in remote]
        for a in set(self.acting) - set(env.agents):  # left: what it still sends is dropped
            del self.acting[a]
        learned.update(self._collect(block=False))
        return RoundRecord(round_, observations, actions, {a: rewards[a] for a in played},
                           {a: infos[a] for a in played}, learned, refused, act_cpu, learn_cpu)

    def finish(self) -> dict[str, dict[str, float]]:
        """Wait for the updates still in flight; their metrics."""
        return self._collect(block=True)

    def _wait_until(self, end: float) -> None:
        wait(list(self.acting.values()), timeout=max(0.0, end - time.monotonic()))

    def _collect(self, block: bool) -> dict[str, dict[str, float]]:
        done = [(a, f) for a, f in self.learning if block or f.done()]
        self.learning = [(a, f) for a, f in self.learning if not (block or f.done())]
        learned: dict[str, dict[str, float]] = {}
        for a, future in done:
            learned.setdefault(a, {}).update(unless_failed(a, future.result, failed=None) or {})
        return learned
