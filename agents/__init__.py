"""Reference agents for ``sapo_env``.

Every agent has ``act(observation) -> action`` and ``learn(batch) -> dict | None``.
Agents that need optional dependencies (torch for the language-model agent) are imported on
first use, so ``import agents`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from agents.demonstrator import DemonstratorAgent
from agents.random_agent import RandomAgent
from agents.simulated import SimulatedLearner, SimulatedLearnerConfig, simulated_swarm

# name -> module, for agents whose dependencies are optional extras
_LAZY = {
    "GRPOAgent": "agents.grpo",
    "GRPOConfig": "agents.grpo",
    "lora_swarm": "agents.lora",
}

__all__ = ["DemonstratorAgent", "RandomAgent", "SimulatedLearner", "SimulatedLearnerConfig",
           "simulated_swarm", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agents' has no attribute {name!r}")
