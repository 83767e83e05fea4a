"""Installing: which torch build the Makefile asks for (read from ``make -n``, which runs
nothing), and the error when the top-level ``agents`` package is another distribution's."""

from __future__ import annotations

import importlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

needs_make_on_linux = pytest.mark.skipif(
    MAKE is None or platform.system() != "Linux", reason="needs make, on Linux")


def dry_run(target: str, path: str, tmp_path: Path, *assignments: str) -> str:
    """What ``make -n target`` would run, with ``PATH=path`` and a fresh venv (so every
    install step is listed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH")}
    done = subprocess.run([MAKE, "-n", target, f"VENV={tmp_path / 'venv'}", *assignments],
                          cwd=ROOT, env={**env, "PATH": path}, capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout


def path_without_nvidia_smi() -> str:
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if not (Path(d) / "nvidia-smi").exists())


def path_with_fake_nvidia_smi(tmp_path: Path) -> str:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    return os.pathsep.join([str(bin_), path_without_nvidia_smi()])


@needs_make_on_linux
@pytest.mark.parametrize("target", ["demo", "test"])
def test_without_nvidia_smi_torch_comes_from_the_cpu_index_else_the_registry(target, tmp_path):
    commands = dry_run(target, path_without_nvidia_smi(), tmp_path)
    torch_step = next(line for line in commands.splitlines() if "torch==" in line)
    assert f'u.urlopen("{CPU_INDEX}/torch/", timeout=10)' in torch_step  # the probe
    assert f'--index-url {CPU_INDEX} "torch==2.13.0"' in torch_step  # where it answers
    # where it does not: one line, then the plain pin
    assert f'else echo "{CPU_INDEX} cannot be reached: torch==2.13.0 from the package ' \
           'registry"; ' in torch_step
    assert torch_step.endswith('--disable-pip-version-check "torch==2.13.0"; fi')


@needs_make_on_linux
@pytest.mark.parametrize("target", ["demo", "test"])
def test_with_nvidia_smi_on_the_path_torch_is_the_plain_pin(target, tmp_path):
    commands = dry_run(target, path_with_fake_nvidia_smi(tmp_path), tmp_path)
    assert CPU_INDEX not in commands and "download.pytorch.org" not in commands
    assert '--disable-pip-version-check "torch==2.13.0"' in commands


@needs_make_on_linux
def test_an_empty_torch_index_is_the_plain_pin_and_another_is_used(tmp_path):
    path = path_without_nvidia_smi()
    assert "download.pytorch.org" not in dry_run("demo", path, tmp_path, "TORCH_INDEX=")
    cuda = "https://download.pytorch.org/whl/cu126"
    commands = dry_run("demo", path, tmp_path, f"TORCH_INDEX={cuda}")
    assert f'--index-url {cuda} "torch==2.13.0"' in commands and CPU_INDEX not in commands


# ------------------------------------------------------------------ the name `agents`

def test_another_top_level_agents_package_is_named_in_one_line(monkeypatch):
    """OpenAI's Agents SDK installs a top-level ``agents`` too: where ``import agents`` finds
    that one, importing the harnesses says so, in one line naming the file it found."""
    import types

    import sapo_experiments

    other = types.ModuleType("agents")
    other.__file__ = "/venv/site-packages/agents/__init__.py"
    other.Agent = object  # what openai-agents exports; no sapo-env mark
    monkeypatch.setitem(sys.modules, "agents", other)
    with pytest.raises(ImportError) as raised:
        importlib.reload(sapo_experiments)
    message = str(raised.value)
    assert message.startswith("'import agents' found /venv/site-packages/agents/__init__.py, "
                              "which is not sapo-env's agents package")
    assert "openai-agents" in message and "\n" not in message
    monkeypatch.undo()  # sapo-env's own again: the reload goes through
    importlib.reload(sapo_experiments)
    sapo_experiments.check_agents(sys.modules["agents"])
