"""Metrics of a swarm run: pure functions over a ``History``, plus a held-out evaluation.

The paper (arXiv 2509.08721, Section 5) reports the cumulative reward over 2000 rounds and the
per-round swarm reward smoothed by a moving average of window 100, with the minimum and maximum
across nodes as a band. Its reviewers asked for more: reward per task, the health of the shared
pool, how fast a discovery spreads, and a held-out evaluation rather than training reward alone.
Everything here reads a ``History`` (``sapo_env.run``'s return value) and returns numpy arrays
or small dataclasses; nothing mutates it.

Example::

    >>> import sapo_env
    >>> from sapo_env import metrics
    >>> from agents import DemonstratorAgent
    >>> env = sapo_env.parallel_env(n=2, max_rounds=4)
    >>> history = sapo_env.run(env, [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1)],
    ...                        seed=0, progress=False)
    >>> metrics.smoothed_reward(history, window=2).mean.shape
    (4,)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from sapo_env.answers import get_extractor
from sapo_env.config import MAX_QUESTIONS_PER_STREAM, SwarmConfig
from sapo_env.runner import Callback, History, RoundRecord
from sapo_env.tasks import HELD_OUT_BLOCK, DrawnQuestion, QuestionStream, score_completions
from sapo_env.types import make_observation
from sapo_env.validation import check_int

PAPER_WINDOW = 100
"""The paper's moving-average window, in rounds."""

CumulativeKind = Literal["mean", "total"]


# --- reward ----------------------------------------------------------------------------------
def cumulative_reward(history: History, kind: CumulativeKind = "mean") -> float:
    """Cumulative reward: ``"mean"`` sums the swarm-mean reward over rounds (the paper's
    561.79 ... 1093.31 are on this scale), ``"total"`` sums over rounds and nodes."""
    if kind == "mean":
        return history.cumulative_reward
    if kind == "total":
        return history.cumulative_reward_total
    raise ValueError(f"kind must be 'mean' or 'total', got {kind!r}")


def moving_average(values: np.ndarray, window: int = PAPER_WINDOW) -> np.ndarray:
    """Trailing moving average along axis 0, NaN-aware, same shape as ``values``.

    Entry ``t`` averages rows ``max(0, t - window + 1) .. t`` that are not NaN, so the first
    ``window - 1`` entries average fewer rounds (the curve starts at round 0, as the paper's
    does) and rounds in which a node did not act (NaN) are skipped. NaN where a window has no
    value at all.
    """
    check_int("window", window, 1)
    values = np.asarray(values, dtype=np.float64)
    present = ~np.isnan(values)
    sums = np.cumsum(np.where(present, values, 0.0), axis=0)
    counts = np.cumsum(present, axis=0)
    if len(values) > window:
        sums[window:] = sums[window:] - sums[:-window]
        counts[window:] = counts[window:] - counts[:-window]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


@dataclass(frozen=True)
class SmoothedReward:
    """The paper's Figure 2 for one run: smoothed swarm reward with a min/max band."""

    mean: np.ndarray  #: (rounds,) moving average of the swarm-mean reward
    low: np.ndarray  #: (rounds,) minimum over nodes of each node's moving average
    high: np.ndarray  #: (rounds,) maximum over nodes of each node's moving average
    per_node: np.ndarray  #: (rounds, n) each node's moving average


def smoothed_reward(history: History, window: int = PAPER_WINDOW) -> SmoothedReward:
    """Moving-average reward of the swarm and the band of its nodes (paper, Figure 2)."""
    per_node = moving_average(history.rewards, window)
    filled = np.isnan(per_node).all(axis=1)
    return SmoothedReward(
        mean=moving_average(history.swarm_mean, window),
        low=np.where(filled, np.nan, np.nanmin(np.where(filled[:, None], 0.0, per_node), axis=1)),
        high=np.where(filled, np.nan, np.nanmax(np.where(filled[:, None], 0.0, per_node), axis=1)),
        per_node=per_node,
    )


def task_rewards(history: History) -> dict[str, np.ndarray]:
    """Per task, a (rounds, n) array of each node's mean score on that task in each round.

    NaN where the node drew no question of the task that round (read from the env's
    ``task_scores`` info). Smooth it with ``moving_average``, which skips NaN.
    """
    tasks = sorted({t for infos in history.infos for info in infos.values()
                    for t in info.get("task_scores", {})})
    column = {a: i for i, a in enumerate(history.agents)}
    curves = {t: np.full((history.rounds, len(history.agents)), np.nan) for t in tasks}
    for r, infos in enumerate(history.infos[:history.rounds]):
        for agent, info in infos.items():
            for task, score in info.get("task_scores", {}).items():
                curves[task][r, column[agent]] = score
    return curves


def task_curves(history: History, window: int = PAPER_WINDOW) -> dict[str, np.ndarray]:
    """Per task, the (rounds,) swarm reward on that task, moving-averaged over ``window``."""
    return {task: moving_average(_nanmean(scores, axis=1), window)
            for task, scores in task_rewards(history).items()}


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    """Mean ignoring NaN; NaN (without a warning) where everything is NaN."""
    present = ~np.isnan(values)
    counts = present.sum(axis=axis)
    sums = np.where(present, values, 0.0).sum(axis=axis)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


# --- pool health -----------------------------------------------------------------------------
def info_array(history: History, key: str, missing: float = np.nan) -> np.ndarray:
    """A (rounds, n) float array of one per-node info value (``missing`` where absent/None)."""
    return _per_node(history.agents, history.infos[:history.rounds], key, missing)


def _per_node(agents: Sequence[str], rounds: Sequence[Mapping[str, Mapping[str, Any]]],
              key: str, missing: float) -> np.ndarray:
    """(rounds, n) array of ``rounds[r][node][key]`` (``missing`` where absent or None)."""
    column = {a: i for i, a in enumerate(agents)}
    out = np.full((len(rounds), len(agents)), missing, dtype=np.float64)
    for r, by_node in enumerate(rounds):
        for agent, values in by_node.items():
            value = values.get(key)
            if value is not None:
                out[r, column[agent]] = value
    return out


@dataclass(frozen=True)
class PoolHealth:
    """The shared pool over time: what went in, what survived the filter, who gave and took."""

    shared: np.ndarray  #: (rounds,) groups published by all nodes
    shared_mean_reward: np.ndarray  #: (rounds,) mean reward of the published groups
    informative: np.ndarray  #: (rounds,) groups in a node's view of the pool that survive the
    #: filter, averaged over nodes
    informative_fraction: np.ndarray  #: (rounds,) fraction of a node's view of the pool that
    #: survives the filter, averaged over nodes
    contribution: np.ndarray  #: (rounds, n) groups of each node that others took as external
    consumption: np.ndarray  #: (rounds, n) external groups each node trained on
    external_shortfall: np.ndarray  #: (rounds, n) external groups asked for but not available
    #: (rounds,) fraction of their own groups with zero advantage, averaged over the nodes that
    #: answered questions
    zero_advantage_fraction: np.ndarray


def pool_health(history: History) -> PoolHealth:
    """Pool health from the env's infos (see ``SwarmEnv`` infos)."""
    return pool_health_of(history.infos[:history.rounds], history.agents)


def pool_health_of(infos: Sequence[Mapping[str, Mapping[str, Any]]],
                   agents: Sequence[str]) -> PoolHealth:
    """Pool health from a sequence of rounds' infos (one round: TensorBoard's per-round log)."""
    def per_node(key: str, missing: float = np.nan) -> np.ndarray:
        return _per_node(agents, infos, key, missing)

    shared = per_node("shared_groups", 0.0)
    shared_reward = per_node("shared_mean_reward")
    with np.errstate(all="ignore"):
        weighted = np.nansum(np.nan_to_num(shared_reward) * shared, axis=1)
        total = shared.sum(axis=1)
        mean_reward = np.where(total > 0, weighted / np.maximum(total, 1), np.nan)
        size = per_node("pool_size")
        filtered = per_node("pool_size_filtered")
        fraction = _nanmean(np.where(size > 0, filtered / np.where(size > 0, size, 1), np.nan),
                            axis=1)
    return PoolHealth(
        shared=total,
        shared_mean_reward=mean_reward,
        informative=_nanmean(filtered, axis=1),
        informative_fraction=fraction,
        contribution=per_node("taken_by_others", 0.0),
        consumption=per_node("external_groups", 0.0),
        external_shortfall=per_node("external_shortfall", 0.0),
        zero_advantage_fraction=_nanmean(per_node("zero_advantage_fraction"), axis=1),
    )


# --- propagation -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Propagation:
    """How a level of skill spread through the swarm (rounds are 0-based; None: never)."""

    first_round: int | None  #: first round any node's moving reward reached the threshold
    first_node: str | None  #: that node
    rounds_to_half: int | None  #: rounds after ``first_round`` until half the nodes had
    rounds_to_all: int | None  #: rounds after ``first_round`` until every node had
    node_rounds: dict[str, int | None]  #: per node, the round it first reached the threshold


def crossing_rounds(curves: np.ndarray, threshold: float) -> list[int | None]:
    """Per column of a (rounds, n) array, the first row at or above ``threshold``."""
    reached = np.nan_to_num(np.asarray(curves, dtype=np.float64), nan=-np.inf) >= threshold
    return [int(np.argmax(col)) if col.any() else None for col in reached.T]


def propagation_of(curves: np.ndarray, agents: Sequence[str], threshold: float) -> Propagation:
    """Propagation of a threshold crossing through per-node curves (rounds, n)."""
    rounds = crossing_rounds(curves, threshold)
    by_node = dict(zip(agents, rounds))
    reached = sorted(r for r in rounds if r is not None)
    if not reached:
        return Propagation(None, None, None, None, by_node)
    first = reached[0]
    half = math.ceil(len(agents) / 2)
    return Propagation(
        first_round=first,
        first_node=agents[rounds.index(first)],
        rounds_to_half=reached[half - 1] - first if len(reached) >= half else None,
        rounds_to_all=reached[-1] - first if len(reached) == len(agents) else None,
        node_rounds=by_node,
    )


def propagation(history: History, threshold: float = 0.5, window: int = PAPER_WINDOW
                ) -> dict[str, Propagation]:
    """Per task: when the first node's moving reward on the task passes ``threshold``, and how
    many rounds until half and all nodes do. The moving average runs over the rounds in which
    the node drew the task."""
    return {task: propagation_of(moving_average(scores, window), history.agents, threshold)
            for task, scores in task_rewards(history).items()}


def learn_metric(history: History, key: str) -> np.ndarray:
    """A (rounds, n) array of one value the agents' ``learn`` returned (NaN where absent), e.g.
    the simulated learner's ``tag_prob``; ``propagation_of`` applies to it too."""
    return _per_node(history.agents, history.learn_metrics[:history.rounds], key, np.nan)


# --- held-out evaluation ---------------------------------------------------------------------
# Training streams never use sapo_env.tasks.HELD_OUT_BLOCK, so held-out questions drawn from
# it are disjoint from every training question by construction.
_TASK_SLOTS = 64  # the held-out block is split into this many per-task seed ranges


def held_out_questions(config: SwarmConfig, n_questions: int = 64, seed: int = 0
                       ) -> list[DrawnQuestion]:
    """A fixed held-out question set for a swarm configuration.

    Tasks are drawn by the configuration's weights (``config.tasks``); seeds come from a seed
    block no training stream ever uses, so no held-out question is a training question. The
    same ``(config.tasks, n_questions, seed)`` gives the same set.
    """
    check_int("n_questions", n_questions, 1)
    specs = config.tasks
    if len(specs) > _TASK_SLOTS:
        raise ValueError(f"held-out evaluation supports at most {_TASK_SLOTS} tasks, "
                         f"got {len(specs)}")
    slot = MAX_QUESTIONS_PER_STREAM // _TASK_SLOTS
    if n_questions > slot // 2:
        raise ValueError(f"n_questions must be <= {slot // 2}, got {n_questions}")
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    weights = np.array([s.weight for s in specs])
    choices = rng.choice(len(specs), size=n_questions, p=weights / weights.sum())
    # one seed per task inside its slot, leaving room for n_questions consecutive items
    starts = [HELD_OUT_BLOCK * MAX_QUESTIONS_PER_STREAM + k * slot
              + int(rng.integers(0, slot - n_questions)) for k in range(len(specs))]
    streams = [QuestionStream(spec, start) for spec, start in zip(specs, starts)]
    return [streams[c].draw() for c in choices.tolist()]


def evaluate(agent: Any, questions: Sequence[DrawnQuestion], config: SwarmConfig,
             round_: int = 0, samples: int = 1) -> float:
    """Mean verifier score of one agent on a question set: pass@1 when ``samples=1``.

    The agent answers through its ordinary ``act``, ``config.train_budget`` questions at a
    time (J = 0 in force), asked for ``samples`` completions per question; observations carry
    an empty pool and batch, and the J it asks for is ignored. With ``samples > 1`` the score is the
    mean over samples (an unbiased estimate of pass@1).

    An agent whose ``act`` draws from its own random state can define ``evaluation_scope()``,
    a context manager that puts that state back on exit (``GRPOAgent`` does); evaluation runs
    inside it, so evaluating mid-run does not change the training run.
    """
    extract = get_extractor(config.answer_format)
    scores = []
    step = max(config.train_budget, 1)
    with _evaluation_scope(agent):  # once: the chunks draw on from each other's random state
        for start in range(0, len(questions), step):
            chunk = questions[start:start + step]
            observation = make_observation(
                round=round_, system_prompt=config.system_prompt,
                completions_per_question=samples, train_budget=config.train_budget,
                num_external=0, questions=tuple(d.question for d in chunk))
            action = agent.act(observation)
            for drawn, completions in zip(chunk, action["completions"]):
                scores.extend(
                    score_completions(drawn, tuple(completions)[:samples], extract).tolist()
                )
    return float(np.mean(scores))


def _evaluation_scope(agent: Any) -> contextlib.AbstractContextManager:
    scope = getattr(agent, "evaluation_scope", None)
    return scope() if callable(scope) else contextlib.nullcontext()


@dataclass
class HeldOutResult:
    """Held-out scores recorded during a run."""

    agents: tuple[str, ...]
    rounds: list[int]  #: rounds after which the evaluation ran
    scores: list[list[float]]  #: per evaluation, per node

    def as_array(self) -> np.ndarray:
        """(evaluations, n) scores."""
        return np.asarray(self.scores, dtype=np.float64).reshape(len(self.rounds),
                                                                 len(self.agents))


class HeldOutEvaluator(Callback):
    """Evaluate every node on a fixed held-out set every ``every`` rounds (and after the last).

    Use as a ``sapo_env.run`` callback; read ``result`` afterwards. Each evaluation is one
    ``act`` call per ``train_budget`` questions per node, made with the round just
    played, so an agent that keys its randomness on the round (the simulated learner) keeps
    the same training trajectory with or without evaluation; an agent with its own random
    state (``GRPOAgent``) keeps it through ``evaluation_scope`` (see :func:`evaluate`).
    """

    def __init__(self, every: int = 100, n_questions: int = 64, seed: int = 0,
                 samples: int = 1):
        check_int("every", every, 1)
        check_int("samples", samples, 1)
        self.every, self.n_questions, self.seed, self.samples = every, n_questions, seed, samples
        self.result: HeldOutResult | None = None
        self._agents: Mapping[str, Any] = {}
        self._config: SwarmConfig | None = None
        self._questions: list[DrawnQuestion] = []
        self._last_round = -1
        self._listeners: list[Callable[[int, dict[str, float]], None]] = []

    def add_listener(self, listener: Callable[[int, dict[str, float]], None]) -> None:
        """Call ``listener(round, scores_by_node)`` after every evaluation (a logger's hook)."""
        self._listeners.append(listener)

    def on_run_start(self, env: Any, agents: Mapping[str, Any]) -> None:
        self._agents, self._config = agents, env.config
        self._questions = held_out_questions(env.config, self.n_questions, self.seed)
        self.result = HeldOutResult(tuple(env.possible_agents), [], [])
        self._last_round = -1

    def on_round_end(self, record: RoundRecord) -> None:
        self._last_round = record.round
        if (record.round + 1) % self.every == 0:
            self._evaluate(record.round)

    def state_dict(self) -> dict[str, Any]:
        """The scores so far, for a run's checkpoint (``sapo_env.Checkpoint``)."""
        result = self.result or HeldOutResult((), [], [])
        return {"rounds": list(result.rounds), "scores": [list(s) for s in result.scores],
                "last_round": self._last_round}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict` (after ``on_run_start``, as the runner does)."""
        if self.result is None:
            raise RuntimeError("HeldOutEvaluator.load_state_dict() before on_run_start()")
        self.result.rounds[:], self.result.scores[:] = state["rounds"], state["scores"]
        self._last_round = int(state["last_round"])

    def on_run_end(self, history: History) -> None:
        if self.result is not None and self._last_round >= 0 and (
                not self.result.rounds or self.result.rounds[-1] != self._last_round):
            self._evaluate(self._last_round)

    def _evaluate(self, round_: int) -> None:
        assert self.result is not None and self._config is not None
        scores = {a: evaluate(self._agents[a], self._questions, self._config, round_,
                              self.samples) for a in self.result.agents}
        self.result.rounds.append(round_)
        self.result.scores.append([scores[a] for a in self.result.agents])
        for listener in self._listeners:
            listener(round_, scores)


__all__ = [
    "PAPER_WINDOW",
    "HeldOutEvaluator",
    "HeldOutResult",
    "PoolHealth",
    "Propagation",
    "SmoothedReward",
    "crossing_rounds",
    "cumulative_reward",
    "evaluate",
    "held_out_questions",
    "info_array",
    "learn_metric",
    "moving_average",
    "pool_health",
    "propagation",
    "propagation_of",
    "smoothed_reward",
    "task_curves",
    "task_rewards",
]
