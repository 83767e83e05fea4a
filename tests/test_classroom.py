"""The classroom stories (examples/classroom/): what their docs say about the defaults is what
the scripts measured (story 2's runs: the README's table, from which the sentence its docstring
and the README quote is computed), a missing extra answers in one line, and each command line
runs.

The stories themselves run as notebooks in tests/test_notebooks.py (01, 03 and 04 at their
defaults, whose verdicts the docs quote; 02 at a tiny budget); the checks here run in this
process and take seconds.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from classroom_scripts import story

ROOT = Path(__file__).resolve().parents[1]
CLASSROOM = ROOT / "examples" / "classroom"
README = CLASSROOM / "README.md"




def flat(text: str) -> str:
    """Text with its line breaks and runs of spaces made single spaces (docs wrap lines)."""
    return " ".join(text.split())


def extras() -> dict[str, str]:
    """pyproject.toml's extras: name -> the text of its list."""
    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1]
    return dict(re.findall(r"^(\w+) = \[(.*?)\]$", section.split("\n[")[0], re.M | re.S))


def test_the_install_command_of_the_classroom_readme_brings_jupyterlab():
    commands = re.findall(r"`pip install -e \"\.\[([\w,]+)\]\"`", README.read_text())
    assert commands, "examples/classroom/README.md names no `pip install -e \".[...]\"`"
    named = set(commands[0].split(","))
    found = extras()
    assert named <= set(found), f"the README names extras {named - set(found)} that do not exist"
    brought = " ".join(found[name] for name in named)
    assert '"jupyterlab' in brought, f"`.[{commands[0]}]` does not install JupyterLab"
    assert '"matplotlib' in brought or "sapo-env[plot]" in brought or "plot" in named, (
        f"`.[{commands[0]}]` does not install matplotlib (the figures)")


def test_the_notebooks_output_folder_is_ignored_by_git():
    """What `make notebooks` writes by default leaves `git status` empty."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    written = CLASSROOM / "out" / "01_one_round_by_hand.ipynb"
    assert story("run_notebooks").OUT == written.parent
    ignored = subprocess.run(["git", "check-ignore", "-q", str(written)], cwd=ROOT)
    assert ignored.returncode == 0, f"git does not ignore {written.relative_to(ROOT)}"


def measured_at_defaults(readme: str) -> dict[str, dict[str, float]]:
    """Script 2's runs at its defaults, from the README's table after "**What script 2
    printed**": the run's other cells -> setting -> the cumulative reward it printed."""
    lesson = story("02_isolation_vs_sharing")
    settings = {"8/0": lesson.ISOLATED, "control": lesson.CONTROL, "4/4": lesson.SHARING}
    lines = readme.split("**What script 2 printed**", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in itertools.takewhile(lambda line: line.startswith("|"), lines[start:])]
    header, runs = rows[0], rows[2:]
    assert set(settings) <= set(header), f"the table's columns are {header}"
    return {" | ".join(cell for name, cell in zip(header, run) if name not in settings):
            {settings[name]: float(cell) for name, cell in zip(header, run) if name in settings}
            for run in runs}


def test_the_docs_quote_what_script_02_printed_at_its_defaults():
    lesson = story("02_isolation_vs_sharing")
    readme = README.read_text()
    measured = measured_at_defaults(readme)
    assert len(measured) == 3, f"the README's table of script 2 holds {len(measured)} runs"
    claim = flat(lesson.claim_at_defaults(measured))
    assert claim in flat(lesson.__doc__), "the docstring of 02 no longer matches its measurements"
    assert claim in flat(readme), "the README no longer matches 02's measurements"


def test_a_changed_reward_in_the_readme_table_no_longer_matches_the_quoted_claim():
    lesson = story("02_isolation_vs_sharing")
    readme = README.read_text()
    changed = readme.replace("| 8.47 |", "| 8.57 |")
    assert changed != readme
    claim = flat(lesson.claim_at_defaults(measured_at_defaults(changed)))
    assert claim not in flat(lesson.__doc__) and claim not in flat(readme)


def test_the_claim_of_script_02_follows_its_numbers():
    lesson = story("02_isolation_vs_sharing")
    alone, control, sharing = lesson.ISOLATED, lesson.CONTROL, lesson.SHARING
    flat_control = {"a": {alone: 8.0, control: 8.01, sharing: 7.0},
                    "b": {alone: 8.1, control: 8.0, sharing: 7.5}}
    assert lesson.claim_at_defaults(flat_control) == (
        "8/0 8.00-8.10, the control 8.00-8.01, 4/4 7.00-7.50; 4/4 minus 8/0 from -1.00 to "
        "-0.60, the control minus 8/0 from -0.10 to +0.01 (1%-17% of sharing's difference in "
        "size). 4/4 was below 8/0 in every run, the control on either side of 8/0, run by run; "
        "filtering alone stayed small next to it")
    verdict = lesson.verdict({alone: [8.0, 8.2], control: [8.3, 8.4], sharing: [7.5, 7.6]})
    assert verdict[0].endswith("+0.30, +0.20 (above 8/0 under every one of 2 seeds)")
    assert verdict[1].endswith("-0.50, -0.60 (below 8/0 under every one of 2 seeds)")
    assert verdict[2] == ("Verdict: sharing moved the cumulative reward by -0.55 and filtering "
                          "alone by +0.25, 45% of sharing's move in size: filtering alone is not "
                          "negligible next to the sharing effect.")
    assert lesson.verdict({alone: [1.0], control: [1.0], sharing: [1.001]})[-1].endswith(
        "sharing made no difference to two decimals.")


def test_script_02_names_the_extra_when_torch_is_missing(monkeypatch):
    lesson = story("02_isolation_vs_sharing")
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(SystemExit) as exited:
        lesson.main(["--rounds", "1"])
    message = str(exited.value.code)
    assert "pip install 'sapo-env[lm]'" in message and "torch" in message
    assert "\n" not in message
    with pytest.raises(ModuleNotFoundError, match=r"sapo-env\[lm\]"):  # the notebook's call
        lesson.run_settings(rounds=1)


def test_the_verdicts_of_scripts_03_and_04_read_their_numbers():
    spread = story("03_aha_spreads").verdict(
        {0: {"node_0": None, "node_1": None, "node_2": None},
         4: {"node_0": 50, "node_1": 12, "node_2": 30}}, rounds=60)
    assert spread == ("Verdict: in 60 rounds, used 'verify' more than half the time: with J=0, "
                      "0 of the 2 other nodes, node_0 never; with J=4, 2 of the 2 other nodes "
                      "(rounds 12-30), node_0 at round 50.")
    verdict = story("04_too_much_external").verdict
    assert verdict({"4/4": [1.0, 2.0], "2/6": [0.5, 1.0]}).endswith(
        "-0.5, -1.0; 2/6 earned less than 4/4 under every one of 2 seeds.")
    assert verdict({"4/4": [1.0, 2.0], "2/6": [1.5, 1.0]}).endswith(
        "the order changes from seed to seed: these 2 seeds do not decide which setting earns "
        "more.")
    assert "one seed" in verdict({"4/4": [1.0], "2/6": [1.5]})


@pytest.mark.slow
@pytest.mark.parametrize("name, args", [
    ("01_one_round_by_hand", ["--seed", "1"]),
    ("03_aha_spreads", ["--rounds", "4"]),
    ("04_too_much_external", ["--rounds", "6", "--seeds", "2", "--stubborn", "2"]),
])
def test_command_line(name, args, tmp_path, capsys):
    """Each script's command line at a small budget (02's runs in its notebook's test)."""
    plot = tmp_path / "plot.png"
    story(name).main([*args, "--out", str(plot)])
    printed = capsys.readouterr().out
    assert sum(line.startswith("Verdict: ") for line in printed.splitlines()) == 1
    assert plot.stat().st_size > 0
