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

A file in the output folder is untrusted: a crash, a full disk or anyone who can write there may
have left it. Reading one checks it before anything is built: a zip of at most
``MAX_FILE_BYTES`` whose entries are ``.npy`` arrays, each array's header (never an object
array; nothing is unpickled) and its size, shape times item size, equal to what its entry holds
and within ``MAX_ARRAY_BYTES`` (``meta`` within ``MAX_META_BYTES``), all of them together
within ``MAX_FILE_BYTES``. Any failure while probing whether a run is finished (a truncated or
planted file, whatever it makes the zip or numpy readers raise) means "not finished": the file
is named in a warning and the run is made again.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import logging
import math
import os
import platform
import sys
import zipfile
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


MAX_FILE_BYTES = 2**28
"""The largest run file read, on disk and its arrays together (far above what a run writes)."""
MAX_ARRAY_BYTES = MAX_FILE_BYTES
"""The largest array of a run file read."""
MAX_META_BYTES = 2**20
"""The largest ``meta`` entry read (a short JSON text)."""


def load_run(path: Path) -> dict[str, Any]:
    """A saved run's arrays, with ``meta`` decoded; ``ValueError`` for a file that is not a
    run file within the bounds (see the module docstring)."""
    with zipfile.ZipFile(_checked_size(path)) as archive:
        names = _entries(archive)
        run = {name: _array(archive, name) for name in names}
    run["meta"] = _decoded(run["meta"])
    return run


def _meta(path: Path, log: bool) -> dict[str, Any] | None:
    """A run file's metadata alone (every entry's header checked), or None where there is no
    run file to reuse; ``log``: name a file that is there but unreadable in a warning."""
    if not path.exists():
        return None
    try:
        with zipfile.ZipFile(_checked_size(path)) as archive:
            _entries(archive)
            meta = _decoded(_array(archive, "meta"))
    except Exception as error:  # noqa: BLE001 (whatever a damaged or planted file raises)
        if log:
            logger.warning("%s is not a finished run file (%s: %s): its run is made again",
                           path, type(error).__name__, str(error)[:200])
        return None
    return meta


def _decoded(meta: np.ndarray) -> dict[str, Any]:
    """A run file's ``meta`` entry as the JSON object it holds, with its ``key``."""
    decoded = json.loads(str(meta)) if meta.dtype.kind == "U" and meta.ndim == 0 else None
    if not isinstance(decoded, dict) or not isinstance(decoded.get("key"), str):
        raise ValueError("its meta is not a JSON object with a key")
    return decoded


def _checked_size(path: Path) -> Path:
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{size} bytes, more than a run file may be ({MAX_FILE_BYTES})")
    return path


def _entries(archive: zipfile.ZipFile) -> list[str]:
    """The names of a run file's arrays, each header checked (:func:`_header`), ``meta`` among
    them; ``ValueError`` for anything else."""
    infos = archive.infolist()
    names = [info.filename.removesuffix(".npy") for info in infos]
    if "meta" not in names or len(set(names)) != len(names) \
            or not all(info.filename.endswith(".npy") for info in infos):
        raise ValueError(f"its entries must be distinct .npy arrays, meta among them, got "
                         f"{[info.filename for info in infos][:10]}")
    if sum(info.file_size for info in infos) > MAX_FILE_BYTES:
        raise ValueError(f"its arrays add up to more than {MAX_FILE_BYTES} bytes")
    for info in infos:
        _header(archive, info)
    return names


def _header(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """``ValueError`` unless ``info``'s entry is an ``.npy`` array, not of objects, whose size
    (shape times item size) is what the entry holds and within its bound; reads the header
    alone."""
    bound = MAX_META_BYTES if info.filename == "meta.npy" else MAX_ARRAY_BYTES
    if info.file_size > bound:
        raise ValueError(f"{info.filename} holds {info.file_size} bytes, more than {bound}")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"{info.filename} is a .npy of version {version}, not 1.0 or 2.0")
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read(member)
        header = member.tell()
    if dtype.hasobject:
        raise ValueError(f"{info.filename} is an array of objects")
    size = math.prod(shape) * dtype.itemsize
    if header + size != info.file_size:
        raise ValueError(f"{info.filename}: a {dtype} array of shape {shape} is {size} bytes, "
                         f"the entry holds {info.file_size - header}")


def _array(archive: zipfile.ZipFile, name: str) -> np.ndarray:
    """The array ``name`` of a run file whose headers :func:`_entries` checked."""
    with archive.open(f"{name}.npy") as member:
        return np.lib.format.read_array(member, allow_pickle=False)


def is_finished(path: Path, key: str) -> bool:
    """Whether ``path`` holds a run made with the settings that ``key`` digests, by this code
    (a file that is there but unreadable is not, and a warning names it)."""
    meta = _meta(path, log=True)
    return meta is not None and meta["key"] == key and meta.get("code",
                                                                code_digest()) == code_digest()


def made_by_other_code(path: Path, key: str) -> bool:
    """Whether ``path`` holds a run of these settings (``key``) that other source of
    ``sapo_env`` and ``agents`` made: one a resumed sweep makes again."""
    meta = _meta(path, log=False)
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
    not used. ``compute``, the specs and the run files must pickle. Where stderr is not a
    terminal (a log file), a plain line per finished run replaces the bar."""
    if done:
        logger.warning("reusing %d finished run(s) of %d made with these settings by this code "
                       "(their files in the output folder); --no-resume makes them again",
                       done, done + len(todo))
    lines = progress and not sys.stderr.isatty()
    bar = tqdm(total=done + len(todo), initial=done, desc="runs", unit="run",
               disable=not progress or lines)
    try:
        for finished, run in enumerate(_computed(compute, todo, jobs, ray), done + 1):
            run.save()
            bar.update()
            if lines:
                print(f"runs: {finished}/{done + len(todo)} finished ({run.path.name})",
                      file=sys.stderr, flush=True)
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
