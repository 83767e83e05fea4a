"""The open swarm of ``benchmarks/open_swarm.py`` with its nodes in Ray actors, packed ``K`` to an
actor (``agents.wrappers.remote.remote_swarm(..., nodes_per_actor=K)``); run as
``python benchmarks/open_swarm.py --ray [--nodes-per-actor K] [--ray-cpus C]``.

The same swarm as in one process: the same env and churn schedule, the same learners (the seeds
``simulated_swarm`` gives them) and the same offline draws. Each node churns inside its actor
(``agents.wrappers.churning.churning``): its offline and leave markers come back as its
actions, and late joiners are the env's (``SwarmConfig.join_rounds``), so a run's rewards are
the one-process run's (tests/test_open_swarm.py checks it).

Per round: wall time; the driver's CPU time (``time.process_time``: the env's step, the screen
of the nodes' actions, Ray's calls and their serialisation), of which the env's step (timed
around ``env.step``); and the actors' CPU time (utime + stime of their processes,
``/proc/<pid>/stat``). Memory every ``--every`` rounds: the driver's VmRSS and the sums of the
actors' VmRSS and Pss (``/proc/<pid>/status``, ``/proc/<pid>/smaps_rollup``): RSS counts the
pages the actors share (libraries) once per actor, PSS splits them between them. The actors'
pids are read from Ray's GCS actor table (``ray._private.state.actors``, which needs no
dashboard; Ray's state API needs one, which is not started). Ray's own processes (raylet, GCS,
object store) are not counted.

``K`` defaults to ceil(nodes / C), one actor per CPU given to Ray (C: ``--ray-cpus``, default
the machine's cores): a round is synchronous (the nodes act, the env steps in the driver, the
nodes learn), so an actor beyond the cores adds a process and its memory and one more copy of
the pool pickled a round (an actor's nodes share one), and runs no sooner.
"""

from __future__ import annotations

import datetime
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from benchmarks_md import machine
from open_swarm import churn_schedule, rss_mb

import sapo_env
import sapo_env.runtime
from agents.sim.simulated import SimulatedLearner, SimulatedLearnerConfig
from agents.wrappers.churning import churning
from sapo_env.extras import require

ROOT = Path(__file__).resolve().parents[1]
SUBSECTION = "### On Ray, nodes packed in actors"


def node_factories(names: Sequence[str], offline: float, leaves: Mapping[str, int]
                   ) -> dict[str, Callable[[], Any]]:
    """Node -> a factory of the node ``open_swarm.measure`` builds in process: the learner of
    ``simulated_swarm(names, seed=0, num_external=4)`` in a ``ChurningAgent`` with the same
    offline seed and leave round."""
    config = replace(SimulatedLearnerConfig(), num_external=4)
    learners = np.random.SeedSequence(0).spawn(len(names))
    churn = np.random.SeedSequence(1).spawn(len(names))
    return {a: partial(churning, partial(SimulatedLearner, config, learner), offline,
                       leaves.get(a), seed)
            for a, learner, seed in zip(names, learners, churn)}


def start_ray(cpus: int) -> str | None:
    """A local Ray of ``cpus`` CPUs whose workers import this checkout, and its temp folder;
    None (and nothing started) when Ray is already initialised."""
    ray = require("ray", "benchmarks/open_swarm.py --ray")
    if ray.is_initialized():
        return None
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths are limited
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             _temp_dir=temp, runtime_env={"env_vars": {"PYTHONPATH": path}})
    return temp


def packed(factories: Mapping[str, Callable[[], Any]], nodes_per_actor: int
           ) -> tuple[dict[str, Any], list[Any]]:
    """The nodes in Ray actors, ``nodes_per_actor`` to an actor, sharing the cluster's CPUs
    evenly (at most one each), and the actors, once each has built its nodes."""
    ray = require("ray", "benchmarks/open_swarm.py --ray")
    from agents.wrappers.remote import remote_swarm

    count = math.ceil(len(factories) / nodes_per_actor)
    cpus = min(1.0, ray.cluster_resources().get("CPU", 1.0) / count)
    nodes = remote_swarm(factories, num_cpus=cpus, nodes_per_actor=nodes_per_actor)
    actors = list({id(a): a for a in (_actor_of(h) for h in nodes.values())}.values())
    # a joint actor answers names() and a single node's actor ready() once built (bytes)
    ray.get([(a.names if nodes_per_actor > 1 else a.ready).remote() for a in actors])
    return nodes, actors


def _actor_of(handle: Any) -> Any:
    return handle.joint_actor.actor if hasattr(handle, "joint_actor") else handle.actor


def actor_pids(actors: Sequence[Any]) -> list[int]:
    """The actors' process ids, from Ray's GCS actor table."""
    from ray._private import state

    return [int(state.actors(actor._actor_id.hex())["Pid"]) for actor in actors]


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pss_mb(pid: int) -> float:
    """Process ``pid``'s proportional set size in MB (``/proc/<pid>/smaps_rollup``)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"Pss not found in /proc/{pid}/smaps_rollup")


class StepClock:
    """Wraps ``env.step`` on the instance and adds up this process's CPU seconds in it."""

    def __init__(self, env: Any):
        self.seconds = 0.0
        self._step = env.step
        env.step = self

    def __call__(self, actions: Any) -> Any:
        start = time.process_time()
        try:
            return self._step(actions)
        finally:
            self.seconds += time.process_time() - start


def measure_ray(n: int, rounds: int, offline: float, leave: float, join: float, every: int,
                nodes_per_actor: int | None = None, cpus: int | None = None,
                on_round: Callable[[Any], None] | None = None) -> dict:
    """The open swarm on Ray (see the module docstring): its rows and memory readings. A Ray
    already initialised is used (its CPUs), and left running; its actors are ended after."""
    ray = require("ray", "benchmarks/open_swarm.py --ray")
    started = start_ray(cpus or os.cpu_count() or 1)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    nodes_per_actor = nodes_per_actor or math.ceil(n / cpus)
    leaves, joins = churn_schedule(n, rounds, leave, join)
    env = sapo_env.parallel_env(n=n, max_rounds=rounds, num_external=4, join_rounds=joins)
    actors: list[Any] = []
    try:
        start = time.perf_counter()
        nodes, actors = packed(node_factories(env.possible_agents, offline, leaves),
                               nodes_per_actor)
        startup = time.perf_counter() - start
        result = _rounds(env, nodes, actor_pids(actors), rounds, every, on_round)
    finally:
        for actor in actors:
            ray.kill(actor)
        if started is not None:
            ray.shutdown()
            shutil.rmtree(started, ignore_errors=True)
    return {**result, "n": n, "rounds": rounds, "offline": offline, "leaves": len(leaves),
            "joins": len(joins), "startup": startup, "actors": len(actors),
            "nodes_per_actor": nodes_per_actor, "cpus": cpus}


def _rounds(env: Any, nodes: Mapping[str, Any], pids: list[int], rounds: int, every: int,
            on_round: Callable[[Any], None] | None) -> dict:
    """Play the rounds: per round (driver CPU, wall, env step CPU, actors' CPU, live, played),
    and (round, driver RSS, actors' RSS, actors' PSS) every ``every`` rounds."""
    calls = sapo_env.runtime.AgentCalls(nodes)
    clock = StepClock(env)
    load = os.getloadavg()[0]
    observations, _ = env.reset(seed=0)
    rows, memory = [], [_memory(0, pids)]
    for t in range(1, rounds + 1):
        live, step, actors = len(env.agents), clock.seconds, sum(map(cpu_seconds, pids))
        cpu, wall = time.process_time(), time.perf_counter()
        record = sapo_env.runtime.play_round(env, calls, observations)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        observations = record.observations
        rows.append((cpu, wall, clock.seconds - step, sum(map(cpu_seconds, pids)) - actors,
                     live, len(record.rewards)))
        if on_round is not None:
            on_round(record)
        if t % every == 0 or t == rounds:
            memory.append(_memory(t, pids))
            print(f"round {t}: {1e3 * wall:.0f} ms wall, {1e3 * cpu:.0f} ms driver CPU, "
                  f"{live} live, {memory[-1][1]:.0f} + {memory[-1][2]:.0f} MB", flush=True)
    return {"rows": rows, "memory": memory, "pids": pids,
            "load": (load, os.getloadavg()[0])}


def _memory(t: int, pids: list[int]) -> tuple[int, float, float, float]:
    return (t, rss_mb(), sum(rss_mb(pid) for pid in pids), sum(map(pss_mb, pids)))


def report_ray(r: dict, command: str) -> str:
    """The ``### On Ray`` subsection of "## Open swarm" for ``measure_ray``'s result."""
    median = statistics.median
    cpu, wall, step, actors, live, played = (list(column) for column in zip(*r["rows"]))
    quarter = max(1, len(wall) // 4)
    since = min(50, r["rounds"])
    later = [m for m in r["memory"] if m[0] >= since]
    ms = lambda values: f"{1e3 * median(values):.0f} ms"  # noqa: E731
    lines = [
        SUBSECTION, "",
        f"`{command}` on {datetime.date.today()}, {machine()}, load average "
        f"{r['load'][0]:.1f} at the start and {r['load'][1]:.1f} at the end. The same swarm and "
        f"churn as in one process (every node offline with probability {r['offline']} a round, "
        f"{r['leaves']} leaving, {r['joins']} joining late), its nodes in {r['actors']} Ray "
        f"actors of {r['nodes_per_actor']} nodes on a local Ray of {r['cpus']} CPUs "
        "(`benchmarks/open_swarm_ray.py`; the same seeds give the same rewards). The "
        "driver's CPU time (the env's step, timed around it, and Ray's calls), the actors' "
        "(their processes' utime + stime); memory: the driver's VmRSS and the actors' VmRSS "
        "and Pss summed (RSS counts their shared libraries once per actor; Ray's own "
        "processes not counted).", "",
        "| measure | value |", "| --- | ---: |",
        f"| nodes / actors x nodes per actor / Ray CPUs | {r['n']} / {r['actors']} x "
        f"{r['nodes_per_actor']} / {r['cpus']} |",
        f"| live at the start / at the end; played a round (median) | {live[0]} / {live[-1]}; "
        f"{median(played):.0f} |",
        f"| actors started and their nodes built | {r['startup']:.1f} s wall |",
        f"| a round, median wall | {ms(wall)} |",
        f"| the driver's CPU a round, median | {ms(cpu)} |",
        f"| of which the env's step | {ms(step)} |",
        f"| of which the rest (Ray's calls, serialisation, the screen) | "
        f"{ms([c - s for c, s in zip(cpu, step)])} |",
        f"| the actors' CPU a round, median (all of them) | {ms(actors)} |",
        f"| first / last quarter of the rounds, median wall | {ms(wall[:quarter])} / "
        f"{ms(wall[-quarter:])} |",
        f"| {r['rounds']} rounds: wall / driver CPU / actors' CPU | "
        f"{_total(sum(wall), sum(cpu), sum(actors))} |",
        f"| memory after reset: driver RSS / actors' RSS / actors' PSS | "
        f"{_mb(r['memory'][0][1:])} |",
        f"| memory at the end: driver RSS / actors' RSS / actors' PSS | "
        f"{_mb(r['memory'][-1][1:])} |",
        f"| from round {since} on, max: driver RSS / actors' RSS / actors' PSS | "
        f"{_mb([max(m[k] for m in later) for k in (1, 2, 3)])} |",
        "",
        "| round | " + " | ".join(str(m[0]) for m in r["memory"]) + " |",
        "|---" * (len(r["memory"]) + 1) + "|",
        *(f"| {label} (MB) | " + " | ".join(f"{m[k]:.0f}" for m in r["memory"]) + " |"
          for k, label in ((1, "driver RSS"), (2, "actors' RSS"), (3, "actors' PSS"))),
    ]
    return "\n".join(lines) + "\n"


def _total(*seconds: float) -> str:
    """Seconds, or minutes from 2 minutes on."""
    if max(seconds) < 120:
        return " / ".join(f"{s:.0f}" for s in seconds) + " s"
    return " / ".join(f"{s / 60:.1f}" for s in seconds) + " min"


def _mb(values: Sequence[float]) -> str:
    return " / ".join(f"{v:.0f}" for v in values) + " MB"
