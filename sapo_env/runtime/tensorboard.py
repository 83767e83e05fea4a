"""TensorBoard logging for ``sapo_env.runtime.run``: watch a swarm train with ``tensorboard
--logdir``.

``TensorBoardCallback`` writes, every round, the scalars of
:func:`sapo_env.runtime.scalars.round_scalars` under their namespaced tags (``reward/node_k``,
``reward/swarm_mean``, ``task/<task>``, ``pool/shared``, ``sampling/num_external/node_k``,
``learn/<metric>/node_k``, ...: the list is in :mod:`sapo_env.runtime.scalars`), ``held_out/*``
when given a ``HeldOutEvaluator``, and, once, the run's configuration as text (``config``).
W&B gets the same scalars from :mod:`sapo_env.runtime.wandb_logger`. It needs the
``tensorboard`` package (``pip install 'sapo-env[meta]'``) but neither torch nor TensorFlow:
events are written with TensorBoard's own event-file writer.

Example::

    import sapo_env.runtime
    from sapo_env.runtime.metrics import HeldOutEvaluator
    from sapo_env.runtime.tensorboard import TensorBoardCallback
    from agents.sim.simulated import simulated_swarm

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
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sapo_env.runtime.records import Callback, History, RoundRecord
from sapo_env.runtime.scalars import (
    finite,
    held_out_scalars,
    round_scalars,
    run_name,
    run_settings,
)
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
    def log_scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Write ``values`` (tag -> number; None and NaN left out) at ``step`` (a round): what
        a harness adds beside the env's scalars (``WandbCallback.log_scalars`` takes the
        same)."""
        items = [self._summary.Value(tag=tag, simple_value=v)
                 for tag, v in finite(values).items()]
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
        self._text("config", _markdown(run_settings(config, self.hparams, agents)))
        logger.info("TensorBoard run at %s", self.path)

    def on_round_end(self, record: RoundRecord) -> None:
        self.log_scalars(record.round, round_scalars(record))
        if (record.round + 1) % self.flush_every == 0 and self._writer is not None:
            self._writer.flush()

    def _log_held_out(self, round_: int, scores: Mapping[str, float]) -> None:
        self.log_scalars(round_, held_out_scalars(scores))

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


def _markdown(settings: Mapping[str, Any]) -> str:
    """The run's settings (``run_settings``) as Markdown for TensorBoard's text tab."""
    lines = ["| setting | value |", "| --- | --- |"]
    lines += [f"| {k} | {json.dumps(v)} |" for k, v in settings.items()]
    return "\n".join(lines)


__all__ = ["TensorBoardCallback", "run_name"]
