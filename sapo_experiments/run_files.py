"""One run's arrays on disk, shared by the harnesses (reproduce, bench-ratio, attack,
format-propagation): written atomically, read back, recognised when resuming; running the runs
(``run_all``: here, in worker processes or as Ray tasks); and the sweep's ``summary.json``
(``write_summary``).

A harness's ``compute(spec)`` plays one run and returns its ``RunFile`` (plain data); wherever
it ran, the sweep's own process writes the file (``RunFile.save``), so runs on other machines
of a Ray cluster land in this machine's ``out`` folder.

A run file is a compressed ``.npz`` holding the run's arrays and ``meta``, a JSON object whose
``key`` digests every setting that determines the run's outcome and whose ``code`` digests the
source of ``sapo_env`` and ``agents`` that made it (the env and the learners; a harness's own
modules, which mostly report, are covered by its key's settings): a file whose key and code
match the run asked for is that run, finished, and is reused (``run_all`` says how many);
after an edit of the env or the agents every run is made again. A file written before run
files recorded their code (no ``code``) is reused on its key alone.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import logging
import os
import platform
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sapo_experiments.ray_runs import RayOptions, ray_runs

logger = logging.getLogger(__name__)


@functools.cache
def code_digest() -> str:
    """A digest of the Python source of ``sapo_env`` and ``agents``."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for package in ("sapo_env", "agents"):
        for source in sorted((root / package).rglob("*.py")):
            digest.update(str(source.relative_to(root)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]


def save_run(path: Path, meta: Mapping[str, Any], **arrays: Any) -> Path:
    """Write ``meta`` (JSON-serialisable, with its ``key``) and ``arrays`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    meta = {**meta, "code": code_digest()}
    np.savez_compressed(tmp, meta=np.asarray(json.dumps(meta)), **arrays)
    os.replace(tmp, path)  # atomic: an interrupted sweep never leaves half a run behind
    return path


def load_run(path: Path) -> dict[str, Any]:
    """A saved run's arrays, with ``meta`` decoded."""
    with np.load(path, allow_pickle=False) as data:
        run = {k: data[k] for k in data.files}
    run["meta"] = json.loads(str(run["meta"]))
    return run


def _meta(path: Path) -> dict[str, Any] | None:
    """A run file's metadata alone, or None where there is no readable run file."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
    except (OSError, ValueError, KeyError):
        return None
    return meta if isinstance(meta, dict) and "key" in meta else None


def is_finished(path: Path, key: str) -> bool:
    """Whether ``path`` holds a run made with the settings that ``key`` digests, by this code."""
    meta = _meta(path)
    return meta is not None and meta["key"] == key and meta.get("code",
                                                                code_digest()) == code_digest()


def made_by_other_code(path: Path, key: str) -> bool:
    """Whether ``path`` holds a run of these settings (``key``) that other source of
    ``sapo_env`` and ``agents`` made: one a resumed sweep makes again."""
    meta = _meta(path)
    return meta is not None and meta["key"] == key and meta.get("code",
                                                                code_digest()) != code_digest()


@dataclass(frozen=True)
class RunFile:
    """What one run's file will hold: plain data, so that a worker process or a Ray task on
    another machine computes it and the sweep's own process writes it (``save``)."""

    path: Path  #: where the file goes (``save_run``)
    meta: dict[str, Any]  #: JSON-serialisable, with the run's ``key``
    arrays: dict[str, Any]  #: the run's arrays, by name
    remove: tuple[str, ...] = ()
    """File-name patterns in ``path``'s folder to delete once the file is written (the run's
    checkpoints)."""

    def save(self) -> Path:
        """Write the file, then delete what ``remove`` names; return ``path``."""
        save_run(self.path, self.meta, **self.arrays)
        for pattern in self.remove:
            for leftover in self.path.parent.glob(pattern):
                leftover.unlink(missing_ok=True)
        return self.path


def run_all(compute: Callable[[Any], RunFile], todo: Sequence[Any], done: int, jobs: int,
            progress: bool, ray: RayOptions | None = None) -> None:
    """``compute(spec)`` for every spec of ``todo``, each ``RunFile`` written here as its run
    finishes, with a progress bar over ``done + len(todo)`` runs. The runs go in this process
    when ``jobs`` <= 1, else in ``jobs`` worker processes started fresh ("spawn": no state or
    threads inherited); with ``ray``, as Ray tasks (``sapo_experiments.ray_runs``), and ``jobs`` is
    not used. ``compute``, the specs and the run files must pickle."""
    if done:
        logger.warning("reusing %d finished run(s) of %d made with these settings by this code "
                       "(their files in the output folder); --no-resume makes them again",
                       done, done + len(todo))
    bar = tqdm(total=done + len(todo), initial=done, desc="runs", unit="run",
               disable=not progress)
    try:
        for run in _computed(compute, todo, jobs, ray):
            run.save()
            bar.update()
    finally:
        bar.close()


def _computed(compute: Callable[[Any], RunFile], todo: Sequence[Any], jobs: int,
              ray: RayOptions | None) -> Iterator[RunFile]:
    """The runs of ``todo`` as they finish (see ``run_all``)."""
    if ray is not None:
        yield from ray_runs(compute, todo, ray)
    elif jobs <= 1:
        yield from map(compute, todo)
    else:
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
            for future in as_completed([pool.submit(compute, spec) for spec in todo]):
                yield future.result()


def machine_description() -> str:
    return (f"{platform.node() or 'unknown host'}: {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def write_summary(path: Path, seconds: float, jobs: int | None, settings: Mapping[str, Any],
                  **results: Any) -> Path:
    """A sweep's ``summary.json``: when and where it ran, its wall time (this call's, not the
    resumed runs'), its worker processes (None: Ray tasks, the settings say where) and
    settings, then ``results`` (its table rows, run times)."""
    path.write_text(json.dumps({
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_description(), "wall_seconds": round(seconds, 1), "jobs": jobs,
        "settings": dict(settings), **results}, indent=2, default=str) + "\n")
    return path
