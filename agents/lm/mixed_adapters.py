"""Mixed-adapter batches: every row of one forward pass through its own LoRA adapter.

peft can do this itself (``adapter_names=`` in ``forward``/``generate``), but it routes rows
inside every LoRA layer with Python index lists, gathers and scatter-adds, on every decoding
step, which on a CPU costs about as much as the step itself and eats the gain of generating
for a whole swarm in one call. Here the adapters are switched off and every LoRA layer gets a
forward hook that adds each run of rows' low-rank update with plain matrix products over
contiguous slices (rows of one node are adjacent in a joint batch, so no gather or scatter),
on weights transposed and scaled once per call.

Only inference (no gradients flow through the hook) and only plain LoRA on linear layers;
anything else (DoRA and other variants, LoRA on embeddings or convolutions, merged weights)
falls back to peft's own routing, which is always correct.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch


def adapter_runs(adapter_names: Sequence[str]) -> list[tuple[str, int, int]]:
    """Maximal runs of equal names as ``(name, start, end)``: ``a a b a`` -> a 0 2, b 2 3, a 3 4."""
    runs: list[tuple[str, int, int]] = []
    for row, name in enumerate(adapter_names):
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1], row + 1)
        else:
            runs.append((name, row, row + 1))
    return runs


def _lora_layers(model: torch.nn.Module, names: set[str]) -> list[torch.nn.Module] | None:
    """The LoRA linear layers holding ``names``, or None when the fast path cannot serve them."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer

    layers = []
    for module in model.modules():
        if not isinstance(module, LoraLayer):
            continue
        held = names & set(module.lora_A.keys())
        if not held:
            continue
        if not isinstance(module, LoraLinear) or module.merged:
            return None
        if held & set(getattr(module, "lora_variant", {})) or held & set(
            getattr(module, "lora_magnitude_vector", {})
        ):
            return None  # DoRA and other variants change the update itself
        if held != names:
            return None  # an adapter that skips this layer: leave it to peft
        layers.append(module)
    return layers


@contextlib.contextmanager
def per_row_adapters(model: torch.nn.Module, adapter_names: Sequence[str]) -> Iterator[dict]:
    """Run ``model`` (a ``PeftModel``) with row ``i`` of every batch through ``adapter_names[i]``.

    Yields the keyword arguments to pass to the model's ``forward`` or ``generate`` inside the
    block: ``{}`` when the fast hooks are installed, ``{"adapter_names": [...]}`` when peft
    routes the rows itself. Every call inside the block must have exactly these rows, in this
    order. Gradients must be off (generation only).
    """
    names = list(adapter_names)
    runs = adapter_runs(names)
    layers = _lora_layers(model, {name for name, _, _ in runs})
    if not layers or torch.is_grad_enabled():
        yield {"adapter_names": names}
        return
    rows = len(names)
    hooks = []
    try:
        for layer in layers:
            hooks.append(layer.register_forward_hook(_layer_hook(layer, runs, rows)))
        with model.disable_adapter():  # layers return their base output; hooks add the rest
            yield {}
    finally:
        for hook in hooks:
            hook.remove()


def _layer_hook(layer: torch.nn.Module, runs: list[tuple[str, int, int]], rows: int) -> Any:
    # (x @ A^T) @ (scaling * B^T) per run; the weights do not change during generation.
    down = [layer.lora_A[name].weight.t() for name, _, _ in runs]
    up = [layer.lora_B[name].weight.t() * layer.scaling[name] for name, _, _ in runs]
    spans = [(start, end) for _, start, end in runs]

    def hook(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        x = args[0]
        if x.shape[0] != rows:
            raise RuntimeError(
                f"per_row_adapters was set up for {rows} rows but the batch has {x.shape[0]}"
            )
        dtype = output.dtype
        update = torch.cat([
            (x[start:end].to(a.dtype) @ a) @ b for (start, end), a, b in zip(spans, down, up)
        ]) if len(spans) > 1 else (x.to(down[0].dtype) @ down[0]) @ up[0]
        return output + update.to(dtype)

    return hook
