"""The classroom examples run end to end with tiny budgets and save their plot (smoke tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "01_one_round_by_hand.py": ([], "THE BATCH node_0 trains on"),
    "02_isolation_vs_sharing.py": (["--rounds", "4"], "4/4 (sharing)"),
    "03_aha_spreads.py": (["--rounds", "4"], "J=4"),
    "04_too_much_external.py": (["--rounds", "6", "--stubborn", "2"], "2/6"),
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_classroom_script(script, tmp_path):
    pytest.importorskip("matplotlib")
    args, expected = SCRIPTS[script]
    plot = tmp_path / "plot.png"
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "classroom" / script), *args, "--out", str(plot)],
        capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert expected in out
    assert plot.stat().st_size > 0
