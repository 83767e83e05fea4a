"""docs/bench-ratio/: its results.md (headroom, leaderboard, verdict) is what its committed run
arrays give, every line of it, so the leaderboard can be verified from the repository."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from sapo_experiments.bench_ratio.config import BenchConfig
from sapo_experiments.bench_ratio.report import format_markdown, summarise
from sapo_experiments.run_files import load_run

RECORD = Path(__file__).resolve().parents[1] / "docs" / "bench-ratio"


def seed_order(path: Path) -> tuple[str, int]:
    cell, seed = path.stem.rsplit("_seed", 1)
    return cell, int(seed)


def test_the_committed_leaderboard_is_what_the_committed_arrays_give():
    runs = defaultdict(list)
    for path in sorted((RECORD / "runs").glob("*.npz"), key=seed_order):
        run = load_run(path)
        runs[(run["meta"]["scenario"], run["meta"]["policy"])].append(run)
    config = BenchConfig()  # the defaults the record was made with (its summary.json)
    assert len(runs) == 36 and all(len(rs) == config.seeds for rs in runs.values())
    assert format_markdown(*summarise(config, runs), config) == (
        RECORD / "results.md").read_text()
