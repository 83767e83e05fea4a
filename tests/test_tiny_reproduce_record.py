"""docs/tiny-reproduce/ and docs/reproduce/ (the simulated sweep): every folder that commits
its runs' arrays holds one per run of its table, and the per-seed cumulative rewards its
results.md prints are what those arrays give, so a per-seed claim there can be checked from
the repository (sparse-signal/ has its own test, tests/test_sparse_signal_record.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sapo_experiments.reproduce.config import BY_LABEL
from sapo_experiments.reproduce.report import cumulative_rewards

DOCS = Path(__file__).resolve().parents[1] / "docs"
FOLDER = DOCS / "tiny-reproduce"
SWEEPS = sorted(p.parent for p in FOLDER.glob("*/runs") if p.parent.name != "sparse-signal")
SWEEPS.append(DOCS / "reproduce")


def printed_per_seed(results_md: str) -> dict[str, list[str]]:
    """The first "Per seed" table of a results.md: configuration -> its printed per-seed sums."""
    table = results_md.split("## Per seed\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in table.splitlines()
            if line.startswith("| ") and "---" not in line]
    header, body = rows[0], rows[1:]
    seeds = sum(cell.strip().startswith("seed ") for cell in header)
    return {cells[0].strip(): [c.strip() for c in cells[1:1 + seeds]] for cells in body}


def test_there_are_sweeps_with_arrays():
    assert {"eight-seeds-rerun", "lr3e-5", "no-clip", "identical-starts", "reproduce"} <= {
        s.name for s in SWEEPS if (s / "runs").is_dir()}


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.name)
def test_the_printed_per_seed_rewards_are_the_arrays(sweep: Path):
    printed = printed_per_seed((sweep / "results.md").read_text())
    runs = sorted((sweep / "runs").glob("*.npz"))
    assert len(runs) == sum(len(v) for v in printed.values()), sweep
    for label, cells in printed.items():
        arrays = []
        for k in range(len(cells)):
            with np.load(sweep / "runs" / f"{BY_LABEL[label].slug}_seed{k}.npz") as run:
                arrays.append({"rewards": run["rewards"]})
        computed = [f"{c:.1f}" for c in cumulative_rewards({label: arrays})[label]]
        assert computed == cells, (sweep.name, label)
