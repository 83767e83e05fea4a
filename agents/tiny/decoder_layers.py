"""The Llama decoder arithmetic that :mod:`agents.tiny.grouped_llama`'s forwards share.

Weights are grouped (each with a leading node axis:
:func:`~agents.tiny.grouped_llama.stack_weights`) and activations are ``(N, B, T, H)``: B rows
of T positions for each of N nodes.
:func:`decoder` runs the layers, given the attention (each forward lays out its keys its own
way); :data:`KERNELS` holds its two arithmetics, "reference" (what the copied-prompt path has
always computed, kept bit for bit for the runs it repeats) and "fast"
(:mod:`agents.tiny.fast_kernels`, the same to float rounding). :class:`PromptPacking` lets a
fast prompt pass skip the prompts' padding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from transformers import LlamaConfig

from agents.tiny import fast_kernels
from agents.tiny.fast_kernels import head_dim


def rope_theta(config: LlamaConfig) -> float:
    """The rotary base, wherever this transformers version keeps it."""
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        parameters = getattr(config, "rope_parameters", None) or {}
        theta = parameters.get("rope_theta", 10000.0)
    return float(theta)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # transformers' LlamaRMSNorm: normalise in float32, scale in the input's dtype.
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight[:, None, None, :] * h.to(dtype)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (N, B, T, in) times each node's weight (N, out, in) transposed -> (N, B, T, out)."""
    n, b, t, d = x.shape
    return torch.bmm(x.reshape(n, b * t, d), weight.transpose(1, 2)).reshape(n, b, t, -1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
              scaled: bool = False) -> torch.Tensor:
    """Grouped-query attention: q ``(M, heads, T, d)``, k and v ``(M, kv_heads, S, d)``, bias
    ``(M, 1, T, S)``. Each key head serves ``heads / kv_heads`` consecutive query heads (as
    transformers' ``repeat_kv``), so the query heads are folded onto their key head instead of
    copying the keys; softmax in float32, as transformers' eager attention. ``scaled``: q
    already carries the scores' ``d ** -0.5`` (:func:`~agents.tiny.fast_kernels.fast_weights`)."""
    m, heads, t, d = q.shape
    kv_heads = k.shape[1]
    groups = heads // kv_heads
    q = q.reshape(m, kv_heads, groups * t, d)
    scores = torch.matmul(q, k.transpose(-1, -2))
    if not scaled:
        scores = scores * d**-0.5
    scores = scores + bias.repeat(1, 1, groups, 1)  # rows g * T + i take query i's mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v).reshape(m, heads, t, d)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(positions: torch.Tensor, head_size: int, theta: float, dtype: torch.dtype
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``(N, B, T, 1, head_size)`` for integer positions ``(N, B, T)``, to
    broadcast over heads."""
    freqs = fast_kernels.rotary_angles(positions, head_size, theta)
    emb = torch.cat((freqs, freqs), dim=-1)[..., None, :]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def reference_rotate(x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]
                     ) -> torch.Tensor:
    cos, sin = cos_sin
    return x * cos + rotate_half(x) * sin


def reference_swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


@dataclass(frozen=True)
class Kernels:
    """How a layer computes: the reference arithmetic, which runs made with the copied-prompt
    path (``share_prompts=False``) repeat bit for bit, or :mod:`agents.tiny.fast_kernels`',
    the same to float rounding in fewer passes over memory."""

    norm: Callable[[torch.Tensor, torch.Tensor | None, float], torch.Tensor]
    swiglu: Callable[[torch.Tensor], torch.Tensor]
    #: the rotary embedding of integer positions (positions, head size, base, dtype), in the
    #: form that ``rotate(heads, it)`` applies to query and key heads
    rotation: Callable[[torch.Tensor, int, float, torch.dtype], Any]
    rotate: Callable[[torch.Tensor, Any], torch.Tensor]
    #: the weights are :func:`~agents.tiny.fast_kernels.fast_weights`' (queries scaled, query
    #: and key heads in rotary pairs), which only this arithmetic reads
    fast_weights: bool
    #: a prompt pass (no cache, logits_to_keep > 0) runs on the prompts' real tokens alone
    #: (:class:`PromptPacking`), and its last layer only at the kept positions past their keys
    #: and values (the other positions' outputs reach nothing)
    packs: bool


KERNELS = {
    "reference": Kernels(rms_norm, reference_swiglu, rotary, reference_rotate, False, False),
    "fast": Kernels(fast_kernels.rms_normalize, fast_kernels.swiglu,
                    lambda positions, size, theta, _: fast_kernels.rotation(positions, size, theta),
                    fast_kernels.rotate, True, True),
}


class PromptPacking:
    """Where the real tokens of left-padded rows ``(N, B, T)`` sit once packed: node n's, in
    row order, at slots 0 .. S_n - 1 of ``(N, 1, S)``, S the most any node has (a node's
    later slots hold padding). Projections and MLPs then skip the padding (20-25% of a learn
    step's prompt positions); attention still runs row by row on the padded layout
    (:meth:`unpack`, :meth:`pack_heads`)."""

    def __init__(self, mask: torch.Tensor) -> None:
        n, b, t = mask.shape
        real = mask.reshape(n, b * t).bool()
        real_first = torch.argsort(~real, dim=1, stable=True)  # each node's real tokens first
        self.shape, self.size = (n, b, t), max(1, int(real.sum(1).max()))
        nodes = torch.arange(n, device=mask.device)[:, None]
        slots = real_first[:, : self.size]  # (N, S): the row-major position of each slot
        self.slots = (slots + nodes * (b * t)).reshape(-1)
        self.rows, self.columns = (slots // t + nodes * b).reshape(-1), (slots % t).reshape(-1)
        # the slot of each position; padding past the last slot reads the last (it is hidden)
        where = torch.empty_like(real_first).scatter_(
            1, real_first, torch.arange(b * t, device=mask.device).expand(n, -1))
        self.positions = (where.clamp(max=self.size - 1) + nodes * self.size).reshape(-1)

    def pack(self, z: torch.Tensor) -> torch.Tensor:
        """``(N, B, T, ...)`` -> ``(N, 1, S, ...)``."""
        n, b, t = self.shape
        rest = z.shape[3:]
        return z.reshape(n * b * t, *rest).index_select(0, self.slots).reshape(n, 1, -1, *rest)

    def unpack(self, z: torch.Tensor) -> torch.Tensor:
        """``(N, 1, S, heads, d)`` -> ``(N * B, heads, T, d)``, the attention's layout."""
        n, b, t = self.shape
        heads, d = z.shape[3:]
        flat = z.reshape(n * self.size, heads * d).index_select(0, self.positions)
        return flat.view(n * b, t, heads, d).transpose(1, 2)

    def pack_heads(self, attended: torch.Tensor) -> torch.Tensor:
        """The attention's output ``(N * B, heads, T, d)`` -> ``(N, 1, S, heads * d)``."""
        picked = attended[self.rows, :, self.columns]  # (N * S, heads, d)
        return picked.reshape(self.shape[0], 1, self.size, -1)

    def last(self, z: torch.Tensor, keep: int) -> torch.Tensor:
        """``(N, 1, S, ...)`` -> ``(N, B, keep, ...)``: each row's last ``keep`` positions."""
        n, b, t = self.shape
        at = self.positions.view(n, b, t)[:, :, -keep:].reshape(-1)
        rest = z.shape[3:]
        return z.reshape(n * self.size, *rest).index_select(0, at).reshape(n, b, keep, *rest)


def attention_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where ``allowed``, the dtype's lowest value where not."""
    bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return bias.masked_fill(~allowed, torch.finfo(dtype).min)


def causal(t: int, width: int, past: int, device: torch.device) -> torch.Tensor:
    """``(T, width)``: query i (at position past + i) sees keys at positions <= past + i."""
    return torch.ones(t, width, dtype=torch.bool, device=device).tril(past)


def projections(x: torch.Tensor, weights: dict[str, torch.Tensor], name: str, rotation: Any,
                config: LlamaConfig, kernels: Kernels
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer's queries ``(N, B, T, heads, d)``, keys and values ``(N, B, T, kv_heads,
    d)``, rotary embeddings applied to the first two."""
    h = kernels.norm(x, weights.get(name + "input_layernorm.weight"), config.rms_norm_eps)
    qkv = linear(h, weights[name + "self_attn.qkv_proj.weight"])
    d = head_dim(config)
    kv_size = config.num_key_value_heads * d
    q, k, v = (z.unflatten(-1, (-1, d)) for z in qkv.split(
        [config.num_attention_heads * d, kv_size, kv_size], -1))
    return kernels.rotate(q, rotation), kernels.rotate(k, rotation), v


def decoder(weights: dict[str, torch.Tensor], config: LlamaConfig, x: torch.Tensor,
            rotation: Any, kernels: Kernels,
            attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor],
            last: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """The decoder layers and the final norm on embeddings ``x`` ``(N, B, T, H)`` at the
    positions whose rotary embedding is ``rotation`` (:func:`embedded`).
    ``attend(layer, q, k, v, final)`` gives the layer's attention output ``(N, B, T',
    heads * d)``. ``last``: the positions the last layer computes (past its keys and values)
    as a function of its input's, whose output is then ``last``'s layout (``final`` True)."""
    eps = config.rms_norm_eps
    for layer in range(config.num_hidden_layers):
        name = f"model.layers.{layer}."
        q, k, v = projections(x, weights, name, rotation, config, kernels)
        final = last is not None and layer == config.num_hidden_layers - 1
        if final:
            q, x = last(q), last(x)
        x = x + linear(attend(layer, q, k, v, final), weights[name + "self_attn.o_proj.weight"])
        h = kernels.norm(x, weights.get(name + "post_attention_layernorm.weight"), eps)
        gate_up = linear(h, weights[name + "mlp.gate_up_proj.weight"])
        x = x + linear(kernels.swiglu(gate_up), weights[name + "mlp.down_proj.weight"])
    return kernels.norm(x, weights.get("model.norm.weight"), eps)


def embedded(weights: dict[str, torch.Tensor], config: LlamaConfig, input_ids: torch.Tensor,
             position_ids: torch.Tensor, kernels: Kernels) -> tuple[torch.Tensor, Any]:
    """Embeddings ``(N, B, T, H)`` of ``(N, B, T)`` ids, and the rotary embedding of their
    positions, in ``kernels``' form."""
    embed = weights["model.embed_tokens.weight"]  # (N, V, H)
    nodes = torch.arange(input_ids.shape[0], device=input_ids.device)[:, None, None]
    x = embed[nodes, input_ids]
    return x, kernels.rotation(position_ids, head_dim(config), rope_theta(config), x.dtype)


def head(weights: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    # tied embeddings have no lm_head of their own
    return linear(x, weights.get("lm_head.weight", weights["model.embed_tokens.weight"]))
