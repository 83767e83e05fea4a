"""W&B logging: ``WandbCallback`` logs the scalars TensorBoard writes (one
function, ``sapo_env.runtime.scalars.round_scalars``, for both), offline in these tests: what
is checked is read back from the offline run's own files."""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path

import pytest

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent
from sapo_env.runtime import metrics
from sapo_env.runtime.scalars import round_scalars

NEEDS_WANDB = "W&B logging needs the 'wandb' extra: pip install 'sapo-env[wandb]'"


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """W&B offline, quiet, with every file it writes under tmp_path."""
    pytest.importorskip("wandb", reason=NEEDS_WANDB)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "home" / name.lower()))
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    return tmp_path


def offline_records(folder: Path, timeout: float = 30.0) -> list:
    """The records of the one offline run under ``folder``, once W&B has written them all (its
    ``exit`` record: ``run.finish()`` can return before W&B's writer has written the file)."""
    deadline = time.monotonic() + timeout
    while True:
        (path,) = folder.glob("wandb/offline-run-*/run-*.wandb")
        records = read_records(path.read_bytes())
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: no exit record after {timeout} s")
        time.sleep(0.1)


def read_records(data: bytes) -> list:
    """The records of a ``run-<id>.wandb`` file: a ``:W&B`` header, then records in 32 KiB
    blocks, each piece behind a 7-byte header of CRC, length and kind, as LevelDB's log (kinds
    1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    assert data[:4] == b":W&B" or not data
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        if (left := 32768 - pos % 32768) < 7:  # a block's tail too short for a header
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if pos + 7 + length > len(data):  # still being written
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
        elif kind == 0:  # zero padding at a block's end
            pending = b""
    return records


def logged(folder: Path) -> tuple[dict, list[dict]]:
    """The offline run's config and its history rows (without W&B's own ``_`` keys)."""
    def items(update):  # W&B names an item by its key, or by a nested key (a path)
        named = {item.key or "/".join(item.nested_key): item.value_json for item in update}
        return {key: json.loads(value) for key, value in named.items()
                if not key.startswith("_")}

    records = offline_records(folder)
    (config,) = [items(r.run.config.update) for r in records
                 if r.WhichOneof("record_type") == "run"]
    rows = [items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    return config, rows


def run_swarm(callbacks_of, rounds=4):
    env = sapo_env.parallel_env(n=2, max_rounds=rounds)
    evaluator = metrics.HeldOutEvaluator(every=2, n_questions=4, seed=0)
    nodes = [DemonstratorAgent(accuracy=1.0, seed=0), DemonstratorAgent(accuracy=0.5, seed=1)]
    records = []

    class Keep(sapo_env.runtime.Callback):
        def on_round_end(self, record):
            records.append(record)

    sapo_env.runtime.run(env, nodes, seed=0, progress=False,
                         callbacks=[evaluator, Keep(), *callbacks_of(evaluator)])
    return records, evaluator


def test_wandb_logs_every_rounds_scalars_and_the_held_out_scores_offline(offline):
    from sapo_env.runtime.wandb_logger import WandbCallback

    records, evaluator = run_swarm(lambda evaluator: [WandbCallback(
        run_name="demo", log_dir=offline, held_out=evaluator, hparams={"seed_index": 0})])
    config, rows = logged(offline)
    assert config["seed_index"] == 0 and config["n_agents"] == 2
    assert config["agents"] == "DemonstratorAgent"
    by_round = [r for r in rows if "reward/swarm_mean" in r]
    assert [r["round"] for r in by_round] == [0, 1, 2, 3]
    for row, record in zip(by_round, records):
        assert {k: v for k, v in row.items() if k != "round"} == pytest.approx(
            round_scalars(record))
    assert {"reward/node_0", "pool/shared", "sampling/num_external/node_1"} <= set(by_round[0])
    assert any(tag.startswith("task/") for tag in by_round[0])
    held = [r for r in rows if "held_out/mean" in r]
    assert [r["round"] for r in held] == evaluator.result.rounds == [1, 3]
    assert held[0]["held_out/node_0"] == pytest.approx(evaluator.result.scores[0][0])


def test_tensorboard_and_wandb_log_the_same_scalars(offline):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sapo_env.runtime.tensorboard import TensorBoardCallback
    from sapo_env.runtime.wandb_logger import WandbCallback

    run_swarm(lambda evaluator: [
        TensorBoardCallback(offline / "tb", run_name="demo", held_out=evaluator),
        WandbCallback(run_name="demo", log_dir=offline, held_out=evaluator)])
    _, rows = logged(offline)
    wandb_values = {(tag, row["round"]): value for row in rows for tag, value in row.items()
                    if tag != "round"}
    board = EventAccumulator(str(offline / "tb" / "demo")).Reload()
    tensorboard_values = {(tag, event.step): event.value for tag in board.Tags()["scalars"]
                          for event in board.Scalars(tag)}
    assert wandb_values.keys() == tensorboard_values.keys()
    assert wandb_values == pytest.approx(tensorboard_values)


def test_a_bad_mode_is_refused_and_without_wandb_the_error_names_the_extra(offline,
                                                                         monkeypatch):
    from sapo_env.runtime.wandb_logger import WandbCallback

    with pytest.raises(ValueError, match="mode must be one of"):
        WandbCallback(mode="cloud")
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'sapo-env\[wandb\]'"):
        WandbCallback()


@pytest.mark.parametrize("module", ["reproduce", "format_propagation"])
def test_one_option_chooses_the_loggers_and_no_tensorboard_still_works(module):
    import importlib

    cli = importlib.import_module(f"sapo_experiments.{module}.cli")
    parse = cli.build_parser().parse_args

    def chosen(*argv):
        config = cli.COMMAND.config(parse(list(argv)))
        return config.tensorboard, config.wandb

    assert chosen() == (True, False)  # nothing sent anywhere by default
    assert chosen("--logger", "wandb") == (False, True)
    assert chosen("--logger", "tensorboard", "wandb") == (True, True)
    assert chosen("--logger", "tensorboard", "wandb", "--no-tensorboard") == (False, True)
    assert chosen("--no-tensorboard") == chosen("--logger", "none") == (False, False)
    with pytest.raises(SystemExit, match="--logger none cannot go with"):
        chosen("--logger", "none", "wandb")


def test_reproduce_logs_each_run_to_wandb_offline(offline, capsys):
    from sapo_experiments.reproduce import cli

    out = offline / "out"
    cli.main(["--experiments", "8/0", "--seeds", "1", "--rounds", "3", "--nodes", "2",
              "--held-out-every", "3", "--held-out-questions", "2", "--jobs", "1",
              "--logger", "wandb", "--no-plots", "--no-progress", "--out", str(out)])
    assert f"W&B: the runs' files are in {out / 'wandb'}" in capsys.readouterr().out
    assert not (out / "tensorboard").exists()
    config, rows = logged(out)
    assert config["experiment"] == "8/0" and config["seed_index"] == 0
    assert [r["round"] for r in rows if "reward/swarm_mean" in r] == [0, 1, 2]
    assert [r["round"] for r in rows if "held_out/mean" in r] == [2]
