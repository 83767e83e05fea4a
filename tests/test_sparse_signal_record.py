"""records/tiny-reproduce/sparse-signal/: the README's tables are what the committed run arrays
give (analysis.py recomputes them), so a claim there can be checked from the repository."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

FOLDER = Path(__file__).resolve().parents[1] / "records" / "tiny-reproduce" / "sparse-signal"


def analysis():
    spec = importlib.util.spec_from_file_location("sparse_signal_analysis",
                                                  FOLDER / "analysis.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_row_of_the_analysis_tables_is_in_the_readme():
    module = analysis()
    readme = (FOLDER / "README.md").read_text()
    levels, points = module.levels_table()
    rows = [line for table in (levels, module.corrections_table(), module.controls_table(),
                               module.widths_table())
            for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(points) >= 1 and len(rows) >= 3
    missing = [row for row in rows if row not in readme]
    assert not missing, "README.md lacks the rows analysis.py computes:\n" + "\n".join(missing)


def test_each_sweep_folder_holds_the_runs_its_results_table_counts():
    for results in FOLDER.glob("*/results.csv"):
        lines = results.read_text().splitlines()[1:]
        runs = list((results.parent / "runs").glob("*.npz"))
        assert sum(int(line.split(",")[3]) for line in lines) == len(runs), results.parent
