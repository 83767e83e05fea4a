"""The receiver's check of external completions against its own model ("Hail to the Thief").

With ``GRPOConfig.min_external_logprob`` set, ``GRPOAgent.learn`` first scores every
completion of every *external* group under the agent's current policy: the mean
log-probability of its tokens (the tokens ``learn`` would train on, re-encoded with the
agent's tokenizer under the group's chat prompt, EOS included where the text ended), at the
sampling temperature. A completion below the threshold is dropped from its group before the
step (the group's other completions stay, their advantages recomputed among themselves:
:func:`agents.sim.injection.drop_completions`), and ``learn`` reports how many as
``rejected_completions``. The node's own groups are never checked. It
costs one forward pass without gradient per external completion.

Why: a poisoner's completions are correct, so the verifier rewards them, and they carry an injected
behaviour that the receiver then reinforces (:mod:`agents.hostile.adversarial`, attack
``"poison"``). This is the first of the two defenses of Blagoev, Ersoy and Chen (arXiv 2511.09780;
what they report: docs/provenance.md, "Poisoned completions"): checking the log-probabilities of
received completions under the receiver's own model, for a swarm whose nodes all train the same
model. No threshold is given here. Choose one from what your own samples score
(:func:`completion_logprobs` on a group of your own): an injected text the model would not write
scores far below them, while another node's text from a different model may too, so in a
heterogeneous swarm the check also drops honest text. Off by default.

:func:`sampled_token_logprobs` gives the same scores token by token, for the tokens an agent
sampled: what ``GRPOAgent.act`` shares with ``GRPOConfig.share_logprobs``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from agents.lm.encoding import Row, micro_batches
from agents.sim.injection import drop_completions


def completion_logprobs(agent: Any, groups: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
    """Per group, the mean token log-probability of each completion under ``agent``'s current
    policy (a ``GRPOAgent``)."""
    rows, sizes = [], []
    for group in groups:
        prompt, completions, _ = agent.encode_group(group)
        rows += [Row(prompt, completion, 0.0) for completion in completions]
        sizes.append(len(completions))
    if not rows:
        return [np.zeros(0) for _ in groups]
    # micro_batches orders rows by length (stably); undo it afterwards
    order = sorted(range(len(rows)), key=lambda i: len(rows[i].prompt) + len(rows[i].completion))
    means = np.empty(len(rows))
    position = 0
    with torch.no_grad():
        for batch in micro_batches(rows, agent.config.micro_batch_size, agent.pad_id,
                                   agent.device):
            logp = agent.policy_logprobs(batch).float()
            mask = batch.completion_mask.float()
            mean = (logp * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
            for value in mean.cpu().tolist():
                means[order[position]] = value
                position += 1
    return list(np.split(means, np.cumsum(sizes)[:-1]))


def screen_external(agent: Any, batch: Sequence[Mapping[str, Any]]
                    ) -> tuple[list[Mapping[str, Any]], int]:
    """``batch`` without the external completions below ``agent.config.min_external_logprob``
    (None: unchanged), and how many were dropped."""
    threshold = agent.config.min_external_logprob
    external = [i for i, g in enumerate(batch) if not g.get("local", True)]
    if threshold is None or not external:
        return list(batch), 0
    scores = completion_logprobs(agent, [batch[i] for i in external])
    screened, dropped = list(batch), 0
    for i, logps in zip(external, scores):
        keep = logps >= threshold
        if not keep.all():
            dropped += int((~keep).sum())
            screened[i] = drop_completions(batch[i], keep)
    return screened, dropped


def sampled_token_logprobs(agent: Any, prompts: Sequence[Sequence[int]],
                   tokens: Sequence[Sequence[int]]) -> list[list[float]]:
    """Per row, the log-probability of each of ``tokens`` after its prompt under ``agent``'s
    current policy (a ``GRPOAgent``, its adapter active) at the sampling temperature: what
    ``learn`` computes for the same tokens, and the sampling distribution itself when top-k
    and top-p are off. Values are ``<= 0``; a row without tokens gets ``[]``."""
    rows = [Row(list(p), list(t), 0.0) for p, t in zip(prompts, tokens)]
    filled = [i for i, r in enumerate(rows) if r.completion]
    # micro_batches packs rows by length (stably): walk them in that order
    order = sorted(filled, key=lambda i: len(rows[i].prompt) + len(rows[i].completion))
    out: list[list[float]] = [[] for _ in rows]
    position = 0
    with torch.no_grad():
        for batch in micro_batches([rows[i] for i in filled], agent.config.micro_batch_size,
                                   agent.pad_id, agent.device):
            logp = agent.policy_logprobs(batch).float().clamp(max=0.0).cpu()
            for row_logp, n in zip(logp, batch.completion_mask.sum(dim=1).tolist()):
                out[order[position]] = row_logp[:n].tolist()
                position += 1
    return out
