"""``PoolView``: the pool's groups less one node's, as a read-only sequence that copies nothing;
``CopiedOnRead``: a sequence of copies, made when it is first read.

Every node is shown the pool without its own groups, and the env samples each node's external
groups from the same. A tuple per node would copy the whole pool once a node: memory and time
that grow as the square of the swarm. A view holds the pool's tuple and the few ``(start,
end)`` pieces left once the node's runs are cut out, so making one costs as much as the node
has runs, and reading it costs what is read.

A view is a ``collections.abc.Sequence``: ``len``, indexing (negative too), slicing (a tuple),
iteration, ``in``, ``index`` and ``count``; it equals a tuple or view of the same groups, field
by field and arrays by value (a tuple of groups holding arrays cannot compare itself so);
``view + tuple`` and ``tuple + view`` are tuples, ``tuple(view)`` is a plain copy, and it
pickles and copies as a tuple.

What observations show of the pool is a view of a ``CopiedOnRead`` of the pool's records: a
round's copies of the groups are made when some node first reads the pool (most agents never
do), then shared by every view, whichever node reads it and in which thread.
"""

from __future__ import annotations

import operator
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, chain
from threading import Lock
from typing import Any

import numpy as np

from sapo_env.collection_pause import paused_collection
from sapo_env.types import Group


class CopiedOnRead(Sequence):
    """``copy(record)`` of each of ``records``, all made at the first read of any of them and
    kept: every read returns the same copies. The records must not change while it is read.
    The copies are made together with automatic garbage collection paused, as observations
    are made in a step: made one by one, a read of a big pool would set off the collector's
    passes over the whole process many times."""

    __slots__ = ("_records", "_copy", "_copies", "_lock")

    def __init__(self, records: tuple[Any, ...], copy: Callable[[Any], Any]):
        self._records = records
        self._copy = copy
        self._copies: tuple[Any, ...] | None = None
        self._lock = Lock()  # two threads reading at once get the same copies

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: Any) -> Any:
        return self._copied()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._copied())

    def _copied(self) -> tuple[Any, ...]:
        if self._copies is None:
            with self._lock:
                if self._copies is None:
                    self._copies = _copy_all(self._records, self._copy)
        return self._copies

    def __reduce__(self) -> tuple:
        return tuple, (self._copied(),)


@paused_collection
def _copy_all(records: tuple[Any, ...], copy: Callable[[Any], Any]) -> tuple[Any, ...]:
    return tuple(map(copy, records))


class PoolView(Sequence):
    """``groups`` less the ``(start, end)`` runs ``cut`` (sorted, disjoint)."""

    __slots__ = ("_groups", "_pieces", "_offsets")

    def __init__(self, groups: Sequence[Group], cut: Sequence[tuple[int, int]]):
        pieces, cursor = [], 0
        for start, end in (*cut, (len(groups), len(groups))):
            if start > cursor:
                pieces.append((cursor, start))
            cursor = end
        self._groups = groups
        # tuples of ints, which the garbage collector stops tracking after its first pass
        self._pieces = tuple(pieces)
        #: where each piece starts in the view, and (last) the view's length
        self._offsets = (0, *accumulate(end - start for start, end in pieces))

    def __len__(self) -> int:
        return self._offsets[-1]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        i = operator.index(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("pool view index out of range")
        piece = bisect_right(self._offsets, i) - 1
        return self._groups[self._pieces[piece][0] + i - self._offsets[piece]]

    def __iter__(self) -> Iterator[Group]:
        return chain.from_iterable(self._groups[start:end] for start, end in self._pieces)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (tuple, PoolView)):
            return NotImplemented
        return len(self) == len(other) and all(map(_equal, self, other))

    __hash__ = None  # type: ignore[assignment]  # as a tuple of dicts: unhashable

    def __add__(self, other: Any) -> tuple:
        return tuple(self) + tuple(other) if isinstance(other, (tuple, PoolView)) \
            else NotImplemented

    def __radd__(self, other: Any) -> tuple:
        return tuple(other) + tuple(self) if isinstance(other, tuple) else NotImplemented

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple:
        return tuple, (tuple(self),)


def _equal(a: Any, b: Any) -> bool:
    """Plain data compared by value, arrays too."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) \
            and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(map(_equal, a, b))
    return bool(a == b)
