"""Validation of the nodes' actions, before the env touches any state.

``parse_actions`` either returns every node's action in a normal form or raises ``ValueError``
naming the node, the field and what was expected; the env calls it first in ``step`` so a bad
action leaves the env exactly as it was. The optional ``logprobs`` and ``token_ids`` (the
sender's per-token log-probabilities and token ids of each completion) are checked by
:mod:`sapo_env.sender_logprobs`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sapo_env.config import SwarmConfig
from sapo_env.sender_logprobs import (
    TokenFieldError,
    max_completion_tokens,
    parse_completion_fields,
)
from sapo_env.validation import unencodable_at

ACTION_KEYS = frozenset({"completions", "num_external", "share", "logprobs", "token_ids"})

PerCompletion = tuple[tuple[np.ndarray, ...], ...]  # question -> completion -> per-token array


@dataclass(frozen=True)
class ParsedAction:
    completions: tuple[tuple[str, ...], ...]
    num_external: int
    share: tuple[bool, ...]
    logprobs: PerCompletion | None = None
    token_ids: PerCompletion | None = None

    def token_fields(self, k: int) -> dict[str, tuple[np.ndarray, ...]]:
        """The optional per-completion fields of question ``k``'s group (``{}``: none sent)."""
        fields = {"logprobs": self.logprobs, "token_ids": self.token_ids}
        return {name: value[k] for name, value in fields.items() if value is not None}


def parse_actions(
    actions: Any, question_counts: Mapping[str, int], config: SwarmConfig
) -> dict[str, ParsedAction]:
    """Check every live node's action; return them normalised, in ``question_counts`` order.

    ``question_counts`` maps each live node to the number of questions it was asked this round.
    """
    agents = list(question_counts)
    if not isinstance(actions, Mapping):
        raise ValueError(f"actions must be a dict of node name -> action, got {type(actions)}")
    unknown = sorted(set(actions) - set(agents), key=str)
    if unknown:
        raise ValueError(f"actions for unknown or finished nodes {unknown}; live nodes: "
                         f"{list(agents)}")
    missing = [a for a in agents if a not in actions]
    if missing:
        raise ValueError(f"missing actions for nodes {missing}: every live node acts each "
                         "round (sapo_env.churn.OFFLINE sits a round out)")
    return {agent: parse_action(agent, actions[agent], question_counts[agent], config)
            for agent in agents}


def parse_action(agent: str, action: Any, num_questions: int, config: SwarmConfig
                 ) -> ParsedAction:
    """Check one node's action for a round in which it was asked ``num_questions`` questions
    (see ``sapo_env.types.Action``)."""
    if not isinstance(action, Mapping):
        raise ValueError(f"{agent}: action must be a dict with 'completions' and "
                         f"'num_external', got {type(action).__name__}")
    extra = sorted(set(action) - ACTION_KEYS, key=str)
    if extra:
        raise ValueError(f"{agent}: unknown action fields {extra}; expected "
                         f"{sorted(ACTION_KEYS)}")
    for key in ("completions", "num_external"):
        if key not in action:
            raise ValueError(f"{agent}: action is missing the field {key!r}")
    completions = _parse_completions(agent, action["completions"], num_questions, config)
    num_external = _parse_num_external(agent, action["num_external"], config)
    share = _parse_share(agent, action.get("share"), num_questions)
    logprobs, token_ids = _parse_token_fields(agent, action.get("logprobs"),
                                              action.get("token_ids"), num_questions, config)
    return ParsedAction(completions, num_external, share, logprobs, token_ids)


def _is_sequence(value: Any) -> bool:
    """A sequence with a length: a 0-d array (``np.array(0)``) has none, so it is refused like a
    scalar instead of raising ``TypeError`` at ``len``."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _parse_completions(agent: str, value: Any, B: int, config: SwarmConfig
                       ) -> tuple[tuple[str, ...], ...]:
    L = config.completions_per_question
    if not _is_sequence(value):
        raise ValueError(f"{agent}: completions must be a sequence of {B} sequences of {L} "
                         f"strings, got {type(value).__name__}")
    if len(value) != B:
        raise ValueError(f"{agent}: expected completions for {B} questions (as many as its "
                         f"observation's questions this round), got {len(value)}")
    parsed = []
    for q, group in enumerate(value):
        if not _is_sequence(group):
            raise ValueError(f"{agent}: completions[{q}] must be a sequence of {L} strings, "
                             f"got {type(group).__name__}")
        if len(group) != L:
            raise ValueError(f"{agent}: expected {L} completions for question {q} "
                             f"(completions_per_question), got {len(group)}")
        for c, text in enumerate(group):
            if not isinstance(text, str):
                raise ValueError(f"{agent}: completions[{q}][{c}] must be a str, "
                                 f"got {type(text).__name__}")
            if len(text) > config.max_completion_chars:
                raise ValueError(f"{agent}: completions[{q}][{c}] has {len(text)} characters, "
                                 f"more than max_completion_chars={config.max_completion_chars}")
            if (at := unencodable_at(text)) is not None:
                raise ValueError(f"{agent}: completions[{q}][{c}] is not valid Unicode text: a "
                                 f"lone surrogate {text[at]!r} at character {at} (decode with "
                                 "errors='replace')")
        parsed.append(tuple(group))
    return tuple(parsed)


def _parse_num_external(agent: str, value: Any, config: SwarmConfig) -> int:
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{agent}: num_external must be an int in [0, {config.train_budget}], "
                         f"got {value!r} ({type(value).__name__})")
    if not 0 <= value <= config.train_budget:
        raise ValueError(f"{agent}: num_external must be in [0, {config.train_budget}] "
                         f"(train_budget), got {value}")
    return int(value)


def _parse_share(agent: str, value: Any, B: int) -> tuple[bool, ...]:
    if value is None:
        return (True,) * B
    if not _is_sequence(value) or len(value) != B:
        raise ValueError(f"{agent}: share must be a sequence of {B} values 0/1 "
                         f"(one per question), got {value!r}")
    flags = []
    for q, flag in enumerate(value):
        if isinstance(flag, (bool, np.bool_)) or (
            isinstance(flag, (int, np.integer)) and flag in (0, 1)
        ):
            flags.append(bool(flag))
        else:
            raise ValueError(f"{agent}: share[{q}] must be 0 or 1, got {flag!r}")
    return tuple(flags)


def _parse_token_fields(agent: str, logprobs: Any, token_ids: Any, B: int, config: SwarmConfig
                        ) -> tuple[PerCompletion | None, PerCompletion | None]:
    """The optional ``logprobs`` / ``token_ids``: per question, per completion, per token
    (:mod:`sapo_env.sender_logprobs`); None when absent."""
    if logprobs is None:
        if token_ids is not None:
            raise ValueError(f"{agent}: token_ids needs logprobs (one log-prob per token id); "
                             "send both or neither")
        return None, None
    L = config.completions_per_question
    for name, value in (("logprobs", logprobs), ("token_ids", token_ids)):
        if value is not None and (not _is_sequence(value) or len(value) != B):
            got = len(value) if _is_sequence(value) else type(value).__name__
            raise ValueError(f"{agent}: {name} must be a sequence of {B} sequences (one per "
                             f"question) of {L} per-token sequences, got {got}")
    limit = max_completion_tokens(config.max_completion_chars)
    parsed_logprobs, parsed_ids = [], []
    for q in range(B):
        try:
            lp, ids = parse_completion_fields(
                _as_list(logprobs[q]), None if token_ids is None else _as_list(token_ids[q]),
                L, limit, where=f"[{q}]")
        except TokenFieldError as error:
            raise ValueError(f"{agent}: {error}") from None
        except (OverflowError, TypeError) as error:  # a number numpy cannot hold (2**80)
            raise ValueError(f"{agent}: logprobs[{q}] and token_ids[{q}] must hold floats and "
                             f"ids in [0, 2**31), got a value numpy refuses: {error}") from None
        parsed_logprobs.append(lp)
        parsed_ids.append(ids)
    return tuple(parsed_logprobs), None if token_ids is None else tuple(parsed_ids)


def _as_list(value: Any) -> Any:
    """A question's per-completion entries as a list (a node may send a tuple or an array of
    rows); anything else is left for the parser to refuse."""
    if isinstance(value, tuple) or (isinstance(value, np.ndarray) and value.ndim >= 1):
        return list(value)
    return value
