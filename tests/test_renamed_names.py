"""Public names renamed for the glossary (docs/architecture.md) still work for one release: the
old name gives the very object of the new one, with a ``DeprecationWarning`` that names the new
name (``sapo_env.deprecation``); the new names warn of nothing."""

from __future__ import annotations

import doctest
import importlib
import sys
import warnings

import pytest

from sapo_env.deprecation import REMOVED_IN, renamed

RENAMED = [  # (module, old name, new name)
    ("agents", "ReplayAgent", "PlaybackAgent"),
    ("agents.scripted.replay", "ReplayAgent", "PlaybackAgent"),
    ("sapo_experiments.reproduce", "Experiment", "Condition"),
    ("sapo_experiments.reproduce", "EXPERIMENTS", "CONDITIONS"),
    ("sapo_experiments.reproduce.config", "Experiment", "Condition"),
    ("sapo_experiments.reproduce.config", "EXPERIMENTS", "CONDITIONS"),
    ("sapo_experiments.attack", "Cell", "ConditionResult"),
    ("sapo_experiments.attack.report", "Cell", "ConditionResult"),
]


@pytest.mark.parametrize("module, old, new", RENAMED)
def test_an_old_name_gives_the_new_object_with_a_deprecation_warning(module, old, new):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is now {module}\.{new}; "
                                                rf"the old name will stop working in sapo-env "
                                                rf"{REMOVED_IN}") as caught:
        value = getattr(mod, old)
    assert value is getattr(mod, new)
    assert caught[0].filename == __file__  # the warning points at the code that used the name


@pytest.mark.parametrize("module, old, new", RENAMED)
def test_the_new_names_are_exported_and_warn_of_nothing(module, old, new):
    mod = importlib.import_module(module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        getattr(mod, new)
    if hasattr(mod, "__all__"):
        assert new in mod.__all__ and old not in mod.__all__


def test_from_import_of_an_old_name_warns_too():
    with pytest.warns(DeprecationWarning, match="agents.ReplayAgent is now agents.PlaybackAgent"):
        from agents import ReplayAgent
    from agents import PlaybackAgent
    assert ReplayAgent is PlaybackAgent


def test_any_other_missing_name_is_still_an_attribute_error():
    import agents
    import sapo_experiments.reproduce as reproduce

    with pytest.raises(AttributeError, match="module 'agents' has no attribute 'NoSuchAgent'"):
        agents.NoSuchAgent  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'Scenario'"):
        reproduce.Scenario  # noqa: B018
    lookup = renamed("agents", {"Old": "New"})
    with pytest.raises(AttributeError):
        lookup("Other")


def test_the_helpers_docstring_example_runs():
    import sapo_env.deprecation

    try:
        result = doctest.testmod(sapo_env.deprecation)
    finally:
        sys.modules.pop("demo", None)
    assert result.attempted > 0 and result.failed == 0
