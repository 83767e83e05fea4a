"""Benchmark: what a served node (``agents.ServedAgent``) adds to its server's own generation.

Run by hand (not a test):  python benchmarks/bench_served.py [--rounds 4] [--max-tokens 32]
                           [--threads 1] [--concurrency 8,1] [--write]

Starts llama-cpp-python's OpenAI-compatible server on the offline SmolLM2-135M-Instruct GGUF
(``agents.serving.llama_server``, needs ``make .venv/.served``) and plays rounds of a 2-node
swarm, a served node and a ``DemonstratorAgent`` (the paper's round: L = 8 completions, J = 4, so
the served node answers 4 questions). Every HTTP request the served node's client sends is
recorded (an event hook of its HTTP client) and, after the round, the same request bodies are
sent again straight to the server one after another, each timed: the server's own time for
the round's generation. Each request carries its seed, so the server generates the same tokens
both times.

Measured per round, after a warm-up round (the first round also finds out that this server
ignores ``n``):
- the whole round (both nodes act, ``env.step``, both learn) against the summed time of the
  same requests made directly (goal <= 1.2x);
- the served node's own ``act`` + ``learn`` against the same sum;
- the CPU time of this process (the client's work: requests, JSON, the event loop) and of the server
  during the node's ``act`` and during the direct requests.

``--write`` replaces the "## Served node" section of BENCHMARKS.md (machine, date, load).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time
from pathlib import Path

import httpx2
from benchmarks_md import add_write_flag, machine, publish

import sapo_env
from agents import DemonstratorAgent
from agents.serving.llama_server import LocalServer, missing, smollm2_gguf
from agents.serving.served import ServedAgent, ServedConfig

SECTION = "## Served node"


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(rounds: int, max_tokens: int, threads: int, concurrency: int) -> dict:
    sent: list[bytes] = []
    with LocalServer(smollm2_gguf(), n_threads=threads) as server:
        async def record(request):
            if request.url.path.endswith("/chat/completions"):
                sent.append(request.content)

        served = ServedAgent(server.base_url, server.alias, seed=0,
                             http_client=lambda: httpx2.AsyncClient(
                                 event_hooks={"request": [record]}),
                             config=ServedConfig(max_tokens=max_tokens, max_retries=0,
                                                 max_concurrent_requests=concurrency))
        demo = DemonstratorAgent(seed=1)
        env = sapo_env.parallel_env(n=2, max_rounds=rounds + 1)
        observations, _ = env.reset(seed=0)
        direct = httpx2.Client(base_url=server.base_url, timeout=120)
        rows = []
        for r in range(rounds + 1):
            sent.clear()
            wall, cpu, pid_cpu = time.perf_counter(), time.process_time(), server_cpu(
                server.process.pid)
            action = served.act(observations["node_0"])
            act_wall = time.perf_counter() - wall
            act_cpu, act_server = time.process_time() - cpu, server_cpu(
                server.process.pid) - pid_cpu
            actions = {"node_0": action, "node_1": demo.act(observations["node_1"])}
            step = time.perf_counter()
            observations, *_ = env.step(actions)
            step_wall = time.perf_counter() - step
            learn = time.perf_counter()
            served.learn(observations["node_0"]["batch"])
            demo.learn(observations["node_1"]["batch"])
            learn_wall = time.perf_counter() - learn
            round_wall = time.perf_counter() - wall
            served_learn = learn_wall  # the demonstrator's learn does nothing
            bodies = list(sent)
            own, own_cpu = 0.0, time.process_time()
            pid_cpu = server_cpu(server.process.pid)
            for body in bodies:
                start = time.perf_counter()
                direct.post("/chat/completions", content=body,
                            headers={"Content-Type": "application/json"}).raise_for_status()
                own += time.perf_counter() - start
            rows.append({"round": round_wall, "act": act_wall, "step": step_wall,
                         "learn": served_learn, "direct": own, "requests": len(bodies),
                         "act_cpu": act_cpu, "act_server_cpu": act_server,
                         "direct_cpu": time.process_time() - own_cpu,
                         "direct_server_cpu": server_cpu(server.process.pid) - pid_cpu})
            print(f"round {r}{' (warm-up)' if r == 0 else ''}: {len(bodies)} requests, round "
                  f"{round_wall:.2f} s (act {act_wall:.2f}, step {step_wall:.3f}, learn "
                  f"{learn_wall:.4f}), direct {own:.2f} s", flush=True)
        direct.close()
    return {"rows": rows[1:], "rounds": rounds, "max_tokens": max_tokens, "threads": threads,
            "concurrency": concurrency}


def median(rows: list[dict], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def spread(rows: list[dict], key: str) -> str:
    return f"{min(row[key] for row in rows):.1f}-{max(row[key] for row in rows):.1f} s"


def cpu_ratio(rows: list[dict]) -> float:
    return median(rows, "act_server_cpu") / median(rows, "direct_server_cpu")


def report(results: list[dict], load: tuple[str, str]) -> str:
    first = results[0]
    client = max(median(r["rows"], "act_cpu") for r in results)
    threads = f"{first['threads']} thread" + ("" if first["threads"] == 1 else "s")
    lines = [SECTION, "",
             f"`python benchmarks/bench_served.py --write` on {datetime.date.today()}, "
             f"{machine()}, load average before / after {load[0]} / {load[1]}. llama-cpp-python's "
             f"server on SmolLM2-135M-Instruct Q4_1 ({threads}), a served node "
             f"and a demonstrator, L = 8, J = 4 (4 questions), at most {first['max_tokens']} "
             f"tokens a completion, temperature 1; medians over {first['rounds']} rounds after "
             f"a warm-up round. \"Direct\": the round's recorded request bodies sent again to "
             f"the server one after another (same seeds, same tokens), summed.", "",
             "| requests in flight | requests a round | round | node's act + learn | direct "
             "| round / direct | act + learn / direct | goal |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        rows = r["rows"]
        ratio = median(rows, "round") / median(rows, "direct")
        node = median(rows, "act") + median(rows, "learn")
        own = node / median(rows, "direct")
        lines.append(f"| {r['concurrency']} | {median(rows, 'requests'):.0f} "
                     f"| {median(rows, 'round'):.2f} s | {node:.2f} s "
                     f"| {median(rows, 'direct'):.2f} s | {ratio:.3f}x | {own:.3f}x "
                     f"| <= 1.2x: {'met' if ratio <= 1.2 else 'missed'} |")
    lines += ["", "CPU seconds a round (medians), this process / the server: "
              + "; ".join(f"{r['concurrency']} in flight: the node's act "
                          f"{median(r['rows'], 'act_cpu'):.2f} / "
                          f"{median(r['rows'], 'act_server_cpu'):.2f}, direct "
                          f"{median(r['rows'], 'direct_cpu'):.2f} / "
                          f"{median(r['rows'], 'direct_server_cpu'):.2f}" for r in results)
              + ".", "",
              "Per-round times move with the machine's load (" + "; ".join(
                  f"with {r['concurrency']} in flight rounds took {spread(r['rows'], 'round')},"
                  f" direct {spread(r['rows'], 'direct')}" for r in results)
              + "); the server's CPU time much less: for the node's requests it was "
              + ", ".join(f"{cpu_ratio(r['rows']):.3f}x" for r in results)
              + " its CPU time for the same requests made directly. What the node adds is "
              f"the client's own CPU time, at most {client:.2f} s a round (medians).", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="measured rounds (default 4)")
    parser.add_argument("--max-tokens", type=int, default=32,
                        help="most tokens a completion (default 32)")
    parser.add_argument("--threads", type=int, default=1,
                        help="the server's CPU threads (default 1: with 2 on a busy 2-core "
                        "machine, llama.cpp's threads wait on each other, and one request "
                        "took 59 s instead of 1)")
    parser.add_argument("--concurrency", default="8,1",
                        help="max_concurrent_requests values to measure (default 8,1)")
    add_write_flag(parser)
    args = parser.parse_args()
    if missing():
        parser.error(f"needs a local llama.cpp server: {missing()}")
    before = Path("/proc/loadavg").read_text().split()[0]
    results = [measure(args.rounds, args.max_tokens, args.threads, int(c))
               for c in args.concurrency.split(",")]
    section = report(results, (before, Path("/proc/loadavg").read_text().split()[0]))
    publish(section, args.write)


if __name__ == "__main__":
    main()
