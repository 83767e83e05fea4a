"""What a hostile server can cost a served node (agents.serving.served,
agents.serving.served_http): each try of a request ends by its deadline, connect to last byte, and
the node's whole act by the round's; a reply is decoded no further than its cap; ``Retry-After``
never waits past the round's deadline; redirects are not followed; a refusal removes the node, or
stops the run when asked to.

Two kinds of fake server: a socket server that drips a reply a byte at a time (it counts the
bytes it got out before the node hung up), and ``httpx2.MockTransport`` for replies that need
no timing. The waits of ``Retry-After`` run on a fake clock.
"""

from __future__ import annotations

import doctest
import gzip
import importlib
import json
import socket
import threading
import time

import numpy as np
import pytest

httpx2 = pytest.importorskip("httpx2", reason="the served extra is not installed: "
                             "pip install 'sapo-env[served]'")

import sapo_env  # noqa: E402
import sapo_env.runtime  # noqa: E402
from agents import DemonstratorAgent  # noqa: E402
from agents.serving import served_http  # noqa: E402
from agents.serving.served import (  # noqa: E402
    NodeRefused,
    ServedAgent,
    ServedConfig,
    ServerRefused,
    ServerUnavailable,
)
from sapo_env.runtime import NodeFailure  # noqa: E402
from sapo_env.types import make_observation  # noqa: E402

INTERVAL = 0.05  # seconds between two bytes of a dripping server
REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"  # 40 bytes: 2 s at a byte per 50 ms


class Drip:
    """A server on 127.0.0.1 that answers every connection with ``REPLY``, one byte every
    ``INTERVAL`` seconds; ``sent[i]``: bytes that went out on connection ``i`` before the
    client hung up."""

    def __init__(self):
        self.sent: list[int] = []
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:  # closed
                return
            self.sent.append(0)
            threading.Thread(target=self._drip, args=(connection, len(self.sent) - 1),
                             daemon=True).start()

    def _drip(self, connection, i):
        with connection:
            connection.recv(65536)
            for byte in REPLY:
                try:
                    connection.sendall(bytes([byte]))
                except OSError:  # the client hung up
                    return
                self.sent[i] += 1
                time.sleep(INTERVAL)

    def close(self):
        self.socket.close()


@pytest.fixture
def drip():
    server = Drip()
    yield server
    server.close()


def observation(questions=2, L=2):
    qs = tuple({"id": f"basic_arithmetic/0/{k}", "task": "basic_arithmetic",
                "prompt": f"{k} + 1 = ?", "ref": {"task": "basic_arithmetic", "config": {},
                                                  "seed": 0, "index": k}}
               for k in range(questions))
    return make_observation(round=0, system_prompt="", completions_per_question=L,
                            train_budget=8, num_external=4, questions=qs)


def chat(*texts) -> bytes:
    return json.dumps({"choices": [{"message": {"content": t}} for t in texts]}).encode()


def mocked(handler, **config):
    """A node whose requests go to ``handler(request) -> httpx2.Response``; it records them."""
    seen = []

    def record(request):
        seen.append(request)
        return handler(request)

    node = ServedAgent("http://served.test/v1", "m", ServedConfig(n_mode="n", **config),
                       http_client=lambda: httpx2.AsyncClient(
                           transport=httpx2.MockTransport(record)))
    return node, seen


async def streamed(data: bytes):
    """``data`` as a response stream (a mock response given bytes is read, and decoded, at
    once)."""
    yield data


def question(request) -> int:
    return int(json.loads(request.content)["messages"][-1]["content"][0])


# --- deadlines ------------------------------------------------------------------------------

def test_a_dripping_reply_is_cut_at_the_try_deadline(drip):
    """Each byte comes well within any read timeout; the try's deadline cuts it anyway."""
    node = ServedAgent(drip.url, "m", ServedConfig(timeout=0.3, max_retries=0, n_mode="n"))
    with pytest.raises(ServerUnavailable, match="did not answer after 1 try"):
        node.act(observation(questions=2))
    time.sleep(2 * INTERVAL)  # let the server see the hang-up
    assert len(drip.sent) == 2 and max(drip.sent) <= 0.3 / INTERVAL + 2 < len(REPLY)


def test_the_round_deadline_bounds_the_whole_act(drip):
    """Requests queued behind a dripping one never start once the round's time is spent."""
    node = ServedAgent(drip.url, "m", ServedConfig(timeout=10, max_retries=3, n_mode="n",
                                                   round_timeout=0.3,
                                                   max_concurrent_requests=1))
    with pytest.raises(ServerUnavailable):
        node.act(observation(questions=3))
    time.sleep(2 * INTERVAL)
    assert len(drip.sent) == 1 and drip.sent[0] <= 0.3 / INTERVAL + 2


def test_wait_until_ready_gives_up_at_its_deadline(drip):
    node = ServedAgent(drip.url, "m")
    with pytest.raises(ServerUnavailable, match="within 0.3 s"):
        node.wait_until_ready(timeout=0.3, poll=0.05)
    time.sleep(2 * INTERVAL)
    assert len(drip.sent) == 1 and drip.sent[0] <= 0.3 / INTERVAL + 2


# --- the byte cap ---------------------------------------------------------------------------

def test_a_compressed_reply_is_decoded_no_further_than_the_cap(monkeypatch):
    """30 kB of gzip that would decode to 30 MB: the decoder is asked for at most the cap."""
    decoded = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def decompress(self, data, max_length):
            out = self.inner.decompress(data, max_length)
            decoded.append(len(out))
            return out

        @property
        def eof(self):
            return self.inner.eof

    real = served_http.inflater
    monkeypatch.setattr(served_http, "inflater", lambda encoding: Counting(real(encoding)))
    bomb = gzip.compress(b'{"choices": [' + b"{}," * 10_000_000 + b"{}]}", 9)
    assert len(bomb) < 100_000

    def handler(request):
        if question(request) == 0:
            return httpx2.Response(200, content=streamed(bomb),
                                   headers={"Content-Encoding": "gzip"})
        return httpx2.Response(200, content=chat("ok", "ok"))

    node, _ = mocked(handler, max_reply_bytes=50_000)
    action = node.act(observation(questions=2))
    assert action["completions"] == (("", ""), ("ok", "ok"))
    assert node.learn(())["failed_requests"] == 1
    assert sum(decoded) <= 50_001


async def chunks(body: bytes, pulled: list, tail: int = 0):
    """``body`` as a stream of 100-byte chunks, then ``tail`` chunks of spaces; ``pulled``
    counts the chunks read."""
    for start in range(0, len(body), 100):
        pulled.append(start)
        yield body[start:start + 100]
    for _ in range(tail):
        pulled.append(0)
        yield b" " * 100


@pytest.mark.parametrize("slack, failed", [(0, 0), (-1, 1)])
def test_a_reply_of_the_cap_is_read_and_one_byte_more_fails(slack, failed):
    body, pulled = chat("a" * 1000, "b"), []

    def handler(request):
        return httpx2.Response(200, content=chunks(body, pulled) if question(request) == 0
                               else chat("x", "y"))

    node, _ = mocked(handler, max_reply_bytes=len(body) + slack)
    action = node.act(observation(questions=2))
    assert node.learn(())["failed_requests"] == failed
    assert action["completions"][0] == (("", "") if failed else ("a" * 1000, "b"))


def test_a_reply_that_goes_on_is_not_read_past_the_cap():
    """A stream that would go on for another megabyte: chunks pulled, counted."""
    body, pulled = chat("a" * 1000, "b"), []

    def handler(request):
        return httpx2.Response(200, content=chunks(body, pulled, tail=10_000)
                               if question(request) == 0 else chat("x", "y"))

    node, _ = mocked(handler, max_reply_bytes=2000)
    assert node.act(observation(questions=2))["completions"][0] == ("", "")
    assert node.learn(())["failed_requests"] == 1 and len(pulled) <= 2000 // 100 + 1


def test_the_derived_cap_holds_what_a_legal_reply_can_be():
    """L completions of max_tokens tokens of escaped emoji (12 JSON bytes a token) fit."""
    config = ServedConfig(max_tokens=64)
    legal = json.dumps({"choices": [{"message": {"content": "\U0001f600" * 64}}] * 8})
    assert len(legal) <= config.reply_cap(8) and config.reply_cap(8) < 1_000_000


# --- retries --------------------------------------------------------------------------------

@pytest.fixture
def fake_time(monkeypatch):
    """The module's clock and pause on a fake clock: ``slept`` records each pause."""
    now, slept = [0.0], []

    async def pause(seconds):
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(served_http, "clock", lambda: now[0])
    monkeypatch.setattr(served_http, "pause", pause)
    return slept


@pytest.mark.parametrize("retry_after, retries, round_timeout, waits", [
    ("2", 5, None, [2.0, 2.0]),       # a round of 6 s: a third wait would reach it
    ("60", 2, None, []),              # longer than the round: no wait, no retry
    (None, 5, 4.0, [0.5, 1.0, 2.0]),  # back-off, cut by the round's 4 s
])
def test_retry_after_never_waits_past_the_round_deadline(fake_time, retry_after, retries,
                                                         round_timeout, waits):
    """A server that answers 503 to everything: the node retries within its round, then
    leaves (every request of the round failed)."""
    headers = {"Retry-After": retry_after} if retry_after else {}
    node, seen = mocked(lambda request: httpx2.Response(503, headers=headers), timeout=1,
                        max_retries=retries, round_timeout=round_timeout)
    with pytest.raises(ServerUnavailable, match="answered none of the 1 requests"):
        node.act(observation(questions=1))
    assert fake_time == waits and sum(fake_time) < node.config.round_seconds
    assert len(seen) == len(waits) + 1


def test_a_server_that_fails_every_request_leaves_the_swarm(fake_time):
    node, seen = mocked(lambda request: httpx2.Response(503, headers={"Retry-After": "1"}),
                        timeout=1, max_retries=2)
    env = sapo_env.parallel_env(n=2, max_rounds=3)
    history = sapo_env.runtime.run(env, [node, DemonstratorAgent(seed=1)], seed=0,
                                   progress=False)
    assert np.isnan(history.rewards[:, 0]).all() and history.rewards[:, 1].min() == 1.0
    assert sum(fake_time) < node.config.round_seconds  # waits of round 0 only: then it left


@pytest.mark.parametrize("value, seconds", [
    ("3", 3.0), ("0.25", 0.25), ("-4", 0.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    ("nan", None), ("inf", None), ("soon", None), ("9" * 100, None), ("", None)])
def test_retry_after_reads_seconds_or_a_date_and_nothing_else(value, seconds):
    assert served_http.retry_after({"retry-after": value}) == seconds


# --- redirects and refusals -----------------------------------------------------------------

def test_a_redirect_is_not_followed():
    def handler(request):
        if request.url.host != "served.test":
            return httpx2.Response(200, content=chat("followed", "followed"))
        if question(request) == 0:
            return httpx2.Response(302, headers={"Location": "http://elsewhere.test/v1/x"})
        return httpx2.Response(200, content=chat("ok", "ok"))

    node, seen = mocked(handler)
    action = node.act(observation(questions=2))
    assert {r.url.host for r in seen} == {"served.test"} and len(seen) == 2
    assert action["completions"] == (("", ""), ("ok", "ok"))
    assert node.learn(())["failed_requests"] == 1


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_refusal_removes_the_node_and_the_swarm_goes_on(status):
    node, seen = mocked(lambda request: httpx2.Response(status, content=b"wrong key"))
    with pytest.raises(NodeRefused) as error:
        node.act(observation())
    assert isinstance(error.value, NodeFailure) and "\n" not in str(error.value)
    assert str(status) in str(error.value) and "wrong key" in str(error.value)
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    history = sapo_env.runtime.run(env, [node, DemonstratorAgent(seed=1)], seed=0,
                                   progress=False)
    assert np.isnan(history.rewards[:, 0]).all() and history.rewards[:, 1].min() == 1.0


def test_stop_run_on_refusal_stops_the_run():
    node, _ = mocked(lambda request: httpx2.Response(401), stop_run_on_refusal=True)
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    with pytest.raises(ServerRefused, match="401") as error:
        sapo_env.runtime.run(env, [node, DemonstratorAgent(seed=1)], seed=0, progress=False)
    assert not isinstance(error.value, NodeFailure)


def test_an_encoding_not_offered_or_broken_reads_as_malformed():
    def handler(request):
        encoding, content = [("br", chat("x", "y")), ("gzip", b"not gzip")][question(request)]
        return httpx2.Response(200, content=streamed(content),
                               headers={"Content-Encoding": encoding})

    node, _ = mocked(handler)
    assert node.act(observation(questions=2))["completions"] == (("", ""), ("", ""))
    assert node.learn(())["malformed"] == 4


@pytest.mark.parametrize("module", ["agents.serving.served", "agents.serving.served_config",
                                    "agents.serving.served_http"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
