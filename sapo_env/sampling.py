"""Filters, external-sampling strategies, and the assembly of a node's training set.

All pure functions of their inputs (randomness comes in as a ``numpy.random.Generator``), so
tests and new strategies can call them directly.

- A *filter* decides whether a group may be trained on: ``filter(group) -> keep``.
- A *sampler* draws the external groups: ``sampler(candidates, k, rng) -> chosen``, at most
  ``k`` distinct groups taken from ``candidates``.
- ``sample_weighted`` draws with per-group weights (a source's reputation,
  :mod:`sapo_env.defenses.reputation`) and at most ``max_per_source`` groups from one source
  (``SwarmConfig.max_external_per_source``): the defenses against hostile nodes.
- ``assemble_batch`` picks I local and J external groups and reports any shortfall; it never
  pads a short batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sapo_env.rollouts import has_zero_advantage, stacked_rewards
from sapo_env.types import Group

GroupFilter = Callable[[Group], bool]
ExternalSampler = Callable[[Sequence[Group], int, np.random.Generator], Sequence[Group]]


def keep_all(group: Group) -> bool:
    """The ``"none"`` filter."""
    return True


def keep_informative(group: Group) -> bool:
    """The ``"zero_advantage"`` filter: drop groups whose rewards are all equal."""
    return not has_zero_advantage(group["rewards"])


FILTERS: dict[str, GroupFilter] = {"zero_advantage": keep_informative, "none": keep_all}


def keep_flags(keep: GroupFilter, groups: Sequence[Group]) -> list[bool]:
    """``[bool(keep(g)) for g in groups]``; the ``"zero_advantage"`` filter in one call for
    groups whose rewards stack (:func:`sapo_env.rollouts.stacked_rewards`)."""
    if keep is keep_informative:
        stacked = stacked_rewards(groups)
        if stacked is not None:
            return (~has_zero_advantage(stacked)).tolist()
    return [bool(keep(g)) for g in groups]


def sample_uniform(
    candidates: Sequence[Group], k: int, rng: np.random.Generator
) -> list[Group]:
    """``k`` groups drawn uniformly without replacement (all of them if fewer), in pool order."""
    if k >= len(candidates):
        return list(candidates)
    chosen = np.sort(rng.choice(len(candidates), size=k, replace=False))
    return [candidates[i] for i in chosen]


def sample_weighted(
    candidates: Sequence[Group], k: int, rng: np.random.Generator,
    weights: np.ndarray | None = None, max_per_source: int | None = None,
) -> list[Group]:
    """At most ``k`` distinct groups, in pool order, drawn without replacement with
    probability proportional to ``weights`` (None: equal; weight 0: never), taking at most
    ``max_per_source`` groups from one source (None: no cap). Fewer than ``k`` when the
    candidates with a positive weight, within the caps, run out.

    Weighted sampling without replacement by Efraimidis and Spirakis' keys (2006): each group
    draws ``u ** (1 / w)`` and the largest keys win, so a cap just skips a full source."""
    n = len(candidates)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not (np.isfinite(w).all() and (w >= 0).all()):
        raise ValueError(f"weights must be {n} finite numbers >= 0 (one per candidate)")
    with np.errstate(divide="ignore"):
        keys = np.where(w > 0, np.log1p(-rng.random(n)) / np.where(w > 0, w, 1.0), -np.inf)
    chosen, per_source = [], Counter()
    for i in np.argsort(-keys, kind="stable"):
        if len(chosen) == k or keys[i] == -np.inf:
            break
        source = candidates[i]["source"]
        if max_per_source is None or per_source[source] < max_per_source:
            per_source[source] += 1
            chosen.append(i)
    return [candidates[i] for i in sorted(chosen)]


SAMPLERS: dict[str, ExternalSampler] = {"uniform": sample_uniform}
"""Samplers by name. ``"reputation"`` (``SwarmConfig.external_sampling``) is ``sample_weighted``
with the pool's source reputations, which the env computes each round."""


def get_filter(spec: str | GroupFilter) -> GroupFilter:
    return spec if callable(spec) else FILTERS[spec]


def get_sampler(spec: str | ExternalSampler) -> ExternalSampler:
    return spec if callable(spec) else SAMPLERS[spec]


@dataclass(frozen=True)
class Assembly:
    """A node's training set for one round and how it fell short of what was asked."""

    batch: tuple[Group, ...]
    num_local: int
    num_external: int
    local_shortfall: int
    external_shortfall: int
    rescued: int = 0
    """Own all-fail groups replaced by other nodes' groups on the same question
    (``SwarmConfig.rescue``, :mod:`sapo_env.rescue`); ``num_local`` counts the own groups left."""

    @property
    def mean_reward(self) -> float | None:
        """Mean reward over every completion of the batch, own and external groups alike (what
        genrl's trainer logs as a node's reward); None for an empty batch."""
        rewards = [r for g in self.batch for r in np.asarray(g["rewards"]).tolist()]
        return sum(rewards) / len(rewards) if rewards else None


def assemble_batch(
    node: str,
    own_groups: Sequence[Group],
    external_candidates: Sequence[Group],
    num_local: int,
    num_external: int,
    rng: np.random.Generator,
    sampler: ExternalSampler = sample_uniform,
) -> Assembly:
    """I local groups drawn uniformly from ``own_groups`` and J external ones from candidates.

    ``own_groups`` and ``external_candidates`` come already filtered. Groups in the batch are
    copies marked ``local=True`` or ``local=False``. The caller decides what is a candidate
    (other nodes' groups for the swarm, the node's earlier groups for self-replay); a custom
    sampler's choice is checked to be distinct candidates.
    """
    local = sample_uniform(own_groups, num_local, rng)
    external = list(sampler(external_candidates, num_external, rng)) if num_external else []
    if sampler is not sample_uniform:  # ours is correct by construction; check user code only
        _check_sampled(node, external, external_candidates, num_external)
    batch = tuple({**g, "local": True} for g in local) + tuple(
        {**g, "local": False} for g in external
    )
    return Assembly(
        batch=batch,
        num_local=len(local),
        num_external=len(external),
        local_shortfall=num_local - len(local),
        external_shortfall=num_external - len(external),
    )


def _check_sampled(node: str, chosen: Sequence[Any], candidates: Sequence[Group], k: int) -> None:
    """A custom sampler must return at most k distinct candidates; anything else is a bug."""
    if len(chosen) > k:
        raise ValueError(
            f"external_sampling returned {len(chosen)} groups for {node}, expected at most {k}"
        )
    candidate_ids = {id(g) for g in candidates}
    chosen_ids = [id(g) for g in chosen]
    if len(set(chosen_ids)) != len(chosen_ids) or not candidate_ids.issuperset(chosen_ids):
        raise ValueError(
            f"external_sampling must return distinct groups taken from the candidates it was "
            f"given; for {node} it returned groups that are repeated or not candidates"
        )
