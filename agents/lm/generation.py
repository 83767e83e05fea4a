"""Prompts and batched sampling for language-model nodes.

``chat_prompt_ids`` builds a generation prompt with the tokenizer's chat template;
``generate_completions`` samples one completion per prompt with ``transformers``'
``generate`` and returns the new token ids up to EOS with the EOS id that ended each one (for
the token ids a node shares with its log-probs); ``generate_completion_ids``, the ids alone.

Shared prompts are encoded once. A node samples L completions of each of its B questions, so
every prompt appears L times in the batch: the prompt's keys and values are computed once per
distinct prompt, copied to its L rows, and ``generate`` starts from that cache (the pattern
transformers documents for re-using a prompt cache). The tokens are those of a plain call
(tested); the prompt pass costs 1/L as much, which on a CPU with 100-token prompts and short
completions was most of the time.

Rows can each have their own LoRA adapter (``adapter_names``, for one call that serves a whole
:func:`agents.lora_swarm`); see :mod:`agents.lm.mixed_adapters`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from jinja2 import TemplateError
from transformers import GenerationConfig, PreTrainedTokenizerBase

from agents.lm.grpo_config import GRPOConfig
from agents.lm.mixed_adapters import per_row_adapters
from agents.lm.models import autocast
from agents.lm.torch_rng import TorchRNG


def chat_prompt_ids(tokenizer: PreTrainedTokenizerBase, system: str, question: str) -> list[int]:
    """Token ids of the generation prompt: system turn, user turn, assistant header."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": question}
    ]
    if tokenizer.chat_template is None:
        # Base models ship no template; a plain layout keeps them usable.
        text = (f"{system}\n\n" if system else "") + f"{question}\n"
    else:
        try:
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        except TemplateError as error:  # some templates (Gemma's) reject a system turn
            if not system or "system" not in str(error).lower():
                raise
            merged = [{"role": "user", "content": f"{system}\n\n{question}"}]
            text = tokenizer.apply_chat_template(merged, tokenize=False, add_generation_prompt=True)
    # The template already holds every special token it wants; adding BOS again would not
    # match what the model saw in training.
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def eos_token_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS first, then the model's."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in [configured] if isinstance(configured, int) else (configured or []):
        if int(value) not in ids:
            ids.append(int(value))
    if not ids:
        raise ValueError("the tokenizer has no eos_token and the model config no eos_token_id")
    return ids


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def forward_accepts(model: torch.nn.Module, name: str) -> bool:
    """Whether the (base) model's ``forward`` takes argument ``name`` (they vary by version)."""
    return name in inspect.signature(base_model(model).forward).parameters


def sampling_config(config: GRPOConfig, pad_id: int, eos_ids: list[int]) -> GenerationConfig:
    # Every sampling knob is set explicitly: transformers fills unset ones from the model's
    # generation_config.json (Qwen2.5 ships temperature 0.7, top_k 20, repetition_penalty
    # 1.05), which would silently change the policy being trained.
    return GenerationConfig(
        do_sample=True, temperature=config.temperature, top_p=config.top_p, top_k=config.top_k,
        min_p=None, typical_p=1.0, repetition_penalty=1.0, no_repeat_ngram_size=0,
        max_new_tokens=config.max_new_tokens, min_new_tokens=0, num_beams=1,
        num_return_sequences=1, pad_token_id=pad_id, eos_token_id=eos_ids,
    )


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, attention_mask)`` with every row's last prompt token in the last column."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention[row, width - len(prompt) :] = 1
    return ids, attention


class Sampled(NamedTuple):
    """One sampled completion: its tokens up to EOS and the EOS id that ended it (None when
    it ran to ``max_new_tokens``)."""

    ids: list[int]
    stop: int | None


def generate_completions(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    config: GRPOConfig,
    pad_id: int,
    eos_ids: list[int],
    device: torch.device,
    dtype: torch.dtype,
    rng: TorchRNG,
    adapter_names: Sequence[str] | None = None,
) -> list[Sampled]:
    """Sample one completion per prompt: its new tokens up to (not including) EOS, and the EOS
    id that ended it.

    ``adapter_names`` (peft models): the adapter of each row, so one call serves many LoRA
    agents that share a base.
    """
    generation_config = sampling_config(config, pad_id, eos_ids)
    base = base_model(model)
    extra: dict[str, Any] = {}
    # transformers 4.50-4.5x replaced values equal to the global defaults (temperature 1.0)
    # with the model's own unless told not to; later versions only fill unset values.
    if "use_model_defaults" in inspect.signature(base.generate).parameters:
        extra["use_model_defaults"] = False
    step = config.generation_batch_size or max(len(prompts), 1)
    eos = torch.tensor(eos_ids, device=device)
    results: list[Sampled] = []
    model.eval()
    with rng.scope(), torch.no_grad(), autocast(device, dtype):
        for start in range(0, len(prompts), step):
            chunk = prompts[start : start + step]
            names = None if adapter_names is None else list(adapter_names[start : start + step])
            input_ids, attention = left_padded(chunk, pad_id)
            input_ids, attention = input_ids.to(device), attention.to(device)
            cache = shared_prompt_cache(model, chunk, input_ids, attention, names)
            with _routing(model, names) as routing:
                output = model.generate(
                    input_ids=input_ids, attention_mask=attention,
                    generation_config=generation_config, **cache, **routing, **extra,
                )
            new = output[:, input_ids.shape[1] :]
            ended = torch.isin(new, eos)
            # Length up to the first EOS (or everything when generation hit max_new_tokens).
            lengths = torch.where(ended.any(dim=1), ended.int().argmax(dim=1), new.shape[1])
            new = new.cpu()
            for row, n in zip(new, lengths.cpu().tolist()):
                results.append(Sampled(row[:n].tolist(),
                                       int(row[n]) if n < new.shape[1] else None))
    return results


def generate_completion_ids(model: torch.nn.Module, prompts: Sequence[Sequence[int]],
                            **sampling: Any) -> list[list[int]]:
    """:func:`generate_completions` (the same arguments), the token ids alone."""
    return [sampled.ids for sampled in generate_completions(model, prompts, **sampling)]


def shared_prompt_cache(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    adapter_names: Sequence[str] | None,
) -> dict[str, Any]:
    """``generate`` keyword arguments carrying a KV cache of every prompt but its last token,
    computed once per distinct (prompt, adapter) and copied to that prompt's rows; ``{}`` when
    no prompt repeats or the model's cache cannot be copied row-wise."""
    keys = [(tuple(p), None if adapter_names is None else adapter_names[i])
            for i, p in enumerate(prompts)]
    first_row: dict[tuple, int] = {}  # distinct key -> its first row, in order of appearance
    for row, key in enumerate(keys):
        first_row.setdefault(key, row)
    if len(first_row) == len(keys) or input_ids.shape[1] < 2:
        return {}
    slot = {key: k for k, key in enumerate(first_row)}
    row_of = [slot[key] for key in keys]  # each row's distinct prompt
    firsts = torch.tensor(list(first_row.values()), device=input_ids.device)
    mask = attention[firsts, :-1]
    # The positions generate gives a left-padded row: real tokens count from 0.
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    names = None if adapter_names is None else [adapter_names[i] for i in firsts.tolist()]
    kwargs: dict[str, Any] = {"use_cache": True}
    if forward_accepts(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = 1  # the logits are not used
    with _routing(model, names) as routing:
        out = model(input_ids=input_ids[firsts, :-1], attention_mask=mask,
                    position_ids=positions, **kwargs, **routing)
    # transformers 5 renamed the models' `past_key_values` (argument and output) to `cache`.
    name = "cache" if forward_accepts(model, "cache") else "past_key_values"
    cache = out.get(name)
    if not hasattr(cache, "batch_select_indices"):
        return {}  # a legacy tuple cache or none: plain generation
    cache.batch_select_indices(torch.tensor(row_of, device=input_ids.device))
    return {name: cache}


def _routing(model: torch.nn.Module, adapter_names: Sequence[str] | None):
    if adapter_names is None:
        return contextlib.nullcontext({})
    return per_row_adapters(model, adapter_names)


def sampled_token_count(ids: Sequence[Sequence[int]], max_new_tokens: int) -> int:
    """Tokens sampled to generate completions ``ids`` (each up to, not including, its EOS):
    a row shorter than ``max_new_tokens`` ended by sampling an EOS, which counts too; a row
    of ``max_new_tokens`` was cut there, with no EOS sampled."""
    return sum(len(row) + (len(row) < max_new_tokens) for row in ids)
