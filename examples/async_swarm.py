"""Synchronous against asynchronous rounds: a swarm with a straggler, and a node killed mid-run.

Eight (``--nodes``) simulated learners at 4 local / 4 external (the paper's protocol and
defaults, but a pool window of ``--pool-window`` rounds, so that late groups can still be
shared), each in its own Ray actor and each taking ``--act-seconds`` to answer
(``agents.wrappers.slow.SlowAgent``: the time a language model spends generating); the last
node, the straggler, takes three times as long. Conditions:

- ``sync``: no straggler, every node at the same speed (the reference);
- ``sync, straggler``: every round waits for the straggler;
- ``async, straggler``: a round waits at most ``--deadline`` x act-seconds; the straggler plays
  the rounds it misses as pending and answers late (``sapo_env.runtime.asynchronous``);
- ``sync, killed`` and ``async, killed``: the straggler swarm, with ``node_0``'s actor killed
  at half time (it leaves the swarm, the run goes on).

What it measures, mean and 95% CI over seeds: seconds per round; the cumulative reward (sum
over rounds of the mean reward of the nodes that played); the swarm's mean reward over the last
tenth of the rounds; the mean reward reached at the same wall-clock time for every condition
(the time the fastest run took, averaged over the 50 rounds before it); the straggler's share
of rounds played and how late its answers were, and the other nodes' share (a node at full
speed can miss a tight deadline too: its act waits behind its update in its actor).
Asynchronous runs depend on timing, so they are not reproducible bit for bit, and neither is
any time measure.

    python examples/async_swarm.py                           # 3 seeds x 1000 rounds
    python examples/async_swarm.py --rounds 100 --seeds 1    # a short run
    python examples/async_swarm.py --write records/async     # the table, figure and numbers

Measured times: docs/ray.md, "Asynchronous rounds and dead nodes" (the full run) and
BENCHMARKS.md, "Commands as a user runs them" (the short one).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np

import sapo_env
import sapo_env.runtime
from agents.sim.simulated import SimulatedLearner, SimulatedLearnerConfig
from agents.wrappers.slow import SlowAgent
from sapo_env.extras import require
from sapo_experiments.reproduce.report import mean_ci

KILLED = "node_0"  # killed at half time in the "killed" conditions; the straggler is the last
CONDITIONS = ("sync", "sync, straggler", "async, straggler", "sync, killed", "async, killed")


def slow_learner(seed: np.random.SeedSequence, act_seconds: float) -> SlowAgent:
    """A simulated learner that takes ``act_seconds`` to act (built inside its actor)."""
    return SlowAgent(SimulatedLearner(SimulatedLearnerConfig(num_external=4), seed), act_seconds)


class Timeline(sapo_env.runtime.Callback):
    """Records when each round ended, and kills a node's actor after a given round."""

    def __init__(self, kill_after: int | None):
        self.kill_after, self.ends = kill_after, []

    def on_run_start(self, env, agents) -> None:
        self.agents, self.start = agents, time.monotonic()

    def on_round_end(self, record) -> None:
        self.ends.append(time.monotonic() - self.start)
        if record.round == self.kill_after:
            self.agents[KILLED].kill()


def play(condition: str, args: argparse.Namespace, seed: int) -> dict:
    """One run: its (rounds, nodes) rewards, the seconds at each round's end, and the
    straggler's lateness."""
    from agents.wrappers.remote import remote_swarm

    env = sapo_env.parallel_env(n=args.nodes, max_rounds=args.rounds, num_external=4,
                                pool_window=args.pool_window)
    names, slow = env.possible_agents, 1.0 if condition == "sync" else 3.0
    straggler = names[-1]
    children = np.random.SeedSequence(seed).spawn(len(names))
    nodes = remote_swarm({a: partial(slow_learner, child, args.act_seconds * (
        slow if a == straggler else 1.0)) for a, child in zip(names, children)},
        num_cpus=2 / len(names))
    for node in nodes.values():
        node.state_dict()  # every actor is up before the clock starts
    timeline = Timeline(args.rounds // 2 if condition.endswith("killed") else None)
    deadline = args.deadline * args.act_seconds if condition.startswith("async") else None
    history = sapo_env.runtime.run(env, nodes, seed=seed, progress=False, deadline=deadline,
                           callbacks=[timeline])
    for node in nodes.values():
        node.kill()
    late = [i[straggler]["staleness"] for i in history.infos if straggler in i]
    return {"rewards": history.rewards, "ends": np.asarray(timeline.ends),
            "staleness": np.asarray(late, dtype=float)}


def reward_at(run: dict, seconds: float, window: int = 50) -> float:
    """The swarm's mean reward over the ``window`` rounds before ``seconds`` into the run."""
    done = max(int(np.searchsorted(run["ends"], seconds, side="right")), 1)
    return float(np.nanmean(run["rewards"][max(done - window, 0):done]))


def summarise(runs: dict[str, list[dict]], rounds: int) -> dict:
    """Per condition, mean and 95% CI over seeds of each measure."""
    budget = min(r["ends"][-1] for seeds in runs.values() for r in seeds)
    last = slice(rounds - max(rounds // 10, 1), rounds)
    out = {}
    for condition, seeds in runs.items():
        measures = {
            "seconds per round": [float(r["ends"][-1] / rounds) for r in seeds],
            "cumulative reward": [float(np.nansum(np.nanmean(r["rewards"], axis=1)))
                                  for r in seeds],
            "reward, last tenth": [float(np.nanmean(r["rewards"][last])) for r in seeds],
            f"reward at {budget:.0f} s": [reward_at(r, budget) for r in seeds],
            "others' rounds played (%)": [
                100 * float(np.mean(~np.isnan(r["rewards"][:, :-1])))
                for r in seeds],
            "straggler's rounds played (%)": [
                100 * float(np.mean(~np.isnan(r["rewards"][:, -1]))) for r in seeds],
            "straggler's lateness (rounds)": [
                float(r["staleness"].mean()) if r["staleness"].size else 0.0 for r in seeds],
        }
        out[condition] = {k: mean_ci(v) for k, v in measures.items()}
    return {"budget_seconds": budget, "conditions": out}


def markdown(summary: dict, args: argparse.Namespace, seconds: float) -> str:
    conditions = summary["conditions"]
    keys = list(conditions["sync"])
    lines = [
        f"{args.nodes} simulated learners in Ray actors, 4/4, paper protocol, pool window "
        f"{args.pool_window}, {args.rounds} rounds, mean ± 95% CI over {args.seeds} seeds "
        f"({seconds / 60:.0f} min here). Each node acts in {args.act_seconds:g} s, the straggler "
        f"{3 * args.act_seconds:g} s; async rounds wait at most {args.deadline:g} x "
        f"{args.act_seconds:g} s; '{KILLED}' is killed at round {args.rounds // 2}. Rewards are "
        "per node-round played; 'reward at' is each run's mean reward over the 50 rounds before "
        "the time the fastest run took in all.", "",
        "| condition | " + " | ".join(keys) + " |",
        "| --- | " + " | ".join("---:" for _ in keys) + " |",
    ]
    for condition, measures in conditions.items():
        cells = [f"{measures[k][0]:.3f} ± {measures[k][1]:.3f}" for k in keys]
        lines.append(f"| {condition} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(runs: dict[str, list[dict]], path: Path) -> None:
    require("matplotlib", "examples/async_swarm.py --write (its figure)").use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    smooth = max(min(50, len(runs["sync"][0]["ends"]) // 10), 1)

    def moving(x: np.ndarray) -> np.ndarray:  # over the rounds that have a reward
        window = np.ones(smooth)
        have = np.convolve(~np.isnan(x), window, mode="valid")
        return np.convolve(np.nan_to_num(x), window, mode="valid") / np.maximum(have, 1)

    for condition, seeds in runs.items():
        mean = np.mean([moving(np.nanmean(r["rewards"], axis=1)) for r in seeds], axis=0)
        ends = np.mean([r["ends"][smooth - 1:] for r in seeds], axis=0)
        axes[0].plot(np.arange(smooth - 1, smooth - 1 + len(mean)), mean, label=condition)
        axes[1].plot(ends, mean, label=condition)
    axes[0].set_xlabel("round")
    axes[1].set_xlabel("wall-clock seconds (mean over seeds)")
    for ax in axes:
        ax.set_ylabel(f"swarm mean reward ({smooth}-round moving average)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Synchronous and asynchronous rounds with a 3x straggler (simulated learners)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8, help="swarm size (at least 2)")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--act-seconds", type=float, default=0.05,
                        help="seconds a node takes to act (the straggler: three times this)")
    parser.add_argument("--deadline", type=float, default=1.5,
                        help="async rounds wait at most this many times --act-seconds")
    parser.add_argument("--pool-window", type=int, default=3,
                        help="rounds a shared group stays in the pool (the paper's: 1)")
    parser.add_argument("--ray-address", default="local",
                        help="'local' starts Ray here; 'auto' or HOST:PORT joins a cluster")
    parser.add_argument("--write", type=Path, default=None, metavar="FOLDER",
                        help="write results.md, summary.json and async.png there")
    args = parser.parse_args(argv)
    if args.nodes < 2:
        parser.error(f"--nodes must be at least 2 (a straggler and another), got {args.nodes}")
    ray = require("ray", "examples/async_swarm.py (its remote nodes)")
    if not ray.is_initialized():
        ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False)
    # a round in which every node is pending has no mean reward (NaN, skipped in the sums)
    warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
    start = time.perf_counter()
    runs: dict[str, list[dict]] = {c: [] for c in CONDITIONS}
    for seed in range(args.seeds):  # conditions interleaved: a busy machine slows them alike
        for condition in CONDITIONS:
            runs[condition].append(play(condition, args, seed))
    seconds = time.perf_counter() - start
    summary = summarise(runs, args.rounds)
    table = markdown(summary, args, seconds)
    print(table)
    if args.write is not None:
        args.write.mkdir(parents=True, exist_ok=True)
        (args.write / "results.md").write_text(table)
        (args.write / "summary.json").write_text(json.dumps(
            {"settings": {k: (str(v) if isinstance(v, Path) else v)
                          for k, v in vars(args).items()},
             "seconds": round(seconds, 1), **summary}, indent=2) + "\n")
        plot(runs, args.write / "async.png")
        print(f"wrote {args.write}/results.md, summary.json, async.png")
    return summary


if __name__ == "__main__":
    main()
