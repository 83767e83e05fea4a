"""What a run's loggers write: a round as named scalars, the same for every logger.

``round_scalars(record)`` turns a ``RoundRecord`` into ``{tag: value}`` under namespaced tags,
``held_out_scalars`` a held-out evaluation's scores, and ``run_settings`` the settings written
once with a run. TensorBoard (:mod:`sapo_env.runtime.tensorboard`) and W&B
(:mod:`sapo_env.runtime.wandb_logger`) both log exactly these, so a metric added here shows in
both. Tags:

- ``reward/node_k``, ``reward/swarm_mean``, ``reward/swarm_min``, ``reward/swarm_max``;
- ``task/<task>``: the swarm's mean score on each task drawn that round;
- ``pool/shared``, ``pool/shared_mean_reward``, ``pool/informative_fraction``,
  ``pool/zero_advantage_fraction`` (the definitions of ``sapo_env.runtime.metrics.pool_health``);
- ``sampling/num_external/node_k`` (the J in force), ``sampling/generated_completions/node_k``
  (the node's generation cost), ``sampling/taken_by_others/node_k``,
  ``sampling/external_shortfall/node_k``;
- ``learn/<metric>/node_k``: whatever each agent's ``learn`` returned (numbers only);
- ``held_out/node_k`` and ``held_out/mean`` from a ``HeldOutEvaluator``.

Only finite numbers are returned: a value that is None or NaN (nothing shared this round, a
node that sat it out) is left out rather than logged as a gap.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from sapo_env.runtime.metrics import pool_health_of
from sapo_env.runtime.records import RoundRecord

_SAMPLING = ("num_external", "generated_completions", "taken_by_others", "external_shortfall")
_POOL = ("shared_mean_reward", "informative_fraction", "zero_advantage_fraction")


def round_scalars(record: RoundRecord) -> dict[str, float]:
    """The scalars of one round (see the module docstring for the tags), finite floats only."""
    values: dict[str, Any] = {f"reward/{a}": r for a, r in record.rewards.items()}
    if record.rewards:
        r = np.fromiter(record.rewards.values(), dtype=np.float64)
        values |= {"reward/swarm_mean": r.mean(), "reward/swarm_min": r.min(),
                   "reward/swarm_max": r.max()}
    by_task: dict[str, list[float]] = {}
    for a, info in record.infos.items():
        for task, score in info.get("task_scores", {}).items():
            by_task.setdefault(task, []).append(score)
        values |= {f"sampling/{key}/{a}": info[key] for key in _SAMPLING if key in info}
    values |= {f"task/{t}": float(np.mean(s)) for t, s in by_task.items()}
    pool = pool_health_of([record.infos], list(record.infos))  # the sweep's definitions
    values["pool/shared"] = pool.shared[0]
    values |= {f"pool/{key}": getattr(pool, key)[0] for key in _POOL}
    for a, metrics in record.learn_metrics.items():
        values |= {f"learn/{key}/{a}": v for key, v in metrics.items()
                   if isinstance(v, (int, float, np.floating, np.integer))}
    return finite(values)


def held_out_scalars(scores: Mapping[str, float]) -> dict[str, float]:
    """A held-out evaluation's ``held_out/node_k`` and ``held_out/mean`` (NaN: the node sat it
    out, and is left out of both)."""
    evaluated = {a: s for a, s in scores.items() if not np.isnan(s)}
    values = {f"held_out/{a}": s for a, s in evaluated.items()}
    if evaluated:
        values["held_out/mean"] = float(np.mean(list(evaluated.values())))
    return finite(values)


def finite(values: Mapping[str, Any]) -> dict[str, float]:
    """``values`` as floats, without those that are None, NaN or infinite."""
    floats = {tag: float(v) for tag, v in values.items() if v is not None}
    return {tag: v for tag, v in floats.items() if math.isfinite(v)}


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


def run_settings(config: Any, hparams: Mapping[str, Any], agents: Mapping[str, Any]
                 ) -> dict[str, Any]:
    """What a logger writes once with a run: ``hparams`` (experiment settings, seed), every
    ``SwarmConfig`` field (``SwarmConfig.summary``) and the agents' classes, as JSON data."""
    rows = dict(hparams)
    if config is not None:
        rows |= config.summary()
    rows["agents"] = ", ".join(sorted({type(agent).__name__ for agent in agents.values()}))
    return json.loads(json.dumps(rows, default=str))


__all__ = ["finite", "held_out_scalars", "round_scalars", "run_name", "run_settings"]
