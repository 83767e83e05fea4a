"""A round's publication, packet by packet: what was sent, and what became of each packet.

Each round the env builds the groups its nodes share, sends them (forged on the way by the
transport adversaries of ``SwarmConfig.adversaries``:
:func:`sapo_env.defenses.transport_attacks.tamper`), reads every packet through the packet
schema and the sender check (:func:`sapo_env.defenses.packet_schema.receive_each`), screens
what passed with the verifier when ``SwarmConfig.verify_packets`` is on
(:meth:`sapo_env.defenses.packets.PacketVerifier.verdicts`) and pools the rest.
:func:`publish_round` is that pipeline; it returns the rejections counted by sender (what
``infos[node]["rejected_groups"]`` and reputation read) and a :class:`PacketFate` per packet.

**What a flood costs.** The checks run cheapest first, so that a packet is refused before
its costly parts are read: the cap on each sender's packets (:data:`MAX_PACKETS_PER_QUESTION`
for each question it was dealt; the rest are refused unread), the schema and the sender check
without the sender's log-probs, the verifier's checks on the question alone (``not_dealt``,
``duplicate``); then the log-probs of what still stands (parsing a packet's lists costs
milliseconds), then re-derivation and re-scoring. Reading log-probs is charged to the sender's
scoring budget (``SwarmConfig.scoring_budget``) like re-scoring its packets, and once that is
spent its packets that carry them are refused unread (``scoring_timeout``), so a flood of any
size costs a step at most its senders' budgets (the round's ``round_score_budget``), plus one
packet's parsing per sender.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import monotonic
from typing import Any

from sapo_env.config import SwarmConfig
from sapo_env.defenses.packet_schema import has_token_fields, parse_token_fields, receive_each
from sapo_env.defenses.packets import PacketVerifier
from sapo_env.defenses.transport_attacks import tamper
from sapo_env.pool import SharedPool
from sapo_env.scoring.answers import AnswerExtractor
from sapo_env.scoring.guard import no_failures
from sapo_env.types import Group

ACCEPTED = "accepted"
"""The status of a packet the pool took; any other status is the reason it was refused (of
``packet_schema.ADMIT_REASONS`` or ``packets.REJECT_REASONS``)."""
TOO_MANY = "too_many"
"""The status of a packet beyond its sender's cap (:data:`MAX_PACKETS_PER_QUESTION`),
refused unread."""
MAX_PACKETS_PER_QUESTION = 64
"""Packets a node may send a round for each question it was dealt that round: an honest node
sends one (its group); the packets beyond, in the order sent, are refused unread
(:data:`TOO_MANY`) and counted against it. The cap bounds what a flood costs a receiver
before any check: reading each packet's fields."""
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
    """``"accepted"`` (:data:`ACCEPTED`) or the reason it was refused: ``"too_many"`` (the
    cap), ``"malformed"``, ``"oversized"``, ``"impersonation"`` (the schema and the sender
    check), ``"rewards"``, ``"not_dealt"``, ``"duplicate"``, ``"scoring_timeout"``, ... (the
    verifier's ``REJECT_REASONS``, and ``scoring_timeout`` for log-probs left unread)."""
    group: Group | None
    """The packet as a validated group wherever the schema and the sender check passed it
    (accepted, or refused after: its rewards and advantages are then what it claimed, and it
    has its sender's log-probs only if they were read, never when it was refused before
    that); the pool's own read-only record when accepted. None when refused before."""
    raw: str | None = None
    """Only where ``group`` is None, but for ``"too_many"`` (None): at most ``RAW_CHARS`` of
    the ``repr`` of what was sent (:func:`safe_repr`), for the record; never parsed."""

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
    ``dealt``: each node's refs of this round's questions (the packet cap, and the verifier's
    ``not_dealt``); reading a packet's log-probs and re-scoring it are charged to its sender's
    ``spent`` and ``failures``."""
    sent = tamper(built, config.adversaries, extract, config.advantage_eps)
    within = _within_cap(sent, dealt)
    read = iter(receive_each([p for p, ok in zip(sent, within) if ok], built, round_, config,
                             token_fields=False))
    received = [next(read) if ok else TOO_MANY for ok in within]
    reasons: list[str | None] = [g if isinstance(g, str) else None for g in received]
    staying = [g for g in pool.groups if pool.in_window(g["round"], round_)]
    if verifier is not None:  # first the checks that cost nothing, then the log-probs
        _judge(reasons, received, lambda groups: verifier.cheap_verdicts(
            groups, built, staying, dealt))
    _read_token_fields(sent, received, reasons, config, spent, failures)
    if verifier is not None:
        _judge(reasons, received, lambda groups: verifier.verdicts(
            groups, built, staying, dealt, spent=spent, failures=failures, checked=True))
    pool.publish(round_, [g for g, reason in zip(received, reasons) if reason is None])
    # counted as admit, then screen, counted them: schema refusals first, in order sent
    rejected = Counter(sender for (sender, _), g in zip(sent, received) if isinstance(g, str))
    rejected.update(sender for (sender, _), g, reason in zip(sent, received, reasons)
                    if reason is not None and not isinstance(g, str))
    fates = tuple(
        PacketFate(sender, reason or ACCEPTED, None if isinstance(group, str) else group,
                   safe_repr(value) if isinstance(group, str) and group != TOO_MANY else None)
        for (sender, value), group, reason in zip(sent, received, reasons))
    return rejected, fates


def _within_cap(sent: Sequence[tuple[str, Any]], dealt: Mapping[str, Sequence[Any]]
                ) -> list[bool]:
    """Per packet, whether it is within its sender's first ``MAX_PACKETS_PER_QUESTION`` times
    as many packets as it was dealt questions this round (in the order sent)."""
    counts: Counter = Counter()
    within = []
    for sender, _ in sent:
        counts[sender] += 1
        within.append(counts[sender] <= MAX_PACKETS_PER_QUESTION * len(dealt.get(sender, ())))
    return within


def _judge(reasons: list[str | None], received: Sequence[Group | str],
           verdicts: Callable[[list[Group]], list[str | None]]) -> None:
    """``verdicts`` on the packets no check has refused yet, written into ``reasons``."""
    standing = [k for k, reason in enumerate(reasons) if reason is None]
    for k, verdict in zip(standing, verdicts([received[k] for k in standing])):
        reasons[k] = verdict


def _read_token_fields(sent: Sequence[tuple[str, Any]], received: list[Group | str],
                       reasons: list[str | None], config: SwarmConfig,
                       spent: dict[str, float], failures: dict[str, dict[str, int]]) -> None:
    """Read the log-probs (and token ids) of each packet still standing that carries them, in
    the order sent, into its group in ``received``, each charged to its sender's scoring budget
    (``config.scoring_budget``, its ``spent``): once that is spent, its packets that carry them
    are refused unread (``scoring_timeout``, their completions counted in its ``failures``
    under ``budget``), as re-scoring refuses the packets it has no time left for."""
    budget, length = config.scoring_budget, config.completions_per_question
    for k, ((sender, value), group) in enumerate(zip(sent, received)):
        if reasons[k] is not None or group is value or not has_token_fields(value):
            continue  # refused, the env's own group (read when it was built), or none to read
        if budget is not None and spent.get(sender, 0.0) >= budget:
            reasons[k] = "scoring_timeout"
            failures.setdefault(sender, no_failures())["budget"] += length
            continue
        started = monotonic()
        fields = parse_token_fields(value, length, config.max_completion_chars)
        spent[sender] = spent.get(sender, 0.0) + monotonic() - started
        if isinstance(fields, str):
            reasons[k] = fields
        else:
            received[k] = {**group, **fields}  # type: ignore[dict-item]
