"""records/bench-ratio/ (the default scenarios) and records/bench-ratio/other-scenarios/: each
results.md (headroom, leaderboard, verdict, the three scores and their tests) is what its
committed run arrays give, every line of it, so the leaderboard can be verified from the
repository."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.sweep import tables
from sapo_experiments.run_files import load_run

RECORD = Path(__file__).resolve().parents[1] / "records" / "bench-ratio"


def seed_order(path: Path) -> tuple[str, int]:
    cell, seed = path.stem.rsplit("_seed", 1)
    return cell, int(seed)


def runs_in(*folders: Path) -> dict[tuple[str, str], list]:
    """The run files of ``folders`` by (scenario, policy), seeds in order."""
    runs = defaultdict(list)
    for path in sorted((p for f in folders for p in f.glob("*.npz")), key=seed_order):
        run = load_run(path)
        runs[(run["meta"]["scenario"], run["meta"]["policy"])].append(run)
    return runs


@pytest.mark.parametrize("folder", [RECORD, RECORD / "other-scenarios"], ids=lambda p: p.name)
def test_the_committed_leaderboard_is_what_the_committed_arrays_give(folder: Path):
    runs = runs_in(folder / "runs")
    scenarios = json.loads((folder / "summary.json").read_text())["settings"]["scenarios"]
    config = BenchConfig(scenarios=tuple(scenarios))  # otherwise the defaults it was made with
    assert {scenario for scenario, _ in runs} == set(scenarios)
    assert len(runs) == 12 * len(scenarios)  # 11 policies and the oracle
    assert all(len(rs) == config.seeds for rs in runs.values())
    assert tables(config, runs).markdown == (folder / "results.md").read_text()
