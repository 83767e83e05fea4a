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
later call appends one token per row.

Example::

    weights = stack_weights(models)          # N LlamaForCausalLM of one config
    logits, _ = grouped_forward(weights, models[0].config, ids, mask, positions)
    # logits[n] == models[n](ids[n], attention_mask=mask[n], position_ids=positions[n]).logits
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
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
    """Every parameter of ``models`` stacked on a new first axis, keyed by parameter name.

    Differentiable: a loss on the grouped forward's output puts each model's gradient in its
    own parameters' ``.grad``. Under ``torch.no_grad`` it is a plain copy."""
    named = [dict(model.named_parameters()) for model in models]
    names = list(named[0])
    for n, params in enumerate(named[1:], start=1):
        if list(params) != names:
            raise ValueError(f"model {n} has other parameters than model 0: not one shape")
    return {name: torch.stack([params[name] for params in named]) for name in names}


@dataclass
class GroupedCache:
    """Keys and values of every layer, ``(N * B, kv_heads, T, head_dim)``, and the key mask."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    key_mask: torch.Tensor  #: (N, B, T) bool: which cached positions are real tokens

    def repeat_rows(self, times: int) -> GroupedCache:
        """Each row repeated ``times`` times in place (row r becomes rows r*times ... )."""
        n, b, _ = self.key_mask.shape
        return GroupedCache(
            [k.repeat_interleave(times, dim=0) for k in self.keys],
            [v.repeat_interleave(times, dim=0) for v in self.values],
            self.key_mask.repeat_interleave(times, dim=1),
        )


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

    key_mask = attention_mask.bool()
    if cache is not None:
        key_mask = torch.cat([cache.key_mask, key_mask], dim=2)
    past = 0 if cache is None else cache.key_mask.shape[2]
    # Query i (at cached length past + i) sees real keys at positions <= past + i.
    causal = torch.ones(t, past + t, dtype=torch.bool, device=input_ids.device).tril(past)
    allowed = causal[None, None] & key_mask[:, :, None, :]  # (N, B, T, past + T)
    bias = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device)
    bias = bias.masked_fill(~allowed, torch.finfo(x.dtype).min)
    bias = bias.reshape(n * b, 1, t, past + t)

    new_keys, new_values = [], []
    for layer in range(config.num_hidden_layers):
        prefix = f"model.layers.{layer}."
        h = _rms_norm(x, weights[prefix + "input_layernorm.weight"], eps)
        q = _linear(h, weights[prefix + "self_attn.q_proj.weight"]).view(n, b, t, heads, head_dim)
        k = _linear(h, weights[prefix + "self_attn.k_proj.weight"]).view(n, b, t, kv_heads,
                                                                         head_dim)
        v = _linear(h, weights[prefix + "self_attn.v_proj.weight"]).view(n, b, t, kv_heads,
                                                                         head_dim)
        q, k, v = (z.permute(0, 1, 3, 2, 4) for z in (q, k, v))  # (N, B, heads, T, d)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.reshape(n * b, kv_heads, t, head_dim)
        v = v.reshape(n * b, kv_heads, t, head_dim)
        if cache is not None:
            k = torch.cat([cache.keys[layer], k], dim=2)
            v = torch.cat([cache.values[layer], v], dim=2)
        new_keys.append(k)
        new_values.append(v)
        groups = heads // kv_heads
        attended = F.scaled_dot_product_attention(
            q.reshape(n * b, heads, t, head_dim),
            k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1),
            attn_mask=bias, scale=head_dim**-0.5,
        )  # (N * B, heads, T, d)
        attended = attended.reshape(n, b, heads, t, head_dim).permute(0, 1, 3, 2, 4)
        x = x + _linear(attended.reshape(n, b, t, heads * head_dim),
                        weights[prefix + "self_attn.o_proj.weight"])
        h = _rms_norm(x, weights[prefix + "post_attention_layernorm.weight"], eps)
        gate = _linear(h, weights[prefix + "mlp.gate_proj.weight"])
        up = _linear(h, weights[prefix + "mlp.up_proj.weight"])
        x = x + _linear(F.silu(gate) * up, weights[prefix + "mlp.down_proj.weight"])
    x = _rms_norm(x, weights["model.norm.weight"], eps)
    if logits_to_keep:
        x = x[:, :, -logits_to_keep:]
    head = weights.get("lm_head.weight", embed)  # tied embeddings have no lm_head of their own
    logits = _linear(x, head)
    return logits, GroupedCache(new_keys, new_values, key_mask)
