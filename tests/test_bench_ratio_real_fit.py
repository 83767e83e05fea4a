"""records/bench-ratio-real/fit.json: the simulator's fit to the real track. Its real side is
what the committed runs give, and its best point, run again, predicts what it says it did."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from sapo_experiments.bench_ratio.scores import generation_budget, per_seed_scores
from sapo_experiments.reproduce.report import mean_ci

RECORD = Path(__file__).resolve().parents[1] / "records" / "bench-ratio-real"
SEEDS = list(range(12))


def fit_sim():
    spec = importlib.util.spec_from_file_location("fit_sim", RECORD / "fit_sim.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def judged(fit: dict) -> dict[str, dict]:
    return {p["what"]: p for p in fit["predictions"] if "sim" in p and "ci" in p}


def test_the_fits_real_side_is_what_the_committed_runs_give():
    fit, module = json.loads((RECORD / "fit.json").read_text()), fit_sim()
    real = {lab: module.real_runs(RECORD / "runs", lab, SEEDS) for lab in module.FIXED}
    for lab in module.TARGETS:
        assert np.allclose(fit["targets"][lab], module.blocks(real[lab]), atol=1e-4)
    budget = generation_budget([r for lab in module.FIXED for r in real[lab]])
    scores = {lab: per_seed_scores(real[lab], budget) for lab in module.FIXED}
    for lab in module.FIXED:
        mean, ci = mean_ci(scores[lab]["per_round"])
        entry = judged(fit)[f"{lab} per round"]
        assert (entry["real"], entry["ci"]) == (round(mean, 4), round(ci, 4))
    order = sorted(module.FIXED, key=lambda lab: -np.mean(scores[lab]["at_budget"]))
    assert [p for p in fit["predictions"] if p["what"].endswith("at_budget")][0]["real"] == order


@pytest.mark.slow  # 24 simulated runs of 200 rounds
def test_the_fits_best_point_predicts_what_it_recorded():
    fit, module = json.loads((RECORD / "fit.json").read_text()), fit_sim()
    best = {**fit["best"], "strategy_quality": tuple(fit["best"]["strategy_quality"])}
    for lab in module.TARGETS:
        runs = [module.simulate(best, lab, k) for k in SEEDS]
        per_round = [np.nanmean(r["rewards"], axis=1).sum() for r in runs]
        assert round(float(np.mean(per_round)), 4) == judged(fit)[f"{lab} per round"]["sim"]
