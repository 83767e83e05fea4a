"""A swarm node whose policy is a model behind an OpenAI-compatible server (vLLM, sglang,
llama.cpp, Ollama, a hosted endpoint): ``ServedAgent``.

``ServedAgent(base_url, model, config=ServedConfig(), num_external=4, seed=0)``:

``act(observation)``
    asks the server for ``completions_per_question`` (G) completions of every question, through
    the official ``openai`` client's chat completions: the observation's system prompt and the
    question as the chat messages (the server applies the model's chat template), ``n=G``,
    ``temperature``, ``max_tokens`` and, with a ``seed``, one request seed drawn from the
    agent's own generator. The requests of a round run up to ``max_concurrent_requests`` at
    a time. A server that ignores ``n`` (llama-cpp-python's server drops it and answers one
    completion) gets the missing completions as further one-completion requests, each with
    its own seed: see ``ServedConfig.n_mode``.
``learn(batch)``
    trains nothing: the served weights are frozen or trained elsewhere (the paper allows a node
    "any compatible policy"). It returns the counts of the requests its last ``act`` made,
    below, which the run history records. ``on_learn(agent, batch)`` is the hook for a server
    that can load new weights: train an adapter on ``batch`` wherever you like, save it, and
    call :meth:`ServedAgent.load_lora_adapter` (vLLM's ``/v1/load_lora_adapter``, LoRA
    hot-swap); its metrics join the counts. docs/served.md has the recipe.

Everything the server sends is untrusted data, and one bad answer costs at most that
request's completions, never the round:

- a body that is not JSON, has no ``choices`` list, or a choice without a string
  ``message.content``: the completions it should have carried are empty strings (scored 0),
  counted in ``malformed``;
- fewer choices than asked (after the refill of ``n_mode``): empty strings, ``missing``;
  more: the extra ones are dropped;
- text longer than ``max_completion_chars`` (the env's limit): cut, ``truncated``; text that
  is not valid Unicode (lone surrogates from JSON escapes): replaced by "?", ``malformed``;
- an HTTP error status other than the three below, after the client's retries (429 and 5xx
  are retried): the request's completions are empty, ``failed_requests``.

Two things stop the node instead: a server that cannot be reached or does not answer within
``timeout`` after ``max_retries`` retries raises :class:`ServerUnavailable`, a
``NodeFailure``, so ``sapo_env.runtime.run`` removes the node from the swarm and the others
go on; 401, 403 or 404 (a wrong key, URL or model name, which every request would hit) raise
:class:`ServerRefused`, which stops the run. Both messages are one line naming the server.

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

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from agents.plain_state import PlainState
from sapo_env.extras import require
from sapo_env.runtime.agent_calls import NodeFailure
from sapo_env.types import Action, Group, Observation
from sapo_env.validation import check_fits_budget, check_int

openai = require("openai", "agents.served")

logger = logging.getLogger(__name__)

NMode = Literal["auto", "n", "repeat"]
N_MODES: tuple[str, ...] = ("auto", "n", "repeat")
#: statuses that mean the node is set up wrong (key, URL, model), not that a request failed
REFUSED_STATUSES = (401, 403, 404)
COUNTS = ("requests", "failed_requests", "malformed", "missing", "truncated")
"""What ``learn`` reports of the last ``act``'s requests (see the module docstring)."""


@dataclass
class ServedConfig:
    """How a ``ServedAgent`` asks its server (sampling, limits, retries)."""

    # Sampling
    temperature: float = 1.0
    """Sampling temperature (the paper's and ``GRPOConfig``'s 1.0)."""
    max_tokens: int = 256
    """Most tokens the server generates per completion (the paper's 256)."""
    n_mode: NMode = "auto"
    """How G completions of a question are asked for. ``"n"``: one request with ``n=G``
    (vLLM, sglang, OpenAI); a server answering fewer leaves them empty (``missing``).
    ``"repeat"``: G requests with ``n=1``, each with its own seed (servers without ``n``).
    ``"auto"``: ``n=G`` first; where the server answers fewer, the missing ones are asked for
    with ``n=1`` requests, and once it has answered one choice to ``n>1`` (it ignores ``n``,
    as llama-cpp-python's server does) every later round uses ``"repeat"`` directly."""
    # Limits
    max_completion_chars: int = 16384
    """Longer completions are cut to this many characters: the env refuses longer ones
    (``SwarmConfig.max_completion_chars``; set the same value if you change the env's)."""
    max_concurrent_requests: int = 8
    """Requests of a round in flight at once (a batching server such as vLLM serves them
    together; llama.cpp's queues them)."""
    # Timeouts and retries
    timeout: float = 120.0
    """Seconds one request may take, waiting in the server's queue included, before it is
    tried again."""
    max_retries: int = 2
    """Retries of a request the ``openai`` client makes (connection errors, timeouts, 408,
    409, 429 and 5xx, with exponential back-off) before it gives up."""

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise ValueError(f"temperature must be a number >= 0, got {self.temperature!r}")
        check_int("max_tokens", self.max_tokens, 1)
        if self.n_mode not in N_MODES:
            raise ValueError(f"n_mode must be one of {N_MODES}, got {self.n_mode!r}")
        check_int("max_completion_chars", self.max_completion_chars, 1)
        check_int("max_concurrent_requests", self.max_concurrent_requests, 1)
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise ValueError(f"timeout must be a number of seconds > 0, got {self.timeout!r}")
        check_int("max_retries", self.max_retries, 0)


class ServerUnavailable(NodeFailure):
    """The server could not be reached, or did not answer in time, after every retry: the
    node is gone (the runner removes it from the swarm)."""


class ServerRefused(RuntimeError):
    """The server refused the node's requests with 401, 403 or 404: a wrong API key, URL or
    model name, which no retry mends."""


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
        config: sampling, limits, timeouts and retries (``ServedConfig``).
        num_external: J it asks for every round; ``act`` raises if it exceeds the env's
            ``train_budget`` (I+J).
        seed: seed of the generator that draws each request's ``seed`` (same seed, same
            requests; a server samples reproducibly from them where it supports it). None
            sends no seed.
        api_key: the server's key; None reads ``OPENAI_API_KEY``, and a local server that
            checks none gets ``"none"``.
        on_learn: ``on_learn(agent, batch) -> metrics | None``, called by ``learn``: the hook
            for training elsewhere and loading the result (:meth:`load_lora_adapter`).
        client: an ``openai.OpenAI`` client to use instead of building one (a proxy, custom
            headers); ``api_key``, ``timeout`` and ``max_retries`` are then its own.
    """

    _state_fields = ("rng", "server_ignores_n")

    def __init__(self, base_url: str, model: str, config: ServedConfig | None = None,
                 num_external: int = 4, seed: int | None = 0, api_key: str | None = None,
                 on_learn: Callable[[ServedAgent, Sequence[Group]],
                                    Mapping[str, float] | None] | None = None,
                 client: Any = None):
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
        self.client = client or openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "none",
            timeout=self.config.timeout, max_retries=self.config.max_retries)
        self._counts = dict.fromkeys(COUNTS, 0)

    def act(self, observation: Observation) -> Action:
        check_fits_budget("ServedAgent", self.num_external, observation["train_budget"])
        G = observation["completions_per_question"]
        questions = observation["questions"]
        system = observation["system_prompt"]
        messages = [([{"role": "system", "content": system}] if system else [])
                    + [{"role": "user", "content": q["prompt"]}] for q in questions]
        repeat = self.config.n_mode == "repeat" or self.server_ignores_n
        first = [(k, 1) for k in range(len(questions)) for _ in range(G)] if repeat else [
            (k, G) for k in range(len(questions))]
        replies = self._ask(messages, first)
        texts: list[list[str]] = [[] for _ in questions]
        for (k, _), reply in zip(first, replies):
            texts[k] += reply.texts
        if self.config.n_mode == "auto" and not repeat:
            short = [(k, reply) for (k, _), reply in zip(first, replies)
                     if not reply.failed and len(reply.texts) < G]
            if any(len(r.texts) == 1 and not r.malformed for _, r in short) and G > 1:
                self.server_ignores_n = True
                logger.info("the server at %s answers one completion to n=%d: asking for "
                            "each completion in its own request from now on", self.base_url, G)
            refill = [(k, 1) for k, reply in short for _ in range(G - len(reply.texts))]
            for (k, _), reply in zip(refill, self._ask(messages, refill)):
                texts[k] += reply.texts[:1]
        self._counts["missing"] += sum(G - len(t) for t in texts)
        completions = tuple(tuple(t + [""] * (G - len(t))) for t in texts)
        return {"completions": completions, "num_external": self.num_external}

    def learn(self, batch: Sequence[Group]) -> dict[str, float]:
        """No update of the served weights; the counts of the last ``act``'s requests, and the
        ``on_learn`` hook's metrics where it has one."""
        metrics = {name: float(count) for name, count in self._counts.items()}
        self._counts = dict.fromkeys(COUNTS, 0)
        if self.on_learn is not None:
            metrics.update(self.on_learn(self, batch) or {})
        return metrics

    def _ask(self, messages: Sequence[list[dict[str, str]]], requests: Sequence[tuple[int, int]]
             ) -> list[Reply]:
        """One request per ``(question, n)``, up to ``max_concurrent_requests`` at once, their
        seeds drawn first in request order (so the same seed gives the same requests however
        the threads interleave)."""
        if not requests:
            return []
        seeds = [int(s) for s in self.rng.integers(0, 2**31, size=len(requests))]
        workers = min(self.config.max_concurrent_requests, len(requests))
        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(self._request, messages[k], n, seed)
                       for (k, n), seed in zip(requests, seeds)]
            try:
                replies = [future.result() for future in futures]
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        self._counts["requests"] += len(replies)
        self._counts["failed_requests"] += sum(r.failed for r in replies)
        self._counts["malformed"] += sum(r.malformed for r in replies)
        self._counts["truncated"] += sum(r.truncated for r in replies)
        failed = sum(r.failed for r in replies)
        if failed:
            logger.warning("the server at %s answered %d of %d requests with an error status: "
                           "their completions are empty", self.base_url, failed, len(replies))
        return replies

    def _request(self, messages: list[dict[str, str]], n: int, seed: int) -> Reply:
        """One chat-completions request for ``n`` completions, read as untrusted data."""
        options: dict[str, Any] = {"seed": seed} if self.send_seeds else {}
        try:
            raw = self.client.chat.completions.with_raw_response.create(
                model=self.model, messages=messages, n=n, temperature=self.config.temperature,
                max_tokens=self.config.max_tokens, **options)
        except openai.APIConnectionError as error:  # timeouts included, after the retries
            tries = 1 + self.client.max_retries
            raise ServerUnavailable(
                f"the server at {self.base_url} did not answer after {tries} "
                f"{'try' if tries == 1 else 'tries'}: {type(error).__name__}: "
                f"{_one_line(error)}") from None
        except openai.APIStatusError as error:
            if error.status_code in REFUSED_STATUSES:
                raise ServerRefused(
                    f"the server at {self.base_url} refused model {self.model!r} with "
                    f"{error.status_code} (check base_url, model and api_key): "
                    f"{_one_line(error)}") from None
            return Reply([""] * n, failed=True)
        return read_reply(raw.content, n, self.config.max_completion_chars)

    def ready(self) -> bool:
        """Whether the server answers ``GET /models`` now (one try, no retries)."""
        try:
            self.client.with_options(max_retries=0, timeout=5.0).models.list()
        except openai.OpenAIError:
            return False
        return True

    def wait_until_ready(self, timeout: float = 300.0, poll: float = 0.5) -> None:
        """Poll :meth:`ready` until the server answers; ``ServerUnavailable`` after
        ``timeout`` seconds (a model server can take minutes to load its weights)."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"the server at {self.base_url} did not answer "
                                        f"GET /models within {timeout:g} s")
            time.sleep(poll)

    def load_lora_adapter(self, name: str, path: str, inplace: bool = False) -> None:
        """Load the LoRA adapter at ``path`` (a folder on the server's machine) into a vLLM
        server as ``name`` and generate with it from now on (``model`` becomes ``name``).
        vLLM must run with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``;
        ``inplace`` replaces the weights of an adapter already loaded under ``name`` (vLLM's
        ``load_inplace``, recent versions). A server without the endpoint raises
        ``ServerRefused``."""
        body: dict[str, Any] = {"lora_name": name, "lora_path": path}
        if inplace:
            body["load_inplace"] = True
        try:
            self.client.post("/load_lora_adapter", body=body, cast_to=str)  # vLLM: plain text
        except openai.APIConnectionError as error:
            raise ServerUnavailable(f"the server at {self.base_url} did not answer "
                                    f"POST /load_lora_adapter: {_one_line(error)}") from None
        except openai.APIStatusError as error:
            raise ServerRefused(f"the server at {self.base_url} did not load adapter {name!r} "
                                f"from {path!r} ({error.status_code}; vLLM needs --enable-lora "
                                f"and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True): "
                                f"{_one_line(error)}") from None
        self.model = name


def _one_line(error: BaseException, limit: int = 300) -> str:
    """An error's text (which may quote the server's untrusted answer) on one short line."""
    return " ".join(str(error).split())[:limit]
