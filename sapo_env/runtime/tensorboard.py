"""TensorBoard logging for ``sapo_env.runtime.run``: watch a swarm train with ``tensorboard
--logdir``.

``TensorBoardCallback`` writes, every round, under namespaced tags:

- ``reward/node_k``, ``reward/swarm_mean``, ``reward/swarm_min``, ``reward/swarm_max``;
- ``task/<task>``: the swarm's mean score on each task drawn that round;
- ``pool/shared``, ``pool/shared_mean_reward``, ``pool/informative_fraction``,
  ``pool/zero_advantage_fraction``;
- ``sampling/num_external/node_k`` (the J in force), ``sampling/generated_completions/node_k``
  (the node's generation cost), ``sampling/taken_by_others/node_k``,
  ``sampling/external_shortfall/node_k``;
- ``learn/<metric>/node_k``: whatever each agent's ``learn`` returned;
- ``held_out/node_k`` and ``held_out/mean`` when given a ``HeldOutEvaluator``;

and, once, the run's configuration as text (``config``). It needs the ``tensorboard`` package
(``pip install 'sapo-env[meta]'``) but neither torch nor TensorFlow: events are written with
TensorBoard's own event-file writer.

Example::

    import sapo_env.runtime
    from sapo_env.runtime.metrics import HeldOutEvaluator
    from sapo_env.runtime.tensorboard import TensorBoardCallback
    from agents.simulated import simulated_swarm

    env = sapo_env.parallel_env(n=8)
    evaluator = HeldOutEvaluator(every=100)
    board = TensorBoardCallback("runs", run_name="sim-4x4-seed0", held_out=evaluator)
    sapo_env.runtime.run(env, simulated_swarm(env.possible_agents, num_external=4),
                 callbacks=[evaluator, board])
    # then: tensorboard --logdir runs
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.runtime.metrics import pool_health_of
from sapo_env.runtime.records import Callback, History, RoundRecord
from sapo_env.validation import check_int

logger = logging.getLogger(__name__)


def _require_tensorboard():
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.text.summary_v2 import text_pb
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as error:  # an optional extra: say how to get it
        raise ImportError(
            "TensorBoard logging needs the 'tensorboard' package: "
            "pip install 'sapo-env[meta]' (or pip install tensorboard)"
        ) from error
    return Event, Summary, text_pb, EventFileWriter


def run_name(config: Any, label: str = "", seed: int | None = None) -> str:
    """A run name from an experiment label, the config's distinctive settings and the seed."""
    parts = [label] if label else []
    if config is not None:
        # the paper's protocol has no fixed B: its question count follows each node's J
        questions = "I" if config.questions_per_round is None else config.questions_per_round
        parts.append(f"n{config.n_agents}-B{questions}-L{config.completions_per_question}")
    if seed is not None:
        parts.append(f"seed{seed}")
    return "-".join(parts) or "run"


class TensorBoardCallback(Callback):
    """Write a run's scalars to ``log_dir/run_name`` (see the module docstring for the tags).

    Args:
        log_dir: parent folder of runs (``tensorboard --logdir log_dir``).
        run_name: the run's folder; default from the config and the time.
        held_out: a ``HeldOutEvaluator`` in the same run, whose scores are logged as they come.
        flush_every: rounds between flushes to disk (TensorBoard shows what is flushed).
        hparams: extra values written with the config text (experiment settings, seed).
    """

    def __init__(self, log_dir: str | Path = "runs", run_name: str | None = None,
                 held_out: Any = None, flush_every: int = 50,
                 hparams: Mapping[str, Any] | None = None):
        self._event, self._summary, self._text_pb, self._writer_cls = _require_tensorboard()
        check_int("flush_every", flush_every, 1)
        self.log_dir = Path(log_dir)
        self.run_name = run_name
        self.flush_every = flush_every
        self.hparams = dict(hparams or {})
        self._writer = None
        self._agents: tuple[str, ...] = ()
        if held_out is not None:
            held_out.add_listener(self._log_held_out)

    @property
    def path(self) -> Path:
        """The folder this run's event file is written to."""
        return self.log_dir / (self.run_name or "run")

    # --- writing -----------------------------------------------------------------------------
    def _scalars(self, step: int, values: Mapping[str, float]) -> None:
        items = [self._summary.Value(tag=tag, simple_value=float(v))
                 for tag, v in values.items() if v is not None and math.isfinite(float(v))]
        if items and self._writer is not None:
            self._writer.add_event(self._event(wall_time=time.time(), step=step,
                                               summary=self._summary(value=items)))

    def _text(self, tag: str, text: str) -> None:
        if self._writer is not None:
            self._writer.add_event(self._event(wall_time=time.time(), step=0,
                                               summary=self._text_pb(tag, text)))

    # --- callback ----------------------------------------------------------------------------
    def on_run_start(self, env: Any, agents: Mapping[str, Any]) -> None:
        config = getattr(env, "config", None)
        if self.run_name is None:
            self.run_name = f"{run_name(config)}-{time.strftime('%Y%m%d-%H%M%S')}"
        self.path.mkdir(parents=True, exist_ok=True)
        self._writer = self._writer_cls(str(self.path))
        # A session start at the first round to play: a run resumed from a checkpoint
        # (env.round > 0) makes TensorBoard drop what the interrupted session logged after it.
        from tensorboard.compat.proto.event_pb2 import SessionLog  # there: __init__ checked

        self._writer.add_event(self._event(wall_time=time.time(), step=getattr(env, "round", 0),
                                           session_log=SessionLog(status=SessionLog.START)))
        self._agents = tuple(env.possible_agents)
        self._text("config", _describe(config, self.hparams, agents))
        logger.info("TensorBoard run at %s", self.path)

    def on_round_end(self, record: RoundRecord) -> None:
        step = record.round
        rewards = {a: r for a, r in record.rewards.items()}
        values: dict[str, float] = {f"reward/{a}": r for a, r in rewards.items()}
        if rewards:
            r = np.fromiter(rewards.values(), dtype=np.float64)
            values |= {"reward/swarm_mean": r.mean(), "reward/swarm_min": r.min(),
                       "reward/swarm_max": r.max()}
        by_task: dict[str, list[float]] = {}
        for a, info in record.infos.items():
            for task, score in info.get("task_scores", {}).items():
                by_task.setdefault(task, []).append(score)
            for key in ("num_external", "generated_completions", "taken_by_others",
                        "external_shortfall"):
                if key in info:
                    values[f"sampling/{key}/{a}"] = info[key]
        values |= {f"task/{t}": float(np.mean(s)) for t, s in by_task.items()}
        pool = pool_health_of([record.infos], list(record.infos))  # the sweep's definitions
        values["pool/shared"] = float(pool.shared[0])
        for key in ("shared_mean_reward", "informative_fraction", "zero_advantage_fraction"):
            value = float(getattr(pool, key)[0])
            if not math.isnan(value):  # NaN: nothing shared, or nothing answered, this round
                values[f"pool/{key}"] = value
        for a, metrics in record.learn_metrics.items():
            for key, v in metrics.items():
                if isinstance(v, (int, float, np.floating, np.integer)):
                    values[f"learn/{key}/{a}"] = float(v)
        self._scalars(step, values)
        if (step + 1) % self.flush_every == 0 and self._writer is not None:
            self._writer.flush()

    def _log_held_out(self, round_: int, scores: Mapping[str, float]) -> None:
        evaluated = {a: s for a, s in scores.items() if not np.isnan(s)}  # NaN: sat it out
        values = {f"held_out/{a}": s for a, s in evaluated.items()}
        if evaluated:
            values["held_out/mean"] = float(np.mean(list(evaluated.values())))
        self._scalars(round_, values)

    def state_dict(self) -> dict[str, Any]:
        """Nothing to save (the events are on disk), but a checkpoint taking it flushes them, so
        a run resumed from that checkpoint finds every round before it logged."""
        if self._writer is not None:
            self._writer.flush()
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to load: ``on_run_start`` marks the session start at the resumed round."""

    def on_run_end(self, history: History) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None


def _describe(config: Any, hparams: Mapping[str, Any], agents: Mapping[str, Any]) -> str:
    """The configuration as Markdown for TensorBoard's text tab."""
    rows = dict(hparams)
    if config is not None:
        rows |= config.summary()
    kinds = sorted({type(agent).__name__ for agent in agents.values()})
    rows["agents"] = ", ".join(kinds)
    lines = ["| setting | value |", "| --- | --- |"]
    lines += [f"| {k} | {json.dumps(v, default=str)} |" for k, v in rows.items()]
    return "\n".join(lines)


__all__ = ["TensorBoardCallback", "run_name"]
