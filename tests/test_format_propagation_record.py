"""records/format-propagation/tiny-rerun/: its results.md is what its committed run arrays give,
every line of it, so the table and its checks can be verified from the repository."""

from __future__ import annotations

import json
from pathlib import Path

from sapo_experiments.format_propagation.config import CONDITIONS, FormatConfig, TinyNodes
from sapo_experiments.format_propagation.report import format_markdown, summarise
from sapo_experiments.run_files import load_run

RECORD = Path(__file__).resolve().parents[1] / "records" / "format-propagation" / "tiny-rerun"


def test_the_committed_table_is_what_the_committed_arrays_give():
    settings = json.loads((RECORD / "summary.json").read_text())["settings"]
    seeds = settings["seeds"]
    runs = {c.label: [load_run(RECORD / "runs" / f"{c.slug}_seed{k}.npz") for k in range(seeds)]
            for c in CONDITIONS}
    assert len(list((RECORD / "runs").glob("*.npz"))) == seeds * len(CONDITIONS)
    config = FormatConfig(tiny=TinyNodes(), lm_nodes=settings["lm_nodes"],
                          rounds=settings["rounds"], seeds=seeds)
    assert format_markdown(summarise(runs), config) == (RECORD / "results.md").read_text()
