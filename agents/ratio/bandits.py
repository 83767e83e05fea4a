"""Bandit ratio policies: a node learns which J (external groups per round) pays.

Each policy treats every allowed J as an arm. ``choose(observation)`` picks the arm for the
node's *next* round; ``update(reward, info)`` reports a round, whose J in force is
``info["num_external"]`` (chosen one round earlier, or set by ``SwarmConfig.num_external`` in
round 0). Credit goes to a J that was in force (which one: ``payoff``), never to the last J
chosen.

Arms: by default every J in ``0..train_budget``, fixed at the first ``choose`` (a policy learns
the budget from its first observation); ``arms=(2, 4, 6)`` restricts them. A round whose J is
not an arm (round 0's J, when the env config sets one outside ``arms``) is not credited.

Payoff (``payoff=``, the same options for every bandit). Round t's reward r_t, the mean
verifier score of the node's own completions, in [0, 1], is measured on completions generated
*before* the node trains on round t's batch, the batch J_t shaped: J_t cannot affect r_t (bar
noise, and the forced 0 of J_t = ``train_budget``, where the node answers nothing). The first
reward J_t can affect is r_{t+1}. A round is *unmeasured* when the node answered nothing
(``info["generated_completions"] == 0``): its 0 is not a score.

- ``"next_reward"`` (default): J_t earns r_{t+1}, the first score after training on its batch;
  not credited when round t+1 is unmeasured (nor, of course, before round t+1 is reported).
- ``"progress"``: J_t earns (r_{t+1} - r_t + 1) / 2, the learning progress it bought, in
  [0, 1] (Graves et al. 2017, "Automated Curriculum Learning for Neural Networks", use
  learning progress as a bandit payoff); not credited when either round is unmeasured.
- ``"reward"``: J_t earns r_t, unmeasured rounds included (so J = ``train_budget`` always pays
  0); kept for comparison: J's effect reaches it only through drift in later rounds.

Fewer questions (larger J) make every payoff noisier. Silent arms: a J whose last round went
unmeasured (``silent``; J = ``train_budget`` under the paper's protocol) never earns with
"progress", and with "next_reward" playing it twice in a row voids a credit (and would freeze
D-UCB there); so with "progress" always, and with "next_reward" after an unmeasured round, the
bandits do not choose a silent arm (unless all are).

- ``DiscountedUCB``: discounted counts and means with Garivier & Moulines' padding.
- ``EXP3``: exponential weights with importance-weighted payoffs, as Online Data Mixing runs it.
- ``ThompsonSampling``: discounted Beta posteriors with fractional (Bernoulli-trick) updates.

Randomness comes only from ``np.random.default_rng(seed)``: same seed, same choices.
``state_dict()`` / ``load_state_dict()`` hold arms, statistics and generator (checkpoints).

Example::

    >>> import sapo_env.runtime
    >>> from agents.sim.simulated import simulated_swarm
    >>> env = sapo_env.parallel_env(n=2, max_rounds=4)
    >>> policies = {"node_0": ThompsonSampling(arms=(2, 4, 6), seed=0),
    ...             "node_1": DiscountedUCB(arms=(2, 4, 6))}
    >>> history = sapo_env.runtime.run(env, simulated_swarm(env.possible_agents, seed=0), seed=0,
    ...                        progress=False, ratio_policies=policies)
    >>> history.num_external[1:, 1].tolist()          # UCB plays each arm once first
    [2, 4, 6]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import numpy as np

from agents.plain_state import PlainState
from agents.ratio.registry import GRID_ARMS, ratio_policy
from sapo_env.types import Observation

Payoff = Literal["reward", "next_reward", "progress"]
PAYOFFS: tuple[str, ...] = get_args(Payoff)


def round_payoff(reward: float) -> float:
    """A round's reward, checked: a number in [0, 1] (a mean verifier score)."""
    if not (isinstance(reward, (int, float)) and 0.0 <= reward <= 1.0):
        raise ValueError(f"reward must be a number in [0, 1] (a mean verifier score), "
                         f"got {reward!r}")
    return float(reward)


def _check_unit(name: str, value: Any) -> float:
    """``value`` in (0, 1], else ValueError naming ``name``."""
    if not (isinstance(value, (int, float)) and 0 < value <= 1):
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return float(value)


def _check_positive(name: str, value: Any) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _rng(seed: int | np.random.SeedSequence | None) -> np.random.Generator:
    if not (seed is None or isinstance(seed, np.random.SeedSequence)
            or (isinstance(seed, int) and not isinstance(seed, bool))):
        raise ValueError(f"seed must be an int, a numpy SeedSequence or None, got {seed!r}")
    return np.random.default_rng(seed)


class _JBandit(PlainState):
    """Arm bookkeeping shared by the bandits: which J each arm is, when the arms are fixed,
    which round an update is about, and which J earns which payoff. Subclasses implement
    ``_start(k)`` (state for k arms), ``_pick() -> arm index`` and
    ``_credit(arm index, payoff, round in which that J was in force)``."""

    _state_fields: tuple[str, ...] = ("arms", "_round", "silent", "_last")

    def __init__(self, arms: Sequence[int] | None, payoff: Payoff = "next_reward"):
        if not (isinstance(payoff, str) and payoff in PAYOFFS):
            raise ValueError(f"payoff must be one of {', '.join(map(repr, PAYOFFS))}, "
                             f"got {payoff!r}")
        self.payoff = payoff
        if arms is not None:
            arms = tuple(arms)
            if (not arms or len(set(arms)) != len(arms) or any(
                    isinstance(j, bool) or not isinstance(j, (int, np.integer)) or j < 0
                    for j in arms)):
                raise ValueError(f"arms must be distinct ints >= 0 (the J values to try), "
                                 f"at least one, got {arms!r}")
            arms = tuple(sorted(int(j) for j in arms))
        self._requested = arms
        self.arms: tuple[int, ...] | None = None  #: the J of each arm, fixed at the first choose
        self._round = -1  # round of the latest choose: the round the next update is about
        self.silent = np.zeros(0, dtype=bool)  #: per arm: its latest round was unmeasured
        # (round, J in force, reward or None if unmeasured) of the latest update
        self._last: tuple[int, int, float | None] | None = None

    def choose(self, observation: Observation) -> int:
        budget = observation["train_budget"]
        if self.arms is None:
            self.arms = self._requested or tuple(range(budget + 1))
            self.silent = np.zeros(len(self.arms), dtype=bool)
            self._start(len(self.arms))
        if self.arms[-1] > budget:
            raise ValueError(f"{type(self).__name__} arms {list(self.arms)} exceed the env's "
                             f"train_budget={budget}: expected every arm <= {budget}")
        self._round, j = observation["round"], observation["num_external"]
        # this round is unmeasured if it has no questions; without them, as J's last round was
        silent_now = not observation["questions"] if "questions" in observation else None
        if j in self.arms:
            i = self.arms.index(j)
            if silent_now is not None:
                self.silent[i] = silent_now
            silent_now = self.silent[i]
        avoid = self.payoff == "progress" or (self.payoff == "next_reward" and bool(silent_now))
        self._allowed = ~self.silent if avoid and not self.silent.all() else np.ones_like(
            self.silent)  # the arms _pick may return
        return self.arms[self._pick()]

    def update(self, reward: float, info: Mapping[str, Any]) -> None:
        reward = round_payoff(reward)
        j = info["num_external"]
        measured = info.get("generated_completions", 1) != 0  # absent: measured
        last, self._last = self._last, (self._round, j, reward if measured else None)
        if self.arms is not None and j in self.arms:
            self.silent[self.arms.index(j)] = not measured
        if self.payoff == "reward":
            credit = (self._round, j, reward)
        elif last is None or last[0] != self._round - 1 or not measured:
            return  # nothing in force a round before, or this round's 0 is no score
        elif self.payoff == "next_reward":
            credit = (last[0], last[1], reward)
        elif last[2] is None:
            return
        else:
            credit = (last[0], last[1], (reward - last[2] + 1.0) / 2.0)
        round_, j, payoff = credit
        if self.arms is not None and j in self.arms:
            self._credit(self.arms.index(j), payoff, round_)

    def _start(self, k: int) -> None:
        raise NotImplementedError

    def _pick(self) -> int:
        raise NotImplementedError

    def _credit(self, arm: int, payoff: float, round_: int) -> None:
        raise NotImplementedError


@ratio_policy("discounted-ucb", kind="bandit",
              rule="discounted UCB over J (Garivier & Moulines 2011; gamma 0.99, xi 0.6): the "
                   "environment is non-stationary, the learners improve",
              tuning=({}, {"arms": GRID_ARMS}, {"arms": GRID_ARMS, "gamma": 0.95},
                      {"arms": GRID_ARMS, "gamma": 0.999}))
class DiscountedUCB(_JBandit):
    """Discounted UCB (D-UCB; Garivier & Moulines, "On upper-confidence bound policies for
    switching bandit problems", ALT 2011): UCB whose counts and sums forget at rate gamma.

    Update rule (every credit, J = arm i, payoff X)::

        N_k <- gamma * N_k + [k == i]         for every arm k
        S_k <- gamma * S_k + [k == i] * X

    Choice: an arm never credited (N_k = 0) first (each arm is played once; among several,
    the one chosen least often, then the lowest J); otherwise the highest index::

        index_k = S_k / N_k + 2 * B * sqrt(xi * log(n) / N_k),   n = sum_k N_k,   B = 1

    (their padding function c_t(gamma, k); B bounds the payoff, in [0, 1]); ties go to the
    lowest J. Silent arms (module docstring) are left out of both rules when avoided. It is
    deterministic: no seed. Discounting caps the total count near 1 / (1 - gamma), so it
    keeps re-trying every arm at a steady rate (with 3 arms paying 0.2, 0.9 and 0.4 and the
    defaults, about a quarter of the rounds), which is how it notices a change.

    Args:
        gamma: discount in (0, 1]; 1 is plain UCB with their padding. Default 0.99, a memory
            of about 1 / (1 - gamma) = 100 rounds, close to their recommended
            gamma = 1 - sqrt(Y/T) / (4B) for the SAPO paper's T = 2000 rounds and Y = 3
            changes of the best J (0.990).
        xi: exploration constant > 0. Default 0.6, just above the 1/2 their regret bound
            requires.
        arms: the J values to try (default every J in 0..train_budget).
        payoff: what J_t earns (module docstring): "next_reward" (default), "progress" or
            "reward".

    Example::

        >>> policy = DiscountedUCB(gamma=0.5, arms=(0, 4))
        >>> policy.choose({"train_budget": 8, "num_external": 4, "round": 0})  # untried first
        0
        >>> policy.update(0.6, {"num_external": 4})              # round 0 played at J = 4
        >>> policy.choose({"train_budget": 8, "num_external": 0, "round": 1})
        4
        >>> policy.update(0.7, {"num_external": 0})              # J = 4 earns round 1's 0.7
        >>> policy.counts.tolist(), policy.means.tolist()
        ([0.0, 1.0], [0.0, 0.7])
    """

    _state_fields = (*_JBandit._state_fields, "counts", "sums", "_times_chosen")

    def __init__(self, gamma: float = 0.99, xi: float = 0.6, arms: Sequence[int] | None = None,
                 payoff: Payoff = "next_reward"):
        super().__init__(arms, payoff)
        self.gamma = _check_unit("gamma", gamma)
        self.xi = _check_positive("xi", xi)

    def _start(self, k: int) -> None:
        self.counts = np.zeros(k)   #: discounted plays N_k
        self.sums = np.zeros(k)     #: discounted payoff sums S_k
        self._times_chosen = np.zeros(k, dtype=np.int64)

    @property
    def means(self) -> np.ndarray:
        """Discounted mean payoff per arm (0 for an arm never credited)."""
        return np.divide(self.sums, self.counts, out=np.zeros_like(self.sums),
                         where=self.counts > 0)

    def indexes(self) -> np.ndarray:
        """Each arm's upper confidence index; +inf for an arm never credited."""
        n = self.counts.sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            padding = 2.0 * np.sqrt(self.xi * math.log(max(n, 1.0)) / self.counts)
        return np.where(self.counts > 0, self.means + padding, np.inf)

    def _pick(self) -> int:
        untried = np.flatnonzero((self.counts == 0) & self._allowed)
        if untried.size:
            arm = int(untried[np.argmin(self._times_chosen[untried])])
        else:
            arm = int(np.argmax(np.where(self._allowed, self.indexes(), -np.inf)))
        self._times_chosen[arm] += 1
        return arm

    def _credit(self, arm: int, payoff: float, round_: int) -> None:
        self.counts *= self.gamma
        self.sums *= self.gamma
        self.counts[arm] += 1.0
        self.sums[arm] += payoff


@ratio_policy("exp3", kind="bandit", needs=("seed",),
              rule="EXP3 as Online Data Mixing uses it (Albalak et al. 2023: decaying "
                   "exploration, importance-weighted payoffs)",
              tuning=({}, {"arms": GRID_ARMS}, {"payoff": "progress"},
                      {"arms": GRID_ARMS, "payoff": "progress"}))
class EXP3(_JBandit):
    """EXP3 (Auer, Cesa-Bianchi, Freund & Schapire, SIAM J. Comput. 2002) as Online Data
    Mixing runs it (Albalak et al. 2023, "Efficient Online Data Mixing For Language Model
    Pre-Training"): exponential weights over J with a decaying exploration rate.

    Followed from ODM's released code (alon-albalak/online-data-mixing,
    ``megatron/data/data_sampling_utils.py``, ``Exp3WeightUpdater.update``). With K arms and
    t credits so far, eps_0 = 1/K and::

        credit (J = arm i, payoff X, chosen with probability p_i):
            R_i   <- R_i + X / p_i                         (importance-weighted, cumulative)
            t     <- t + 1
            eps_t  = min(1/K, sqrt(ln K / (K t)))
        choose:
            pi_k   = (1 - K eps_t) * exp(eps_{t-1} R_k) / sum_m exp(eps_{t-1} R_m) + eps_t

    so the learning rate is the previous exploration rate, as in ODM (whose t is the training
    step; here it counts credits). The distribution is uniform while t <= K ln K (about 20
    credits for 9 arms). Delay: J_t was drawn by the ``choose`` call of round t - 1, so p_i is
    that call's probability of arm i, kept per round (with "next_reward" and "progress" J_t is
    credited at round t + 1's update, two calls after the draw); round 0's J, set by the env
    config and not drawn, is never credited. Payoffs are in [0, 1], unscaled (ODM's, a
    training loss, are divided by 10 "so that cumulative reward doesn't explode"). While silent
    arms are avoided, ``choose`` draws from pi with theirs set to 0, renormalised (p_i is then
    that). EXP3 assumes nothing about how payoffs arise (an adversarial bandit), ODM's reason
    to use it while the model, and with it every arm's payoff, keeps changing.

    Args:
        arms: the J values to try (default every J in 0..train_budget).
        seed: seed of its generator (int, ``np.random.SeedSequence`` or None).
        payoff: what J_t earns (module docstring): "next_reward" (default), "progress" or
            "reward".

    Example::

        >>> policy = EXP3(arms=(0, 4, 8), seed=0)
        >>> obs = {"train_budget": 8, "num_external": 4, "round": 0}
        >>> policy.choose(obs) in (0, 4, 8), policy.probabilities().round(3).tolist()
        (True, [0.333, 0.333, 0.333])
    """

    _state_fields = (*_JBandit._state_fields, "estimated_rewards", "t", "_eps", "_eps_prev",
                     "_chosen_with", "rng")

    def __init__(self, arms: Sequence[int] | None = None,
                 seed: int | np.random.SeedSequence | None = None,
                 payoff: Payoff = "next_reward"):
        super().__init__(arms, payoff)
        self.rng = _rng(seed)

    def _start(self, k: int) -> None:
        self.estimated_rewards = np.zeros(k)  #: R_k, cumulative importance-weighted payoffs
        self.t = 0                            #: credits so far
        self._eps = self._eps_prev = 1.0 / k
        self._chosen_with: dict[int, np.ndarray] = {}  # round J is for -> distribution

    def probabilities(self) -> np.ndarray:
        """The distribution of the next ``choose``, before it drops any silent arms (module
        docstring) and renormalises."""
        k = len(self.estimated_rewards)
        z = self._eps_prev * self.estimated_rewards
        weights = np.exp(z - z.max())
        return (1.0 - k * self._eps) * weights / weights.sum() + self._eps

    def _pick(self) -> int:
        p = self.probabilities()
        if not self._allowed.all():
            p = np.where(self._allowed, p, 0.0) / p[self._allowed].sum()
        # The J chosen now is in force in round _round + 1. The next update credits round
        # _round ("reward") or _round - 1 (the others); older distributions are spent.
        self._chosen_with = {r: q for r, q in self._chosen_with.items()
                             if r >= self._round - 1}
        self._chosen_with[self._round + 1] = p
        return int(self.rng.choice(len(p), p=p))

    def _credit(self, arm: int, payoff: float, round_: int) -> None:
        p = self._chosen_with.pop(round_, None)
        if p is None or p[arm] == 0:  # that J was not drawn by this policy (round 0)
            return
        k = len(p)
        self.estimated_rewards[arm] += payoff / p[arm]
        self.t += 1
        self._eps_prev = self._eps
        self._eps = min(1.0 / k, math.sqrt(math.log(k) / (k * self.t)))


@ratio_policy("thompson", kind="bandit", needs=("seed",),
              rule="Beta posteriors over J, discounted (gamma 0.99) for non-stationarity",
              tuning=({}, {"arms": GRID_ARMS}, {"arms": GRID_ARMS, "gamma": 0.95},
                      {"arms": GRID_ARMS, "gamma": 0.999}))
class ThompsonSampling(_JBandit):
    """Thompson sampling over J with Beta posteriors, fractional updates and discounting.

    Update rule (every credit, J = arm i, payoff X in [0, 1])::

        S_k <- gamma * S_k + [k == i] * X          for every arm k
        F_k <- gamma * F_k + [k == i] * (1 - X)
        posterior of arm k: Beta(alpha0 + S_k, beta0 + F_k)

    The fractional update X, 1 - X is the expected value of Agrawal & Goyal's (COLT 2012)
    Bernoulli trick (a success with probability X), without its extra noise. The discount
    makes it forget, as discounted Thompson sampling does for non-stationary bandits (Raj &
    Kalyani 2017, "Taming non-stationary bandits: a Bayesian approach"): the node's skill, and
    with it every J's payoff, changes as it learns; gamma = 1 is the stationary sampler.
    Choice: draw one sample from each arm's posterior and take the largest (ties: lowest J).

    Args:
        gamma: discount in (0, 1] (default 0.99, a memory of about 100 rounds, like
            ``DiscountedUCB``'s).
        alpha0, beta0: the Beta prior, both > 0 (default 1, 1: uniform).
        arms: the J values to try (default every J in 0..train_budget).
        seed: seed of its generator (int, ``np.random.SeedSequence`` or None).
        payoff: what J_t earns (module docstring): "next_reward" (default), "progress" or
            "reward".

    Example::

        >>> policy = ThompsonSampling(gamma=0.5, arms=(2, 4), seed=0, payoff="reward")
        >>> policy.choose({"train_budget": 8, "num_external": 4, "round": 0}) in (2, 4)
        True
        >>> policy.update(0.75, {"num_external": 4})            # J = 4 earns round 0's 0.75
        >>> policy.alpha.tolist(), policy.beta.tolist()
        ([1.0, 1.75], [1.0, 1.25])
    """

    _state_fields = (*_JBandit._state_fields, "successes", "failures", "rng")

    def __init__(self, gamma: float = 0.99, alpha0: float = 1.0, beta0: float = 1.0,
                 arms: Sequence[int] | None = None,
                 seed: int | np.random.SeedSequence | None = None,
                 payoff: Payoff = "next_reward"):
        super().__init__(arms, payoff)
        self.gamma = _check_unit("gamma", gamma)
        self.alpha0 = _check_positive("alpha0", alpha0)
        self.beta0 = _check_positive("beta0", beta0)
        self.rng = _rng(seed)

    def _start(self, k: int) -> None:
        self.successes = np.zeros(k)  #: discounted S_k
        self.failures = np.zeros(k)   #: discounted F_k

    @property
    def alpha(self) -> np.ndarray:
        return self.alpha0 + self.successes

    @property
    def beta(self) -> np.ndarray:
        return self.beta0 + self.failures

    def _pick(self) -> int:
        return int(np.argmax(np.where(self._allowed, self.rng.beta(self.alpha, self.beta),
                                      -np.inf)))

    def _credit(self, arm: int, payoff: float, round_: int) -> None:
        self.successes *= self.gamma
        self.failures *= self.gamma
        self.successes[arm] += payoff
        self.failures[arm] += 1.0 - payoff


__all__ = ["EXP3", "PAYOFFS", "DiscountedUCB", "Payoff", "ThompsonSampling", "round_payoff"]
