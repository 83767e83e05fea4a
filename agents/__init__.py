"""Reference agents for ``sapo_env``, and ratio policies (``agents.ratio``) that choose a node's J.

Every agent has ``act(observation) -> action`` and ``learn(batch) -> dict | None``.
Agents that need optional dependencies (torch for the language-model agent, httpx2 for the
served one) are imported on first use, so ``import agents`` stays light; when their extra is
missing, that import fails with a ``ModuleNotFoundError`` naming the package and
``pip install 'sapo-env[lm]'`` (or ``[served]``).
"""

from __future__ import annotations

import importlib
from typing import Any

from agents.adversarial import AdversarialAgent, adversarial_swarm
from agents.demonstrator import DemonstratorAgent
from agents.random_agent import RandomAgent
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
from agents.replay import PlaybackAgent
from agents.simulated import SimulatedLearner, SimulatedLearnerConfig, simulated_swarm
from sapo_env.deprecation import renamed

#: Marks this ``agents`` as sapo-env's. OpenAI's Agents SDK (``openai-agents``) installs a
#: top-level package named ``agents`` too; ``sapo_experiments`` checks this mark on import.
SAPO_ENV_AGENTS = True

# name -> module, for agents whose dependencies are optional extras
_LAZY = {
    "GRPOAgent": "agents.grpo",
    "GRPOConfig": "agents.grpo",  # defined in agents.grpo_config, re-exported
    "lora_swarm": "agents.lora",
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
    "ServedAgent": "agents.served",
    "ServedConfig": "agents.served",
}

# the `lm` extra's packages (pyproject.toml)
_LM_EXTRA = ("torch", "transformers", "peft", "gguf", "accelerate")

__all__ = ["EXP3", "AdversarialAgent", "DemonstratorAgent", "DiscountedUCB", "FixedRatio",
           "LearningProgress", "LinUCBRatio", "PoolQuality", "RandomAgent", "RatioFeatures",
           "PlaybackAgent",
           "SB3Ratio", "ScheduledRatio", "SimulatedLearner", "SimulatedLearnerConfig",
           "ThompsonSampling",
           "adversarial_swarm", "simulated_swarm", *_LAZY]


_renamed = renamed(__name__, {"ReplayAgent": "PlaybackAgent"}, stacklevel=3)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        return _renamed(name)  # an old name, with a DeprecationWarning, or AttributeError
    try:
        module = importlib.import_module(_LAZY[name])
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if missing not in _LM_EXTRA:
            raise
        # A core-only install would otherwise see a bare "No module named 'torch'"; still a
        # ModuleNotFoundError, so `except ImportError` around optional agents keeps working.
        raise ModuleNotFoundError(
            f"agents.{name} needs {missing!r}, which is not installed: pip install "
            f"'sapo-env[lm]' (install the torch build for your hardware first)",
            name=missing,
        ) from error
    return getattr(module, name)
