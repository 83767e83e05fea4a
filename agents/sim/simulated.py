"""A simulated learner: a cheap stand-in for a language-model node of a SAPO swarm.

``SimulatedLearner`` answers the env's real reasoning-gym questions with real text, which the
env scores with its real verifier, and learns only from the training batches the env hands it.
Acting and learning cost well under a millisecond per node and round (BENCHMARKS.md,
"Simulated swarm"): fast enough for thousands of rounds on a laptop, to study sampling policies
(I:J ratios, filters, pool windows) and to teach.

What it models
--------------
A node's "policy" is a pair of softmax distributions over discrete, named choices:

- an **answer format** (``FORMATS``): wrap the answer in ``<answer>`` tags (the only format the
  default verifier reads), say "the answer is X" (read by the lenient extractor), or hedge
  ("I think it is X, but ...", read by neither);
- per task, a **solution strategy** (``STRATEGIES``, from a guess to solving and checking) whose
  quality is the probability that the answer it produces is right.

Each completion is one sample of (format, strategy): the learner writes the strategy's name and
a sentence of "reasoning", then the right answer (re-derived from the question's ``ref``) with
the strategy's probability, otherwise a plausible wrong one, in the chosen format. By default
the strategies are right 5%, 20%, 40% and 90% of the time, and a node knows only the first
three: the best one, "verify", is an "Aha" it must stumble on (rarely, ``explore``) or read in
another node's shared text. A strategy just discovered enters the policy at
``discovery_logit`` relative to the node's favourite; at the calibrated default that is above
the favourite, so a strategy seen working is adopted at once and reinforcement decides whether
it stays.

Learning is REINFORCE with the groups' GRPO advantages, like a GRPO step whose importance ratio
is 1 (the paper's setting: one optimisation step per batch, no KL term): the learner *re-encodes*
every completion of its batch, local or external, by parsing the text back into the (format,
strategy) that would have produced it, and moves the logits of those choices by
``lr * advantage * (onehot - probability)``, averaged over all completions of the batch (groups
with zero advantage add nothing but still count in the average, as tokens do in GRPO's loss).
Text written by another node with a strategy this node does not know is learnable: reading it
makes the strategy known. Text no sim learner wrote (a language model's) still teaches the
answer format when it has tags or an "answer is" phrase.

Calibration: ``lr`` (isolated learning) and ``discovery_logit`` (learning from others) are the
two free parameters, fitted by ``benchmarks/calibrate_sim.py`` to the paper's 8/0 and 4/4
cumulative rewards only; its 6/2 and 2/6 are predictions, reported beside the paper's in
BENCHMARKS.md ("Simulated learner calibration"). Every other default was set by hand before
the calibration and is not fitted.

Three mechanisms are options, off by default (the calibrated default does not use them; the
calibration script's ``--set`` shows what each does once the fit has absorbed it):
``difficulty_spread`` (questions of one task differ in difficulty, so many groups carry no
advantage at any skill), ``forget_rate`` (skills a node does not practise drift back to where
they started) and ``off_policy_power`` (text the node itself would seldom write teaches it
less).

What it does not model
----------------------
It is not evidence about language models. It does no reasoning: correctness is a coin flip
whose bias is the strategy's quality (and, with ``difficulty_spread``, the question's
difficulty). It has no tokens, so sequence length, credit assignment inside a completion,
clipping and KL have no analogue; by default learning from another node's text is only as hard
as parsing it (``off_policy_power`` is a one-number stand-in for a real model finding external
text improbable), and nothing is forgotten except through the gradient (``forget_rate`` is a
one-number stand-in for forgetting). It picks up a poisoner's injected line the way it adopts a
strategy it reads (:mod:`agents.sim.injection`). Strategies are a handful of named options
shared by all nodes, not open-ended skills. Fitted to two numbers of one paper run, it reproduces
those two by construction and says nothing more about language models than its predictions of the
others show. Refitted to the tiny transformer learners (``calibrate_sim.py --target tiny``), it
cannot make sharing cost as much as it costs them, nor reproduce either control (BENCHMARKS.md).

Example::

    import sapo_env.runtime
    from agents.sim.simulated import simulated_swarm

    env = sapo_env.parallel_env(n=8)
    agents = simulated_swarm(env.possible_agents, seed=0, num_external=4)   # the 4/4 setting
    history = sapo_env.runtime.run(env, agents, rounds=200)
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from agents.plain_state import PlainState
from agents.sim import injection
from agents.sim.simulated_config import SimulatedLearnerConfig
from agents.sim.simulated_text import (
    FORMATS,
    STRATEGIES,
    TEMPLATES,
    parse_completion,
    wrong_answer,
)
from sapo_env.tasks import reference_answer, resolve
from sapo_env.types import Action, Group, Observation, QuestionRef

_SKILL = ("logits", "known", "start")  # the arrays of a task skill, as saved


@dataclass
class _TaskSkill:
    """Strategy logits for one task and which strategies the node can produce."""

    logits: np.ndarray
    known: np.ndarray  # bool mask over STRATEGIES
    start: np.ndarray  # what forgetting returns to: the first logits, or a discovery's seed

    def probs(self) -> np.ndarray:
        """Softmax over the known strategies (unknown ones have probability 0)."""
        z = np.where(self.known, self.logits, -np.inf)
        z = np.exp(z - z.max())
        return z / z.sum()


def question_difficulty(ref: QuestionRef) -> float:
    """A question's difficulty on a standard logistic scale, a pure function of its ref: the
    same for every node and every run (``difficulty_spread`` scales it)."""
    key = f"{ref['task']}/{ref['seed']}/{ref['index']}".encode()
    u = (zlib.crc32(key) + 0.5) / 2.0**32
    return math.log(u / (1.0 - u))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(inf) is inf and 1 / inf is 0: the right limit
        return 1.0 / (1.0 + np.exp(-x))


class SimulatedLearner(PlainState):
    """A simulated SAPO node: latent answer-format and strategy skills, learned by re-encoding.

    Args:
        config: hyperparameters (``SimulatedLearnerConfig()`` if None).
        seed: an int, a ``numpy.random.SeedSequence`` or None (fresh entropy). Starting skills,
            the learning-rate jitter and every sampled completion derive from it.

    ``act`` answers with ``config.num_external`` external groups asked for; ``learn`` returns
    ``loss`` (the surrogate ``-mean(advantage * log prob)``), ``readable_fraction`` (of the
    batch's completions), and the skills: ``tag_prob``, ``expected_quality`` (mean over tasks
    seen of the right-answer probability under the strategy policy), ``known_strategies`` and
    ``strategy_<name>`` (probability of each strategy, mean over tasks seen).

    ``state_dict()`` / ``load_state_dict(state)``: its skills and random state as plain data
    (a learner built with the same config continues exactly where the saved one was).
    """

    def __init__(
        self,
        config: SimulatedLearnerConfig | None = None,
        seed: int | np.random.SeedSequence | None = None,
    ):
        self.config = config if config is not None else SimulatedLearnerConfig()
        seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        skill_seq, self._act_seq = seq.spawn(2)
        self._skill_rng = np.random.default_rng(skill_seq)
        c = self.config
        self.lr = c.lr * float(np.exp(self._skill_rng.normal(0.0, c.lr_jitter)))
        rest = (1.0 - c.start_tag_prob) / (len(FORMATS) - 1)
        start = np.log([c.start_tag_prob] + [rest] * (len(FORMATS) - 1))
        self.format_logits = start + self._skill_rng.normal(0.0, c.start_jitter, len(FORMATS))
        self._format_start = self.format_logits.copy()
        self._known_start = np.array([s in c.known_strategies for s in STRATEGIES])
        self._quality = np.asarray(c.strategy_quality)
        with np.errstate(divide="ignore"):  # qualities 0 and 1 stay certain: logits -inf, inf
            self._quality_logit = np.log(self._quality) - np.log1p(-self._quality)
        self.skills: dict[str, _TaskSkill] = {}
        self._act_round = -1
        self._act_calls = 0
        self.behaviour_logit = -math.inf  # the injected line (agents.sim.injection): never read

    # --- skills ------------------------------------------------------------------------------
    def skill(self, task: str) -> _TaskSkill:
        """The strategy skill of a task, drawn from the node's starting distribution when first
        met (tasks are met in the env's deterministic order, so this stays reproducible)."""
        skill = self.skills.get(task)
        if skill is None:
            logits = self._skill_rng.normal(0.0, self.config.start_jitter, len(STRATEGIES))
            skill = _TaskSkill(logits=logits, known=self._known_start.copy(), start=logits.copy())
            self.skills[task] = skill
        return skill

    def format_probs(self) -> np.ndarray:
        z = np.exp(self.format_logits - self.format_logits.max())
        return z / z.sum()

    # --- checkpoints -------------------------------------------------------------------------
    _state_fields = ("lr", "format_logits", "_format_start", "_skill_rng", "_act_seq",
                     "_act_round", "_act_calls", "behaviour_logit")

    def state_dict(self) -> dict[str, Any]:
        """Everything the learner has learned or drawn, as plain, picklable data."""
        return super().state_dict() | {"skills": {t: {k: getattr(s, k).copy() for k in _SKILL}
                                                  for t, s in self.skills.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict`; ``ValueError`` naming the field, and nothing
        changed, when it does not fit."""
        saved = state.get("skills") if isinstance(state, Mapping) else None
        shape = (len(STRATEGIES),)
        if not isinstance(saved, Mapping) or not all(
                isinstance(s, Mapping) and set(s) == set(_SKILL)
                and all(np.shape(s[k]) == shape for k in _SKILL) for s in saved.values()):
            raise ValueError(f"SimulatedLearner state['skills'] must map tasks to dicts of "
                             f"arrays {list(_SKILL)} of shape {shape}, got {saved!r:.80}")
        skills = {t: _TaskSkill(np.array(s["logits"], dtype=float),
                                np.array(s["known"], dtype=bool), np.array(s["start"], dtype=float))
                  for t, s in saved.items()}
        super().load_state_dict({k: v for k, v in state.items() if k != "skills"})
        self.skills = skills

    # --- acting ------------------------------------------------------------------------------
    def _rng_for(self, round_: int) -> np.random.Generator:
        # One stream per (round, call within the round): an extra act call (a held-out
        # evaluation) never shifts the randomness of the training rounds that follow.
        if round_ != self._act_round:
            self._act_round, self._act_calls = round_, 0
        key = (max(int(round_), 0), self._act_calls)
        self._act_calls += 1
        return np.random.default_rng(
            np.random.SeedSequence(self._act_seq.entropy, spawn_key=self._act_seq.spawn_key + key)
        )

    @staticmethod
    def answer_for(ref: QuestionRef) -> str:
        """The right answer of a question, re-derived from its ref with reasoning-gym (the env
        shares the entries it drew, so this is a cache lookup for this round's questions)."""
        return reference_answer(resolve(ref))

    def act(self, observation: Observation) -> Action:
        L = int(observation["completions_per_question"])
        budget = int(observation["train_budget"])
        questions = observation["questions"]
        rng = self._rng_for(int(observation["round"]))
        if not questions:  # J = train_budget: nothing to answer this round, only to consume
            return {"completions": (), "num_external": min(self.config.num_external, budget)}
        # every random number of the round in one draw: format, strategy, explore, right, wrong
        slots = max(len(questions), budget) if self.config.slot_aligned_draws else len(questions)
        u = rng.random((5, slots, L))[:, :len(questions)]
        fmt_cdf = np.cumsum(self.format_probs())
        formats = (u[0, :, :, None] * fmt_cdf[-1] >= fmt_cdf).sum(-1)
        skills = [self.skill(q["task"]) for q in questions]
        cdf = np.cumsum([s.probs() for s in skills], axis=1)  # (B, S), inverse-CDF sampling
        strategies = (u[1, :, :, None] * cdf[:, -1:, None] >= cdf[:, None, :]).sum(-1)
        np.minimum(strategies, len(STRATEGIES) - 1, out=strategies)  # rounding at the top
        if self.config.explore > 0:
            for k, i in zip(*np.nonzero(u[2] < self.config.explore)):
                unknown = np.flatnonzero(~skills[k].known)
                if unknown.size:  # the fraction of u below explore picks the unknown strategy
                    pick = int(u[2, k, i] / self.config.explore * unknown.size)
                    strategies[k, i] = unknown[min(pick, unknown.size - 1)]
        if self.config.difficulty_spread > 0.0:
            d = np.array([question_difficulty(q["ref"]) for q in questions])
            d *= self.config.difficulty_spread
            right = (u[3] < _sigmoid(self._quality_logit[strategies] - d[:, None])).tolist()
        else:
            right = (u[3] < self._quality[strategies]).tolist()
        wrong_u = u[4].tolist()
        formats, strategies = formats.tolist(), strategies.tolist()
        completions = []
        for k, question in enumerate(questions):
            answer = self.answer_for(question["ref"])
            completions.append(tuple(
                TEMPLATES[f][s].format(answer if ok else wrong_answer(answer, w))
                for f, s, ok, w in zip(formats[k], strategies[k], right[k], wrong_u[k])
            ))
        return {
            "completions": injection.write(completions, self.behaviour_logit, rng),
            "num_external": min(self.config.num_external, budget),
        }

    # --- learning ----------------------------------------------------------------------------
    def learn(self, batch: Sequence[Group]) -> dict[str, float] | None:
        if not batch:
            return None
        batch = injection.screen(self, batch)  # min_external_logprob, when set
        c = self.config
        if c.forget_rate > 0.0:
            # a group without "local" came from the caller's own hands: count it as practice
            self._forget({g["task"] for g in batch if g.get("local", True)})
        # Re-encode the whole batch first: a strategy read anywhere in it is known (and has a
        # probability) before any completion is weighted by its probability.
        parsed: list[tuple[str, bool, list[tuple[int | None, int | None, float]]]] = []
        n_total = n_readable = 0
        for group in batch:
            advantages = group["advantages"].tolist()
            n_total += len(advantages)
            task = group["task"]
            rows = []
            for text, adv in zip(group["completions"], advantages):
                fmt, strategy = parse_completion(text)
                if fmt is None and strategy is None:
                    continue
                if strategy is not None:
                    self._discover(task, strategy)
                rows.append((fmt, strategy, adv))
            n_readable += len(rows)
            if rows:
                parsed.append((task, not group.get("local", True), rows))
        # The gradient of sum(w * adv * log softmax(z)[choice]) is wadv_by_choice -
        # sum(w * adv) * probs: summing weighted advantages per choice is all the
        # per-completion work there is.
        fmt_probs = self.format_probs()
        fmt_p = fmt_probs.tolist()
        strat_probs: dict[str, list[float]] = {}
        fmt_adv = [0.0] * len(FORMATS)
        strat_adv: dict[str, list[float]] = {}
        beta = c.off_policy_power
        for task, external, rows in parsed:
            task_adv = task_p = None
            for fmt, strategy, adv in rows:
                if strategy is not None and task_adv is None:  # once per group, if readable
                    task_adv = strat_adv.setdefault(task, [0.0] * len(STRATEGIES))
                    if task not in strat_probs:
                        strat_probs[task] = self.skills[task].probs().tolist()
                    task_p = strat_probs[task]
                if external and beta > 0.0:
                    p = 1.0 if fmt is None else fmt_p[fmt]
                    if strategy is not None:
                        p *= task_p[strategy]
                    adv *= p ** beta
                if fmt is not None:
                    fmt_adv[fmt] += adv
                if strategy is not None:
                    task_adv[strategy] += adv
        norm = 1.0 / max(n_total, 1)
        step = self.lr * norm
        clip = c.logit_clip
        fmt_adv_arr = np.asarray(fmt_adv)
        surrogate = -float(fmt_adv_arr @ np.log(fmt_probs))
        grad = fmt_adv_arr - fmt_adv_arr.sum() * fmt_probs
        np.clip(self.format_logits + step * grad, -clip, clip, out=self.format_logits)
        for task, adv_list in strat_adv.items():
            skill = self.skills[task]
            adv_arr = np.asarray(adv_list)
            probs = np.asarray(strat_probs[task])
            surrogate -= float(adv_arr[skill.known] @ np.log(probs[skill.known]))
            # unknown strategies have probability 0 and no advantage: their logits stay put
            grad = adv_arr - adv_arr.sum() * probs
            np.clip(skill.logits + step * grad, -clip, clip, out=skill.logits)
        self.behaviour_logit = injection.learn(self.behaviour_logit, batch, self.lr, c)
        return self.metrics() | {
            "loss": surrogate * norm,
            "readable_fraction": n_readable * norm,
        }

    def _discover(self, task: str, strategy: int) -> None:
        """Reading a strategy is learning it exists: the text shows how it is done. It starts
        unlikely, whatever the node's policy has become."""
        skill = self.skill(task)
        if skill.known[strategy]:
            return
        favourite = skill.logits[skill.known].max()
        clip = self.config.logit_clip
        skill.logits[strategy] = min(max(favourite + self.config.discovery_logit, -clip), clip)
        skill.start[strategy] = skill.logits[strategy]  # forgetting returns to the seed
        skill.known[strategy] = True

    def _forget(self, practised: set[str]) -> None:
        """One round of forgetting: every skill the node did not practise this round moves
        ``forget_rate`` of the way back to where it started."""
        keep = 1.0 - self.config.forget_rate
        if not practised:
            self.format_logits = self._format_start + keep * (self.format_logits
                                                               - self._format_start)
        for task, skill in self.skills.items():
            if task not in practised:
                skill.logits = skill.start + keep * (skill.logits - skill.start)

    def metrics(self) -> dict[str, float]:
        """Summary of the current skills (what ``learn`` reports besides the loss)."""
        out = {"tag_prob": float(self.format_probs()[0])}
        if not self.skills:
            return out
        probs = np.array([s.probs() for s in self.skills.values()])  # (tasks, strategies)
        out["expected_quality"] = float((probs @ self._quality).mean())
        out["known_strategies"] = float(np.mean([s.known.sum() for s in self.skills.values()]))
        for name, p in zip(STRATEGIES, probs.mean(axis=0).tolist()):
            out[f"strategy_{name}"] = p
        return out


def simulated_swarm(
    agents: int | Sequence[str],
    seed: int | np.random.SeedSequence | None = 0,
    config: SimulatedLearnerConfig | Mapping[str, SimulatedLearnerConfig] | None = None,
    **overrides: Any,
) -> dict[str, SimulatedLearner]:
    """One simulated learner per node, each seeded from its own child of ``seed``.

    Args:
        agents: node names (``env.possible_agents``) or a count (names ``node_0`` ...).
        seed: root seed; node k gets child k of ``SeedSequence(seed)``.
        config: one config for all nodes, or a mapping node -> config (nodes missing from it
            get the default): a heterogeneous swarm.
        **overrides: fields replaced in every node's config, e.g. ``num_external=4``.
    """
    names = [f"node_{i}" for i in range(agents)] if isinstance(agents, int) else list(agents)
    if isinstance(config, Mapping) and set(config) - set(names):
        raise ValueError(f"config names nodes that are not in the swarm: "
                         f"{sorted(set(config) - set(names))}; the nodes are {names}")
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    learners = {}
    for name, child in zip(names, seq.spawn(len(names))):
        base = config.get(name) if isinstance(config, Mapping) else config
        node_config = replace(base or SimulatedLearnerConfig(), **overrides)
        learners[name] = SimulatedLearner(node_config, child)
    return learners


__all__ = [
    "FORMATS",
    "STRATEGIES",
    "SimulatedLearner",
    "SimulatedLearnerConfig",
    "parse_completion",
    "simulated_swarm",
    "wrong_answer",
]
