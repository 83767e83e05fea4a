"""``state_dict()`` / ``load_state_dict(state)`` (torch's names) for agents and ratio policies
whose state is a few attributes: what they have learned and drawn, as plain data, so that a
checkpoint (``sapo_env.runtime.Checkpoint``) resumes them exactly.

A class names its state in ``_state_fields``. ``state_dict`` returns those attributes as plain
values: numpy generators as their bit-generator state, seed sequences as theirs, deques as
lists, arrays and containers copied, so later learning never changes a state already taken.
``load_state_dict`` puts them back as the kind of value each attribute holds now (a generator,
a deque of the same ``maxlen``, an array of the same dtype and dimensions) and raises ``ValueError``
naming the class and the field, changing nothing, when the state does not fit. An attribute not
set yet (a bandit's statistics before its first ``choose``) is saved as None; one that is set
is never None.

Settings given to the constructor are not state: build the object with the same arguments,
then load.

Example::

    >>> from agents import EXP3
    >>> from sapo_env.runtime import plain_data
    >>> observation = {"train_budget": 8, "num_external": 4, "round": 0}
    >>> policy = EXP3(seed=0)
    >>> state = plain_data.decode(plain_data.encode(policy.state_dict()))  # as a checkpoint does
    >>> chosen = [policy.choose(observation) for _ in range(5)]
    >>> again = EXP3(seed=1)                     # another seed: the state replaces it
    >>> again.load_state_dict(state)
    >>> [again.choose(observation) for _ in range(5)] == chosen
    True
"""

from __future__ import annotations

import copy
import numbers
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from sapo_env.rng_state import (
    generator_from_state,
    generator_state,
    seed_sequence_from_state,
    seed_sequence_state,
)


class PlainState:
    """Mixin: ``state_dict`` and ``load_state_dict`` over the attributes in ``_state_fields``."""

    _state_fields: ClassVar[tuple[str, ...]] = ()

    def state_dict(self) -> dict[str, Any]:
        """Everything this object has learned or drawn, as plain data
        (:mod:`sapo_env.runtime.plain_data`)."""
        return {name: plain(getattr(self, name, None)) for name in self._state_fields}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict` of an object built with the same arguments."""
        owner = type(self).__name__
        fields = self._state_fields
        if not isinstance(state, Mapping) or set(state) != set(fields):
            got = sorted(map(str, state)) if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(f"{owner}.load_state_dict: expected a dict with keys "
                             f"{sorted(fields)} ({owner}.state_dict()), got {got}")
        values = {name: live(getattr(self, name, None), state[name],
                             f"{owner} state['{name}']") for name in fields}
        for name, value in values.items():
            setattr(self, name, value)


def plain(value: Any) -> Any:
    """``value`` as plain data: generators and seed sequences by their state, deques as lists,
    everything else copied."""
    if isinstance(value, np.random.Generator):
        return generator_state(value)
    if isinstance(value, np.random.SeedSequence):
        return seed_sequence_state(value)
    if isinstance(value, deque):
        return list(value)
    return copy.deepcopy(value)


def live(current: Any, saved: Any, where: str) -> Any:
    """``saved`` (from :func:`plain`) as the kind of value ``current`` is; ``ValueError``
    naming ``where`` when it cannot be (None for an attribute that is set, an array of other
    dimensions, a value of another type)."""
    if current is not None and saved is None:  # an attribute once set is never None again
        raise ValueError(f"{where} must be a {type(current).__name__}, got None")
    if isinstance(current, np.random.Generator):
        return generator_from_state(saved, where)
    if isinstance(current, np.random.SeedSequence):
        return seed_sequence_from_state(saved, where)
    if isinstance(current, deque):
        if not isinstance(saved, (list, tuple)) or (
                current.maxlen is not None and len(saved) > current.maxlen):
            raise ValueError(f"{where} must be a list of at most {current.maxlen} values, "
                             f"got {saved!r:.80}")
        return deque(copy.deepcopy(saved), maxlen=current.maxlen)
    if isinstance(current, np.ndarray):
        try:
            array = np.array(saved, dtype=current.dtype)
        except (TypeError, ValueError, OverflowError) as error:
            raise ValueError(f"{where} must be an array of {current.dtype}, got "
                             f"{saved!r:.80} ({error})") from None
        if array.ndim != current.ndim:
            raise ValueError(f"{where} must be a {current.ndim}-d array of {current.dtype}, "
                             f"got {saved!r:.80}")
        return array
    both_numbers = isinstance(current, numbers.Real) and isinstance(saved, numbers.Real)
    if current is not None and saved is not None and not both_numbers \
            and not isinstance(saved, type(current)):
        raise ValueError(f"{where} must be a {type(current).__name__}, "
                         f"got {type(saved).__name__}")
    return copy.deepcopy(saved)
