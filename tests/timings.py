"""What a sweep's outputs hold that is a timing, not a result: the CPU seconds of act and
learn (``History.act_cpu_seconds``, ``learn_cpu_seconds``) differ from run to run, so tests
that check a sweep's outputs are reproducible compare everything else."""

from __future__ import annotations

import csv
import io
from typing import Any

TIMING_ARRAYS = ("act_cpu_seconds", "learn_cpu_seconds")
"""Run-file arrays (and ``Row`` fields, results.csv columns) that are timings."""


def without_timing_arrays(run: dict[str, Any]) -> dict[str, Any]:
    """A loaded run file's arrays, its meta and timings left out."""
    return {k: v for k, v in run.items() if k != "meta" and k not in TIMING_ARRAYS}


def without_timings_md(text: str) -> str:
    """A results.md with the CPU cells of its compute table (its last two columns) blanked."""
    lines, in_compute = [], False
    for line in text.splitlines():
        if line.startswith("| configuration | completions generated"):
            in_compute = True
        elif not line.startswith("|"):
            in_compute = False
        if in_compute and "---" not in line:
            line = "|".join(line.split("|")[:-3] + [" timing ", " timing ", ""])
        lines.append(line)
    return "\n".join(lines)


def without_timings_csv(text: str) -> list[dict[str, str]]:
    """A results.csv's rows without its timing columns."""
    return [{k: v for k, v in row.items() if k not in TIMING_ARRAYS}
            for row in csv.DictReader(io.StringIO(text))]
