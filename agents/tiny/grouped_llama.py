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

Example::

    weights = stack_weights(models)          # N LlamaForCausalLM of one config
    logits, _ = grouped_forward(weights, models[0].config, ids, mask, positions)
    # logits[n] == models[n](ids[n], attention_mask=mask[n], position_ids=positions[n]).logits
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812
from transformers import LlamaConfig, PreTrainedModel


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


def rope_theta(config: LlamaConfig) -> float:
    """The rotary base, wherever this transformers version keeps it."""
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        parameters = getattr(config, "rope_parameters", None) or {}
        theta = parameters.get("rope_theta", 10000.0)
    return float(theta)


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
    weights = {name: torch.stack([params[name] for params in named]) for name in names}
    fused = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
             "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}
    for layer in range(models[0].config.num_hidden_layers):
        prefix = f"model.layers.{layer}."
        for name, parts in fused.items():
            weights[f"{prefix}{name}.weight"] = torch.cat(
                [weights.pop(f"{prefix}{part}.weight") for part in parts], dim=1)
    return weights


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


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # transformers' LlamaRMSNorm: normalise in float32, scale in the input's dtype.
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight[:, None, None, :] * h.to(dtype)


def _linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (N, B, T, in) times each node's weight (N, out, in) transposed -> (N, B, T, out)."""
    n, b, t, d = x.shape
    return torch.bmm(x.reshape(n, b * t, d), weight.transpose(1, 2)).reshape(n, b, t, -1)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
               ) -> torch.Tensor:
    """Grouped-query attention: q ``(M, heads, T, d)``, k and v ``(M, kv_heads, S, d)``, bias
    ``(M, 1, T, S)``. Each key head serves ``heads / kv_heads`` consecutive query heads (as
    transformers' ``repeat_kv``), so the query heads are folded onto their key head instead of
    copying the keys; softmax in float32, as transformers' eager attention."""
    m, heads, t, d = q.shape
    kv_heads = k.shape[1]
    groups = heads // kv_heads
    q = q.reshape(m, kv_heads, groups * t, d)
    scores = torch.matmul(q, k.transpose(-1, -2)) * d**-0.5
    scores = scores + bias.repeat(1, 1, groups, 1)  # rows g * T + i take query i's mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v).reshape(m, heads, t, d)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotary(config: LlamaConfig, positions: torch.Tensor, head_dim: int, dtype: torch.dtype
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``(N, B, T, head_dim)`` for integer positions ``(N, B, T)``."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).float()
    inv_freq = 1.0 / (rope_theta(config) ** (exponents / head_dim))
    freqs = positions.float()[..., None] * inv_freq  # (N, B, T, head_dim / 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def grouped_forward(
    weights: dict[str, torch.Tensor],
    config: LlamaConfig,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: GroupedCache | None = None,
    logits_to_keep: int = 0,
) -> tuple[torch.Tensor, GroupedCache]:
    """Logits ``(N, B, T', V)`` of N models on their own rows, and the updated cache.

    ``input_ids``, ``attention_mask`` and ``position_ids`` are ``(N, B, T)``; with a ``cache``
    the T new positions follow the cached ones. ``logits_to_keep`` > 0 keeps only the last
    positions' logits (T' = logits_to_keep), as transformers' argument of that name.
    """
    n, b, t = input_ids.shape
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    eps = config.rms_norm_eps
    embed = weights["model.embed_tokens.weight"]  # (N, V, H)
    nodes = torch.arange(n, device=input_ids.device)[:, None, None]
    x = embed[nodes, input_ids]  # (N, B, T, H)
    cos, sin = _rotary(config, position_ids, head_dim, x.dtype)
    cos, sin = cos[:, :, None], sin[:, :, None]  # broadcast over heads: (N, B, 1, T, d)

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
    # Query i (at cached length past + i) sees real keys at positions <= past + i.
    causal = torch.ones(t, width, dtype=torch.bool, device=input_ids.device).tril(past)
    allowed = causal[None, None] & key_mask[:, :, None, :]  # (N, B, T, width)
    bias = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device)
    bias = bias.masked_fill(~allowed, torch.finfo(x.dtype).min)
    bias = bias.reshape(n * b, 1, t, width)

    new_keys, new_values = [], []
    for layer in range(config.num_hidden_layers):
        prefix = f"model.layers.{layer}."
        h = _rms_norm(x, weights[prefix + "input_layernorm.weight"], eps)
        qkv = _linear(h, weights[prefix + "self_attn.qkv_proj.weight"])
        q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
        q = q.reshape(n, b, t, heads, head_dim)
        k = k.reshape(n, b, t, kv_heads, head_dim)
        v = v.reshape(n, b, t, kv_heads, head_dim)
        q, k, v = (z.permute(0, 1, 3, 2, 4) for z in (q, k, v))  # (N, B, heads, T, d)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.reshape(n * b, kv_heads, t, head_dim)
        v = v.reshape(n * b, kv_heads, t, head_dim)
        if in_place:
            cache.keys[layer][:, :, past : past + t] = k
            cache.values[layer][:, :, past : past + t] = v
            k, v = cache.keys[layer], cache.values[layer]
        elif cache is not None:
            k = torch.cat([cache.keys[layer][:, :, :past], k], dim=2)
            v = torch.cat([cache.values[layer][:, :, :past], v], dim=2)
        new_keys.append(k)
        new_values.append(v)
        attended = _attention(q.reshape(n * b, heads, t, head_dim), k, v, bias)
        attended = attended.reshape(n, b, heads, t, head_dim).permute(0, 1, 3, 2, 4)
        x = x + _linear(attended.reshape(n, b, t, heads * head_dim),
                        weights[prefix + "self_attn.o_proj.weight"])
        h = _rms_norm(x, weights[prefix + "post_attention_layernorm.weight"], eps)
        gate, up = _linear(h, weights[prefix + "mlp.gate_up_proj.weight"]).chunk(2, dim=-1)
        x = x + _linear(F.silu(gate) * up, weights[prefix + "mlp.down_proj.weight"])
    x = _rms_norm(x, weights["model.norm.weight"], eps)
    if logits_to_keep:
        x = x[:, :, -logits_to_keep:]
    head = weights.get("lm_head.weight", embed)  # tied embeddings have no lm_head of their own
    logits = _linear(x, head)
    return logits, GroupedCache(new_keys, new_values, key_mask, past + t)


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
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        shape = (nodes * prefixes, kv_heads, rows, capacity, head_dim)
        layers = range(config.num_hidden_layers)
        return cls([torch.zeros(shape, dtype=dtype, device=device) for _ in layers],
                   [torch.zeros(shape, dtype=dtype, device=device) for _ in layers],
                   torch.zeros((nodes, prefixes, rows, capacity), dtype=torch.bool, device=device),
                   0)


def _prefix_attention(q: torch.Tensor, prefix_keys: torch.Tensor, prefix_values: torch.Tensor,
                      prefix_bias: torch.Tensor, own_keys: torch.Tensor, own_values: torch.Tensor,
                      own_bias: torch.Tensor) -> torch.Tensor:
    """Attention of L rows that continue one prefix, reading the prefix's keys once.

    q ``(M, kv_heads, groups, L, T, d)``: M prefixes, the ``groups`` query heads of each key
    head, L rows of T queries each. The prefix's keys and values are ``(M, kv_heads, P, d)``,
    shared by its L rows; each row's own are ``(M, kv_heads, L, S, d)``. ``prefix_bias``
    ``(M, 1, 1, 1, 1, P)`` and ``own_bias`` ``(M, 1, 1, L, T, S)`` are 0 where a query may look
    and the dtype's lowest value where not. One softmax over a row's P + S keys, in float32,
    as :func:`_attention` over the prefix's keys followed by the row's; the result equals it
    to float rounding (the two halves of the weighted sum are added after their products)."""
    m, kv_heads, groups, rows, t, d = q.shape
    width = prefix_keys.shape[2]
    # All the prefix's queries (every row, every head of a key head) in one product.
    prefix_scores = torch.matmul(q.reshape(m, kv_heads, groups * rows * t, d),
                                 prefix_keys.transpose(-1, -2)) * d**-0.5
    prefix_scores = prefix_scores.reshape(m, kv_heads, groups, rows, t, width)
    own_scores = torch.matmul(q, own_keys[:, :, None].transpose(-1, -2)) * d**-0.5
    scores = torch.cat([prefix_scores + prefix_bias, own_scores + own_bias], dim=-1)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    from_prefix = torch.matmul(probs[..., :width].reshape(m, kv_heads, groups * rows * t, width),
                               prefix_values)
    from_own = torch.matmul(probs[..., width:], own_values[:, :, None])
    return from_prefix.reshape(q.shape) + from_own


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
    (``GroupedCache.select_rows``). The logits equal ``grouped_forward``'s on the copied cache
    to float rounding (tested). Differentiable through the prefix's keys and values: a
    prefix's gradient gathers from all its rows.

    With a ``cache`` (:meth:`RowCache.empty`, then the returned one) the T new positions of
    each row follow its cached ones and are written into it in place, under ``no_grad``;
    without, the rows have no tokens before these T beyond the prefix.
    """
    n, g, rows, t = input_ids.shape
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    groups = heads // kv_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    eps = config.rms_norm_eps
    embed = weights["model.embed_tokens.weight"]
    nodes = torch.arange(n, device=input_ids.device)[:, None, None]
    x = embed[nodes, input_ids.reshape(n, g * rows, t)]  # (N, G * L, T, H)
    cos, sin = _rotary(config, position_ids.reshape(n, g * rows, t), head_dim, x.dtype)
    cos, sin = cos[:, :, :, None], sin[:, :, :, None]  # broadcast over heads: (N, G*L, T, 1, d)

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
    width = own_mask.shape[3]
    lowest = torch.finfo(x.dtype).min
    # Query i of a row (its position past + i) sees the row's real keys up to its own.
    causal = torch.ones(t, width, dtype=torch.bool, device=input_ids.device).tril(past)
    own_allowed = causal & own_mask[:, :, :, None, :]  # (N, G, L, T, width)
    own_bias = torch.zeros(own_allowed.shape, dtype=x.dtype, device=x.device)
    own_bias = own_bias.masked_fill(~own_allowed, lowest).reshape(n * g, 1, 1, rows, t, width)
    prefix_mask = prefix.key_mask[:, :, : prefix.length]
    prefix_bias = torch.zeros(prefix_mask.shape, dtype=x.dtype, device=x.device)
    prefix_bias = prefix_bias.masked_fill(~prefix_mask, lowest)
    prefix_bias = prefix_bias.reshape(n * g, 1, 1, 1, 1, prefix.length)

    new_keys, new_values = [], []
    for layer in range(config.num_hidden_layers):
        name = f"model.layers.{layer}."
        h = _rms_norm(x, weights[name + "input_layernorm.weight"], eps)
        qkv = _linear(h, weights[name + "self_attn.qkv_proj.weight"])
        q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
        q = q.reshape(n, g * rows, t, heads, head_dim)
        k = k.reshape(n, g * rows, t, kv_heads, head_dim)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        # (N, G, L, T, heads, d) -> (N * G, kv_heads, groups, L, T, d): a prefix's rows together.
        q = q.reshape(n, g, rows, t, kv_heads, groups, head_dim).permute(0, 1, 4, 5, 2, 3, 6)
        q = q.reshape(n * g, kv_heads, groups, rows, t, head_dim)
        k, v = (z.reshape(n, g, rows, t, kv_heads, head_dim).permute(0, 1, 4, 2, 3, 5)
                .reshape(n * g, kv_heads, rows, t, head_dim) for z in (k, v))
        if cache is not None:
            cache.keys[layer][:, :, :, past : past + t] = k
            cache.values[layer][:, :, :, past : past + t] = v
            k, v = cache.keys[layer], cache.values[layer]
        new_keys.append(k)
        new_values.append(v)
        prefix_keys = prefix.keys[layer][:, :, : prefix.length]
        prefix_values = prefix.values[layer][:, :, : prefix.length]
        attended = _prefix_attention(q, prefix_keys, prefix_values, prefix_bias, k, v, own_bias)
        # (N * G, kv_heads, groups, L, T, d) -> (N, G * L, T, heads * d)
        attended = attended.reshape(n, g, heads, rows, t, head_dim).permute(0, 1, 3, 4, 2, 5)
        x = x + _linear(attended.reshape(n, g * rows, t, heads * head_dim),
                        weights[name + "self_attn.o_proj.weight"])
        h = _rms_norm(x, weights[name + "post_attention_layernorm.weight"], eps)
        gate, up = _linear(h, weights[name + "mlp.gate_up_proj.weight"]).chunk(2, dim=-1)
        x = x + _linear(F.silu(gate) * up, weights[name + "mlp.down_proj.weight"])
    x = _rms_norm(x, weights["model.norm.weight"], eps)
    head = weights.get("lm_head.weight", embed)
    logits = _linear(x, head).reshape(n, g, rows, t, -1)
    return logits, RowCache(new_keys, new_values, own_mask, past + t)
