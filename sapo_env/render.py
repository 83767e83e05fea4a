"""``render()``'s text, a table of the last round (one line per node that played it), and
``LastRound``, the env's record of that round which the table is made from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sapo_env.config import SwarmConfig
from sapo_env.sampling import Assembly


@dataclass(frozen=True)
class LastRound:
    """The env's record of its last step."""

    round: int
    """The round played."""
    pool_size: int
    """Groups in the shared pool after the round's publication."""
    rewards: Mapping[str, float]
    """The reward of each node that played the round, in node order."""
    num_external: Mapping[str, int]
    """The J in force that round, of every node."""
    assemblies: Mapping[str, Assembly]
    """The training set assembled for each node that played, with its counts."""


def round_table(last_round: LastRound | None, round_: int, live: int, config: SwarmConfig
                ) -> str:
    """The table of ``last_round`` (None before the first step: one line saying so)."""
    if last_round is None:
        return f"round {round_}: {live} nodes, nothing played yet"
    last = last_round
    lines = [f"round {last.round}: pool {last.pool_size} groups, swarm mean reward "
             f"{np.mean(list(last.rewards.values())):.3f}",
             f"{'node':>10} {'reward':>7} {'J':>3} {'answered':>9} {'local':>6} "
             f"{'external':>9} {'short':>6}"]
    for a, reward in last.rewards.items():
        s, j = last.assemblies[a], last.num_external[a]
        lines.append(f"{a:>10} {reward:7.3f} {j:3d} {config.questions_for(j):9d} "
                     f"{s.num_local:6d} {s.num_external:9d} "
                     f"{s.local_shortfall + s.external_shortfall:6d}")
    return "\n".join(lines)
