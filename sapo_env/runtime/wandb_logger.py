"""Weights & Biases logging for ``sapo_env.runtime.run``: the TensorBoard scalars, in W&B.

``WandbCallback`` logs, every round, exactly what ``TensorBoardCallback`` writes: the scalars of
:func:`sapo_env.runtime.scalars.round_scalars` (``reward/node_k``, ``reward/swarm_mean``,
``task/<task>``, ``pool/*``, ``sampling/*``, ``learn/*``), ``held_out/*`` when given a
``HeldOutEvaluator``, against a ``round`` axis (W&B's ``define_metric``, so a held-out score
logged before round 0 or a run resumed from a checkpoint land at their rounds), and the run's
settings (``run_settings``: the hyperparameters, every ``SwarmConfig`` field, the agents'
classes) as the W&B run's config.

Nothing is logged to a service unless asked for: the library never builds this callback on its
own (the experiment commands take ``--logger wandb``), and where W&B sends a run is W&B's own
setting: ``mode="offline"`` (or ``WANDB_MODE=offline``) keeps it on disk under
``log_dir/wandb/`` for ``wandb sync`` later, ``mode="disabled"`` logs nothing, and online needs
``wandb login``. A run resumed from a checkpoint is a new W&B run whose rounds start at the
checkpoint's. It needs the ``wandb`` package: ``pip install 'sapo-env[wandb]'``.

Example::

    import sapo_env.runtime
    from sapo_env.runtime.metrics import HeldOutEvaluator
    from sapo_env.runtime.wandb_logger import WandbCallback
    from agents.sim.simulated import simulated_swarm

    env = sapo_env.parallel_env(n=8)
    evaluator = HeldOutEvaluator(every=100)
    wandb_run = WandbCallback(project="sapo-env", run_name="sim-4x4-seed0", mode="offline",
                              held_out=evaluator)
    sapo_env.runtime.run(env, simulated_swarm(env.possible_agents, num_external=4),
                         callbacks=[evaluator, wandb_run])
    # then: wandb sync wandb/offline-run-*
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from sapo_env.extras import require
from sapo_env.runtime.records import Callback, History, RoundRecord
from sapo_env.runtime.scalars import finite, held_out_scalars, round_scalars, run_name, run_settings

logger = logging.getLogger(__name__)

Mode = Literal["online", "offline", "disabled"]
MODES = ("online", "offline", "disabled")
DEFAULT_PROJECT = "sapo-env"
"""The W&B project when neither ``project`` nor ``WANDB_PROJECT`` names one."""


def require_wandb() -> Any:
    """The ``wandb`` module, or the ``ModuleNotFoundError`` of ``sapo_env.extras`` that names
    the extra to install."""
    return require("wandb", "W&B logging")


class WandbCallback(Callback):
    """Log a run's scalars to a W&B run (see the module docstring for what and where).

    Args:
        project: the W&B project (None: ``WANDB_PROJECT``, else ``"sapo-env"``).
        run_name: the run's display name; default from the config (``run_name``).
        held_out: a ``HeldOutEvaluator`` in the same run, whose scores are logged as they come.
        hparams: extra values for the run's config (experiment settings, seed).
        group: a W&B group (the runs of one sweep), or None.
        log_dir: the folder W&B writes its ``wandb/`` files under (None: W&B's default, the
            working directory).
        mode: ``"online"``, ``"offline"`` or ``"disabled"`` (None: W&B's own setting,
            ``WANDB_MODE`` or online).
    """

    def __init__(self, project: str | None = None, run_name: str | None = None,
                 held_out: Any = None, hparams: Mapping[str, Any] | None = None,
                 group: str | None = None, log_dir: str | Path | None = None,
                 mode: Mode | None = None):
        self._wandb = require_wandb()
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} or None, got {mode!r}")
        self.project = project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT
        self.run_name = run_name
        self.hparams = dict(hparams or {})
        self.group = group
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.mode = mode
        self.run: Any = None
        """The W&B run while the run lasts (``wandb.init``'s), else None."""
        if held_out is not None:
            held_out.add_listener(self._log_held_out)

    def log_scalars(self, step: int, values: Mapping[str, float]) -> None:
        """Log ``values`` (tag -> number; None and NaN left out) at round ``step``: what a
        harness adds beside the env's scalars (as ``TensorBoardCallback.log_scalars``)."""
        values = finite(values)
        if values and self.run is not None:
            self.run.log({"round": step, **values})

    def on_run_start(self, env: Any, agents: Mapping[str, Any]) -> None:
        config = getattr(env, "config", None)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.run = self._wandb.init(
            project=self.project, name=self.run_name or run_name(config), group=self.group,
            dir=None if self.log_dir is None else str(self.log_dir), mode=self.mode,
            config=run_settings(config, self.hparams, agents))
        self.run.define_metric("round")
        self.run.define_metric("*", step_metric="round")
        logger.info("W&B run %s (%s)", self.run.name, self.run.dir)

    def on_round_end(self, record: RoundRecord) -> None:
        self.log_scalars(record.round, round_scalars(record))

    def _log_held_out(self, round_: int, scores: Mapping[str, float]) -> None:
        self.log_scalars(round_, held_out_scalars(scores))

    def state_dict(self) -> dict[str, Any]:
        """Nothing to save: W&B streams what is logged (a resumed run is a new W&B run)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to load."""

    def on_run_end(self, history: History) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


__all__ = ["WandbCallback", "require_wandb"]
