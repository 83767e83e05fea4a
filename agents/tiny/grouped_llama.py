"""Many Llama models of one shape as one: a forward pass whose every weight has a leading node axis.

N small models run node by node cost N times the Python and kernel-launch overhead of one,
which for a model of a million parameters is most of the time. Here each weight of the N
models is stacked into one ``(N, ...)`` tensor (:func:`stack_weights`, differentiable, so
gradients flow back to every model's own parameters) and each layer is one batched matrix
product over the node axis (:func:`grouped_forward`). Inputs are ``(N, B, T)``: B rows per
node, padded across nodes to the same B and T.

The arithmetic is transformers' ``LlamaForCausalLM`` (RMSNorm, rotary embeddings, grouped-query
attention, SwiGLU MLP), for the configurations :func:`check_supported` accepts; the logits
equal each model's own forward to float rounding (tested). Padding follows transformers' rules:
``attention_mask`` marks real tokens, keys that are padding are never attended to, and a
padded query position gets finite garbage (never NaN) that callers ignore.

A key/value cache (:class:`GroupedCache`) serves generation: the prompt pass fills it, and each
later call appends one token per row (in place, once the cache has room for them).

Many rows continue one prompt (a group's completions; in learning, the rows trained on a
question). :func:`grouped_prefix_forward` runs such rows against the prompts' cache, each
prompt's keys and values read once by all its rows instead of copied to each
(:meth:`GroupedCache.select_rows`), with a :class:`RowCache` of the rows' own keys for
generation; its logits equal the copied cache's to float rounding (tested).

Two arithmetics (:mod:`agents.tiny.decoder_layers`): ``grouped_forward``'s default,
"reference", is what the copied-prompt path (``batched_swarm(share_prompts=False)``) has always
computed, kept bit for bit so that runs made with it repeat (tests/test_tiny_speed_paths.py);
"fast", which the shared-prompt path and ``grouped_prefix_forward`` use, computes the same to
float rounding in fewer passes over memory (:mod:`agents.tiny.fast_kernels`), and a prompt
pass on the prompts' real tokens alone (:class:`~agents.tiny.decoder_layers.PromptPacking`).

Example::

    weights = stack_weights(models)          # N LlamaForCausalLM of one config
    logits, _ = grouped_forward(weights, models[0].config, ids, mask, positions)
    # logits[n] == models[n](ids[n], attention_mask=mask[n], position_ids=positions[n]).logits
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F  # noqa: N812
from transformers import LlamaConfig, PreTrainedModel

from agents.tiny import fast_kernels
from agents.tiny.decoder_layers import (
    KERNELS,
    PromptPacking,
    attention,
    attention_bias,
    causal,
    decoder,
    embedded,
    head,
    rope_theta,
)

__all__ = ["GroupedCache", "RowCache", "check_supported", "grouped_forward",
           "grouped_prefix_forward", "rope_theta", "stack_weights"]


def check_supported(config: LlamaConfig) -> None:
    """Raise ``ValueError`` for a Llama configuration this forward does not reproduce."""
    problems = []
    if getattr(config, "model_type", None) != "llama":
        problems.append(f"model_type must be 'llama', got {getattr(config, 'model_type', None)!r}")
    if getattr(config, "hidden_act", "silu") != "silu":
        problems.append(f"hidden_act must be 'silu', got {config.hidden_act!r}")
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        problems.append("attention_bias and mlp_bias must be False")
    rope = getattr(config, "rope_scaling", None)
    if rope and rope.get("rope_type", rope.get("type", "default")) != "default":
        problems.append(f"rope_scaling must be None or default, got {rope!r}")
    if getattr(config, "attention_dropout", 0.0):
        problems.append(f"attention_dropout must be 0, got {config.attention_dropout}")
    if problems:
        raise ValueError("grouped_forward cannot run this model: " + "; ".join(problems))


#: the projections each layer's fused matrices join, in their order
_FUSED = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
          "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}


def stack_weights(models: Sequence[PreTrainedModel]) -> dict[str, torch.Tensor]:
    """The weights of ``models`` in the grouped layout: every parameter stacked on a new first
    axis, keyed by parameter name, except that each layer's query, key and value projections
    are one ``qkv_proj`` and its gate and up projections one ``gate_up_proj`` (one matrix
    product each instead of three and two).

    Differentiable: a loss on the grouped forward's output puts each model's gradient in its
    own parameters' ``.grad``. Under ``torch.no_grad`` it is a plain copy."""
    named = [dict(model.named_parameters()) for model in models]
    names = list(named[0])
    for n, params in enumerate(named[1:], start=1):
        if list(params) != names:
            raise ValueError(f"model {n} has other parameters than model 0: not one shape")
    weights, fused = {}, set()
    for layer in range(models[0].config.num_hidden_layers):
        prefix = f"model.layers.{layer}."
        for name, parts in _FUSED.items():
            keys = [f"{prefix}{part}.weight" for part in parts]
            fused.update(keys)
            # one copy: every model's parts in a row, then split by model
            joined = torch.cat([params[key] for params in named for key in keys])
            weights[f"{prefix}{name}.weight"] = joined.view(len(models), -1, joined.shape[1])
    weights.update({name: torch.stack([params[name] for params in named])
                    for name in names if name not in fused})
    return weights


def _check_fast(weights: dict[str, torch.Tensor]) -> None:
    if "model.norm.weight" in weights:
        raise ValueError("the fast arithmetic reads fast_kernels.fast_weights(weights, config), "
                         "not stack_weights' layout")


@dataclass
class GroupedCache:
    """Keys and values of every layer, ``(N * B, kv_heads, capacity, head_dim)``, the key mask
    and how many positions are filled. A cache made :meth:`with_room` for more positions is
    filled in place (generation, without gradients); a full one grows by concatenation."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    key_mask: torch.Tensor  #: (N, B, capacity) bool: which positions hold real tokens
    length: int  #: positions filled

    def with_room(self, extra: int) -> GroupedCache:
        """The same cache with ``extra`` empty positions to fill in place."""
        def grow(z: torch.Tensor) -> torch.Tensor:
            return F.pad(z[:, :, : self.length], (0, 0, 0, extra))

        mask = F.pad(self.key_mask[:, :, : self.length], (0, extra), value=False)
        return GroupedCache([grow(k) for k in self.keys], [grow(v) for v in self.values], mask,
                            self.length)

    def select_rows(self, rows: torch.Tensor) -> GroupedCache:
        """The cache of rows ``rows`` ``(N, R)`` of each node: row r of node n becomes
        cached row ``rows[n, r]`` of node n (rows may repeat: many completions of one prompt).
        Differentiable, so a prompt's gradient collects from all its rows."""
        n, b, t = self.key_mask.shape
        nodes = torch.arange(n, device=rows.device)[:, None]

        def pick(z: torch.Tensor) -> torch.Tensor:
            z = z.reshape(n, b, *z.shape[1:])[nodes, rows]
            return z.reshape(-1, *z.shape[2:])

        return GroupedCache([pick(k) for k in self.keys], [pick(v) for v in self.values],
                            self.key_mask[nodes, rows], self.length)


def grouped_forward(
    weights: dict[str, torch.Tensor],
    config: LlamaConfig,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: GroupedCache | None = None,
    logits_to_keep: int = 0,
    arithmetic: Literal["reference", "fast"] = "reference",
) -> tuple[torch.Tensor, GroupedCache]:
    """Logits ``(N, B, T', V)`` of N models on their own rows, and the updated cache.

    ``input_ids``, ``attention_mask`` and ``position_ids`` are ``(N, B, T)``; with a ``cache``
    the T new positions follow the cached ones. ``logits_to_keep`` > 0 keeps only the last
    positions' logits (T' = logits_to_keep), as transformers' argument of that name.
    ``arithmetic``: "reference" (what the copied-prompt path ran, bit for bit) or "fast"
    (:mod:`agents.tiny.fast_kernels`, the same logits to float rounding; ``weights`` must then
    be :func:`~agents.tiny.fast_kernels.fast_weights`', and the cache's keys and values are
    strided views, each head's dimensions in their order).
    """
    kernels = KERNELS[arithmetic]
    n, b, t = input_ids.shape
    packing = (PromptPacking(attention_mask)
               if kernels.packs and cache is None and logits_to_keep else None)
    if kernels.fast_weights:
        _check_fast(weights)
    if packing is None:
        x, rotation = embedded(weights, config, input_ids, position_ids, kernels)
    else:
        x, rotation = embedded(weights, config, packing.pack(input_ids),
                               packing.pack(position_ids), kernels)
    past = 0 if cache is None else cache.length
    in_place = cache is not None and cache.key_mask.shape[2] >= past + t
    if in_place:
        if torch.is_grad_enabled():
            raise ValueError("a cache with room is filled in place: use it under no_grad")
        cache.key_mask[:, :, past : past + t] = attention_mask.bool()
        key_mask = cache.key_mask
    elif cache is not None:
        key_mask = torch.cat([cache.key_mask[:, :, :past], attention_mask.bool()], dim=2)
    else:
        key_mask = attention_mask.bool()
    width = key_mask.shape[2]
    allowed = causal(t, width, past, x.device)[None, None] & key_mask[:, :, None, :]
    bias = attention_bias(allowed, x.dtype).reshape(n * b, 1, t, width)
    new_keys, new_values = [], []

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, final: bool
               ) -> torch.Tensor:
        # (N, B, T, heads, d) -> (N * B, heads, T, d)
        if packing is None:
            q, k, v = (z.permute(0, 1, 3, 2, 4).flatten(0, 1) for z in (q, k, v))
        else:
            k, v = packing.unpack(k), packing.unpack(v)
            q = q.permute(0, 1, 3, 2, 4).flatten(0, 1) if final else packing.unpack(q)
        if in_place:
            cache.keys[layer][:, :, past : past + t] = k
            cache.values[layer][:, :, past : past + t] = v
            k, v = cache.keys[layer], cache.values[layer]
        elif cache is not None:
            k = torch.cat([cache.keys[layer][:, :, :past], k], dim=2)
            v = torch.cat([cache.values[layer][:, :, :past], v], dim=2)
        new_keys.append(k)
        new_values.append(v)
        attended = attention(q, k, v, bias[:, :, t - q.shape[2] :], kernels.fast_weights)
        if packing is not None and not final:
            return packing.pack_heads(attended)
        return attended.unflatten(0, (n, b)).transpose(2, 3).flatten(3)

    last = None if packing is None else partial(packing.last, keep=logits_to_keep)
    x = decoder(weights, config, x, rotation, kernels, attend, last)
    if logits_to_keep:
        x = x[:, :, -logits_to_keep:]
    return head(weights, x), GroupedCache(new_keys, new_values, key_mask, past + t)


@dataclass
class RowCache:
    """Keys and values of rows that continue shared prefixes (:func:`grouped_prefix_forward`):
    every layer's ``(N * G, kv_heads, L, capacity, head_dim)``, row ``(n, g, l)`` being the
    l-th continuation of prefix g of node n, the key mask ``(N, G, L, capacity)`` and how many
    positions are filled. Filled in place, under ``no_grad`` (generation)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    key_mask: torch.Tensor  #: (N, G, L, capacity) bool: which positions hold real tokens
    length: int  #: positions filled

    @classmethod
    def empty(cls, config: LlamaConfig, nodes: int, prefixes: int, rows: int, capacity: int,
              dtype: torch.dtype, device: torch.device) -> RowCache:
        """Room for ``capacity`` tokens of ``rows`` continuations of each of ``prefixes``
        prefixes per node."""
        kv_heads = config.num_key_value_heads
        shape = (nodes * prefixes, kv_heads, rows, capacity, fast_kernels.head_dim(config))
        layers = range(config.num_hidden_layers)
        return cls([torch.zeros(shape, dtype=dtype, device=device) for _ in layers],
                   [torch.zeros(shape, dtype=dtype, device=device) for _ in layers],
                   torch.zeros((nodes, prefixes, rows, capacity), dtype=torch.bool, device=device),
                   0)


def grouped_prefix_forward(
    weights: dict[str, torch.Tensor],
    config: LlamaConfig,
    prefix: GroupedCache,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: RowCache | None = None,
) -> tuple[torch.Tensor, RowCache]:
    """Logits ``(N, G, L, T, V)`` of rows that continue shared prefixes, and their cache.

    ``prefix`` is :func:`grouped_forward`'s cache of G prefixes per node (``(N, G, P)``
    inputs); row ``(n, g, l)`` of ``input_ids``, ``attention_mask`` and ``position_ids``
    ``(N, G, L, T)`` continues prefix g of node n, so its queries read the prefix's keys and
    values where :func:`grouped_forward` would need a copy of them for every row
    (``GroupedCache.select_rows``). Computed with :mod:`agents.tiny.fast_kernels`; the logits
    equal ``grouped_forward``'s on the copied cache to float rounding (tested).
    Differentiable through the prefix's keys and values: a prefix's gradient gathers from all
    its rows. ``weights`` are :func:`~agents.tiny.fast_kernels.fast_weights`', and ``prefix``
    is ``grouped_forward(..., arithmetic="fast")``'s cache on them.

    With a ``cache`` (:meth:`RowCache.empty`, then the returned one) the T new positions of
    each row follow its cached ones and are written into it in place, under ``no_grad``;
    without, the rows have no tokens before these T beyond the prefix.
    """
    n, g, rows, t = input_ids.shape
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    groups = heads // kv_heads
    _check_fast(weights)
    x, rotation = embedded(weights, config, input_ids.reshape(n, g * rows, t),
                           position_ids.reshape(n, g * rows, t), KERNELS["fast"])
    past = 0 if cache is None else cache.length
    if cache is not None:
        if torch.is_grad_enabled():
            raise ValueError("a RowCache is filled in place: use it under no_grad")
        if cache.key_mask.shape[3] < past + t:
            raise ValueError(f"the RowCache holds {cache.key_mask.shape[3]} positions, "
                             f"{past} filled: no room for {t} more")
        cache.key_mask[..., past : past + t] = attention_mask.bool()
        own_mask = cache.key_mask
    else:
        own_mask = attention_mask.bool()
    width = past + t  # the cache's later positions are empty
    # Query i of a row (its position past + i) sees the row's real keys up to its own.
    own_allowed = causal(t, width, past, x.device) & own_mask[:, :, :, None, :width]
    own_bias = attention_bias(own_allowed, x.dtype).reshape(n * g, 1, 1, rows, t, width)
    prefix_bias = attention_bias(prefix.key_mask[:, :, : prefix.length], x.dtype)
    prefix_bias = prefix_bias.reshape(n * g, 1, 1, 1, 1, prefix.length)
    new_keys, new_values = [], []

    def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, final: bool
               ) -> torch.Tensor:
        # (N, G * L, T, heads, d) -> (N * G, kv_heads, groups, L, T, d): a prefix's rows together.
        q = q.reshape(n, g, rows, t, kv_heads, groups, -1).permute(0, 1, 4, 5, 2, 3, 6)
        q = q.reshape(n * g, kv_heads, groups, rows, t, -1)
        k, v = (z.reshape(n, g, rows, t, kv_heads, -1).permute(0, 1, 4, 2, 3, 5)
                .reshape(n * g, kv_heads, rows, t, -1) for z in (k, v))
        if cache is not None:
            cache.keys[layer][:, :, :, past : past + t] = k
            cache.values[layer][:, :, :, past : past + t] = v
            k, v = cache.keys[layer], cache.values[layer]
        new_keys.append(k)
        new_values.append(v)
        attended = fast_kernels.prefix_attention(q, prefix.keys[layer][:, :, : prefix.length],
                                     prefix.values[layer][:, :, : prefix.length], prefix_bias,
                                     k[:, :, :, :width], v[:, :, :, :width], own_bias)
        # (N * G, kv_heads, groups, L, T, d) -> (N, G * L, T, heads * d)
        attended = attended.reshape(n, g, heads, rows, t, -1).permute(0, 1, 3, 4, 2, 5)
        return attended.reshape(n, g * rows, t, -1)

    x = decoder(weights, config, x, rotation, KERNELS["fast"], attend)
    logits = head(weights, x).reshape(n, g, rows, t, -1)
    return logits, RowCache(new_keys, new_values, own_mask, past + t)
