"""The packet schema: any value received as a group becomes a typed ``Group`` or a reason.

A packet comes from another machine, so nothing about it is assumed: not its type, not the
types of its fields, not their sizes. :func:`parse_packet` is the one place that looks at a
received value; everything after it (the verifier, the pool, the reputation sampler, the
agents) sees only what it returns:

- a mapping with exactly the fields of :class:`sapo_env.types.Group` (no ``local``, which only
  the env sets inside a node's batch);
- ``id``, ``source``, ``task``, ``question``, ``system_prompt``, ``answer``: plain ``str``
  (not a subclass, whose ``len`` or ``==`` could lie), within ``MAX_FIELD_CHARS``, and valid
  Unicode text like every string of a packet (no lone surrogate, which no receiver could
  write to a file, a JSON message or a tokenizer);
- ``ref``: ``{task, config, seed, index}``, the task a ``str``, the config JSON data, seed and
  index integers in the env's range (checked as plain ``int``);
- ``completions``: a list or tuple of exactly L plain strings, each within the swarm's
  ``max_completion_chars``;
- ``rewards``, ``advantages``: L numbers each, finite as float32 (a list, a tuple or a 1-d
  ``numpy.ndarray``, not a 0-d one, not strings);
- optional ``logprobs`` (and, only with it, ``token_ids``): L per-token sequences, each of
  finite log-probabilities ``<= 0`` (as float32) / ids in ``[0, 2**31)``, at most
  ``max_completion_chars`` entries, the ids as many as the log-probs
  (:mod:`sapo_env.sender_logprobs`); a packet without them is a group without them;
- ``round``: whatever the sender claims is replaced by the round the packet arrived in (the
  receiver's clock, not the sender's).

What it returns is a fresh copy: plain ``str`` fields, a ``tuple`` of completions, read-only
``float32`` (and ``int32``) arrays and a ``ref`` of plain types, so no object of the sender's
survives into the swarm. An array is exactly a ``numpy.ndarray``, as a string is exactly a
``str``: a subclass could lie about its ``ndim`` or ``len`` (a 2-d array that claims to be 1-d
would pass the checks and end the run where it is used). Numbers are checked in the type
they are stored in: ``1e39`` is a finite float64 but ``inf`` as float32, so it is refused. A
value that fails gets ``"malformed"`` (a field of the wrong type or shape) or ``"oversized"``
(a string beyond its bound), never an exception. :func:`parse_group` runs the same checks
on a group read back from a file (a checkpoint's pool) and raises ``ValueError`` naming
the field instead.

**Who sent it.** The transport knows which node a packet came from (in this env,
:func:`sapo_env.defenses.transport_attacks.tamper` says); the ``source`` a packet claims is
only a claim. :func:`admit` takes ``(sender, value)`` pairs, refuses a packet whose claimed
``source`` is not its sender (``"impersonation"``: a node cannot pool groups under another's
name) and charges every rejection to the sender, never to the claimed name, so junk that names
a victim costs the victim nothing (reputation, :mod:`sapo_env.defenses.reputation`, reads these
counts). Everything it admits has ``source`` equal to the node that sent it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from sapo_env.config import MAX_QUESTIONS_PER_STREAM, SwarmConfig
from sapo_env.sender_logprobs import (
    LOGPROB_FIELDS,
    TokenFieldError,
    max_completion_tokens,
    parse_completion_fields,
)
from sapo_env.types import Group
from sapo_env.validation import unencodable_at

SCHEMA_REASONS = ("malformed", "oversized")
ADMIT_REASONS = (*SCHEMA_REASONS, "impersonation")
"""Why :func:`receive` refuses a packet: the schema's reasons, or a claimed ``source`` that is
not its sender."""
MAX_FIELD_CHARS = 1 << 16
"""Longest ``id``, ``source``, ``task``, ``question``, ``system_prompt`` or ``answer`` a packet
may carry (the swarm's own are far shorter; the verifier then compares them exactly)."""
MAX_SEED = 2**62  # the env's question seeds stay below it (sapo_env.tasks)
_TEXT_FIELDS = ("id", "source", "task", "question", "system_prompt", "answer")
GROUP_FIELDS = frozenset(_TEXT_FIELDS + ("round", "ref", "completions", "rewards",
                                         "advantages"))
_REF_FIELDS = frozenset(("task", "config", "seed", "index"))


def admit(sent: Sequence[tuple[str, Any]], built: Sequence[Group], round_: int,
          config: SwarmConfig) -> tuple[list[Group], Counter]:
    """The packets of a round as received, each a ``(sender, value)`` pair (the node the
    transport got it from, and what it sent): the admitted ones (:func:`receive_each`), in
    order, and the rejected ones counted by their sender."""
    admitted: list[Group] = []
    rejected: Counter = Counter()
    for (sender, _), group in zip(sent, receive_each(sent, built, round_, config)):
        if isinstance(group, str):
            rejected[sender] += 1
        else:
            admitted.append(group)
    return admitted, rejected


def receive_each(sent: Sequence[tuple[str, Any]], built: Sequence[Group], round_: int,
                 config: SwarmConfig, token_fields: bool = True) -> list[Group | str]:
    """What each of :func:`admit`'s ``(sender, value)`` packets becomes, in order: the env's own
    groups (``built``, by identity) unchanged when their sender is their source, every other
    value through :func:`receive` (a validated group, or the reason it is refused;
    ``token_fields`` as there)."""
    own = {id(g) for g in built}
    return [value if id(value) in own and value["source"] == sender
            else receive(sender, value, round_, config, token_fields) for sender, value in sent]


def receive(sender: str, value: Any, round_: int, config: SwarmConfig,
            token_fields: bool = True) -> Group | str:
    """``value`` sent by ``sender`` as a validated ``Group`` (see :func:`parse_packet`, and its
    ``token_fields``), or the reason (of ``ADMIT_REASONS``) it is rejected: a schema reason, or
    ``"impersonation"`` when the ``source`` it claims is not ``sender``."""
    group = parse_packet(value, round_, config.completions_per_question,
                         config.max_completion_chars, token_fields)
    if isinstance(group, str) or group["source"] == sender:
        return group
    return "impersonation"


class _Rejected(Exception):
    """A refused value: the schema's ``reason``, the ``field`` it is charged to, and what was
    wrong with it where more can be said (``detail``)."""

    def __init__(self, reason: str, field: str = "the group", detail: str = ""):
        self.reason, self.field, self.detail = reason, field, detail


def parse_packet(value: Any, round_: int, completions_per_question: int,
                 max_completion_chars: int, token_fields: bool = True) -> Group | str:
    """``value`` as a validated ``Group`` stamped with ``round_``, or the reason
    (``"malformed"`` or ``"oversized"``) it is rejected. With ``token_fields`` False the
    sender's ``logprobs`` and ``token_ids`` (the costly fields to read) are left unread and out
    of the group: only whether the packet may carry them is checked, and
    :func:`parse_token_fields` reads them later, if the packet gets that far."""
    try:
        return _parse(value, round_, completions_per_question, max_completion_chars,
                      token_fields)
    except _Rejected as rejected:
        return rejected.reason
    except Exception:  # noqa: BLE001 (a hostile mapping or sequence may raise anything)
        return "malformed"


def has_token_fields(value: Any) -> bool:
    """Whether ``value`` (a packet :func:`parse_packet` passed) carries ``logprobs`` or
    ``token_ids``; True for one that cannot say (:func:`parse_token_fields` refuses it)."""
    try:
        return not set(LOGPROB_FIELDS).isdisjoint(value.keys())
    except Exception:  # noqa: BLE001 (a hostile mapping may raise anything)
        return True


def parse_token_fields(value: Any, completions_per_question: int, max_completion_chars: int
                       ) -> dict[str, Any] | str:
    """The ``logprobs`` (and ``token_ids``) of ``value``, a packet :func:`parse_packet` passed
    without them, as the fields to add to its group (none if it carries none), or the reason
    (``"malformed"`` or ``"oversized"``) it is rejected. Its keys are read again, and checked
    again: a mapping need not answer twice the same."""
    try:
        present = set(value.keys()) - GROUP_FIELDS
        if not present <= set(LOGPROB_FIELDS) or present == {"token_ids"}:
            return "malformed"
        return _token_fields(value, present, completions_per_question, max_completion_chars)
    except _Rejected as rejected:
        return rejected.reason
    except Exception:  # noqa: BLE001 (a hostile mapping or sequence may raise anything)
        return "malformed"


def parse_group(value: Any, round_: int, completions_per_question: int,
                max_completion_chars: int) -> Group:
    """:func:`parse_packet` for a group read back from a file (a checkpoint's pool), where a
    bad value is the file's fault: the validated ``Group``, or ``ValueError`` naming the field
    that fails, what it must be and the schema's reason."""
    try:
        return _parse(value, round_, completions_per_question, max_completion_chars, True)
    except _Rejected as rejected:
        expected = _expected(rejected.field, completions_per_question, max_completion_chars)
        detail = f": {rejected.detail}" if rejected.detail else ""
        raise ValueError(f"{rejected.field} must be {expected} ({rejected.reason}{detail})"
                         ) from None
    except Exception as error:  # noqa: BLE001 (as parse_packet)
        raise ValueError(f"not a group ({type(error).__name__}: {error})") from None


def _expected(field: str, length: int, max_chars: int) -> str:
    """What ``field`` of a group must be (:func:`parse_group`'s errors)."""
    numbers = f"{length} numbers, each finite as float32 (a list or a 1-d array)"
    return {
        "the group": f"a dict with the keys {sorted(GROUP_FIELDS)} (and logprobs, with or "
                     "without token_ids)",
        "ref": "a dict {task, config, seed, index}: a str, JSON data, and ints in the env's "
               "range",
        "completions": f"a list or tuple of {length} str of at most {max_chars} characters",
        "rewards": numbers, "advantages": numbers,
        "logprobs": "per completion, log-probabilities (and token ids) as a sender sends them",
    }.get(field, f"a str of at most {MAX_FIELD_CHARS} characters, valid Unicode")


def _parse(value: Any, round_: int, length: int, max_chars: int, token_fields: bool) -> Group:
    if type(value) is not dict and not isinstance(value, Mapping):
        raise _Rejected("malformed")
    keys = set(value.keys())
    optional = keys - GROUP_FIELDS
    if not GROUP_FIELDS <= keys or not optional <= set(LOGPROB_FIELDS) \
            or optional == {"token_ids"}:
        raise _Rejected("malformed", detail=f"got the keys {sorted(map(str, keys))[:20]}")
    text = {k: _field(k, _text, value[k], MAX_FIELD_CHARS) for k in _TEXT_FIELDS}
    return {
        **text,  # type: ignore[typeddict-item]
        "round": round_,
        "ref": _field("ref", _ref, value["ref"]),
        "completions": _field("completions", _completions, value["completions"], length,
                              max_chars),
        "rewards": _field("rewards", _floats, value["rewards"], length),
        "advantages": _field("advantages", _floats, value["advantages"], length),
        **(_field("logprobs", _token_fields, value, optional, length, max_chars)
           if token_fields else {}),
    }


def _field(name: str, parse: Callable[..., Any], *args: Any) -> Any:
    """``parse(*args)``; what it refuses, or anything a hostile value makes it raise, is
    charged to the field ``name``."""
    try:
        return parse(*args)
    except _Rejected as rejected:
        rejected.field = name
        raise
    except Exception as error:  # noqa: BLE001 (a hostile sequence may raise anything)
        raise _Rejected("malformed", name, f"{type(error).__name__}: {error}") from None


def _completions(value: Any, length: int, max_chars: int) -> tuple[str, ...]:
    if type(value) not in (list, tuple) or len(value) != length:
        raise _Rejected("malformed")
    return tuple(_text(c, max_chars) for c in value)


def _token_fields(value: Any, present: set, length: int, max_chars: int) -> dict[str, Any]:
    """The sender's ``logprobs`` (and ``token_ids``), if it sent them, as fresh arrays."""
    if not present:
        return {}
    try:
        logprobs, token_ids = parse_completion_fields(
            value["logprobs"], value["token_ids"] if "token_ids" in present else None, length,
            max_completion_tokens(max_chars))
    except TokenFieldError as error:
        raise _Rejected(error.reason, detail=str(error)) from None
    return {"logprobs": logprobs} if token_ids is None else {"logprobs": logprobs,
                                                              "token_ids": token_ids}


def _text(value: Any, limit: int) -> str:
    if type(value) is not str:
        raise _Rejected("malformed")
    if len(value) > limit:
        raise _Rejected("oversized")
    if unencodable_at(value) is not None:  # a lone surrogate: no receiver could store it
        raise _Rejected("malformed")
    return value


def _int(value: Any, top: int) -> int:
    if type(value) is not int and not isinstance(value, np.integer):
        raise _Rejected("malformed")
    number = int(value)  # a plain int: a numpy subclass's comparisons could lie
    if not 0 <= number < top:
        raise _Rejected("malformed")
    return number


def _ref(value: Any) -> dict[str, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):
        raise _Rejected("malformed")
    if set(value.keys()) != _REF_FIELDS:
        raise _Rejected("malformed")
    config = value["config"]
    if not isinstance(config, Mapping):
        raise _Rejected("malformed")
    try:  # a fresh copy of plain JSON data, or nothing
        text = json.dumps(dict(config), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise _Rejected("malformed") from None
    if len(text) > MAX_FIELD_CHARS:
        raise _Rejected("oversized")
    return {"task": _text(value["task"], MAX_FIELD_CHARS), "config": json.loads(text),
            "seed": _int(value["seed"], MAX_SEED),
            "index": _int(value["index"], MAX_QUESTIONS_PER_STREAM)}


def _floats(value: Any, length: int) -> np.ndarray:
    """``length`` numbers finite as float32, as a read-only float32 array."""
    if type(value) is np.ndarray:  # not a subclass, whose ``ndim`` or ``len`` could lie
        if value.ndim != 1 or value.dtype.kind not in "iuf":
            raise _Rejected("malformed")
        items = value
    elif type(value) in (list, tuple):
        if not all(type(v) in (int, float) or isinstance(v, (np.integer, np.floating))
                   for v in value):
            raise _Rejected("malformed")
        items = value
    else:
        raise _Rejected("malformed")
    if len(items) != length:
        raise _Rejected("malformed")
    # checked as stored: 1e39 is a finite float64 but inf as float32
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.array(items, dtype=np.float64).astype(np.float32)
    if not np.isfinite(out).all():
        raise _Rejected("malformed")
    out.flags.writeable = False
    return out
