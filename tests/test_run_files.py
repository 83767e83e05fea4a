"""Run files in the output folder are untrusted: a damaged or planted ``runs/*.npz`` is "not
finished" (a warning names it) and its run is made again; no entry is read before its size is
checked, and nothing is unpickled."""

from __future__ import annotations

import io
import json
import logging
import zipfile

import numpy as np
import pytest

from sapo_experiments import run_files
from sapo_experiments.reproduce import ReproduceConfig
from sapo_experiments.reproduce.plan import plan_text

META = json.dumps({"key": "k"})


def npy(shape, dtype, payload=b""):
    """An ``.npy`` entry: a header declaring ``shape`` and ``dtype``, then ``payload``."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + payload


def plant(path, **entries):
    """A zip at ``path`` of the raw ``.npy`` bytes of ``entries``; a good meta unless given."""
    entries.setdefault("meta", npy((), f"<U{len(META)}", META.encode("utf-32-le")))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(f"{name}.npy", data)
    return path


@pytest.fixture
def reads(monkeypatch):
    """The names of the arrays numpy reads the data of (``np.lib.format.read_array``)."""
    read, real = [], np.lib.format.read_array

    def spy(member, *args, **kwargs):
        read.append(getattr(member, "name", "?"))
        return real(member, *args, **kwargs)

    monkeypatch.setattr(np.lib.format, "read_array", spy)
    return read


PLANTED = {
    # 8 TiB declared in a few bytes: numpy would allocate it before reading (MemoryError)
    "huge meta": dict(meta=npy((2**40,), "<f8")),
    "huge array": dict(rewards=npy((2**40,), "<f8")),
    "shape beyond its bytes": dict(rewards=npy((1000,), "<f8", bytes(16))),
    "object array": dict(rewards=npy((1,), object, b"\x80\x04N.")),
    "not npy": dict(rewards=b"junk"),
    "meta not a run's": dict(meta=npy((), "<U2", "[]".encode("utf-32-le"))),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_entry_is_not_finished_named_in_a_warning_and_never_read(
        name, tmp_path, reads, caplog):
    sound = plant(tmp_path / "sound.npz", rewards=npy((2,), "<f8", bytes(16)))
    assert run_files.is_finished(sound, "k") and reads == ["meta.npy"]  # probing reads meta
    reads.clear()
    path = plant(tmp_path / "run.npz", **PLANTED[name])
    with caplog.at_level(logging.WARNING, "sapo_experiments.run_files"):
        assert not run_files.is_finished(path, "k")
    assert f"{path} is not a finished run file" in caplog.text
    assert "rewards.npy" not in reads  # refused on its header, before its data
    if name.startswith("huge"):
        assert reads == [] and "is 8796093022208 bytes, the entry holds 0" in caplog.text
    with pytest.raises(ValueError):
        run_files.load_run(path)
    assert "rewards.npy" not in reads


def test_an_oversized_entry_is_refused_on_its_declared_size(tmp_path, reads, monkeypatch,
                                                            caplog):
    path = run_files.save_run(tmp_path / "run.npz", {"key": "k"}, rewards=np.ones(100))
    assert np.array_equal(run_files.load_run(path)["rewards"], np.ones(100))
    reads.clear()
    monkeypatch.setattr(run_files, "MAX_ARRAY_BYTES", 64)
    assert not run_files.is_finished(path, "k") and reads == []
    assert "rewards.npy holds 928 bytes, more than 64" in caplog.text


def test_a_truncated_file_is_not_finished(tmp_path, caplog):
    path = run_files.save_run(tmp_path / "run.npz", {"key": "k"}, rewards=np.ones((50, 8)))
    path.write_bytes(path.read_bytes()[:300])
    assert not run_files.is_finished(path, "k")
    assert f"{path} is not a finished run file (BadZipFile" in caplog.text


@pytest.mark.parametrize("error", [RecursionError, MemoryError, OSError])
def test_whatever_reading_raises_means_not_finished(error, tmp_path, monkeypatch, caplog):
    path = run_files.save_run(tmp_path / "run.npz", {"key": "k"}, rewards=np.ones(3))

    def raising(*args, **kwargs):
        raise error("planted")

    monkeypatch.setattr(np.lib.format, "read_array", raising)  # np.load's reader too
    assert not run_files.is_finished(path, "k") and not run_files.made_by_other_code(path, "k")
    assert caplog.text.count(f"{path} is not a finished run file ({error.__name__}") == 1


def test_reproduce_plans_over_a_planted_run_file(tmp_path, caplog):
    config = ReproduceConfig(quick=True, out=tmp_path, jobs=1)
    planted = config.specs()[0].path
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"PK\x03\x04" + bytes(100))  # a zip's magic, then nothing
    text = " ".join(plan_text(config).split())
    assert "12 runs to do" in text and f"{planted} is not a finished run file" in caplog.text
