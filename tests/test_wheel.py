"""The package as a user gets it: ``pip wheel .`` builds a wheel that installs into a fresh
virtual environment (its dependencies from the package index) and runs ``sapo-env demo`` there,
away from this checkout, so nothing is found by accident in the source tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def run(*command: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_wheel_installs_in_a_fresh_venv_and_runs_its_demo(tmp_path):
    # a copy of the checkout, so that no build/ folder left by an earlier build (which keeps
    # modules since deleted) goes into the wheel
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "out", "build", "*.egg-info", "__pycache__", ".*_cache"))
    wheels = tmp_path / "wheels"
    # no build isolation: this venv's setuptools builds it, so no build tools are downloaded
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
        "-w", wheels, source, cwd=tmp_path)
    (wheel,) = wheels.glob("sapo_env-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("sapo_env-")}
    assert top == {"sapo_env", "agents", "sapo_experiments"}
    assert "sapo_experiments/bench_ratio/tuned.json" in names  # package data travels

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel,
        cwd=tmp_path)
    where = run(python, "-c", "import sapo_env; print(sapo_env.__file__)", cwd=tmp_path)
    assert Path(where.strip()).is_relative_to(env_dir)  # the installed copy, not this checkout

    out = run(env_dir / "bin" / "sapo-env", "demo", "--rounds", "2", cwd=tmp_path)
    assert "cumulative reward" in out
