"""The C allocator of a process that runs a tiny swarm: freed memory kept, not unmapped and
faulted in again at the next step.

A batched tiny swarm allocates and frees blocks of up to tens of MB every step (torch's
tensors). glibc's ``malloc`` by default serves a block above a moving threshold (128 KiB at
first) with ``mmap`` and gives it back with ``munmap`` when freed, and trims the heap's top
once 128 KiB of it is free: the next step then maps fresh zero-filled pages and takes a page
fault on each, system time that grows faster than the swarm. :func:`keep_freed_memory` sets,
through ``mallopt`` (glibc's; where there is none it does nothing and says so):

- ``M_MMAP_THRESHOLD`` = 32 MiB, the most glibc takes: blocks up to it come from the heap;
- ``M_TRIM_THRESHOLD`` = 2 GiB - 1, the most ``mallopt`` takes: freed memory stays;
- ``M_TOP_PAD`` = 256 MiB: the heap grows in large steps.

These are glibc's ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` and
``MALLOC_TOP_PAD_`` environment variables, which act only on a process started with them;
``mallopt`` acts on the process already running (a worker of a process pool, a Ray worker), so
the tiny swarm's factory (``sapo_experiments.tiny_learners``) calls it where the swarm is built
and trained. The process keeps what it has held at its peak (a tiny swarm's step: hundreds of
MB) instead of giving it back between steps. Where memory lies changes nothing computed: runs
are the same bits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger(__name__)

# mallopt's parameters (glibc's malloc.h) and the values set
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = ((M_MMAP_THRESHOLD, 32 * 2**20), (M_TRIM_THRESHOLD, 2**31 - 1),
            (M_TOP_PAD, 256 * 2**20))


def keep_freed_memory(libc: object | None = None) -> bool:
    """Set :data:`SETTINGS` through ``libc.mallopt`` (default: this process's C library);
    True when every call succeeded, False (once logged) where there is no glibc ``mallopt``
    or it refused one."""
    if libc is None:
        libc = _glibc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        logger.info("no glibc mallopt here: the C allocator keeps its defaults")
        return False
    done = all([mallopt(parameter, value) == 1 for parameter, value in SETTINGS])
    if not done:
        logger.warning("mallopt refused a setting: the C allocator may return freed memory")
    return done


def _glibc() -> object | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        libc.gnu_get_libc_version  # noqa: B018 (glibc's own symbol: not musl, not macOS)
    except (OSError, AttributeError):
        return None
    return libc
