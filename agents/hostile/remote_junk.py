"""A hostile remote node made of plain data: what a Ray node can still send the driver.

A remote node's results cross the trust boundary as plain data only (``agents.wrappers.remote``:
JSON), so the worst it can send is a value the env refuses. ``RemoteJunkNode`` sends the ones a red
team sent (``JUNK``), one kind a round in turn; it is a ``ConcurrentAgent``
(``submit_act``/``submit_learn``/``submit_ready`` return futures), so the runner treats it as a
remote node, as it would a Ray actor (``agents.wrappers.remote.remote``):

``leave_false``
    ``{"leave": False}``: a leave action that does not leave.
``pending_with_action``
    ``{"pending": True, ...}`` with its whole action: a pending action is exactly
    ``{"pending": True}``.
``completions_array``
    its action with ``completions=np.array(0)`` (over Ray it arrives as ``0``).
``completions_number``
    its action with ``completions=7``.
``for_other_nodes``
    actions for the other nodes, ``{"node_0": {"leave": True}, ...}`` (one per name in
    ``others``), as if it could make them leave.
``huge_j``
    its action with ``num_external=2**70``, an int numpy cannot hold.
``not_an_action``
    ``[1, 2]``, a JSON list.

Its learn metrics are junk too (``JUNK_METRICS``: a list), dropped by the runner.

What stops it: the runner's screen (``sapo_env.runtime.agent_calls.Refusals``) reads a remote
node's action with the env's own parser, so each costs only its sender its round (it sits the
round out; ``RoundRecord.refused`` names it), and a node refused ``remove_after_refusals``
rounds in a row (``sapo_env.runtime.run``; 3 by default) is removed from the swarm. Nothing
it sends reaches another node. The node underneath (``inner``) acts every round, so that the
junk carries its real completions, and learns from any batch the env gives it; the kind a
round is ``JUNK[(round + offset) % len(JUNK)]``, no randomness.

Example::

    from agents.hostile.remote_junk import remote_junk_swarm
    from agents.sim.simulated import simulated_swarm

    nodes = remote_junk_swarm(simulated_swarm(10, seed=0), fraction=0.3)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from agents.wrappers.wrapper import AgentWrapper
from sapo_env.attacks import Attack, register_attack
from sapo_env.defenses.transport_attacks import chosen_adversaries
from sapo_env.types import Action, Group, Observation

JUNK: dict[str, Callable[[Action, Sequence[str]], Any]] = {
    "leave_false": lambda action, others: {"leave": False},
    "pending_with_action": lambda action, others: {"pending": True, **action},
    "completions_array": lambda action, others: {**action, "completions": np.array(0)},
    "completions_number": lambda action, others: {**action, "completions": 7},
    "for_other_nodes": lambda action, others: {a: {"leave": True} for a in others},
    "huge_j": lambda action, others: {**action, "num_external": 2**70},
    "not_an_action": lambda action, others: [1, 2],
}
"""Each kind of junk: ``(its inner node's action, the other nodes' names) -> what it sends``."""
JUNK_METRICS: list[Any] = ["junk"]  #: what it sends as learn metrics (not names -> numbers)


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class RemoteJunkNode(AgentWrapper):
    """A remote node that sends plain-data junk every round (see the module docstring).

    Args:
        inner: the agent underneath (``act``/``learn``).
        others: the names ``for_other_nodes`` acts for (the swarm's other nodes).
        offset: where in ``JUNK`` it starts (round 0 sends ``JUNK``'s ``offset``-th kind).
    """

    def __init__(self, inner: Any, others: Sequence[str] = ("node_0",), offset: int = 0):
        super().__init__(inner)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise ValueError(f"offset must be an int, got {offset!r}")
        self.others, self.offset = tuple(others), offset

    def kind(self, round_: int) -> str:
        """The junk it sends in round ``round_``."""
        return list(JUNK)[(int(round_) + self.offset) % len(JUNK)]

    def act(self, observation: Observation) -> Any:
        action = dict(self.inner.act(observation))
        return JUNK[self.kind(observation["round"])](action, self.others)

    def learn(self, batch: Sequence[Group]) -> Any:
        self.inner.learn(batch)
        return JUNK_METRICS

    def submit_act(self, observation: Observation) -> Future:
        return _done(self.act(observation))

    def submit_learn(self, batch: Sequence[Group]) -> Future:
        return _done(self.learn(batch))

    def submit_ready(self) -> Future:
        return _done(None)


def remote_junk_swarm(agents: Mapping[str, Any], fraction: float | None = None,
                      nodes: Sequence[str] | None = None) -> dict[str, Any]:
    """``agents`` with some nodes wrapped in ``RemoteJunkNode``: the last
    ``round(fraction * n)`` of them (as ``sapo_env.defenses.transport_attacks.adversary_nodes``
    picks them), or the named ``nodes``; each acts for the others (its ``for_other_nodes``)
    and starts at its own place in ``JUNK``, spread over it, so that the junk nodes send
    different kinds in the same round and, between them, every kind within a few rounds."""
    names = list(agents)
    chosen = chosen_adversaries(names, fraction, nodes)
    others = [a for a in names if a not in chosen]
    offsets = {a: k * len(JUNK) // len(chosen) for k, a in enumerate(chosen)}
    return {a: RemoteJunkNode(agent, others, offsets[a]) if a in chosen else agent
            for a, agent in agents.items()}


def _junk(agents: Mapping[str, Any], attack: str, nodes: Sequence[str], seed: Any
          ) -> dict[str, Any]:
    return remote_junk_swarm(agents, nodes=nodes)


register_attack(Attack(
    "remote_junk", "remote",
    "a remote node (`agents.hostile.remote_junk.RemoteJunkNode`) that sends, one kind a round in "
    "turn, "
    'what the env refuses: `{"leave": False}`, `{"pending": True, ...}` with its whole action, '
    "`completions` as `np.array(0)` or `7`, actions for the other nodes "
    '(`{"node_0": {"leave": True}, ...}`), `num_external=2**70`, a list',
    "a broken or hostile Ray node: plain data the env cannot use", swarm=_junk))
