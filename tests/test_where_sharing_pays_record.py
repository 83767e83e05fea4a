"""records/where-sharing-pays/: each regime's results.md is what analysis.py computes from the
committed run arrays, and the readings it rests on (equal generation, the weaker nodes) are
the ones its README fixes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("scipy")

FOLDER = Path(__file__).resolve().parents[1] / "records" / "where-sharing-pays"


@pytest.fixture(scope="module")
def analysis():
    spec = importlib.util.spec_from_file_location("where_sharing_pays", FOLDER / "analysis.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run(rewards, generated, held_out=(0.0,)):
    rewards = np.asarray(rewards, dtype=np.float64)
    return {"rewards": rewards,
            "generated": np.broadcast_to(np.asarray(generated)[:, None], rewards.shape),
            "held_out_scores": np.asarray([held_out] * 2)}


def test_per_completion_reads_each_arm_over_the_same_number_of_completions(analysis):
    # 4 rounds of 16 completions a node: a budget of 32 is the first 2 rounds
    more = run([[0.1, 0.3], [0.5, 0.5], [0.9, 0.9], [0.9, 0.9]], [16, 16, 16, 16])
    assert analysis.per_completion(more, slice(None), 32) == pytest.approx((0.2 + 0.5) / 2)
    # rounds of unequal generation are weighed by what each generated
    uneven = run([[0.0, 0.0], [1.0, 1.0]], [8, 24])
    assert analysis.per_completion(uneven, slice(None), 32) == pytest.approx(0.75)
    assert analysis.budget_of({"a": [more], "b": [uneven]}, ("a", "b"), slice(None)) == 32


def test_cumulative_and_held_out_read_only_the_chosen_nodes(analysis):
    r = run([[1.0, 0.0], [1.0, 0.5]], [8, 8], held_out=(0.5, 0.1))
    assert analysis.cumulative(r, slice(None)) == pytest.approx(0.5 + 0.75)
    assert analysis.cumulative(r, slice(1, None)) == pytest.approx(0.5)
    assert analysis.held_out_final(r, slice(1, None)) == pytest.approx(0.1)


def test_the_primary_comparisons_are_those_the_readme_fixed(analysis):
    readme = (FOLDER / "README.md").read_text()
    for regime in analysis.REGIMES:
        assert f"| `{regime.folder}/` | {regime.primary}" in readme
    strong = next(r for r in analysis.REGIMES if r.folder == "strong-peer")
    assert strong.nodes == slice(1, None)


def test_every_committed_results_md_is_what_the_arrays_give(analysis):
    checked = 0
    for regime in analysis.REGIMES:
        results = FOLDER / regime.folder / "results.md"
        if not (FOLDER / regime.folder / "runs").is_dir():
            assert not results.exists(), f"{results} without its runs"
            continue
        assert results.read_text() == analysis.report(regime), regime.folder
        checked += 1
    if not checked:
        pytest.skip("no regime has committed runs yet")
