"""Argument checks shared by the env, its agents and its harnesses, with one error style:
``ValueError("<field> must be <what is allowed>, got <value>")``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


def check_int(name: str, value: Any, minimum: int) -> None:
    """ValueError naming ``name`` unless ``value`` is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def check_fits_budget(owner: str, num_external: int, train_budget: int) -> None:
    """ValueError unless an agent's fixed J fits the env's ``train_budget`` (an agent learns
    the budget only from its first observation)."""
    if num_external > train_budget:
        raise ValueError(f"{owner} num_external={num_external} exceeds the env's "
                         f"train_budget={train_budget}: expected num_external <= {train_budget}")


def unknown_names(unknown: Iterable[str], known: Iterable[str]) -> str:
    """Names that are not among ``known``, for an error message, each with the closest known
    name where one is close (``difflib``): ``'pool_windw' (did you mean 'pool_window'?)``."""
    known = list(known)
    described = []
    for name in sorted(unknown, key=str):
        close = difflib.get_close_matches(str(name), known, n=1)
        described.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ", ".join(described)


def unencodable_at(text: str) -> int | None:
    """Where ``text`` stops being valid Unicode text (a lone surrogate, which no UTF-8 file,
    JSON transport, Parquet table or tokenizer accepts), or None where it is valid."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None
