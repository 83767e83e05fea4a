"""``TorchRNG``: a private torch random stream for one agent.

``transformers.generate`` and dropout draw from torch's global generators and accept no
``torch.Generator``. A :class:`TorchRNG` holds a CPU state (and the accelerator's, on cuda or
mps) seeded through a ``numpy.random.SeedSequence`` and swaps it in only inside ``scope()``:
every agent gets its own reproducible stream and the caller's global state is left as it was.

Example::

    >>> import torch
    >>> rng = TorchRNG(0, torch.device("cpu"))
    >>> with rng.scope():
    ...     first = torch.rand(1)
    >>> with TorchRNG(0, torch.device("cpu")).scope():
    ...     bool(torch.rand(1) == first)
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import numpy as np
import torch


def torch_seed(seed: int | np.random.SeedSequence) -> int:
    """A 63-bit torch seed drawn from a SeedSequence, so nearby ints give unrelated streams."""
    sequence = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return int(sequence.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


class TorchRNG:
    """A private torch random state (CPU + the accelerator) swapped in only inside ``scope()``."""

    def __init__(self, seed: int | np.random.SeedSequence, device: torch.device):
        value = torch_seed(seed)
        self.device = device
        self.cpu_state = torch.Generator().manual_seed(value).get_state()
        self.accelerator_state: torch.Tensor | None = None
        if device.type in ("cuda", "mps"):
            # Seed the device generator, read its state back, and put the caller's back.
            outer = _get_accelerator_state(device.type, device)
            if device.type == "cuda":
                with torch.cuda.device(device):
                    torch.cuda.manual_seed(value)
            else:
                torch.mps.manual_seed(value)
            self.accelerator_state = _get_accelerator_state(device.type, device)
            _set_accelerator_state(device.type, device, outer)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        kind = self.device.type
        with torch.random.fork_rng(devices=[]):  # the CPU generator
            torch.set_rng_state(self.cpu_state)
            outer = None
            if self.accelerator_state is not None:  # cuda or mps
                outer = _get_accelerator_state(kind, self.device)
                _set_accelerator_state(kind, self.device, self.accelerator_state)
            try:
                yield
            finally:
                self.cpu_state = torch.get_rng_state()
                if outer is not None:
                    self.accelerator_state = _get_accelerator_state(kind, self.device)
                    _set_accelerator_state(kind, self.device, outer)

    def state_dict(self) -> dict[str, torch.Tensor | None]:
        return {"cpu": self.cpu_state.clone(), "accelerator": self.accelerator_state}

    def load_state_dict(self, state: Mapping[str, torch.Tensor | None]) -> None:
        self.cpu_state = state["cpu"].clone()
        if state.get("accelerator") is not None and self.accelerator_state is not None:
            self.accelerator_state = state["accelerator"].clone()


def _get_accelerator_state(kind: str, device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if kind == "cuda" else torch.mps.get_rng_state()


def _set_accelerator_state(kind: str, device: torch.device, state: torch.Tensor) -> None:
    if kind == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.mps.set_rng_state(state)
