"""Tiny-learner swarms beyond specialists and one common base: partial specialists on one
task's question space (``TinyLearners(partial_specialists=...)``), one stronger peer
(``strong_nodes``), and the warm-start labels that let a base be evaluated on its part and on
the whole mix (``WarmStartConfig.eval_labels``)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agents.tiny.config import SPECIALIST_TASKS, TinyModelConfig, WarmStartConfig
from sapo_env.config import TaskSpec

ARITHMETIC = SPECIALIST_TASKS["basic_arithmetic"]
PLUS = TaskSpec("basic_arithmetic", 1.0, {**ARITHMETIC.config, "operators": ["+"]})
BOTH = TaskSpec("basic_arithmetic", 1.0, {**ARITHMETIC.config, "operators": ["+", "-"]})


# ------------------------------------------------------------------ eval_labels


def test_eval_labels_evaluate_one_task_at_two_settings_and_target_the_trained_one():
    config = WarmStartConfig(tasks=[PLUS], eval_tasks=[PLUS, BOTH],
                             eval_labels=("plus", "whole mix"), target_accuracy=0.3)
    assert list(config.labelled()) == ["plus", "whole mix"]
    assert config.labelled()["whole mix"] == BOTH
    assert config.targets() == {"plus": 0.3}  # the label whose task is the trained one
    assert json.loads(json.dumps(config.to_dict()))["eval_labels"] == ["plus", "whole mix"]
    assert "eval_labels=('plus', 'whole mix')" in repr(config)


def test_eval_labels_none_leave_the_config_data_and_repr_as_before():
    config = WarmStartConfig()
    assert "eval_labels" not in config.to_dict() and "eval_labels" not in repr(config)
    with pytest.raises(ValueError, match="must name each task once"):
        WarmStartConfig(tasks=[PLUS], eval_tasks=[PLUS, BOTH])


@pytest.mark.parametrize("labels", [("plus",), ("a", "a"), ("a", ""), "ab", ("a", 3)])
def test_eval_labels_must_be_one_distinct_string_per_evaluated_task(labels):
    with pytest.raises(ValueError, match="eval_labels must be 2 distinct non-empty strings"):
        WarmStartConfig(tasks=[PLUS], eval_tasks=[PLUS, BOTH], eval_labels=labels)


def test_a_single_target_needs_an_evaluated_task_equal_to_the_trained_one():
    with pytest.raises(ValueError, match="eval_tasks holds none equal to the training task"):
        WarmStartConfig(tasks=[PLUS], eval_tasks=[BOTH], eval_labels=("mix",),
                        target_accuracy=0.3)
    mapped = WarmStartConfig(tasks=[PLUS], eval_tasks=[BOTH], eval_labels=("mix",),
                             target_accuracy={"mix": 0.2})
    assert mapped.targets() == {"mix": 0.2}


def test_a_labelled_warm_start_reports_accuracy_by_label():
    pytest.importorskip("torch")
    from agents.tiny.warm_start import train

    config = WarmStartConfig(
        tasks=[PLUS], eval_tasks=[PLUS, BOTH], eval_labels=("plus", "whole mix"),
        target_accuracy=None, max_steps=2, batch_size=4, eval_every=2, eval_size=4,
        model=TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                              intermediate_size=64))
    _, _, report = train(config)
    assert set(report["accuracy"]) == {"plus", "whole mix"}


# ------------------------------------------------------------------ the regimes' settings

from sapo_experiments import learners  # noqa: E402
from sapo_experiments.learners import TinyLearners, describe  # noqa: E402
from sapo_experiments.sweep import seeds_of  # noqa: E402

SEEDS = [seeds_of(0, k)[1] for k in range(2)]
PARTIAL = TinyLearners(partial_specialists=("+", "-"), target_accuracy=0.3)
STRONG = TinyLearners(specialties=("basic_arithmetic",), common_base=True, target_accuracy=0.1,
                      strong_nodes=1, strong_target_accuracy=0.5)


@pytest.mark.parametrize("settings, field", [
    (dict(partial_specialists=("+",)), "two or more distinct operators"),
    (dict(partial_specialists=("+", "+")), "two or more distinct operators"),
    (dict(partial_specialists=("+", "%")), "two or more distinct operators"),
    (dict(partial_specialists="+-"), "partial_specialists must be a tuple"),
    (dict(partial_specialists=("+", "-"), common_base=True), "common_base must be False"),
    (dict(partial_specialists=("+", "-"), specialties=("spell_backward",)),
     "specialties does not apply"),
    (dict(strong_nodes=-1), "strong_nodes must be an int >= 0"),
    (dict(strong_nodes=True, common_base=True), "strong_nodes must be an int >= 0"),
    (dict(strong_nodes=1, strong_target_accuracy=0.5), "needs common_base=True"),
    (dict(strong_nodes=1, common_base=True, hidden_sizes=(64, 128),
          strong_target_accuracy=0.5), "one width"),
    (dict(strong_nodes=1, common_base=True), "strong_target_accuracy must be a number above"),
    (dict(strong_nodes=1, common_base=True, target_accuracy=0.3, strong_target_accuracy=0.3),
     r"above target_accuracy \(0.3\)"),
    (dict(strong_nodes=1, common_base=True, strong_target_accuracy=1.5), "at most 1"),
    (dict(strong_target_accuracy=0.5), "needs strong_nodes > 0"),
])
def test_regime_settings_are_checked_on_construction(settings, field):
    with pytest.raises(ValueError, match=field):
        TinyLearners(**settings)


def test_partial_specialists_ask_basic_arithmetic_alone():
    for specialties in (TinyLearners.specialties, ("basic_arithmetic",)):
        tiny = TinyLearners(partial_specialists=["+", "-"], specialties=specialties)
        assert tiny.partial_specialists == ("+", "-")
        assert tiny.specialties == ("basic_arithmetic",)  # what the swarm is asked


def test_a_swarm_needs_a_node_per_part_and_a_weak_node():
    with pytest.raises(ValueError, match="n_agents must be >= 3, got 2"):
        TinyLearners(partial_specialists=("+", "-", "*")).node_kinds(2)
    with pytest.raises(ValueError, match=r"strong_nodes \(1\) must be below the number of nodes"):
        STRONG.node_kinds(1)
    from sapo_experiments.reproduce import ReproduceConfig

    with pytest.raises(ValueError, match=r"strong_nodes \(2\) must be below"):
        ReproduceConfig(learner="tiny", n_agents=2,
                        tiny=dataclasses.replace(STRONG, strong_nodes=2))


def test_node_kinds_deal_parts_round_robin_and_put_the_strong_first():
    assert PARTIAL.node_kinds(5) == ["+ only", "- only", "+ only", "- only", "+ only"]
    assert STRONG.node_kinds(4) == ["strong", "weak", "weak", "weak"]
    assert dataclasses.replace(STRONG, strong_nodes=2).node_kinds(4) == [
        "strong", "strong", "weak", "weak"]


def test_partial_specialists_swarm_is_asked_arithmetic_with_every_part_and_nothing_else():
    settings = PARTIAL.swarm_settings()
    assert settings == {"system_prompt": "", "tasks": [["basic_arithmetic", 1.0, {
        "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
        "operators": ["+", "-"]}]]}
    json.dumps(settings)
    assert STRONG.swarm_settings() == TinyLearners(specialties=("basic_arithmetic",),
                                                   common_base=True).swarm_settings()
    pytest.importorskip("reasoning_gym")
    from sapo_env.config import SwarmConfig

    SwarmConfig(n_agents=2, **settings)  # reasoning-gym takes the operators


def test_partial_bases_one_per_part_and_seed_each_targeted_on_its_part():
    configs = PARTIAL.warm_start_configs(SEEDS)
    assert [c.tasks for c in configs] == [(PLUS,), (dataclasses.replace(PLUS, config={
        **ARITHMETIC.config, "operators": ["-"]}),)] * 2
    assert all(c.eval_tasks[1] == BOTH for c in configs)  # and the whole mix
    assert [c.targets() for c in configs[:2]] == [{"basic_arithmetic (+)": 0.3},
                                                  {"basic_arithmetic (-)": 0.3}]
    assert list(configs[0].labelled()) == ["basic_arithmetic (+)", "basic_arithmetic (+ -)"]
    # a seed's parts share its warm-start seed; seeds differ
    assert configs[0].seed == configs[1].seed == learners.base_seed(SEEDS[0])
    assert configs[2].seed == configs[3].seed != configs[0].seed
    assert PARTIAL.warm_start_configs() == []  # per seed, as a common base
    assert PARTIAL.per_seed() and not TinyLearners().per_seed()


def test_the_strong_base_differs_from_the_weak_one_only_in_its_target():
    configs = STRONG.warm_start_configs(SEEDS)
    assert len(configs) == 4
    for weak, strong in (configs[:2], configs[2:]):
        assert weak.target_accuracy == 0.1 and strong.target_accuracy == 0.5
        assert dataclasses.replace(strong, target_accuracy=0.1) == weak
    plain = TinyLearners(specialties=("basic_arithmetic",), common_base=True,
                         target_accuracy=0.1)
    assert configs[::2] == plain.warm_start_configs(SEEDS)  # the weak: the plain common base
    longer = dataclasses.replace(STRONG, strong_warm_start_steps=1500).warm_start_configs(SEEDS)
    assert [c.max_steps for c in longer] == [600, 1500] * 2 and longer[::2] == configs[::2]
    assert dataclasses.replace(longer[1], max_steps=600) == configs[1]
    with pytest.raises(ValueError, match="strong_warm_start_steps"):
        dataclasses.replace(STRONG, strong_nodes=0, strong_target_accuracy=None,
                            strong_warm_start_steps=1500)
    with pytest.raises(ValueError, match="strong_warm_start_steps"):
        dataclasses.replace(STRONG, strong_warm_start_steps=0)


def test_the_strong_node_starts_from_the_strong_folder(monkeypatch):
    from pathlib import Path

    from agents.tiny import warm_start

    dealt = []
    monkeypatch.setattr(TinyLearners, "warm_starts",
                        lambda self, jobs=1, seeds=(): [Path("weak"), Path("strong")])
    monkeypatch.setattr(warm_start, "tiny_nodes",
                        lambda folders, *args: dealt.append(list(folders)) or [])
    tiny = dataclasses.replace(STRONG, batched=False)
    tiny(["a", "b", "c"], 4, SEEDS[0])
    dataclasses.replace(tiny, strong_nodes=2)(["a", "b", "c"], 4, SEEDS[0])
    assert dealt == [[Path("strong"), Path("weak"), Path("weak")],
                     [Path("strong"), Path("strong"), Path("weak")]]


# ------------------------------------------------------------------ existing regimes unchanged


def test_existing_learners_keep_their_specialist_warm_starts_and_settings_name_runs():
    pytest.importorskip("torch")
    from agents.tiny.warm_start import cache_key

    # the default specialists' cache keys before the regimes existed
    assert [cache_key(c) for c in TinyLearners().warm_start_configs()] == [
        "13357828d17a49f8c642", "565bfc8293de7b8367cd"]
    assert describe(PARTIAL) != describe(dataclasses.replace(PARTIAL, partial_specialists=(
        "-", "+"))) != describe(TinyLearners())
    assert describe(STRONG) != describe(dataclasses.replace(STRONG, strong_target_accuracy=0.6))


def test_committed_common_bases_keep_their_cache_keys():
    """Every base in records/tiny-reproduce/sparse-signal/bases/ is what ``--tiny-common-base``
    builds for its target, width and seed index today: the same key, the same config."""
    pytest.importorskip("torch")
    import re
    from pathlib import Path

    from agents.tiny.warm_start import cache_key

    folder = Path(__file__).parent.parent / "records/tiny-reproduce/sparse-signal/bases"
    reports = sorted(folder.glob("*.json"))
    assert len(reports) >= 30
    for path in reports:
        target, width, k = re.fullmatch(r"target([\d.]+)(?:_width(\d+))?_seed(\d+)",
                                        path.stem).groups()
        tiny = TinyLearners(specialties=("basic_arithmetic",), common_base=True,
                            target_accuracy=float(target), hidden_sizes=(int(width or 128),))
        config = tiny.warm_start_configs([seeds_of(0, int(k))[1]])[0]
        report = json.loads(path.read_text())
        assert cache_key(config) == report["cache_key"], path.name
        assert json.loads(json.dumps(config.to_dict())) == report["config"], path.name


# ------------------------------------------------------------------ command line and plan


def test_the_command_line_builds_each_regime():
    from sapo_experiments.reproduce import cli

    def tiny(*argv):
        return cli.config_from_args(cli.build_parser().parse_args(
            ["--learner", "tiny", *argv])).tiny

    assert tiny("--tiny-partial-specialists", "+", "-").partial_specialists == ("+", "-")
    strong = tiny("--tiny-common-base", "--tiny-target-accuracy", "0.1",
                  "--tiny-strong-nodes", "1", "--tiny-strong-target-accuracy", "0.5")
    assert (strong.strong_nodes, strong.strong_target_accuracy) == (1, 0.5)
    assert tiny() == TinyLearners()
    with pytest.raises(SystemExit):  # argparse: not an operator
        cli.build_parser().parse_args(["--tiny-partial-specialists", "%"])
    with pytest.raises(ValueError, match="needs strong_nodes > 0"):
        tiny("--tiny-strong-target-accuracy", "0.5")
    text = cli.build_parser().format_help()
    assert "--tiny-partial-specialists" in text and "--tiny-strong-target-accuracy" in text


def test_the_plan_names_each_kind_of_node_and_the_warm_starts(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from sapo_experiments.reproduce import ReproduceConfig
    from sapo_experiments.reproduce.plan import plan_text

    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    partial = " ".join(plan_text(ReproduceConfig(
        learner="tiny", tiny=PARTIAL, seeds=2, out=tmp_path)).split())
    assert "nodes 0, 2, 4, 6 warm-started on basic_arithmetic with + only" in partial
    assert "nodes 1, 3, 5, 7 warm-started on basic_arithmetic with - only" in partial
    assert "First, 4 of 4 warm starts (supervised training to 0.3 held-out accuracy on each " \
        "base's part" in partial
    strong = " ".join(plan_text(ReproduceConfig(
        learner="tiny", tiny=STRONG, seeds=2, out=tmp_path)).split())
    assert "node 0 from the common base at target 0.5 (strong)" in strong
    assert "nodes 1, 2, 3, 4, 5, 6, 7 from the common base at target 0.1 (weak)" in strong
    assert "4 of 4 warm starts (supervised training to 0.1 held-out accuracy (0.5 for the " \
        "strong nodes' bases)" in strong


# ------------------------------------------------------------------ a run, end to end


def test_partial_specialists_run_through_reproduce(tmp_path, request, monkeypatch):
    """Two 2-step bases per seed (tmp cache), a 2-node swarm asked + and - questions; the
    results name the kinds."""
    torch = pytest.importorskip("torch")
    from sapo_experiments.reproduce import ReproduceConfig, reproduce

    request.getfixturevalue("one_torch_thread")
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))
    tiny = dataclasses.replace(PARTIAL, warm_start_steps=2, target_accuracy=0.99)
    nodes = tiny(["a", "b"], 0, SEEDS[0])
    plus, minus = (torch.cat([p.detach().flatten() for p in n.model.parameters()])
                   for n in nodes)
    assert not torch.equal(plus, minus)  # a base per part
    config = ReproduceConfig(
        learner="tiny", tiny=tiny, experiments=("8/0", "4/4"), rounds=2, n_agents=2, seeds=1,
        held_out_every=2, held_out_questions=2, jobs=1, tensorboard=False, plots=False,
        progress=False, out=tmp_path / "out", swarm={"completions_per_question": 2})
    result = reproduce(config)
    assert result.runs["4/4"][0]["rewards"].shape == (2, 2)
    text = (tmp_path / "out" / "results.md").read_text()
    assert "partial specialists on basic_arithmetic (+ / - only" in text
    assert "+ only nodes" in text
