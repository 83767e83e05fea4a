"""ServedAgent (agents.serving.served): a node backed by an OpenAI-compatible server.

Two kinds of server: a real llama-cpp-python server on the offline SmolLM2 GGUF, started by
the slow tests (skipped where llama_cpp, its server extra or the GGUF is missing), and a small
HTTP server of the standard library that answers whatever bytes a test gives it, to put the
node in front of what no honest server sends (malformed bodies, error statuses, a dead port).
What a hostile server can cost (deadlines, the byte cap, retries, redirects, refusals):
tests/test_served_limits.py.
"""

from __future__ import annotations

import json
import threading
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("httpx2", reason="the served extra is not installed: "
                    "pip install 'sapo-env[served]'")

import sapo_env  # noqa: E402
import sapo_env.runtime  # noqa: E402
from agents import DemonstratorAgent  # noqa: E402
from agents.serving.llama_server import LocalServer, free_port, missing, smollm2_gguf  # noqa: E402
from agents.serving.served import (  # noqa: E402
    COUNTS,
    ServedAgent,
    ServedConfig,
    ServerRefused,
    ServerUnavailable,
    read_reply,
)
from sapo_env.runtime import NodeFailure  # noqa: E402
from sapo_env.types import make_observation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def body(*texts, n=None) -> bytes:
    return json.dumps({"choices": [{"index": i, "message": {"role": "assistant", "content": t}}
                                   for i, t in enumerate(texts)]}).encode()


class Canned:
    """A real HTTP server on 127.0.0.1 that records each chat request's JSON and answers with
    ``respond(request) -> (status, body bytes)``."""

    def __init__(self, respond):
        self.respond, self.requests = respond, []
        canned = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                canned.requests.append((self.path, request))
                status, payload = canned.respond(request) if "chat" in self.path else (
                    200, b"Success: LoRA adapter loaded")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def canned():
    servers = []

    def start(respond):
        servers.append(Canned(respond))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def observation(questions=2, L=4, system="Answer in <answer> tags."):
    qs = tuple({"id": f"basic_arithmetic/0/{k}", "task": "basic_arithmetic",
                "prompt": f"{k} + 1 = ?", "ref": {"task": "basic_arithmetic", "config": {},
                                                  "seed": 0, "index": k}}
               for k in range(questions))
    return make_observation(round=0, system_prompt=system, completions_per_question=L,
                            train_budget=8, num_external=4, questions=qs)


def agent(url, **config):
    return ServedAgent(url, "m", ServedConfig(max_retries=0, timeout=10, **config), seed=0)


# --- reading what a server sends: untrusted bytes, never an exception ----------------------

@pytest.mark.parametrize("raw, texts, malformed", [
    (b"<html>not json</html>", [""] * 3, 3),
    (b"\xff\xfe garbage", [""] * 3, 3),
    (b"[" * 100_000, [""] * 3, 3),  # nested past the recursion limit
    (b'["choices"]', [""] * 3, 3),
    (b'{"choices": "abc"}', [""] * 3, 3),
    (b'{"choices": [1, {"message": null}, {"message": {"content": 7}}]}', ["", "", ""], 3),
    (b'{"choices": [{"message": {"content": "a\\ud800b"}}]}', ["a?b"], 1),  # lone surrogate
    (body("1", "2", "3", "4", "5"), ["1", "2", "3"], 0),         # extra choices dropped
])
def test_read_reply_turns_any_body_into_data(raw, texts, malformed):
    reply = read_reply(raw, 3, 100)
    assert reply.texts == texts and reply.malformed == malformed and not reply.failed


def test_read_reply_cuts_long_text_to_the_env_limit():
    reply = read_reply(body("x" * 50, "y"), 2, 10)
    assert reply.texts == ["x" * 10, "y"] and reply.truncated == 1


@pytest.mark.parametrize("field, value", [
    ("temperature", -1), ("max_tokens", 0), ("n_mode", "many"), ("timeout", 0),
    ("timeout", float("inf")), ("max_concurrent_requests", 0), ("max_retries", -1),
    ("round_timeout", 0), ("max_reply_bytes", 0), ("stop_run_on_refusal", "yes")])
def test_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=f"{field} must be"):
        ServedConfig(**{field: value})


def test_constructor_names_a_bad_url():
    with pytest.raises(ValueError, match="base_url must be an http"):
        ServedAgent("localhost:8000", "m")


# --- a node in front of a canned server -----------------------------------------------------

def test_malformed_answers_cost_only_their_completions(canned):
    answers = iter([(200, b"<html>"), (200, body("ok", None, "x" * 40)), (500, b"{}"),
                    (422, b'{"error": "prompt too long"}')])
    server = canned(lambda request: next(answers))
    node = agent(server.url, n_mode="n", max_concurrent_requests=1, max_completion_chars=20)
    action = node.act(observation(questions=4, L=3))
    assert action["completions"] == (("", "", ""), ("ok", "", "x" * 20), ("", "", ""),
                                     ("", "", ""))
    assert node.learn(()) == {"requests": 4, "failed_requests": 2, "malformed": 4,
                              "missing": 0, "truncated": 1}
    assert node.learn(()) == dict.fromkeys(COUNTS, 0.0)  # counts are per round


def test_a_server_that_ignores_n_is_asked_once_per_completion(canned):
    """What llama-cpp-python's server does (it drops n): auto mode asks again for the missing
    completions, each with its own seed, and from then on asks for one at a time."""
    server = canned(lambda request: (200, body(f"seed {request['seed']}")))
    node = agent(server.url)
    first = node.act(observation(questions=2, L=4))
    assert [r["n"] for _, r in server.requests] == [4, 4] + [1] * 6
    assert node.server_ignores_n and node.learn(())["missing"] == 0
    for group in first["completions"]:
        assert len(set(group)) == 4  # four requests, four seeds
    server.requests.clear()
    node.act(observation(questions=2, L=4))
    assert [r["n"] for _, r in server.requests] == [1] * 8


def test_n_mode_n_trusts_the_server_and_counts_what_is_missing(canned):
    server = canned(lambda request: (200, body("only one")))
    node = agent(server.url, n_mode="n")
    action = node.act(observation(questions=1, L=4))
    assert action["completions"] == (("only one", "", "", ""),) and len(server.requests) == 1
    assert node.learn(())["missing"] == 3 and not node.server_ignores_n


def test_requests_carry_the_chat_messages_and_sampling_and_seeds_repeat(canned):
    server = canned(lambda request: (200, body(*["a"] * request["n"])))
    node = agent(server.url, temperature=0.7, max_tokens=33)
    node.act(observation(questions=1, L=2, system="SYS"))
    (path, request), = server.requests
    assert path == "/v1/chat/completions"
    assert request["messages"] == [{"role": "system", "content": "SYS"},
                                   {"role": "user", "content": "0 + 1 = ?"}]
    assert (request["model"], request["n"], request["temperature"],
            request["max_tokens"]) == ("m", 2, 0.7, 33)
    again = agent(server.url, temperature=0.7, max_tokens=33)
    again.act(observation(questions=1, L=2, system="SYS"))
    assert server.requests[1][1]["seed"] == request["seed"]  # same agent seed, same requests
    node.act(observation(questions=1, L=2, system=""))
    assert server.requests[2][1]["messages"] == [{"role": "user", "content": "0 + 1 = ?"}]


def test_a_wrong_model_or_key_is_refused_in_one_line(canned):
    server = canned(lambda request: (404, b'{"error": {"message": "no such model"}}'))
    with pytest.raises(ServerRefused) as error:
        agent(server.url).act(observation())
    assert "\n" not in str(error.value) and "404" in str(error.value)
    assert server.url in str(error.value)


def test_a_dead_server_removes_the_node_and_the_swarm_goes_on():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    node = agent(url)
    with pytest.raises(ServerUnavailable) as error:
        node.act(observation())
    assert isinstance(error.value, NodeFailure) and "\n" not in str(error.value)
    assert url in str(error.value) and "after 1 try:" in str(error.value)
    assert not node.ready()
    env = sapo_env.parallel_env(n=2, max_rounds=2)
    history = sapo_env.runtime.run(env, [node, DemonstratorAgent(seed=1)], seed=0,
                                   progress=False)
    assert np.isnan(history.rewards[:, 0]).all() and history.rewards[:, 1].min() == 1.0


def test_wait_until_ready_gives_up_with_one_line():
    node = agent(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(ServerUnavailable, match="did not answer GET /models within 0.2 s"):
        node.wait_until_ready(timeout=0.2, poll=0.05)


def test_lora_hot_swap_hook(canned):
    """The vLLM request (``/v1/load_lora_adapter``) and its effect: later requests name the
    adapter; ``on_learn`` is where a user trains and loads it."""
    server = canned(lambda request: (200, body(*["a"] * request["n"])))

    def on_learn(node, batch):
        node.load_lora_adapter(f"r{len(batch)}", "/adapters/r", inplace=True)
        return {"adapter_loads": 1.0}

    node = ServedAgent(server.url, "base", ServedConfig(max_retries=0), on_learn=on_learn)
    node.act(observation(questions=1, L=2))
    assert node.learn([{}] * 3)["adapter_loads"] == 1.0
    assert server.requests[1] == ("/v1/load_lora_adapter", {
        "lora_name": "r3", "lora_path": "/adapters/r", "load_inplace": True})
    node.act(observation(questions=1, L=2))
    assert server.requests[2][1]["model"] == "r3"


def test_state_round_trips_the_generator_and_what_it_learnt(canned):
    server = canned(lambda request: (200, body("x")))
    node = agent(server.url)
    node.act(observation(questions=1, L=2))
    twin = agent(server.url)
    twin.load_state_dict(node.state_dict())
    assert twin.server_ignores_n
    node.act(observation(questions=1, L=2))
    twin.act(observation(questions=1, L=2))
    seeds = [request["seed"] for _, request in server.requests[-4:]]
    assert [request["n"] for _, request in server.requests[-4:]] == [1] * 4
    # the same two seeds (their requests run at once, so they arrive in either order)
    assert sorted(seeds[:2]) == sorted(seeds[2:]) and seeds[0] != seeds[1]


class Records(sapo_env.runtime.Callback):
    def __init__(self):
        self.records = []

    def on_round_end(self, record):
        self.records.append(record)


# --- a real llama-cpp-python server ----------------------------------------------------------

@pytest.fixture(scope="module")
def llama_server():
    reason = missing()
    if reason:
        pytest.skip(f"no local llama.cpp server: {reason}")
    # a generous cap on the start (polled, not raced): a busy machine loads the model slowly
    with LocalServer(smollm2_gguf(), n_threads=1, start_timeout=600) as server:
        yield server


@pytest.mark.slow
def test_a_served_node_plays_rounds_against_llama_cpp(llama_server):
    env = sapo_env.parallel_env(n=2, max_rounds=3, completions_per_question=3,
                                train_budget=4, num_external=2)
    node = ServedAgent(llama_server.base_url, llama_server.alias,
                       ServedConfig(max_tokens=24, temperature=1.0), num_external=2, seed=0)
    actions = Records()
    history = sapo_env.runtime.run(env, [node, DemonstratorAgent(num_external=2, seed=1)],
                                   seed=0, progress=False, callbacks=[actions])
    assert history.rounds == 3 and not np.isnan(history.rewards[:, 0]).any()
    assert node.server_ignores_n  # llama-cpp-python's server answers one choice to n=3
    counts = [m["node_0"] for m in history.learn_metrics]
    # I = 2 questions: round 0 asks n=3 for each, gets one choice, then 2 + 2 more with n=1;
    # later rounds ask 3 x n=1 for each
    assert [c["requests"] for c in counts] == [2 + 2 * 2, 2 * 3, 2 * 3]
    assert all(c["failed_requests"] == c["malformed"] == c["missing"] == 0 for c in counts)
    for record in actions.records:  # SmolLM2's text: strings, L per question, not all blank
        for group in record.actions["node_0"]["completions"]:
            assert len(group) == 3 and any(text.strip() for text in group)
    assert record.rewards["node_0"] >= 0.0


@pytest.mark.slow
def test_llama_cpp_has_no_lora_endpoint(llama_server):
    node = ServedAgent(llama_server.base_url, llama_server.alias,
                       ServedConfig(max_tokens=8, max_retries=0), seed=0)
    with pytest.raises(ServerRefused, match="404"):
        node.load_lora_adapter("a", "/nowhere")
    assert node.ready() and node.model == llama_server.alias


@pytest.mark.slow
def test_a_node_whose_llama_cpp_server_dies_leaves_the_swarm(llama_server):
    server = LocalServer(smollm2_gguf(), n_threads=1, start_timeout=600).start()

    class KillAfterFirstRound(sapo_env.runtime.Callback):
        def on_round_end(self, record):
            if record.round == 0:
                server.stop()

    try:
        node = ServedAgent(server.base_url, server.alias,
                           ServedConfig(max_tokens=8, max_retries=1), seed=0)
        env = sapo_env.parallel_env(n=2, max_rounds=3, completions_per_question=2)
        history = sapo_env.runtime.run(env, [node, DemonstratorAgent(seed=1)], seed=0,
                                       progress=False, callbacks=[KillAfterFirstRound()])
    finally:
        server.stop()
    assert not np.isnan(history.rewards[0, 0]) and np.isnan(history.rewards[1:, 0]).all()
    assert (history.rewards[:, 1] == 1.0).all()


@pytest.mark.slow
def test_the_docs_example_runs_against_llama_cpp(llama_server, monkeypatch):
    """docs/served.md's first example, on the test's server, 2 rounds of short answers."""
    code = (ROOT / "docs" / "served.md").read_text().split("```python\n")[1].split("```")[0]
    code = code.replace("http://127.0.0.1:8000/v1", llama_server.base_url).replace(
        "max_tokens=128", "max_tokens=16")
    assert llama_server.base_url in code and "max_tokens=16" in code
    monkeypatch.setattr(sapo_env.runtime, "run", partial(sapo_env.runtime.run, rounds=2,
                                                         progress=False))
    namespace: dict = {}
    exec(compile(code, "docs/served.md", "exec"), namespace)
    history = namespace["history"]
    assert history.rounds == 2 and not np.isnan(history.rewards[:, 3]).any()
