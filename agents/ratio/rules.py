"""Rule-based ratio policies: a node's J (external groups per round) by a fixed rule.

A ratio policy chooses the J of a node's *next* round (``choose(observation)``) and hears how
the round just played went (``update(reward, info)``, where ``info["num_external"]`` is the J
that was in force in it); ``sapo_env.runtime.run(env, agents, ratio_policies={node: policy})`` calls
both (see ``sapo_env.runtime.runner``). Under the paper's protocol a node with J in force answers
I = ``train_budget`` - J questions, so at J = ``train_budget`` it answers nothing and its reward
is 0: that 0 says nothing about its skill. The two adaptive rules here therefore measure the
node only in rounds in which it answered something (``info["generated_completions"] > 0``),
and by default never take J above ``train_budget - 1``, so that the node keeps measuring itself.

- ``FixedRatio``: always the same J (the paper's I/J configurations: 8/0, 6/2, 4/4, 2/6).
- ``ScheduledRatio``: J by round, from a fixed piecewise-constant schedule (the form of
  ``sapo-env bench-ratio``'s oracle).
- ``PoolQuality``: one more external group while the pool looks better than the node's own
  rollouts, one fewer otherwise.
- ``LearningProgress``: the reward-trend rule that gensyn-ai's rl-swarm uses for task
  difficulty, applied to J.

Every policy has ``state_dict()`` / ``load_state_dict(state)`` (``agents.plain_state``): what it
has learned, as plain data, for checkpoints.

Example (the paper's 4/4 for one node, an adaptive rule for another)::

    >>> import sapo_env.runtime
    >>> from agents.sim.simulated import simulated_swarm
    >>> env = sapo_env.parallel_env(n=2, max_rounds=3)
    >>> policies = {"node_0": FixedRatio(4), "node_1": PoolQuality()}
    >>> history = sapo_env.runtime.run(env, simulated_swarm(env.possible_agents, seed=0), seed=0,
    ...                        progress=False, ratio_policies=policies)
    >>> history.num_external[:, 0].tolist()          # round 0's J is SwarmConfig.num_external
    [4, 4, 4]
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from agents.plain_state import PlainState
from agents.ratio.registry import ratio_policy
from sapo_env.types import Observation
from sapo_env.validation import check_fits_budget, check_int


@ratio_policy("fixed-J", kind="fixed", shown_as="FixedRatio(J)",
              rule="always J: the paper's 8/0, 6/2, 4/4, 2/6")
class FixedRatio(PlainState):
    """Always the same J: the paper's fixed I/J configurations.

    Update rule: none (the outcome of a round changes nothing). Payoff: not used.

    Args:
        num_external: the J of every round it chooses (an int >= 0). ``choose`` raises
            ``ValueError`` if it exceeds the env's ``train_budget``, which a policy learns only
            from its first observation.

    Example::

        >>> FixedRatio(2).choose({"train_budget": 8, "num_external": 4, "round": 0})
        2
    """

    def __init__(self, num_external: int):
        check_int("num_external", num_external, 0)
        self.num_external = num_external

    def choose(self, observation: Observation) -> int:
        check_fits_budget("FixedRatio", self.num_external, observation["train_budget"])
        return self.num_external

    def update(self, reward: float, info: Mapping[str, Any]) -> None:
        """Nothing to learn."""


@ratio_policy("schedule-J1,J2,...", kind="fixed", shown_as="ScheduledRatio([(0, 6), (150, 0)])",
              rule="J by round from a fixed schedule (first round, J): an open-loop policy, "
                   "the form of the benchmark's oracle")
class ScheduledRatio(PlainState):
    """J by round from a fixed schedule: an open-loop policy, the same in every swarm.

    Update rule: none. ``choose`` at round t's observation sets the J in force in round
    t + 1 (as every ratio policy's does): the J of the last phase that has begun by then.

    Args:
        schedule: ``(first_round, J)`` pairs, first rounds strictly increasing, the first 0:
            J is in force from its first round until the next pair's. Round 0's J is the env's
            (``SwarmConfig.num_external``); set it to the first phase's J for the schedule to
            hold from round 0.

    Example::

        >>> policy = ScheduledRatio([(0, 6), (100, 0)])
        >>> [policy.choose({"train_budget": 8, "round": t}) for t in (0, 98, 99)]
        [6, 6, 0]
    """

    def __init__(self, schedule: Sequence[tuple[int, int]]):
        phases = [tuple(p) for p in schedule]
        rounds = [r for r, _ in phases]
        if (not phases or any(len(p) != 2 for p in phases) or rounds[0] != 0
                or any(b <= a for a, b in zip(rounds, rounds[1:]))):
            raise ValueError(f"schedule must be (first_round, J) pairs, the first at round 0, "
                             f"first rounds strictly increasing; got {list(schedule)!r}")
        for r, j in phases:
            check_int("schedule J", j, 0)
            check_int("schedule first_round", r, 0)
        self.schedule = tuple((int(r), int(j)) for r, j in phases)

    def num_external_at(self, round_: int) -> int:
        """The J the schedule puts in force in round ``round_``."""
        return next(j for r, j in reversed(self.schedule) if r <= round_)

    def choose(self, observation: Observation) -> int:
        j = self.num_external_at(int(observation["round"]) + 1)
        check_fits_budget("ScheduledRatio", j, observation["train_budget"])
        return j

    def update(self, reward: float, info: Mapping[str, Any]) -> None:
        """Nothing to learn."""


class _Bounds(PlainState):
    """The J range of a rule: ``[min_external, max_external]``, where ``max_external=None``
    means ``train_budget - 1`` (answer at least one question, so the node's own reward stays
    measured). Shared by the two adaptive rules."""

    def __init__(self, min_external: int, max_external: int | None):
        check_int("min_external", min_external, 0)
        if max_external is not None:
            check_int("max_external", max_external, 0)
            if max_external < min_external:
                raise ValueError(f"max_external must be >= min_external={min_external}, "
                                 f"got {max_external}")
        self.min_external = min_external
        self.max_external = max_external

    def bounds(self, observation: Observation) -> tuple[int, int]:
        budget, name = observation["train_budget"], type(self).__name__
        if self.max_external is None:
            hi = max(budget - 1, 0)
        else:
            hi = self.max_external
            if hi > budget:
                raise ValueError(f"{name} max_external={hi} exceeds the env's train_budget="
                                 f"{budget}: expected max_external <= {budget}")
        if self.min_external > hi:
            raise ValueError(f"{name} min_external={self.min_external} exceeds its highest J, "
                             f"{hi} (train_budget={budget}): expected min_external <= {hi}")
        return self.min_external, hi


def _measured(info: Mapping[str, Any]) -> bool:
    """Whether the round's reward measures the node: it answered at least one question (with
    J = train_budget it answered none, and the env pays it 0)."""
    return info["generated_completions"] > 0


@ratio_policy("pool-quality", kind="rule",
              rule="J + 1 while the filtered pool's mean reward "
                   "(`infos[\"pool_mean_reward_filtered\"]`) beats the node's own recent "
                   "reward by 0.05, J - 1 otherwise or when the pool is empty",
              tuning=({}, {"margin": 0.0}, {"margin": 0.1}, {"window": 30}))
class PoolQuality(_Bounds):
    """One more external group while the pool beats the node's own rollouts, one fewer otherwise.

    Rule (at each ``choose``, from the latest ``update``; J is the J in force this round, the
    observation's ``num_external``)::

        pool  = info["pool_mean_reward_filtered"] of the last round played
        own   = mean reward of the node's last `window` measured rounds
        J'    = J       before the first update
                J - 1   if pool is None: the node's filtered view of the pool is empty, so
                        external slots would go unfilled; it answers more questions instead
                J       if no round has measured the node yet (nothing to compare with)
                J + 1   if pool > own + margin
                J - 1   otherwise

    then clipped to ``[min_external, max_external]``. A round with J = train_budget does not
    measure the node (it answered nothing; its reward 0 is not a score), so ``own`` skips it;
    that is also why ``max_external`` defaults to train_budget - 1: at J = train_budget ``own``
    would go stale and, were the pool still better than that stale value, J would stay at the
    budget for good. Payoff: none; the rule compares rewards, it does not learn values.

    Args:
        margin: how much the pool's mean reward must beat ``own`` to add an external group
            (default 0.05, in reward units; rewards are mean verifier scores in [0, 1]).
        window: measured rounds averaged into ``own`` (default 10).
        min_external: lowest J (default 0).
        max_external: highest J; None (default) means train_budget - 1.

    Example::

        >>> policy = PoolQuality(margin=0.1)
        >>> obs = {"train_budget": 8, "num_external": 4, "round": 1}
        >>> policy.update(0.3, {"generated_completions": 12, "pool_mean_reward_filtered": 0.6})
        >>> policy.choose(obs)              # 0.6 > 0.3 + 0.1: one more external group
        5
    """

    _state_fields = ("_own", "_pool_mean", "_updated")

    def __init__(self, margin: float = 0.05, window: int = 10, min_external: int = 0,
                 max_external: int | None = None):
        super().__init__(min_external, max_external)
        if not (isinstance(margin, (int, float)) and math.isfinite(margin)):
            raise ValueError(f"margin must be a finite number, got {margin!r}")
        check_int("window", window, 1)
        self.margin = float(margin)
        self.window = window
        self._own: deque[float] = deque(maxlen=window)
        self._pool_mean: float | None = None
        self._updated = False

    def choose(self, observation: Observation) -> int:
        lo, hi = self.bounds(observation)
        j = observation["num_external"]
        if self._updated:
            if self._pool_mean is None:
                j -= 1
            elif self._own:
                own = sum(self._own) / len(self._own)
                j += 1 if self._pool_mean > own + self.margin else -1
        return min(max(j, lo), hi)

    def update(self, reward: float, info: Mapping[str, Any]) -> None:
        self._updated = True
        self._pool_mean = info["pool_mean_reward_filtered"]
        if _measured(info):
            self._own.append(float(reward))


@ratio_policy("learning-progress", kind="rule",
              rule="every 5 rounds, J + 1 when the mean reward of the last 10 rounds beats the "
                   "10 before by more than 0.05, J - 1 when it falls by as much: the difficulty "
                   "rule of the paper's reference code (gensyn-ai/rl-swarm, "
                   "`code_gen_exp/src/proposer.py`), applied to J",
              tuning=({}, {"threshold": 0.02}, {"threshold": 0.1},
                      {"window": 20, "check_every": 10}))
class LearningProgress(_Bounds):
    """J moves one step when the node's reward trend moves: rl-swarm's difficulty rule, on J.

    Where the rule comes from, and how it differs from its source: docs/provenance.md,
    "Learning-progress ratio rule". Its difficulty level becomes J, in ``[min_external,
    max_external]``, and a reward sample becomes the node's reward in one round::

        every `check_every` rounds (counting update calls), once `2 * window` measured rounds
        are stored:
            diff = mean(last `window` rewards) - mean(the `window` before)
            J    = J + 1   if diff >  threshold   (improving: lean more on the swarm and
                                                   generate less, as rl-swarm makes problems
                                                   harder when solvers improve)
                   J - 1   if diff < -threshold   (regressing: back to its own rollouts)

    J starts at the first observation's ``num_external`` and is clipped to the range. A round with
    J = train_budget (no own completions, reward 0 by fiat) adds no sample; hence ``max_external``
    defaults to train_budget - 1, or the samples would stop and J would stick at the budget. Each
    round adds its mean reward (the windows count rounds), and the first check comes after the 5th
    round. Payoff: none; the rule follows the trend of the round reward.

    Args:
        threshold: smallest change of the windowed mean reward that moves J (default 0.05).
        window: rounds in each of the two compared windows (default 10).
        check_every: rounds between checks (default 5).
        min_external: lowest J (default 0).
        max_external: highest J; None (default) means train_budget - 1.

    Example::

        >>> policy = LearningProgress(window=2, check_every=2)
        >>> obs = {"train_budget": 8, "num_external": 4, "round": 0}
        >>> policy.choose(obs)
        4
        >>> for reward in (0.2, 0.2, 0.5, 0.5):        # checked after rounds 2 and 4
        ...     policy.update(reward, {"generated_completions": 8})
        >>> policy.choose(obs)                         # 0.5 - 0.2 > 0.05: one step up
        5
    """

    _state_fields = ("level", "_range", "_rewards", "_rounds")

    def __init__(self, threshold: float = 0.05, window: int = 10, check_every: int = 5,
                 min_external: int = 0, max_external: int | None = None):
        super().__init__(min_external, max_external)
        if not (isinstance(threshold, (int, float)) and math.isfinite(threshold)
                and threshold >= 0):
            raise ValueError(f"threshold must be a finite number >= 0, got {threshold!r}")
        check_int("window", window, 1)
        check_int("check_every", check_every, 1)
        self.threshold = float(threshold)
        self.window = window
        self.check_every = check_every
        self.level: int | None = None  #: the current J (None until the first choose)
        self._range = (0, 0)           # [lo, hi] of J, set by choose from the budget
        self._rewards: deque[float] = deque(maxlen=2 * window)
        self._rounds = 0

    def choose(self, observation: Observation) -> int:
        self._range = lo, hi = self.bounds(observation)
        level = observation["num_external"] if self.level is None else self.level
        self.level = min(max(level, lo), hi)
        return self.level

    def update(self, reward: float, info: Mapping[str, Any]) -> None:
        self._rounds += 1
        if _measured(info):
            self._rewards.append(float(reward))
        if (self._rounds % self.check_every or self.level is None
                or len(self._rewards) < 2 * self.window):
            return
        rewards = list(self._rewards)
        diff = (sum(rewards[self.window:]) - sum(rewards[:self.window])) / self.window
        step = 1 if diff > self.threshold else -1 if diff < -self.threshold else 0
        lo, hi = self._range
        self.level = min(max(self.level + step, lo), hi)


__all__ = ["FixedRatio", "LearningProgress", "PoolQuality", "ScheduledRatio"]
