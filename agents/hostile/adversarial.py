"""Hostile nodes made of text: agents that attack a swarm through what they write and share.

``AdversarialAgent(inner, attack, seed)`` plays a node with an attack; ``inner`` (any agent)
is the node underneath, which still learns from the batches the env gives it and, where the
attack says so, writes some of the text. An attack here needs no forged packet: the env scores
and publishes the text as it does any node's (forged packets are ``SwarmConfig.adversaries``,
:mod:`sapo_env.defenses.transport_attacks`). The attacks (``AGENT_ATTACKS``):

``garbage``
    every completion is random: empty, a few hundred random characters (printable and not,
    with a stray ``<answer>`` tag now and then) or 4,000 of them. Models a broken or hostile
    node. It scores 0, so its groups carry no signal and the zero-advantage filter keeps them
    out of training sets; what it costs the swarm is the groups it does not contribute.
``wrong_answers``
    every completion is a confident wrong answer in ``<answer>`` tags (the right answer
    re-derived from the question's ``ref``, then changed as
    :func:`agents.sim.simulated.wrong_answer` does). Models a node that is sure and wrong.
    Partial credit aside, its groups score all 0 and are filtered like garbage; reasoning-gym's
    partial credit lets a few through.
``free_rider``
    asks for J = ``train_budget`` every round and shares nothing: it answers no question (under
    the paper's protocol) and only takes. Models the commons problem; no packet check can
    see it, it only shrinks the pool (set its round-0 J with ``SwarmConfig.num_external`` to
    ride from the start).
``poison``
    the study "Hail to the Thief" (arXiv 2511.09780): half of each group's completions (the
    first ceil(L/2)) are the *right* answer in tags carrying an injected line
    (:data:`agents.sim.injection.INJECTED_LINE`), the rest the inner node's own. The verifier
    rewards the poisoned ones, so receivers reinforce the line with them; packet checks,
    reputation and caps cannot tell them from honest groups. Attack success is the share of
    honest nodes' completions that carry the line (:func:`agents.sim.injection.carries`); the
    defense is the receiver's own log-probability check
    (``SimulatedLearnerConfig.min_external_logprob``, ``GRPOConfig.min_external_logprob``).
``misleading``
    every group pairs right answers written with the most careless approach (a guess) with
    wrong answers written with a careful one (step by step), all in ``<answer>`` tags. The
    verifier scores them honestly, so receivers' GRPO steps reinforce the careless approach
    and penalise the careful one: a group that is correct, informative and new, which no
    packet check, reputation or cap can tell from an honest one, and that teaches what makes
    answers wrong. It names only approaches every simulated learner knows from the start:
    naming the best one ("verify") would teach it to nodes that had not found it, which
    helps them (measured: docs/ratio-policies.md). Models a node that shares rollouts chosen
    to mislead; what limits it is how much of the pool a node takes (J).
``scoring_dos``
    every completion is an answer built to be as slow to score as possible (``SLOW_ANSWERS``,
    shared with the transport attack ``slow_packets``: an exponent of a billion digits, power
    towers, nesting just under the answer size limit, huge integers, long fractions), to stall
    the round for everyone. What stops it: the env's scoring guard
    (:mod:`sapo_env.scoring.guard`): the safe parsers bound numbers before computing them, deep
    nesting fails as ``recursion``, each completion has a time limit (``timeout``) and each node
    a scoring budget per round (``budget``, ``SwarmConfig.node_score_budget``), so the node
    stalls a round by at most its budget.

``garbage``, ``wrong_answers``, ``misleading`` and ``scoring_dos`` keep the J in force
(``SwarmConfig.num_external`` sets it), ``poison`` asks for the inner node's; every attack
learns through the inner node. ``active=[(start, stop), ...]`` limits the attack to those
rounds (half-open ranges): in the others the inner node plays honestly, as a node that turns
hostile, or an on-off attacker that hides between bursts, would. Randomness comes from
``seed`` through one ``numpy.random.SeedSequence`` child per round, so a run is reproducible
and a checkpoint needs only the inner node's state.

Example::

    from agents.hostile.adversarial import adversarial_swarm
    from agents.sim.simulated import simulated_swarm

    nodes = adversarial_swarm(simulated_swarm(10, seed=0), "poison", fraction=0.3, seed=1)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from agents.sim.injection import INJECTED_LINE
from agents.sim.simulated_text import STRATEGY_INDEX, TEMPLATES, wrong_answer
from agents.wrappers.wrapper import AgentWrapper
from sapo_env.attacks import Attack, register_attack
from sapo_env.defenses.transport_attacks import SLOW_ANSWERS, chosen_adversaries
from sapo_env.registry import caller_place
from sapo_env.tasks import reference_answer, resolve
from sapo_env.types import Action, Observation

AgentAttack = Literal["garbage", "wrong_answers", "free_rider", "poison", "misleading",
                      "scoring_dos"]
AGENT_ATTACKS: tuple[str, ...] = ("garbage", "wrong_answers", "free_rider", "poison",
                                  "misleading", "scoring_dos")
HUGE_COMPLETION_CHARS = 4000  #: ``garbage``'s longest text (the env's default limit: 16,384)
_PRINTABLE = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789 .,;:!?()[]{}<>/=+-*\n"))
_ODD = np.array(list("\u00e9\u00df\u2200\u2227\u00ac\u2192\u00bd\u03c0\u4e2d\t\u200b\U0001f916"))


class AdversarialAgent(AgentWrapper):
    """A node that attacks the swarm through its text (see the module docstring).

    Args:
        inner: the agent underneath (``act``/``learn``); it learns every round, writes the
            unpoisoned half of ``poison``'s groups and, under a fixed question count,
            ``free_rider``'s unshared answers.
        attack: one of ``AGENT_ATTACKS``.
        seed: an int or a ``numpy.random.SeedSequence``: the attack's random text.
        active: the rounds of the attack, as half-open ``(start, stop)`` ranges (None: every
            round); in the others ``inner`` plays.
    """

    def __init__(self, inner: Any, attack: AgentAttack, seed: int | np.random.SeedSequence = 0,
                 active: Sequence[tuple[int, int]] | None = None):
        if attack not in AGENT_ATTACKS:
            raise ValueError(f"attack must be one of {list(AGENT_ATTACKS)}, got {attack!r}")
        super().__init__(inner)
        self.attack = attack
        self.active = None if active is None else _check_active(active)
        self._seed = seed if isinstance(seed, np.random.SeedSequence) \
            else np.random.SeedSequence(seed)

    def _rng(self, round_: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(
            self._seed.entropy, spawn_key=(*self._seed.spawn_key, max(int(round_), 0))))

    def attacking(self, round_: int) -> bool:
        """Whether the node attacks in round ``round_``."""
        return self.active is None or any(a <= round_ < b for a, b in self.active)

    def act(self, observation: Observation) -> Action:
        questions = observation["questions"]
        L = int(observation["completions_per_question"])
        if not self.attacking(int(observation["round"])):
            return self.inner.act(observation)
        if self.attack == "free_rider":
            action = self.inner.act(observation) if questions else {"completions": ()}
            return {"completions": action["completions"],
                    "num_external": int(observation["train_budget"]),
                    "share": (0,) * len(questions)}
        rng = self._rng(observation["round"])
        if self.attack == "garbage":
            completions = tuple(tuple(_garbage(rng) for _ in range(L)) for _ in questions)
            return {"completions": completions, "num_external": observation["num_external"]}
        if self.attack == "wrong_answers":
            completions = tuple(tuple(
                f"I am certain of this.\n<answer>{wrong_answer(_answer(q), u)}</answer>"
                for u in rng.random(L).tolist()) for q in questions)
            return {"completions": completions, "num_external": observation["num_external"]}
        if self.attack == "misleading":
            right = math.ceil(L / 2)
            completions = tuple(
                (_CARELESS.format(answer),) * right + tuple(
                    _CAREFUL.format(wrong_answer(answer, u))
                    for u in rng.random(L - right).tolist())
                for answer in map(_answer, questions))
            return {"completions": completions, "num_external": observation["num_external"]}
        if self.attack == "scoring_dos":
            picks = rng.integers(len(SLOW_ANSWERS), size=(len(questions), L)).tolist()
            completions = tuple(tuple(f"<answer>{SLOW_ANSWERS[k]}</answer>" for k in row)
                                for row in picks)
            return {"completions": completions, "num_external": observation["num_external"]}
        action = self.inner.act(observation)  # poison
        poisoned = math.ceil(L / 2)
        completions = tuple(
            (f"{INJECTED_LINE}\n<answer>{_answer(q)}</answer>",) * poisoned + tuple(own[poisoned:])
            for q, own in zip(questions, action["completions"]))
        return {**action, "completions": completions}


_CARELESS = TEMPLATES[0][STRATEGY_INDEX["guess"]]  #: misleading's right answers: tagged guesses
_CAREFUL = TEMPLATES[0][STRATEGY_INDEX["step-by-step"]]  #: and its wrong ones, worked through


def _check_active(active: Any) -> tuple[tuple[int, int], ...]:
    """``active`` as a tuple of ``(start, stop)`` round ranges, each 0 <= start < stop."""
    def is_round(r: Any) -> bool:
        return isinstance(r, (int, np.integer)) and not isinstance(r, bool) and r >= 0

    ranges = tuple(tuple(r) if isinstance(r, (tuple, list)) else r for r in active)
    if not all(isinstance(r, tuple) and len(r) == 2 and is_round(r[0]) and is_round(r[1])
               and r[0] < r[1] for r in ranges):
        raise ValueError(f"active must be (start, stop) round ranges with 0 <= start < stop, "
                         f"got {active!r}")
    return tuple((int(a), int(b)) for a, b in ranges)


def _answer(question: Mapping[str, Any]) -> str:
    return reference_answer(resolve(question["ref"]))


def _garbage(rng: np.random.Generator) -> str:
    kind = int(rng.integers(4))
    if kind == 0:
        return ""
    length = HUGE_COMPLETION_CHARS if kind == 3 else int(rng.integers(1, 300))
    alphabet = _ODD if kind == 2 else _PRINTABLE
    text = "".join(rng.choice(alphabet, size=length).tolist())
    return f"<answer>{text}" if kind == 2 else text


def adversarial_swarm(agents: Mapping[str, Any], attack: AgentAttack,
                      fraction: float | None = None, nodes: Sequence[str] | None = None,
                      seed: int | np.random.SeedSequence = 0,
                      active: Sequence[tuple[int, int]] | None = None) -> dict[str, Any]:
    """``agents`` with some nodes wrapped in ``AdversarialAgent(agent, attack, active=...)``:
    the last ``round(fraction * n)`` of them (as
    ``sapo_env.defenses.transport_attacks.adversary_nodes`` picks them), or the named ``nodes``.
    Each adversary draws from its own child of ``seed``."""
    names = list(agents)
    chosen = chosen_adversaries(names, fraction, nodes)
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    streams = dict(zip(names, seq.spawn(len(names))))
    return {a: AdversarialAgent(agent, attack, streams[a], active) if a in chosen else agent
            for a, agent in agents.items()}


def _hostile(agents: Mapping[str, Any], attack: str, nodes: Sequence[str],
             seed: np.random.SeedSequence) -> dict[str, Any]:
    return adversarial_swarm(agents, attack, nodes=nodes, seed=seed)


def _text_attack(name: str, does: str, models: str, **harness: Any) -> None:
    """Register ``name`` as a ``text`` attack of :mod:`sapo_env.attacks`."""
    register_attack(Attack(name, "text", does, models, swarm=_hostile, **harness), caller_place())


_text_attack("garbage", f"empty, random (some outside ASCII, stray `<answer>` tags) or "
             f"{HUGE_COMPLETION_CHARS:,}-character completions", "a broken or hostile node")
_text_attack("wrong_answers", "confident wrong answers in `<answer>` tags",
             "a node that is sure and wrong")
_text_attack("free_rider", "J = `train_budget`, shares nothing", "taking from the commons",
             experiment_j=8)
_text_attack("poison", "half of each group is the right answer in tags carrying an injected "
             f"line (`{INJECTED_LINE}`), the rest the node's own",
             '"Hail to the Thief" (Blagoev, Ersoy and Chen, arXiv 2511.09780): correct '
             "completions that carry a behaviour")
_text_attack("misleading", "right answers written as careless guesses, wrong answers worked "
             "step by step, all in `<answer>` tags",
             "rollouts chosen to mislead: correct, informative and new, they teach what makes "
             "answers wrong", in_grid=False)
_text_attack("scoring_dos", "every completion an answer built to be slow to score "
             "(`1e999999999`, power towers, nesting just under the 2,048-character answer "
             "limit, huge integers, long fractions)", "stalling the round for everyone")
