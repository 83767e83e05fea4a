"""Churn: nodes that go offline for a round, leave for good, or join a running swarm.

A real swarm's machines come and go. The env's contract, in PettingZoo's terms:

- **Offline for a round**: a live node's action is ``None`` (``OFFLINE``). It answers nothing,
  publishes nothing and gets an empty training set, so it does not train; its questions of the
  round are dropped unscored and its J stays as it was. Its reward is 0.0 (it earned nothing,
  like a node that answered nothing) and its info is ``{"status": "offline", "num_external":
  J, "generated_completions": 0}``; it stays live and acts again next round.
- **Leaving**: a live node's action is ``{"leave": True}`` (``LEAVE``). It is terminated:
  reward 0.0, ``terminations[node] = True``, a last observation with no questions and an
  empty batch, info ``{"status": "left", ...}``, and it is gone from ``env.agents``. PettingZoo
  forbids revival: a machine that comes back is a new node (a new name, see joining). The
  groups it published earlier stay in the pool until the pool window drops them, as packets
  already sent would.
- **Joining later**: ``SwarmConfig.join_rounds={"node_8": 50}`` keeps ``node_8`` out of
  ``env.agents`` until round 50 (it is in ``possible_agents`` from the start, as PettingZoo
  requires). It appears in the step that ends round 49: an observation of round 50 (its
  questions, the pool, an empty batch), reward 0.0, ``terminations``/``truncations`` False
  and info ``{"status": "joined", ...}``; from round 50 on it is a node like any other.

Every node that played the round normally has ``infos[node]["status"] == "online"``.
``sapo_env.run`` records a reward only for nodes that played (NaN elsewhere), and only they
learn and reach the callbacks. The schedule of who joins when is part of the config, so churn
keeps a run reproducible from its seed: each node's questions come from its own stream, so
who else is online never changes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

STATUSES = ("online", "offline", "left", "joined")
"""``infos[node]["status"]`` values (see the module docstring)."""
OFFLINE = None
"""The action of a node that sits this round out."""
LEAVE: Mapping[str, bool] = MappingProxyType({"leave": True})
"""The action of a node that leaves the swarm for good."""


def is_leave(action: Any) -> bool:
    """Whether ``action`` asks to leave (a mapping with a ``"leave"`` key; anything else in it
    is an input error raised by :func:`split_actions`)."""
    return isinstance(action, Mapping) and "leave" in action


def split_actions(actions: Any, live: list[str]) -> tuple[Any, list[str], list[str]]:
    """``(playing, offline, leaving)``: the actions of the nodes that play this round (to be
    validated as usual), and the live nodes that sit it out or leave. Anything that is not a
    mapping is passed through for the usual validation to reject."""
    if not isinstance(actions, Mapping):
        return actions, [], []
    offline = [a for a in live if a in actions and actions[a] is OFFLINE]
    leaving = [a for a in live if a in actions and is_leave(actions[a])]
    for a in leaving:
        if dict(actions[a]) != {"leave": True}:
            raise ValueError(f"{a}: a leave action is exactly {{'leave': True}}, got "
                             f"{dict(actions[a])!r}")
    gone = set(offline) | set(leaving)
    return {a: v for a, v in actions.items() if a not in gone}, offline, leaving


def joining_at(join_rounds: Mapping[str, int] | None, round_: int) -> set[str]:
    """The nodes that join at ``round_``."""
    return {a for a, r in (join_rounds or {}).items() if r == round_}


def present_at_start(names: list[str], join_rounds: Mapping[str, int] | None) -> list[str]:
    """The live nodes of round 0: all but the late joiners."""
    return [a for a in names if a not in (join_rounds or {})]


def absent_info(status: str, num_external: int) -> dict[str, Any]:
    """The info of a node that did not play the round (offline, left or just joined)."""
    return {"status": status, "num_external": num_external, "generated_completions": 0}


def check_join_rounds(join_rounds: Any, names: tuple[str, ...], max_rounds: int
                      ) -> dict[str, int] | None:
    """``SwarmConfig.join_rounds`` validated: known nodes, each joining in [1, max_rounds),
    and at least one node present from round 0."""
    if join_rounds is None:
        return None
    if not isinstance(join_rounds, Mapping):
        raise ValueError(f"join_rounds must be a mapping node -> first round, got "
                         f"{join_rounds!r}")
    unknown = sorted(set(join_rounds) - set(names), key=str)
    if unknown:
        raise ValueError(f"join_rounds: unknown nodes {unknown}; expected names node_0..node_"
                         f"{len(names) - 1}")
    for node, r in join_rounds.items():
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r < max_rounds:
            raise ValueError(f"join_rounds[{node!r}] must be an int in [1, {max_rounds}) "
                             f"(max_rounds), got {r!r}")
    if len(join_rounds) == len(names):
        raise ValueError("join_rounds names every node: at least one must be there at round 0")
    return dict(join_rounds)
