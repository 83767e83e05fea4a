"""The old paths of ``agents``' moved modules (``agents.moved``): each imports the very module at
its new path, warns once naming that path, and leaves the module's own name and spec alone; no
file stands at an old path."""

from __future__ import annotations

import importlib
import importlib.util
import pickle
import sys
import warnings
from pathlib import Path

import pytest

import agents
import agents.sim.simulated_config
import agents.sim.simulated_text
from agents.moved import MOVED, MovedFinder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh():
    """Forget every old path (``sys.modules`` and ``agents``' attributes) before and after."""
    def forget():
        for old in MOVED:
            sys.modules.pop(old, None)
            agents.__dict__.pop(old.rpartition(".")[2], None)

    forget()
    yield
    forget()


def deprecations(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, DeprecationWarning)]


def test_every_new_path_is_a_module_of_agents_and_no_file_stands_at_an_old_one():
    for old, new in MOVED.items():
        spec = importlib.util.find_spec(new)
        assert spec is not None and spec.name == new, new
        assert Path(spec.origin) == ROOT.joinpath(*new.split(".")).with_suffix(".py")
        assert not ROOT.joinpath(*old.split(".")).with_suffix(".py").exists(), old
        assert not ROOT.joinpath(*old.split(".")).is_dir(), old


def test_an_old_path_is_the_module_at_its_new_path(fresh):
    with pytest.warns(DeprecationWarning, match=r"agents\.simulated_config has moved to "
                                                r"agents\.sim\.simulated_config"):
        import agents.simulated_config as old
    from agents.simulated_config import SimulatedLearnerConfig

    assert old is agents.sim.simulated_config is sys.modules["agents.simulated_config"]
    assert SimulatedLearnerConfig is agents.sim.simulated_config.SimulatedLearnerConfig
    assert old.__name__ == old.__spec__.name == "agents.sim.simulated_config"


def test_it_warns_once_and_names_the_importing_line(fresh):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import agents.simulated_text  # noqa: F401
        import agents.simulated_text as again  # noqa: F401
        from agents.simulated_text import parse_completion  # noqa: F401
    warned, = deprecations(caught)
    assert "agents.sim.simulated_text" in str(warned.message) and "0.9.0" in str(warned.message)
    assert Path(warned.filename) == Path(__file__)


def test_an_old_path_as_an_attribute_of_agents(fresh):
    with pytest.warns(DeprecationWarning, match=r"agents\.sim\.injection"):
        module = agents.injection
    assert module is importlib.import_module("agents.sim.injection")
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        agents.nothing_here  # noqa: B018


def test_pickles_name_the_new_path_and_old_pickles_still_load(fresh):
    from agents.sim.simulated_config import SimulatedLearnerConfig

    data = pickle.dumps(SimulatedLearnerConfig, protocol=0)
    assert b"agents.sim.simulated_config\n" in data
    config = SimulatedLearnerConfig(lr=0.5)
    assert pickle.loads(pickle.dumps(config)) == config
    old = data.replace(b"agents.sim.simulated_config\n", b"agents.simulated_config\n")
    with pytest.warns(DeprecationWarning, match=r"agents\.sim\.simulated_config"):
        assert pickle.loads(old) is SimulatedLearnerConfig


def test_reload_reloads_the_module_where_it_lives(fresh):
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("agents.simulated_text")
    reloaded = importlib.reload(agents.sim.simulated_text)
    assert reloaded is old is agents.sim.simulated_text
    assert reloaded.__spec__.name == "agents.sim.simulated_text"
    assert "agents.sim.simulated_text" in sys.modules


def test_the_finder_answers_for_the_table_only():
    finder = MovedFinder()
    assert finder.find_spec("agents.lm.grpo") is None and finder.find_spec("numpy") is None
    assert finder.find_spec("agents.grpo").name == "agents.grpo"
    assert sum(isinstance(f, MovedFinder) for f in sys.meta_path) == 1
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("agents.no_such_module")
