"""A pool dataset's files as untrusted input: ``load_pool_dataset`` refuses a file with other
columns, a value longer than a packet may carry or more bytes than its size can honestly
decode to, naming the file and the field, before ``datasets`` builds a cache; ``PlaybackAgent``
refuses a row a packet could not carry when it is built, not at an ``act``."""

from __future__ import annotations

import json

import pytest
from test_pool_dataset import NEEDS_DATASETS, demonstrators, record

from agents.scripted.replay import PlaybackAgent

pytest.importorskip("datasets", reason=NEEDS_DATASETS)
import pyarrow as pa  # noqa: E402 (with datasets, always)
import pyarrow.parquet as pq  # noqa: E402

from sapo_env.defenses.packet_schema import MAX_FIELD_CHARS  # noqa: E402
from sapo_env.runtime.pool_dataset import features, load_pool_dataset  # noqa: E402
from sapo_env.runtime.pool_files import PoolLimits  # noqa: E402


def row(**fields):
    """A well-formed row of node_0's, with ``fields`` in place."""
    return {**dict.fromkeys(features()), "round": 0, "sender": "node_0", "num_external": 2,
            "status": "accepted", "accepted": True, "id": "node_0/r0/q0", "source": "node_0",
            "task": "t", "question": "1 + 1 =", "system_prompt": "s", "answer": "2",
            "group_round": 0, "ref": {"task": "t", "config": "{}", "seed": 1, "index": 0},
            "completions": ["2"] * 4, "rewards": [1.0] * 4, "advantages": [0.0] * 4, **fields}


def plant(tmp_path, table):
    """``table`` as the one file of a pool dataset folder, compressed as hard as zstd can."""
    folder = tmp_path / "pool"
    folder.mkdir()
    pq.write_table(table, folder / "rounds-000000-000000.parquet", compression="zstd",
                   compression_level=22)
    return folder


def rows(*planted):
    return pa.Table.from_pylist(list(planted), schema=features().arrow_schema)


def refused(tmp_path, folder, field, match, limits=None):
    """Loading ``folder`` raises a ValueError naming its file and ``field``; no cache made."""
    with pytest.raises(ValueError, match=match) as error:
        load_pool_dataset(folder, limits, cache_dir=str(tmp_path / "cache"))
    assert "rounds-000000-000000.parquet" in str(error.value)
    assert f"field {field!r}" in str(error.value)
    assert not (tmp_path / "cache").exists()


@pytest.fixture
def no_rows_decoded(monkeypatch):
    """Fails a test that decodes any row of a Parquet file (only footers may be read)."""
    def decode(*args, **kwargs):
        raise AssertionError("a row was decoded")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", decode)
    monkeypatch.setattr(pq.ParquetFile, "read", decode)


def test_a_file_with_other_columns_is_refused_from_its_footer(tmp_path, no_rows_decoded):
    table = pa.table({"round": pa.array([0], pa.int32()), "question": [123]})
    refused(tmp_path, plant(tmp_path, table), "sender", "is missing")


def test_a_column_of_another_type_is_refused_from_its_footer(tmp_path, no_rows_decoded):
    schema = features().arrow_schema
    logprobs = schema.get_field_index("logprobs")
    schema = schema.set(logprobs, pa.field("logprobs", pa.list_(pa.list_(pa.string()))))
    table = pa.Table.from_pylist([row()], schema=schema)
    refused(tmp_path, plant(tmp_path, table), "logprobs", "expected list")


def test_a_row_with_more_log_probs_than_a_packet_can_carry_is_refused_from_its_footer(
        tmp_path, no_rows_decoded):
    flood = [[0.0] * 300_000] + [[]] * 3  # one completion, run-length encoded: a few bytes
    folder = plant(tmp_path, rows(row(logprobs=flood)))
    assert (folder / "rounds-000000-000000.parquet").stat().st_size < 20_000
    limits = PoolLimits(max_completion_chars=100)  # at most 64 * 100 per-token values a row
    refused(tmp_path, folder, "logprobs", "holds 300003 values in 1 rows .* more than 6400",
            limits)


def test_a_long_string_compressed_to_nothing_is_refused_from_its_footer(
        tmp_path, no_rows_decoded):
    folder = plant(tmp_path, rows(row(question="a" * 20_000_000)))
    size = (folder / "rounds-000000-000000.parquet").stat().st_size
    assert size < 20_000  # zstd: 20 MB in a few kB
    refused(tmp_path, folder, "question", f"declare more than {1000 * size} bytes")


def test_a_value_longer_than_a_packet_may_carry_is_refused(tmp_path):
    folder = plant(tmp_path, rows(row(), row(answer="9" * (MAX_FIELD_CHARS + 1))))
    refused(tmp_path, folder, "answer", f"{MAX_FIELD_CHARS + 1} characters, more than")
    other = tmp_path / "completion"
    other.mkdir()
    long = plant(other, rows(row(completions=["x" * 101] * 4)))
    refused(other, long, "completions", "101 characters, more than 100",
            PoolLimits(max_completion_chars=100))


def test_a_string_repeated_in_many_rows_is_counted_once_per_row(tmp_path):
    """A dictionary entry repeated row after row: the footer cannot tell, the decoding counts
    it (as the file's dictionary, never expanded) and stops past max_expansion."""
    question = "q" * 30_000
    folder = plant(tmp_path, rows(*(row(question=question, id=f"node_0/r{k}/q0")
                                    for k in range(400))))
    size = (folder / "rounds-000000-000000.parquet").stat().st_size
    assert 400 * 30_000 > 1000 * size  # 12 MB from a few kB
    refused(tmp_path, folder, "question", "decode more than")
    load_pool_dataset(folder, PoolLimits(max_expansion=10_000),
                      cache_dir=str(tmp_path / "cache"))  # a looser limit takes it


def test_a_file_arrow_cannot_read_is_a_value_error_naming_it(tmp_path):
    folder = tmp_path / "pool"
    folder.mkdir()
    (folder / "rounds-000000-000000.parquet").write_bytes(b"PAR1" + b"\0" * 100)
    with pytest.raises(ValueError, match="rounds-000000-000000.parquet: not a readable"):
        load_pool_dataset(folder, cache_dir=str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()


def test_a_recorded_pool_passes_the_checks_as_it_was(tmp_path):
    _, path = record(tmp_path, demonstrators)
    pool = load_pool_dataset(path, PoolLimits(max_completions=4, max_completion_chars=100))
    assert pool.num_rows == 24 and pool.features == features()


@pytest.mark.parametrize("field,value,match", [
    ("completions", ["2"] * 3, "field 'rewards' is malformed .* L=3"),  # 3 completions
    ("completions", ["2", "2", "2", 2], "field 'completions' is malformed"),
    ("rewards", [float("nan")] * 4, "field 'rewards' is malformed"),
    ("question", "q" * (MAX_FIELD_CHARS + 1), "field 'question' is oversized"),
    ("logprobs", [[0.5]] * 4, r"'logprobs'/'token_ids': logprobs\[0\] must be finite"),
    ("ref", {"task": "t", "config": "{", "seed": 1, "index": 0}, "field 'ref'"),
    ("num_external", -1, "field 'num_external' must be an int >= 0"),
])
def test_a_playback_refuses_a_row_a_packet_could_not_carry_when_it_is_built(field, value, match):
    good = [row(), row(id="node_0/r0/q1", ref={"task": "t", "config": "{}", "seed": 1,
                                               "index": 1})]
    PlaybackAgent(good, "node_0")  # the rows as they were
    with pytest.raises(ValueError, match=match) as error:
        PlaybackAgent([good[1], row(**{field: value})], "node_0")
    assert "node_0: row 1" in str(error.value)
    PlaybackAgent([good[1], row(sender="node_1", source="node_1", **{field: value})],
                "node_0")  # another node's rows are not its to play back


def test_a_playback_refuses_rows_of_several_group_sizes_when_it_is_built():
    three = {"completions": ["2"] * 3, "rewards": [1.0] * 3, "advantages": [0.0] * 3}
    PlaybackAgent([row(**three)], "node_0")  # alone, 3 is its L
    with pytest.raises(ValueError, match="node_0: row 1: 3 completions, where row 0 has 4"):
        PlaybackAgent([row(), row(id="node_0/r0/q1", **three)], "node_0")


def test_a_playback_whose_recorded_j_is_beyond_the_train_budget_says_so():
    playback = PlaybackAgent([row(), row(round=1, num_external=9, id="node_0/r1/q0")], "node_0")
    question = {"id": "node_0/r0/q0", "ref": {"task": "t", "config": {}, "seed": 1, "index": 0}}
    observation = {"round": 0, "completions_per_question": 4, "num_external": 2,
                   "train_budget": 4, "questions": (question,)}
    with pytest.raises(ValueError, match="J recorded for round 1, 9, is beyond the env's "
                                         "train_budget 4"):
        playback.act(observation)
    assert playback.act({**observation, "train_budget": 9})["num_external"] == 9


def test_a_playback_sends_its_per_token_values_as_float32_and_int32_arrays():
    ref = {"task": "t", "config": json.dumps({"a": 1}), "seed": 1, "index": 0}
    playback = PlaybackAgent(
        [row(ref=ref, logprobs=[[-0.5, -1.0]] * 4, token_ids=[[7, 8]] * 4)], "node_0")
    observation = {"round": 0, "completions_per_question": 4, "num_external": 2,
                   "train_budget": 4,
                   "questions": ({"id": "node_0/r0/q0", "ref": {**ref, "config": {"a": 1}}},)}
    action = playback.act(observation)
    assert [a.dtype.name for a in action["logprobs"][0]] == ["float32"] * 4
    assert [a.tolist() for a in action["token_ids"][0]] == [[7, 8]] * 4
