"""The layer arithmetic of the shared-prompt path, in fewer passes over memory.

A tiny learner's layers are narrow (hidden 128), so their elementwise work (RMSNorm, rotary
embeddings, SwiGLU, softmax, and the copies autograd makes to split and join tensors) costs
about as much CPU time as their matrix products (BENCHMARKS.md, "Prompt-prefix sharing").
These functions compute what :mod:`agents.tiny.decoder_layers`' reference arithmetic computes,
to float rounding, writing fewer tensors:

- :func:`fast_weights`: each RMSNorm's weight multiplied into the matrix that reads its output
  (``W (w * n) = (W * w) n``), so that the norm itself is weightless; the attention's scale
  multiplied into the query rows; each query and key head's dimensions reordered so that the
  rotary embedding turns adjacent pairs; under autocast the matrices cast once to the compute
  dtype, where autocast would cast them at every use;
- :func:`rotate`: the rotary embedding as one complex product (forward and backward) where
  the reference makes five passes (``x * cos + rotate_half(x) * sin``);
- :func:`rms_normalize`: RMSNorm in one written tensor forward (in the compute dtype, where
  autocast would cast it for the next product) and two backward;
- :func:`swiglu`: ``silu(gate) * up``, its gradients written straight into the gate/up
  projection's gradient;
- :func:`prefix_attention`: the rows of a prompt attending to its keys, read once, and to
  their own.

The attention's arithmetic stays the reference's: PyTorch's fused
``scaled_dot_product_attention`` was no faster on these shapes in float32 and its backward
slower in bfloat16 (BENCHMARKS.md, "Prompt-prefix sharing").

``batched_swarm(share_prompts=True)`` computes with them (``grouped_forward(...,
arithmetic="fast")``, ``grouped_prefix_forward``); ``share_prompts=False`` never does, so the
runs it repeats are repeated bit for bit (tests/test_tiny_speed_paths.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from transformers import LlamaConfig


def head_dim(config: LlamaConfig) -> int:
    """The size of one attention head."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def rotary_pairs(head_size: int) -> torch.Tensor:
    """The order :func:`fast_weights` gives each query and key head's dimensions: dimensions
    i and i + head_size / 2, which Llama's rotary embedding turns together, side by side
    (``(0, h, 1, h + 1, ...)``), so that a head is ``head_size / 2`` complex numbers."""
    half = torch.arange(head_size // 2)
    return torch.stack([half, half + head_size // 2], dim=-1).flatten()


def fast_weights(weights: dict[str, torch.Tensor], config: LlamaConfig
                 ) -> dict[str, torch.Tensor]:
    """``weights`` (:func:`~agents.tiny.grouped_llama.stack_weights`) as the fast arithmetic
    reads them, the same model. Differentiable.

    - Every RMSNorm weight multiplied into the projection after it and removed (the final
      norm's into the output head, which a tied model takes from the embedding), so that
      :func:`rms_normalize` needs no weight.
    - Each query and key head's rows in :func:`rotary_pairs` order, so that :func:`rotate`
      is one complex product; attention scores are unchanged, since queries and keys are
      reordered alike (keys and values in a fast cache are in this order too).
    - The query rows multiplied by the attention's ``head_size ** -0.5``.
    - Under autocast the matrices cast to its dtype, once, where autocast would cast them at
      every use (twice a learn step, once a step of generation); the embedding stays as it
      is, since the residual stream keeps its dtype."""
    folded = dict(weights)
    size = head_dim(config)
    query_rows = config.num_attention_heads * size
    heads = config.num_attention_heads + config.num_key_value_heads
    order = (rotary_pairs(size) + torch.arange(heads)[:, None] * size).flatten()
    head = folded.get("lm_head.weight", folded["model.embed_tokens.weight"])
    device = head.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    for layer in range(config.num_hidden_layers):
        prefix = f"model.layers.{layer}."
        qkv, gate_up = f"{prefix}self_attn.qkv_proj.weight", f"{prefix}mlp.gate_up_proj.weight"
        scale = folded.pop(f"{prefix}input_layernorm.weight")[:, None, :]
        folded[qkv] = _query_key_value(folded[qkv], scale, order.to(head.device), query_rows,
                                       size**-0.5)
        scale = folded.pop(f"{prefix}post_attention_layernorm.weight")[:, None, :]
        folded[gate_up] = _scaled(folded[gate_up], scale, dtype)
    folded["lm_head.weight"] = _scaled(head, folded.pop("model.norm.weight")[:, None, :], dtype)
    if dtype is not None:
        folded = {name: w if name == "model.embed_tokens.weight" else w.to(dtype)
                  for name, w in folded.items()}
    return folded


def _query_key_value(qkv: torch.Tensor, scale: torch.Tensor, order: torch.Tensor,
                     query_rows: int, query_scale: float) -> torch.Tensor:
    """``qkv * scale`` with its query and key rows in ``order`` and its query rows times
    ``query_scale``; without gradients in one written tensor, the same numbers."""
    rows = order.numel()  # the query and key rows
    if torch.is_grad_enabled():
        folded = qkv * scale
        query_key = folded[:, :rows].index_select(1, order)
        return torch.cat([query_key[:, :query_rows] * query_scale, query_key[:, query_rows:],
                          folded[:, rows:]], dim=1)
    out = torch.empty_like(qkv)  # the rows reordered before the product: the same products
    torch.mul(qkv[:, :rows].index_select(1, order), scale, out=out[:, :rows])
    out[:, :query_rows].mul_(query_scale)
    torch.mul(qkv[:, rows:], scale, out=out[:, rows:])
    return out


def _scaled(weight: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype | None
            ) -> torch.Tensor:
    """``weight * scale``, without gradients written in ``dtype`` (None: its own), which
    rounds as casting the product would."""
    if torch.is_grad_enabled() or dtype is None:
        return weight * scale
    out = torch.empty(weight.shape, dtype=dtype, device=weight.device)
    return torch.mul(weight, scale, out=out)


def rotary_angles(positions: torch.Tensor, head_size: int, theta: float) -> torch.Tensor:
    """Llama's rotary angles (base ``theta``) ``(N, B, T, head_size / 2)`` of integer
    ``positions`` ``(N, B, T)``: one per pair of dimensions turned together."""
    exponents = torch.arange(0, head_size, 2, dtype=torch.int64, device=positions.device).float()
    inv_freq = 1.0 / (theta ** (exponents / head_size))
    return positions.float()[..., None] * inv_freq


def rotation(positions: torch.Tensor, head_size: int, theta: float) -> torch.Tensor:
    """Llama's rotary embedding of integer ``positions`` ``(N, B, T)`` as unit complex numbers
    ``(N, B, T, 1, head_size / 2)``, to broadcast over heads in :func:`rotate`."""
    angles = rotary_angles(positions, head_size, theta)
    return torch.polar(torch.ones_like(angles), angles)[..., None, :]


def rotate(x: torch.Tensor, turns: torch.Tensor) -> torch.Tensor:
    """Query or key heads ``x`` ``(..., heads, head_size)`` in :func:`rotary_pairs` order,
    rotated by :func:`rotation`'s ``turns``, in float32 as the reference's (whose cos and sin
    are float32): one complex product forward and one backward, where the reference's
    ``x * cos + rotate_half(x) * sin`` makes five passes."""
    pairs = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * turns).flatten(-2)


def _no_autocast(device: torch.device) -> torch.autocast:
    return torch.autocast(device.type, enabled=False)


class _RMSNormalize(torch.autograd.Function):
    """``x * rsqrt(mean(x ** 2) + eps)``, computed in float32 and written in ``dtype``;
    backward ``r * (g - n * mean(g * n))`` from the scale r and the normalised n (saved, or
    recomputed from x where it was written in a narrower dtype)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
        with _no_autocast(x.device):
            h, scale = _rms_scale(x, eps)
            out = torch.mul(h, scale, out=torch.empty(h.shape, dtype=dtype, device=h.device))
        ctx.narrowed = dtype != torch.float32
        ctx.save_for_backward(h if ctx.narrowed else out, scale)
        ctx.dtype = x.dtype
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        normalized, scale = ctx.saved_tensors
        with _no_autocast(grad.device):
            if ctx.narrowed:
                normalized = normalized * scale
            grad = grad.float()
            mean = torch.linalg.vecdot(grad, normalized).div_(-normalized.shape[-1])[..., None]
            return torch.addcmul(grad, normalized, mean).mul_(scale).to(ctx.dtype), None, None


def _rms_scale(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    h = x.float()
    return h, torch.rsqrt(torch.linalg.vecdot(h, h).div_(h.shape[-1]).add_(eps))[..., None]


def rms_normalize(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """transformers' ``LlamaRMSNorm`` of ``x`` ``(N, ..., H)``, times ``weight`` ``(N, H)``
    unless None (folded into the next matrix, :func:`fast_weights`; then, under autocast, the
    result is written in its dtype, which the next product would cast it to)."""
    device = x.device.type
    narrow = weight is None and torch.is_autocast_enabled(device)
    dtype = torch.get_autocast_dtype(device) if narrow else x.dtype
    if torch.is_grad_enabled():
        normalized = _RMSNormalize.apply(x, eps, dtype)
    else:  # a Function's overhead would outweigh a decoding step's small tensors
        with _no_autocast(x.device):
            h, scale = _rms_scale(x, eps)
            normalized = (h * scale).to(dtype)
    if weight is None:
        return normalized
    return weight.reshape(weight.shape[0], *[1] * (x.dim() - 2), -1) * normalized


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        activated = F.silu(gate)
        ctx.save_for_backward(gate_up, activated)
        return activated * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        gate_up, activated = ctx.saved_tensors
        gate, up = gate_up.chunk(2, dim=-1)
        grad_gate_up = torch.empty(gate_up.shape, dtype=grad.dtype, device=grad.device)
        grad_gate, grad_up = grad_gate_up.chunk(2, dim=-1)
        torch.mul(grad, activated, out=grad_up)
        torch.ops.aten.silu_backward.grad_input(grad * up, gate, grad_input=grad_gate)
        return grad_gate_up


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of ``gate_up = [gate, up]`` (last axis), as transformers'
    ``LlamaMLP``: the same kernels, the gradients of gate and up written into one tensor."""
    if torch.is_grad_enabled():
        return _SwiGLU.apply(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def prefix_attention(q: torch.Tensor, prefix_keys: torch.Tensor, prefix_values: torch.Tensor,
                      prefix_bias: torch.Tensor, own_keys: torch.Tensor, own_values: torch.Tensor,
                      own_bias: torch.Tensor) -> torch.Tensor:
    """Attention of L rows that continue one prefix, reading the prefix's keys once.

    q ``(M, kv_heads, groups, L, T, d)``, already scaled by ``d ** -0.5``
    (:func:`fast_weights`): M prefixes, the ``groups`` query heads of each key head, L rows of
    T queries each. The prefix's keys and values are ``(M, kv_heads, P, d)``, shared by its L
    rows; each row's own are ``(M, kv_heads, L, S, d)``. ``prefix_bias``
    ``(M, 1, 1, 1, 1, P)`` and ``own_bias`` ``(M, 1, 1, L, T, S)`` are 0 where a query may look
    and the dtype's lowest value where not. One softmax over a row's P + S keys, in float32,
    as :func:`~agents.tiny.decoder_layers.attention` over the prefix's keys followed by the
    row's; the result equals it to float rounding (the two halves of the weighted sum are
    added after their products). (PyTorch's fused ``scaled_dot_product_attention`` over the
    prefix's keys and all its rows' was no faster in float32 on these shapes, and its
    backward slower in bfloat16: BENCHMARKS.md, "Prompt-prefix sharing".)"""
    m, kv_heads, groups, rows, t, d = q.shape
    width = prefix_keys.shape[2]
    device = q.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else q.dtype
    q = q.to(dtype)  # cast once (autocast would cast it for each product): the smaller side
    # All the prefix's queries (every row, every head of a key head) in one product.
    prefix_scores = torch.matmul(q.reshape(m, kv_heads, groups * rows * t, d),
                                 prefix_keys.transpose(-1, -2))
    prefix_scores = prefix_scores.reshape(m, kv_heads, groups, rows, t, width)
    own_keys, own_values = own_keys[:, :, None], own_values[:, :, None]
    if t == 1:  # decoding: a product of one query is cheaper as a sum than as a matmul
        own_scores = (q * own_keys).sum(-1)[..., None, :]
    else:
        own_scores = torch.matmul(q, own_keys.transpose(-1, -2))
    scores = torch.cat([prefix_scores + prefix_bias, own_scores + own_bias], dim=-1)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype)
    # split, not two slices: its gradient is one concatenation, theirs two zero-filled copies
    prefix_probs, own_probs = probs.split([width, probs.shape[-1] - width], dim=-1)
    from_prefix = torch.matmul(prefix_probs.reshape(m, kv_heads, groups * rows * t, width),
                               prefix_values)
    if t == 1:
        from_own = (own_probs.transpose(-1, -2) * own_values).sum(-2)[..., None, :]
    else:
        from_own = torch.matmul(own_probs, own_values)
    return from_prefix.reshape(q.shape) + from_own
