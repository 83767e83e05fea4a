"""The shared pool as a Hugging Face dataset: every packet a run shared, one row each.

``PoolDatasetCallback(path)`` records, every round, each packet the nodes sent to the pool and
what became of it (``SwarmEnv.last_packets``, :mod:`sapo_env.defenses.publication`), and
writes the rows as Parquet files ``path/rounds-<first>-<last>.parquet`` (one every
``flush_every`` rounds, whenever the rows waiting in memory pass ``flush_bytes``, and at a
checkpoint). ``load_pool_dataset(path)`` checks them (:mod:`sapo_env.runtime.pool_files`) and reads
them back as a ``datasets.Dataset`` to study, filter, or share (``dataset.push_to_hub(...)`` is
yours to call); ``agents.scripted.replay.PlaybackAgent`` publishes a recorded node's groups again in
a new run.

Columns (``features()``), one row per packet, in the order sent:

================  ==========================================================================
``round``         the round the packet was sent in
``sender``        the node the transport got it from (whatever ``source`` it claims)
``num_external``  the sender's J in force that round (None where unknown)
``status``        ``"accepted"`` or the reason it was refused (``"malformed"``, ``"rewards"``,
                  ``"not_dealt"``, ``"duplicate"``, ...: docs/hostile-nodes.md)
``accepted``      ``status == "accepted"``: the pool took it
``id``            the group's id, ``"{source}/r{round}/q{k}"``
``source``        the node that generated the completions (as claimed, for a refused packet)
``group_round``   the round its questions were dealt in (before ``round`` for a node that
                  answered late: ``sapo_env.churn``)
``task``, ``question``, ``system_prompt``, ``answer``
``ref``           ``{task, config, seed, index}``, the config as JSON text: enough to re-derive
                  the question with reasoning-gym (``sapo_env.tasks.redraw``)
``completions``   the L completions
``rewards``       their verifier scores (a refused packet's: what it claimed)
``advantages``    their group-relative advantages (idem)
``logprobs``      per completion, the sender's per-token log-probabilities, where it sent them
                  and the pool took the packet (a refused packet's are not kept)
``token_ids``     per completion, those tokens' ids (idem)
``raw``           only for a packet the schema could not read (every group column None): at
                  most 200 characters of its ``repr``, never the object sent
================  ==========================================================================

It needs the ``datasets`` package (``pip install 'sapo-env[data]'``); the env never imports it.

Example::

    import sapo_env.runtime
    from agents import DemonstratorAgent
    from sapo_env.runtime.pool_dataset import PoolDatasetCallback, load_pool_dataset

    env = sapo_env.parallel_env(n=4, max_rounds=20)
    nodes = [DemonstratorAgent(accuracy=0.5, seed=i) for i in range(4)]
    sapo_env.runtime.run(env, nodes, seed=0, callbacks=[PoolDatasetCallback("pool")])
    pool = load_pool_dataset("pool")               # a datasets.Dataset, one row per packet
    informative = pool.filter(lambda row: row["accepted"] and len(set(row["rewards"])) > 1)

In a loop of your own, call ``recorder.add(env.round - 1, env.last_packets)`` after each
``env.step`` and ``recorder.close()`` at the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sapo_env.defenses.publication import PacketFate
from sapo_env.extras import require
from sapo_env.runtime.pool_files import PoolLimits, check_files
from sapo_env.runtime.records import Callback, History, RoundRecord
from sapo_env.validation import check_int

SHARD_GLOB = "rounds-*.parquet"
"""The files a pool dataset folder holds (``load_pool_dataset`` reads them all)."""
_SHARD = re.compile(r"rounds-(\d+)-(\d+)\.parquet")
_GROUP_TEXT = ("id", "source", "task", "question", "system_prompt", "answer")
FLUSH_BYTES = 256 * 2**20
"""``PoolDatasetCallback``'s default ``flush_bytes``: the rows waiting in memory are written
once they hold this many bytes (as Arrow buffers)."""


def require_datasets() -> Any:
    """The ``datasets`` module, or the ``ModuleNotFoundError`` of ``sapo_env.extras`` that
    names the extra to install."""
    return require("datasets", "the pool dataset")


def features() -> Any:
    """The dataset's ``datasets.Features`` (the columns of the module docstring)."""
    d = require_datasets()
    text, floats = d.Value("string"), d.List(d.Value("float32"))
    return d.Features({
        "round": d.Value("int32"), "sender": text, "num_external": d.Value("int32"),
        "status": text, "accepted": d.Value("bool"),
        **dict.fromkeys(_GROUP_TEXT, text), "group_round": d.Value("int32"),
        "ref": {"task": text, "config": text, "seed": d.Value("int64"),
                "index": d.Value("int64")},
        "completions": d.List(text), "rewards": floats, "advantages": floats,
        "logprobs": d.List(floats), "token_ids": d.List(d.List(d.Value("int32"))),
        "raw": text,
    })


def packet_row(round_: int, fate: PacketFate, num_external: int | None = None
               ) -> dict[str, Any]:
    """One packet as a row of the dataset: plain Python values, but ``logprobs`` and
    ``token_ids`` as the group's own per-completion arrays (a list of them, not copied), and
    None for a refused packet, whose per-token values are not kept."""
    g = fate.group
    row: dict[str, Any] = {"round": round_, "sender": fate.sender, "num_external": num_external,
                           "status": fate.status, "accepted": fate.accepted, "raw": fate.raw}
    if g is None:  # refused before the schema could read it: nothing of it is trusted
        return row | dict.fromkeys((*_GROUP_TEXT, "group_round", "ref", "completions",
                                    "rewards", "advantages", "logprobs", "token_ids"))
    ref = g["ref"]
    return row | {k: g[k] for k in _GROUP_TEXT} | {
        "group_round": g["round"],
        "ref": {"task": ref["task"], "config": json.dumps(ref["config"], sort_keys=True),
                "seed": ref["seed"], "index": ref["index"]},
        "completions": list(g["completions"]), "rewards": g["rewards"].tolist(),
        "advantages": g["advantages"].tolist(),
        "logprobs": _per_completion(g.get("logprobs"), fate.accepted),
        "token_ids": _per_completion(g.get("token_ids"), fate.accepted),
    }


def _per_completion(arrays: Sequence[Any] | None, kept: bool) -> list[Any] | None:
    return None if arrays is None or not kept else list(arrays)


def to_table(rows: Sequence[Mapping[str, Any]], schema: Any = None) -> Any:
    """Rows of :func:`packet_row` as a ``pyarrow.Table`` of the dataset's columns (``schema``:
    ``features().arrow_schema``, computed when not given), its ``datasets.Features`` in its
    metadata."""
    import pyarrow  # with datasets, always

    schema = features().arrow_schema if schema is None else schema
    return pyarrow.Table.from_pylist(list(rows), schema=schema)


def to_dataset(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Rows of :func:`packet_row` as an in-memory ``datasets.Dataset``."""
    return require_datasets().Dataset(to_table(rows))


def shard_paths(path: str | Path) -> list[Path]:
    """The Parquet files of a pool dataset folder (``rounds-<first>-<last>.parquet``), in
    round order."""
    return sorted(p for p in Path(path).glob(SHARD_GLOB) if _SHARD.fullmatch(p.name))


def load_pool_dataset(path: str | Path, limits: PoolLimits | None = None, **kwargs: Any
                      ) -> Any:
    """Every row a ``PoolDatasetCallback`` wrote to ``path``, as one ``datasets.Dataset``
    (``kwargs`` go to ``datasets.Dataset.from_parquet``, e.g. ``cache_dir``): what
    ``datasets.load_dataset("parquet", data_files=f"{path}/rounds-*.parquet", split="train")``
    reads, once every file has passed :func:`sapo_env.runtime.pool_files.check_files` under
    ``limits`` (``PoolLimits()`` when None). A file that does not (other columns or types,
    a value longer than a packet may carry, more bytes decoded than ``limits.max_expansion``
    times its size) raises ``ValueError`` naming the file and the field, before anything is
    cached."""
    files = shard_paths(path)
    if not files:
        raise FileNotFoundError(f"no {SHARD_GLOB} in {path}: is it a PoolDatasetCallback's "
                                "folder, and did its run end (or flush)?")
    columns = features()
    check_files(files, columns.arrow_schema, limits or PoolLimits())
    return require_datasets().Dataset.from_parquet([str(f) for f in files],
                                                   **{"features": columns, **kwargs})


class PoolDatasetCallback(Callback):
    """Record every packet of a run as a dataset under ``path`` (see the module docstring).

    Args:
        path: the folder of the Parquet files. A run that starts at round 0 replaces the files
            there; one resumed from a checkpoint at round r keeps those of rounds before r.
        flush_every: rounds between writes (the rows of at most that many rounds wait in
            memory; a checkpoint writes them too, so a resumed run loses none).
        flush_bytes: the rows waiting in memory are written as soon as they hold this many
            bytes (``bytes_held``), whatever ``flush_every`` says; so they hold at most
            ``flush_bytes`` plus one round's packets.

    The rows wait in memory as Arrow tables (the per-token log-probabilities as float32, the
    ids as int32), one per round; a refused packet's row keeps no per-token values.
    """

    def __init__(self, path: str | Path = "pool", flush_every: int = 100,
                 flush_bytes: int = FLUSH_BYTES):
        require_datasets()  # fail here, not at the first write
        check_int("flush_every", flush_every, 1)
        check_int("flush_bytes", flush_bytes, 1)
        self.path = Path(path)
        self.flush_every = flush_every
        self.flush_bytes = flush_bytes
        self.bytes_held = 0
        """Bytes of the rows recorded since the last write (their Arrow buffers)."""
        self.files_written = 0
        """Parquet files this recorder has written."""
        self._schema = features().arrow_schema
        self._env: Any = None
        self._tables: list[Any] = []  # one pyarrow.Table per round since the last write
        self._rounds: list[int] = []  # rounds recorded since the last write
        self._written = False

    def on_run_start(self, env: Any, agents: Mapping[str, Any]) -> None:
        self._env = env.unwrapped  # PettingZoo's: the SwarmEnv under any wrapper
        if not hasattr(self._env, "last_packets"):
            raise TypeError(f"PoolDatasetCallback records a SwarmEnv (its last_packets); got "
                            f"{type(self._env).__name__}")
        start = self._env.round
        self.path.mkdir(parents=True, exist_ok=True)
        for shard in shard_paths(self.path):  # rounds this run plays (again)
            if int(_SHARD.fullmatch(shard.name)[1]) >= start:
                shard.unlink()
        self._written = start > 0 and bool(shard_paths(self.path))

    def on_round_end(self, record: RoundRecord) -> None:
        num_external = {a: info.get("num_external") for a, info in record.infos.items()}
        self.add(record.round, self._env.last_packets, num_external)

    def add(self, round_: int, packets: Iterable[PacketFate],
            num_external: Mapping[str, int | None] | None = None) -> None:
        """Record the packets of round ``round_`` (``num_external``: each sender's J in force,
        where known); every ``flush_every`` rounds, or once ``bytes_held`` reaches
        ``flush_bytes``, the rows recorded so far are written."""
        j = num_external or {}
        table = to_table([packet_row(round_, p, j.get(p.sender)) for p in packets],
                         self._schema)
        self._tables.append(table)
        self._rounds.append(round_)
        self.bytes_held += table.nbytes
        if (round_ + 1) % self.flush_every == 0 or self.bytes_held >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        """Write the rows recorded since the last write (if any) to one Parquet file."""
        if not self._rounds:
            return
        import pyarrow
        import pyarrow.parquet  # with datasets, always

        self.path.mkdir(parents=True, exist_ok=True)
        name = f"rounds-{min(self._rounds):06d}-{max(self._rounds):06d}.parquet"
        table = pyarrow.concat_tables(self._tables) if self._tables \
            else self._schema.empty_table()
        pyarrow.parquet.write_table(table, self.path / name)
        self._tables, self._rounds, self._written, self.bytes_held = [], [], True, 0
        self.files_written += 1

    def close(self) -> None:
        """Write what is left; a run that recorded no round still leaves an empty file, so the
        folder always loads."""
        if not self._rounds and not self._written:
            self._rounds = [0]
        self.flush()

    def state_dict(self) -> dict[str, Any]:
        """Nothing to save, but a checkpoint taking it writes the rows so far, so a run resumed
        from it finds every round before it recorded."""
        self.flush()
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to load: ``on_run_start`` drops the files of rounds the run plays again."""

    def on_run_end(self, history: History) -> None:
        self.close()


__all__ = ["FLUSH_BYTES", "PoolDatasetCallback", "PoolLimits", "features", "load_pool_dataset",
           "packet_row", "require_datasets", "to_dataset", "to_table"]
