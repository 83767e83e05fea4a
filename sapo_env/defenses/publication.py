"""A round's publication, packet by packet: what was sent, and what became of each packet.

Each round the env builds the groups its nodes share, sends them (forged on the way by the
transport adversaries of ``SwarmConfig.adversaries``:
:func:`sapo_env.defenses.transport_attacks.tamper`), reads every packet through the packet
schema and the sender check (:func:`sapo_env.defenses.packet_schema.receive_each`), screens
what passed with the verifier when ``SwarmConfig.verify_packets`` is on
(:meth:`sapo_env.defenses.packets.PacketVerifier.verdicts`) and pools the rest.
:func:`publish_round` is that pipeline; it returns the rejections counted by sender (what
``infos[node]["rejected_groups"]`` and reputation read) and a :class:`PacketFate` per packet.

**The fates of the last step** are ``SwarmEnv.last_packets`` (empty before the first step and
after a reset): one :class:`PacketFate` per packet sent in the round just played, in the order
sent. It is what a pool recorder reads (:mod:`sapo_env.runtime.pool_dataset` writes it as a
Hugging Face dataset); it is not in ``infos`` (a round's packets hold every shared completion,
too much to keep per round in a run's history) nor in the env's state (it describes the step
just played, not what the next one needs). What is not a packet is not there: groups a node
chose not to share (``share`` 0), and a late node's groups older than the pool window.

An accepted packet is one the pool took in this round; with ``SwarmConfig.pool_capacity`` set
it may be evicted at once by the groups after it (the pool keeps the newest).

Example::

    >>> import sapo_env
    >>> from agents import DemonstratorAgent
    >>> env = sapo_env.parallel_env(n=2, max_rounds=2)
    >>> observations, _ = env.reset(seed=0)
    >>> nodes = {a: DemonstratorAgent(seed=i) for i, a in enumerate(env.agents)}
    >>> _ = env.step({a: nodes[a].act(observations[a]) for a in env.agents})
    >>> [(p.sender, p.status, p.group["id"]) for p in env.last_packets][:2]
    [('node_0', 'accepted', 'node_0/r0/q0'), ('node_0', 'accepted', 'node_0/r0/q1')]
"""

from __future__ import annotations

import reprlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sapo_env.config import SwarmConfig
from sapo_env.defenses.packet_schema import receive_each
from sapo_env.defenses.packets import PacketVerifier
from sapo_env.defenses.transport_attacks import tamper
from sapo_env.pool import SharedPool
from sapo_env.scoring.answers import AnswerExtractor
from sapo_env.types import Group

ACCEPTED = "accepted"
"""The status of a packet the pool took; any other status is the reason it was refused (of
``packet_schema.ADMIT_REASONS`` or ``packets.REJECT_REASONS``)."""
RAW_CHARS = 200
"""Longest :attr:`PacketFate.raw`: a packet the schema could not read is kept as this much of
its ``repr``, never as the object that was sent."""
_RAW = reprlib.Repr()
_RAW.maxstring = _RAW.maxother = RAW_CHARS
_RAW.maxlevel, _RAW.maxdict, _RAW.maxlist, _RAW.maxtuple = 3, 16, 8, 8


@dataclass(frozen=True)
class PacketFate:
    """One packet of a round and what became of it."""

    sender: str
    """The node the transport got it from (whatever ``source`` it claims)."""
    status: str
    """``"accepted"`` (:data:`ACCEPTED`) or the reason it was refused: ``"malformed"``,
    ``"oversized"``, ``"impersonation"`` (the schema and the sender check), ``"rewards"``,
    ``"not_dealt"``, ``"duplicate"``, ... (the verifier's ``REJECT_REASONS``)."""
    group: Group | None
    """The packet as a validated group wherever the schema and the sender check passed it
    (accepted, or refused by the verifier: its rewards and advantages are then what it
    claimed); the pool's own read-only record when accepted. None when refused before."""
    raw: str | None = None
    """Only where ``group`` is None: at most ``RAW_CHARS`` of the ``repr`` of what was sent
    (:func:`safe_repr`), for the record; never parsed."""

    @property
    def accepted(self) -> bool:
        return self.status == ACCEPTED


def safe_repr(value: Any) -> str:
    """At most ``RAW_CHARS`` of ``value``'s ``repr`` (``reprlib``'s), whatever ``value`` is:
    strings and containers are cut before they are turned into text (a 10 MB completion costs
    no more than a short one), an object whose ``repr`` raises is named by its class, and
    anything else that raises gives ``"<unreadable>"``."""
    try:
        text = _RAW.repr(value)
    except Exception:  # noqa: BLE001 (a hostile object's repr may raise anything)
        return "<unreadable>"
    return text if type(text) is str and len(text) <= RAW_CHARS else str(text)[:RAW_CHARS]


def publish_round(built: Sequence[Group], round_: int, config: SwarmConfig, pool: SharedPool,
                  extract: AnswerExtractor, verifier: PacketVerifier | None,
                  dealt: Mapping[str, Sequence[Mapping[str, Any]]], spent: dict[str, float],
                  failures: dict[str, dict[str, int]]
                  ) -> tuple[Counter, tuple[PacketFate, ...]]:
    """Send ``built`` (the groups the env built to share this round, in order), pool those that
    pass; the rejected packets counted by sender, and every packet's fate in the order sent.
    ``dealt``: each node's refs of this round's questions (the verifier's ``not_dealt``);
    re-scoring a packet is charged to its sender's ``spent`` and ``failures``."""
    sent = tamper(built, config.adversaries, extract, config.advantage_eps)
    received = receive_each(sent, built, round_, config)
    readable = [k for k, g in enumerate(received) if not isinstance(g, str)]
    reasons: list[str | None] = [g if isinstance(g, str) else None for g in received]
    if verifier is not None:
        staying = [g for g in pool.groups if pool.in_window(g["round"], round_)]
        verdicts = verifier.verdicts([received[k] for k in readable], built, staying, dealt,
                                     spent=spent, failures=failures)
        for k, verdict in zip(readable, verdicts):
            reasons[k] = verdict
    pool.publish(round_, [received[k] for k in readable if reasons[k] is None])
    # counted as admit, then screen, counted them: schema refusals first, in order sent
    rejected = Counter(sender for (sender, _), g in zip(sent, received) if isinstance(g, str))
    rejected.update(sent[k][0] for k in readable if reasons[k] is not None)
    fates = tuple(
        PacketFate(sender, reason or ACCEPTED, None if isinstance(group, str) else group,
                   safe_repr(value) if isinstance(group, str) else None)
        for (sender, value), group, reason in zip(sent, received, reasons))
    return rejected, fates
