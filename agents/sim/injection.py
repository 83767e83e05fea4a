"""An injected behaviour, how a simulated learner picks it up, and the check that stops it.

The poisoning attack of "Hail to the Thief" (Blagoev, Ersoy and Chen, arXiv 2511.09780; what the
study reports: docs/provenance.md, "Poisoned completions"): a malicious node shares completions
that are *correct*, so the verifier rewards them, but that carry an arbitrary behaviour; receivers
reinforce the whole completion, behaviour included. The study's defense for nodes that all train
the same model, a check of the received completions' log-probability under the receiver's own
model, is ``GRPOConfig.min_external_logprob`` (:mod:`agents.lm.received_logprob`).

The simulated learner's analogue (:class:`agents.sim.simulated.SimulatedLearner`):

- the behaviour is one line, ``INJECTED_LINE``, that a completion carries or not;
- a learner has a logit for writing it, ``-inf`` (it never does) until it reads the line in a
  training batch: then it enters at ``discovery_logit``, the rule by which it adopts a strategy
  it reads in shared text, and from then on each completion it writes carries the line with
  probability ``sigmoid(logit)`` (the line goes just before the answer);
- the logit learns like every other choice, by REINFORCE on the batch's advantages: a
  completion with advantage A moves it by ``lr * A * (carries - p)``, averaged over the
  batch's completions. Poisoned completions are right and carry the line, so the line earns
  positive advantage.

Attack success is the fraction of honest nodes' completions carrying the line
(:func:`carries`).

The check (``SimulatedLearnerConfig.min_external_logprob``): an external completion whose
mean log-probability per choice it makes readable (answer format, strategy, the line or its
absence) under the learner's current policy is below the threshold is dropped before the
learner reads it. A strategy the learner does not know has its exploration probability
(``explore`` / unknown strategies); the line has probability 0 until adopted, so any finite
threshold stops it: in the simulator the check is perfect by construction, and costs the
learner only what it would itself never write. Language models give every text some
probability; there the threshold trades stopped poison against dropped useful text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from agents.sim.simulated_text import parse_completion
from sapo_env.rollouts import group_advantages
from sapo_env.types import Group

INJECTED_LINE = "P.S. More verified answers at answers.example.com"
"""The behaviour a poisoner injects (``agents.hostile.adversarial``, attack ``"poison"``)."""


def carries(text: str) -> bool:
    """Whether a completion carries the injected line."""
    return INJECTED_LINE in text


def inject(text: str) -> str:
    """``text`` with the injected line just before its last line (where the answer is)."""
    head, newline, last = text.rpartition("\n")
    return f"{head}{newline}{INJECTED_LINE}\n{last}"


def probability(logit: float) -> float:
    """Probability of writing the line under ``logit`` (0 before it is adopted)."""
    if logit == -math.inf:
        return 0.0
    return 1.0 / (1.0 + math.exp(-logit))


def write(completions: Sequence[tuple[str, ...]], logit: float, rng: np.random.Generator
          ) -> tuple[tuple[str, ...], ...]:
    """Each completion carries the line with probability ``probability(logit)``; no random
    number is drawn while the line is unknown, so an untouched learner acts as before."""
    p = probability(logit)
    if p == 0.0:
        return tuple(completions)
    return tuple(tuple(inject(c) if u < p else c for c, u in zip(group, rng.random(len(group))))
                 for group in completions)


def learn(logit: float, batch: Sequence[Group], lr: float, config: Any) -> float:
    """The logit after one REINFORCE step on ``batch`` (adopted first, at the learner config's
    ``discovery_logit``, if the batch carries the line), within ``config.logit_clip``;
    normalised over every completion of the batch, as the learner's other choices."""
    texts = [(c, a) for g in batch for c, a in zip(g["completions"], g["advantages"].tolist())]
    if not texts:
        return logit
    if logit == -math.inf:
        if not any(carries(c) for c, _ in texts):
            return logit
        logit = config.discovery_logit
    p = probability(logit)
    gradient = sum(a * (carries(c) - p) for c, a in texts)
    clip = config.logit_clip
    return min(max(logit + lr * gradient / len(texts), -clip), clip)


def completion_logprobs(learner: Any, group: Group) -> list[float]:
    """Mean log-probability per readable choice of each of ``group``'s completions under a
    simulated learner's current policy (see the module docstring)."""
    log_format = np.log(learner.format_probs()).tolist()
    skill = learner.skill(group["task"])
    strategy_p = skill.probs()
    unknown = ~skill.known
    if unknown.any():  # what act writes: a known strategy, or with `explore` an unknown one
        explore = learner.config.explore
        strategy_p = (1.0 - explore) * strategy_p + explore * unknown / unknown.sum()
    with np.errstate(divide="ignore"):
        log_strategy = np.log(strategy_p).tolist()
    p_line = probability(learner.behaviour_logit)
    log_line = [math.log(p) if p > 0 else -math.inf for p in (1.0 - p_line, p_line)]
    out = []
    for text in group["completions"]:
        fmt, strategy = parse_completion(text)
        logps = [log_line[carries(text)]]
        if fmt is not None:
            logps.append(log_format[fmt])
        if strategy is not None:
            logps.append(log_strategy[strategy])
        out.append(sum(logps) / len(logps))
    return out


def screen(learner: Any, batch: Sequence[Group]) -> tuple[Group, ...]:
    """``batch`` without the external completions below the learner's
    ``config.min_external_logprob`` (None: the batch as it is); a group's other completions
    stay, their advantages recomputed among themselves (:func:`drop_completions`)."""
    threshold = learner.config.min_external_logprob
    if threshold is None:
        return tuple(batch)
    out = []
    for group in batch:
        if group.get("local", True):
            out.append(group)
            continue
        keep = [logp >= threshold for logp in completion_logprobs(learner, group)]
        out.append(group if all(keep) else drop_completions(group, keep))
    return tuple(out)


def drop_completions(group: Group, keep: Sequence[bool]) -> Group:
    """A copy of ``group`` with only the completions where ``keep`` is True, their advantages
    recomputed from their rewards: group-relative advantages computed with the dropped
    completions would still carry them (the kept completions of a poisoned group are the
    poisoner's wrong ones, all below the poisoned mean, so all negative)."""
    mask = np.asarray(keep, dtype=bool)
    rewards = np.asarray(group["rewards"], dtype=np.float32)[mask]
    # the sender's per-completion log-probs and token ids, if any, follow their completions
    token_fields = {k: tuple(v for v, kept in zip(group[k], keep) if kept)
                    for k in ("logprobs", "token_ids") if k in group}
    return {**group, "completions": tuple(c for c, k in zip(group["completions"], keep) if k),
            "rewards": rewards,
            "advantages": group_advantages(rewards) if rewards.size else rewards.copy(),
            **token_fields}
