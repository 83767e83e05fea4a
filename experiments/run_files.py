"""One run's arrays on disk, shared by the harnesses (reproduce, bench-ratio, attack,
format-propagation): written atomically, read back, recognised when resuming; running the runs
(``run_all``); and the sweep's ``summary.json`` (``write_summary``).

A run file is a compressed ``.npz`` holding the run's arrays and ``meta``, a JSON object whose
``key`` digests every setting that determines the run's outcome: a file whose key matches the
run asked for is that run, finished.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm


def save_run(path: Path, meta: Mapping[str, Any], **arrays: Any) -> Path:
    """Write ``meta`` (JSON-serialisable, with its ``key``) and ``arrays`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, meta=np.asarray(json.dumps(dict(meta))), **arrays)
    os.replace(tmp, path)  # atomic: an interrupted sweep never leaves half a run behind
    return path


def load_run(path: Path) -> dict[str, Any]:
    """A saved run's arrays, with ``meta`` decoded."""
    with np.load(path, allow_pickle=False) as data:
        run = {k: data[k] for k in data.files}
    run["meta"] = json.loads(str(run["meta"]))
    return run


def is_finished(path: Path, key: str) -> bool:
    """Whether ``path`` holds a run made with the settings that ``key`` digests."""
    if not path.exists():
        return False
    try:
        with np.load(path, allow_pickle=False) as data:  # the metadata only
            return json.loads(str(data["meta"]))["key"] == key
    except (OSError, ValueError, KeyError):
        return False


def run_all(run_one: Callable[[Any], Any], todo: Sequence[Any], done: int, jobs: int,
            progress: bool) -> None:
    """``run_one(spec)`` for every spec of ``todo``, in this process when ``jobs`` <= 1, else in
    ``jobs`` worker processes started fresh ("spawn": no state or threads inherited), with a
    progress bar over ``done + len(todo)`` runs. ``run_one`` and the specs must pickle."""
    bar = tqdm(total=done + len(todo), initial=done, desc="runs", unit="run",
               disable=not progress)
    try:
        if jobs <= 1:
            for spec in todo:
                run_one(spec)
                bar.update()
        else:
            with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
                for future in as_completed([pool.submit(run_one, spec) for spec in todo]):
                    future.result()
                    bar.update()
    finally:
        bar.close()


def machine_description() -> str:
    return (f"{platform.node() or 'unknown host'}: {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def write_summary(path: Path, seconds: float, jobs: int, settings: Mapping[str, Any],
                  **results: Any) -> Path:
    """A sweep's ``summary.json``: when and where it ran, its wall time (this call's, not the
    resumed runs'), its workers and settings, then ``results`` (its table rows, run times)."""
    path.write_text(json.dumps({
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_description(), "wall_seconds": round(seconds, 1), "jobs": jobs,
        "settings": dict(settings), **results}, indent=2, default=str) + "\n")
    return path
