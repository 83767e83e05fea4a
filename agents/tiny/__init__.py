"""Tiny language-model nodes: ~0.9M-parameter Llama decoders that learn on one CPU core.

- ``tokenizer``: :func:`tiny_tokenizer`, one token per character, whole tokens for the chat
  markers and the ``<answer>`` tags.
- ``model``: :class:`TinyModelConfig` and :func:`tiny_model`, a plain Llama from a seed.
- ``questions``, ``evaluation``, ``warm_start``: :class:`WarmStartConfig`,
  :func:`warm_start` (supervised training on reasoning-gym tasks until a target accuracy,
  cached on disk), :func:`load_tiny`, :func:`tiny_nodes` (GRPO nodes from warm starts) and
  :func:`read_report`; ``SPECIALIST_TASKS``.
- ``grouped_llama`` (its layers in ``decoder_layers``, the shared-prompt path's faster
  arithmetic in ``fast_kernels``), ``batched``: :func:`batched_swarm`, many such nodes in one
  forward pass.

Names are imported on first use, so importing one module loads no other. The function
``warm_start`` is not among them: ``agents.tiny.warm_start`` is its module (Python sets a
package's attribute to a submodule once imported); use ``agents.warm_start``, as below.

Example::

    from agents import GRPOAgent, GRPOConfig, WarmStartConfig, load_tiny, warm_start

    model, tokenizer = load_tiny(warm_start(WarmStartConfig()))
    node = GRPOAgent(model, tokenizer=tokenizer, config=GRPOConfig(max_new_tokens=12))
    env = sapo_env.parallel_env(n=2, system_prompt="", tasks=[...])   # the empty prompt
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module
_LAZY = {
    "tiny_tokenizer": "agents.tiny.tokenizer",
    "TinyModelConfig": "agents.tiny.config",
    "tiny_model": "agents.tiny.model",
    "SPECIALIST_TASKS": "agents.tiny.config",
    "WarmStartConfig": "agents.tiny.config",
    "load_tiny": "agents.tiny.warm_start",
    "read_report": "agents.tiny.warm_start",
    "tiny_nodes": "agents.tiny.warm_start",
    "batched_swarm": "agents.tiny.batched",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'agents.tiny' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
