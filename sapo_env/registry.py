"""Registries: named entries, each registered where it is defined.

An extension (an attack, a ratio policy) is one module that registers itself when imported; the
lists, command-line choices and documentation tables that name these extensions read the
registry instead of a list kept by hand. ``Registry`` keeps the entries in the order they were
registered and refuses a name registered from two places. ``NamesView`` and ``TableView`` are
read-only views computed on every read, so that a module constant (``ATTACKS``, ``POLICIES``)
also shows what is registered after it was imported.

Example::

    >>> from sapo_env.registry import Registry
    >>> colours = Registry("colour")
    >>> colours.add("red", {"hex": "#f00"}, place="palette:1")
    {'hex': '#f00'}
    >>> colours.get("red")["hex"]
    '#f00'
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from sapo_env.validation import unknown_names

E = TypeVar("E")
V = TypeVar("V")


def caller_place(depth: int = 2) -> str:
    """Where the code ``depth`` frames up stands, as ``module:line`` (``depth=2``: the caller of
    the function that calls this one)."""
    frame = sys._getframe(depth)
    return f"{frame.f_globals.get('__name__', '?')}:{frame.f_lineno}"


class Registry(Generic[E]):
    """Entries of one kind by name, in registration order.

    Args:
        what: what an entry is, for error messages (``"attack"``).
    """

    def __init__(self, what: str):
        self.what = what
        self._entries: dict[str, E] = {}
        self._places: dict[str, str] = {}

    def add(self, name: str, entry: E, place: str) -> E:
        """Register ``entry`` as ``name``, registered at ``place`` (``module:line``), and return
        it. A name registered again from another place is a ``ValueError`` naming both places;
        from the same place (a module imported twice) the entry is replaced."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.what}'s name must be a non-empty str, got {name!r}")
        if name in self._entries and self._places[name] != place:
            raise ValueError(f"{self.what} {name!r} is registered twice: at "
                             f"{self._places[name]} and at {place}; rename one of them")
        self._entries[name] = entry
        self._places[name] = place
        return entry

    def remove(self, name: str) -> None:
        """Forget ``name`` (a test's throwaway entry, a plugin unloaded)."""
        self.get(name)
        del self._entries[name], self._places[name]

    def get(self, name: str) -> E:
        """The entry registered as ``name``; a ``ValueError`` naming the close ones if none."""
        if name not in self._entries:
            raise ValueError(f"unknown {self.what} {unknown_names([name], self._entries)}; "
                             f"registered: {list(self._entries)}")
        return self._entries[name]

    def place(self, name: str) -> str:
        """Where ``name`` was registered (``module:line``)."""
        self.get(name)
        return self._places[name]

    def values(self) -> tuple[E, ...]:
        """Every entry, in registration order."""
        return tuple(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


class NamesView(Sequence[str]):
    """A read-only sequence of names that ``read()`` computes again on every use: equal to the
    tuple it reads, usable wherever a tuple of names is read (``in``, iteration, ``len``)."""

    def __init__(self, read: Callable[[], Sequence[str]]):
        self._read = read

    def _names(self) -> tuple[str, ...]:
        return tuple(self._read())

    def __getitem__(self, index: Any) -> Any:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self._names() == tuple(other)

    def __hash__(self) -> int:
        return hash(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


class TableView(Mapping[str, V]):
    """A read-only mapping that ``read()`` computes again on every use (see ``NamesView``)."""

    def __init__(self, read: Callable[[], Mapping[str, V]]):
        self._read = read

    def __getitem__(self, name: str) -> V:
        return self._read()[name]

    def __len__(self) -> int:
        return len(self._read())

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._read()))

    def __repr__(self) -> str:
        return repr(dict(self._read()))
