"""The package's layers: sapo_env (the env) <- agents <- experiments, never the other way."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("sapo_env", "agents", "experiments")  # each may import only those before it
# The one documented exception: sapo_env/meta.py re-exports experiments.meta under the env's
# name (``sapo_env.meta.parallel_env``) and nothing else; ``import sapo_env`` never loads it.
ALIASES = {"sapo_env/meta.py": {"experiments"}}


def imported_packages(path: Path) -> set[str]:
    """Top-level packages a module imports, wherever the import statement stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_a_later_one(layer):
    later = set(LAYERS[LAYERS.index(layer) + 1:])
    offenders = {str(p.relative_to(ROOT)): sorted(
        (imported_packages(p) & later) - ALIASES.get(p.relative_to(ROOT).as_posix(), set()))
        for p in sorted((ROOT / layer).rglob("*.py"))}
    assert {p: bad for p, bad in offenders.items() if bad} == {}


def test_importing_the_env_loads_no_agent():
    code = ("import sys, sapo_env, sapo_env.metrics, sapo_env.tensorboard; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('agents', 'experiments', 'torch') or m == 'sapo_env.meta'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ours that ``path`` imports when it is imported (statements at module level;
    imports inside functions run later and cannot form an import cycle)."""
    found = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from pkg import sub`` imports the submodule; ``from pkg import name`` the package
            subs = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [n for n in subs if n in known] or [node.module]
        found |= {n for n in names if n in known}
    # a module's own packages are imported before it anyway: no edge back to them
    own = module_name(path)
    return {n for n in found if not own.startswith(n + ".")}


def test_no_import_cycles():
    paths = [p for layer in LAYERS for p in (ROOT / layer).rglob("*.py")]
    known = {module_name(p) for p in paths}
    graph = {module_name(p): top_level_imports(p, known) - {module_name(p)} for p in paths}
    visiting, done, cycles = [], set(), []

    def visit(module: str) -> None:
        if module in done:
            return
        if module in visiting:
            cycles.append(visiting[visiting.index(module):] + [module])
            return
        visiting.append(module)
        for dependency in sorted(graph[module]):
            # importing a.b imports package a first
            visit(dependency)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    assert cycles == []


MAX_MODULE_LINES = 420  # "about 400": one concept per module, readable in a sitting


def test_no_module_is_too_long_to_read():
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
               for layer in LAYERS for p in (ROOT / layer).rglob("*.py")}
    assert {p: n for p, n in lengths.items() if n > MAX_MODULE_LINES} == {}
