"""Argument checks shared by the env, its agents and its harnesses, with one error style:
``ValueError("<field> must be <what is allowed>, got <value>")``.
"""

from __future__ import annotations

from typing import Any


def check_int(name: str, value: Any, minimum: int) -> None:
    """ValueError naming ``name`` unless ``value`` is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
