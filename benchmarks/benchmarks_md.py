"""BENCHMARKS.md: each benchmark owns one ``## Heading`` section and replaces only that one.

Every benchmark ends the same way: it prints its section and, given ``--write``
(``add_write_flag``), replaces that section in BENCHMARKS.md (``publish``)."""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def write_section(section: str, path: Path = BENCHMARKS_MD) -> None:
    """Replace the section whose first line (``## Heading``) ``section`` starts with, or append
    it; every other section is kept as it is."""
    heading = section.split("\n", 1)[0]
    if not heading.startswith("## "):
        raise ValueError(f"a section starts with a '## ' heading, got {heading!r}")
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start = text.find(heading + "\n")
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section.rstrip("\n") + "\n" + ("" if end == -1 else text[end:])
    path.write_text(text)


def add_write_flag(parser: argparse.ArgumentParser, also: str = "") -> None:
    """The ``--write`` flag: without it a benchmark only prints (``also``: what else it writes)."""
    parser.add_argument("--write", action="store_true", help=f"update BENCHMARKS.md{also}")


def publish(section: str, write: bool, path: Path = BENCHMARKS_MD) -> None:
    """Print ``section``; if ``write``, replace its section of ``path`` (``write_section``)."""
    print(section)
    if write:
        write_section(section, path)


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
