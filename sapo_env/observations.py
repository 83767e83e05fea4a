"""What a node is shown: its observation, built from the run state as read-only copies.

Every node's agent reads its observation in the driver's process, and an observation holds
other nodes' groups (``pool``), the node's training set (``batch``) and its questions. Were
those the env's own records, an agent could rewrite what the pool holds (another node's
rewards), what it trains on next, or a task's config through a question's ``ref``. So every
group and question an observation holds is a copy made when the observation is, and read-only:

- dicts are ``ReadOnlyDict``: a ``dict`` (Gymnasium's ``Dict`` spaces contain it; ``{**group,
  ...}``, ``dict(group)``, pickling and JSON work as with any dict) whose methods that would
  change it raise ``TypeError``; ``dict(x)`` is a plain, writable copy;
- arrays (``rewards``, ``advantages``, a sender's ``logprobs`` and ``token_ids``) are copies
  whose ``writeable`` flag cannot be set again (their memory is a ``bytes`` object);
- lists inside a ``ref``'s config become tuples; strings and numbers cannot change anyway.

Each of the env's records is copied once per call and the copy shared by every view that shows
it (``RoundCopies``): a pooled group by every node's view of the pool (a
``sapo_env.pool_view.PoolView``, no tuple per node; the pool's groups are copied when a node
first reads the pool, as most agents never do), a ref by its question and the groups that
answer it, a task's config by every ref into it. An agent that goes around the guard
(``dict.__setitem__(group, ...)``) changes what others are shown that round, never the env's
state. Whatever an agent does to its observation, the pool, the batches, the
questions dealt and the config stay as they were (tests/test_observation_copies.py).

Example::

    >>> import sapo_env
    >>> env = sapo_env.parallel_env(n=2)
    >>> observations, _ = env.reset(seed=0)
    >>> question = observations["node_0"]["questions"][0]
    >>> question["ref"]["seed"] = 0
    Traceback (most recent call last):
    ...
    TypeError: observations are read-only: change a copy (dict(x), or {**x, key: value})
    >>> {**question, "prompt": "Say hello."}["prompt"]
    'Say hello.'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from sapo_env.config import SwarmConfig
from sapo_env.types import Group, Observation, Question, make_observation

if TYPE_CHECKING:
    from sapo_env.env_state import RunState

# A group's fields that hold a tuple of arrays (one per completion), when its sender sent them.
_ARRAY_TUPLES = ("logprobs", "token_ids")
# Values that are their own copy (most of a ref's and a config's)
_ATOMS = frozenset({str, int, float, bool, type(None)})


class ReadOnlyDict(dict):
    """A ``dict`` that cannot be changed in place (see the module docstring)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("observations are read-only: change a copy (dict(x), or "
                        "{**x, key: value})")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple:  # pickle and copy build it whole, never item by item
        return ReadOnlyDict, (dict(self),)


class RoundCopies:
    """The read-only copies of one call's observations: each record of the env (a group, a
    question, a ref, a task config, an array) is copied once, and every view that shows it
    shares that copy. Plain data only: dicts, lists and tuples, arrays, strings, numbers."""

    def __init__(self) -> None:
        self._copies: dict[int, Any] = {}  # id of the env's record -> its copy
        self._records: list[Any] = []  # the records copied, alive while their ids are keys

    def value(self, value: Any) -> Any:
        """A read-only copy of plain data."""
        copy = self._copies.get(id(value))  # a record copied before (the common case)
        if copy is not None:
            return copy
        if isinstance(value, (dict, np.ndarray)):
            copy = self._copies[id(value)] = self._copy(value)
            self._records.append(value)
            return copy
        if isinstance(value, (list, tuple)):
            return tuple(map(self.value, value))
        return value

    def _copy(self, value: dict | np.ndarray) -> Any:
        if isinstance(value, np.ndarray):
            return _array(value)
        return ReadOnlyDict({k: v if type(v) in _ATOMS else self.value(v)
                             for k, v in value.items()})

    def group(self, group: Group) -> Group:
        """A read-only copy of a group (its completions, a tuple of ``str``, are shared)."""
        copy = ReadOnlyDict(group)
        dict.update(copy, ref=self.value(group["ref"]), rewards=self.value(group["rewards"]),
                    advantages=self.value(group["advantages"]))
        for key in _ARRAY_TUPLES:
            if key in group:
                dict.__setitem__(copy, key, tuple(map(self.value, group[key])))
        return copy  # type: ignore[return-value]

    def question(self, question: Question) -> Question:
        """A read-only copy of a question."""
        return ReadOnlyDict({**question, "ref": self.value(question["ref"])})  # type: ignore


def observe(config: SwarmConfig, run: RunState, round_: int, nodes: Sequence[str]
            ) -> dict[str, Observation]:
    """The observations of ``nodes`` in ``round_``; a node with no questions dealt (one that
    just left) gets none."""
    copies = RoundCopies()
    pool = run.pool.copied_view(copies.group)
    return {
        a: make_observation(
            round=round_, system_prompt=config.system_prompt,
            completions_per_question=config.completions_per_question,
            train_budget=config.train_budget, num_external=run.num_external[a],
            questions=tuple(copies.question(d.question) for d in run.drawn.get(a, ())),
            pool=pool(a), batch=tuple(map(copies.group, run.batches[a])))
        for a in nodes
    }


def _array(array: np.ndarray) -> np.ndarray:
    """A copy that no one can make writeable: its memory is an immutable ``bytes``."""
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)
