"""``PlaybackAgent``: a node that publishes a recorded node's groups again, from a pool dataset.

A pool dataset (:mod:`sapo_env.runtime.pool_dataset`) holds every packet a run shared. A
node's action is its completions for the questions it was dealt, so playing a recorded node back
means answering the same questions with the completions it recorded: ``PlaybackAgent(dataset,
"node_3")`` looks each dealt question up by its ``ref`` (task, config, seed, index) among
``node_3``'s recorded groups and answers with their completions (and the log-probabilities and
token ids it sent, where every question of the round has them), shares them, and asks for the
J ``node_3`` had in force in its next recorded round. The env scores the completions again, so
rewards and advantages are the verifier's, not the dataset's.

**The contract.** In a swarm of the same ``SwarmConfig`` reset with the same seed, the node in
``node_3``'s place is dealt the same questions in the same rounds (each node's questions come
from its own streams, whatever the others do, so the other nodes may be new learners), as long
as its J is the same each round: the playback then publishes exactly what ``node_3`` published,
and with the others unchanged the run is the recorded one (``tests/test_pool_dataset.py``).
Only shared groups are in a pool dataset: a question ``node_3`` answered but did not share (or
shared after the pool window had passed) has no recorded completions, and nor has any question
of a run with another seed, config or J.

**When a dealt question has no recorded group** (``on_missing``): ``"raise"`` (the default)
raises ``KeyError`` naming the node, the round and the question, since the playback is not the
recorded run any more; ``"skip"`` answers it with L empty completions (which score 0) and
shares nothing for it, counting it in ``missing``: the playback then publishes the recorded
groups of the questions it is dealt and nothing else, e.g. to seed a swarm of another config
with a recorded node's text where the questions happen to meet. A round in which the node
shared nothing leaves its next J unknown: the playback keeps the J in force.

It never learns. Which groups count as the node's: every recorded packet it sent under its own
name that the schema could read (accepted or refused by the verifier; the first of several
for one question); a transport adversary's forged packets are the env's doing, which a swarm
with the same ``adversaries`` does again. A refused packet's log-probabilities are not recorded,
so a round with one is played back without log-probabilities.

**A dataset is untrusted input.** Each of the node's rows is read, when the playback is built,
through the packet schema (:func:`sapo_env.defenses.packet_schema.parse_packet`, with the
swarm's ``max_completion_chars``: what a packet of the recorded run could carry), and the
first row it refuses raises ``ValueError`` naming the row and the field (as does a node's
rows of several L), so every action the playback sends is one the env takes from a swarm of the
recorded config: an ``act`` raises only in a swarm that is not (another L, a J beyond its
``train_budget``, a dealt question with no recorded group under ``on_missing="raise"``).
``load_pool_dataset`` checks the files' columns and sizes before that.

Example::

    from agents.scripted.replay import PlaybackAgent
    from sapo_env.runtime.pool_dataset import load_pool_dataset

    pool = load_pool_dataset("pool")                        # written by PoolDatasetCallback
    played = PlaybackAgent(pool, "node_3")                  # node_3's groups, round by round
    nodes = {**learners, "node_3": played}                # the others: anyone
    sapo_env.runtime.run(env, nodes, seed=0)                # the recorded run's config and seed
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sapo_env.config import SwarmConfig
from sapo_env.defenses.packet_schema import parse_packet
from sapo_env.deprecation import renamed
from sapo_env.sender_logprobs import TokenFieldError, max_completion_tokens, parse_completion_fields
from sapo_env.types import Action, Group, Observation

OnMissing = Literal["raise", "skip"]
ON_MISSING = ("raise", "skip")


@dataclass(frozen=True)
class RecordedGroup:
    """What a playback needs of one recorded group."""

    round: int  #: the round it was sent in
    completions: tuple[str, ...]
    logprobs: tuple[np.ndarray, ...] | None  #: float32, one per completion
    token_ids: tuple[np.ndarray, ...] | None  #: int32, one per completion


def question_key(ref: Mapping[str, Any]) -> tuple:
    """A question by its ref: ``(task, config as canonical JSON, seed, index)``; a dataset's
    ``ref["config"]`` is that JSON already."""
    config = ref["config"]
    if not isinstance(config, str):
        config = json.dumps(dict(config), sort_keys=True)
    return ref["task"], config, int(ref["seed"]), int(ref["index"])


class PlaybackAgent:
    """Publishes ``sender``'s recorded groups (see the module docstring).

    Args:
        rows: the pool dataset (a ``datasets.Dataset``, or any iterable of its rows as dicts).
        sender: the recorded node to play back.
        on_missing: ``"raise"`` or ``"skip"``: what a dealt question without a recorded group
            does.
        max_completion_chars: the recorded swarm's ``max_completion_chars``: the longest
            completion (and most log-probs of one) a row may hold.

    Raises ``ValueError`` naming the row and the field at the first of ``sender``'s rows that
    a packet could not carry (see the module docstring).
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]], sender: str,
                 on_missing: OnMissing = "raise",
                 max_completion_chars: int = SwarmConfig.max_completion_chars):
        if on_missing not in ON_MISSING:
            raise ValueError(f"on_missing must be one of {ON_MISSING}, got {on_missing!r}")
        self.sender = sender
        self.on_missing = on_missing
        self.missing = 0
        """Dealt questions answered with nothing (``on_missing="skip"``) so far."""
        self._groups: dict[tuple, RecordedGroup] = {}
        self._num_external: dict[int, int] = {}  # round -> J in force, as recorded
        first = None  # (row, L) of the node's first group: every group has its L
        for k, row in enumerate(rows):
            if not _sent_by(row, sender, k):
                continue
            group, num_external = _recorded(row, max_completion_chars, f"{sender}: row {k}")
            first = first or (k, len(group.completions))
            if len(group.completions) != first[1]:
                raise ValueError(f"{sender}: row {k}: {len(group.completions)} completions, "
                                 f"where row {first[0]} has {first[1]}")
            if num_external is not None:
                self._num_external.setdefault(group.round, num_external)
            self._groups.setdefault(question_key(row["ref"]), group)
        if not self._groups:
            raise ValueError(f"the dataset holds no readable group sent by {sender!r}")

    @classmethod
    def from_parquet(cls, path: str | Path, sender: str, on_missing: OnMissing = "raise",
                     max_completion_chars: int = SwarmConfig.max_completion_chars
                     ) -> PlaybackAgent:
        """Play ``sender`` back from a ``PoolDatasetCallback``'s folder (needs ``datasets``),
        its files checked with ``PoolLimits(max_completion_chars)``."""
        from sapo_env.runtime.pool_dataset import PoolLimits, load_pool_dataset

        pool = load_pool_dataset(path, PoolLimits(max_completion_chars=max_completion_chars))
        return cls(pool, sender, on_missing, max_completion_chars)

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
                                   f"{question['id']} dealt in round {round_} (play it back in "
                                   "a swarm of the recorded config and seed, or "
                                   "on_missing='skip')")
                self.missing += 1
            found.append(group)
        num_external = self._num_external.get(round_ + 1, observation["num_external"])
        if num_external > observation["train_budget"]:
            raise ValueError(f"{self.sender}: the J recorded for round {round_ + 1}, "
                             f"{num_external}, is beyond the env's train_budget "
                             f"{observation['train_budget']}")
        action: dict[str, Any] = {
            "completions": tuple(g.completions if g else ("",) * L for g in found),
            "num_external": num_external,
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
            raise ValueError(f"PlaybackAgent: state['missing'] must be an int >= 0, got "
                             f"{missing!r}")
        self.missing = missing


_GROUP_TEXT = ("id", "source", "task", "question", "system_prompt", "answer")
_ROW_FIELDS = ("round", "sender", "num_external", *_GROUP_TEXT, "group_round", "ref",
               "completions", "rewards", "advantages")


def _sent_by(row: Any, sender: str, k: int) -> bool:
    """Whether ``row`` is a group ``sender`` sent under its own name that the schema read."""
    if not isinstance(row, Mapping):
        raise ValueError(f"row {k} must be a mapping of the dataset's columns, got "
                         f"{type(row).__name__}")
    missing = [name for name in _ROW_FIELDS if name not in row]
    if missing:
        raise ValueError(f"row {k} has no field {missing[0]!r}")
    return row["sender"] == sender and row["source"] == sender and row["ref"] is not None


def _recorded(row: Mapping[str, Any], max_chars: int, where: str
              ) -> tuple[RecordedGroup, int | None]:
    """``row`` as a recorded group and the J recorded with it, or ``ValueError``."""
    for name in ("round", "group_round", "num_external"):
        value = row[name]
        if not (value is None and name == "num_external") and (
                type(value) is not int or value < 0):
            raise ValueError(f"{where}: field {name!r} must be an int >= 0, got {value!r}")
    ref, completions = row["ref"], row["completions"]
    try:
        question_key(ref)
        config = json.loads(ref["config"]) if isinstance(ref["config"], str) else ref["config"]
    except (TypeError, ValueError, KeyError, RecursionError):
        raise ValueError(f"{where}: field 'ref' is not a question's ref: {ref!r:.200}") from None
    if type(completions) not in (list, tuple):
        raise ValueError(f"{where}: field 'completions' must be a list, got "
                         f"{type(completions).__name__}")
    packet = {**{k: row[k] for k in _GROUP_TEXT}, "round": row["group_round"],
              "ref": {**ref, "config": config}, "completions": completions,
              "rewards": row["rewards"],
              "advantages": row["advantages"]}
    group = parse_packet(packet, row["group_round"], len(completions), max_chars)
    if isinstance(group, str):
        raise ValueError(f"{where}: field {_refused_field(packet, max_chars)!r} is {group} for "
                         f"a packet (with L={len(completions)} completions of at most "
                         f"max_completion_chars={max_chars})")
    logprobs, token_ids = row.get("logprobs"), row.get("token_ids")
    if logprobs is not None or token_ids is not None:
        try:
            logprobs, token_ids = parse_completion_fields(
                logprobs, token_ids, len(completions), max_completion_tokens(max_chars))
        except (TokenFieldError, TypeError, OverflowError) as error:
            raise ValueError(f"{where}: fields 'logprobs'/'token_ids': {error}") from None
    return RecordedGroup(row["round"], group["completions"], logprobs, token_ids), \
        row["num_external"]


def _refused_field(packet: Mapping[str, Any], max_chars: int) -> str:
    """The first field of ``packet`` (refused by the packet schema) that the schema refuses in
    a packet valid otherwise."""
    L = len(packet["completions"])
    valid = {**dict.fromkeys(_GROUP_TEXT, ""), "round": 0, "completions": [""] * L,
             "ref": {"task": "", "config": {}, "seed": 0, "index": 0},
             "rewards": [0.0] * L, "advantages": [0.0] * L}
    return next((name for name in valid if name != "round" and isinstance(
        parse_packet({**valid, name: packet[name]}, 0, L, max_chars), str)), "the whole group")


__getattr__ = renamed(__name__, {"ReplayAgent": "PlaybackAgent"})
