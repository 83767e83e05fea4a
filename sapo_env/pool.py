"""The shared pool: groups the nodes published, kept for a window of rounds, up to a capacity.

With ``window=1`` the pool holds only the groups published this round (the paper's synchronous
round); a larger window keeps groups available for later rounds (stale, asynchronous sharing).
When ``capacity`` is set, the oldest groups are evicted first once it is exceeded.

Every node reads the pool without its own groups. Groups are stored in publication order, so a
node's groups form a few contiguous runs; a node's view is the pool with those runs cut out:
a view of the pool's tuple (``sapo_env.pool_view``), never a copy of the pool per node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from itertools import compress
from typing import TYPE_CHECKING, Any

import numpy as np

from sapo_env.defenses.packet_schema import parse_group
from sapo_env.pool_view import CopiedOnRead, PoolView
from sapo_env.rollouts import mean_rewards
from sapo_env.sampling import keep_flags
from sapo_env.types import Group

if TYPE_CHECKING:
    from sapo_env.config import SwarmConfig

BATCH_FLAGS = ("local", "rescue")
"""Keys a group has only inside a node's batch (``sapo_env.types.Group``)."""


class _Runs:
    """A tuple of groups with, per source, the ``(start, end)`` runs its groups occupy."""

    def __init__(self, groups: tuple[Group, ...], rewards: Sequence[float] = ()):
        self.groups = groups
        # prefix sums of the groups' mean rewards: a node's view's total reward in a few slices
        self._reward_prefix = np.concatenate(([0.0], np.cumsum(rewards, dtype=np.float64)))
        found: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, group in enumerate(groups):
            runs = found[group["source"]]
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        # tuples of ints, which the garbage collector stops tracking after its first pass
        self.runs = {source: tuple(runs) for source, runs in found.items()}

    def count_without(self, source: str | None) -> int:
        return len(self.groups) - sum(e - s for s, e in self.runs.get(source, ()))

    def reward_sum_without(self, source: str | None) -> float:
        prefix = self._reward_prefix
        own = sum(prefix[e] - prefix[s] for s, e in self.runs.get(source, ()))
        return float(prefix[-1] - own)

    def without(self, source: str | None) -> tuple[Group, ...] | PoolView:
        """The groups not published by ``source`` (None: all of them, the tuple itself)."""
        runs = self.runs.get(source)
        return PoolView(self.groups, runs) if runs else self.groups


class SharedPool:
    """Published groups, oldest first; the training filter runs once per group, on entry."""

    def __init__(self, window: int, capacity: int | None, keep: Callable[[Group], bool]):
        self.window = window
        self.capacity = capacity
        self._keep = keep
        # the groups, oldest first (``_all.groups``), whether each passed the filter on entry and
        # each one's mean reward: parallel tuples, so that a group is one object, not a tuple of
        # three, for the garbage collector to track
        self._all = _Runs(())
        self._passes: tuple[bool, ...] = ()
        self._means: tuple[float, ...] = ()
        self._passing = _Runs(())

    def in_window(self, group_round: int, round_: int) -> bool:
        """Whether a group stamped ``group_round`` belongs in the pool in round ``round_``."""
        return group_round > round_ - self.window

    def publish(self, round_: int, groups: Sequence[Group]) -> None:
        """Add this round's groups, then evict those outside the window and over capacity."""
        pooled = self._all.groups
        stay = [k for k, g in enumerate(pooled) if self.in_window(g["round"], round_)]
        kept = [pooled[k] for k in stay] + list(groups)
        passes = [self._passes[k] for k in stay] + keep_flags(self._keep, groups)
        means = [self._means[k] for k in stay] + mean_rewards(groups)
        cut = 0 if self.capacity is None else max(0, len(kept) - self.capacity)
        self._set(kept[cut:], passes[cut:], means[cut:])

    def _set(self, groups: Sequence[Group], passes: Sequence[bool], means: Sequence[float]
             ) -> None:
        self._all = _Runs(tuple(groups), means)
        self._passes, self._means = tuple(passes), tuple(means)
        self._passing = _Runs(tuple(compress(groups, passes)), list(compress(means, passes)))

    def state(self) -> tuple:
        """An opaque snapshot for :meth:`restore` (publish replaces, never mutates, the state)."""
        return self._all, self._passes, self._means, self._passing

    def restore(self, state: tuple) -> None:
        self._all, self._passes, self._means, self._passing = state

    def state_dict(self) -> dict[str, Any]:
        """The pool as plain data: its groups, oldest first, and whether each passed the filter
        on entry. The groups are the pool's own read-only records: do not modify them."""
        return {"groups": list(self._all.groups), "passes_filter": list(self._passes)}

    def load_state_dict(self, state: Mapping[str, Any], config: SwarmConfig,
                        where: str = "pool") -> None:
        """Hold exactly the groups of a :meth:`state_dict` taken in an env of ``config``
        (copies, with read-only arrays, each through :func:`restore_group`). A malformed state
        raises ``ValueError`` naming ``where`` and the field, and changes nothing."""
        if not isinstance(state, Mapping) or set(state) != {"groups", "passes_filter"}:
            raise ValueError(f"{where}: expected a dict with keys 'groups' and 'passes_filter' "
                             f"(SharedPool.state_dict), got {_describe(state)}")
        groups, passes = state["groups"], state["passes_filter"]
        if not isinstance(groups, (list, tuple)) or not isinstance(passes, (list, tuple)) \
                or len(groups) != len(passes) or not all(isinstance(k, bool) for k in passes):
            raise ValueError(f"{where}: expected a list of groups and a list of as many bools")
        restored = [restore_group(g, f"{where}['groups'][{i}]", config)
                    for i, g in enumerate(groups)]
        self._set(restored, passes, mean_rewards(restored))

    @property
    def groups(self) -> tuple[Group, ...]:
        return self._all.groups

    def __len__(self) -> int:
        return len(self._all.groups)

    def from_others(self, node: str | None) -> Sequence[Group]:
        """Every group in the pool that ``node`` did not publish (None: all of them)."""
        return self._all.without(node)

    def copied_view(self, copy: Callable[[Group], Group]) -> Callable[[str | None], PoolView]:
        """:meth:`from_others` over ``copy(group)`` of every group, all copied once, at the
        first read of any view: what observations show of the pool, none of its own records."""
        copies, runs = CopiedOnRead(self._all.groups, copy), self._all.runs
        return lambda node: PoolView(copies, runs.get(node, ()))

    def candidates_for(self, node: str | None) -> Sequence[Group]:
        """Groups that pass the filter and that ``node`` did not publish (None: all of them)."""
        return self._passing.without(node)

    def count_for(self, node: str | None, filtered: bool = False) -> int:
        """How many groups ``node`` did not publish, optionally only those passing the filter."""
        return (self._passing if filtered else self._all).count_without(node)

    def mean_reward_for(self, node: str | None, filtered: bool = False) -> float | None:
        """Mean over the groups ``node`` did not publish (optionally only those passing the
        filter) of each group's mean reward; None when there are none."""
        runs = self._passing if filtered else self._all
        count = runs.count_without(node)
        return runs.reward_sum_without(node) / count if count else None


def restore_group(group: Any, where: str, config: SwarmConfig) -> Group:
    """A group record of an env of ``config`` from plain data (a checkpoint), through the
    packet schema's field checks (:func:`sapo_env.defenses.packet_schema.parse_group`): a fresh
    copy, its text fields plain ``str``, its completions a tuple of ``completions_per_question``
    str, its rewards and advantages read-only float32 arrays of as many finite numbers, the
    sender's log-probs if it sent them, its own ``round`` (an int in ``[0, max_rounds)``) and,
    in a node's batch, its bool ``local`` and ``rescue`` flags. ``ValueError`` naming ``where``
    and the field when it is not such a group."""
    if not isinstance(group, Mapping):
        raise ValueError(f"{where}: expected a group (a dict), got {type(group).__name__}")
    flags = {k: group[k] for k in BATCH_FLAGS if k in group}
    wrong = [k for k, flag in flags.items() if type(flag) is not bool]
    if wrong:
        raise ValueError(f"{where}: {wrong[0]} must be a bool, got {flags[wrong[0]]!r:.40}")
    round_ = group.get("round")
    if isinstance(round_, bool) or not isinstance(round_, (int, np.integer)) \
            or not 0 <= round_ < config.max_rounds:
        raise ValueError(f"{where}: round must be an int in [0, {config.max_rounds}) "
                         f"(max_rounds), got {round_!r:.40}")
    try:
        parsed = parse_group({k: v for k, v in group.items() if k not in flags}, int(round_),
                             config.completions_per_question, config.max_completion_chars)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return {**parsed, **flags}  # type: ignore[typeddict-item]


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"a dict with keys {sorted(map(str, value))}"
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__} of shape {shape}" if shape is not None else type(value).__name__
