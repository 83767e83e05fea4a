"""The swarm inside a meta environment: its options (``MetaConfig``) and ``InnerSwarm``.

A meta environment turns the choice of J (external groups per round) into a reinforcement
learning problem of its own: each meta step plays one round of a real SAPO swarm whose
language-model nodes (simulated learners by default) act and learn inside it, and the meta
agents only choose the J of each node's next round. ``InnerSwarm`` is that inner swarm, shared
by the PettingZoo meta env (``sapo_experiments.meta.parallel``, every node a meta agent) and the
Gymnasium one (``sapo_experiments.meta.focal``, one learning node among rule-following ones).

Timing of J: the inner env draws a round's questions before the round is played, so the meta
action of step t sets the J of inner round t + 1 (exactly as the ``num_external`` of a node's
own action does); round 0 plays at ``SwarmConfig.num_external`` (default ``train_budget // 2``).

Seeding: ``reset(seed)`` starts from ``SeedSequence(seed)``; every reset spawns the next child
of it, which seeds both the inner env and the learners (built again by the agent factory, so an
episode never inherits skills from the one before). Same seed, same episode; a reset without a
seed continues the stream: the next, different, episode.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agents.ratio.features import RatioFeatures
from sapo_env.config import SwarmConfig
from sapo_env.runtime import AgentCalls, RoundRecord, play_round
from sapo_env.swarm import SwarmEnv, parallel_env
from sapo_env.validation import check_int
from sapo_experiments.learners import AgentFactory, simulated_learners

RewardMode = Literal["own", "swarm_mean"]

DEFAULT_MAX_ROUNDS = 200
"""Episode length of the meta envs, in rounds: with simulated learners a sharing swarm (4/4)
pulls away from isolated nodes (8/0) after about 100 rounds, so 200 rounds let a J choice pay off
inside an episode, while an episode stays short enough for PPO to see tens of them
(docs/provenance.md, "Meta environments: episode length"). The paper's runs are 2000 rounds
long; pass ``max_rounds=2000`` to train on those."""


def _own(net: Mapping[str, float]) -> dict[str, float]:
    return dict(net)


def _swarm_mean(net: Mapping[str, float]) -> dict[str, float]:
    mean = sum(net.values()) / len(net)
    return {a: mean for a in net}


# reward mode -> meta rewards from each node's net reward (round reward - its generation cost)
REWARDS: dict[str, Callable[[Mapping[str, float]], dict[str, float]]] = {
    "own": _own,
    "swarm_mean": _swarm_mean,
}


@dataclass(frozen=True)
class MetaConfig:
    """Options of a meta environment (``sapo_experiments.meta.parallel_env``, ``FocalRatioEnv``)."""

    swarm: SwarmConfig = field(default_factory=lambda: SwarmConfig(
        max_rounds=DEFAULT_MAX_ROUNDS))
    """The inner swarm; its ``max_rounds`` is the episode length (``DEFAULT_MAX_ROUNDS``)."""
    learner: AgentFactory = simulated_learners
    """Builds the inner nodes, ``factory(names, num_external, seed)``
    (``sapo_experiments.learners``)
    at every reset. It must pickle (a module-level function or class instance) for SuperSuit's
    vector envs."""
    reward: RewardMode = "own"
    """``"own"``: a node's meta reward is its own round reward (mean verifier score over its own
    completions, 0 at J = ``train_budget``); ``"swarm_mean"`` (cooperative): every node gets the
    mean over the nodes of their net rewards (a common payoff)."""
    generation_cost: float = 0.0
    """Subtracted from a node's reward per completion it generated that round (before the
    swarm mean is taken): 1 / (``train_budget`` x L) = 1/64 makes answering all 8 questions cost
    as much as the best possible reward."""
    feature_window: int = 10
    """``RatioFeatures.window`` of the observation (``SB3Ratio`` must use the same)."""

    def __post_init__(self) -> None:
        if not isinstance(self.swarm, SwarmConfig):
            raise ValueError(f"swarm must be a SwarmConfig, got {type(self.swarm).__name__}")
        if not callable(self.learner):
            raise ValueError(f"learner must be an agent factory factory(names, num_external, "
                             f"seed), got {self.learner!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {sorted(REWARDS)}, got {self.reward!r}")
        cost = self.generation_cost
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) \
                or not math.isfinite(cost) or cost < 0:
            raise ValueError(f"generation_cost must be a finite number >= 0, got {cost!r}")
        object.__setattr__(self, "generation_cost", float(cost))
        check_int("feature_window", self.feature_window, 1)

    @classmethod
    def build(cls, n: int | None, *, learner: AgentFactory = simulated_learners,
              reward: RewardMode = "own", generation_cost: float = 0.0,
              max_rounds: int = DEFAULT_MAX_ROUNDS, feature_window: int = 10,
              **overrides: Any) -> MetaConfig:
        """The config of the meta envs' factories: ``overrides`` are ``SwarmConfig`` fields."""
        # parallel_env's config checking (unknown fields, n vs n_agents), without its spaces
        swarm = parallel_env(n, max_rounds=max_rounds, **overrides).config
        return cls(swarm, learner, reward, generation_cost, feature_window)


class InnerSwarm:
    """The inner env, its learners and every node's ``RatioFeatures``; one round per ``step``.

    ``observations`` are the inner env's (the nodes' observations for their next round),
    ``features(node)`` the meta observation of a node.
    """

    def __init__(self, config: MetaConfig):
        self.config = config
        self.env = SwarmEnv(config.swarm)
        self.names = tuple(self.env.possible_agents)
        self.agents = AgentCalls({})  # the episode's learners, set by reset
        self.observations: dict[str, Any] = {}
        self._features: dict[str, RatioFeatures] = {}
        self._seed_sequence: np.random.SeedSequence | None = None

    @property
    def live(self) -> list[str]:
        """Nodes still playing (all of them until the last round, then none)."""
        return list(self.env.agents)

    def reset(self, seed: int | None) -> np.random.SeedSequence:
        """A new episode: fresh learners, a fresh inner env. Returns the episode's seed
        sequence, for whatever else the episode builds (the focal env's rule policies)."""
        if seed is not None or self._seed_sequence is None:
            self._seed_sequence = np.random.SeedSequence(seed)
        episode = self._seed_sequence.spawn(1)[0]
        env_seq, learner_seq = episode.spawn(2)
        # the inner env takes an int seed; 64 bits of its own branch keep the streams apart
        self.observations, _ = self.env.reset(seed=int(env_seq.generate_state(1, np.uint64)[0]))
        swarm = self.config.swarm
        initial = swarm.num_external if isinstance(swarm.num_external, int) \
            else swarm.train_budget // 2  # overridden each round by the meta actions anyway
        learners = list(self.config.learner(self.names, initial, learner_seq))
        if len(learners) != len(self.names):
            raise ValueError(f"learner factory returned {len(learners)} agents, expected "
                             f"{len(self.names)} (one per node of {list(self.names)})")
        self.agents = AgentCalls(dict(zip(self.names, learners)))  # resolved once an episode
        self._features = {a: RatioFeatures(swarm.max_rounds, self.config.feature_window)
                          for a in self.names}
        return episode

    def step(self, num_external: Mapping[str, Any]) -> tuple[RoundRecord, dict[str, float]]:
        """Play one round with ``num_external`` as the live nodes' J for their next round (an
        int, or a Discrete sample: a numpy integer or a one-element array).

        Returns the round's record and each node's meta reward."""
        budget = self.config.swarm.train_budget
        chosen = {}
        for a in self.live:
            j = num_external.get(a)
            if isinstance(j, np.ndarray) and j.size == 1:
                j = j.reshape(-1)[0]
            if isinstance(j, (bool, np.bool_)) or not isinstance(j, (int, np.integer)) \
                    or not 0 <= j <= budget:
                raise ValueError(f"num_external of {a} must be an int in [0, {budget}] "
                                 f"(train_budget), got {j!r}")
            chosen[a] = int(j)
        record = play_round(self.env, self.agents, self.observations, chosen)
        self.observations = record.observations
        for a, reward in record.rewards.items():
            self._features[a].update(reward, record.infos[a])
        cost = self.config.generation_cost
        net = {a: r - cost * record.infos[a]["generated_completions"]
               for a, r in record.rewards.items()}
        return record, REWARDS[self.config.reward](net)

    def features(self, agent: str) -> np.ndarray:
        """The meta observation of ``agent``: its ``RatioFeatures`` vector."""
        return self._features[agent].vector(self.observations[agent])

    def info(self, record: RoundRecord, agent: str) -> dict[str, Any]:
        """The meta info of ``agent``: its inner info, plus ``round_reward`` (its own reward
        before any cost or averaging)."""
        return {**record.infos[agent], "round_reward": record.rewards[agent]}
