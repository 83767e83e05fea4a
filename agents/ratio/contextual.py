"""A contextual ratio policy: J chosen from what the node observes, not only from its rewards.

The bandits of ``agents.ratio.bandits`` learn one value per J from the node's reward stream
alone, as if the best J were the same in every state of the swarm. ``LinUCBRatio`` learns, per
J, how the payoff depends on the node's situation: its recent reward and trend, the size and
reward of its filtered view of the pool, its own zero-advantage share, its training slots left
empty and how much of its output the others take (``CONTEXT``, the ``RatioFeatures`` of
``agents.ratio.features`` without ``num_external`` and ``progress``, plus a constant). A
pool that turns bad, a supply that dries up or a node that falls behind are states it can
tell apart.

It is disjoint LinUCB (Li, Chu, Langford & Schapire, "A contextual-bandit approach to
personalized news article recommendation", WWW 2010), discounted for a swarm that changes as
it learns (the discounted Gram matrix of D-LinUCB: Russac, Vernade & Cappé, "Weighted linear
bandits for non-stationary environments", NeurIPS 2019). Per arm k (a J), with context x of
the round J was chosen in and payoff X (``payoff``, as the bandits credit it)::

    every credit, for every arm m:  A_m <- gamma * A_m + (1 - gamma) * ridge * I
                                    b_m <- gamma * b_m
    then, for the credited arm k:   A_k <- A_k + x x^T,   b_k <- b_k + X x
    choose:                         argmax_k  theta_k . x + alpha * sqrt(x^T A_k^-1 x)
                                    where theta_k = A_k^-1 b_k

starting from A = ridge * I, b = 0 (ties: lowest J). Payoffs, silent arms and round 0 are
handled as the bandits handle them (``agents.ratio.bandits``, module docstring).

Example::

    >>> policy = LinUCBRatio(arms=(2, 6))
    >>> obs = {"train_budget": 8, "num_external": 4, "round": 0}
    >>> policy.choose(obs) in (2, 6)
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.ratio.bandits import Payoff, _check_positive, _check_unit, _JBandit
from agents.ratio.features import FEATURE_HIGH, FEATURE_LOW, FEATURE_NAMES, RatioFeatures
from agents.ratio.registry import GRID_ARMS, ratio_policy
from sapo_env.types import Observation

CONTEXT: tuple[str, ...] = tuple(n for n in FEATURE_NAMES if n not in ("num_external",
                                                                        "progress"))
"""The features ``LinUCBRatio`` reads (a constant 1 is appended): J itself is the arm, and
``progress`` needs the run's length, which a policy does not know."""
_COLUMNS = [FEATURE_NAMES.index(n) for n in CONTEXT]


@ratio_policy("linucb", kind="contextual",
              rule="a contextual bandit: discounted disjoint LinUCB over J (Li et al. 2010; the "
                   "discounting of Russac et al. 2019) on the node's situation (own reward and "
                   "trend, the filtered pool's size and reward, zero-advantage share, shortfall, "
                   "what others take), so a J can pay in one state of the swarm and not in "
                   "another",
              tuning=({}, {"arms": GRID_ARMS}, {"arms": GRID_ARMS, "alpha": 0.1},
                      {"arms": GRID_ARMS, "alpha": 1.0}))
class LinUCBRatio(_JBandit):
    """Discounted disjoint LinUCB over J on the node's ``CONTEXT`` (module docstring).

    Args:
        alpha: width of the confidence bonus, > 0 (default 0.5: payoffs are rewards in [0, 1]).
        gamma: discount in (0, 1] (default 0.99, a memory of about 100 rounds, as the bandits').
        ridge: the ridge regulariser, > 0 (default 1).
        window: rounds the window features average (``RatioFeatures``; default 10).
        arms: the J values to try (default every J in 0..train_budget).
        payoff: what J_t earns: "next_reward" (default), "progress" or "reward".

    It is deterministic: no seed. ``state_dict()`` / ``load_state_dict()`` hold its arms,
    regressions and features.
    """

    _state_fields = (*_JBandit._state_fields, "gram", "moments", "_contexts", "_x")

    def __init__(self, alpha: float = 0.5, gamma: float = 0.99, ridge: float = 1.0,
                 window: int = 10, arms: Sequence[int] | None = None,
                 payoff: Payoff = "next_reward"):
        super().__init__(arms, payoff)
        self.alpha = _check_positive("alpha", alpha)
        self.gamma = _check_unit("gamma", gamma)
        self.ridge = _check_positive("ridge", ridge)
        # progress is not read (not in CONTEXT), so max_rounds does not matter
        self.features = RatioFeatures(max_rounds=1, window=window)
        self._x = np.zeros(len(CONTEXT) + 1)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "features": self.features.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or "features" not in state:
            raise ValueError("LinUCBRatio.load_state_dict: expected a dict with 'features' "
                             "(LinUCBRatio.state_dict())")
        features = RatioFeatures(self.features.max_rounds, self.features.window)
        features.load_state_dict(state["features"])
        super().load_state_dict({k: v for k, v in state.items() if k != "features"})
        self.features = features

    def context(self, observation: Observation) -> np.ndarray:
        """The context vector of ``observation``: ``CONTEXT`` scaled into [0, 1], then 1."""
        values = self.features.vector(observation)[_COLUMNS]
        low, high = FEATURE_LOW[_COLUMNS], FEATURE_HIGH[_COLUMNS]
        return np.append((values - low) / (high - low), 1.0).astype(float)

    def choose(self, observation: Observation) -> int:
        self._x = self.context(observation)
        return super().choose(observation)

    def update(self, reward: float, info: Mapping[str, Any]) -> None:
        self.features.update(reward, info)
        super().update(reward, info)

    def _start(self, k: int) -> None:
        d = len(CONTEXT) + 1
        self.gram = np.tile(self.ridge * np.eye(d), (k, 1, 1))  #: A_k
        self.moments = np.zeros((k, d))                          #: b_k
        self._contexts: dict[int, np.ndarray] = {}               # round J is for -> its x

    def indexes(self, x: np.ndarray) -> np.ndarray:
        """Each arm's upper confidence index at context ``x``."""
        inverse = np.linalg.inv(self.gram)
        theta = np.einsum("kij,kj->ki", inverse, self.moments)
        width = np.sqrt(np.einsum("i,kij,j->k", x, inverse, x))
        return theta @ x + self.alpha * width

    def _pick(self) -> int:
        # the J chosen now is in force in round _round + 1; older contexts are spent
        self._contexts = {r: x for r, x in self._contexts.items() if r >= self._round - 1}
        self._contexts[self._round + 1] = self._x
        return int(np.argmax(np.where(self._allowed, self.indexes(self._x), -np.inf)))

    def _credit(self, arm: int, payoff: float, round_: int) -> None:
        x = self._contexts.pop(round_, None)
        if x is None:  # round 0's J, set by the env config, was chosen on no context
            return
        d = len(x)
        self.gram = self.gamma * self.gram + (1.0 - self.gamma) * self.ridge * np.eye(d)
        self.moments *= self.gamma
        self.gram[arm] += np.outer(x, x)
        self.moments[arm] += payoff * x


__all__ = ["CONTEXT", "LinUCBRatio"]
