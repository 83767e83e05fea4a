"""Periodic checkpoints of a run, and resuming from one.

``sapo_env.runtime.run(env, agents, seed=0, checkpoint=Checkpoint("run.ckpt", every=50))`` writes a
checkpoint every 50 rounds; run the same call again after an interruption and it resumes from
the last one (``resume=True``, the default; a run with no checkpoint file starts afresh). A
checkpoint holds everything a run needs to go on as if never stopped:

- the env's state (``env.state_dict()``, :mod:`sapo_env.env_state`),
- every agent's and every ratio policy's ``state_dict()``: a run with a checkpoint needs them
  all to have ``state_dict`` and ``load_state_dict`` and says which node's do not when it
  starts (the simulated learner, the scripted agents and the ratio policies have them; a
  ``GRPOAgent`` has ``save``/``load`` to a folder instead),
- the ``state_dict()`` of every callback that has one (``HeldOutEvaluator``'s scores so far;
  ``TensorBoardCallback`` flushes its events),
- the ``History`` so far.

An interrupted run resumed this way gives the same ``History`` as an uninterrupted one, bit for
bit when its agents resume exactly (all of the above do), but for its CPU seconds
(``act_cpu_seconds``, ``learn_cpu_seconds``), which are timings: the resumed run keeps the saved
rounds' and measures its own. A checkpoint written before they were recorded resumes with NaN
for its rounds. A resumed run checks that it is the same run: the same env config, ``seed``, and
agent and policy classes. Callbacks only watch a run, so they may change: each gets the saved
state of a callback of its class, if there is one (a warning names those that start afresh).

Format (``CHECKPOINT_FORMAT`` 2): plain data (:mod:`sapo_env.runtime.plain_data`), a zip of
the state as JSON and its arrays as ``.npy`` files without pickles. Reading it rebuilds nothing
but containers, scalars and numeric numpy arrays, each checked before it is built, so a
checkpoint file is untrusted data: reading a damaged or planted one raises ``ValueError`` and
can neither run code nor corrupt memory, and its memory is bounded by a multiple of its JSON's
bytes (``Checkpoint.max_state_bytes``, checked before parsing) plus its arrays' bytes. The
env's part is then checked field by field (the pool's groups by the packet schema's checks,
:func:`sapo_env.pool.restore_group`), with a ``ValueError`` naming the field. Every state this
library's agents, policies, callbacks and env save is such data (tested). Checkpoints of
format 1 (sapo-env <= 0.6) were pickles, which cannot be read safely: :func:`read` refuses them
with a ``ValueError`` (rerun, or convert one you wrote yourself in a trusted process as
docs/checkpoints.md shows).

Writing is atomic: the checkpoint goes to a temporary file in the same folder, is flushed to
disk (fsync), then replaces the previous one (``os.replace``); a crash while writing leaves the
previous checkpoint whole, and the temporary file a killed write left behind is removed by the
next write.
"""

from __future__ import annotations

import glob
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sapo_env.runtime import plain_data
from sapo_env.runtime.agent_calls import Stateful
from sapo_env.validation import check_int

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 2
"""2: plain data (``sapo_env.runtime.plain_data``); 1 (sapo-env <= 0.6): a pickle."""
_PICKLE = b"\x80"  # how a pickle of protocol 2 or later starts, as format 1's did


@dataclass(frozen=True)
class Checkpoint:
    """Where and how often ``sapo_env.runtime.run`` saves a run, and whether it resumes from
    the file."""

    path: str | Path
    """The checkpoint file (its folder is created when needed)."""
    every: int = 50
    """Rounds between checkpoints (a checkpoint is written after every ``every``-th round)."""
    resume: bool = True
    """Start from the file at ``path`` when it exists (False: start afresh and overwrite it)."""
    run_id: str | None = None
    """A token the file must hold to be resumed from (None: any checkpoint of the same run
    settings). It tells a run's own checkpoint from another run's of the same settings left at
    the path by mistake (``sapo-env reproduce`` keeps a random one in a file beside it); it is
    no defence against a file planted on purpose, whose author can read the token or plant
    both (such a file is refused only if it fails :func:`read`'s and :func:`check`'s checks)."""
    max_state_bytes: int = plain_data.MAX_JSON_BYTES
    """The largest ``state.json`` (the checkpoint's JSON) resumed from, which bounds what
    parsing it costs in memory (a multiple of it: docs/checkpoints.md, "What reading costs").
    A larger checkpoint is refused, with its size, before it is parsed."""

    def __post_init__(self) -> None:
        check_int("every", self.every, 1)
        check_int("max_state_bytes", self.max_state_bytes, 1)
        if not isinstance(self.resume, bool):
            raise ValueError(f"resume must be a bool, got {self.resume!r}")
        if self.run_id is not None and not isinstance(self.run_id, str):
            raise ValueError(f"run_id must be None or a str, got {self.run_id!r}")
        object.__setattr__(self, "path", Path(self.path))


def run_identity(seed: Any, agents: Mapping[str, Any], policies: Mapping[str, Any],
                 run_id: str | None = None) -> dict[str, Any]:
    """What must match for a checkpoint to belong to a run (the env config is checked by the
    env itself)."""
    identity = {"seed": seed, "agents": _classes(agents), "ratio_policies": _classes(policies)}
    return identity if run_id is None else {**identity, "run_id": run_id}


def require_state_dicts(agents: Mapping[str, Any], policies: Mapping[str, Any]) -> None:
    """``TypeError`` naming the nodes whose agent or ratio policy cannot be checkpointed."""
    for kind, objects in (("agents", agents), ("ratio policies", policies)):
        missing = [f"{a} ({type(o).__name__})" for a, o in objects.items() if not _has_state(o)]
        if missing:
            raise TypeError(f"checkpointing a run needs state_dict() and load_state_dict() on "
                            f"every agent and ratio policy; the {kind} of {', '.join(missing)} "
                            "have none (a GRPOAgent saves itself with save(path) instead)")


def capture(env: Any, agents: Mapping[str, Any], policies: Mapping[str, Any],
            callbacks: Sequence[Any], history: Mapping[str, Any],
            identity: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's content (all plain data, :mod:`sapo_env.runtime.plain_data`)."""
    return {
        "format": CHECKPOINT_FORMAT, "run": dict(identity), "env": env.state_dict(),
        "agents": {a: agent.state_dict() for a, agent in agents.items()},
        "ratio_policies": {a: p.state_dict() for a, p in policies.items()},
        "callbacks": [(_class(c), c.state_dict()) for c in callbacks if _has_state(c)],
        "history": dict(history),
    }


def check(saved: Any, path: Path, identity: Mapping[str, Any]) -> None:
    """``ValueError`` unless ``saved`` is a checkpoint of the run ``identity`` describes,
    holding what :func:`capture` puts in one."""
    if not isinstance(saved, dict) or saved.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a sapo-env checkpoint of format {CHECKPOINT_FORMAT}")
    _check_kinds(saved, _CONTENT, str(path))
    _check_kinds(saved["history"], _HISTORY, f"{path}: its history", _HISTORY_TIMINGS)
    for key, value in identity.items():
        if saved["run"].get(key) != value:
            raise ValueError(f"{path} was written by another run: its {key} is "
                             f"{saved['run'].get(key)!r}, this run's is {value!r}; delete it "
                             "or use Checkpoint(..., resume=False) to start afresh")
    for kind in ("agents", "ratio_policies"):
        if set(saved[kind]) != set(identity[kind]):
            raise ValueError(f"{path} holds {kind} states of {sorted(map(str, saved[kind]))}, "
                             f"the run's are {sorted(identity[kind])}")
    if saved["history"]["rounds"] < 0 or not all(
            type(c) is tuple and len(c) == 2 and type(c[0]) is str for c in saved["callbacks"]):
        raise ValueError(f"{path} holds a negative number of rounds or callbacks' states that "
                         "are not (class, state) pairs")
    rounds, env_round = saved["history"]["rounds"], saved["env"].get("round", None)
    if env_round is not None and env_round != rounds:
        raise ValueError(f"{path}: its history holds {rounds} rounds, its env's state "
                         f"{env_round!r:.40}")


def restore(saved: Mapping[str, Any], agents: Mapping[str, Any], policies: Mapping[str, Any],
            callbacks: Sequence[Any]) -> None:
    """Load the agents', policies' and callbacks' states of a checked checkpoint (the env's is
    loaded by ``env.reset(options={"state": saved["env"]})``)."""
    for a, state in saved["agents"].items():
        agents[a].load_state_dict(state)
    for a, state in saved["ratio_policies"].items():
        policies[a].load_state_dict(state)
    states = list(saved["callbacks"])
    for callback in callbacks:
        if not _has_state(callback):
            continue
        mine = next((i for i, (kind, _) in enumerate(states) if kind == _class(callback)), None)
        if mine is None:
            logger.warning("the checkpoint holds no state of callback %s: it starts afresh",
                           _class(callback))
        else:
            callback.load_state_dict(states.pop(mine)[1])
    for kind, _ in states:
        logger.warning("the checkpoint's state of callback %s is not used: the run has none",
                       kind)


def write(path: Path, content: Mapping[str, Any]) -> None:
    """Write ``content`` to ``path`` as plain data, atomically (see the module docstring);
    ``TypeError`` naming a value that is not plain data, before anything is written."""
    data = plain_data.encode(content)
    path.parent.mkdir(parents=True, exist_ok=True)
    for orphan in path.parent.glob(f"{glob.escape(path.name)}.*.tmp"):  # a killed write's
        orphan.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)  # the rename itself survives a power cut


def read(path: Path, max_state_bytes: int = plain_data.MAX_JSON_BYTES) -> dict[str, Any]:
    """A checkpoint written by :func:`write`; ``ValueError`` for any other file (a pickle of
    format 1 included), which is never run or trusted (see the module docstring), and for one
    whose ``state.json`` is more than ``max_state_bytes``, before it is parsed."""
    size = path.stat().st_size
    if size > plain_data.MAX_BYTES:
        raise ValueError(f"{path} is {size} bytes, more than a checkpoint may be "
                         f"({plain_data.MAX_BYTES})")
    data = path.read_bytes()
    if data.startswith(_PICKLE):
        raise ValueError(f"{path} is a pickle checkpoint (format 1, from sapo-env <= 0.6), which "
                         "cannot be loaded safely: rerun, or convert a checkpoint you wrote "
                         "yourself in a trusted process (docs/checkpoints.md)")
    try:
        return plain_data.decode(data, max_json_bytes=max_state_bytes)
    except ValueError as error:
        raise ValueError(f"{path} is not a readable sapo-env checkpoint: {error}") from None


def is_pickle(path: Path) -> bool:
    """Whether ``path`` holds a pickle, as checkpoints of format 1 (sapo-env <= 0.6) were: a
    harness that can redo the run starts afresh rather than stop at :func:`read`'s error."""
    with open(path, "rb") as file:
        return file.read(len(_PICKLE)) == _PICKLE


_CONTENT = {"format": int, "run": dict, "env": dict, "agents": dict, "ratio_policies": dict,
            "callbacks": list, "history": dict}
_HISTORY = {"rounds": int, "rewards": np.ndarray, "num_external": np.ndarray,
            "generated": np.ndarray, "infos": list, "learn_metrics": list}
_HISTORY_TIMINGS = {"act_cpu_seconds": np.ndarray, "learn_cpu_seconds": np.ndarray}
"""History arrays a checkpoint written before they were recorded lacks (resumed as NaN)."""


def _check_kinds(content: dict[str, Any], kinds: Mapping[str, type], where: str,
                 optional: Mapping[str, type] | None = None) -> None:
    """``ValueError`` unless ``content`` holds the keys of ``kinds``, and of ``optional`` at
    most, each value of its type."""
    optional = optional or {}
    if not set(kinds) <= set(content) <= set(kinds) | set(optional):
        raise ValueError(f"{where} must hold {sorted(kinds)}"
                         + (f" (and may hold {sorted(optional)})" if optional else "")
                         + f", got {sorted(map(str, content))}")
    for key, kind in {**kinds, **optional}.items():
        if key in content and type(content[key]) is not kind:
            raise ValueError(f"{where}: {key} must be a {kind.__name__}, got a "
                             f"{type(content[key]).__name__}")


def _fsync_folder(folder: Path) -> None:
    if os.name != "posix":  # folders cannot be opened for fsync on Windows
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _has_state(obj: Any) -> bool:
    return isinstance(obj, Stateful)


def _class(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _classes(objects: Mapping[str, Any]) -> dict[str, str]:
    return {a: _class(o) for a, o in objects.items()}
