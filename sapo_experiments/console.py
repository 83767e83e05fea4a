"""What a harness's command prints when it is done (reproduce, bench-ratio,
format-propagation): the table, the files written and where TensorBoard reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def print_result(result: Any, out: Path, tensorboard: bool = False) -> None:
    """Print ``result.table_markdown``, then ``result.files`` and ``result.seconds``."""
    print(result.table_markdown)
    print(f"Wrote {len(result.files)} files to {out} in {result.seconds:.0f} s:")
    for path in result.files:
        print(f"  {path}")
    if tensorboard:
        print(f"TensorBoard: tensorboard --logdir {Path(out) / 'tensorboard'}")
