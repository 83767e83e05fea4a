"""Hostile nodes on the wire: the packets a node that builds its own could send.

In this env a node's action carries only text (completions, which groups to share, its next
J): the env draws the questions, scores every completion and builds the published groups, so
in-process a node can forge nothing but text. In a real decentralized swarm a node builds and
sends its own packets (question, answer, ref, completions, rewards, advantages), and the
paper's reference code trusted them. ``SwarmConfig.adversaries`` models that machine: the
groups a named node publishes are rewritten as it would send them, after the env built them
and before they enter the pool, so every receiver gets the forged packet
(``SwarmConfig.verify_packets`` is the defense, :mod:`sapo_env.defenses.packets`).

Each attack is a function here, registered by :func:`transport_attack` as a ``packet`` attack
of :mod:`sapo_env.attacks` (``TRANSPORT_ATTACK_NAMES`` lists them); its docstring says what it
sends and what stops it (``verify`` is ``SwarmConfig.verify_packets``; the packet schema and the
sender check of :mod:`sapo_env.defenses.packet_schema` are always on).

**The hook** (an explicit interface, called by the env once a round): :func:`tamper` gets
every group the env built to publish this round, in publication order, and sends in place of
each adversary's groups what its attack returns (any values: a hostile machine sends what it
likes), each paired with the node that sent it (:data:`Sent`: what a transport knows,
whatever a packet claims; :func:`sapo_env.defenses.packet_schema.admit` takes these pairs). An
attack takes one of two forms: a :data:`GroupAttack` (``per="group"``, in
``TRANSPORT_ATTACKS``) rewrites each group on its own; a :data:`NodeAttack` (``per="node"``, in
``NODE_ATTACKS``) is called once with all the node's groups of the round and what it received
from the others (the same round's groups of every other node). A node that shares nothing this
round sends nothing. Attacks are deterministic (one that draws, draws from a generator seeded
by the round and the node's name), so runs stay reproducible.

What a transport adversary cannot do here: read the pool beyond the round it is sent in (a
replay of older rounds meets the same ``not_dealt`` check), or change what it trains on
itself. Attacks that need no transport (garbage text, confident wrong answers, free riding,
poisoned completions, answers slow to score) are agents: :mod:`agents.hostile.adversarial`.

Adding an attack is one function, in this module or any other::

    @transport_attack("my_attack", per="node", does="what it sends", models="what it models")
    def my_attack(own, received, extract, eps):  # its docstring: what stops it
        return [*own, *received]

Example::

    >>> import sapo_env
    >>> from sapo_env.defenses.transport_attacks import assign
    >>> assign(10, 0.3, "forge_rewards")                   # the last 30% of 10 nodes
    {'node_7': 'forge_rewards', 'node_8': 'forge_rewards', 'node_9': 'forge_rewards'}
    >>> env = sapo_env.parallel_env(n=10, adversaries=assign(10, 0.3, "forge_rewards"))
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal, TypeVar

import numpy as np

from sapo_env.attacks import TRANSPORT_ATTACK_NAMES, Attack, TransportAttack, register_attack
from sapo_env.config import MAX_QUESTIONS_PER_STREAM, SwarmConfig
from sapo_env.registry import caller_place
from sapo_env.rollouts import group_advantages
from sapo_env.scoring.answers import AnswerExtractor
from sapo_env.tasks import held_out_questions, redraw, reference_answer
from sapo_env.types import Group

GroupAttack = Callable[[Group, AnswerExtractor, float], list[Any]]
"""A per-group attack: ``(group, extract, eps) -> packets`` sent in place of ``group``
(``extract`` is the swarm's answer format, ``eps`` its advantage epsilon)."""
NodeAttack = Callable[[Sequence[Group], Sequence[Group], AnswerExtractor, float], list[Any]]
"""A per-node attack: ``(own, received, extract, eps) -> packets``. ``own`` are the groups the
env built for the node this round (all of one source, at least one), ``received`` every other
node's groups of the round; the packets are sent in place of ``own``, in order."""
TRANSPORT_ATTACKS: dict[str, GroupAttack] = {}
"""The registered per-group attacks by name, as :func:`tamper` calls them."""
NODE_ATTACKS: dict[str, NodeAttack] = {}
"""The registered per-node attacks by name, as :func:`tamper` calls them."""
F = TypeVar("F", bound=Callable[..., list[Any]])


def transport_attack(name: str, *, per: Literal["group", "node"], does: str, models: str,
                     experiment_env: Mapping[str, Any] | None = None) -> Callable[[F], F]:
    """A decorator registering the function as the ``packet`` attack ``name`` (an
    :class:`sapo_env.attacks.Attack`): a :data:`GroupAttack` (``per="group"``) or a
    :data:`NodeAttack` (``per="node"``), which :func:`tamper` then calls. ``does`` and
    ``models`` are the docs table's one-line cells; ``experiment_env`` the ``SwarmConfig``
    settings the attack experiment's runs of it add."""
    if per not in ("group", "node"):
        raise ValueError(f"attack {name!r}: per must be 'group' or 'node', got {per!r}")
    place = caller_place()

    def register(function: F) -> F:
        register_attack(Attack(name, "packet", does, models,
                               experiment_env=experiment_env or {}), place)
        (TRANSPORT_ATTACKS if per == "group" else NODE_ATTACKS)[name] = function
        return function

    return register


SPAM_COPIES = 8
"""Times ``duplicate_spam`` publishes each group (the original and 7 copies): at 30% spammers
among 10 nodes, about three quarters of the pool."""
FLOOD_GROUPS = 200  #: extra groups ``flood`` sends a round, on questions it chose
SYBILS = 3  #: made-up names under which ``sybil`` sends each of its groups again
ABSURD_ROUNDS: tuple[Any, ...] = (-1, 2**63, 10**18, 1.5, float("inf"))
"""The rounds ``future_round``'s copies claim (its originals claim ``10**9``)."""
HELD_OUT_QUESTIONS = 64  #: held-out questions ``held_out`` cycles through
SLOW_COPIES = 64
"""Copies of each group ``slow_packets`` sends: 2,048 slow answers a round at 4 questions of 8
completions, about 1 s to re-score in full (0.56 ms an answer over the paper's nine tasks)."""
SLOW_ANSWERS: tuple[str, ...] = (
    "1e999999999", "9**9**9**9", "10^10^10^10", "(" * 1000 + "1" + ")" * 1000,
    "[" * 1000 + "]" * 1000, "9" * 2000, "1/" * 1000 + "1", "sqrt(" * 340 + "2" + ")" * 340,
    "-(" * 680 + "1" + ")" * 680, "2**(2**(2**(2**(2**64))))", "A or " * 400 + "B")
"""Answers built to be slow to score (``slow_packets``' and ``agents.hostile.adversarial``'s
``scoring_dos``), each within the default ``max_answer_chars`` (2048) so that it is parsed:
the kinds of input that cost naive scorers seconds, gigabytes or the stack."""
SLOW_PACKETS_ROUND_BUDGET = 1.0
"""Seconds of scoring a round gets in the attack experiment's ``slow_packets`` runs
(``round_score_budget``; ``sapo_experiments.attack.config`` says why)."""
FRAMING_JUNK = 1000
"""Junk packets ``{"source": victim}`` ``framing`` sends a round (the red team's count)."""
Sent = tuple[str, Any]
"""A packet as the transport delivers it: ``(sender, value)``, the node it came from and what
it sent (any value; its claimed ``source`` is only a claim)."""


class _LyingStr(str):
    """A string that claims to be one character long, whatever it holds."""

    def __len__(self) -> int:
        return 1


MALFORMED: dict[str, Callable[[Group], dict[str, Any]]] = {
    "round_str": lambda g: {**g, "round": str(g["round"])},
    "round_none": lambda g: {**g, "round": None},
    "rewards_str": lambda g: {**g, "rewards": [str(r) for r in g["rewards"].tolist()]},
    "source_list": lambda g: {**g, "source": [g["source"]]},
    "question_array": lambda g: {**g, "question": np.array(list(g["question"]))},
    "answer_array": lambda g: {**g, "answer": np.array([g["answer"]])},
    "task_array": lambda g: {**g, "task": np.array([g["task"]])},
    "system_prompt_array": lambda g: {**g, "system_prompt": np.array([g["system_prompt"]])},
    "huge_completion": lambda g: {**g, "completions": ("x" * 10_000_000,
                                                       *g["completions"][1:])},
    "lying_str": lambda g: {**g, "completions": (_LyingStr("y" * 100_000),
                                                 *g["completions"][1:])},
}
"""``malformed``'s packets, each one field broken: ``huge_completion`` is ``oversized`` to the
schema, the others ``malformed``, but for the two rounds: the schema never reads a claimed
round, so those packets are stamped with the round they arrived in and pass."""


def adversary_nodes(nodes: int | Sequence[str], fraction: float) -> list[str]:
    """The nodes a fraction of a swarm makes adversarial: the last ``round(fraction * n)`` of
    ``nodes`` (a count, for ``node_0 …``, or the names), so honest nodes keep the low names."""
    names = [f"node_{i}" for i in range(nodes)] if isinstance(nodes, int) else list(nodes)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
            or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction of adversaries must be a number in [0, 1], got {fraction!r}")
    count = int(round(fraction * len(names)))
    return names[len(names) - count:] if count else []


def chosen_adversaries(names: Sequence[str], fraction: float | None,
                       nodes: Sequence[str] | None) -> list[str]:
    """The adversaries among ``names``: :func:`adversary_nodes`' for ``fraction``, or the
    named ``nodes``; exactly one of the two is given, and every named node is in ``names``."""
    if (fraction is None) == (nodes is None):
        raise ValueError("give either fraction (of the nodes, from the last) or nodes (names)")
    chosen = adversary_nodes(names, fraction) if fraction is not None else list(nodes)
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise ValueError(f"nodes {unknown} are not in the swarm; the nodes are {list(names)}")
    return chosen


def assign(nodes: int | Sequence[str], fraction: float, attack: TransportAttack
           ) -> dict[str, TransportAttack]:
    """``SwarmConfig.adversaries`` for a fraction of the nodes (see :func:`adversary_nodes`)."""
    if attack not in TRANSPORT_ATTACK_NAMES:
        raise ValueError(f"attack must be one of {sorted(TRANSPORT_ATTACK_NAMES)}, got "
                         f"{attack!r}")
    return {name: attack for name in adversary_nodes(nodes, fraction)}


def _claimed(group: Group, rewards: np.ndarray, eps: float, **changes) -> Group:
    rewards = np.asarray(rewards, dtype=np.float32)
    advantages = group_advantages(rewards, eps)
    rewards.flags.writeable = False
    advantages.flags.writeable = False
    return {**group, **changes, "rewards": rewards, "advantages": advantages}


@transport_attack(
    "forge_rewards", per="group",
    does="claimed rewards inverted (1 - score), advantages recomputed: wrong answers presented "
         "as right",
    models="a node lying about its scores")
def forge_rewards(group: Group, extract: AnswerExtractor, eps: float) -> list[Group]:
    """Wrong answers presented as right: every claimed reward is inverted (1 - the verifier's
    score) and the advantages recomputed from the claims, so a receiver that trusts the packet
    reinforces what the verifier rejected and penalises what it accepted. Question, answer and
    ref stay true. A group the verifier scored all equal stays all equal (no signal either
    way). Stopped by verify (``rewards``)."""
    return [_claimed(group, 1.0 - group["rewards"], eps)]


@transport_attack(
    "forge_metadata", per="group",
    does="`answer` replaced by the most common wrong answer among the completions, rewards "
         "recomputed as exact matches against it",
    models="a self-consistent lie that a receiver re-scoring against the packet's own answer "
           "accepts")
def forge_metadata(group: Group, extract: AnswerExtractor, eps: float) -> list[Group]:
    """A self-consistent lie: ``answer`` becomes the most common wrong answer among the group's
    completions (as the swarm's answer format reads them), and rewards and advantages are
    recomputed as an exact match against it. A receiver that re-scores against the packet's
    own ``answer`` accepts it; one that re-derives the answer from ``ref`` does not
    (``answer``). With no wrong answer to claim, the answer is altered anyway and every claimed
    reward is 0. Forged ``ref`` and ``question`` fields meet the same check."""
    answers = [extract(c) for c in group["completions"]]
    wrong = Counter(a for a, r in zip(answers, group["rewards"].tolist())
                    if a is not None and r < 1.0 and a != group["answer"])
    if wrong:
        forged = wrong.most_common(1)[0][0]
    else:
        forged = f"{group['answer']} (corrected)"
    claimed = [1.0 if a == forged else 0.0 for a in answers]
    return [_claimed(group, claimed, eps, answer=forged)]


@transport_attack(
    "duplicate_spam", per="group",
    does=f"each group published {SPAM_COPIES} times, the copies under new ids",
    models="flooding the pool")
def duplicate_spam(group: Group, extract: AnswerExtractor, eps: float) -> list[Group]:
    """The group and ``SPAM_COPIES - 1`` copies under new ids (``node_3/r12/q0/copy1`` ...): the
    spammer floods the pool, so receivers draw its groups instead of the others'. Stopped by
    verify (``duplicate``)."""
    return [group] + [{**group, "id": f"{group['id']}/copy{k}"} for k in range(1, SPAM_COPIES)]


@transport_attack(
    "slow_packets", per="group",
    does=f"in place of each group, {SLOW_COPIES} copies (new ids) whose completions are the "
         "answers `scoring_dos` writes, claiming the group's rewards: true in every field a "
         "cheap check reads, so every copy reaches re-scoring",
    models="eating the verifier's time: one node's packets re-scored by every receiver",
    experiment_env={"round_score_budget": SLOW_PACKETS_ROUND_BUDGET})
def slow_packets(group: Group, extract: AnswerExtractor, eps: float) -> list[Group]:
    """In place of the group, ``SLOW_COPIES`` copies (new ids) whose completions are answers
    built to be as slow to score as possible (``SLOW_ANSWERS``, in turn, in ``<answer>`` tags),
    claiming the group's rewards: each copy is true in every field a cheap check reads, so all
    reach re-scoring (a rejected copy makes no other a duplicate), made to eat the verifier's
    time. Stopped by verify within the sender's budget: re-scoring a packet is charged to its
    sender's ``node_score_budget``, and what that does not cover is rejected
    (``scoring_timeout``, the sender's ``scoring_failures["budget"]``), so each slow sender
    costs a step at most its budget. A copy re-scored in time is rejected as ``rewards`` (its
    answers score 0), or, claiming a group's all-0 rewards, passes once (then
    ``duplicate``)."""
    L = len(group["completions"])
    return [{**group, "id": f"{group['id']}/slow{k}", "completions": tuple(
        f"<answer>{SLOW_ANSWERS[(k * L + j) % len(SLOW_ANSWERS)]}</answer>" for j in range(L))}
        for k in range(SLOW_COPIES)]


@transport_attack(
    "replay", per="node",
    does="sends nothing of its own: republishes every other node's group of the round under "
         "its own name",
    models="a node that generates nothing and passes others' work off as its own")
def replay(own: Sequence[Group], received: Sequence[Group], extract: AnswerExtractor,
           eps: float) -> list[Any]:
    """The others' groups under the node's name, none of its own: it republishes every other
    node's group of the round, as it received them, under its own name and new ids
    (``node_9/replay/node_0/r3/q1``). Stopped by verify (``not_dealt``: it was not dealt those
    questions)."""
    source = own[0]["source"]
    return [{**g, "source": source, "id": f"{source}/replay/{g['id']}"} for g in received]


def consistent_group(template: Group, ref: Mapping[str, Any], id_: str,
                     extract: AnswerExtractor, eps: float) -> Group | None:
    """A group on the question at ``ref`` built as the env builds one: question and answer
    re-derived, completions (the first half the right answer in ``<answer>`` tags, the rest
    ``template``'s) scored by reasoning-gym, advantages computed; source, round and system
    prompt from ``template``. None if reasoning-gym cannot generate the question."""
    try:
        drawn = redraw(dict(ref))
    except Exception:  # noqa: BLE001 (a generator bug at an index nobody was dealt)
        return None
    answer = reference_answer(drawn.entry)
    completions = template["completions"]
    right = math.ceil(len(completions) / 2)
    completions = (f"<answer>{answer}</answer>",) * right + tuple(completions[right:])
    return _claimed(template, drawn.score(completions, extract), eps, id=id_,
                    task=drawn.question["task"], question=drawn.question["prompt"],
                    answer=answer, ref=drawn.question["ref"], completions=completions)


@transport_attack(
    "flood", per="node",
    does=f"its own groups plus {FLOOD_GROUPS} a round on questions it chose (its tasks' "
         "datasets, indices it draws), each built like the env's: answer re-derived, "
         "completions (half the right answer in tags) scored by reasoning-gym, advantages "
         "computed",
    models="flooding the pool with internally consistent groups nobody asked for")
def flood(own: Sequence[Group], received: Sequence[Group], extract: AnswerExtractor,
          eps: float) -> list[Any]:
    """Its groups, then ``FLOOD_GROUPS`` more a round on questions it chose itself (its own
    tasks' datasets at indices it draws from a generator seeded by the round and its name),
    each a :func:`consistent_group`, so every packet is internally consistent and passes
    re-scoring. Stopped by verify (``not_dealt``)."""
    source, round_ = own[0]["source"], int(own[0]["round"])
    rng = np.random.default_rng(np.random.SeedSequence([round_, zlib.crc32(source.encode())]))
    indices = rng.integers(0, MAX_QUESTIONS_PER_STREAM, FLOOD_GROUPS).tolist()
    built = (consistent_group(own[k % len(own)], {**own[k % len(own)]["ref"], "index": i},
                              f"{source}/r{round_}/flood{k}", extract, eps)
             for k, i in enumerate(indices))
    return [*own, *(g for g in built if g is not None)]


@transport_attack(
    "sybil", per="node",
    does=f"its own groups, plus each again under {SYBILS} made-up names (`node_9~sybil1`)",
    models="sybil identities")
def sybil(own: Sequence[Group], received: Sequence[Group], extract: AnswerExtractor,
          eps: float) -> list[Any]:
    """Its groups, and each again under ``SYBILS`` made-up names (``node_9~sybil1``) that the
    swarm never dealt anything. Stopped by the sender check (``impersonation``: the name is not
    the node that sent it), with or without verify; verify alone would also stop it
    (``not_dealt``). A real deployment needs authenticated senders (signed packets or
    authenticated connections) for that check to hold on the wire."""
    copies = [{**g, "source": f"{g['source']}~sybil{k}", "id": f"{g['id']}~sybil{k}"}
              for k in range(1, SYBILS + 1) for g in own]
    return [*own, *copies]


@lru_cache(maxsize=1)
def held_out_refs() -> tuple[Mapping[str, Any], ...]:
    """The refs of the paper's tasks' held-out evaluation set (``held_out_questions`` of the
    default ``SwarmConfig``, ``HELD_OUT_QUESTIONS`` of them)."""
    return tuple(d.question["ref"] for d in held_out_questions(SwarmConfig(), HELD_OUT_QUESTIONS))


@transport_attack(
    "held_out", per="node",
    does="in place of its groups, consistent groups on held-out evaluation questions "
         "(`sapo_env.tasks.held_out_questions` of the paper's tasks)",
    models="contaminating the evaluation set")
def held_out(own: Sequence[Group], received: Sequence[Group], extract: AnswerExtractor,
             eps: float) -> list[Any]:
    """One :func:`consistent_group` on a held-out evaluation question (``held_out_refs``) in
    place of each of its groups, so receivers would train on the evaluation set. Stopped by
    verify (``not_dealt``: no node is ever dealt a held-out question)."""
    refs = held_out_refs()
    round_ = int(own[0]["round"])
    built = (consistent_group(g, refs[(round_ * len(own) + k) % len(refs)],
                              f"{g['id']}/held_out", extract, eps) for k, g in enumerate(own))
    return [g for g in built if g is not None]


@transport_attack(
    "future_round", per="node",
    does="its groups claiming `round=10**9`, and a copy of each claiming -1, 2**63, 10**18, "
         "1.5 and inf",
    models="packets meant to outlive the pool window")
def future_round(own: Sequence[Group], received: Sequence[Group], extract: AnswerExtractor,
                 eps: float) -> list[Any]:
    """Its groups claiming round ``10**9``, then a copy of each per ``ABSURD_ROUNDS`` (in the
    past, far future, not an int), to outlive the pool window. The receiver stamps the round a
    packet arrived in (the schema never reads the claim), so the originals are pooled as this
    round's groups and leave with the window; the copies are stopped by verify
    (``duplicate``)."""
    copies = [{**g, "round": r, "id": f"{g['id']}/round{k}"}
              for k, r in enumerate(ABSURD_ROUNDS) for g in own]
    return [*({**g, "round": 10**9} for g in own), *copies]


@transport_attack(
    "malformed", per="node",
    does="in place of its groups, type-broken packets: round a `str` or None, rewards a list "
         "of `str`, `source` a list, numpy arrays as `question`/`answer`/`task`/"
         "`system_prompt`, a 10 MB completion, a `str` subclass lying about `__len__`",
    models="a broken or hostile sender probing the parser")
def malformed(own: Sequence[Group], received: Sequence[Group], extract: AnswerExtractor,
              eps: float) -> list[Any]:
    """Every ``MALFORMED`` packet, built from its groups in turn, in place of them. Stopped by
    the schema (``malformed``, ``oversized``), with or without verify, counted against the node
    that sent them and never raised (the two broken rounds are simply replaced by the
    receiver's)."""
    return [broken(own[k % len(own)]) for k, broken in enumerate(MALFORMED.values())]


def victim_of(received: Sequence[Group]) -> str | None:
    """The node ``impersonation`` and ``framing`` name: the first other node that published
    this round (``node_0`` in a full swarm whose adversaries are the last nodes), or None."""
    return received[0]["source"] if received else None


@transport_attack(
    "impersonation", per="node",
    does="in place of its groups, the same groups claiming an honest node's name (`source` and "
         "id; the first other node of the round, `node_0` when the adversaries are the last "
         "nodes)",
    models="passing one's packets off as another node's: past a per-source cap, into the "
           "victim's record")
def impersonation(own: Sequence[Group], received: Sequence[Group], extract: AnswerExtractor,
                  eps: float) -> list[Any]:
    """Its groups claiming the victim's name (:func:`victim_of`; ``source`` and id), in place of
    its own. Where a claimed name was believed, its groups would count as the victim's (past a
    per-source cap, into the victim's reputation, and under verify as ``not_dealt`` rejections
    charged to the victim). Stopped by the sender check of
    :func:`sapo_env.defenses.packet_schema.admit` (``impersonation``), with or without verify:
    the transport knows who sent a packet, and a claimed ``source`` that is not the sender is
    refused and charged to the sender."""
    victim = victim_of(received)
    if victim is None:
        return list(own)
    source = own[0]["source"]
    return [{**g, "source": victim, "id": g["id"].replace(source, victim, 1)} for g in own]


@transport_attack(
    "framing", per="node",
    does="its own groups, then, in the victim's name, the victim's groups of the round with "
         f"inverted rewards and {FRAMING_JUNK:,} junk packets `{{\"source\": victim}}`",
    models="getting rejections charged to a victim so that reputation sampling turns against "
           "it")
def framing(own: Sequence[Group], received: Sequence[Group], extract: AnswerExtractor,
            eps: float) -> list[Any]:
    """Its groups (true, under its own name), then, claiming its victim's name (as
    ``impersonation`` picks it): every group the victim published this round with inverted
    rewards, and ``FRAMING_JUNK`` junk packets ``{"source": victim}``. Where rejections were
    charged to the name a packet claims, reputation sampling would turn against the victim
    while the framer kept a clean record. Stopped by the sender check: every packet is refused
    (``malformed``, ``impersonation``, or ``too_many`` past the framer's packet cap) and charged
    to the framer, whose reputation then drops instead."""
    victim = victim_of(received)
    if victim is None:
        return list(own)
    forged = [forge_rewards(g, extract, eps)[0] for g in received if g["source"] == victim]
    return [*own, *forged, *({"source": victim} for _ in range(FRAMING_JUNK))]


def tamper(groups: Sequence[Group], adversaries: Mapping[str, str] | None,
           extract: AnswerExtractor, eps: float) -> list[Sent]:
    """The packets as sent, each with its sender (see "The hook" in the module docstring):
    each adversary's groups replaced by what its attack sends, where they stood (a per-node
    attack's packets where the node's first group stood), sent by the adversary; everyone
    else's groups unchanged, the same objects, in order, sent by their source."""
    if not adversaries:
        return [(g["source"], g) for g in groups]
    by_source: dict[str, list[Group]] = {}
    for group in groups:
        by_source.setdefault(group["source"], []).append(group)
    sent: list[Sent] = []
    for group in groups:
        source = group["source"]
        attack = adversaries.get(source)
        if not attack:
            sent.append((source, group))
        elif attack not in NODE_ATTACKS:
            sent.extend((source, p) for p in TRANSPORT_ATTACKS[attack](group, extract, eps))
        elif group is by_source[source][0]:
            received = [g for g in groups if g["source"] != source]
            sent.extend((source, p) for p in NODE_ATTACKS[attack](by_source[source], received,
                                                                   extract, eps))
    return sent
