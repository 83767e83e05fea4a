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
