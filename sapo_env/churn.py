"""Churn: nodes that go offline for a round, leave for good, or join a running swarm.

A real swarm's machines come and go. The env's contract, in PettingZoo's terms:

- **Offline for a round**: a live node's action is ``{"offline": True}`` (``OFFLINE``). It
  answers nothing, publishes nothing and gets an empty training set, so it does not train; its
  questions of the round are dropped unscored and its J stays as it was. Its reward is 0.0 (it
  earned nothing, like a node that answered nothing) and its info is ``{"status": "offline",
  "num_external": J, "generated_completions": 0}``; it stays live and acts again next round.
  The env reads an action of ``None`` the same way (PettingZoo's "no action"), but an agent
  should return ``OFFLINE``: ``None`` is also what an ``act`` that forgot to ``return`` gives,
  so ``sapo_env.runtime.run`` warns once per node whose ``act`` returns it, and stops with an
  error when every node's does in the same round.
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

- **Pending** (asynchronous nodes): a live node's action is ``{"pending": True}`` (``PENDING``):
  it is still answering the questions it holds. Like an offline node it contributes nothing this
  round, does not train, gets reward 0.0 and info ``{"status": "pending", ...}``, but it keeps
  its questions: its next observations carry the same ones (with the pool of the moment), and
  the action that finally answers them is scored against them. Its groups are stamped with the
  round of their questions, so they reach the pool only while that round is inside the pool
  window (``infos[node]["staleness"]`` is the rounds they waited,
  ``infos[node]["stale_unshared"]`` the shared groups too old to publish); the node still trains
  on them. ``sapo_env.runtime.run(..., deadline=...)`` sends it for remote nodes that miss the
  round's deadline.

Every node that played the round normally has ``infos[node]["status"] == "online"``.
``sapo_env.runtime.run`` records a reward only for nodes that played (NaN elsewhere), and only they
learn and reach the callbacks. The schedule of who joins when is part of the config, so churn
keeps a run reproducible from its seed: each node's questions come from its own stream, so
who else is online never changes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from sapo_env.types import NodeInfo

STATUSES = ("online", "offline", "pending", "left", "joined")
"""``infos[node]["status"]`` values (see the module docstring)."""
OFFLINE: Mapping[str, bool] = MappingProxyType({"offline": True})
"""The action of a node that sits this round out (the env reads ``None`` the same way)."""
LEAVE: Mapping[str, bool] = MappingProxyType({"leave": True})
"""The action of a node that leaves the swarm for good."""
PENDING: Mapping[str, bool] = MappingProxyType({"pending": True})
"""The action of a node that has not answered its questions yet and keeps them."""
_MARKERS = {"leave": (LEAVE, "left"), "pending": (PENDING, "pending"),
            "offline": (OFFLINE, "offline")}


def is_offline(action: Any) -> bool:
    """Whether ``action`` sits the round out: exactly ``OFFLINE`` (``{"offline": True}``), or
    ``None``."""
    return action is None or _is_marker(action, "offline")


def is_leave(action: Any) -> bool:
    """Whether ``action`` is exactly ``LEAVE`` (``{"leave": True}``): what the env takes as
    leaving (any other mapping with a ``"leave"`` key is refused, :func:`absence`)."""
    return _is_marker(action, "leave")


def is_pending(action: Any) -> bool:
    """Whether ``action`` is exactly ``PENDING`` (``{"pending": True}``): the node is still
    answering."""
    return _is_marker(action, "pending")


def absence(node: str, action: Any) -> str | None:
    """The status of a node whose ``action`` does not play the round (``"offline"``,
    ``"left"``, ``"pending"``), None for an action that plays (to be parsed as one); a mapping
    with a ``"leave"``, ``"pending"`` or ``"offline"`` key that is not exactly the marker raises
    ``ValueError``. The one definition the env (:func:`split_actions`) and the runner's screen
    of remote nodes share."""
    if action is None:
        return "offline"
    if isinstance(action, Mapping):
        for key, (marker, status) in _MARKERS.items():
            if key in action:
                if not _is_marker(action, key):
                    article = "an" if key == "offline" else "a"
                    raise ValueError(f"{node}: {article} {key} action is exactly "
                                     f"{dict(marker)!r}, got {_short(action)}")
                return status
    return None


def _is_marker(action: Any, key: str) -> bool:
    # Only True itself (or numpy's): {"leave": 1} or {"leave": "yes"} is not a way to leave.
    return isinstance(action, Mapping) and len(action) == 1 and key in action \
        and (action[key] is True or action[key] is np.True_)


def _short(action: Mapping[Any, Any]) -> str:
    """``action`` for an error message, at most 200 characters (it may come from a remote
    node)."""
    text = repr(dict(action))
    return text if len(text) <= 200 else text[:200] + "...}"


def split_actions(actions: Any, live: list[str]) -> tuple[Any, dict[str, str]]:
    """``(playing, absent)``: the actions of the nodes that play this round (to be validated as
    usual), and the live nodes that do not, each with its status (:func:`absence`: a malformed
    leave or pending action raises ``ValueError``). Anything that is not a mapping is passed
    through for the usual validation to reject."""
    if not isinstance(actions, Mapping):
        return actions, {}
    absent = {}
    for a in live:
        status = absence(a, actions.get(a, ...))
        if status is not None:
            absent[a] = status
    return {a: v for a, v in actions.items() if a not in absent}, absent


def joining_at(join_rounds: Mapping[str, int] | None, round_: int) -> set[str]:
    """The nodes that join at ``round_``."""
    return {a for a, r in (join_rounds or {}).items() if r == round_}


def present_at_start(names: list[str], join_rounds: Mapping[str, int] | None) -> list[str]:
    """The live nodes of round 0: all but the late joiners."""
    return [a for a in names if a not in (join_rounds or {})]


def absent_info(status: str, num_external: int) -> NodeInfo:
    """The info of a node that did not play the round (offline, pending, left or just
    joined)."""
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
