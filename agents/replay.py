"""``ReplayAgent``: a node that publishes a recorded node's groups again, from a pool dataset.

A pool dataset (:mod:`sapo_env.runtime.pool_dataset`) holds every packet a run shared. A
node's action is its completions for the questions it was dealt, so replaying a recorded node
means answering the same questions with the completions it recorded: ``ReplayAgent(dataset,
"node_3")`` looks each dealt question up by its ``ref`` (task, config, seed, index) among
``node_3``'s recorded groups and answers with their completions (and the log-probabilities and
token ids it sent, where every question of the round has them), shares them, and asks for the
J ``node_3`` had in force in its next recorded round. The env scores the completions again, so
rewards and advantages are the verifier's, not the dataset's.

**The contract.** In a swarm of the same ``SwarmConfig`` reset with the same seed, the node in
``node_3``'s place is dealt the same questions in the same rounds (each node's questions come
from its own streams, whatever the others do, so the other nodes may be new learners), as long
as its J is the same each round: the replay then publishes exactly what ``node_3`` published,
and with the others unchanged the run is the recorded one (``tests/test_pool_dataset.py``).
Only shared groups are in a pool dataset: a question ``node_3`` answered but did not share (or
shared after the pool window had passed) has no recorded completions, and nor has any question
of a run with another seed, config or J.

**When a dealt question has no recorded group** (``on_missing``): ``"raise"`` (the default)
raises ``KeyError`` naming the node, the round and the question, since the replay is not the
recorded run any more; ``"skip"`` answers it with L empty completions (which score 0) and
shares nothing for it, counting it in ``missing``: the replay then publishes the recorded
groups of the questions it is dealt and nothing else, e.g. to seed a swarm of another config
with a recorded node's text where the questions happen to meet. A round in which the node
shared nothing leaves its next J unknown: the replay keeps the J in force.

It never learns. Which groups count as the node's: every recorded packet it sent under its own
name that the schema could read (accepted or refused by the verifier; the first of several
for one question); a transport adversary's forged packets are the env's doing, which a swarm
with the same ``adversaries`` does again.

Example::

    from agents.replay import ReplayAgent
    from sapo_env.runtime.pool_dataset import load_pool_dataset

    pool = load_pool_dataset("pool")                        # written by PoolDatasetCallback
    replayed = ReplayAgent(pool, "node_3")                  # node_3's groups, round by round
    nodes = {**learners, "node_3": replayed}                # the others: anyone
    sapo_env.runtime.run(env, nodes, seed=0)                # the recorded run's config and seed
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sapo_env.types import Action, Group, Observation

OnMissing = Literal["raise", "skip"]
ON_MISSING = ("raise", "skip")


@dataclass(frozen=True)
class RecordedGroup:
    """What a replay needs of one recorded group."""

    round: int  #: the round it was sent in
    completions: tuple[str, ...]
    logprobs: tuple[tuple[float, ...], ...] | None
    token_ids: tuple[tuple[int, ...], ...] | None


def question_key(ref: Mapping[str, Any]) -> tuple:
    """A question by its ref: ``(task, config as canonical JSON, seed, index)``; a dataset's
    ``ref["config"]`` is that JSON already."""
    config = ref["config"]
    if not isinstance(config, str):
        config = json.dumps(dict(config), sort_keys=True)
    return ref["task"], config, int(ref["seed"]), int(ref["index"])


class ReplayAgent:
    """Publishes ``sender``'s recorded groups (see the module docstring).

    Args:
        rows: the pool dataset (a ``datasets.Dataset``, or any iterable of its rows as dicts).
        sender: the recorded node to replay.
        on_missing: ``"raise"`` or ``"skip"``: what a dealt question without a recorded group
            does.
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]], sender: str,
                 on_missing: OnMissing = "raise"):
        if on_missing not in ON_MISSING:
            raise ValueError(f"on_missing must be one of {ON_MISSING}, got {on_missing!r}")
        self.sender = sender
        self.on_missing = on_missing
        self.missing = 0
        """Dealt questions answered with nothing (``on_missing="skip"``) so far."""
        self._groups: dict[tuple, RecordedGroup] = {}
        self._num_external: dict[int, int] = {}  # round -> J in force, as recorded
        for row in rows:
            if row["sender"] != sender or row["source"] != sender or row["ref"] is None:
                continue
            if row["num_external"] is not None:
                self._num_external.setdefault(row["round"], row["num_external"])
            self._groups.setdefault(question_key(row["ref"]), RecordedGroup(
                row["round"], tuple(row["completions"]), _nested(row.get("logprobs")),
                _nested(row.get("token_ids"))))
        if not self._groups:
            raise ValueError(f"the dataset holds no readable group sent by {sender!r}")

    @classmethod
    def from_parquet(cls, path: str | Path, sender: str, on_missing: OnMissing = "raise"
                     ) -> ReplayAgent:
        """Replay ``sender`` from a ``PoolDatasetCallback``'s folder (needs ``datasets``)."""
        from sapo_env.runtime.pool_dataset import load_pool_dataset

        return cls(load_pool_dataset(path), sender, on_missing)

    @property
    def rounds(self) -> list[int]:
        """The rounds in which the node's recorded groups were sent."""
        return sorted({g.round for g in self._groups.values()})

    def act(self, observation: Observation) -> Action:
        L, round_ = observation["completions_per_question"], observation["round"]
        found: list[RecordedGroup | None] = []
        for question in observation["questions"]:
            group = self._groups.get(question_key(question["ref"]))
            if group is not None and len(group.completions) != L:
                raise ValueError(f"{self.sender}: the recorded group of question "
                                 f"{question['id']} has {len(group.completions)} completions, "
                                 f"the env expects {L} (completions_per_question)")
            if group is None:
                if self.on_missing == "raise":
                    raise KeyError(f"{self.sender}: no recorded group for question "
                                   f"{question['id']} dealt in round {round_} (replay it in a "
                                   "swarm of the recorded config and seed, or "
                                   "on_missing='skip')")
                self.missing += 1
            found.append(group)
        action: dict[str, Any] = {
            "completions": tuple(g.completions if g else ("",) * L for g in found),
            "num_external": self._num_external.get(round_ + 1, observation["num_external"]),
            "share": tuple(int(g is not None) for g in found),
        }
        if found and all(g is not None and g.logprobs is not None for g in found):
            action["logprobs"] = tuple(g.logprobs for g in found)
            if all(g.token_ids is not None for g in found):
                action["token_ids"] = tuple(g.token_ids for g in found)
        return action

    def learn(self, batch: Sequence[Group]) -> Mapping[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Its one counter (the recorded groups are settings: build it from the same data)."""
        return {"missing": self.missing}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = state.get("missing") if isinstance(state, Mapping) else None
        if isinstance(missing, bool) or not isinstance(missing, int) or missing < 0:
            raise ValueError(f"ReplayAgent: state['missing'] must be an int >= 0, got "
                             f"{missing!r}")
        self.missing = missing


def _nested(value: Sequence[Sequence[Any]] | None) -> tuple[tuple[Any, ...], ...] | None:
    return None if value is None else tuple(tuple(v) for v in value)
