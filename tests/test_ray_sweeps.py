"""The sweeps' runs as Ray tasks (``--ray-address``, sapo_experiments.ray_runs): on a 2-CPU
local Ray each sweep saves exactly the run files it saves in this process, the driver writes
them (and removes reproduce's checkpoints), a failed run raises; every CLI takes the flags and
says clearly what it cannot do. ``local_ray`` is conftest.py's."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from timings import without_timings_csv

from sapo_experiments import cli
from sapo_experiments.attack import cli as attack_cli
from sapo_experiments.bench_ratio import BenchConfig, bench
from sapo_experiments.bench_ratio import cli as bench_cli
from sapo_experiments.format_propagation import cli as format_cli
from sapo_experiments.ray_runs import RayOptions
from sapo_experiments.reproduce import cli as reproduce_cli
from sapo_experiments.run_files import load_run, run_all

pytestmark = pytest.mark.slow  # Ray: a local cluster, each sweep run as Ray tasks
CLIS = {"reproduce": reproduce_cli, "bench-ratio": bench_cli, "attack": attack_cli,
        "format-propagation": format_cli}
LM_CLIS = ("reproduce", "format-propagation")  # the ones with --gpus-per-run
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="needs the ray extra")


def without_times(meta: dict) -> dict:
    """A run's meta less its wall and CPU seconds, which differ between any two runs."""
    return {k: v for k, v in meta.items() if not k.endswith("seconds")}


def assert_same_runs(here: Path, there: Path) -> None:
    """The two folders hold the same run files: every array and the meta equal but times."""
    names = sorted(p.name for p in here.glob("*.npz"))
    assert names and names == sorted(p.name for p in there.glob("*.npz"))
    for name in names:
        a, b = load_run(here / name), load_run(there / name)
        assert a.keys() == b.keys()
        for key in a.keys() - {"meta"}:
            if not key.endswith("seconds"):
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name}: {key}")
        assert without_times(a["meta"]) == without_times(b["meta"])


# --- the sweeps on Ray -----------------------------------------------------------------------
def without_wall_times(text: str) -> str:
    return re.sub(r"\b\d+\.\d s\b", "? s", text)


def test_attack_on_ray_saves_the_runs_of_this_process(local_ray, tmp_path, capsys):
    quick = ["attack", "--quick", "--attacks", "forge_rewards", "--seeds", "1", "--no-plots"]
    cli.main([*quick, "--jobs", "1", "--no-progress", "--out", str(tmp_path / "here")])
    here_table = capsys.readouterr().out
    cli.main([*quick, "--ray-address", "local", "--out", str(tmp_path / "ray")])
    captured = capsys.readouterr()
    assert "4/4" in captured.err  # the bar counted the runs as they came back
    # the same tables, but for the slowest round's wall time, which the machine's load decides
    assert without_wall_times(captured.out.split("Wrote")[0]) == without_wall_times(
        here_table.split("Wrote")[0])
    assert_same_runs(tmp_path / "here" / "runs", tmp_path / "ray" / "runs")
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert summary["jobs"] is None and summary["settings"]["ray"]["address"] == "local"


def test_reproduce_on_ray_saves_the_runs_and_removes_the_checkpoints(local_ray, tmp_path):
    tiny = ["reproduce", "--quick", "--rounds", "8", "--nodes", "3", "--seeds", "1",
            "--experiments", "8/0", "4/4", "--held-out-every", "4", "--held-out-questions", "3",
            "--checkpoint-every", "3", "--no-tensorboard", "--no-plots", "--no-progress"]
    cli.main([*tiny, "--jobs", "1", "--out", str(tmp_path / "here")])
    cli.main([*tiny, "--ray-address", "local", "--cpus-per-run", "0.5",
              "--out", str(tmp_path / "ray")])
    assert_same_runs(tmp_path / "here" / "runs", tmp_path / "ray" / "runs")
    # the tasks checkpointed where they ran (this machine); saving the file removed that
    assert list((tmp_path / "ray" / "runs").glob("*.ckpt*")) == []
    assert without_timings_csv((tmp_path / "here" / "results.csv").read_text()) == (
        without_timings_csv((tmp_path / "ray" / "results.csv").read_text()))  # but CPU seconds


def test_bench_ratio_on_ray_saves_the_runs_of_this_process(local_ray, tmp_path):
    tiny = dict(policies=("fixed-4", "exp3"), scenarios=("mixed",), rounds=6, seeds=1, tuned=None,
                n_agents=3, progress=False, plots=False)
    bench(BenchConfig(out=tmp_path / "here", jobs=1, **tiny))
    bench(BenchConfig(out=tmp_path / "ray", ray=RayOptions("local"), **tiny))
    assert_same_runs(tmp_path / "here" / "runs", tmp_path / "ray" / "runs")


def test_format_propagation_on_ray_saves_the_runs_of_this_process(local_ray, tmp_path,
                                                                   one_torch_thread):
    pytest.importorskip("peft")
    from test_format_propagation import tiny_config  # the tiny model, importable in workers

    from sapo_experiments.format_propagation import format_propagation

    small = dict(conditions=("demonstrator",), rounds=2, tensorboard=False, plots=False)
    format_propagation(tiny_config(tmp_path / "here", **small))
    result = format_propagation(tiny_config(tmp_path / "ray", jobs=None,
                                            ray=RayOptions("local"), **small))
    assert_same_runs(tmp_path / "here" / "runs", tmp_path / "ray" / "runs")
    assert result.config.ray == RayOptions("local")


def broken_run(spec: int):
    """A run that fails (module level: Ray workers import it from tests/)."""
    raise ValueError(f"run {spec} broke")


def test_a_run_that_fails_on_ray_raises_out_of_the_sweep(local_ray):
    with pytest.raises(ValueError, match=r"run \d broke"):  # Ray's error is also the run's
        run_all(broken_run, [1, 2, 3], 0, 1, progress=False, ray=RayOptions("local"))


# --- the flags -------------------------------------------------------------------------------
def parse(command: str, *flags: str):
    return cli.build_parser().parse_args([command, *flags])


@needs_ray
@pytest.mark.parametrize("command", CLIS)
def test_every_sweep_cli_takes_the_ray_flags(command):
    gpus = ["--gpus-per-run", "1"] if command in LM_CLIS else []
    config = CLIS[command].config_from_args(parse(command, "--ray-address", "auto",
                                                  "--cpus-per-run", "2", *gpus))
    assert config.ray == RayOptions("auto", cpus_per_run=2, gpus_per_run=1 if gpus else 0)
    assert CLIS[command].config_from_args(parse(command)).ray is None
    if command not in LM_CLIS:  # simulated learners: no GPU to ask for
        with pytest.raises(SystemExit):
            parse(command, "--ray-address", "auto", "--gpus-per-run", "1")


@needs_ray
@pytest.mark.parametrize("command", CLIS)
def test_ray_flags_errors_are_one_line_and_name_the_flags(command, capsys):
    cases = [(["--ray-address", "local", "--jobs", "3"],
              "jobs must be None when the runs go to Ray .* got jobs=3"),
             (["--cpus-per-run", "2"], "--cpus-per-run needs --ray-address"),
             (["--ray-address", "local", "--cpus-per-run", "-1"],
              "cpus_per_run must be a number >= 0, got -1")]
    for flags, message in cases:
        args = parse(command, *flags)
        with pytest.raises(SystemExit, match=f"^sapo-env {command}: {message}"):
            args.handler(args)


@pytest.mark.parametrize("command", CLIS)
def test_without_ray_installed_the_flag_says_which_extra(command, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what find_spec sees without the package
    args = parse(command, "--ray-address", "auto")
    with pytest.raises(SystemExit, match=r'Ray is not installed; pip install "sapo-env\[ray\]"'):
        args.handler(args)
