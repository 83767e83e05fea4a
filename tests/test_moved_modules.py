"""The old paths of ``agents``' moved modules (``agents.moved``): each imports the very module at
its new path, warns once naming that path, and leaves the module's own name and spec alone; no
file stands at an old path, and nothing in the repository uses one."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pickle
import re
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


# ------------------------------------------------------------ nothing here uses an old path

SHORT = sorted((old.rpartition(".")[2] for old in MOVED), key=len, reverse=True)
OLD = "|".join(SHORT)
MENTION = re.compile(rf"(?<![\w.])agents\.({OLD})(?!\w)|(?<![\w/])agents/({OLD})\.py")
# the history and the table itself name the old paths, and this test imports them
EXEMPT = {"CHANGELOG.md", "agents/moved.py", "tests/test_moved_modules.py"}
SKIPPED_FOLDERS = {"build", "dist", "node_modules", "__pycache__"}


def our_files() -> list[Path]:
    found = [p for suffix in ("*.py", "*.md", "*.ipynb") for p in ROOT.rglob(suffix)]
    found += [ROOT / "Makefile", ROOT / "pyproject.toml"]
    return sorted(p for p in found if p.is_file()
                  and not any(part.startswith(".") or part in SKIPPED_FOLDERS
                              or part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)
                  and p.relative_to(ROOT).as_posix() not in EXEMPT)


def code_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        return re.sub(r"(?m)^\s*[%!]", "#", code)  # IPython's magics and shell lines
    return path.read_text()


def old_modules_imported_from_agents(code: str) -> list[str]:
    """``from agents import <moved module>``: a module name the dotted search cannot see."""
    return [f"agents.{alias.name}" for node in ast.walk(ast.parse(code))
            if isinstance(node, ast.ImportFrom) and node.module == "agents" and node.level == 0
            for alias in node.names if f"agents.{alias.name}" in MOVED]


def old_paths_in(path: Path) -> list[str]:
    text = path.read_text()
    found = [m.group(0) for m in MENTION.finditer(text)]
    if path.suffix in (".py", ".ipynb"):
        found += old_modules_imported_from_agents(code_of(path))
    return found


def test_the_search_finds_each_kind_of_old_path(tmp_path):
    for name, text in [("a.py", "from agents.grpo import GRPOAgent"),
                       ("a.md", "see ``agents.served.ServedAgent``"),
                       ("a.md", "agents/checkpoints.py"),
                       ("a.py", "from agents import RandomAgent, injection")]:
        (tmp_path / name).write_text(text)
        assert old_paths_in(tmp_path / name) != [], text
    for name, text in [("a.py", "from agents.lm.grpo import GRPOAgent"),
                       ("a.md", "sapo_agents.grpo, agents.grpo_x, agents.tiny.model"),
                       ("a.py", "from agents import RandomAgent")]:
        (tmp_path / name).write_text(text)
        assert old_paths_in(tmp_path / name) == [], text


def test_nothing_in_the_repository_uses_an_old_path():
    files = our_files()
    assert ROOT / "README.md" in files and ROOT / "agents" / "lm" / "grpo.py" in files
    offenders = {p.relative_to(ROOT).as_posix(): found for p in files
                 if (found := old_paths_in(p))}
    assert offenders == {}
