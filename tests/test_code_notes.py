"""Docstrings and comments state contracts: no issue number, date or machine name in the code or
the tests (the history is in CHANGELOG.md and the commits, the figures in BENCHMARKS.md, where a
method comes from in docs/provenance.md).

Every docstring (a string standing alone as a statement: module, class, function and attribute
docstrings) and every comment of ``sapo_env``, ``agents``, ``sapo_experiments``, ``benchmarks``,
``examples`` and ``tests`` is read, and so is each code cell of a notebook (its IPython magics
left out); string values the code uses (a test's data, a regex) are not, nor a notebook's
markdown cells and outputs, which are documentation (the examples' measured times are in their
READMEs and docs/).
"""

from __future__ import annotations

import ast
import functools
import io
import json
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sapo_env", "agents", "sapo_experiments", "benchmarks", "examples", "tests")
MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
          "December")
NOTES = {
    "an issue number": re.compile(r"\bissues? ?#?\d+|(?:^|[^\w&/])#\d{2,}\b", re.IGNORECASE),
    "a date": re.compile(rf"\b20\d\d-\d\d-\d\d\b|\b(?:{MONTHS}) (?:\d{{1,2}}, )?20\d\d\b"),
    "a machine": re.compile(r"\bEPYC\b|\bXeon\b|\b\d+-core\b|\bthis VM\b|\b\d+-CPU VM\b"),
}
ALLOWED: dict[tuple[str, str], str] = {}
"""(path, the line's text) -> why it must stay. Empty: nothing needs to."""


def prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring line of ``source``."""
    lines = [(t.start[0], t.string.lstrip("#"))
             for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            lines += [(node.lineno + i, text)
                      for i, text in enumerate(node.value.value.splitlines())]
    return sorted(lines)


def notes_in(source: str) -> list[tuple[int, str, str]]:
    """(line, what, text) of each line of prose in ``source`` that holds a note."""
    return [(n, what, text.strip()) for n, text in prose(source)
            for what, pattern in NOTES.items() if pattern.search(text)]


def code_cells(notebook: str) -> list[str]:
    """The source of each code cell of a notebook (its JSON text), with every line of an IPython
    magic or shell escape (``%``, ``!``) made blank, so that the cell parses as Python."""
    return ["".join("\n" if line.lstrip().startswith(("%", "!")) else line
                    for line in "".join(cell["source"]).splitlines(keepends=True))
            for cell in json.loads(notebook)["cells"] if cell["cell_type"] == "code"]


def sources(path: Path) -> list[tuple[str, str]]:
    """(where, source) of the Python in ``path``: the module, or each code cell of a notebook."""
    where = str(path.relative_to(ROOT))
    if path.suffix == ".ipynb":
        return [(f"{where}, code cell {i}", code)
                for i, code in enumerate(code_cells(path.read_text()), 1)]
    return [(where, path.read_text())]


@functools.cache
def notes_in_the_code() -> tuple[tuple[str, int, str, str], ...]:
    """(path, line, what, text) of every note in the packages' modules and notebooks."""
    paths = sorted(p for package in PACKAGES for pattern in ("*.py", "*.ipynb")
                   for p in (ROOT / package).rglob(pattern))
    return tuple((where, *note) for p in paths for where, source in sources(p)
                 for note in notes_in(source))


def test_no_docstring_or_comment_holds_an_issue_number_a_date_or_a_machine():
    found = [f"{path}:{n}: {what}: {text}" for path, n, what, text in notes_in_the_code()
             if (path, text) not in ALLOWED]
    assert found == [], "\n".join(found)


def test_every_allowed_note_is_still_there():
    """An allow-list entry whose line is gone is removed with it."""
    assert set(ALLOWED) <= {(path, text) for path, _, _, text in notes_in_the_code()}


N = 33  # the samples' issue number, put in when they are built: this file names none


@pytest.mark.parametrize("source, what", [
    (f'"""Issue {N}: the step was slow."""', "an issue number"),
    (f"x = 1  # see #{N} for why", "an issue number"),
    (f"class A:\n    y = 2\n    \"\"\"Fixed in issue #{N + 8}.\"\"\"", "an issue number"),
    ('def f():\n    """Measured 2026-12-05."""', "a date"),
    ("# as of December 2026", "a date"),
    ('"""On a 2-core AMD EPYC at load 4."""', "a machine"),
    ("# 40 s on this VM", "a machine"),
])
def test_the_scan_finds_each_kind_of_note(source, what):
    assert [w for _, w, _ in notes_in(source)] == [what]


def test_the_scan_leaves_code_values_and_plain_prose_alone():
    source = '''
COLOR = "#1f77b4"  # matplotlib's first colour
STAMP = "2020-01-01"
PATTERN = r"issue \\d+"


def f():
    """Element #0 of each row; 12 cores' worth of work; rounds 20-40."""
'''
    assert notes_in(source) == []


def test_the_scan_reads_a_notebooks_code_cells_and_not_its_markdown():
    notebook = json.dumps({"cells": [
        {"cell_type": "markdown", "source": ["Took 40 s on this VM, 2026-12-05."]},
        {"cell_type": "code", "source": ["%matplotlib inline\n", "x = 1  # 40 s on this VM\n"],
         "outputs": [{"text": "2026-12-05"}]},
        {"cell_type": "code", "source": ["!pip install sapo-env\n", "y = 2\n"]},
    ]})
    cells = code_cells(notebook)
    assert cells == ["\nx = 1  # 40 s on this VM\n", "\ny = 2\n"]
    assert [notes_in(cell) for cell in cells] == [[(2, "a machine", "40 s on this VM")], []]
