"""A newcomer's mistakes answered in one line: a missing extra names it, a missing logger is
said once, a policy of the wrong shape names the expected signature, a misspelt --swarm field
names the closest one."""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sapo_env.extras import EXTRAS, missing_extra, require
from sapo_env.validation import unknown_names
from sapo_experiments import sweep_cli
from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.policies import spec_of
from sapo_experiments.reproduce.config import ReproduceConfig
from sapo_experiments.sweep import SweepResult


def one_line(error: BaseException, extra: str) -> str:
    message = str(error)
    assert "\n" not in message and f"pip install 'sapo-env[{extra}]'" in message, message
    return message


# ------------------------------------------------------------------ missing extras


def test_require_names_the_extra_and_lets_other_errors_through(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError) as error:
        require("ray", "this feature")
    assert error.value.name == "ray" and isinstance(error.value, ImportError)
    assert one_line(error.value, "ray").startswith("this feature needs 'ray', which is not")
    assert require("math", "x").sqrt(9.0) == 3.0
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        require("no_such_module_here", "x")  # not an extra's: raised as it is
    pyproject = Path(__file__).parents[1].joinpath("pyproject.toml").read_text()
    section = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    assert set(EXTRAS.values()) <= set(re.findall(r"^(\w+) = \[", section, re.M))
    with pytest.raises(ValueError, match="not an optional package"):
        missing_extra("numpy", "x")


@pytest.mark.parametrize("module, extra, require_it", [
    ("wandb", "wandb", "sapo_env.runtime.wandb_logger:require_wandb"),
    ("datasets", "data", "sapo_env.runtime.pool_dataset:require_datasets"),
    ("httpx2", "served", "agents:ServedAgent"),
])
def test_the_optional_packages_of_loggers_datasets_and_agents_name_their_extra(
        monkeypatch, module, extra, require_it):
    path, _, name = require_it.partition(":")
    owner = importlib.import_module(path)
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    serving = importlib.import_module("agents.serving")
    for loaded in ("served", "served_http"):  # imported again, as on a first use
        monkeypatch.delitem(sys.modules, f"agents.serving.{loaded}", raising=False)
        monkeypatch.delattr(serving, loaded, raising=False)
    with pytest.raises(ModuleNotFoundError) as error:
        getattr(owner, name)()
    assert error.value.name == module and one_line(error.value, extra)


def test_remote_nodes_without_ray_name_the_extra(monkeypatch):
    from agents.wrappers.remote import remote, remote_joint

    monkeypatch.setitem(sys.modules, "ray", None)
    for build in (lambda: remote(dict), lambda: remote_joint(dict)):
        with pytest.raises(ModuleNotFoundError) as error:
            build()
        assert one_line(error.value, "ray").startswith(
            "agents.wrappers.remote (nodes in Ray actors)")


def test_ray_scoring_and_a_saved_ppo_policy_name_their_extras(monkeypatch):
    from agents.ratio import SB3Ratio
    from sapo_env.scoring.round_scoring import RayScoring

    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    with pytest.raises(ModuleNotFoundError) as error:
        RayScoring().score([], [], None, None, [], {})
    one_line(error.value, "ray")
    with pytest.raises(ModuleNotFoundError) as error:
        SB3Ratio.load("model.zip", max_rounds=10)
    one_line(error.value, "meta")


def test_ratio_benchmark_figure_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    from sapo_experiments.bench_ratio.report import plot_num_external

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ModuleNotFoundError) as error:
        plot_num_external(BenchConfig(quick=True, out=tmp_path), {}, tmp_path / "j.png")
    assert "--no-plots" in one_line(error.value, "plot")


# ------------------------------------------------------------------ loggers


def logger_args(*loggers, no_tensorboard=False):
    return argparse.Namespace(logger=list(loggers), no_tensorboard=no_tensorboard)


def test_a_missing_logger_is_said_once_and_not_asked_of_any_run(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "wandb", None)
    with caplog.at_level(logging.WARNING, logger=sweep_cli.__name__):
        fields = sweep_cli.logger_fields(logger_args("tensorboard", "wandb"))
    assert fields == {"tensorboard": False, "wandb": False}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    one_line(messages[0], "meta")
    assert "tensorboard" in messages[0] and "sapo-env[wandb]" in messages[1]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=sweep_cli.__name__):
        assert sweep_cli.logger_fields(logger_args("none")) == {"tensorboard": False,
                                                                 "wandb": False}
        assert sweep_cli.logger_fields(logger_args("tensorboard", no_tensorboard=True)) == {
            "tensorboard": False, "wandb": False}
    assert caplog.records == []  # not asked for: nothing to say


def test_the_result_names_only_folders_that_were_written(tmp_path, capsys):
    result = SweepResult(config=SimpleNamespace(out=tmp_path), table_markdown="| table |",
                         tensorboard=tmp_path / "tensorboard", wandb=tmp_path / "wandb")
    sweep_cli.print_result(result)
    out = capsys.readouterr().out
    assert "TensorBoard" not in out and "W&B" not in out
    (tmp_path / "tensorboard").mkdir()
    sweep_cli.print_result(result)
    assert f"tensorboard --logdir {tmp_path / 'tensorboard'}" in capsys.readouterr().out


# ------------------------------------------------------------------ your own policy


@pytest.fixture
def my_policies(tmp_path, monkeypatch):
    Path(tmp_path, "my_policies_h36.py").write_text(
        "class NoArgs:\n"
        "    def __init__(self):\n"
        "        pass\n\n"
        "class Fine:\n"
        "    '''J = 4.'''\n"
        "    def __init__(self, node, seed, margin=0.1):\n"
        "        pass\n\n"
        "def keyword_seed(node, *, seed):\n"
        "    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_policies_h36", raising=False)


@pytest.mark.parametrize("name, signature", [("NoArgs", "()"),
                                             ("keyword_seed", "(node, *, seed)")])
def test_a_policy_without_node_seed_is_refused_before_any_run(my_policies, name, signature):
    label = f"my_policies_h36:{name}"
    with pytest.raises(ValueError) as error:
        BenchConfig(quick=True, policies=("fixed-4", label))
    message = str(error.value)
    assert "\n" not in message and f"{name}(node, seed)" in message
    assert f"its signature is {signature}" in message
    assert spec_of("my_policies_h36:Fine").description == "J = 4."


# ------------------------------------------------------------------ misspelt fields


def test_unknown_names_suggest_the_closest():
    assert unknown_names(["pool_windw"], ["pool_window", "pool_capacity"]) == \
        "'pool_windw' (did you mean 'pool_window'?)"
    assert unknown_names(["zzz", "pool_capasity"], ["pool_window", "pool_capacity"]) == \
        "'pool_capasity' (did you mean 'pool_capacity'?), 'zzz'"


def test_a_misspelt_swarm_field_names_the_closest_and_no_empty_list():
    with pytest.raises(ValueError) as error:
        ReproduceConfig(quick=True, swarm={"pool_windw": 4})
    message = str(error.value)
    assert "'pool_windw' (did you mean 'pool_window'?)" in message and "[]" not in message
    with pytest.raises(ValueError) as error:
        ReproduceConfig(quick=True, swarm={"max_rounds": 4})
    assert "['max_rounds']" in str(error.value) and "unknown" not in str(error.value)
