"""records/tiny-reproduce/ and records/reproduce/ (the simulated sweep): every folder that commits
its runs' arrays holds one per run of its table, and the per-seed cumulative rewards its
results.md prints are what those arrays give, so a per-seed claim there can be checked from
the repository, and so is its table (sparse-signal/ has its own test,
tests/test_sparse_signal_record.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sapo_experiments.learners import TinyLearners
from sapo_experiments.reproduce.config import BY_LABEL, ReproduceConfig
from sapo_experiments.reproduce.report import cumulative_rewards, format_markdown, summarise
from sapo_experiments.run_files import load_run

RECORDS = Path(__file__).resolve().parents[1] / "records"
FOLDER = RECORDS / "tiny-reproduce"
SWEEPS = sorted(p.parent for p in FOLDER.glob("*/runs") if p.parent.name != "sparse-signal")
SWEEPS.append(RECORDS / "reproduce")


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


def sweep_config(sweep: Path) -> ReproduceConfig:
    """The settings a committed sweep ran with (its summary.json), as a ReproduceConfig."""
    settings = json.loads((sweep / "summary.json").read_text())["settings"]
    tiny = {k: tuple(v) if isinstance(v, list) else v for k, v in settings["tiny"].items()}
    ran = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()
           if k in ("seeds", "base_seed", "rounds", "quick", "learner", "experiments",
                    "protocol", "n_agents", "held_out_every", "held_out_questions", "swarm")}
    return ReproduceConfig(tiny=TinyLearners(**tiny), **ran)


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.name)
def test_the_table_is_what_the_committed_arrays_give(sweep: Path):
    """Each results.md's table and verdict, rebuilt from its run files line for line: run
    files written before the compute arrays (every committed one) print as they always did,
    with no compute table."""
    config = sweep_config(sweep)
    runs = {BY_LABEL[label].label: [load_run(sweep / "runs" / f"{BY_LABEL[label].slug}"
                                              f"_seed{k}.npz") for k in range(config.seeds)]
            for label in config.experiments}
    assert not any("act_cpu_seconds" in r for rs in runs.values() for r in rs)
    table = format_markdown(summarise(config, runs), config)
    assert (sweep / "results.md").read_text().startswith(table)
    assert "Compute per node-round" not in format_markdown(summarise(config, runs), config, runs)
