"""A sweep's runs as Ray tasks: ``--ray-address`` on ``sapo-env reproduce``, ``bench-ratio``,
``attack`` and ``format-propagation`` (the ``ray`` extra: ``pip install "sapo-env[ray]"``).

One run is one Ray task. The task computes the run and *returns* what its file holds (a
``sapo_experiments.run_files.RunFile``); the process that runs the sweep (the driver) writes the
file, so finished runs land in the driver's ``out`` folder whichever machine ran them. Every
task is submitted at once and Ray runs as many at a time as their resources allow
(``cpus_per_run``, ``gpus_per_run``): a config's ``jobs`` has no meaning then, and a config
with both is rejected. The same settings give the same runs as in this process, number for
number.

What a run writes *while* it runs is written where its task runs, at the same path (a
relative one from that worker's working folder: the driver's on a local Ray): reproduce's
mid-run checkpoints and the TensorBoard runs of reproduce and format-propagation. On one
machine or a shared filesystem that is where a local sweep puts them; on a cluster without
one they stay on the machine that ran the task. Likewise what a run reads (a ``--model`` path,
``--sb3-model``, a ``--learner`` module) must be at that path on every machine.

Example::

    from sapo_experiments.attack import AttackConfig, attack
    from sapo_experiments.ray_runs import RayOptions

    attack(AttackConfig(quick=True, ray=RayOptions("local", cpus_per_run=1)))
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RayOptions:
    """Which Ray a sweep's runs go to, and what each run reserves there."""

    address: str
    """``"local"``: start a Ray on this machine; ``"auto"``: join the cluster running here;
    ``"HOST:PORT"``: join that cluster (each is ``ray.init(address=...)``). A Ray this process
    has already initialised is used as it is, whatever the address."""
    cpus_per_run: float = 1
    """CPUs Ray reserves for each run (one task)."""
    gpus_per_run: float = 0
    """GPUs Ray reserves for each run: 1 for a language-model run on a GPU (Ray hides the
    GPUs from a task that asks for none); a fraction shares one GPU between runs."""

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or not self.address.strip():
            raise ValueError(f"ray address must be 'local', 'auto' or HOST:PORT, "
                             f"got {self.address!r}")
        for name in ("cpus_per_run", "gpus_per_run"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if importlib.util.find_spec("ray") is None:  # fail now, not after the sweep's set-up
            raise ValueError(f"ray address {self.address!r}: Ray is not installed; "
                             "pip install \"sapo-env[ray]\"")


def check_ray(ray: RayOptions | None, jobs: int | None) -> None:
    """Validate a sweep config's ``ray`` field against its ``jobs``: Ray schedules the runs,
    so a config that sends them to Ray leaves ``jobs`` at None."""
    if ray is not None and not isinstance(ray, RayOptions):
        raise ValueError(f"ray must be a RayOptions or None, got {ray!r}")
    if ray is not None and jobs is not None:
        raise ValueError(f"jobs must be None when the runs go to Ray (ray address "
                         f"{ray.address!r}: Ray runs as many at once as cpus_per_run and "
                         f"gpus_per_run allow), got jobs={jobs}")


def ray_runs(compute: Callable[[Any], Any], todo: Sequence[Any],
             options: RayOptions) -> Iterator[Any]:
    """``compute(spec)`` for every spec of ``todo``, each a Ray task, all submitted at once;
    yields their results as they finish. A run that fails raises here (Ray's error carries the
    run's) and the tasks not yet finished are cancelled."""
    import ray

    if not ray.is_initialized():  # (a caller may have started it)
        ray.init(address=options.address)
    task = ray.remote(compute).options(num_cpus=options.cpus_per_run,
                                       num_gpus=options.gpus_per_run)
    pending = [task.remote(spec) for spec in todo]
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    finally:
        for ref in pending:
            ray.cancel(ref)


def add_arguments(parser: argparse.ArgumentParser, gpus: bool = False) -> None:
    """``--ray-address`` and ``--cpus-per-run`` (with ``gpus``, ``--gpus-per-run`` too)."""
    parser.add_argument("--ray-address", default=None, metavar="ADDRESS",
                        help="run each run as a Ray task: 'local' starts Ray here, 'auto' or "
                             "HOST:PORT joins a running cluster; Ray schedules the runs, so "
                             "not with --jobs (default: processes on this machine)")
    parser.add_argument("--cpus-per-run", type=float, default=None, metavar="N",
                        help="with --ray-address: CPUs Ray reserves for each run (default 1)")
    if gpus:
        parser.add_argument("--gpus-per-run", type=float, default=None, metavar="N",
                            help="with --ray-address: GPUs Ray reserves for each run "
                                 "(default 0; 1 for a language model on a GPU)")


def options_from_args(args: argparse.Namespace) -> RayOptions | None:
    """The ``RayOptions`` the flags of ``add_arguments`` ask for (None: no Ray)."""
    given = {name: getattr(args, name) for name in ("cpus_per_run", "gpus_per_run")
             if getattr(args, name, None) is not None}
    if args.ray_address is None:
        if given:
            flags = " and ".join("--" + name.replace("_", "-") for name in given)
            verb = "needs" if len(given) == 1 else "need"
            raise ValueError(f"{flags} {verb} --ray-address (without it the runs go to "
                             "processes on this machine, --jobs)")
        return None
    return RayOptions(args.ray_address, **given)
