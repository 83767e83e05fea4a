"""The package's layers: sapo_env (the env) <- agents <- experiments, never the other way."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("sapo_env", "agents", "experiments")  # each may import only those before it


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
    offenders = {str(p.relative_to(ROOT)): sorted(imported_packages(p) & later)
                 for p in sorted((ROOT / layer).rglob("*.py"))}
    assert {p: bad for p, bad in offenders.items() if bad} == {}


def test_importing_the_env_loads_no_agent():
    code = ("import sys, sapo_env, sapo_env.metrics, sapo_env.tensorboard; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('agents', 'experiments', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
