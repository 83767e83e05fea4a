"""The transport attacks' names, what ``SwarmConfig.adversaries`` may map a node to, and its
check. The attacks themselves are in ``sapo_env.defenses.transport_attacks``, which draws
questions and so builds on the config; the config reads only these names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

TransportAttack = Literal["forge_rewards", "forge_metadata", "duplicate_spam", "slow_packets",
                          "replay", "flood", "sybil", "held_out", "future_round", "malformed",
                          "impersonation", "framing"]
TRANSPORT_ATTACK_NAMES: tuple[str, ...] = get_args(TransportAttack)
"""Every attack ``SwarmConfig.adversaries`` may name."""


def check_adversaries(adversaries: Any, names: Sequence[str]) -> dict[str, str] | None:
    """``SwarmConfig.adversaries`` validated: known nodes, known transport attacks."""
    if adversaries is None:
        return None
    if not isinstance(adversaries, Mapping):
        raise ValueError(f"adversaries must be a mapping node -> attack, got {adversaries!r}")
    unknown = sorted(set(adversaries) - set(names), key=str)
    attacks = sorted(set(map(str, adversaries.values())) - set(TRANSPORT_ATTACK_NAMES))
    if unknown or attacks:
        raise ValueError(f"adversaries: unknown nodes {unknown} (expected node_0..node_"
                         f"{len(names) - 1}) or attacks {attacks} (expected one of "
                         f"{sorted(TRANSPORT_ATTACK_NAMES)})")
    return dict(adversaries)
