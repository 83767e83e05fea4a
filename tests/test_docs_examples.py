"""The Python examples of docs/*.md keep working: every name each one imports exists, and those
that run offline on a CPU in seconds run, shortened to a few rounds (``sapo_env.runtime.run``
given ``rounds=3``). The others need a model hub, a GPU or minutes of warm-start training:
for them the imports are checked."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from functools import partial
from pathlib import Path

import pytest

import sapo_env.runtime

DOCS = Path(__file__).resolve().parents[1] / "docs"

# (page, index of the python block on it) of the examples that run here
RUN = {("agents.md", 0), ("environment.md", 0), ("hostile-nodes.md", 0), ("ratio-policies.md", 0)}


def python_blocks() -> list[tuple[str, int, str]]:
    blocks = []
    for page in sorted(DOCS.glob("*.md")):
        for k, chunk in enumerate(page.read_text().split("```python\n")[1:]):
            blocks.append((page.name, k, chunk.split("```", 1)[0]))
    return blocks


BLOCKS = python_blocks()
IDS = [f"{page}[{k}]" for page, k, _ in BLOCKS]


def test_the_docs_have_examples_and_the_runnable_ones_are_found():
    assert len(BLOCKS) >= 7 and RUN <= {(page, k) for page, k, _ in BLOCKS}


@pytest.mark.parametrize("page,index,code", BLOCKS, ids=IDS)
def test_every_name_a_docs_example_imports_exists(page, index, code):
    try:
        check_imports(page, index, code)
    except ModuleNotFoundError as error:  # an optional extra the tests run without
        if "pip install 'sapo-env[" not in str(error):
            raise
        pytest.skip(str(error))


def check_imports(page: str, index: int, code: str) -> None:
    for node in ast.walk(ast.parse(code, f"{page}[{index}]")):
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(
                    f"{node.module}.{alias.name}"), f"{page}: {node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name != "ray":  # the ray extra: its example needs a cluster or GPUs
                    importlib.import_module(alias.name)


@pytest.mark.parametrize("page,index,code", [b for b in BLOCKS if b[:2] in RUN],
                         ids=[i for b, i in zip(BLOCKS, IDS) if b[:2] in RUN])
def test_the_offline_docs_examples_run(page, index, code, monkeypatch):
    monkeypatch.setattr(sapo_env.runtime, "run", partial(sapo_env.runtime.run, rounds=3,
                                                         progress=False))
    namespace: dict = {}
    exec(compile(code, f"{page}[{index}]", "exec"), namespace)
    if "history" in namespace:
        assert namespace["history"].rounds == 3
