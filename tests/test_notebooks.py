"""The classroom notebooks (examples/classroom/*.ipynb) run, show their figure, and at their
defaults print the verdict their docs quote.

Stories 01, 03 and 04 (simulated learners, about a minute of CPU together) run at their
defaults, so the verdict the README and each script's docstring quote is checked word for word;
02 (tiny transformers, minutes) runs at a tiny budget through the same cells, its numbers
checked against its docs in tests/test_classroom.py. Needs nbclient and ipykernel (the dev
extra).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from classroom_scripts import story as load

pytestmark = pytest.mark.slow  # each notebook a fresh kernel that trains

for _module in ("nbclient", "ipykernel"):
    pytest.importorskip(_module, reason=f"{_module} is not installed, so the classroom "
                        "notebooks cannot run here: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[1]
CLASSROOM = ROOT / "examples" / "classroom"
BUDGETS = {  # parameters each notebook runs with here ({}: its defaults)
    "01_one_round_by_hand": {},
    "02_isolation_vs_sharing": {"rounds": 2, "warm_start_steps": 2, "jobs": 1},
    "03_aha_spreads": {},
    "04_too_much_external": {},
}




def flat(text: str) -> str:
    return " ".join(text.split())


def test_every_story_has_a_notebook_that_imports_it():
    scripts = sorted(p.stem for p in CLASSROOM.glob("0*.py"))
    assert sorted(p.stem for p in CLASSROOM.glob("0*.ipynb")) == scripts == sorted(BUDGETS)
    for name in scripts:
        cells = json.loads((CLASSROOM / f"{name}.ipynb").read_text())["cells"]
        code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        assert f'importlib.import_module("{name}")' in code, f"{name}.ipynb must call {name}.py"


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_notebook(name, tmp_path, monkeypatch):
    monkeypatch.setenv("SAPO_ENV_CACHE", str(tmp_path / "cache"))  # 02's 2-step warm starts
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    runner = load("run_notebooks")
    notebook = runner.execute(name, BUDGETS[name])
    verdicts = [line for line in runner.text_output(notebook).splitlines()
                if line.startswith("Verdict: ")]
    assert len(verdicts) == 1, f"{name} printed {len(verdicts)} verdict lines"
    assert any("image/png" in out.get("data", {}) for cell in notebook.cells
               if cell.cell_type == "code" for out in cell.outputs), f"{name} showed no figure"
    if not BUDGETS[name]:  # at its defaults: the docs quote this verdict word for word
        docs = {"README.md": (CLASSROOM / "README.md").read_text(),
                f"{name}.py": load(name).__doc__}
        for doc, text in docs.items():
            assert flat(verdicts[0]) in flat(text), f"{doc} does not quote {verdicts[0]!r}"


def test_make_notebooks_writes_to_its_folder_and_keeps_the_kernel_quiet(tmp_path, capfd):
    """The executed notebook goes to --out; the tracked notebooks keep their bytes; the
    kernel's stderr (which reaches the terminal) holds no warning about plain-text TCP."""
    tracked = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted(CLASSROOM.glob("*.ipynb"))}
    load("run_notebooks").main(["--out", str(tmp_path), "01_one_round_by_hand"])
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(CLASSROOM.glob("*.ipynb"))} == tracked
    executed = json.loads((tmp_path / "01_one_round_by_hand.ipynb").read_text())
    assert any("image/png" in out.get("data", {}) for cell in executed["cells"]
               for out in cell.get("outputs", []))
    printed = capfd.readouterr()
    assert "01_one_round_by_hand.ipynb: " in printed.out
    assert "without encryption" not in printed.err, printed.err


def test_make_notebooks_refuses_an_unknown_name(capsys):
    with pytest.raises(SystemExit):
        load("run_notebooks").main(["01_one_round"])
    assert "no notebook named ['01_one_round']" in capsys.readouterr().err
