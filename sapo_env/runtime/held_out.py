"""Held-out evaluation: every node scored on a fixed question set that no training stream uses.

Training reward alone cannot tell learning from luck in the questions drawn (the paper reported
only training reward). :class:`HeldOutEvaluator` is a ``sapo_env.runtime.run`` callback that scores
every node on the same held-out questions every ``every`` rounds, overall and per task, so a
specialist's knowledge of a task it never trained on can be followed over a run.

Example::

    >>> import sapo_env.runtime
    >>> from agents import DemonstratorAgent
    >>> env = sapo_env.parallel_env(n=2, max_rounds=4)
    >>> evaluator = HeldOutEvaluator(every=2, n_questions=8)
    >>> nodes = [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1)]
    >>> _ = sapo_env.runtime.run(env, nodes, seed=0, progress=False, callbacks=[evaluator])
    >>> evaluator.result.as_array().shape, evaluator.result.as_task_array().shape
    ((2, 2), (2, 2, 6))
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sapo_env.churn import is_leave, is_offline, is_pending
from sapo_env.config import SwarmConfig
from sapo_env.runtime.agent_calls import AgentCalls, Evaluable
from sapo_env.runtime.records import Callback, History, RoundRecord
from sapo_env.scoring.answers import get_extractor
from sapo_env.tasks import DrawnQuestion, held_out_questions, score_completions
from sapo_env.types import make_observation
from sapo_env.validation import check_int

logger = logging.getLogger(__name__)


def evaluate_by_task(agent: Any, questions: Sequence[DrawnQuestion], config: SwarmConfig,
                     round_: int = 0, samples: int = 1) -> dict[str, float]:
    """Mean verifier score of one agent on a question set, per task (tasks in the order they
    first appear); :func:`evaluate` describes how the agent is asked. ``{}`` when the agent
    sits the evaluation out (its ``act`` returns ``OFFLINE`` or None, as an offline
    ``ChurningAgent``'s does, or a leave or pending action)."""
    extract = get_extractor(config.answer_format)
    scores: dict[str, list[float]] = {}
    step = max(config.train_budget, 1)
    with _evaluation_scope(agent):  # once: the chunks draw on from each other's random state
        for start in range(0, len(questions), step):
            chunk = questions[start:start + step]
            observation = make_observation(
                round=round_, system_prompt=config.system_prompt,
                completions_per_question=samples, train_budget=config.train_budget,
                num_external=0, questions=tuple(d.question for d in chunk))
            action = agent.act(observation)
            if is_offline(action) or is_leave(action) or is_pending(action):
                return {}
            for drawn, completions in zip(chunk, action["completions"]):
                scores.setdefault(drawn.question["task"], []).extend(
                    score_completions(drawn, tuple(completions)[:samples], extract).tolist()
                )
    return {task: float(np.mean(values)) for task, values in scores.items()}


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
    by_task = evaluate_by_task(agent, questions, config, round_, samples)
    if not by_task:  # the agent sat it out
        return float("nan")
    counts = _task_counts(questions)
    return float(sum(by_task[t] * counts[t] for t in by_task) / sum(counts.values()))


def _task_counts(questions: Sequence[DrawnQuestion]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for drawn in questions:
        counts[drawn.question["task"]] = counts.get(drawn.question["task"], 0) + 1
    return counts


def _evaluation_scope(agent: Any) -> contextlib.AbstractContextManager:
    return agent.evaluation_scope() if isinstance(agent, Evaluable) else contextlib.nullcontext()


@dataclass
class HeldOutResult:
    """Held-out scores recorded during a run."""

    agents: tuple[str, ...]
    rounds: list[int]  #: rounds after which the evaluation ran (-1: before the first)
    scores: list[list[float]]  #: per evaluation, per node (NaN: the node sat it out)
    tasks: tuple[str, ...] = ()  #: the tasks of the held-out set, in the order of ``task_scores``
    task_scores: list[list[list[float]]] = field(default_factory=list)
    """Per evaluation, per node, per task of ``tasks``."""

    def as_array(self) -> np.ndarray:
        """(evaluations, n) scores."""
        return np.asarray(self.scores, dtype=np.float64).reshape(len(self.rounds),
                                                                 len(self.agents))

    def as_task_array(self) -> np.ndarray:
        """(evaluations, n, tasks) scores, tasks as in ``tasks``."""
        return np.asarray(self.task_scores, dtype=np.float64).reshape(
            len(self.rounds), len(self.agents), len(self.tasks))


class HeldOutEvaluator(Callback):
    """Evaluate every node on a fixed held-out set every ``every`` rounds (and after the last).
    A node that sits an evaluation out, or a remote node whose answer cannot be scored,
    scores NaN in it.

    Use as a ``sapo_env.runtime.run`` callback; read ``result`` afterwards. Each evaluation is one
    ``act`` call per ``train_budget`` questions per node, made with the round just
    played, so an agent that keys its randomness on the round (the simulated learner) keeps
    the same training trajectory with or without evaluation; an agent with its own random
    state (``GRPOAgent``) keeps it through ``evaluation_scope`` (see :func:`evaluate`).
    """

    def __init__(self, every: int = 100, n_questions: int = 64, seed: int = 0,
                 samples: int = 1, at_start: bool = False):
        check_int("every", every, 1)
        check_int("samples", samples, 1)
        self.every, self.n_questions, self.seed, self.samples = every, n_questions, seed, samples
        #: Also evaluate before the first round, recorded as round -1 (what the nodes knew
        #: before training; it draws from an agent's random state, so a run with it is not
        #: the run without it for agents that key their sampling on the round).
        self.at_start = at_start
        self.result: HeldOutResult | None = None
        self._agents: Mapping[str, Any] = {}
        self._remote: set[str] = set()  # their answers are untrusted data
        self._config: SwarmConfig | None = None
        self._questions: list[DrawnQuestion] = []
        self._last_round = -1
        self._listeners: list[Callable[[int, dict[str, float]], None]] = []

    def add_listener(self, listener: Callable[[int, dict[str, float]], None]) -> None:
        """Call ``listener(round, scores_by_node)`` after every evaluation (a logger's hook)."""
        self._listeners.append(listener)

    def on_run_start(self, env: Any, agents: Mapping[str, Any]) -> None:
        self._agents, self._config = agents, env.config
        calls = AgentCalls(agents)
        self._remote = {a for a in agents if calls.is_remote(a)}
        self._questions = held_out_questions(env.config, self.n_questions, self.seed)
        drawn = _task_counts(self._questions)
        self.result = HeldOutResult(tuple(env.possible_agents), [], [],
                                    tuple(s.name for s in env.config.tasks if s.name in drawn), [])
        self._last_round = -1
        if self.at_start:
            self._evaluate(-1)

    def on_round_end(self, record: RoundRecord) -> None:
        self._last_round = record.round
        if (record.round + 1) % self.every == 0:
            self._evaluate(record.round)

    def state_dict(self) -> dict[str, Any]:
        """The scores so far, for a run's checkpoint (``sapo_env.runtime.Checkpoint``)."""
        result = self.result or HeldOutResult((), [], [])
        return {"rounds": list(result.rounds), "scores": [list(s) for s in result.scores],
                "task_scores": [[list(t) for t in s] for s in result.task_scores],
                "last_round": self._last_round}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict` (after ``on_run_start``, as the runner does)."""
        if self.result is None:
            raise RuntimeError("HeldOutEvaluator.load_state_dict() before on_run_start()")
        self.result.rounds[:], self.result.scores[:] = state["rounds"], state["scores"]
        self.result.task_scores[:] = state["task_scores"]
        self._last_round = int(state["last_round"])

    def on_run_end(self, history: History) -> None:
        if self.result is not None and self._last_round >= 0 and (
                not self.result.rounds or self.result.rounds[-1] != self._last_round):
            self._evaluate(self._last_round)

    def _by_task(self, node: str, round_: int) -> dict[str, float]:
        """``node``'s scores by task; ``{}`` (NaN) when a remote node's answer cannot be
        scored: what it sends is untrusted data, and costs only its own evaluation."""
        assert self._config is not None
        try:
            return evaluate_by_task(self._agents[node], self._questions, self._config, round_,
                                    self.samples)
        except Exception as error:  # noqa: BLE001 (whatever a remote node's junk raises)
            if node not in self._remote:
                raise  # an in-process agent's bug
            logger.warning("%s: its held-out answer after round %d cannot be scored, it "
                           "scores NaN: %s: %s", node, round_, type(error).__name__, error)
            return {}

    def _evaluate(self, round_: int) -> None:
        assert self.result is not None and self._config is not None
        counts = _task_counts(self._questions)
        scores, by_task = {}, {}
        for a in self.result.agents:
            by_task[a] = self._by_task(a, max(round_, 0))
            scores[a] = (sum(by_task[a][t] * counts[t] for t in by_task[a])
                         / len(self._questions)) if by_task[a] else float("nan")
        self.result.rounds.append(round_)
        self.result.scores.append([scores[a] for a in self.result.agents])
        self.result.task_scores.append([[by_task[a].get(t, float("nan"))
                                         for t in self.result.tasks]
                                        for a in self.result.agents])
        for listener in self._listeners:
            listener(round_, scores)


__all__ = ["HeldOutEvaluator", "HeldOutResult", "evaluate", "evaluate_by_task",
           "held_out_questions"]
