"""The classroom examples run end to end with tiny budgets and save their plot (smoke tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each script a subprocess that trains
ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "01_one_round_by_hand.py": ([], "THE BATCH node_0 trains on"),
    # tiny transformer specialists, warm-started for 2 steps into a temporary cache
    "02_isolation_vs_sharing.py": (["--rounds", "2", "--warm-start-steps", "2"],
                                   "4/4 (sharing) minus 8/0"),
    "03_aha_spreads.py": (["--rounds", "4"], "J=4"),
    "04_too_much_external.py": (["--rounds", "6", "--stubborn", "2"], "2/6"),
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_classroom_script(script, tmp_path):
    pytest.importorskip("matplotlib")
    if script.startswith("02"):
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    args, expected = SCRIPTS[script]
    plot = tmp_path / "plot.png"
    env = {**os.environ, "SAPO_ENV_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "classroom" / script), *args, "--out", str(plot)],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env).stdout
    assert expected in out
    assert plot.stat().st_size > 0
