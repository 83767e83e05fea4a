"""The HTTP of a served node (``agents.serving.served``): requests to an untrusted server,
bounded in time and in bytes whatever the server sends.

- :func:`exchange`: one request that ends by a deadline, from connecting to the last byte
  read. The whole exchange runs under one asyncio timeout, so a server that drips its headers
  or its body a byte at a time is cut at the deadline (a per-read timeout would wait on it
  for as long as each byte comes in time). No connection, a broken answer or no full answer
  by the deadline: :class:`NoAnswer`.
- Redirects are never followed: a 3xx is an answer like any other status.
- The body of a 2xx answer is read as it streams and decoded here (identity, gzip or deflate,
  the only encodings a request offers), at most ``cap`` decoded bytes: past that the reading
  stops and :class:`TooLarge` is raised, so the decoded bytes kept never exceed ``cap`` + 1
  whatever the compression ratio. A body in another encoding, or one that does not decode,
  reads as empty. Of another status only the first ``ERROR_EXCERPT`` bytes are read (for
  error messages).
- :func:`exchange_with_retries`: tries again after no answer or a ``RETRIED_STATUSES``
  status, waiting :func:`retry_wait` first (the server's ``Retry-After``, or a back-off), but
  never past its deadline: a wait that would pass it ends the retries at once.
- :func:`run_coroutine`: runs a coroutine in its own event loop in a worker thread, so that a
  node's synchronous ``act`` works where a loop is already running (a notebook).

``clock`` and ``pause`` are the module's time source and sleep (tests replace them).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import time
import zlib
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from sapo_env.extras import require

httpx2 = require("httpx2", "agents.serving.served")

T = TypeVar("T")

clock = time.monotonic
pause = asyncio.sleep

#: statuses after which a request is tried again (the ``openai`` client's choice)
RETRIED_STATUSES = frozenset({408, 409, 429, *range(500, 600)})
ACCEPT_ENCODING = "gzip, deflate"
ERROR_EXCERPT = 1024
FIRST_BACKOFF = 0.5  #: seconds before the first retry without ``Retry-After`` (doubling)
MAX_BACKOFF = 8.0


class NoAnswer(Exception):
    """The server could not be reached, broke the protocol, or had not answered in full by the
    deadline; ``tries``: how many tries got no answer, the last one included."""

    def __init__(self, message: str, tries: int = 1):
        super().__init__(message)
        self.tries = tries


class TooLarge(Exception):
    """A reply's body passed the cap; it was not read past it."""


@dataclass
class Answer:
    """What a server answered: its status, its headers and the (decoded) body read."""

    status: int
    headers: Mapping[str, str]
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


async def exchange(client: Any, method: str, url: str, deadline: float, cap: int = 0,
                   json: Any = None, headers: Mapping[str, str] | None = None) -> Answer:
    """One request through ``client`` (an ``httpx2.AsyncClient``) that ends by ``deadline`` (a
    :data:`clock` time): its answer with at most ``cap`` decoded bytes of a 2xx body (none
    read where ``cap`` is 0; ``TooLarge`` past it), or ``NoAnswer``."""
    remaining = deadline - clock()
    if remaining <= 0:
        raise NoAnswer("no time was left for it")
    try:
        return await asyncio.wait_for(_exchange(client, method, url, cap, json, headers),
                                      remaining)
    except asyncio.TimeoutError:
        raise NoAnswer(f"no complete answer within {remaining:.3g} s") from None
    except (httpx2.HTTPError, OSError) as error:
        raise NoAnswer(f"{type(error).__name__}: {error}") from None


async def _exchange(client: Any, method: str, url: str, cap: int, json: Any,
                    headers: Mapping[str, str] | None) -> Answer:
    headers = {**(headers or {}), "Accept-Encoding": ACCEPT_ENCODING}
    async with client.stream(method, url, json=json, headers=headers, timeout=None,
                             follow_redirects=False) as response:
        answer = Answer(response.status_code, response.headers)
        if not answer.ok:
            answer.body = await read_body(response, ERROR_EXCERPT, cut=True)
        elif cap:
            answer.body = await read_body(response, cap)
        return answer


def inflater(encoding: str) -> Any:
    """The zlib decompressor of a ``Content-Encoding`` of gzip or deflate, None for identity;
    ``ValueError`` for any other (a request offers only these)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(32 + zlib.MAX_WBITS)  # a gzip or a zlib header
    raise ValueError(f"an encoding it was not offered: {encoding[:40]!r}")


async def read_body(response: Any, cap: int, cut: bool = False) -> bytes:
    """The body of a streamed ``response``, decoded, read until ``cap`` decoded (or raw) bytes
    are passed: then ``TooLarge``, or with ``cut`` its first ``cap`` bytes. b"" for a body in
    an encoding it does not decode, or one that fails to decode. (A body that a transport has
    read already, as ``httpx2.MockTransport`` does with bytes, is only checked against
    ``cap``.)"""
    if response.is_stream_consumed:
        if len(response.content) > cap and not cut:
            raise TooLarge(f"more than {cap} bytes")
        return response.content[:cap]
    declared = response.headers.get("content-length", "")
    if not cut and declared.isdigit() and (len(declared) > 18 or int(declared) > cap):
        raise TooLarge(f"it declares {declared[:20]} bytes")
    try:
        inflate = inflater(response.headers.get("content-encoding", ""))
    except ValueError:
        return b""
    body, raw = bytearray(), 0
    async for chunk in response.aiter_raw():
        raw += len(chunk)
        room = cap + 1 - len(body)  # >= 1: zlib's max_length of 0 would mean "no limit"
        try:
            body += chunk[:room] if inflate is None else inflate.decompress(chunk, room)
        except zlib.error:
            return b""
        if len(body) > cap or raw > cap:
            if not cut:
                raise TooLarge(f"more than {cap} bytes")
            return bytes(body[:cap])
        if inflate is not None and inflate.eof:
            break
    return bytes(body)


async def exchange_with_retries(client: Any, method: str, url: str, timeout: float,
                                retries: int, deadline: float, gate: Any = None,
                                **request: Any) -> Answer:
    """:func:`exchange`, each try within ``timeout`` seconds, tried again up to ``retries``
    times after no answer or a status of ``RETRIED_STATUSES``, all by ``deadline``. Before a
    retry it waits :func:`retry_wait` seconds, unless that would pass ``deadline`` (then it
    stops). The last answer; ``NoAnswer`` if the last try got none. A try holds ``gate`` (an
    ``asyncio.Semaphore``) while it runs, not while it waits."""
    tries = 0
    while True:
        async with gate or contextlib.nullcontext():
            tries += 1
            try:
                answer = await exchange(client, method, url, min(clock() + timeout, deadline),
                                        **request)
                failure = None
            except NoAnswer as error:
                answer, failure = None, error
        if answer is not None and answer.status not in RETRIED_STATUSES:
            return answer
        if tries > retries:
            break
        wait = retry_wait(tries, answer.headers if answer is not None else None)
        if clock() + wait >= deadline:
            break
        await pause(wait)
    if failure is not None:
        raise NoAnswer(str(failure), tries)
    return answer


def retry_wait(retry: int, headers: Mapping[str, str] | None = None) -> float:
    """Seconds to wait before retry ``retry`` (1, 2, ...): the answer's ``Retry-After`` where
    it has a readable one, else ``FIRST_BACKOFF`` doubled each retry, at most
    ``MAX_BACKOFF``.

    >>> retry_wait(1), retry_wait(3), retry_wait(9), retry_wait(1, {"retry-after": "7"})
    (0.5, 2.0, 8.0, 7.0)
    """
    after = retry_after(headers) if headers is not None else None
    if after is not None:
        return after
    return min(FIRST_BACKOFF * 2 ** min(retry - 1, 30), MAX_BACKOFF)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The seconds of a ``Retry-After`` header (delta-seconds or an HTTP date; 0 for one
    past), None where there is none or it cannot be read."""
    value = (headers.get("retry-after") or "").strip()
    if not value or len(value) > 64:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine``'s result, run in a new event loop of a worker thread."""
    with ThreadPoolExecutor(1, thread_name_prefix="served") as pool:
        return pool.submit(asyncio.run, coroutine).result()
