"""A ratio policy learned with stable-baselines3: ``SB3Ratio`` picks a node's J with a model.

The model (PPO, DQN, A2C ... anything with ``predict(obs, deterministic=) -> (action, state)``)
was trained on the meta environments of ``sapo_experiments.meta``, whose observation is
``agents.ratio.features.RatioFeatures`` and whose action is J in ``[0, train_budget]``.
``SB3Ratio`` keeps the same features up to date from the rounds its node plays, so it can drive
a node of any ``sapo_env.runtime.run``::

    import sapo_env.runtime
    from agents.ratio.sb3 import SB3Ratio

    policy = SB3Ratio.load("runs/meta/ppo_ratio.zip", max_rounds=200)
    history = sapo_env.runtime.run(env, learners, ratio_policies={"node_0": policy})

An ``SB3Ratio`` holds the features of one node's run: build a fresh one for every node and run.
stable-baselines3 (the ``meta`` extra) is imported only by ``load``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agents.ratio.features import FEATURE_NAMES, RatioFeatures
from agents.ratio.registry import ratio_policy
from sapo_env.extras import require


class Predictor(Protocol):
    """What ``SB3Ratio`` needs of a model: stable-baselines3's ``predict``."""

    def predict(self, observation: np.ndarray, deterministic: bool = ...) -> tuple[Any, Any]: ...


@ratio_policy("ppo", kind="learned", shown_as="SB3Ratio(model)", make="load",
              needs=("path", "max_rounds"),
              rule="a trained stable-baselines3 policy on the `RatioFeatures` vector; "
                   "`SB3Ratio.load(path, max_rounds=...)`")
class SB3Ratio:
    """A ``RatioPolicy`` that asks a trained model for J.

    Args:
        model: a trained stable-baselines3 model (or anything with its ``predict``) whose
            observation is the ``RatioFeatures`` vector and whose action is J.
        max_rounds: the run length ``RatioFeatures.progress`` divides by; use the episode
            length the model was trained with (``sapo_experiments.meta``'s ``max_rounds``).
        deterministic: take the model's most likely J (True) or sample one (False).
        window: ``RatioFeatures.window``; must match the one the model was trained with.
    """

    def __init__(self, model: Predictor, max_rounds: int, deterministic: bool = True,
                 window: int = 10):
        if not callable(getattr(model, "predict", None)):
            raise ValueError(f"model must have a predict(observation, deterministic=) method "
                             f"(a stable-baselines3 model), got {type(model).__name__}")
        self.model = model
        self.deterministic = deterministic
        self.features = RatioFeatures(max_rounds, window)

    def choose(self, observation: Mapping[str, Any]) -> int:
        """J for the node's next round, from the features of what it has seen so far."""
        action, _ = self.model.predict(self.features.vector(observation),
                                       deterministic=self.deterministic)
        j = int(np.asarray(action).reshape(-1)[0])
        budget = int(observation["train_budget"])
        if not 0 <= j <= budget:
            raise ValueError(f"the model chose num_external={j}, expected an int in "
                             f"[0, {budget}] (train_budget): was it trained with another budget?")
        return j

    def update(self, reward: float, info: Mapping[str, Any]) -> None:
        """Record the round just played (the node's env reward and its ``infos[node]``)."""
        self.features.update(reward, info)

    def state_dict(self) -> dict[str, Any]:
        """The features of the rounds seen so far (the model is not state: load it again).
        With ``deterministic=False`` the model samples J from torch's global generator,
        which this state does not hold: such a policy does not resume bit for bit."""
        return {"features": self.features.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or set(state) != {"features"}:
            raise ValueError(f"SB3Ratio.load_state_dict: expected a dict with key 'features' "
                             f"(SB3Ratio.state_dict()), got {state!r:.80}")
        self.features.load_state_dict(state["features"])

    @classmethod
    def load(cls, path: str | Path, max_rounds: int, deterministic: bool = True,
             window: int = 10, algorithm: Any = None) -> SB3Ratio:
        """An ``SB3Ratio`` around the model saved at ``path`` (``model.save(path)``).

        ``algorithm`` is the stable-baselines3 class that saved it (default ``PPO``). The model
        is loaded on the CPU: a ratio policy is a small MLP, called once a round.
        """
        if algorithm is None:
            algorithm = require("stable_baselines3", "SB3Ratio.load").PPO
        model = algorithm.load(str(path), device="cpu")
        shape = getattr(model.observation_space, "shape", None)
        if shape != (len(FEATURE_NAMES),):
            raise ValueError(f"the model at {str(path)!r} observes shape {shape}, expected "
                             f"({len(FEATURE_NAMES)},): the RatioFeatures vector "
                             f"{FEATURE_NAMES}")
        return cls(model, max_rounds, deterministic, window)
