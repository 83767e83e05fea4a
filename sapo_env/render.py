"""``render()``'s text: a table of the last round, one line per node that played it."""

from __future__ import annotations

from typing import Any

import numpy as np

from sapo_env.config import SwarmConfig


def round_table(last_round: tuple | None, round_: int, live: int, config: SwarmConfig) -> str:
    """``last_round`` is the env's record of its last step (None before the first one):
    (round, pool size, rewards, J per node, assemblies)."""
    if last_round is None:
        return f"round {round_}: {live} nodes, nothing played yet"
    played, pool_size, rewards, num_external, assemblies = last_round
    lines = [f"round {played}: pool {pool_size} groups, swarm mean reward "
             f"{np.mean(list(rewards.values())):.3f}",
             f"{'node':>10} {'reward':>7} {'J':>3} {'answered':>9} {'local':>6} "
             f"{'external':>9} {'short':>6}"]
    for a, reward in rewards.items():
        s: Any = assemblies[a]
        answered = config.questions_for(num_external[a])
        lines.append(f"{a:>10} {reward:7.3f} {num_external[a]:3d} {answered:9d} "
                     f"{s.num_local:6d} {s.num_external:9d} "
                     f"{s.local_shortfall + s.external_shortfall:6d}")
    return "\n".join(lines)
