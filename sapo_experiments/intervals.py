"""Printing a mean and its 95% CI so that the words beside it say what the printed numbers show.

A report says "decided", "distinguishable from 8/0" or "rose" from an interval; the reader
checks it against the interval as printed. The two agree only if the interval is printed with
enough decimals to show on which side of the point (0 for a difference, 1 for a ratio) each of
its ends lies, and the verdict reads the printed ends: "+0.9 ± 0.9" beside "decided" (its exact
lower end 0.04) or "0.98 ± 0.02" beside "excludes 1" (its exact upper end 0.997) is a report
that contradicts itself. The bench-ratio and reproduce reports both use these.

    >>> ci_digits(0.936, 0.896)         # +0.9 ± 0.9 would touch 0
    2
    >>> ci_digits(0.979, 0.0177, 2, point=1.0)   # 0.98 ± 0.02 would touch 1
    3
    >>> side_as_printed(0.979, 0.0177, 1.0, 3)
    -1
"""

from __future__ import annotations

import math

MOST_DIGITS = 3  #: the most decimals an interval is printed with (and read at)


def _ends(mean: float, ci: float, digits: int) -> tuple[float, float]:
    shown, half = round(mean, digits), round(ci, digits)
    return round(shown - half, digits), round(shown + half, digits)


def ci_digits(mean: float, ci: float | None, digits: int = 1, point: float = 0.0) -> int:
    """The decimals, ``digits`` or more (at most ``MOST_DIGITS``), at which ``mean ± ci``
    printed shows on which side of ``point`` each end of the interval lies."""
    if ci is None or not math.isfinite(ci):
        return digits
    for d in range(digits, MOST_DIGITS + 1):
        if all(end != point and (end > point) == (exact > point)
               for end, exact in zip(_ends(mean, ci, d), (mean - ci, mean + ci))):
            return d
    return max(digits, MOST_DIGITS)


def side_as_printed(mean: float, ci: float, point: float, digits: int) -> int:
    """Which side of ``point`` the interval ``mean ± ci`` printed with ``digits`` decimals lies
    on: +1 above, -1 below, 0 touching or holding it."""
    lower, upper = _ends(mean, ci, digits)
    return 1 if lower > point else -1 if upper < point else 0


def lies_above_zero(mean: float | None, ci: float | None) -> bool:
    """Whether ``mean ± ci`` lies above 0 as it is printed (with :func:`ci_digits`): a lower
    end that rounds to 0 at ``MOST_DIGITS`` decimals touches 0, and is not above it."""
    if mean is None or ci is None or not math.isfinite(ci):
        return False
    return side_as_printed(mean, ci, 0.0, ci_digits(mean, ci)) == 1
