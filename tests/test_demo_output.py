"""What ``make demo`` (``sapo-env reproduce --learner tiny --quick``) prints: the table led by
the ratio to 8/0, 4/4 against its compute-matched control, the committed tables, a plain line
for a warm start that stopped short of its target, and whole lines instead of progress bars
where the output is not a terminal."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sapo_experiments import run_files
from sapo_experiments.reproduce.config import ReproduceConfig
from sapo_experiments.reproduce.report import format_markdown, headline_markdown, summarise
from sapo_experiments.sweep import SweepResult
from sapo_experiments.sweep_cli import print_result


def fake_runs(rounds=10, nodes=2, seeds=3):
    """8/0 and 4/4 run files: 4/4 earns 0.9 of 8/0 on its own completions, but the batches it
    trains on (received groups included) earn 1.5 of 8/0's."""
    runs = {}
    for label, own, batch in (("8/0", 0.2, 0.2), ("4/4", 0.18, 0.3)):
        runs[label] = [{"rewards": np.full((rounds, nodes), own * (1 + 0.01 * seed)),
                        "batch_rewards": np.full((rounds, nodes), batch * (1 + 0.01 * seed)),
                        "generated": np.full((rounds, nodes), 64 if label == "8/0" else 32),
                        "held_out_rounds": np.zeros(0, dtype=np.int64),
                        "held_out_scores": np.zeros((0, nodes))} for seed in range(seeds)]
    return runs


def table_lines(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("| ")]


def test_the_printed_table_leads_with_the_ratio_to_8_0_and_leaves_the_batch_ratio_out():
    config = ReproduceConfig(learner="tiny", quick=True, rounds=10, seeds=3,
                             experiments=("8/0", "4/4"))
    rows = summarise(config, fake_runs())
    assert rows[1].ratio == pytest.approx(0.9) and rows[1].batch_ratio == pytest.approx(1.5)
    printed = headline_markdown(rows, config)
    header, _, eight, four = table_lines(printed)
    assert header == ("| configuration | ratio to 8/0 | cumulative reward | I | J "
                      "| held-out pass@1 | paper's ratio |")
    assert four.startswith("| 4/4 | 0.90 ± 0.00 | 1.8 ± 0.0 | 4 | 4 | – | 1.95 |")
    assert "1.50" not in printed and "batch ratio" not in header
    # named, below the table, as what it is
    assert "batch ratio (the same ratio of the reward of everything a node trained on" in printed
    assert "not this comparison" in printed
    # results.md keeps the full table, the batch ratio in it
    full_header = table_lines(format_markdown(rows, config))[0]
    assert "| ratio to 8/0 | batch ratio |" in full_header


def with_control(runs, control_reward, seeds=3):
    """``runs`` and a 4/0 arm earning ``control_reward`` a node-round (1% more a seed)."""
    rounds, nodes = runs["8/0"][0]["rewards"].shape
    return runs | {"4/0": [{"rewards": np.full((rounds, nodes), control_reward * (1 + 0.01 * s)),
                            "batch_rewards": np.full((rounds, nodes), control_reward),
                            "generated": np.full((rounds, nodes), 32),
                            "held_out_rounds": np.zeros(0, dtype=np.int64),
                            "held_out_scores": np.zeros((0, nodes))} for s in range(seeds)]}


@pytest.mark.parametrize("control, ratio, said", [
    (0.15, "1.20 ± 0.00", "sharing earned more"),
    (0.20, "0.90 ± 0.00", "sharing earned less"),
])
def test_4_4_is_compared_with_its_compute_matched_control_both_ways(control, ratio, said):
    """Beside the ratio to 8/0, the demo prints 4/4 against 4/0 (equal generation and optimizer
    steps), paired by seed, and says which way it went, whichever way that is."""
    config = ReproduceConfig(learner="tiny", quick=True, rounds=10, seeds=3)
    runs = with_control(fake_runs(), control)
    printed = headline_markdown(summarise(config, runs), config, runs)
    line = next(x for x in printed.splitlines() if x.startswith("At equal generation"))
    assert "4/4 against 4/0" in line and f", {ratio}, paired by seed" in line
    assert line.endswith(f": {said}.")
    assert line in format_markdown(summarise(config, runs), config, runs)


def test_the_compute_matched_line_says_when_it_has_no_ci_or_no_ratio():
    from sapo_experiments.reproduce.report import matched_markdown

    def runs(shared, control):
        return {"4/4": [{"rewards": np.full((5, 2), v)} for v in shared],
                "4/0": [{"rewards": np.full((5, 2), v)} for v in control]}

    assert matched_markdown(runs([0.2], [0.1])).endswith(
        ", 2.00, paired by seed, higher in 1 of 1 seeds: one seed, so no confidence interval.")
    assert matched_markdown(runs([0.2, 0.3], [0.1, 0.0])).endswith(
        ": no ratio, 4/0 earned nothing in a seed.")
    assert matched_markdown(runs([0.2, 0.3], [0.1])) == ""  # not the same seeds


def test_no_compute_matched_line_without_the_control():
    config = ReproduceConfig(learner="tiny", quick=True, rounds=10, seeds=3,
                             experiments=("8/0", "4/4"))
    runs = fake_runs()
    assert "At equal generation" not in headline_markdown(summarise(config, runs), config, runs)


def test_the_command_prints_the_headline_in_place_of_the_table(tmp_path, capsys):
    result = SweepResult(config=SimpleNamespace(out=tmp_path), table_markdown="| full |",
                         printed_markdown="| headline |")
    print_result(result)
    out = capsys.readouterr().out
    assert out.startswith("| headline |\n") and "| full |" not in out
    print_result(SweepResult(config=SimpleNamespace(out=tmp_path), table_markdown="| full |"))
    assert capsys.readouterr().out.startswith("| full |\n")


@dataclass
class FakeRun:
    path: Path

    def save(self) -> Path:
        return self.path


def test_without_a_terminal_each_finished_run_is_a_line_not_a_bar(capfd):
    run_files.run_all(lambda k: FakeRun(Path(f"4-4_seed{k}.npz")), [1, 2], done=1, jobs=1,
                      progress=True)
    err = capfd.readouterr().err
    assert err.splitlines() == ["runs: 2/3 finished (4-4_seed1.npz)",
                                "runs: 3/3 finished (4-4_seed2.npz)"]
    assert "\r" not in err and "\x1b" not in err


# ---------------------------------------------------------------- warm starts short of target

def arithmetic_warm_start(target=0.3):
    pytest.importorskip("torch")
    from agents.tiny.config import SPECIALIST_TASKS, WarmStartConfig

    return WarmStartConfig(tasks=[SPECIALIST_TASKS["basic_arithmetic"]], target_accuracy=target,
                           max_steps=600)


def report(reached: bool, accuracy: float) -> dict:
    return {"reached": reached, "steps": 600, "accuracy": {"basic_arithmetic": accuracy}}


def test_a_warm_start_short_of_its_target_says_what_it_reached():
    from agents.tiny.warm_start import short_of_target

    config = arithmetic_warm_start()
    assert short_of_target(config, report(False, 0.21)) == (
        "warm start basic_arithmetic stopped at its 600-step cap short of its target: held-out "
        "accuracy basic_arithmetic 0.21 (target 0.3); it is used as it is")
    assert short_of_target(config, report(True, 0.31)) is None
    assert short_of_target(arithmetic_warm_start(None), report(False, 0.21)) is None


def test_the_sweep_prints_the_line_for_a_cached_warm_start(tmp_path, monkeypatch, capsys):
    from agents.tiny.warm_start import REPORT_FILE, cache_path
    from sapo_experiments.tiny_learners import warm_starts

    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path))
    short, reached = arithmetic_warm_start(0.3), arithmetic_warm_start(0.2)
    for config, accuracy in ((short, 0.21), (reached, 0.21)):
        cache_path(config).mkdir(parents=True)
        (cache_path(config) / REPORT_FILE).write_text(
            json.dumps(report(accuracy >= config.target_accuracy, accuracy)))
    assert warm_starts([short, reached, short], progress=False) == [
        cache_path(short), cache_path(reached), cache_path(short)]
    assert capsys.readouterr().out == ""  # quiet unless asked
    warm_starts([short, reached, short], progress=True)
    assert capsys.readouterr().out.splitlines() == [
        "warm start basic_arithmetic stopped at its 600-step cap short of its target: held-out "
        "accuracy basic_arithmetic 0.21 (target 0.3); it is used as it is"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_demo_ends_with_the_committed_tables_it_names():
    """``make committed`` (the end of ``make demo``) prints the committed tiny sweep's table and
    the three regimes' compute-matched comparisons from the committed reports: an edit that
    moves either table out of awk's reach prints a heading over nothing, and fails here."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([shutil.which("make"), "-s", "committed"], cwd=root, check=True,
                         capture_output=True, text=True, timeout=60).stdout
    first, second = out.split("== NOT this run")[1:]
    assert "| configuration | I | J |" in first and "| 4/4 | 4 | 4 |" in first
    rows = [line for line in second.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| regime | complementarity | 4/4 - 8/0 (per round) | 4/4 - 4/0")
    assert [r.split(" | ")[0] for r in rows[2:]] == [
        "| partial specialists", "| one stronger peer (the weaker seven)", "| a common base"]
