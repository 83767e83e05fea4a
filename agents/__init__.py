"""Reference agents for ``sapo_env``, and ratio policies (``agents.ratio``) that choose a node's J.

Every agent has ``act(observation) -> action`` and ``learn(batch) -> dict | None``.
Agents that need optional dependencies (torch for the language-model agent, httpx2 for the
served one) are imported on first use, so ``import agents`` stays light; when their extra is
missing, that import fails with a ``ModuleNotFoundError`` naming the package and
``pip install 'sapo-env[lm]'`` (or ``[served]``).

The modules live in folders by role: ``lm`` (the language-model learner, ``GRPOAgent``),
``sim`` (the simulated learner), ``serving`` (``ServedAgent``), ``hostile`` (attacking nodes),
``wrappers`` (an agent played through another), ``scripted`` (nodes that do not learn),
``tiny`` (tiny language models) and ``ratio``; ``plain_state`` is the state helper they share.
Their old flat paths (``agents.<module>``) still import, with a ``DeprecationWarning``
(:mod:`agents.moved`).
"""

from __future__ import annotations

import importlib
from typing import Any

from agents import moved
from agents.hostile.adversarial import AdversarialAgent, adversarial_swarm
from agents.ratio import (
    EXP3,
    DiscountedUCB,
    FixedRatio,
    LearningProgress,
    LinUCBRatio,
    PoolQuality,
    RatioFeatures,
    SB3Ratio,
    ScheduledRatio,
    ThompsonSampling,
)
from agents.scripted.demonstrator import DemonstratorAgent
from agents.scripted.random_agent import RandomAgent
from agents.scripted.replay import PlaybackAgent
from agents.sim.simulated import SimulatedLearner, SimulatedLearnerConfig, simulated_swarm
from sapo_env.deprecation import renamed
from sapo_env.extras import require

#: Marks this ``agents`` as sapo-env's. OpenAI's Agents SDK (``openai-agents``) installs a
#: top-level package named ``agents`` too; ``sapo_experiments`` checks this mark on import.
SAPO_ENV_AGENTS = True

moved.install()

# name -> module, for agents whose dependencies are optional extras
_LAZY = {
    "GRPOAgent": "agents.lm.grpo",
    "GRPOConfig": "agents.lm.grpo",  # defined in agents.lm.grpo_config, re-exported
    "lora_swarm": "agents.lm.lora",
    # tiny models (agents.tiny): offline learners that train on one CPU core
    "tiny_tokenizer": "agents.tiny.tokenizer",
    "TinyModelConfig": "agents.tiny.config",
    "tiny_model": "agents.tiny.model",
    "SPECIALIST_TASKS": "agents.tiny.config",
    "WarmStartConfig": "agents.tiny.config",
    "warm_start": "agents.tiny.warm_start",
    "load_tiny": "agents.tiny.warm_start",
    "read_report": "agents.tiny.warm_start",
    # a node backed by an OpenAI-compatible server (the `served` extra: httpx2)
    "ServedAgent": "agents.serving.served",
    "ServedConfig": "agents.serving.served",
}

__all__ = ["EXP3", "AdversarialAgent", "DemonstratorAgent", "DiscountedUCB", "FixedRatio",
           "LearningProgress", "LinUCBRatio", "PoolQuality", "RandomAgent", "RatioFeatures",
           "PlaybackAgent",
           "SB3Ratio", "ScheduledRatio", "SimulatedLearner", "SimulatedLearnerConfig",
           "ThompsonSampling",
           "adversarial_swarm", "simulated_swarm", *_LAZY]


_renamed = renamed(__name__, {"ReplayAgent": "PlaybackAgent"}, stacklevel=3)


def __getattr__(name: str) -> Any:
    if f"agents.{name}" in moved.MOVED:  # an old module path, as an attribute
        return importlib.import_module(f"agents.{name}")
    if name not in _LAZY:
        return _renamed(name)  # an old name, with a DeprecationWarning, or AttributeError
    # a missing optional package: a ModuleNotFoundError naming its extra (sapo_env.extras)
    return getattr(require(_LAZY[name], f"agents.{name}"), name)
