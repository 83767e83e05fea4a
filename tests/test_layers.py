"""The package's rooms and the direction of every import between them (docs/architecture.md).

    sapo_env (the env; sapo_env.scoring, sapo_env.defenses are rooms of it)
      <- sapo_env.runtime (running agents in the env)
        <- agents (reference agents)
          <- sapo_experiments (the harnesses and the CLI)

A room may import only the rooms below it; imports inside functions count as much as those at
the top of a module (only those under ``if TYPE_CHECKING:``, which never run, do not), and no
exception is allowed. Inside ``sapo_env`` the modules keep an order of their own
(``SAPO_ENV_ORDER``): its base modules <- scoring <- the config <- tasks <- the pool and its
defenses <- the env <- runtime. No function is longer than ``MAX_FUNCTION_LINES`` and no module
than ``MAX_MODULE_LINES``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sapo_env", "agents", "sapo_experiments")
# each layer may import only those before it; a module belongs to the first prefix it matches
LAYERS = ("sapo_env", "sapo_env.runtime", "agents", "sapo_experiments")


TYPE_CHECKING = {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    return max((layer for layer in LAYERS if module == layer or module.startswith(layer + ".")),
               key=len)


def our_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES
            for p in sorted((ROOT / package).rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Modules of ours that ``path`` imports: every import statement, wherever it stands
    (inside functions too). ``from pkg import sub`` imports the submodule; ``from pkg import
    name`` the package."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):  # imports for type checkers only never run: no dependency
        if isinstance(node, ast.If) and ast.unparse(node.test) in TYPE_CHECKING:
            node.body = []
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            subs = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [n for n in subs if n in known] or [node.module]
        for name in names:  # the deepest module of ours the name lies in
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    own = module_name(path)  # a module's own packages are imported before it anyway
    return {n for n in found if n != own and not own.startswith(n + ".")}


def test_every_module_has_a_layer():
    assert all(layer_of(m) for m in our_modules())


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_a_later_one(layer):
    modules = our_modules()
    later = LAYERS[LAYERS.index(layer) + 1:]
    offenders = {}
    for module, path in modules.items():
        if layer_of(module) != layer:
            continue
        bad = sorted(m for m in imports_of(path, set(modules)) if layer_of(m) in later)
        if bad:
            offenders[module] = bad
    assert offenders == {}


SAPO_ENV_ORDER = {
    "base": ("sapo_env.types", "sapo_env.deprecation", "sapo_env.validation", "sapo_env.extras",
             "sapo_env.rng_state", "sapo_env.sender_logprobs", "sapo_env.churn",
             "sapo_env.collection_pause", "sapo_env.one_at_a_time", "sapo_env.rollouts",
             "sapo_env.sampling", "sapo_env.pool_view", "sapo_env.rescue",
             "sapo_env.registry", "sapo_env.attacks"),
    "scoring": ("sapo_env.scoring",),
    "config": ("sapo_env.task_specs", "sapo_env.config"),
    "tasks": ("sapo_env.tasks",),
    "defenses": ("sapo_env.defenses", "sapo_env.pool"),
    "env": ("sapo_env.render", "sapo_env.observations", "sapo_env.spaces", "sapo_env.actions",
            "sapo_env.env_state", "sapo_env.swarm", "sapo_env"),
    "runtime": ("sapo_env.runtime",),
}
"""The order inside ``sapo_env``: each sub-layer may import only those before it. A name places
that module, or every module of that package (the bare ``sapo_env``, only its ``__init__``):
- base: plain types, validation, pure helpers (advantages, filters and samplers) and the
  registries (named entries; the attacks the config checks names against);
- scoring: answers read, verified and timed against reasoning-gym's datasets;
- config: the question mix and ``SwarmConfig``, built on scoring's extractors and limits;
- tasks: the question streams a config draws from;
- defenses: the pool and the defenses at its door (the packet schema, verification,
  publication, reputation) with the attacks they are tested against;
- env: the ParallelEnv and what it is made of (actions, spaces, observations, state, render);
- runtime: running agents in the env."""

_SUBLAYER = {name: layer for layer, names in SAPO_ENV_ORDER.items() for name in names}


def sublayer_of(module: str) -> str | None:
    """The sub-layer of a ``sapo_env`` module: that of its own name, else of the nearest package
    above it that is named (never the bare ``sapo_env``); None if it is not placed."""
    parts = module.split(".")
    for k in range(len(parts), 1, -1):
        if ".".join(parts[:k]) in _SUBLAYER:
            return _SUBLAYER[".".join(parts[:k])]
    return _SUBLAYER.get(module)


def sapo_env_modules() -> dict[str, Path]:
    return {m: p for m, p in our_modules().items() if m == "sapo_env" or m.startswith("sapo_env.")}


def test_sublayer_of_places_packages_and_modules():
    assert sublayer_of("sapo_env.scoring.guard") == "scoring"
    assert sublayer_of("sapo_env.runtime") == "runtime"
    assert sublayer_of("sapo_env") == "env"
    assert sublayer_of("sapo_env.unplaced") is None  # the bare package places nothing below it


def test_every_sapo_env_module_has_a_sublayer():
    """A new module is placed in the order on purpose, not by default."""
    assert [m for m in sapo_env_modules() if sublayer_of(m) is None] == []


@pytest.mark.parametrize("sublayer", SAPO_ENV_ORDER)
def test_no_sapo_env_sublayer_imports_a_later_one(sublayer):
    modules = sapo_env_modules()
    later = list(SAPO_ENV_ORDER)[list(SAPO_ENV_ORDER).index(sublayer) + 1:]
    offenders = {}
    for module, path in modules.items():
        if sublayer_of(module) != sublayer:
            continue
        bad = sorted(m for m in imports_of(path, set(modules)) if sublayer_of(m) in later)
        if bad:
            offenders[module] = bad
    assert offenders == {}


def test_importing_the_env_loads_no_agent():
    code = ("import sys, sapo_env, sapo_env.runtime.metrics, sapo_env.runtime.tensorboard; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('agents', 'sapo_experiments', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_importing_the_env_loads_no_runtime():
    code = ("import sys, sapo_env; sapo_env.parallel_env(n=2).reset(seed=0); "
            "print(sorted(m for m in sys.modules if m.startswith('sapo_env.runtime')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    visiting, done, cycles = [], set(), []

    def visit(module: str) -> None:
        if module in done:
            return
        if module in visiting:
            cycles.append(visiting[visiting.index(module):] + [module])
            return
        visiting.append(module)
        for dependency in sorted(graph[module]):
            visit(dependency)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
    return cycles


def test_find_cycles_finds_one():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """Not even through an import inside a function: a module that needs a later one at run
    time is a dependency running the wrong way."""
    modules = our_modules()
    graph = {m: imports_of(p, set(modules)) for m, p in modules.items()}
    assert find_cycles(graph) == []


MAX_FUNCTION_LINES = 100  # a function reads in one screen; split it where it does two things
MAX_MODULE_LINES = 700  # a backstop: one concept per module, not a budget to write up to


def function_lengths(source: str) -> dict[str, int]:
    """Each function's length in lines, by its dotted path in the module (``Class.method``,
    ``outer.inner``): from its ``def`` line to its last line, both included. Decorators do not
    count; its signature, docstring, comments, blank lines and nested functions do (a nested
    function also counts on its own)."""
    lengths = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                path = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    lengths[path] = child.end_lineno - child.lineno + 1
                visit(child, path + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def test_function_lengths_run_from_def_to_last_line_without_decorators():
    source = ("@decorator\n@other(1)\ndef f(x):\n    \"\"\"Doc.\"\"\"\n\n    return x\n\n\n"
              "class C:\n    async def g(self):\n        def h():\n            pass\n"
              "        return h\n\n    if True:\n        def k(self): return 1\n")
    assert function_lengths(source) == {"f": 4, "C.g": 4, "C.g.h": 2, "C.k": 1}


def test_no_function_is_too_long_to_read():
    lengths = {f"{p.relative_to(ROOT)}::{name}": n for p in our_modules().values()
               for name, n in function_lengths(p.read_text()).items()}
    assert {f: n for f, n in lengths.items() if n > MAX_FUNCTION_LINES} == {}


def test_no_module_is_too_long_to_read():
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
               for p in our_modules().values()}
    assert {p: n for p, n in lengths.items() if n > MAX_MODULE_LINES} == {}
