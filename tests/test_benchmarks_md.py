"""The benchmarks' shared ending (benchmarks/benchmarks_md.py): a benchmark prints its section
and replaces it in BENCHMARKS.md only when given ``--write``."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def benchmarks_path(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import each other by file name


def test_publish_prints_always_and_writes_only_when_asked(benchmarks_path, tmp_path, capsys):
    from benchmarks_md import publish

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## A\n\nold\n\n## B\n\nkept\n")
    publish("## A\n\nnew\n", write=False, path=path)
    assert capsys.readouterr().out == "## A\n\nnew\n\n"
    assert "old" in path.read_text()
    publish("## A\n\nnew\n", write=True, path=path)
    assert path.read_text() == "# Benchmarks\n\n## A\n\nnew\n\n## B\n\nkept\n"


def test_thread_step_publishes_a_section_under_its_own_heading(benchmarks_path, monkeypatch):
    import thread_step

    published = []
    monkeypatch.setattr(thread_step, "measure", lambda n, rounds, in_thread: {
        "n": n, "thread": in_thread, "wall_ms": 2.0 if in_thread else 1.0, "cpu_ms": 1.0,
        "child_ms": 0.0})
    monkeypatch.setattr(thread_step, "publish", lambda *args: published.append(args))
    thread_step.main(["--sizes", "8", "--write"])
    [(section, write)] = published
    assert write and section.startswith(thread_step.SECTION + "\n\n`python benchmarks/")
    assert "| 8 | worker thread | 2 | 1 | 0 | 2.00x |" in section


def test_a_subsection_is_replaced_on_its_own_and_kept_when_its_section_is_rewritten(
        benchmarks_path, tmp_path, capsys):
    from benchmarks_md import publish

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## A\n\nlead\n\n### Other\n\nkept\n\n## B\n\nB's\n")
    publish("### Two\n\nfirst\n", write=True, path=path, within="## A")
    publish("### Two\n\nsecond\n", write=True, path=path, within="## A")
    assert capsys.readouterr().out == "### Two\n\nfirst\n\n### Two\n\nsecond\n\n"
    assert path.read_text() == ("# Benchmarks\n\n## A\n\nlead\n\n### Other\n\nkept\n\n"
                                "### Two\n\nsecond\n\n## B\n\nB's\n")
    publish("## A\n\nnew lead\n", write=True, path=path, keep_subsections=True)
    assert path.read_text() == ("# Benchmarks\n\n## A\n\nnew lead\n\n### Other\n\nkept\n\n"
                                "### Two\n\nsecond\n\n## B\n\nB's\n")
    publish("## A\n\nalone\n", write=True, path=path)  # by default the section is all replaced
    assert path.read_text() == "# Benchmarks\n\n## A\n\nalone\n\n## B\n\nB's\n"


def test_a_subsection_of_a_missing_section_brings_its_section(benchmarks_path, tmp_path):
    from benchmarks_md import write_subsection

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## B\n\nB's\n")
    write_subsection("## A", "### Two\n\nfirst\n", path)
    assert path.read_text() == "# Benchmarks\n\n## B\n\nB's\n\n## A\n\n### Two\n\nfirst\n"
    with pytest.raises(ValueError, match="'### ' heading"):
        write_subsection("## A", "Two\n", path)
