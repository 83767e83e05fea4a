"""A pool dataset's Parquet files, checked before ``datasets`` reads them.

A pool dataset may come from elsewhere (a shared folder, the Hub), so its files are untrusted
input, and Parquet compresses: a few kB can decode to hundreds of MB (a long string compressed
by zstd, one dictionary entry repeated row after row, a run-length-encoded list). So
``load_pool_dataset`` passes every file through :func:`check_files` before ``datasets`` builds its
cache, and the first file that fails is refused with a ``ValueError`` naming the file and the
field:

1. **its columns**, from the footer: exactly the dataset's (``pool_dataset.features()``), each of
   its Arrow type;
2. **its footer's counts**: in each row group, each column holds at most as many values as its
   rows may carry (a group's L completions at most ``PoolLimits.max_completions``, each
   completion's per-token values at most ``max_completion_tokens(max_completion_chars)``), and
   the bytes the footer declares (its pages uncompressed, its fixed-width values decoded) are at
   most ``PoolLimits.max_expansion`` times the file's size;
3. **its rows**, decoded ``BATCH_ROWS`` at a time, strings kept as the file's dictionaries (so a
   string repeated in many rows costs its bytes once): every text within a packet's bounds
   (``MAX_FIELD_CHARS``, a completion ``max_completion_chars``, ``raw`` ``RAW_CHARS``), every list
   within the counts above, and the bytes decoded so far (as ``datasets`` would hold them) at
   most ``max_expansion`` times the file's size.

Steps 1 and 2 read only the footer. Step 3 stops at the first batch that fails, so it holds one
batch; a footer that lies about its counts (Arrow's writer never does) is caught there, at the
cost of decoding that batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sapo_env.config import SwarmConfig
from sapo_env.defenses.packet_schema import MAX_FIELD_CHARS
from sapo_env.defenses.publication import RAW_CHARS
from sapo_env.sender_logprobs import max_completion_tokens
from sapo_env.validation import check_int

BATCH_ROWS = 1024
"""Rows decoded at a time by step 3."""
_TEXT = ("sender", "status", "id", "source", "task", "question", "system_prompt", "answer")
_PER_COMPLETION = ("completions", "rewards", "advantages")
_PER_TOKEN = ("logprobs", "token_ids")
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8}


@dataclass(frozen=True)
class PoolLimits:
    """What a pool dataset file may hold (see the module docstring)."""

    max_completion_chars: int = SwarmConfig.max_completion_chars
    """Longest completion, in characters: the recorded swarm's ``max_completion_chars``; a
    completion's ``logprobs`` and ``token_ids`` may hold ``max_completion_tokens`` of it."""
    max_completions: int = 64
    """Most completions of one group (the recorded swarm's ``completions_per_question``)."""
    max_expansion: int = 1000
    """Most bytes a file may decode to, as a multiple of its size on disk (the recorder's files
    decode to about 10 to 20 times their size)."""

    def __post_init__(self) -> None:
        for name in ("max_completion_chars", "max_completions", "max_expansion"):
            check_int(name, getattr(self, name), 1)

    def per_row(self, column: str) -> int:
        """Most values a row may hold in ``column``'s leaf (1 for a column of scalars)."""
        if column in _PER_COMPLETION:
            return self.max_completions
        if column in _PER_TOKEN:
            return self.max_completions * max_completion_tokens(self.max_completion_chars)
        return 1


def check_files(files: Sequence[Path], schema: Any, limits: PoolLimits) -> None:
    """Check each of ``files`` against ``schema`` (the dataset's ``pyarrow.Schema``) and
    ``limits``; ``ValueError`` naming the file and the field at the first that fails."""
    import pyarrow  # with datasets, always

    for path in files:
        try:
            _check_file(Path(path), schema, limits)
        except (pyarrow.ArrowException, OSError) as error:  # a file Arrow cannot read
            raise ValueError(f"pool dataset file {path}: not a readable Parquet file "
                             f"({type(error).__name__}: {error})") from None


def _check_file(path: Path, schema: Any, limits: PoolLimits) -> None:
    import pyarrow.parquet as pq

    where = f"pool dataset file {path}"
    allowed = limits.max_expansion * path.stat().st_size
    with pq.ParquetFile(path) as footer:
        _check_columns(where, footer.schema_arrow, schema)
        _check_counts(where, footer.metadata, limits, allowed)
        strings = [footer.schema.column(i).path for i in range(len(footer.schema))
                   if footer.schema.column(i).physical_type == "BYTE_ARRAY"]
    with pq.ParquetFile(path, read_dictionary=strings) as rows:
        decoded: Counter = Counter()
        for batch in rows.iter_batches(batch_size=BATCH_ROWS):
            for name in batch.schema.names:
                decoded[name] += _decoded_bytes(batch.column(name))
            _check_total(where, decoded, allowed, "decode")
            _check_values(where, batch, limits)


def _check_columns(where: str, got: Any, expected: Any) -> None:
    if len(set(got.names)) != len(got.names):
        twice = next(name for name in got.names if got.names.count(name) > 1)
        raise ValueError(f"{where}: field {twice!r} appears more than once")
    for name in dict.fromkeys([*expected.names, *got.names]):
        if name not in got.names:
            raise ValueError(f"{where}: field {name!r} is missing")
        if name not in expected.names:
            raise ValueError(f"{where}: field {name!r} is not a column of a pool dataset")
        if got.field(name).type != expected.field(name).type:
            raise ValueError(f"{where}: field {name!r} is {got.field(name).type}, expected "
                             f"{expected.field(name).type}")


def _check_counts(where: str, metadata: Any, limits: PoolLimits, allowed: int) -> None:
    declared: Counter = Counter()
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            field = chunk.path_in_schema.split(".")[0]
            most = group.num_rows * limits.per_row(field)
            if chunk.num_values > most:
                raise ValueError(f"{where}: field {field!r} holds {chunk.num_values} values in "
                                 f"{group.num_rows} rows (row group {g}), more than {most}")
            declared[field] += max(chunk.total_uncompressed_size,
                                   chunk.num_values * _WIDTH.get(chunk.physical_type, 4))
    _check_total(where, declared, allowed, "declare")


def _check_total(where: str, size: Counter, allowed: int, verb: str) -> None:
    if sum(size.values()) > allowed:
        field, most = size.most_common(1)[0]
        raise ValueError(f"{where}: its columns {verb} more than {allowed} bytes (max_expansion "
                         f"times its size), field {field!r} {most} of them")


def _decoded_bytes(array: Any) -> int:
    """Bytes ``array`` takes once its dictionaries are expanded, as ``datasets`` holds it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(array.type):
        lengths = pc.take(pc.binary_length(array.dictionary), array.indices)
        return (pc.sum(lengths).as_py() or 0) + 4 * (len(array) + 1)
    if pa.types.is_list(array.type):
        return 4 * (len(array) + 1) + _decoded_bytes(pc.list_flatten(array))
    if pa.types.is_struct(array.type):
        return sum(_decoded_bytes(array.field(k)) for k in range(array.type.num_fields))
    return array.nbytes


def _check_values(where: str, batch: Any, limits: PoolLimits) -> None:
    import pyarrow.compute as pc

    ref = batch.column("ref")
    texts = [*((name, batch.column(name), MAX_FIELD_CHARS) for name in _TEXT),
             ("ref.task", ref.field("task"), MAX_FIELD_CHARS),
             ("ref.config", ref.field("config"), MAX_FIELD_CHARS),
             ("raw", batch.column("raw"), RAW_CHARS),
             ("completions", pc.list_flatten(batch.column("completions")),
              limits.max_completion_chars)]
    for name, strings, most in texts:  # read as dictionaries: each value once
        values = strings.dictionary if hasattr(strings, "dictionary") else strings
        _at_most(where, name, "characters", pc.utf8_length(values), most)
    for name in (*_PER_COMPLETION, *_PER_TOKEN):
        _at_most(where, name, "completions", pc.list_value_length(batch.column(name)),
                 limits.max_completions)
    tokens = max_completion_tokens(limits.max_completion_chars)
    for name in _PER_TOKEN:
        per_completion = pc.list_flatten(batch.column(name))
        _at_most(where, name, "tokens in a completion", pc.list_value_length(per_completion),
                 tokens)


def _at_most(where: str, field: str, what: str, sizes: Any, most: int) -> None:
    import pyarrow.compute as pc

    largest = pc.max(sizes).as_py()
    if largest is not None and largest > most:
        raise ValueError(f"{where}: field {field!r} has a value of {largest} {what}, more than "
                         f"{most}")


__all__ = ["BATCH_ROWS", "PoolLimits", "check_files"]
