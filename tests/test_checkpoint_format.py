"""Checkpoints as plain data: ``sapo_env.runtime.plain_data`` gives back
every value it carries, type for type and bit for bit, and every state the library saves; a
planted, forged or damaged file (a pickle of format 1 included) raises ``ValueError`` and can
neither run code nor corrupt memory; docs/checkpoints.md's examples run."""

from __future__ import annotations

import ast
import io
import json
import math
import pickle
import re
import subprocess
import sys
import warnings
import zipfile
from collections import OrderedDict, namedtuple
from enum import IntEnum
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import sapo_env
import sapo_env.runtime
from agents import (
    AdversarialAgent,
    DemonstratorAgent,
    FixedRatio,
    LearningProgress,
    LinUCBRatio,
    RandomAgent,
    ScheduledRatio,
)
from agents.sim.simulated import simulated_swarm
from agents.wrappers.churning import ChurningAgent
from agents.wrappers.slow import SlowAgent
from sapo_env.runtime import Checkpoint, plain_data
from sapo_env.runtime import checkpoint as checkpoints

ROOT = Path(__file__).resolve().parents[1]


def same(a, b, where="value"):
    """Equal type for type, floats and arrays bit for bit (NaN too), dicts in order."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, (dict, OrderedDict)):
        assert len(a) == len(b), where
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            same(ka, kb, f"{where} key")
            same(va, vb, f"{where}[{ka!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, (set, frozenset)):
        assert a == b, where
        for x in a:
            same(x, next(y for y in b if y == x), f"{where} item")
    elif isinstance(a, np.ndarray):
        assert (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape, b.tobytes()), where
        if a.flags.f_contiguous and not a.flags.c_contiguous:
            assert b.flags.f_contiguous, f"{where}: memory order"
        assert b.flags.writeable, where
    elif isinstance(a, np.generic):
        assert a.tobytes() == b.tobytes(), f"{where}: {a!r} != {b!r}"
    elif isinstance(a, (float, complex)):
        assert np.array(a).tobytes() == np.array(b).tobytes() or (
            np.isnan(a) and np.isnan(b)), f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def round_trip(value):
    again = plain_data.decode(plain_data.encode(value))
    same(value, again)
    return again


# --- every type, and the library's states ----------------------------------------------------

NUMERIC = ["?", "i1", "i2", "<i4", ">i8", "u1", "<u2", ">u4", "u8", "<f2", "f4", ">f8",
           "longdouble", "<c8", ">c16"]
VALUES = [
    None, True, False, 0, -1, 2**53 - 1, 2**53, -2**53, 2**64 + 1, -(2**8000), 1.5, -0.0,
    math.nan, math.inf, -math.inf, 1e-310, complex(1, -2), complex(math.nan, math.inf),
    "", "text", "\ud800 lone surrogate", "$tuple", b"", b"\x00\xff", bytearray(b"ab"),
    [], (), (1,), (1, (2, [3, (4,)])), [[], {}], set(), {1, "a", (2, 3)}, frozenset({frozenset()}),
    {}, {"a": 1}, {"$tuple": [1]}, {"$": 0}, {1: "int key", (1, 2): "tuple key", None: 0,
                                              2.5: 1, frozenset({1}): 2, b"k": 3, False: 4},
    OrderedDict([(2, "b"), ("a", 1)]), OrderedDict(),
    [np.dtype(d).type(7) for d in NUMERIC], np.float64("nan"), np.bool_(True),
    *[np.arange(6).astype(d).reshape(2, 3) for d in NUMERIC],
    np.array(3.5), np.zeros((0, 4), ">f4"), np.arange(12.0).reshape(3, 4).T,
    np.arange(20)[::3], np.array([np.nan, -0.0, np.inf], np.float32),
    {"arrays": [np.ones(2), np.ones(2)], "same twice": (np.zeros(1),) * 2},
]


@pytest.mark.parametrize("value", VALUES, ids=[f"{type(v).__name__}{i}" for i, v in
                                              enumerate(VALUES)])
def test_every_type_comes_back_the_same(value):
    round_trip(value)


HASHABLE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    | st.binary(max_size=8),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=6)
DTYPES = (hnp.boolean_dtypes() | hnp.integer_dtypes(endianness="?")
          | hnp.unsigned_integer_dtypes(endianness="?") | hnp.floating_dtypes(endianness="?")
          | hnp.complex_number_dtypes(endianness="?"))
ARRAYS = hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | st.complex_numbers()
           | st.text() | st.binary(max_size=8) | ARRAYS | ARRAYS.map(lambda a: a[()])
           | st.binary(max_size=8).map(bytearray))
VALUE = st.recursive(
    SCALARS,
    lambda inner: (st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
                   | st.dictionaries(st.text(), inner, max_size=4)
                   | st.dictionaries(HASHABLE, inner, max_size=4) | st.sets(HASHABLE, max_size=4)
                   | st.dictionaries(HASHABLE, inner, max_size=3).map(lambda d: OrderedDict(d))),
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(VALUE)
def test_any_plain_value_comes_back_the_same(value):
    round_trip(value)


class _Tuple(namedtuple("_Tuple", "a")):
    pass


class _Level(IntEnum):
    LOW = 1


def _deep(levels):
    value = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("value, error, message", [
    ({"a": [1, object()]}, TypeError, r"value\['a'\]\[1\]: a builtins.object is not plain"),
    ({"a": np.array(["x"])}, TypeError, r"value\['a'\]: a numpy array of dtype <U1"),
    (np.array([1, None], dtype=object), TypeError, "dtype object"),
    (np.zeros(2, dtype=[("a", "f8")]), TypeError, "dtype"),
    (np.array(["2020-01-01"], dtype="M8[D]"), TypeError, "dtype datetime64"),
    (np.str_("x"), TypeError, "numpy scalar of dtype <U1"),
    (np.ma.masked_array([1.0]), TypeError, "MaskedArray is not plain"),
    (_Tuple(1), TypeError, "_Tuple is not plain"),
    (_Level.LOW, TypeError, "_Level is not plain"),
    (2**9000, ValueError, "an int of 9001 bits"),
    (_deep(plain_data.MAX_DEPTH), ValueError, "nested deeper than 100 levels"),
])
def test_what_is_not_plain_data_is_not_written(value, error, message, tmp_path):
    with pytest.raises(error, match=message):
        plain_data.encode(value)
    path = tmp_path / "run.ckpt"
    checkpoints.write(path, {"round": 1})
    with pytest.raises(error, match=r"value\['value'\]"):  # before the file is touched
        checkpoints.write(path, {"round": 2, "value": value})
    assert checkpoints.read(path) == {"round": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["run.ckpt"]


def test_nesting_up_to_the_limit_is_read_back():
    round_trip(_deep(plain_data.MAX_DEPTH - 2))


def test_every_library_state_is_plain_data(tmp_path, monkeypatch):
    """A run with every kind of agent, wrapper, ratio policy and callback that has a state:
    what each checkpoint holds comes back the same from its file, and the run resumes."""
    from sapo_experiments.reproduce.sweep import RunClock

    written = []
    real_write = checkpoints.write

    def write(path, content):
        written.append(content)
        real_write(path, content)

    monkeypatch.setattr(checkpoints, "write", write)
    env = sapo_env.parallel_env(n=5, max_rounds=9, pool_window=2, completions_per_question=3)
    names = env.possible_agents
    learners = simulated_swarm(names, seed=3)
    agents = [AdversarialAgent(DemonstratorAgent(seed=0), attack="wrong_answers", seed=1),
              ChurningAgent(RandomAgent(num_external=1, seed=1), offline_probability=0.3,
                            seed=2),
              SlowAgent(learners[names[2]]), learners[names[3]], learners[names[4]]]
    policies = {names[0]: LinUCBRatio(), names[1]: ScheduledRatio([(0, 1), (4, 2)]),
                names[2]: LearningProgress(window=2, check_every=2), names[3]: FixedRatio(2)}
    callbacks = [RunClock()]  # HeldOutEvaluator's state: test_checkpoints' swarm_run
    try:
        from sapo_env.runtime.tensorboard import TensorBoardCallback

        callbacks.append(TensorBoardCallback(tmp_path / "tb", run_name="r"))
    except ImportError:
        pass
    path = tmp_path / "run.ckpt"
    sapo_env.runtime.run(env, agents, seed=2, progress=False, ratio_policies=policies,
                         callbacks=callbacks, checkpoint=Checkpoint(path, every=3))
    assert len(written) == 3
    saved = checkpoints.read(path)
    same(written[-1], saved)
    assert saved["format"] == checkpoints.CHECKPOINT_FORMAT == 2
    for state in (*written[-1]["agents"].values(), *written[-1]["ratio_policies"].values(),
                  *(s for _, s in written[-1]["callbacks"])):
        round_trip(state)


# --- a forged dtype in a format-1 pickle -----------------------------------------------------

class _ObjectFieldDtype:
    """Pickles as a structured dtype with an object field whose flags claim no objects."""

    def __reduce__(self):
        return (np.dtype, ("V8", False, True),
                (3, "|", None, ("x",), {"x": (np.dtype("O"), 0)}, 8, 1, 0))


class _ForgedArray:
    """Pickles as an array of that dtype whose one object field is 0x4141414141414141."""

    def __reduce__(self):
        reconstruct = np.zeros(1).__reduce__()[0]  # numpy's _reconstruct, where pickles find it
        return (reconstruct, (np.ndarray, (0,), b"b"),
                (1, (1,), _ObjectFieldDtype(), False, b"AAAAAAAA"))


RESUME = """
import sys
from pathlib import Path

import sapo_env, sapo_env.runtime
from agents import DemonstratorAgent
from sapo_env.runtime import Checkpoint, checkpoint

path = Path(sys.argv[1])
try:
    print("read", repr(checkpoint.read(path)), flush=True)  # repr reads the forged pointer
except ValueError as error:
    print("read refused:", error, flush=True)
env = sapo_env.parallel_env(n=2, max_rounds=4)
try:
    sapo_env.runtime.run(env, [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1)], seed=0,
                         progress=False, checkpoint=Checkpoint(path, every=2))
    print("resumed", flush=True)
except ValueError as error:
    print("run refused:", error, flush=True)
"""


def test_a_forged_dtype_in_a_planted_checkpoint_neither_crashes_nor_loads(tmp_path):
    """A planted pickle checkpoint whose array claims a forged dtype is refused unread:
    unpickled, it makes numpy dereference 0x4141414141414141 (a segfault). The resume runs in
    a child process, which a crash cannot take the test session down with."""
    path = tmp_path / "run.ckpt"
    path.write_bytes(pickle.dumps({"format": 1, "run": {"seed": _ForgedArray()}},
                                  protocol=pickle.HIGHEST_PROTOCOL))
    done = subprocess.run([sys.executable, "-c", RESUME, str(path)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}{done.stderr[-2000:]}"
    refused = r"pickle checkpoint \(format 1, from sapo-env <= 0.6\), which cannot be loaded"
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith(("read refused", "run refused"))
                                   for line in lines), done.stdout
    assert all(re.search(refused, line) for line in lines), done.stdout


def test_a_format_one_checkpoint_says_what_it_is(tmp_path):
    path = tmp_path / "old.ckpt"
    path.write_bytes(pickle.dumps({"format": 1, "history": np.zeros(3)}, protocol=4))
    with pytest.raises(ValueError, match=r"sapo-env <= 0.6\), which cannot be loaded safely: "
                                         r"rerun, or convert"):
        checkpoints.read(path)
    assert checkpoints.is_pickle(path)


def test_reproduce_starts_afresh_over_a_format_one_checkpoint(tmp_path, caplog):
    from sapo_experiments.reproduce import sweep
    from sapo_experiments.reproduce.config import ReproduceConfig, RunSpec

    config = ReproduceConfig(out=tmp_path, experiments=("4/4",), rounds=4, n_agents=2,
                             seeds=1, checkpoint_every=2, plots=False, tensorboard=False,
                             progress=False)
    spec = RunSpec("4/4", 0, config)
    spec.checkpoint_path.parent.mkdir(parents=True)
    spec.checkpoint_path.write_bytes(pickle.dumps({"format": 1}, protocol=4))
    id_file = spec.checkpoint_path.with_name(spec.checkpoint_path.name + ".id")
    id_file.write_text("old id")
    checkpoint = sweep._checkpoint(spec, {})
    assert not checkpoint.resume and checkpoint.run_id == id_file.read_text() != "old id"
    assert "is a pickle of sapo-env <= 0.6, which is never read" in caplog.text


# --- planted, forged and damaged files ---------------------------------------------------------

def zip_of(members, compression=zipfile.ZIP_STORED):
    """A zip of ``members`` (name -> bytes, or (ZipInfo, bytes)), in that order."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a duplicate name, on purpose
        for name, data in members:
            archive.writestr(name, data)
    return buffer.getvalue()


def npy(array, allow_pickle=False):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def npy_by_hand(header, data=b"", magic=b"\x93NUMPY\x01\x00"):
    text = header.encode("latin1")
    return magic + len(text).to_bytes(2, "little") + text + data


def one_array(array_bytes, state=b'{"$array":0}'):
    return zip_of([("state.json", state), ("arr_0.npy", array_bytes)])


class _Planted:
    """What a planted file carries: unpickling it would call os.system."""

    def __reduce__(self):
        import os

        return os.system, ("touch PWNED",)


FORGED_ARRAYS = {
    "object": (npy(np.array([_Planted(), 1], dtype=object), allow_pickle=True), "dtype '|O'"),
    "structured": (npy(np.zeros(2, dtype=[("a", "<f8"), ("b", "<i4")])), "dtype \\[\\('a'"),
    "object field": (npy_by_hand("{'descr': [('x', '|O')], 'fortran_order': False, "
                                 "'shape': (1,), }", b"AAAAAAAA"), "dtype \\[\\('x', '\\|O'\\)\\]"),
    "comma string": (npy_by_hand("{'descr': '<f8,<i4', 'fortran_order': False, 'shape': (1,)}",
                                 bytes(12)), "dtype '<f8,<i4'"),
    "subarray": (npy_by_hand("{'descr': ('<f8', (2,)), 'fortran_order': False, 'shape': (1,)}",
                             bytes(16)), "dtype \\('<f8'"),
    "unicode": (npy(np.array(["abc"])), "dtype '<U3'"),
    "bytes": (npy(np.array([b"abc"])), "dtype '\\|S3'"),
    "void": (npy(np.zeros(2, dtype="V8")), "dtype '\\|V8'"),
    "datetime": (npy(np.array(["2020-01-01"], dtype="M8[D]")), "dtype '<M8\\[D\\]'"),
    "no such dtype": (npy_by_hand("{'descr': '<i3', 'fortran_order': False, 'shape': (1,)}",
                                  bytes(3)), "'<i3' is not a numpy dtype"),
    "short data": (npy_by_hand("{'descr': '<f8', 'fortran_order': False, 'shape': (1000,)}",
                               bytes(8)), "takes 8000 bytes, the file holds 8"),
    "long data": (npy(np.zeros(2)) + bytes(8), "takes 16 bytes, the file holds 24"),
    "huge shape": (npy_by_hand("{'descr': '<f8', 'fortran_order': False, "
                               f"'shape': ({2**40}, {2**40})}}"), "takes 96714065569170333976494"),
    "negative size": (npy_by_hand("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,)}"),
                      "a tuple of at most 32 sizes"),
    "bool size": (npy_by_hand("{'descr': '<f8', 'fortran_order': False, 'shape': (True,)}",
                              bytes(8)), "a tuple of at most 32 sizes"),
    "too many dims": (npy_by_hand("{'descr': '<f8', 'fortran_order': False, 'shape': "
                                  f"{(1,) * 33}}}", bytes(8)), "at most 32 sizes"),
    "order not a bool": (npy_by_hand("{'descr': '<f8', 'fortran_order': 0, 'shape': (1,)}",
                                     bytes(8)), "fortran_order 0"),
    "extra key": (npy_by_hand("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), "
                              "'x': 1}", bytes(8)), "must hold descr, fortran_order and shape"),
    "code in header": (npy_by_hand("__import__('os').system('touch PWNED')"),
                       "header is not a Python literal"),
    "version 3": (npy_by_hand("{}", magic=b"\x93NUMPY\x03\x00"), "not a .npy array of version"),
    "not npy": (b"PK\x03\x04 not an array", "not a .npy array"),
    "huge header": (b"\x93NUMPY\x02\x00" + (10**6).to_bytes(4, "little") + bytes(64),
                    "header is 1000000 bytes"),
}


@pytest.mark.parametrize("name", sorted(FORGED_ARRAYS))
def test_an_array_that_is_not_plain_numbers_is_refused(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    array_bytes, message = FORGED_ARRAYS[name]
    with pytest.raises(ValueError, match=message):
        plain_data.decode(one_array(array_bytes))
    path = tmp_path / "planted.ckpt"
    path.write_bytes(one_array(array_bytes))
    with pytest.raises(ValueError, match="not a readable sapo-env checkpoint"):
        checkpoints.read(path)
    assert not (tmp_path / "PWNED").exists()


def test_the_arrays_are_a_zip_numpy_reads_without_pickles():
    data = plain_data.encode({"x": [np.arange(3), np.eye(2, dtype=np.float32)]})
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        assert sorted(arrays.files) == ["arr_0", "arr_1", "state.json"]
        same(arrays["arr_1"], np.eye(2, dtype=np.float32))


STATE = b'{"a":1}'
MALFORMED_ZIPS = {
    "not a zip": (b"hello", "not a plain-data file: BadZipFile"),
    "empty": (b"", "BadZipFile"),
    "no state": (zip_of([("arr_0.npy", npy(np.zeros(1)))]), "holds no state.json"),
    "stray member": (zip_of([("state.json", STATE), ("run.py", b"import os")]),
                     "members must be state.json and arr_0.npy"),
    "gap in arrays": (zip_of([("state.json", STATE), ("arr_1.npy", npy(np.zeros(1)))]),
                      "members must be"),
    "leading zero": (zip_of([("state.json", STATE), ("arr_00.npy", npy(np.zeros(1)))]),
                     "members must be"),
    "a member twice": (zip_of([("state.json", STATE), ("state.json", STATE)]), "twice"),
    "compressed": (zip_of([("state.json", STATE)], zipfile.ZIP_DEFLATED), "compressed"),
    "unused array": (zip_of([("state.json", STATE), ("arr_0.npy", npy(np.zeros(1)))]),
                     "arrays no value refers to: \\[0\\]"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_ZIPS))
def test_a_malformed_zip_is_refused(name):
    data, message = MALFORMED_ZIPS[name]
    with pytest.raises(ValueError, match=message):
        plain_data.decode(data)


def test_an_encrypted_member_and_an_oversized_file_are_refused():
    encrypted = bytearray(zip_of([("state.json", STATE)]))
    central = encrypted.index(b"PK\x01\x02")
    encrypted[6] |= 0x1  # the "encrypted" flag, in the local header and the central directory
    encrypted[central + 8] |= 0x1
    with pytest.raises(ValueError, match="encrypted"):
        plain_data.decode(bytes(encrypted))
    data = plain_data.encode(list(range(100)))
    with pytest.raises(ValueError, match=f"{len(data)} bytes, more than the 100 allowed"):
        plain_data.decode(data, max_bytes=100)


MALFORMED_JSON = [
    ('{"$tuple": 1}', "\\$tuple must hold a list, got a int"),
    ('{"$nope": 1}', "unknown tag \\'\\$nope\\'"),
    ('{"$tuple": [], "a": 1}', "a key starting with \\'\\$\\' must be an object\\'s only key"),
    ('{"a": 1, "a": 2}', "repeats a key"),
    ('{"$array": 0}', "index of one of the zip\\'s 0 arrays"),
    ('{"$array": true}', "index of one of"),
    ('{"$array": -1}', "index of one of"),
    ('{"$int": "12a"}', "\\$int must be at most 2500 decimal digits"),
    ('{"$int": "' + "9" * 3000 + '"}', "\\$int must be at most 2500"),
    ('{"$int": 5}', "\\$int must hold a str"),
    ('{"$float": "1.5"}', "\\$float must be one of"),
    ('{"$complex": [1]}', "\\$complex must be \\[real, imag\\]"),
    ('{"$complex": [[1], 2]}', "\\$complex must be"),
    ('{"$bytes": "!!"}', "\\$bytes must be base64"),
    ('{"$numpy": ["|O", "00"]}', "\\$numpy must be \\[numeric dtype, hex bytes\\]"),
    ('{"$numpy": ["<f8", "00"]}', "must hold 8 bytes, got 1"),
    ('{"$numpy": ["<f8", "zz"]}', "hex"),
    ('{"$numpy": ["<i3", "000000"]}', "not a numpy dtype"),
    ('{"$set": [[1]]}', "\\$set holds an unhashable item"),
    ('{"$dict": [[[1], 2]]}', "\\$dict has an unhashable key"),
    ('{"$dict": [[1, 2, 3]]}', "\\$dict must be a list of \\[key, value\\] pairs"),
    ('{"$dict": [[1, 2], [1, 3]]}', "\\$dict repeats a key"),
    ("[NaN]", "holds NaN, which is not JSON"),
    ("[Infinity]", "holds Infinity"),
    ("[" * 101 + "]" * 101, "nested 101 levels deep, more than 100"),
    ("[" * 100_000, "nested 100000 levels deep"),
    ('{"a": ', "Expecting value"),
    ("", "Expecting value"),
]


@pytest.mark.parametrize("text, message", MALFORMED_JSON,
                         ids=[t[:20] for t, _ in MALFORMED_JSON])
def test_malformed_json_or_tags_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        plain_data.decode(zip_of([("state.json", text.encode())]))


def test_arrays_are_referenced_once_and_text_must_be_utf8():
    data = zip_of([("state.json", b'[{"$array":0},{"$array":0}]'),
                   ("arr_0.npy", npy(np.zeros(1)))])
    with pytest.raises(ValueError, match="arr_0.npy is referenced twice"):
        plain_data.decode(data)
    with pytest.raises(ValueError, match="utf-8"):
        plain_data.decode(zip_of([("state.json", b'["\xff"]')]))
    # brackets inside strings are not nesting; escapes are read as JSON reads them
    text = json.dumps(["[" * 500, '\\"{', "a\\", {"k[": "]]]"}])
    assert plain_data.decode(zip_of([("state.json", text.encode())])) == json.loads(text)


def test_random_and_damaged_files_are_refused_never_crash(tmp_path):
    rng = np.random.default_rng(34)
    valid = plain_data.encode({"a": [1, 2.5, (3, "x")], "b": np.arange(5.0), "c": {1: b"z"}})
    blobs = [rng.bytes(int(n)) for n in rng.integers(0, 3000, 150)]
    blobs += [b"PK\x03\x04" + rng.bytes(200), b"PK\x05\x06" + bytes(18)]
    blobs += [valid[:k] for k in sorted(set(rng.integers(0, len(valid), 60)))]
    refused = 0
    for blob in blobs:
        with pytest.raises(ValueError):
            plain_data.decode(blob)
        refused += 1
    for _ in range(400):  # a byte changed anywhere: refused, or still plain data
        damaged = bytearray(valid)
        damaged[rng.integers(len(valid))] ^= int(rng.integers(1, 256))
        try:
            plain_data.decode(bytes(damaged))
        except ValueError:
            refused += 1
    assert refused > len(blobs)
    path = tmp_path / "run.ckpt"
    path.write_bytes(blobs[0])
    with pytest.raises(ValueError, match="not a readable sapo-env checkpoint"):
        checkpoints.read(path)


def test_plain_data_imports_no_deserialiser_that_runs_code():
    tree = ast.parse((ROOT / "sapo_env/runtime/plain_data.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import,
                                                                           ast.ImportFrom))
                for alias in node.names}
    assert not imported & {"pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
    called = {node.func.id for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not called & {"eval", "exec", "__import__", "compile"}


# --- a checkpoint's layout --------------------------------------------------------------------

def _swarm(path, seed=0):
    env = sapo_env.parallel_env(n=2, max_rounds=4)
    return sapo_env.runtime.run(env, [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1)],
                                seed=seed, progress=False, checkpoint=Checkpoint(path, every=2))


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(run=[]), "run must be a dict, got a list"),
    (lambda c: c.pop("env"), r"must hold \['agents', 'callbacks', 'env'"),
    (lambda c: c["agents"].pop("node_1"), r"holds agents states of \['node_0'\]"),
    (lambda c: c["agents"].update(node_9={}), r"holds agents states of"),
    (lambda c: c.update(callbacks=[1]), "not \\(class, state\\) pairs"),
    (lambda c: c["history"].update(rounds=-1), "a negative number of rounds"),
    (lambda c: c["history"].update(rounds=2.0), "its history: rounds must be a int"),
    (lambda c: c["history"].pop("infos"), "its history must hold"),
    (lambda c: c["history"].update(rewards=[1.0]), "rewards must be a ndarray"),
    (lambda c: c.update(format=1), "not a sapo-env checkpoint of format 2"),
])
def test_a_plain_checkpoint_of_the_wrong_layout_is_refused(change, message, tmp_path):
    path = tmp_path / "run.ckpt"
    expected = _swarm(path)
    content = checkpoints.read(path)
    change(content)
    checkpoints.write(path, content)
    with pytest.raises(ValueError, match=message):
        _swarm(path)
    same(_swarm(tmp_path / "fresh.ckpt").rewards, expected.rewards)


# --- docs/checkpoints.md -------------------------------------------------------------------------

def test_the_checkpoint_docs_examples_run(tmp_path, monkeypatch):
    """Its three examples: a run with checkpoints, the codec, and the conversion of a format-1
    pickle (one this test writes as sapo-env 0.6 did), which then resumes."""
    blocks = [chunk.split("```", 1)[0] for chunk in
              (ROOT / "docs/checkpoints.md").read_text().split("```python\n")[1:]]
    assert len(blocks) == 3
    monkeypatch.chdir(tmp_path)
    run_ns: dict = {}
    exec(compile(blocks[0], "checkpoints.md[0]", "exec"), run_ns)
    assert run_ns["history"].rounds == 6
    exec(compile(blocks[1], "checkpoints.md[1]", "exec"), {})

    content = checkpoints.read(Path("runs/demo.ckpt"))
    with open("runs/old.ckpt", "wb") as file:
        pickle.dump({**content, "format": 1}, file, protocol=pickle.HIGHEST_PROTOCOL)
    with pytest.raises(ValueError, match="pickle checkpoint"):
        checkpoints.read(Path("runs/old.ckpt"))
    exec(compile(blocks[2], "checkpoints.md[2]", "exec"), {})
    same(checkpoints.read(Path("runs/new.ckpt")), content)
    env = sapo_env.parallel_env(n=2, max_rounds=6)
    resumed = sapo_env.runtime.run(env, [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1)],
                                   seed=0, progress=False,
                                   checkpoint=Checkpoint("runs/new.ckpt", every=2))
    same(resumed.rewards, run_ns["history"].rewards)
