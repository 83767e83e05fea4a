"""A sender's per-token log-probabilities and token ids: the optional fields beside its text.

SAPO shares decoded text, and a receiver re-encodes it and scores it under its own policy
(the paper's "however unlikely"). An off-policy correction needs more: the probability with
which the *sender* drew each token (truncated importance sampling, Yao et al. 2025; F-TIS,
arXiv 2605.22537, sends ``(token id, log-prob)`` per token). So an action, and a group built
from it, may carry two optional per-completion fields:

``logprobs``
    for each completion, the sender's log-probability of each token it sampled (at its
    sampling temperature), EOS included where the completion ended: a sequence of finite
    numbers, each ``<= 0`` after the cast to float32 (so ``-1e39``, which float32 holds as
    ``-inf``, and ``-10**400``, which not even float64 holds, are refused), at most
    :func:`max_completion_tokens` of them.
``token_ids``
    (only with ``logprobs``) the ids of those tokens under the sender's tokenizer: integers in
    ``[0, 2**31)``, as many as the completion's ``logprobs``. A receiver that shares the
    tokenizer compares them with its own re-encoding of the text and uses the log-probs only
    where they agree token for token (``agents.lm.off_policy``).

The env never uses them; it checks them (:func:`parse_completion_fields`) and carries them to
receivers unchanged, as read-only ``float32`` / ``int32`` arrays. A group whose sender sent
none has no such keys (``group.get("logprobs")`` is None), so a swarm that never sends them
runs exactly as before.

What a lie can buy is bounded by the receiver, not here: the env cannot check that a sender
drew its tokens with the probabilities it claims (see ``agents.lm.off_policy`` for what the
truncation bounds).
"""

from __future__ import annotations

from typing import Any

import numpy as np

LOGPROB_FIELDS = ("logprobs", "token_ids")
TOKEN_ID_LIMIT = 2**31
"""Token ids are kept as int32: every id must lie in ``[0, TOKEN_ID_LIMIT)``."""


def max_completion_tokens(max_completion_chars: int) -> int:
    """Most entries of one completion's ``logprobs`` or ``token_ids``: the swarm's
    ``max_completion_chars`` (16384 by default), read as a token count. It does not depend on
    the completion's text, since a token may decode to no text at all (a special token that
    decoding skips); a node that generates more tokens than that needs a larger
    ``max_completion_chars``."""
    return max_completion_chars


class TokenFieldError(ValueError):
    """A per-completion field that is not valid: ``reason`` is the packet schema's
    (``"malformed"`` or ``"oversized"``), the message says what was expected."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _is_number(value: Any) -> bool:
    return type(value) in (int, float) or isinstance(value, (np.integer, np.floating))


def _items(value: Any, kinds: str, name: str, limit: int) -> Any:
    """``value`` if it is a list/tuple or a 1-d numeric array (exactly ``numpy.ndarray``: a
    subclass's ``ndim`` or ``len`` could lie) of at most ``limit`` items."""
    if type(value) is np.ndarray:
        if value.ndim != 1 or value.dtype.kind not in kinds:
            raise TokenFieldError("malformed", f"{name} must be a 1-d numeric array or a list, "
                                               f"got an array of shape {value.shape} and dtype "
                                               f"{value.dtype}")
    elif type(value) not in (list, tuple):
        raise TokenFieldError("malformed", f"{name} must be a list or a 1-d array, "
                                           f"got {type(value).__name__}")
    if len(value) > limit:
        raise TokenFieldError("oversized", f"{name} has {len(value)} entries, more than "
                                           f"max_completion_tokens={limit}")
    return value


def parse_logprobs(value: Any, limit: int, name: str = "logprobs") -> np.ndarray:
    """One completion's log-probs as a read-only float32 array, or :class:`TokenFieldError`."""
    items = _items(value, "iuf", name, limit)
    if not isinstance(items, np.ndarray) and not all(_is_number(v) for v in items):
        bad = next(v for v in items if not _is_number(v))
        raise TokenFieldError("malformed", f"{name} must hold numbers, got {bad!r:.40} "
                                           f"({type(bad).__name__})")
    try:  # cast to what is stored first, then checked: -1e39 is -inf as float32
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.array(items, dtype=np.float64).astype(np.float32)
    except OverflowError:  # a Python int beyond even float64
        raise TokenFieldError("malformed", f"{name} must be finite log-probabilities <= 0 (as "
                                           "float32), got an int beyond float32's range"
                              ) from None
    if not np.isfinite(out).all() or (out > 0).any():
        bad = next(float(v) for v in out if not np.isfinite(v) or v > 0)
        raise TokenFieldError("malformed", f"{name} must be finite log-probabilities <= 0 "
                                           f"(as float32), got {bad!r}")
    out.flags.writeable = False
    return out


def parse_token_ids(value: Any, limit: int, name: str = "token_ids") -> np.ndarray:
    """One completion's token ids as a read-only int32 array, or :class:`TokenFieldError`."""
    items = _items(value, "iu", name, limit)
    if not isinstance(items, np.ndarray) and not all(
            type(v) is int or isinstance(v, np.integer) for v in items):
        bad = next(v for v in items if not (type(v) is int or isinstance(v, np.integer)))
        raise TokenFieldError("malformed", f"{name} must hold ints, got {bad!r:.40} "
                                           f"({type(bad).__name__})")
    wide = np.array(items, dtype=np.int64) if len(items) else np.zeros(0, np.int64)
    if ((wide < 0) | (wide >= TOKEN_ID_LIMIT)).any():
        bad = int(next(v for v in wide if not 0 <= v < TOKEN_ID_LIMIT))
        raise TokenFieldError("malformed", f"{name} must be in [0, 2**31), got {bad}")
    out = wide.astype(np.int32)
    out.flags.writeable = False
    return out


def parse_completion_fields(
    logprobs: Any, token_ids: Any, completions: int, limit: int, where: str = ""
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...] | None]:
    """A group's ``logprobs`` (and ``token_ids``, or None) for its ``completions``
    completions, as tuples of read-only arrays; :class:`TokenFieldError` naming
    ``where[c]`` otherwise. ``token_ids`` without ``logprobs`` is the caller's to refuse."""
    lists = {"logprobs": logprobs} if token_ids is None else {"logprobs": logprobs,
                                                               "token_ids": token_ids}
    for name, value in lists.items():
        if type(value) not in (list, tuple) or len(value) != completions:
            got = f"{len(value)}" if type(value) in (list, tuple) else type(value).__name__
            raise TokenFieldError("malformed", f"{name}{where} must be a list of {completions} "
                                               f"sequences (one per completion), got {got}")
    parsed = tuple(parse_logprobs(v, limit, f"logprobs{where}[{c}]")
                   for c, v in enumerate(logprobs))
    if token_ids is None:
        return parsed, None
    ids = tuple(parse_token_ids(v, limit, f"token_ids{where}[{c}]")
                for c, v in enumerate(token_ids))
    for c, (lp, tokens) in enumerate(zip(parsed, ids)):
        if len(lp) != len(tokens):
            raise TokenFieldError("malformed", f"token_ids{where}[{c}] has {len(tokens)} ids but "
                                               f"logprobs{where}[{c}] {len(lp)} values: one "
                                               "log-prob per token")
    return parsed, ids

