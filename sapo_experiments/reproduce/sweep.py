"""Running the sweep: one run per configuration and seed, in worker processes or Ray tasks,
resumable."""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.runtime import Callback
from sapo_env.runtime.checkpoint import Checkpoint, is_pickle, require_state_dicts
from sapo_experiments.learners import describe
from sapo_experiments.reproduce.config import BY_LABEL, ReproduceConfig, RunSpec
from sapo_experiments.reproduce.figures import plot_figures
from sapo_experiments.reproduce.report import (
    Row,
    format_markdown,
    headline_markdown,
    summarise,
    write_csv,
)
from sapo_experiments.reproduce.specialists import specialist_markdown
from sapo_experiments.run_files import RunFile
from sapo_experiments.sweep import SweepResult, group_runs, run_seconds, run_sweep, seeds_of

logger = logging.getLogger(__name__)

OFF_POLICY_METRICS = ("off_policy_groups", "off_policy_uncorrected_groups",
                      "off_policy_weight_mean", "off_policy_truncated_fraction",
                      "off_policy_filtered", "off_policy_far_sum", "off_policy_far_mean",
                      "rescue_groups", "rescue_ungated_groups", "rescue_gated_completions",
                      "rescue_gate_mean", "rescue_gate_zero")
"""What an off-policy correction and the rescue gate did each round (``agents.lm.grpo_update``),
saved when on."""
RESCUE_INFOS = ("all_fail_groups", "complementarity", "rescued_groups")
"""Each node-round's all-fail groups, complementarity (NaN in a round without all-fail groups;
0 unless nodes answer the same questions) and rescued groups (``sapo_env.rescue``)."""


def compute_arrays(history: Any) -> dict[str, np.ndarray]:
    """What each node-round cost, beside ``generated`` (completions), as a run file saves it,
    each (rounds, n): ``generated_tokens`` (completion tokens the node sampled, EOS included)
    and ``optimizer_steps`` (steps its update took), the learn metrics of the GRPO learners,
    NaN where a learner does not report them (the simulated one) or did not learn;
    ``act_cpu_seconds`` and ``learn_cpu_seconds`` (``History``'s: CPU seconds of this
    process, a batched swarm's call divided evenly over its nodes; timings, which differ from
    run to run). Tokens trained are ``learn_tokens``, saved with the GRPO step's mechanics."""
    from sapo_env.runtime import metrics

    return {"generated_tokens": metrics.learn_metric(history, "generated_tokens"),
            "optimizer_steps": metrics.learn_metric(history, "optimizer_steps"),
            "act_cpu_seconds": history.act_cpu_seconds,
            "learn_cpu_seconds": history.learn_cpu_seconds}


@dataclass(kw_only=True)
class ReproduceResult(SweepResult):
    config: ReproduceConfig
    rows: list[Row]
    runs: dict[str, list[dict[str, Any]]]  #: experiment -> per-seed run arrays


class RunClock(Callback):
    """Seconds a run has taken, across resumes (its state travels in the run's checkpoint)."""

    def __init__(self) -> None:
        self.earlier, self._since = 0.0, time.perf_counter()

    @property
    def seconds(self) -> float:
        return self.earlier + time.perf_counter() - self._since

    def on_run_start(self, env: Any, agents: Any) -> None:
        self._since = time.perf_counter()

    def state_dict(self) -> dict[str, float]:
        return {"seconds": self.seconds}

    def load_state_dict(self, state: dict[str, float]) -> None:
        seconds = state.get("seconds") if isinstance(state, dict) else None
        if type(seconds) not in (int, float) or not 0 <= seconds < math.inf:
            raise ValueError(f"RunClock state['seconds'] must be a number of seconds, got "
                             f"{seconds!r:.40}")
        self.earlier, self._since = float(seconds), time.perf_counter()


def _checkpoint(spec: RunSpec, agents: dict[str, Any]) -> Checkpoint | None:
    """The run's checkpoint, if the sweep takes them and its agents can be saved."""
    if not spec.config.checkpoint_every:
        return None
    try:
        require_state_dicts(agents, {})
    except TypeError as error:
        logger.info("%s: no checkpoints (%s)", spec.name, error)
        return None
    # The run's checkpoint holds a random id that is also kept beside it (``<checkpoint>.id``):
    # a checkpoint at this path without that id file (copied or left there alone) is not
    # resumed from, and one whose id differs is refused. This guards against mistakes, not
    # against whoever can write to the folder, who can plant both: their checkpoint is read as
    # untrusted data (sapo_env.runtime.checkpoint) and, if well formed, resumed.
    path = spec.checkpoint_path
    id_file = path.with_name(path.name + ".id")
    resume = spec.config.resume and path.exists() and id_file.exists()
    if resume and is_pickle(path):  # sapo-env <= 0.6's format cannot be read safely
        logger.warning("%s: its checkpoint %s is a pickle of sapo-env <= 0.6, which is never "
                       "read: the run starts afresh", spec.name, path)
        resume = False
    run_id = _run_id(id_file) if resume else None
    if resume and run_id is None:
        logger.warning("%s: %s is not an id this sweep writes (32 hex digits): the run starts "
                       "afresh", spec.name, id_file)
        resume = False
    if not resume:
        run_id = secrets.token_hex(16)
        id_file.parent.mkdir(parents=True, exist_ok=True)
        id_file.write_text(run_id)
    return Checkpoint(path, every=spec.config.checkpoint_every, resume=resume, run_id=run_id)


def _run_id(id_file: Path) -> str | None:
    """The id a run keeps beside its checkpoint (32 hex digits, ``secrets.token_hex(16)``), or
    None for a file that holds anything else (read no further than that)."""
    with open(id_file, "rb") as file:
        token = file.read(33)
    return token.decode("ascii") if re.fullmatch(rb"[0-9a-f]{32}", token) else None


def run_one(spec: RunSpec) -> Path:
    """Run one experiment under one seed; save its arrays to ``out/runs/<name>.npz`` and
    remove its checkpoint (see ``compute``)."""
    return compute(spec).save()


def compute(spec: RunSpec) -> RunFile:
    """Run one experiment under one seed (from its checkpoint, if an interrupted sweep left
    one); saving its file (``RunFile.save``) removes this run's checkpoint, a stale one of
    other settings and a write a crash cut short."""
    import sapo_env.runtime
    from sapo_env.runtime import metrics

    c, e = spec.config, BY_LABEL[spec.experiment]
    env = sapo_env.parallel_env(config=c.swarm_config(e))
    env_seed, agent_seed = seeds_of(c.base_seed, spec.seed_index)
    agents = c.agent_factory()(env.possible_agents, e.num_external, agent_seed)
    checkpoint = _checkpoint(spec, dict(zip(env.possible_agents, agents)))
    resuming = checkpoint is not None and checkpoint.resume and spec.checkpoint_path.exists()
    # at_start: what the specialists knew before training (-1 in held_out_rounds), the
    # baseline of what they learned of each other's task. Not for the simulated learner: it
    # keys its sampling on the round, so an evaluation before round 0 would change its run.
    evaluator = metrics.HeldOutEvaluator(every=c.held_out_every,
                                         n_questions=c.held_out_questions, seed=c.base_seed,
                                         at_start=c.learner == "tiny")
    clock = RunClock()
    callbacks: list[Any] = [evaluator, clock]
    if c.tensorboard:
        # A run done again starts its TensorBoard folder afresh: event files are named by
        # time and process, so the old one would stay beside the new and double every step.
        # A resumed run keeps it: TensorBoard drops what came after the checkpoint.
        if not resuming:
            shutil.rmtree(c.out / "tensorboard" / spec.name, ignore_errors=True)
        try:
            from sapo_env.runtime.tensorboard import TensorBoardCallback

            callbacks.append(TensorBoardCallback(
                c.out / "tensorboard", run_name=spec.name, held_out=evaluator,
                hparams={"experiment": e.label, "seed_index": spec.seed_index,
                         "learner": describe(c.agent_factory())}))
        except ImportError as error:
            logger.warning("%s; writing no TensorBoard runs", error)
    if c.wandb:
        try:
            from sapo_env.runtime.wandb_logger import WandbCallback

            callbacks.append(WandbCallback(
                run_name=spec.name, group=Path(c.out).name, log_dir=c.out, held_out=evaluator,
                hparams={"experiment": e.label, "seed_index": spec.seed_index,
                         "learner": describe(c.agent_factory())}))
        except ImportError as error:
            logger.warning("%s; logging no W&B runs", error)
    history = sapo_env.runtime.run(env, agents, callbacks=callbacks, progress=False, seed=env_seed,
                           checkpoint=checkpoint)
    pool = metrics.pool_health(history)
    tasks = metrics.task_rewards(history)
    held = evaluator.result
    arrays = {
        "rewards": history.rewards, "num_external": history.num_external,
        # the reward of what each node trained on, received groups included (genrl's log)
        "batch_rewards": metrics.info_array(history, "batch_mean_reward"),
        "generated": history.generated,
        **compute_arrays(history),
        "held_out_rounds": np.asarray(held.rounds if held else [], dtype=np.int64),
        "held_out_scores": held.as_array() if held else np.zeros((0, c.n_agents)),
        "held_out_tasks": np.asarray(held.tasks if held else ()),
        "held_out_task_scores": held.as_task_array() if held else np.zeros((0, c.n_agents, 0)),
        "pool_shared": pool.shared, "pool_shared_mean_reward": pool.shared_mean_reward,
        "pool_informative_fraction": pool.informative_fraction,
        "pool_informative": pool.informative,
        "pool_contribution": pool.contribution, "pool_consumption": pool.consumption,
        "task_names": np.asarray(sorted(tasks)),
        "task_rewards": np.stack([tasks[t] for t in sorted(tasks)]) if tasks else np.zeros(0),
    }
    arrays.update({key: metrics.info_array(history, key) for key in RESCUE_INFOS})
    if c.learner == "sim":  # the simulated learner's skills, for the figures and TensorBoard
        for key in ("tag_prob", "expected_quality"):
            arrays[f"learn_{key}"] = metrics.learn_metric(history, key)
    if c.learner in ("tiny", "grpo"):  # the GRPO step's mechanics: signal, drift, clipping
        for key in ("grad_norm", "clip_fraction", "groups", "tokens"):
            arrays[f"learn_{key}"] = metrics.learn_metric(history, key)
        for key in OFF_POLICY_METRICS:  # only with an off-policy correction on
            values = metrics.learn_metric(history, key)
            if not np.isnan(values).all():
                arrays[f"learn_{key}"] = values
    meta = {"key": spec.key(), "experiment": e.label, "seed_index": spec.seed_index,
            "env_seed": env_seed, "seconds": clock.seconds, "agents": list(history.agents)}
    return RunFile(spec.path, meta, arrays, remove=(f"{spec.name}.*.ckpt*",))


def report(config: ReproduceConfig, finished: list[tuple[RunSpec, dict[str, Any]]]
           ) -> ReproduceResult:
    """The table, the specialists' tables below it in ``results.md``, ``results.csv`` and the
    figures."""
    runs = group_runs(finished, lambda spec: spec.experiment)
    rows = summarise(config, runs)
    write_csv(rows, config.out / "results.csv")
    return ReproduceResult(
        config=config, rows=rows, runs=runs, table_markdown=format_markdown(rows, config, runs),
        printed_markdown=headline_markdown(rows, config, runs),
        notes_markdown=specialist_markdown(config, runs),
        files=[config.out / "results.csv", *(plot_figures(config, runs) if config.plots else [])],
        summary={"run_seconds": run_seconds(finished),
                 "rows": [dataclasses.asdict(r) for r in rows]},
        tensorboard=config.out / "tensorboard" if config.tensorboard else None,
        wandb=config.out / "wandb" if config.wandb else None)


def reproduce(config: ReproduceConfig | None = None) -> ReproduceResult:
    """Run (or resume) the sweep and write the table, figures and summary to ``config.out``."""
    return run_sweep(config or ReproduceConfig(), compute, report)
