"""The version the package reports is the changelog's newest release: pyproject.toml's
``version``, ``sapo_env.__version__`` and ``sapo-env --version`` all name the first release
heading of CHANGELOG.md (``## X.Y.Z``, optionally dated ``## X.Y.Z (YYYY-MM-DD)``), and work not
yet released sits above it under ``## Unreleased``, the only other top-level heading there."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

import sapo_env
from sapo_experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
RELEASE = re.compile(r"(\d+\.\d+\.\d+)(?: \((\d{4}-\d{2}-\d{2})\))?")


def headings() -> list[str]:
    """CHANGELOG.md's second-level headings, in order."""
    return re.findall(r"^## (.+?)\s*$", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)


def newest_release() -> str:
    """The version of the changelog's first release heading (its date, if any, checked)."""
    for heading in headings():
        if match := RELEASE.fullmatch(heading):
            if match.group(2):
                datetime.date.fromisoformat(match.group(2))  # a real date
            return match.group(1)
    raise AssertionError("CHANGELOG.md has no release heading '## X.Y.Z'")


def test_unreleased_work_sits_above_the_newest_release():
    first_release = next(k for k, h in enumerate(headings()) if RELEASE.fullmatch(h))
    assert headings()[:first_release] in ([], ["Unreleased"]), (
        f"above the newest release CHANGELOG.md has {headings()[:first_release]}; expected "
        "nothing or '## Unreleased'")


def test_the_package_reports_the_changelogs_newest_release(capsys):
    pyproject = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(),
                          re.MULTILINE).group(1)
    with pytest.raises(SystemExit):
        main(["--version"])
    reported = capsys.readouterr().out.split()
    assert (pyproject, sapo_env.__version__, reported) == (
        newest_release(), newest_release(), ["sapo-env", newest_release()])
