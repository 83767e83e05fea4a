"""``ServedConfig``: how a served node (``agents.serving.served.ServedAgent``) asks its server, and
what the server may cost it: a deadline on each try of a request, a deadline on the node's
whole round, a cap on the bytes of a reply, retries, and what a refusal does."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from sapo_env.validation import check_int

NMode = Literal["auto", "n", "repeat"]
N_MODES: tuple[str, ...] = ("auto", "n", "repeat")

#: the derived reply cap (``ServedConfig.reply_cap``): JSON bytes one generated token may take.
#: An ordinary token is 3-5 bytes; one escaped CJK character or emoji 6-12; the longest tokens
#: of common vocabularies (runs of spaces or punctuation) a few dozen.
BYTES_PER_TOKEN = 64
#: ... the fields around one completion (index, role, finish_reason, nulls, indentation)
BYTES_PER_CHOICE = 4096
#: ... the fields of the reply itself (id, model, usage, system_fingerprint, ...)
BYTES_PER_REPLY = 65536


def _check_seconds(name: str, value: object, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a number of seconds > 0"
                         f"{' or None' if optional else ''}, got {value!r}")


@dataclass
class ServedConfig:
    """How a ``ServedAgent`` asks its server (sampling, limits, deadlines, retries)."""

    # Sampling
    temperature: float = 1.0
    """Sampling temperature (the paper's and ``GRPOConfig``'s 1.0)."""
    max_tokens: int = 256
    """Most tokens the server generates per completion (the paper's 256)."""
    n_mode: NMode = "auto"
    """How the L completions of a question are asked for. ``"n"``: one request with ``n=L``
    (vLLM, sglang, OpenAI); a server answering fewer leaves them empty (``missing``).
    ``"repeat"``: L requests with ``n=1``, each with its own seed (servers without ``n``).
    ``"auto"``: ``n=L`` first; where the server answers fewer, the missing ones are asked for
    with ``n=1`` requests, and once it has answered one choice to ``n>1`` (it ignores ``n``,
    as llama-cpp-python's server does) every later round uses ``"repeat"`` directly."""
    # Limits
    max_completion_chars: int = 16384
    """Longer completions are cut to this many characters: the env refuses longer ones
    (``SwarmConfig.max_completion_chars``; set the same value if you change the env's)."""
    max_concurrent_requests: int = 8
    """Requests of a round in flight at once (a batching server such as vLLM serves them
    together; llama.cpp's queues them)."""
    max_reply_bytes: int | None = None
    """Most bytes of one reply the node reads, counted after decoding (gzip, deflate); a
    longer reply is dropped unread past that point and its request fails. None: derived per
    request from what a legal reply of ``n`` completions can take, ``n x (max_tokens x
    BYTES_PER_TOKEN + BYTES_PER_CHOICE) + BYTES_PER_REPLY`` (224 KiB at ``n=8`` and the
    default 256 tokens); see :meth:`reply_cap`."""
    # Deadlines and retries
    timeout: float = 120.0
    """Seconds one try of a request may take, from connecting to the reply's last byte
    (waiting in the server's queue included), before it is tried again or given up."""
    max_retries: int = 2
    """Retries of a request that got no answer in time or an answer of 408, 409, 429 or 5xx,
    after an exponential back-off or the server's ``Retry-After``, never past the round's
    deadline (``round_timeout``)."""
    round_timeout: float | None = None
    """Seconds the node's whole ``act`` may take: all its requests, waits and retries in the
    round together. None: ``timeout x (1 + max_retries)``. The requests of a round share it,
    so a server that queues them must serve the round within it."""
    # Refusals
    stop_run_on_refusal: bool = False
    """What 401, 403 or 404 (a wrong key, URL or model name) does: False, the node leaves the
    swarm and the others go on (``ServerRefused`` is a ``NodeFailure``); True, the whole run
    stops (``RunStoppingRefusal``)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature!r}")
        check_int("max_tokens", self.max_tokens, 1)
        if self.n_mode not in N_MODES:
            raise ValueError(f"n_mode must be one of {N_MODES}, got {self.n_mode!r}")
        check_int("max_completion_chars", self.max_completion_chars, 1)
        check_int("max_concurrent_requests", self.max_concurrent_requests, 1)
        if self.max_reply_bytes is not None:
            check_int("max_reply_bytes", self.max_reply_bytes, 1)
        _check_seconds("timeout", self.timeout)
        check_int("max_retries", self.max_retries, 0)
        _check_seconds("round_timeout", self.round_timeout, optional=True)
        if not isinstance(self.stop_run_on_refusal, bool):
            raise ValueError(f"stop_run_on_refusal must be a bool, got "
                             f"{self.stop_run_on_refusal!r}")

    @property
    def round_seconds(self) -> float:
        """The round's deadline in seconds: ``round_timeout``, or ``timeout x (1 +
        max_retries)``."""
        if self.round_timeout is not None:
            return float(self.round_timeout)
        return float(self.timeout) * (1 + self.max_retries)

    def reply_cap(self, n: int) -> int:
        """Most decoded bytes of the reply to a request for ``n`` completions.

        >>> ServedConfig().reply_cap(8)
        229376
        >>> ServedConfig(max_reply_bytes=1000).reply_cap(8)
        1000
        """
        if self.max_reply_bytes is not None:
            return self.max_reply_bytes
        return n * (self.max_tokens * BYTES_PER_TOKEN + BYTES_PER_CHOICE) + BYTES_PER_REPLY
