"""BENCHMARKS.md: each benchmark owns one ``## Heading`` section and replaces only that one.

Every benchmark ends the same way: it prints its section and, given ``--write``
(``add_write_flag``), replaces that section in BENCHMARKS.md (``publish``). A benchmark with two
forms can give one of them a ``### Heading`` subsection of the section, replaced on its own
(``publish(..., within="## Heading")``), which the other form's rewrite of the section keeps
(``publish(..., keep_subsections=True)``)."""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def write_section(section: str, path: Path = BENCHMARKS_MD, keep_subsections: bool = False
                  ) -> None:
    """Replace the section whose first line (``## Heading``) ``section`` starts with, or append
    it; every other section is kept as it is. ``keep_subsections``: the ``### `` subsections
    the old section holds and ``section`` does not are kept, at its end."""
    heading = section.split("\n", 1)[0]
    if not heading.startswith("## "):
        raise ValueError(f"a section starts with a '## ' heading, got {heading!r}")
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start, end = _span(text, heading)
    if start == -1:
        path.write_text(text.rstrip("\n") + "\n\n" + section)
        return
    if keep_subsections:
        lead, subsections = _split(section)
        titles = {_title(sub) for sub in subsections}
        kept = [sub for sub in _split(text[start:end])[1] if _title(sub) not in titles]
        section = _joined(lead, subsections + kept)
    path.write_text(text[:start] + section.rstrip("\n") + "\n" + text[end:])


def write_subsection(heading: str, subsection: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace the ``### `` subsection ``subsection`` starts with in the section ``heading``
    (``## Heading``), or put it at the section's end; the section's other text is kept. A file
    without the section gets it, holding only ``subsection``."""
    if not subsection.startswith("### "):
        raise ValueError(f"a subsection starts with a '### ' heading, got {_title(subsection)!r}")
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start, end = _span(text, heading)
    if start == -1:
        write_section(f"{heading}\n\n{subsection}", path)
        return
    lead, subsections = _split(text[start:end])
    kept = [sub for sub in subsections if _title(sub) != _title(subsection)]
    path.write_text(text[:start] + _joined(lead, [*kept, subsection]) + text[end:])


def _span(text: str, heading: str) -> tuple[int, int]:
    """Where the section ``heading`` starts in ``text`` and where it ends: at the newline
    before the next ``## `` heading, or the end of ``text`` (-1, -1: no such section)."""
    start = text.find(heading + "\n")
    if start == -1:
        return -1, -1
    end = text.find("\n## ", start + len(heading))
    return start, len(text) if end == -1 else end


def _split(section: str) -> tuple[str, list[str]]:
    """A section's text before its first ``### `` heading, and its ``### `` subsections (each
    from its heading to the next one)."""
    lead, *pieces = ("\n" + section).split("\n### ")
    return lead[1:], ["### " + piece for piece in pieces]


def _title(text: str) -> str:
    return text.split("\n", 1)[0]


def _joined(lead: str, subsections: list[str]) -> str:
    """A section from its lead and subsections, a blank line between them, one newline at the
    end."""
    return "\n\n".join(part.strip("\n") for part in [lead, *subsections]) + "\n"


def add_write_flag(parser: argparse.ArgumentParser, also: str = "") -> None:
    """The ``--write`` flag: without it a benchmark only prints (``also``: what else it writes)."""
    parser.add_argument("--write", action="store_true", help=f"update BENCHMARKS.md{also}")


def publish(section: str, write: bool, path: Path = BENCHMARKS_MD, *,
            within: str | None = None, keep_subsections: bool = False) -> None:
    """Print ``section``; if ``write``, replace its section of ``path`` (``write_section``,
    with ``keep_subsections``), or, given ``within`` (a ``## Heading``), its subsection of that
    section (``write_subsection``)."""
    print(section)
    if write and within is not None:
        write_subsection(within, section, path)
    elif write:
        write_section(section, path, keep_subsections)


def machine() -> str:
    """The processor model, core count and Python version, for a section's first line."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:  # not Linux
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
