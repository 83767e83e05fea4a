"""The weight files of a ``GRPOAgent`` checkpoint: the whole model, or one LoRA adapter.

``save_weights(model, adapter_name, path)`` writes ``model.safetensors`` (full fine-tuning,
``adapter_name`` None) or ``adapter_model.safetensors`` + ``adapter_config.json`` (peft's
layout, the adapter alone: the frozen base is not copied); ``load_weights`` reads them back
into a model built the same way. ``GRPOAgent.save`` / ``load`` add the optimizer and random
state (``state.pt``) and the config (``grpo_config.json``).

``save(path)`` writes the weights and ``state.pt`` with AdamW's two moments per weight (twice the
weights); ``save(path, optimizer=False)`` writes the weights, random state and step count, without
the moments, and ``load`` of it starts the moments again from zero, so training goes on but not bit
for bit as it would have. A LoRA node saves only its adapter and the adapter's moments. Sizes for
SmolLM2-135M: docs/checkpoints.md.
"""

from __future__ import annotations

from pathlib import Path

import torch


def save_weights(model: torch.nn.Module, adapter_name: str | None, path: Path) -> None:
    """The trained weights of ``model`` into directory ``path`` (which must exist)."""
    from safetensors.torch import save_file, save_model

    if adapter_name is None:
        save_model(model, str(path / "model.safetensors"))  # handles tied weights
        return
    from peft import get_peft_model_state_dict

    adapter = get_peft_model_state_dict(model, adapter_name=adapter_name)
    weights = {k: v.detach().contiguous() for k, v in adapter.items()}
    save_file(weights, str(path / "adapter_model.safetensors"))
    model.peft_config[adapter_name].save_pretrained(str(path))


def load_weights(model: torch.nn.Module, adapter_name: str | None, path: Path,
                 device: torch.device) -> None:
    """Restore what :func:`save_weights` wrote into the same kind of model."""
    from safetensors.torch import load_file, load_model

    if adapter_name is None:
        if not (path / "model.safetensors").is_file():
            raise FileNotFoundError(f"{path} holds no model.safetensors (a LoRA checkpoint?)")
        load_model(model, str(path / "model.safetensors"), device=str(device))
        return
    if not (path / "adapter_model.safetensors").is_file():
        raise FileNotFoundError(f"{path} holds no adapter_model.safetensors")
    from peft import set_peft_model_state_dict

    weights = load_file(str(path / "adapter_model.safetensors"), device=str(device))
    set_peft_model_state_dict(model, weights, adapter_name=adapter_name)
