"""The swarms ``sapo-env bench-ratio`` plays a policy in: its scenarios.

A scenario says which nodes follow the benchmarked policy (the *policy nodes*; the table
scores them), what the other nodes do, and what changes during the run. Each is a function
``(n, rounds, policy, tasks) -> Swarm`` registered in ``SCENARIOS``, with what happens and why
adaptation should help; which of them have headroom, measured, is in records/bench-ratio/.

Stationary (nothing changes but the learners):

``all``
    every node follows the policy (does it starve the pool when everyone uses it?).
``focal``
    ``node_0`` follows it among nodes fixed at J = 4, the paper's best ratio.
``mixed``
    the first half follow it, the others are fixed at J = 0, 2, 6 and 8 in turn: a giver, two
    moderates and a free rider.

Non-stationary (the best J may change during the run):

``drift``
    the first half follow it beside scripted nodes whose skill drifts: right 90% of the time in
    round 0, 10% at the end (linearly), tagging half their answers, so their groups teach the
    answer format. They are ahead of the learners early and behind them later, so the value
    of their rollouts falls over the run: J should fall with it.
``curriculum``
    the task mix grows in three waves (a third of the tasks from round 0, the next third from
    round R/3, the last from 2R/3; ``TaskSpec.first_round``); the last node is a scripted
    mentor that already knows every task (right 90%, tagging half its answers) and takes
    nothing. Every wave makes the others' fresh attempts at new tasks, and the mentor's, worth
    reading: the pool becomes valuable in bursts.
``churn``
    the first half follow it and stay; the rest (at J = 4) leave at round R/3, and as many new
    nodes join at 2R/3: the pool's supply drops by half, then recovers with beginners.
``adversarial``
    the last 3 in 8 nodes (at J = 4) play honestly, then from round R/2 share misleading
    groups (``agents.hostile.adversarial``, attack ``misleading``): right answers after a careless
    guess, wrong ones after careful work, which pass every packet check and teach what makes
    answers wrong. The best J falls when the attack starts.
``on-off``
    the same nodes attack in rounds [R/4, R/2) and [3R/4, R) and play honestly in between: an
    on-off attacker. The best J falls when an attack starts; whether it should rise again in
    between is for the oracle to find (on the benchmark's learner it did not).

``policy`` is the label the policy nodes follow; companions follow ``fixed-J`` labels (or
play scripted nodes, whose J is their label's). ``tasks`` is the task list the learner needs
(``swarm_settings``), or None for the paper's nine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from agents.hostile.adversarial import AdversarialAgent
from agents.scripted.demonstrator import DemonstratorAgent
from agents.wrappers.churning import ChurningAgent
from sapo_env.config import PAPER_TASKS, TaskSpec
from sapo_env.types import Action, Observation

FOCAL_COMPANION_J = 4  #: J of the other nodes in the focal setting
MIXED_COMPANION_J = (0, 2, 6, 8)  #: J of the non-policy nodes of the mixed setting, in turn
COMPANION_J = 4  #: J of the companions of the drift-free non-stationary scenarios
SCRIPTED_ACCURACY = (0.9, 0.1)  #: drift's scripted nodes: right this often at start and end
MENTOR_ACCURACY = 0.9  #: the curriculum's mentor: right this often on every task
SCRIPTED_TAGS = 0.5  #: drift's and curriculum's scripted nodes tag half their answers
ADVERSARY_SHARE = (3, 8)  #: the adversarial scenarios' attackers: 3 in 8 nodes (at least one)

AgentsHook = Callable[[Mapping[str, Any], np.random.SeedSequence], dict[str, Any]]


def _unchanged(agents: Mapping[str, Any], seed: np.random.SeedSequence) -> dict[str, Any]:
    return dict(agents)


@dataclass(frozen=True)
class Swarm:
    """One run's swarm as a scenario builds it."""

    policy: str
    """The benchmarked label."""
    policy_nodes: tuple[str, ...]
    """The nodes that follow it: those the table scores."""
    companions: Mapping[str, str] = field(default_factory=dict)
    """The other nodes -> the ``fixed-J`` label each follows."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """``SwarmConfig`` fields the scenario sets (``join_rounds``, ``tasks``)."""
    agents: AgentsHook = _unchanged
    """``(learners, seed) -> agents``: the learner factory's nodes with the scenario's own put in
    (scripted nodes, attackers, nodes that leave)."""

    def __post_init__(self) -> None:
        if not self.policy_nodes or set(self.policy_nodes) & set(self.companions):
            raise ValueError(f"a swarm needs policy nodes apart from its companions, got "
                             f"{self.policy_nodes} and {list(self.companions)}")

    @property
    def roles(self) -> dict[str, str]:
        """Every node, in node order -> the label of the ratio policy it follows."""
        roles = {**dict.fromkeys(self.policy_nodes, self.policy), **self.companions}
        return {a: roles[a] for a in sorted(roles, key=lambda a: int(a.rpartition("_")[2]))}


@dataclass(frozen=True)
class Scenario:
    """A registered scenario: its builder and its documentation."""

    name: str
    stationary: bool
    what: str  #: what happens, one sentence (the table's caption)
    build: Callable[[int, int, str, Sequence[TaskSpec] | None], Swarm]
    changes: Callable[[int], tuple[int, ...]] = lambda rounds: ()
    """The rounds at which the swarm changes, for the figures."""

    def swarm(self, n: int, rounds: int, policy: str,
              tasks: Sequence[TaskSpec] | None = None) -> Swarm:
        return self.build(n, rounds, policy, tasks)


def _names(n: int) -> list[str]:
    return [f"node_{i}" for i in range(n)]


def _half(n: int) -> int:
    """The policy nodes of the half-and-half scenarios: the larger half."""
    return (n + 1) // 2


def _fixed(j: int) -> str:
    return f"fixed-{j}"


# --- stationary --------------------------------------------------------------------------------
def _all(n, rounds, policy, tasks) -> Swarm:
    return Swarm(policy, tuple(_names(n)))


def _focal(n, rounds, policy, tasks) -> Swarm:
    names = _names(n)
    return Swarm(policy, tuple(names[:1]), dict.fromkeys(names[1:], _fixed(FOCAL_COMPANION_J)))


def _mixed(n, rounds, policy, tasks) -> Swarm:
    half = _half(n)
    names = _names(n)
    return Swarm(policy, tuple(names[:half]), {
        a: _fixed(MIXED_COMPANION_J[k % len(MIXED_COMPANION_J)])
        for k, a in enumerate(names[half:])})


# --- non-stationary skill ----------------------------------------------------------------------
class DriftingDemonstrator(DemonstratorAgent):
    """A scripted node whose accuracy moves linearly from ``start`` in round 0 to ``end`` in
    round ``rounds - 1`` (it never learns)."""

    def __init__(self, start: float, end: float, rounds: int, seed: np.random.SeedSequence):
        super().__init__(start, 0, seed, tag_probability=SCRIPTED_TAGS)
        self.start, self.end, self.rounds = start, end, rounds

    def act(self, observation: Observation) -> Action:
        progress = min(int(observation["round"]) / max(self.rounds - 1, 1), 1.0)
        self.accuracy = self.start + (self.end - self.start) * progress
        return super().act(observation)


def _scripted(agents, seed, nodes, make) -> dict[str, Any]:
    out = dict(agents)
    for a, s in zip(nodes, seed.spawn(len(nodes))):
        out[a] = make(s)
    return out


def _drift(n, rounds, policy, tasks) -> Swarm:
    names = _names(n)
    scripted = names[_half(n):]
    start, end = SCRIPTED_ACCURACY
    return Swarm(policy, tuple(names[:_half(n)]), dict.fromkeys(scripted, _fixed(0)),
                 agents=partial(_scripted, nodes=scripted, make=partial(
                     DriftingDemonstrator, start, end, rounds)))


# --- curriculum shift ---------------------------------------------------------------------------
def waves(tasks: Sequence[TaskSpec], rounds: int, count: int = 3) -> list[TaskSpec]:
    """``tasks`` in ``count`` waves (as equal as the number of tasks allows): wave k's tasks
    enter at round k * rounds // count."""
    count = min(count, len(tasks))
    edges = np.linspace(0, len(tasks), count + 1).round().astype(int)
    return [TaskSpec(t.name, t.weight, t.config, k * rounds // count)
            for k in range(count) for t in tasks[edges[k]:edges[k + 1]]]


def _mentor(seed: np.random.SeedSequence) -> DemonstratorAgent:
    return DemonstratorAgent(MENTOR_ACCURACY, 0, seed, tag_probability=SCRIPTED_TAGS)


def _curriculum(n, rounds, policy, tasks) -> Swarm:
    names = _names(n)
    if n < 2:
        raise ValueError("scenario curriculum needs n_agents >= 2 (a mentor and a policy node)")
    mentor = names[-1:]
    specs = [TaskSpec.coerce(t) for t in (tasks or PAPER_TASKS)]
    if len(specs) < 2:
        raise ValueError("scenario curriculum needs at least two tasks to add one mid-run")
    return Swarm(policy, tuple(names[:-1]), dict.fromkeys(mentor, _fixed(0)),
                 {"tasks": [[t.name, t.weight, dict(t.config), t.first_round]
                            for t in waves(specs, rounds)]},
                 partial(_scripted, nodes=mentor, make=_mentor))


def _wave_rounds(rounds: int) -> tuple[int, ...]:
    return (rounds // 3, 2 * rounds // 3)


# --- churn --------------------------------------------------------------------------------------
def _leave(agents, seed, nodes, round_) -> dict[str, Any]:
    return {a: ChurningAgent(x, leave_round=round_) if a in nodes else x
            for a, x in agents.items()}


def _churn(n, rounds, policy, tasks) -> Swarm:
    stay = _half(n)
    leaving = _names(n)[stay:]
    joining = [f"node_{i}" for i in range(n, n + len(leaving))]
    leave_at, join_at = _wave_rounds(rounds)
    if not leaving:
        raise ValueError("scenario churn needs n_agents >= 2 (a node that leaves)")
    return Swarm(policy, tuple(_names(n)[:stay]),
                 dict.fromkeys(leaving + joining, _fixed(COMPANION_J)),
                 {"join_rounds": dict.fromkeys(joining, join_at)},
                 partial(_leave, nodes=leaving, round_=leave_at))


# --- adversarial share --------------------------------------------------------------------------
def attackers(n: int) -> int:
    """How many of ``n`` nodes attack: 3 in 8, at least one, leaving at least one honest."""
    k, of = ADVERSARY_SHARE
    return min(max(1, n * k // of), n - 1)


def _attack(agents, seed, nodes, active) -> dict[str, Any]:
    streams = dict(zip(nodes, seed.spawn(len(nodes))))
    return {a: AdversarialAgent(x, "misleading", streams[a], active) if a in nodes else x
            for a, x in agents.items()}


def _adversarial_swarm(n, policy, active) -> Swarm:
    if n < 2:
        raise ValueError("the adversarial scenarios need n_agents >= 2")
    names = _names(n)
    hostile = names[n - attackers(n):]
    return Swarm(policy, tuple(names[:n - attackers(n)]), dict.fromkeys(hostile, _fixed(
        COMPANION_J)), agents=partial(_attack, nodes=hostile, active=active))


def _adversarial(n, rounds, policy, tasks) -> Swarm:
    return _adversarial_swarm(n, policy, ((rounds // 2, rounds),))


def _on_off_rounds(rounds: int) -> tuple[tuple[int, int], ...]:
    return ((rounds // 4, rounds // 2), (3 * rounds // 4, rounds))


def _on_off(n, rounds, policy, tasks) -> Swarm:
    return _adversarial_swarm(n, policy, _on_off_rounds(rounds))


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("all", True, "every node follows the policy", _all),
    Scenario("focal", True, f"node_0 follows it, the others are fixed at J = "
             f"{FOCAL_COMPANION_J}", _focal),
    Scenario("mixed", True, "the first half follow it, the others are fixed at J = "
             + ", ".join(map(str, MIXED_COMPANION_J)) + " in turn", _mixed),
    Scenario("drift", False, "the first half follow it beside scripted nodes whose accuracy "
             "drifts from 0.9 to 0.1: ahead early, behind later", _drift),
    Scenario("curriculum", False, "tasks arrive in three waves (rounds 0, R/3, 2R/3); a "
             "scripted mentor knows them all", _curriculum, _wave_rounds),
    Scenario("churn", False, "the first half follow it; the others leave at R/3 and as many "
             "beginners join at 2R/3", _churn, _wave_rounds),
    Scenario("adversarial", False, "3 in 8 nodes share misleading groups from R/2 on",
             _adversarial, lambda rounds: (rounds // 2,)),
    Scenario("on-off", False, "3 in 8 nodes share misleading groups in [R/4, R/2) and "
             "[3R/4, R)", _on_off,
             lambda rounds: tuple(r for pair in _on_off_rounds(rounds) for r in pair)[:-1]),
]}
