"""Reproduce the SAPO paper's controlled experiment: table, figures and TensorBoard runs.

The paper (arXiv 2509.08721, Section 5) trains 8 nodes for 2000 rounds with I local and J
external groups per round, I + J = 8, and reports the cumulative reward of 8/0 (no sharing),
6/2, 4/4 and 2/6. In its protocol a node with J external groups answers only I questions itself
("each agent samples I specialties, receives one question per specialty"), so sharing saves
generation and the pool shrinks as the nodes take more. ``reproduce`` runs those four
configurations under that protocol (``protocol="fixed"``: every node answers 8 questions
whatever its J, the protocol of sapo-env before 0.2) plus two controls its reviewers asked
for, over several seeds:

- ``8/0 oversampled + filtered``: the no-sharing baseline draws 16 questions, drops its own
  zero-advantage groups and trains on up to 8 informative ones (at twice the generation cost),
  so that filtering alone could explain SAPO's gain if it did. (Filtering without oversampling
  only removes groups that carry no gradient and replaces none, so it cannot differ from 8/0
  for a GRPO learner: no control at all.)
- ``4/4 self-replay``: the node answers 4 questions and fills the J slots from its *own*
  informative groups of the previous round (``external_source="self_replay"``), so that reuse
  alone cannot either.

With ``learner="sim"`` (the default) the nodes are ``agents.simulated.SimulatedLearner``s: the
whole sweep takes minutes on a laptop, and says something about sampling dynamics, nothing
about language models. ``learner="grpo"`` runs ``agents.GRPOAgent`` language models (GPUs).

Outputs in ``out``:
    ``results.md``, ``results.csv``   cumulative reward, mean and 95% CI over seeds, its ratio
                                      to 8/0 (paired by seed), the paper's numbers beside it,
                                      completions generated per node-round, reward per 1,000
                                      generated completions, the final moving reward and
                                      held-out pass@1
    ``figure1_trajectories.png``      per-node moving reward, one panel per configuration
    ``figure2_moving_average.png``    moving-average swarm reward with the min/max band over
                                      nodes, all configurations in one panel
    ``held_out.png``                  held-out pass@1 beside the training reward
    ``runs/<experiment>_seed<k>.npz`` one run's arrays (a finished run is reused on resume)
    ``tensorboard/<experiment>_seed<k>/``  ``tensorboard --logdir <out>/tensorboard``
    ``summary.json``                  the settings, date, machine and wall time

Command line: ``sapo-env reproduce [--quick] [--seeds 3] [--jobs 2] [--out DIR] ...``
(``python -m sapo_env.reproduce --help``).

Example::

    from sapo_env.reproduce import ReproduceConfig, reproduce
    result = reproduce(ReproduceConfig(quick=True, out="out/reproduce-quick"))
    print(result.table_markdown)
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import os
import platform
import shutil
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)

Learner = Literal["sim", "grpo"]
Protocol = Literal["paper", "fixed"]


@dataclass(frozen=True)
class Experiment:
    """One configuration of the sweep."""

    label: str  #: as printed in the table, e.g. ``"4/4"``
    slug: str  #: file-name form, e.g. ``"4-4"``
    num_external: int  #: J (I = train budget - J)
    overrides: dict[str, Any] = field(default_factory=dict)  #: ``SwarmConfig`` changes
    paper: float | None = None  #: the paper's cumulative reward (8 nodes, 2000 rounds)
    note: str = ""


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("8/0", "8-0", 0, {}, 561.79, "no sharing (the paper's baseline)"),
    Experiment("6/2", "6-2", 2, {}, 854.43),
    Experiment("4/4", "4-4", 4, {}, 1093.31, "the paper's best"),
    Experiment("2/6", "2-6", 6, {}, 945.87, "oscillates in the paper"),
    Experiment("8/0 oversampled + filtered", "8-0-oversampled-filtered", 0,
               {"questions_per_round": 16, "filter_local": True}, None,
               "control: 16 questions, trains on up to 8 informative own groups"),
    Experiment("4/4 self-replay", "4-4-self-replay", 4,
               {"external_source": "self_replay", "pool_window": 2}, None,
               "control: J slots from the node's own groups of the last round"),
)
"""The paper's four configurations and the reviewers' two controls."""

BY_LABEL = {e.label: e for e in EXPERIMENTS} | {e.slug: e for e in EXPERIMENTS}

# Student t quantile 0.975 by degrees of freedom (no scipy dependency); beyond 30, ~normal.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t (the nearest tabulated df at or below ``df``)."""
    if df < 1:
        return float("nan")
    if df > 30:
        return 1.96
    return _T975[max(k for k in _T975 if k <= df)]


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t confidence interval (NaN with one value)."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return float(x.mean()) if len(x) else float("nan"), float("nan")
    return float(x.mean()), t_quantile_975(len(x) - 1) * float(x.std(ddof=1)) / np.sqrt(len(x))


QUICK: dict[str, Any] = {"rounds": 100, "seeds": 2, "held_out_every": 25,
                         "held_out_questions": 16, "out": "out/reproduce-quick"}
"""What ``quick=True`` changes (where the field is left at its default)."""


@dataclass(frozen=True)
class ReproduceConfig:
    """Settings of a reproduction sweep. ``quick=True`` changes the defaults marked (quick)."""

    out: str | Path = "out/reproduce"
    """Output folder (``out/reproduce-quick`` when quick and left at the default)."""
    learner: Learner = "sim"
    """``"sim"``: simulated learners (CPU, minutes); ``"grpo"``: language models (GPUs)."""
    model: str | None = None
    """Model of the GRPO learner: a hub id, a path or ``"smollm2-135m"``."""
    experiments: tuple[str, ...] = tuple(e.label for e in EXPERIMENTS)
    """Configurations to run, by label or slug (see ``EXPERIMENTS``)."""
    protocol: Protocol = "paper"
    """``"paper"``: a node with J external groups answers I = 8 - J questions (the paper's
    Section 5); ``"fixed"``: every node answers 8 questions whatever its J and trains on I of
    them (sapo-env's protocol before 0.2, kept for comparison). The oversampled control draws
    16 under both."""
    seeds: int = 3
    """Seeds per configuration (quick: see ``QUICK``). Seed k is the same across
    configurations, so ratios to 8/0 are paired."""
    base_seed: int = 0
    """Root of every seed of the sweep."""
    rounds: int = 2000
    """Rounds per run (quick: see ``QUICK``)."""
    n_agents: int = 8
    """Nodes per swarm."""
    held_out_every: int = 100
    """Rounds between held-out evaluations (quick: see ``QUICK``)."""
    held_out_questions: int = 64
    """Questions in the held-out set (quick: see ``QUICK``)."""
    jobs: int | None = None
    """Runs in parallel processes; None: one per CPU core."""
    tensorboard: bool = True
    """Write TensorBoard runs (skipped with a warning if tensorboard is not installed)."""
    plots: bool = True
    """Write the PNG figures (needs matplotlib, the ``plot`` extra)."""
    resume: bool = True
    """Reuse finished runs found in ``out/runs`` whose settings match."""
    progress: bool = True
    """Show a progress bar over runs."""
    quick: bool = False
    """A one-minute version (``QUICK``): fewer rounds, seeds and held-out questions. Its table
    says which of its differences are distinguishable from noise."""
    grpo_max_new_tokens: int = 256
    """GRPO learner only: tokens generated per completion."""
    swarm: Mapping[str, Any] = field(default_factory=dict)
    """Extra ``SwarmConfig`` fields for every configuration, e.g. ``{"answer_format":
    "lenient"}`` for small models that never write ``<answer>`` tags, or another task mix.
    I, J, ``filter_local`` and ``external_source`` are the experiments' to set."""

    def __post_init__(self) -> None:
        if self.quick:
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            for name, value in QUICK.items():
                if getattr(self, name) == defaults[name]:
                    object.__setattr__(self, name, value)
        if self.learner not in ("sim", "grpo"):
            raise ValueError(f"learner must be 'sim' or 'grpo', got {self.learner!r}")
        if self.protocol not in ("paper", "fixed"):
            raise ValueError(f"protocol must be 'paper' or 'fixed', got {self.protocol!r}")
        if self.learner == "grpo" and not self.model:
            raise ValueError("model must name a model when learner='grpo' (e.g. "
                             "'Qwen/Qwen2.5-0.5B-Instruct' or 'smollm2-135m'), got None")
        unknown = [e for e in self.experiments if e not in BY_LABEL]
        if unknown or not self.experiments:
            raise ValueError(f"experiments must be labels or slugs of {list(BY_LABEL)}, "
                             f"got {list(self.experiments)}")
        object.__setattr__(self, "experiments",
                           tuple(dict.fromkeys(BY_LABEL[e].label for e in self.experiments)))
        for name in ("seeds", "rounds", "n_agents", "held_out_every", "held_out_questions",
                     "grpo_max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.jobs is not None and (not isinstance(self.jobs, int) or self.jobs < 1):
            raise ValueError(f"jobs must be None or an int >= 1, got {self.jobs!r}")
        if self.n_agents < 2:
            raise ValueError(f"n_agents must be >= 2 (sharing needs two nodes), "
                             f"got {self.n_agents}")
        object.__setattr__(self, "out", Path(self.out))
        from sapo_env.config import SwarmConfig

        unknown = sorted(set(self.swarm) - set(SwarmConfig.field_names()))
        reserved = sorted(set(self.swarm) & {"n_agents", "max_rounds", "filter_local",
                                             "external_source", "train_budget",
                                             "questions_per_round", "num_external"})
        if unknown or reserved:
            raise ValueError(f"swarm: unknown SwarmConfig fields {unknown} or fields the sweep "
                             f"sets itself {reserved}")
        try:
            json.dumps(dict(self.swarm))
        except TypeError as error:
            raise ValueError(f"swarm must be JSON-serialisable (it names the runs): {error}"
                             ) from None
        object.__setattr__(self, "swarm", dict(self.swarm))
        for label in self.experiments:  # fail now, not in a worker process minutes later
            try:
                self.swarm_config(BY_LABEL[label])
            except ValueError as error:
                raise ValueError(f"swarm: {error} (in configuration {label!r})") from None

    def swarm_config(self, experiment: Experiment) -> Any:
        """The ``SwarmConfig`` of one configuration of the sweep."""
        from sapo_env.config import SwarmConfig

        protocol = {} if self.protocol == "paper" else {"questions_per_round": 8}
        return SwarmConfig(n_agents=self.n_agents, max_rounds=self.rounds,
                           num_external=experiment.num_external,
                           **{**self.swarm, **protocol, **experiment.overrides})


@dataclass(frozen=True)
class RunSpec:
    """One run of the sweep: an experiment under one seed (picklable, for worker processes)."""

    experiment: str
    seed_index: int
    config: ReproduceConfig

    @property
    def name(self) -> str:
        return f"{BY_LABEL[self.experiment].slug}_seed{self.seed_index}"

    @property
    def path(self) -> Path:
        """Where the run's arrays are saved."""
        return Path(self.config.out) / "runs" / f"{self.name}.npz"

    def key(self) -> str:
        """A digest of everything that determines the run's outcome (for resuming)."""
        from sapo_env import __version__

        c = self.config
        e = BY_LABEL[self.experiment]
        payload = {
            "version": __version__, "experiment": dataclasses.asdict(e), "seed": self.seed_index,
            "protocol": c.protocol,
            "base_seed": c.base_seed, "rounds": c.rounds, "n_agents": c.n_agents,
            "learner": c.learner, "model": c.model, "held_out": [c.held_out_every,
                                                                 c.held_out_questions],
            "grpo_max_new_tokens": c.grpo_max_new_tokens if c.learner == "grpo" else None,
            "learner_defaults": _learner_defaults(c.learner), "swarm": c.swarm,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _learner_defaults(learner: Learner) -> str:
    """The learner's default hyperparameters, so that changing them invalidates saved runs."""
    if learner == "sim":
        from agents.simulated import SimulatedLearnerConfig

        return repr(SimulatedLearnerConfig())
    from agents import GRPOConfig

    return repr(GRPOConfig())


def seeds_of(base_seed: int, seed_index: int) -> tuple[int, np.random.SeedSequence]:
    """The env's reset seed and the agents' seed sequence of seed ``seed_index``: children of
    the base seed, the same in every configuration (common random numbers)."""
    env_seq, agent_seq = np.random.SeedSequence(base_seed, spawn_key=(seed_index,)).spawn(2)
    return int(env_seq.generate_state(1, dtype=np.uint64)[0] >> 1), agent_seq


def make_agents(spec: RunSpec, names: Sequence[str], seed: np.random.SeedSequence) -> list:
    """The nodes of one run."""
    e, c = BY_LABEL[spec.experiment], spec.config
    if c.learner == "sim":
        from agents.simulated import simulated_swarm

        return list(simulated_swarm(names, seed=seed, num_external=e.num_external).values())
    from agents import GRPOAgent, GRPOConfig

    grpo_config = GRPOConfig(max_new_tokens=c.grpo_max_new_tokens)
    return [GRPOAgent(c.model, config=grpo_config, num_external=e.num_external, seed=s)
            for s in seed.spawn(len(names))]


def run_one(spec: RunSpec) -> Path:
    """Run one experiment under one seed; save its arrays to ``out/runs/<name>.npz``."""
    import sapo_env
    from sapo_env import metrics

    c, e = spec.config, BY_LABEL[spec.experiment]
    env = sapo_env.parallel_env(config=c.swarm_config(e))
    env_seed, agent_seed = seeds_of(c.base_seed, spec.seed_index)
    agents = make_agents(spec, env.possible_agents, agent_seed)
    evaluator = metrics.HeldOutEvaluator(every=c.held_out_every,
                                         n_questions=c.held_out_questions, seed=c.base_seed)
    callbacks: list[Any] = [evaluator]
    if c.tensorboard:
        # A run done again starts its TensorBoard folder afresh: event files are named by
        # time and process, so the old one would stay beside the new and double every step.
        shutil.rmtree(c.out / "tensorboard" / spec.name, ignore_errors=True)
        try:
            from sapo_env.tensorboard import TensorBoardCallback

            callbacks.append(TensorBoardCallback(
                c.out / "tensorboard", run_name=spec.name, held_out=evaluator,
                hparams={"experiment": e.label, "seed_index": spec.seed_index,
                         "learner": c.learner, "model": c.model}))
        except ImportError as error:
            logger.warning("%s; writing no TensorBoard runs", error)
    started = time.perf_counter()
    history = sapo_env.run(env, agents, callbacks=callbacks, progress=False, seed=env_seed)
    seconds = time.perf_counter() - started
    pool = metrics.pool_health(history)
    tasks = metrics.task_rewards(history)
    held = evaluator.result
    arrays = {
        "rewards": history.rewards, "num_external": history.num_external,
        "generated": history.generated,
        "held_out_rounds": np.asarray(held.rounds if held else [], dtype=np.int64),
        "held_out_scores": held.as_array() if held else np.zeros((0, c.n_agents)),
        "pool_shared": pool.shared, "pool_shared_mean_reward": pool.shared_mean_reward,
        "pool_informative_fraction": pool.informative_fraction,
        "pool_informative": pool.informative,
        "pool_contribution": pool.contribution, "pool_consumption": pool.consumption,
        "task_names": np.asarray(sorted(tasks)),
        "task_rewards": np.stack([tasks[t] for t in sorted(tasks)]) if tasks else np.zeros(0),
    }
    if c.learner == "sim":
        for key in ("tag_prob", "expected_quality"):
            arrays[f"learn_{key}"] = metrics.learn_metric(history, key)
    meta = {"key": spec.key(), "experiment": e.label, "seed_index": spec.seed_index,
            "env_seed": env_seed, "seconds": seconds, "agents": list(history.agents)}
    spec.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = spec.path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, meta=np.asarray(json.dumps(meta)), **arrays)
    os.replace(tmp, spec.path)  # atomic: an interrupted sweep never leaves half a run behind
    return spec.path


def load_run(path: Path) -> dict[str, Any]:
    with np.load(path, allow_pickle=False) as data:
        run = {k: data[k] for k in data.files}
    run["meta"] = json.loads(str(run["meta"]))
    return run


def _finished(spec: RunSpec) -> bool:
    if not spec.path.exists():
        return False
    try:
        with np.load(spec.path, allow_pickle=False) as data:  # the metadata only
            return json.loads(str(data["meta"]))["key"] == spec.key()
    except (OSError, ValueError, KeyError):
        return False


# --- summary ---------------------------------------------------------------------------------
@dataclass
class Row:
    """One line of the results table."""

    experiment: str
    local: int
    external: int
    seeds: int
    cumulative: float  #: mean over seeds of the cumulative swarm-mean reward
    cumulative_ci: float  #: half-width of its 95% CI
    ratio: float | None  #: mean over seeds of cumulative / cumulative of 8/0 (same seed)
    ratio_ci: float | None
    paper: float | None
    paper_ratio: float | None
    generated: float  #: completions generated per node-round (the generation cost)
    #: cumulative reward per 1,000 completions a node generated over the run
    reward_per_1k: float
    final_reward: float  #: moving reward over the last window, mean over seeds
    held_out: float | None  #: held-out pass@1 at the last evaluation, mean over nodes, seeds
    note: str


@dataclass
class ReproduceResult:
    config: ReproduceConfig
    rows: list[Row]
    runs: dict[str, list[dict[str, Any]]]  #: experiment -> per-seed run arrays
    files: list[Path]
    seconds: float

    @property
    def table_markdown(self) -> str:
        return format_markdown(self.rows, self.config)


def summarise(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> list[Row]:
    """The table rows: per experiment, cumulative reward with CI and paired ratio to 8/0."""
    from sapo_env.config import SwarmConfig
    from sapo_env.metrics import PAPER_WINDOW

    budget = SwarmConfig().train_budget  # I + J; --swarm may not change it
    window = min(PAPER_WINDOW, config.rounds)
    cumulative = {e: np.array([np.nanmean(r["rewards"], axis=1).sum() for r in rs])
                  for e, rs in runs.items()}
    base = cumulative.get("8/0")
    paper_base = BY_LABEL["8/0"].paper
    rows = []
    for label, rs in runs.items():
        e = BY_LABEL[label]
        mean, ci = mean_ci(cumulative[label])
        ratio = ratio_ci = None
        if base is not None and np.all(base > 0):  # no ratio to a baseline that earned nothing
            ratio, ratio_ci = mean_ci(cumulative[label] / base)
        final = float(np.mean([np.nanmean(r["rewards"][-window:]) for r in rs]))
        generated = np.array([r["generated"].sum(axis=0).mean() for r in rs])  # per node
        held = [r["held_out_scores"][-1].mean() for r in rs if len(r["held_out_scores"])]
        rows.append(Row(
            experiment=label, local=budget - e.num_external, external=e.num_external,
            seeds=len(rs), cumulative=mean, cumulative_ci=ci, ratio=ratio, ratio_ci=ratio_ci,
            paper=e.paper, paper_ratio=(e.paper / paper_base) if e.paper else None,
            generated=float(generated.mean()) / config.rounds,
            reward_per_1k=float(np.mean(1000 * cumulative[label] / generated)),
            final_reward=final, held_out=float(np.mean(held)) if held else None, note=e.note,
        ))
    return rows


def _fmt(value: float | None, ci: float | None = None, digits: int = 1) -> str:
    if value is None or not np.isfinite(value):
        return "–"
    text = f"{value:.{digits}f}"
    if ci is not None and np.isfinite(ci):
        text += f" ± {ci:.{digits}f}"
    return text


def format_markdown(rows: Sequence[Row], config: ReproduceConfig) -> str:
    learner = "simulated learners" if config.learner == "sim" else f"GRPO ({config.model})"
    seeds = seeds_text(config)
    protocol = ("the paper's protocol (a node with J external groups answers 8 - J questions)"
                if config.protocol == "paper" else
                "the fixed protocol (every node answers 8 questions whatever its J)")
    lines = [
        f"Cumulative reward (sum over rounds of the swarm-mean reward), {config.n_agents} nodes, "
        f"{config.rounds} rounds, {learner}, {protocol}; mean ± 95% CI over {seeds}. The "
        "ratio to 8/0 is paired by seed. The paper's column is Qwen2.5-0.5B, 8 nodes, 2000 "
        "rounds, one seed" + (": compare ratios, not absolute values." if config.rounds != 2000
                              or config.learner == "sim" else ".") + " Generated: completions "
        "a node generated per round; per 1k: cumulative reward per 1,000 completions a node "
        "generated over the run.",
        "",
        "| configuration | I | J | cumulative reward | ratio to 8/0 | paper | paper ratio "
        "| generated | per 1k | final moving reward | held-out pass@1 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.experiment} | {r.local} | {r.external} | {_fmt(r.cumulative, r.cumulative_ci)}"
            f" | {_fmt(r.ratio, r.ratio_ci, 2)} | {_fmt(r.paper, None, 2)} "
            f"| {_fmt(r.paper_ratio, None, 2)} | {_fmt(r.generated, None, 0)} "
            f"| {_fmt(r.reward_per_1k, None, 2)} | {_fmt(r.final_reward, None, 3)} "
            f"| {_fmt(r.held_out, None, 3)} |")
    lines += ["", verdict(rows, config)]
    return "\n".join(lines) + "\n"


def verdict(rows: Sequence[Row], config: ReproduceConfig) -> str:
    """What the table can and cannot say: which ratios to 8/0 are distinguishable from 1."""
    compared = [r for r in rows if r.experiment != "8/0" and r.ratio is not None]
    if not compared:
        return "No ratio to 8/0 in this run (8/0 was not run, or earned nothing)."
    if config.seeds < 2:
        return ("**One seed: there is no confidence interval, so this table cannot tell a "
                "difference from noise.** Run with `--seeds 3` or more.")
    clear = [r for r in compared if r.ratio_ci is not None and abs(r.ratio - 1) > r.ratio_ci]
    unclear = [r for r in compared if r not in clear]
    text = []
    if clear:
        text.append("Distinguishable from 8/0 (the ratio's 95% CI excludes 1): "
                    + ", ".join(f"{r.experiment} ({r.ratio:.2f})" for r in clear) + ".")
    if unclear:
        text.append("**Not distinguishable from 8/0 here** (the CI includes 1): "
                    + ", ".join(r.experiment for r in unclear) + ".")
    if config.quick:
        text.append(f"This is the quick run ({config.rounds} rounds x {seeds_text(config)}): "
                    "a smoke test of the pipeline, too short for the paper's 2000-round "
                    "comparison; `sapo-env reproduce` runs the full sweep (its results are in "
                    "docs/reproduce/).")
    return " ".join(text)


def seeds_text(config: ReproduceConfig) -> str:
    return f"{config.seeds} seed{'s' if config.seeds != 1 else ''}"


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[x.name for x in dataclasses.fields(Row)])
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in dataclasses.asdict(r).items()})


# --- figures ---------------------------------------------------------------------------------
def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("the figures need matplotlib: pip install 'sapo-env[plot]'") from error
    matplotlib.use("Agg")  # files only, no display: works on servers and in CI
    import matplotlib.pyplot as plt

    return plt


def _window(rounds: int) -> int:
    from sapo_env.metrics import PAPER_WINDOW

    return max(1, min(PAPER_WINDOW, rounds // 10))


def plot_figures(config: ReproduceConfig, runs: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Figure 1 (per-node trajectories, seed 0), Figure 2 (moving average with the min/max band
    over nodes, averaged over seeds) and the held-out curve."""
    from sapo_env.metrics import moving_average

    plt = _pyplot()
    window = _window(config.rounds)
    files = []
    labels = list(runs)
    # per configuration, the swarm reward's moving average, mean over seeds (two figures)
    swarm_curve = {label: np.mean([moving_average(np.nanmean(r["rewards"], axis=1), window)
                                   for r in runs[label]], axis=0) for label in labels}

    cols = min(3, len(labels))
    rows_n = -(-len(labels) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), sharey=True,
                             squeeze=False)
    for ax, label in zip(axes.flat, labels):
        rewards = runs[label][0]["rewards"]
        for k, curve in enumerate(moving_average(rewards, window).T):
            ax.plot(curve, lw=0.9, alpha=0.85, label=f"node_{k}")
        ax.set_title(label)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(labels):]:
        ax.axis("off")
    axes[0, 0].set_ylabel(f"reward (moving average, {window} rounds)")
    fig.suptitle("Per-node reward, seed 0 (after the paper's Figure 1)")
    fig.tight_layout()
    files.append(_save(fig, config.out / "figure1_trajectories.png", plt))

    fig, ax = plt.subplots(figsize=(8, 5))
    for label in labels:
        smoothed = [moving_average(r["rewards"], window) for r in runs[label]]
        mean = swarm_curve[label]
        low = np.mean([s.min(axis=1) for s in smoothed], axis=0)
        high = np.mean([s.max(axis=1) for s in smoothed], axis=0)
        (line,) = ax.plot(mean, lw=1.6, label=label)
        ax.fill_between(np.arange(len(mean)), low, high, color=line.get_color(), alpha=0.15)
    ax.set_xlabel("round")
    ax.set_ylabel(f"swarm reward (moving average, {window} rounds)")
    ax.set_title("Swarm reward, moving average (after the paper's Figure 2)\n"
                 f"band: min/max over nodes; mean of {config.seeds} seeds", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    files.append(_save(fig, config.out / "figure2_moving_average.png", plt))

    fig, ax = plt.subplots(figsize=(8, 5))
    for label in labels:
        with_eval = [r for r in runs[label] if len(r["held_out_rounds"])]
        if not with_eval:
            continue
        x = with_eval[0]["held_out_rounds"]
        y = np.mean([r["held_out_scores"].mean(axis=1) for r in with_eval], axis=0)
        (line,) = ax.plot(x, y, marker="o", ms=3, lw=1.6, label=f"{label} held-out")
        ax.plot(swarm_curve[label], lw=0.8, ls="--", color=line.get_color(), alpha=0.7)
    ax.set_xlabel("round")
    ax.set_ylabel("pass@1 (held-out, solid) / training reward (dashed)")
    ax.set_title("Held-out pass@1 next to training reward\n(mean over nodes and seeds)",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(_save(fig, config.out / "held_out.png", plt))
    return files


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- the sweep -------------------------------------------------------------------------------
def machine_description() -> str:
    return (f"{platform.node() or 'unknown host'}: {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def reproduce(config: ReproduceConfig | None = None) -> ReproduceResult:
    """Run (or resume) the sweep and write the table, figures and summary to ``config.out``."""
    config = config or ReproduceConfig()
    started = time.perf_counter()
    out = Path(config.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    specs = [RunSpec(e, s, config) for e in config.experiments for s in range(config.seeds)]
    todo = [s for s in specs if not (config.resume and _finished(s))]
    if len(todo) < len(specs):
        logger.info("resuming: %d of %d runs already done", len(specs) - len(todo), len(specs))
    jobs = min(config.jobs or os.cpu_count() or 1, max(len(todo), 1))
    bar = tqdm(total=len(specs), initial=len(specs) - len(todo), desc="runs", unit="run",
               disable=not config.progress)
    try:
        if jobs <= 1 or config.learner == "grpo":  # GPU models stay in one process
            for spec in todo:
                run_one(spec)
                bar.update()
        else:
            # separate processes, started fresh ("spawn"): no state or threads inherited
            with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
                futures = {pool.submit(run_one, spec): spec for spec in todo}
                for future in as_completed(futures):
                    future.result()
                    bar.update()
    finally:
        bar.close()

    runs: dict[str, list[dict[str, Any]]] = {e: [] for e in config.experiments}
    for spec in specs:  # experiment by experiment, seeds in order
        runs[spec.experiment].append(load_run(spec.path))
    rows = summarise(config, runs)
    markdown = format_markdown(rows, config)
    files = [out / "results.md", out / "results.csv"]
    files[0].write_text(markdown)
    write_csv(rows, files[1])
    if config.plots:
        files += plot_figures(config, runs)
    seconds = time.perf_counter() - started
    summary = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_description(),
        "wall_seconds": round(seconds, 1),
        "run_seconds": {spec.name: round(runs[spec.experiment][spec.seed_index]["meta"]
                                         ["seconds"], 1) for spec in specs},
        "jobs": jobs,
        "settings": {k: (str(v) if isinstance(v, Path) else v)
                     for k, v in dataclasses.asdict(config).items()},
        "rows": [dataclasses.asdict(r) for r in rows],
    }
    files.append(out / "summary.json")
    files[-1].write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return ReproduceResult(config, rows, runs, files, seconds)


# --- command line ----------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The reproduce options (shared by ``sapo-env reproduce`` and ``python -m``)."""
    d = ReproduceConfig()
    parser.add_argument("--quick", action="store_true",
                        help=f"a one-minute version: {QUICK['rounds']} rounds, {QUICK['seeds']} "
                             f"seeds, {QUICK['held_out_questions']} held-out questions")
    parser.add_argument("--protocol", choices=["paper", "fixed"], default=d.protocol,
                        help="paper: a node with J external groups answers 8 - J questions "
                             "(default); fixed: every node answers 8 whatever its J (the "
                             "protocol before sapo-env 0.2)")
    parser.add_argument("--learner", choices=["sim", "grpo"], default=d.learner,
                        help="simulated learners (default, CPU) or GRPO language models (GPU)")
    parser.add_argument("--model", default=None,
                        help="model of the GRPO learner (hub id, path or 'smollm2-135m')")
    parser.add_argument("--experiments", nargs="+", default=None, metavar="LABEL",
                        help="subset to run, by label or slug: "
                             + ", ".join(repr(e.label) for e in EXPERIMENTS))
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per configuration (default {d.seeds}; quick "
                             f"{QUICK['seeds']})")
    parser.add_argument("--base-seed", type=int, default=d.base_seed, help="root seed")
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds per run (default {d.rounds}; quick {QUICK['rounds']})")
    parser.add_argument("--nodes", type=int, default=d.n_agents, help="nodes per swarm")
    parser.add_argument("--held-out-every", type=int, default=None,
                        help=f"rounds between held-out evaluations (default {d.held_out_every})")
    parser.add_argument("--held-out-questions", type=int, default=None,
                        help=f"held-out questions (default {d.held_out_questions})")
    parser.add_argument("--jobs", type=int, default=None,
                        help="parallel processes (default: one per CPU core)")
    parser.add_argument("--out", default=None,
                        help="output folder (default out/reproduce, quick out/reproduce-quick)")
    parser.add_argument("--swarm", action="append", default=[], metavar="FIELD=VALUE",
                        help="a SwarmConfig field for every configuration, VALUE as JSON "
                             "(repeatable), e.g. --swarm answer_format='\"lenient\"'")
    parser.add_argument("--no-resume", action="store_true",
                        help="rerun every run even if a finished one is in OUT/runs")
    parser.add_argument("--no-tensorboard", action="store_true", help="write no TensorBoard runs")
    parser.add_argument("--no-plots", action="store_true", help="write no PNG figures")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sapo-env reproduce",
        description="Run the SAPO paper's configurations (8/0, 6/2, 4/4, 2/6) under its "
                    "protocol and two controls (8/0 oversampled + filtered, 4/4 self-replay) "
                    "over several seeds; write a table, figures and TensorBoard runs.")
    return add_arguments(parser)


def config_from_args(args: argparse.Namespace) -> ReproduceConfig:
    given = {
        "learner": args.learner, "model": args.model, "base_seed": args.base_seed,
        "protocol": args.protocol,
        "n_agents": args.nodes, "jobs": args.jobs, "quick": args.quick,
        "resume": not args.no_resume, "tensorboard": not args.no_tensorboard,
        "plots": not args.no_plots, "progress": not args.no_progress,
    }
    optional = {"experiments": tuple(args.experiments) if args.experiments else None,
                "seeds": args.seeds, "rounds": args.rounds, "out": args.out,
                "held_out_every": args.held_out_every,
                "held_out_questions": args.held_out_questions}
    given |= {k: v for k, v in optional.items() if v is not None}
    swarm = {}
    for item in args.swarm:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--swarm expects FIELD=VALUE, got {item!r}")
        try:
            swarm[name] = json.loads(value)
        except json.JSONDecodeError:
            swarm[name] = value  # a bare word: a string
    return ReproduceConfig(**given, swarm=swarm)


def run_from_args(args: argparse.Namespace) -> ReproduceResult:
    try:
        config = config_from_args(args)  # validates every configuration's SwarmConfig too
    except ValueError as error:
        raise SystemExit(f"sapo-env reproduce: {error}") from None
    result = reproduce(config)
    print(result.table_markdown)
    print(f"Wrote {len(result.files)} files to {config.out} in {result.seconds:.0f} s:")
    for path in result.files:
        print(f"  {path}")
    if config.tensorboard:
        print(f"TensorBoard: tensorboard --logdir {config.out / 'tensorboard'}")
    return result


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    run_from_args(args)


if __name__ == "__main__":
    main()
