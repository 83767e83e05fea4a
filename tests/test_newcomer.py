"""Problems a new user hit: the command line, missing extras, agent misconfiguration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import sapo_env
from agents import DemonstratorAgent, RandomAgent
from sapo_experiments.cli import EXIT_BROKEN_PIPE, main

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ command line


@pytest.mark.slow
@pytest.mark.parametrize("command", [["info"], ["demo", "--rounds", "1"]])
def test_closed_stdout_exits_quietly(command):
    """`sapo-env info | head -1`: the reader is gone before the command writes anything."""
    process = subprocess.Popen([sys.executable, "-m", "sapo_experiments.cli", *command],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    process.stdout.close()  # the only read end: every write now fails with EPIPE
    stderr = process.stderr.read().decode()
    process.wait(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert process.returncode in (0, EXIT_BROKEN_PIPE), (process.returncode, stderr)


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"sapo-env {sapo_env.__version__}\n"


# ------------------------------------------------------------------ the `lm` extra


@pytest.mark.parametrize("name", ["GRPOAgent", "GRPOConfig", "lora_swarm"])
def test_missing_torch_names_the_extra(monkeypatch, name):
    """A core-only install, simulated: importing torch fails, as it would if absent."""
    monkeypatch.setitem(sys.modules, "torch", None)
    for module in ("agents.lm.grpo", "agents.lm.lora"):  # forget them so the import runs again
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError) as error:  # what callers with optional agents catch
        exec(f"from agents import {name}", {})
    assert type(error.value) is ModuleNotFoundError and error.value.name == "torch"
    message = str(error.value)
    assert "'torch'" in message and "pip install 'sapo-env[lm]'" in message
    assert "torch build for your hardware" in message


def test_other_import_errors_are_not_rewritten(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setitem(sys.modules, "agents.lm.generation", None)  # a broken install of ours
    monkeypatch.delitem(sys.modules, "agents.lm.grpo", raising=False)
    with pytest.raises(ModuleNotFoundError) as error:
        from agents import GRPOAgent  # noqa: F401
    assert error.value.name == "agents.lm.generation"
    assert "sapo-env[lm]" not in str(error.value)


# ------------------------------------------------------------------ GRPOConfig.torch_threads


def test_torch_threads_validation():
    pytest.importorskip("torch")
    from agents import GRPOConfig

    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=rf"torch_threads must be an int >= 1, got {bad}"):
            GRPOConfig(torch_threads=bad)
    assert GRPOConfig().torch_threads is None


@pytest.fixture
def keep_torch_threads():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    previous = torch.get_num_threads()
    yield torch
    torch.set_num_threads(previous)


def test_torch_threads_is_applied_on_cpu(keep_torch_threads, tok):
    torch = keep_torch_threads
    from tiny_lm import tiny_llama

    from agents import GRPOAgent, GRPOConfig

    torch.set_num_threads(2)
    GRPOAgent(tiny_llama(tok), tok, GRPOConfig(device="cpu", torch_threads=1))
    assert torch.get_num_threads() == 1
    GRPOAgent(tiny_llama(tok), tok, GRPOConfig(device="cpu"))  # None: left alone
    assert torch.get_num_threads() == 1


# ------------------------------------------------------------------ scripted agents


def no_questions(budget=8):
    """A round in which this node got no questions (the number may soon vary, down to 0)."""
    return {"completions_per_question": 2, "train_budget": budget, "questions": ()}


@pytest.mark.parametrize("make", [lambda: DemonstratorAgent(num_external=9),
                                  lambda: RandomAgent(num_external=9)])
def test_num_external_above_the_train_budget_is_an_error(make):
    agent = make()
    with pytest.raises(ValueError, match=r"num_external=9 .*train_budget=8"):
        agent.act(no_questions(budget=8))
    assert agent.act(no_questions(budget=9))["num_external"] == 9


@pytest.mark.parametrize("agent", [DemonstratorAgent(), RandomAgent()])
def test_a_round_without_questions(agent):
    assert agent.act(no_questions()) == {"completions": (), "num_external": 4}


# ------------------------------------------------------------------ benchmarks


@pytest.mark.slow
@pytest.mark.parametrize("script", ["env_step.py", "sim_swarm.py", "lm_agent.py", "tiny_act.py"])
def test_benchmarks_write_only_when_asked(script):
    if script == "lm_agent.py":
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    # run as the README says: python benchmarks/<script> (not as a module)
    out = subprocess.run([sys.executable, f"benchmarks/{script}", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "--write" in out.stdout and "--no-write" not in out.stdout
