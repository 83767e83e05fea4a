"""The tiny models: a small Llama decoder built in memory, its weights drawn from a seed.

``tiny_model(tokenizer, config, seed)`` returns a ``transformers.LlamaForCausalLM`` of
:class:`TinyModelConfig`'s shape (defaults: hidden 128, 4 layers, 0.87M parameters with the
122-token :func:`~agents.tiny.tokenizer.tiny_tokenizer`), sized to the tokenizer and with its
pad and EOS ids. Weights are drawn with a private torch generator seeded from ``seed`` through a
``numpy.random.SeedSequence`` (:class:`agents.lm.torch_rng.TorchRNG`): the same seed gives the
same weights, and the caller's global torch random state is left as it was.

The configuration is a plain Llama (RMSNorm, rotary embeddings with the default theta,
grouped-query attention, a SwiGLU MLP, no biases, no rope scaling, no dropout): exactly the
features the batched forward of :mod:`agents.tiny.grouped_llama` reproduces.

Such a model knows nothing until trained; :func:`agents.tiny.warm_start.warm_start` teaches
it a task by supervised next-token training before it joins a swarm.

Example::

    >>> from agents.tiny.tokenizer import tiny_tokenizer
    >>> model = tiny_model(tiny_tokenizer(), TinyModelConfig(num_layers=2), seed=0)
    >>> model.config.num_hidden_layers, model.config.vocab_size
    (2, 122)
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from agents.lm.torch_rng import TorchRNG
from agents.tiny.config import TinyModelConfig

__all__ = ["TinyModelConfig", "llama_config", "parameter_count", "tiny_model"]


def llama_config(tokenizer: PreTrainedTokenizerBase, config: TinyModelConfig) -> LlamaConfig:
    """The ``LlamaConfig`` of a tiny model for ``tokenizer``: vocabulary, pad and EOS ids."""
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=config.max_position_embeddings, rope_theta=config.rope_theta,
        rms_norm_eps=config.rms_norm_eps, initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings, hidden_act="silu",
        attention_bias=False, mlp_bias=False, attention_dropout=0.0, rope_scaling=None,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    config: TinyModelConfig | None = None,
    seed: int | np.random.SeedSequence = 0,
) -> LlamaForCausalLM:
    """A freshly initialised tiny Llama in eval mode, float32 on the CPU; same seed, same
    weights, the global torch random state untouched."""
    config = config or TinyModelConfig()
    if not isinstance(config, TinyModelConfig):
        raise ValueError(f"config must be a TinyModelConfig, got {config!r:.80}")
    with TorchRNG(seed, torch.device("cpu")).scope():
        model = LlamaForCausalLM(llama_config(tokenizer, config))
    return model.eval()


def parameter_count(model: torch.nn.Module) -> int:
    """Distinct parameters of a model (a tied embedding counted once)."""
    return sum(p.numel() for p in model.parameters())
