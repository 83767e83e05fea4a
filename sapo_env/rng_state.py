"""numpy random state as plain data, for checkpoints (``SwarmEnv.state_dict`` and the agents').

A ``numpy.random.Generator`` is saved as its bit generator's state (a dict of ints and strings,
numpy's own format) and a ``SeedSequence`` as the four values that rebuild it; both pickle and
survive a pickle round trip. The ``*_from_state`` functions raise ``ValueError`` naming
``where`` (the field being restored) when the data is not such a state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def generator_state(rng: np.random.Generator) -> dict[str, Any]:
    """The generator's bit-generator state (a new dict: later draws do not change it)."""
    return rng.bit_generator.state


def generator_from_state(state: Any, where: str) -> np.random.Generator:
    """A new PCG64 generator (``numpy.random.default_rng``'s kind) in state ``state``."""
    rng = np.random.Generator(np.random.PCG64(0))
    try:
        rng.bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as error:
        raise ValueError(f"{where}: expected a numpy PCG64 bit-generator state (a dict from "
                         f"rng.bit_generator.state), got {_short(state)} ({error})") from None
    return rng


def seed_sequence_state(seq: np.random.SeedSequence) -> dict[str, Any]:
    """What rebuilds ``seq``, including how many children it has spawned."""
    return {"entropy": seq.entropy, "spawn_key": tuple(seq.spawn_key),
            "pool_size": seq.pool_size, "n_children_spawned": seq.n_children_spawned}


def seed_sequence_from_state(state: Any, where: str) -> np.random.SeedSequence:
    """The ``SeedSequence`` that ``seed_sequence_state`` described."""
    keys = ("entropy", "spawn_key", "pool_size", "n_children_spawned")
    if not isinstance(state, Mapping) or set(state) != set(keys):
        raise ValueError(f"{where}: expected a dict with keys {list(keys)} (a SeedSequence), "
                         f"got {_short(state)}")
    try:
        return np.random.SeedSequence(state["entropy"], spawn_key=tuple(state["spawn_key"]),
                                      pool_size=state["pool_size"],
                                      n_children_spawned=state["n_children_spawned"])
    except (TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"{where}: not a valid SeedSequence state: {error}") from None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
