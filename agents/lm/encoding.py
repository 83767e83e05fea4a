"""What ``GRPOAgent.learn`` trains on: groups re-encoded as tokens, then packed in micro-batches.

Every completion, local or external, arrives as text and is re-encoded with the learning
agent's own tokenizer, under the chat prompt its group was written for (the group's system
prompt, its question as the user turn):

:func:`encode_group`
    the prompt ids and each completion's ids. A completion *ended* when its re-encoding plus
    EOS fits in ``max_new_tokens``: it gets EOS appended. One that needs more was cut, and
    is kept to its first ``max_new_tokens`` tokens without EOS, so that an answer cut short
    does not teach the model to stop there. This is what generation produced (TRL trains on
    the same ids; genrl re-tokenizes without any EOS): an own completion that stopped at EOS
    re-encodes to fewer than ``max_new_tokens`` tokens, one cut by the limit to exactly
    ``max_new_tokens``. Edge cases: a text that re-encodes to exactly ``max_new_tokens``
    tokens counts as cut even when another node's model ended it there (this agent's own
    ``generate`` would have cut it), and a tokenizer whose decode-then-encode round trip
    changes the token count is judged by the re-encoding.
:func:`training_set`
    the completions to forward (:class:`Row`) and the loss's normaliser, following
    ``GRPOConfig.count_zero_advantage_groups`` and ``mask_truncated_completions``.
    Completions whose loss is zero whatever the weights (advantage 0 with ``beta`` 0, or
    masked as truncated) get no forward pass but still count where the reference counts them.
:func:`micro_batches`
    rows sorted by length and padded into ``(S, P + C)`` tensors: prompts left-padded,
    completions right-padded, position ids counting real tokens only.

With ``GRPOConfig.off_policy_correction`` other than ``"none"``, :func:`training_set` also
gives each row of an external group the sender's per-token log-probs, when the group's packet
carries them and its token ids are exactly this agent's encoding of every completion (what
:func:`encode_group` trains on, EOS included); any other external group is trained with
ratio 1 and counted in ``TrainingSet.uncorrected_groups`` (:mod:`agents.lm.off_policy`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from agents.lm.generation import chat_prompt_ids
from agents.lm.grpo_config import GRPOConfig

GROUP_FIELDS = ("question", "system_prompt", "completions", "advantages")
"""What ``learn`` reads of a group: the chat prompt's two parts, the texts, their advantages."""


class EncodedGroup(NamedTuple):
    """A group as token ids under one agent's tokenizer."""

    prompt: list[int]  #: the chat prompt: the group's system prompt and question
    completions: list[list[int]]  #: each completion's ids, + EOS where it ended
    ended: list[bool]  #: whether each completion ended within ``max_new_tokens``


def encode_group(
    tokenizer: PreTrainedTokenizerBase, group: Mapping[str, Any], *, max_new_tokens: int,
    eos_id: int,
) -> EncodedGroup:
    """Re-encode a group's prompt and completions; see the module docstring for "ended"."""
    prompt = chat_prompt_ids(tokenizer, group["system_prompt"], group["question"])
    encoded = tokenizer(list(group["completions"]), add_special_tokens=False)["input_ids"]
    ended = [len(ids) < max_new_tokens for ids in encoded]
    completions = [ids + [eos_id] if done else ids[:max_new_tokens]
                   for ids, done in zip(encoded, ended)]
    return EncodedGroup(prompt, completions, ended)


class Row(NamedTuple):
    """One completion to train on."""

    prompt: list[int]
    completion: list[int]
    advantage: float
    #: the sender's log-prob of each completion token (an external group whose token ids
    #: match), for the off-policy correction and the rescue gate; None: ratio 1
    sender_logprobs: np.ndarray | None = None
    rescue: bool = False  #: of a rescue group (``GRPOConfig.rescue_gate`` applies)


@dataclass
class TrainingSet:
    """The completions ``learn`` forwards and the denominators of its loss."""

    rows: list[Row] = field(default_factory=list)  #: completions with a non-zero loss term
    tokens: int = 0  #: completion tokens in the normaliser (``"token"``)
    sequences: int = 0  #: completions in the normaliser (``"sequence"``)
    groups: int = 0  #: groups with at least one row
    truncated: int = 0  #: completions in the normaliser's groups that did not end
    corrected_groups: int = 0  #: external groups whose rows carry the sender's log-probs
    #: external groups trained with ratio 1 under a correction: no log-probs or token ids
    #: sent, or ids that differ from this agent's encoding
    uncorrected_groups: int = 0
    rescue_groups: int = 0  #: rescue groups (peers' groups in place of own all-fail ones)
    #: of those, groups a rescue gate could not weigh: no usable sender log-probs
    rescue_ungated_groups: int = 0


def training_set(
    batch: Sequence[Mapping[str, Any]], encode: Callable[[Mapping[str, Any]], EncodedGroup],
    config: GRPOConfig,
) -> TrainingSet:
    """Rows and normaliser of a GRPO step on ``batch``; ``encode`` is the agent's encoder."""
    out = TrainingSet()
    for group in batch:
        missing = [k for k in GROUP_FIELDS if k not in group]
        if missing:
            raise ValueError(f"group {group.get('id')!r} has no {missing}: a training group "
                             f"needs {list(GROUP_FIELDS)} (sapo_env.types.Group)")
        advantages = np.asarray(group["advantages"], dtype=np.float32)
        if not config.count_zero_advantage_groups and not advantages.any():
            continue
        prompt, completions, ended = encode(group)
        if len(advantages) != len(completions):
            raise ValueError(
                f"group {group.get('id')!r} has {len(completions)} completions but "
                f"{len(advantages)} advantages"
            )
        senders = _senders(group, completions, config, out)
        rescue = bool(group.get("rescue", False))
        trained = False
        for completion, done, advantage, sender in zip(completions, ended, advantages, senders):
            out.sequences += 1
            out.truncated += not done
            if config.mask_truncated_completions and not done:
                continue  # its mask is zero: out of the loss and of the token count
            out.tokens += len(completion)
            # With A = 0 the clipped term is 0 for every ratio; only a KL term can remain.
            if advantage != 0 or config.beta > 0:
                out.rows.append(Row(prompt, completion, float(advantage), sender, rescue))
                trained = True
        out.groups += trained
    return out


def _senders(group: Mapping[str, Any], completions: Sequence[Sequence[int]],
             config: GRPOConfig, out: TrainingSet) -> Sequence[np.ndarray | None]:
    """Per completion, the sender's log-probs where a correction or the rescue gate reads
    them (an external group whose ids match); counts the group in ``out``."""
    nothing: list[np.ndarray | None] = [None] * len(completions)
    if group.get("local", True):
        return nothing
    correct = config.off_policy_correction != "none"
    gate = bool(group.get("rescue", False))
    out.rescue_groups += gate
    gate = gate and config.rescue_gate != "none"
    if not (correct or gate):
        return nothing
    usable = sender_logprobs(group, completions)
    if correct:
        out.corrected_groups += usable is not None
        out.uncorrected_groups += usable is None
    out.rescue_ungated_groups += gate and usable is None
    return usable or nothing


def sender_logprobs(group: Mapping[str, Any], completions: Sequence[Sequence[int]]
                    ) -> list[np.ndarray] | None:
    """The group's per-completion sender log-probs if it carries log-probs and token ids and
    every completion's ids (this agent's encoding) are exactly the sender's; else None."""
    logprobs, token_ids = group.get("logprobs"), group.get("token_ids")
    if logprobs is None or token_ids is None or len(token_ids) != len(completions) \
            or len(logprobs) != len(completions):
        return None
    for ids, sent, lp in zip(completions, token_ids, logprobs):
        if len(ids) != len(sent) or len(lp) != len(ids) \
                or not np.array_equal(np.asarray(ids), np.asarray(sent)):
            return None
    return [np.asarray(lp, dtype=np.float32) for lp in logprobs]


@dataclass
class MicroBatch:
    """One micro-batch on the device: left-padded prompts, right-padded completions."""

    input_ids: torch.Tensor  # (S, P + C)
    attention_mask: torch.Tensor  # (S, P + C)
    position_ids: torch.Tensor  # (S, P + C)
    completion_mask: torch.Tensor  # (S, C)
    advantages: torch.Tensor  # (S,)
    completion_width: int  # C
    #: (S, C) the sender's log-probs of rows that carry them (0 elsewhere), which rows do
    #: (S,), and which rows are of rescue groups (S,); all None when no row carries them
    sender_logprobs: torch.Tensor | None = None
    corrected: torch.Tensor | None = None
    rescue: torch.Tensor | None = None


def by_length(rows: Sequence[Row]) -> list[Row]:
    """``rows`` in the order :func:`micro_batches` packs them: by total length, stably."""
    # Similar lengths together: less padding, same loss (the normaliser is global).
    return sorted(rows, key=lambda r: len(r.prompt) + len(r.completion))


def micro_batches(rows: Sequence[Row], size: int, pad_id: int,
                  device: torch.device) -> list[MicroBatch]:
    """``rows`` in micro-batches of at most ``size``, on ``device``."""
    rows = by_length(rows)
    batches = []
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        p_width = max(len(r.prompt) for r in chunk)
        c_width = max(len(r.completion) for r in chunk)
        ids = torch.full((len(chunk), p_width + c_width), pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        completion_mask = torch.zeros((len(chunk), c_width), dtype=torch.bool)
        for i, (prompt, completion, *_) in enumerate(chunk):
            ids[i, p_width - len(prompt) : p_width] = torch.tensor(prompt)
            ids[i, p_width : p_width + len(completion)] = torch.tensor(completion)
            attention[i, p_width - len(prompt) : p_width + len(completion)] = 1
            completion_mask[i, : len(completion)] = True
        # Positions count real tokens only, so left padding does not shift them.
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        batches.append(MicroBatch(
            ids.to(device), attention.to(device), positions.to(device),
            completion_mask.to(device),
            torch.tensor([r.advantage for r in chunk], dtype=torch.float32, device=device),
            c_width, *_sender_tensors(chunk, c_width, device),
        ))
    return batches


def _sender_tensors(rows: Sequence[Row], width: int, device: torch.device
                    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``(S, C)`` sender log-probs (0 where none), ``(S,)`` which rows carry them and
    ``(S,)`` which rows are of rescue groups; all None when no row carries log-probs (the
    plain GRPO step)."""
    if all(r.sender_logprobs is None for r in rows):
        return None, None, None
    values = torch.zeros((len(rows), width), dtype=torch.float32)
    corrected = torch.zeros(len(rows), dtype=torch.bool)
    for i, row in enumerate(rows):
        if row.sender_logprobs is not None:
            values[i, : len(row.sender_logprobs)] = torch.from_numpy(
                np.array(row.sender_logprobs, dtype=np.float32))
            corrected[i] = True
    rescue = torch.tensor([r.rescue for r in rows], dtype=torch.bool)
    return values.to(device), corrected.to(device), rescue.to(device)
