"""A swarm node whose policy is a model behind an OpenAI-compatible server (vLLM, sglang,
llama.cpp, Ollama, a hosted endpoint): ``ServedAgent``.

``ServedAgent(base_url, model, config=ServedConfig(), num_external=4, seed=0)``:

``act(observation)``
    asks the server for ``completions_per_question`` (L) completions of every question, as
    OpenAI chat-completions requests (``POST {base_url}/chat/completions``): the observation's
    system prompt and the question as the chat messages (the server applies the model's chat
    template), ``n=L``, ``temperature``, ``max_tokens`` and, with a ``seed``, one request seed
    drawn from the agent's own generator. The requests of a round run up to
    ``max_concurrent_requests`` at a time. A server that ignores ``n`` (llama-cpp-python's
    server drops it and answers one completion) gets the missing completions as further
    one-completion requests, each with its own seed: see ``ServedConfig.n_mode``.
``learn(batch)``
    trains nothing: the served weights are frozen or trained elsewhere (the paper allows a node
    "any compatible policy"). It returns the counts of the requests its last ``act`` made,
    below, which the run history records. ``on_learn(agent, batch)`` is the hook for a server
    that can load new weights: train an adapter on ``batch`` wherever you like, save it, and
    call :meth:`ServedAgent.load_lora_adapter` (vLLM's ``/v1/load_lora_adapter``, LoRA
    hot-swap); its metrics join the counts. docs/served.md has the recipe.

Everything the server sends is untrusted data (``agents.serving.served_http`` reads it,
bounded), and one bad answer costs at most that request's completions:

- a body that is not JSON, has no ``choices`` list, or a choice without a string
  ``message.content``: the completions it should have carried are empty strings (scored 0),
  counted in ``malformed``;
- fewer choices than asked (after the refill of ``n_mode``): empty strings, ``missing``;
  more: the extra ones are dropped;
- text longer than ``max_completion_chars`` (the env's limit): cut, ``truncated``; text that
  is not valid Unicode (lone surrogates from JSON escapes): replaced by "?", ``malformed``;
- a body longer than ``ServedConfig.reply_cap`` once decoded: not read past the cap, its
  completions empty, ``failed_requests``;
- an HTTP error status other than the three below (a redirect included: none is followed),
  after the retries (408, 409, 429 and 5xx are retried): empty, ``failed_requests``.

What a server can cost a round is bounded: each try of a request ends ``timeout`` seconds
after it starts, connect to last byte, and the whole ``act`` (its requests, retries and waits
together, ``Retry-After`` included) by ``ServedConfig.round_timeout``. Three things remove the
node from the swarm (the others go on), each with a one-line error naming the server:

- a request that got no answer in time (no connection, or no complete reply by its deadline)
  after its retries: :class:`ServerUnavailable`, a ``NodeFailure``;
- a round in which not one request got a 2xx answer (every one failed): ``ServerUnavailable``;
- 401, 403 or 404 (a wrong key, URL or model name, which every request would hit):
  :class:`NodeRefused`, a :class:`ServerRefused` and a ``NodeFailure``. With
  ``ServedConfig.stop_run_on_refusal`` it is a plain ``ServerRefused``, which stops the run.

``state_dict()`` / ``load_state_dict(state)``: its generator and whether the server was found
to ignore ``n`` (``agents.plain_state``).

Example (``python -m llama_cpp.server --model SmolLM2-135M-Instruct.Q4_1.gguf`` listening on
port 8000; or ``vllm serve Qwen/Qwen2.5-0.5B-Instruct``)::

    import sapo_env.runtime
    from agents import DemonstratorAgent, ServedAgent, ServedConfig

    env = sapo_env.parallel_env(n=2, max_rounds=3)
    served = ServedAgent("http://127.0.0.1:8000/v1", "smollm2",
                         ServedConfig(max_tokens=64))
    served.wait_until_ready(timeout=120)
    sapo_env.runtime.run(env, [served, DemonstratorAgent(seed=1)])
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from agents.plain_state import PlainState
from agents.serving import served_http as http
from agents.serving.served_config import N_MODES, NMode, ServedConfig
from sapo_env.runtime.agent_calls import NodeFailure
from sapo_env.types import Action, Group, Observation
from sapo_env.validation import check_fits_budget, check_int

__all__ = ["COUNTS", "N_MODES", "NMode", "NodeRefused", "Reply", "ServedAgent", "ServedConfig",
           "ServerRefused", "ServerUnavailable", "read_reply"]

logger = logging.getLogger(__name__)

#: statuses that mean the node is set up wrong (key, URL, model), not that a request failed
REFUSED_STATUSES = (401, 403, 404)
#: seconds one ``ready`` poll of ``wait_until_ready`` may take
READY_TIMEOUT = 5.0
COUNTS = ("requests", "failed_requests", "malformed", "missing", "truncated")
"""What ``learn`` reports of the last ``act``'s requests (see the module docstring)."""


class ServerUnavailable(NodeFailure):
    """The server could not be reached, did not answer in time after every retry, or failed
    every request of a round: the node is gone (the runner removes it from the swarm)."""


class ServerRefused(RuntimeError):
    """The server refused the node's requests with 401, 403 or 404: a wrong API key, URL or
    model name, which no retry mends. Raised as such (it stops the run) with
    ``ServedConfig.stop_run_on_refusal``; otherwise as :class:`NodeRefused`."""


class NodeRefused(ServerRefused, NodeFailure):
    """A :class:`ServerRefused` that removes only this node from the swarm (the default)."""


@dataclass
class Reply:
    """What one request brought back, as data: its texts (at most as many as asked) and what
    was wrong with it."""

    texts: list[str] = field(default_factory=list)  #: "" for each one that could not be read
    failed: bool = False  #: an HTTP error status: its texts are all ""
    malformed: int = 0  #: completions lost or repaired because the body was not as expected
    truncated: int = 0  #: texts cut to ``max_completion_chars``


def read_reply(body: bytes, wanted: int, max_chars: int) -> Reply:
    """The completions of a chat-completions response ``body`` (untrusted bytes), at most
    ``wanted`` of them, each cut to ``max_chars``. Never raises: what cannot be read is
    counted (see the module docstring).

    >>> read_reply(b'{"choices": [{"message": {"content": "4"}}]}', 2, 100)
    Reply(texts=['4'], failed=False, malformed=0, truncated=0)
    >>> read_reply(b'<html>', 2, 100)
    Reply(texts=['', ''], failed=False, malformed=2, truncated=0)
    """
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deep
        return Reply([""] * wanted, malformed=wanted)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list):
        return Reply([""] * wanted, malformed=wanted)
    reply = Reply()
    for choice in choices[:wanted]:
        message = choice.get("message") if isinstance(choice, dict) else None
        text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(text, str):
            reply.texts.append("")
            reply.malformed += 1
            continue
        repaired = text.encode("utf-8", "replace").decode("utf-8")
        reply.malformed += repaired != text
        reply.truncated += len(repaired) > max_chars
        reply.texts.append(repaired[:max_chars])
    return reply


class ServedAgent(PlainState):
    """A node that generates through an OpenAI-compatible server; see the module docstring.

    Args:
        base_url: the server's OpenAI API root, e.g. ``"http://127.0.0.1:8000/v1"``.
        model: the model name the server knows (vLLM: the served model or a LoRA adapter's
            name; llama.cpp's server answers with its one model whatever this says).
        config: sampling, limits, deadlines, retries (``ServedConfig``).
        num_external: J it asks for every round; ``act`` raises if it exceeds the env's
            ``train_budget`` (I+J).
        seed: seed of the generator that draws each request's ``seed`` (same seed, same
            requests; a server samples reproducibly from them where it supports it). None
            sends no seed.
        api_key: the server's key, sent as ``Authorization: Bearer``; None reads
            ``OPENAI_API_KEY``, and a local server that checks none gets ``"none"``.
        on_learn: ``on_learn(agent, batch) -> metrics | None``, called by ``learn``: the hook
            for training elsewhere and loading the result (:meth:`load_lora_adapter`).
        http_client: ``http_client() -> httpx2.AsyncClient``, called once per ``act`` (a
            client's connections belong to one event loop), for a proxy, TLS settings, extra
            headers or event hooks. The node's deadlines, byte cap and refusal to follow
            redirects apply whatever the client's own settings.
    """

    _state_fields = ("rng", "server_ignores_n")

    def __init__(self, base_url: str, model: str, config: ServedConfig | None = None,
                 num_external: int = 4, seed: int | None = 0, api_key: str | None = None,
                 on_learn: Callable[[ServedAgent, Sequence[Group]],
                                    Mapping[str, float] | None] | None = None,
                 http_client: Callable[[], Any] | None = None):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL such as "
                             f"'http://127.0.0.1:8000/v1', got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be the model name the server serves, got {model!r}")
        check_int("num_external", num_external, 0)
        self.config = config or ServedConfig()
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.num_external = num_external
        self.send_seeds = seed is not None
        self.rng = np.random.default_rng(seed)
        self.on_learn = on_learn
        self.server_ignores_n = False  #: learnt by ``n_mode="auto"`` (state, not a setting)
        if http_client is None:  # TLS set up once, not in every round's client
            http_client = partial(http.httpx2.AsyncClient, verify=http.httpx2.create_ssl_context())
        self.http_client = http_client
        key = api_key or os.environ.get("OPENAI_API_KEY") or "none"
        self.headers = {"Authorization": f"Bearer {key}"}
        self._counts = dict.fromkeys(COUNTS, 0)

    def act(self, observation: Observation) -> Action:
        check_fits_budget("ServedAgent", self.num_external, observation["train_budget"])
        deadline = http.clock() + self.config.round_seconds
        return http.run_coroutine(self._act(observation, deadline))

    async def _act(self, observation: Observation, deadline: float) -> Action:
        L = observation["completions_per_question"]
        questions = observation["questions"]
        system = observation["system_prompt"]
        messages = [([{"role": "system", "content": system}] if system else [])
                    + [{"role": "user", "content": q["prompt"]}] for q in questions]
        repeat = self.config.n_mode == "repeat" or self.server_ignores_n
        first = [(k, 1) for k in range(len(questions)) for _ in range(L)] if repeat else [
            (k, L) for k in range(len(questions))]
        async with self.http_client() as client:
            replies = await self._ask(client, messages, first, deadline)
            refill = self._refill(first, replies, L) if (
                self.config.n_mode == "auto" and not repeat) else []
            refilled = await self._ask(client, messages, refill, deadline)
        if replies and all(reply.failed for reply in replies + refilled):
            raise ServerUnavailable(f"the server at {self.base_url} answered none of the "
                                    f"{len(replies) + len(refilled)} requests of the round")
        texts: list[list[str]] = [[] for _ in questions]
        for (k, _), reply in zip(first, replies):
            texts[k] += reply.texts
        for (k, _), reply in zip(refill, refilled):
            texts[k] += reply.texts[:1]
        self._counts["missing"] += sum(L - len(t) for t in texts)
        completions = tuple(tuple(t + [""] * (L - len(t))) for t in texts)
        return {"completions": completions, "num_external": self.num_external}

    def _refill(self, first: Sequence[tuple[int, int]], replies: Sequence[Reply], L: int
                ) -> list[tuple[int, int]]:
        """``n_mode="auto"``: one ``n=1`` request for each completion the ``n=L`` requests
        ``first`` lacked; a server that answered one choice to ``n=L`` ignores ``n`` (learnt
        here, for later rounds)."""
        short = [(k, reply) for (k, _), reply in zip(first, replies)
                 if not reply.failed and len(reply.texts) < L]
        if any(len(r.texts) == 1 and not r.malformed for _, r in short) and L > 1:
            self.server_ignores_n = True
            logger.info("the server at %s answers one completion to n=%d: asking for each "
                        "completion in its own request from now on", self.base_url, L)
        return [(k, 1) for k, reply in short for _ in range(L - len(reply.texts))]

    def learn(self, batch: Sequence[Group]) -> dict[str, float]:
        """No update of the served weights; the counts of the last ``act``'s requests, and the
        ``on_learn`` hook's metrics where it has one."""
        metrics = {name: float(count) for name, count in self._counts.items()}
        self._counts = dict.fromkeys(COUNTS, 0)
        if self.on_learn is not None:
            metrics.update(self.on_learn(self, batch) or {})
        return metrics

    async def _ask(self, client: Any, messages: Sequence[list[dict[str, str]]],
                   requests: Sequence[tuple[int, int]], deadline: float) -> list[Reply]:
        """One request per ``(question, n)``, up to ``max_concurrent_requests`` at once, all
        by ``deadline``, their seeds drawn first in request order (so the same seed gives the
        same requests however they interleave). The first ``NodeFailure`` of one cancels the
        others and is raised."""
        if not requests:
            return []
        seeds = [int(s) for s in self.rng.integers(0, 2**31, size=len(requests))]
        gate = asyncio.Semaphore(self.config.max_concurrent_requests)
        tasks = [asyncio.ensure_future(self._request(client, gate, messages[k], n, seed,
                                                     deadline))
                 for (k, n), seed in zip(requests, seeds)]
        try:
            replies = list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._counts["requests"] += len(replies)
        self._counts["failed_requests"] += sum(r.failed for r in replies)
        self._counts["malformed"] += sum(r.malformed for r in replies)
        self._counts["truncated"] += sum(r.truncated for r in replies)
        failed = sum(r.failed for r in replies)
        if failed:
            logger.warning("the server at %s failed %d of %d requests (an error status or a "
                           "reply too large): their completions are empty", self.base_url,
                           failed, len(replies))
        return replies

    async def _request(self, client: Any, gate: asyncio.Semaphore,
                       messages: list[dict[str, str]], n: int, seed: int,
                       deadline: float) -> Reply:
        """One chat-completions request for ``n`` completions, read as untrusted data."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "n": n,
                                "temperature": self.config.temperature,
                                "max_tokens": self.config.max_tokens}
        if self.send_seeds:
            body["seed"] = seed
        cap = self.config.reply_cap(n)
        try:
            answer = await http.exchange_with_retries(
                client, "POST", f"{self.base_url}/chat/completions", self.config.timeout,
                self.config.max_retries, deadline, gate, cap=cap, json=body,
                headers=self.headers)
        except http.NoAnswer as error:
            raise ServerUnavailable(
                f"the server at {self.base_url} did not answer after {error.tries} "
                f"{'try' if error.tries == 1 else 'tries'}: {_one_line(error)}") from None
        except http.TooLarge:
            logger.warning("the server at %s sent a reply of more than %d bytes: dropped",
                           self.base_url, cap)
            return Reply([""] * n, failed=True)
        if answer.status in REFUSED_STATUSES:
            raise self._refusal(f"the server at {self.base_url} refused model {self.model!r} "
                                f"with {answer.status} (check base_url, model and api_key): "
                                f"{_one_line(answer.body)}")
        if not answer.ok:
            return Reply([""] * n, failed=True)
        return read_reply(answer.body, n, self.config.max_completion_chars)

    def _refusal(self, message: str) -> ServerRefused:
        """The refusal to raise: one that stops the run, or only removes this node."""
        return (ServerRefused if self.config.stop_run_on_refusal else NodeRefused)(message)

    def _once(self, method: str, path: str, timeout: float, **request: Any) -> http.Answer:
        """One request (no retries) that ends within ``timeout`` seconds; ``NoAnswer``."""
        deadline = http.clock() + timeout

        async def once() -> http.Answer:
            async with self.http_client() as client:
                return await http.exchange(client, method, f"{self.base_url}{path}", deadline,
                                           headers=self.headers, **request)

        return http.run_coroutine(once())

    def ready(self, timeout: float = READY_TIMEOUT) -> bool:
        """Whether the server answers ``GET /models`` with a 2xx status within ``timeout``
        seconds (one try)."""
        try:
            return self._once("GET", "/models", timeout).ok
        except http.NoAnswer:
            return False

    def wait_until_ready(self, timeout: float = 300.0, poll: float = 0.5) -> None:
        """Poll :meth:`ready` until the server answers; ``ServerUnavailable`` once ``timeout``
        seconds have passed (a model server can take minutes to load its weights), each poll
        within what is left of them."""
        deadline = http.clock() + timeout
        while not self.ready(min(READY_TIMEOUT, deadline - http.clock())):
            left = deadline - http.clock()
            if left <= 0:
                raise ServerUnavailable(f"the server at {self.base_url} did not answer "
                                        f"GET /models within {timeout:g} s")
            time.sleep(min(poll, left))

    def load_lora_adapter(self, name: str, path: str, inplace: bool = False) -> None:
        """Load the LoRA adapter at ``path`` (a folder on the server's machine) into a vLLM
        server as ``name`` and generate with it from now on (``model`` becomes ``name``).
        vLLM must run with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``;
        ``inplace`` replaces the weights of an adapter already loaded under ``name`` (vLLM's
        ``load_inplace``, recent versions). One try within ``ServedConfig.timeout``; a server
        without the endpoint, or any error status, raises a ``ServerRefused`` (as ``act``
        does: ``NodeRefused`` unless ``stop_run_on_refusal``)."""
        body: dict[str, Any] = {"lora_name": name, "lora_path": path}
        if inplace:
            body["load_inplace"] = True
        try:
            answer = self._once("POST", "/load_lora_adapter", self.config.timeout, json=body)
        except http.NoAnswer as error:
            raise ServerUnavailable(f"the server at {self.base_url} did not answer "
                                    f"POST /load_lora_adapter: {_one_line(error)}") from None
        if not answer.ok:
            raise self._refusal(f"the server at {self.base_url} did not load adapter {name!r} "
                                f"from {path!r} ({answer.status}; vLLM needs --enable-lora "
                                f"and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True): "
                                f"{_one_line(answer.body)}")
        self.model = name


def _one_line(error: BaseException | bytes, limit: int = 300) -> str:
    """An error's text, or an error body (both may quote the server's untrusted answer), on
    one short line."""
    text = error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
    return " ".join(text.split())[:limit]
