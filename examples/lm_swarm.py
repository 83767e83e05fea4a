"""A swarm of language-model nodes learning by sharing their rollouts as text.

Default (offline, a laptop CPU, 10 rounds; the measured time of ``--rounds 2`` is in
docs/language-models.md, "The example"): two SmolLM2-135M-Instruct nodes on one shared
base (a LoRA swarm: one adapter and one optimizer each, one generate call for both) plus a
DemonstratorAgent that always answers inside <answer> tags. Easy arithmetic (basic_arithmetic,
2 terms of 1 digit), lenient answer extraction, a training set of I+J=4 groups with J=2 from
the swarm, so each node answers I=2 questions itself (the paper's protocol), L=4 completions
of at most 96 tokens. Every round prints each
node's reward and the share of its completions that use the <answer> tag: the paper's "Aha"
moment is that format spreading through shared text.

The paper's setup on a GPU (the "auto" preset picks it when the device is cuda):

    python examples/lm_swarm.py --model Qwen/Qwen2.5-0.5B-Instruct --n 8 --device cuda

8 separately fully fine-tuned nodes, L=8, I+J=8 with J=4 (the paper's best 4/4: each node
answers 4 questions and takes 4 groups from the swarm), 256
tokens, the nine reasoning-gym tasks, strict <answer> format, Adam at 1e-6, no KL, clip
0.2/0.28, 2000 rounds, no demonstrator. Any flag overrides the preset, e.g. --lora to put
the 8 nodes on one shared base.

On Ray (``pip install "sapo-env[ray]"``), each LM node in its own actor, one GPU each, on one
machine or a cluster (the LoRA swarm is one actor that owns the base):

    python examples/lm_swarm.py --preset paper --ray-address local --gpus-per-node 1
    ray start --head                   # then, on each other machine: ray start --address=HEAD:6379
    python examples/lm_swarm.py --preset paper --ray-address auto --gpus-per-node 1

Run:  python examples/lm_swarm.py [--rounds 10] [--preset laptop|paper] [--help]
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

import numpy as np

import sapo_env
import sapo_env.runtime
from agents import DemonstratorAgent, GRPOAgent, GRPOConfig
from agents.lm.lora import lora_swarm
from agents.lm.models import resolve_device
from sapo_env.extras import require
from sapo_env.scoring.answers import extract_tag

EASY_ARITHMETIC = [("basic_arithmetic", 1.0, {"min_terms": 2, "max_terms": 2,
                                              "min_digits": 1, "max_digits": 1})]

# Values every flag falls back to; questions=None is the paper's protocol (I = budget - J).
PRESETS: dict[str, dict] = {
    "laptop": dict(model="smollm2-135m", n=2, demonstrators=1, rounds=10, questions=None,
                   completions=4, train_budget=4, num_external=2, max_new_tokens=96,
                   lr=5e-5, lora=True, easy=True),
    "paper": dict(model="Qwen/Qwen2.5-0.5B-Instruct", n=8, demonstrators=0, rounds=2000,
                  questions=None, completions=8, train_budget=8, num_external=4,
                  max_new_tokens=256, lr=1e-6, lora=False, easy=False),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Unset flags take the preset's value: " + "; ".join(
            f"{name}: " + ", ".join(f"{k}={v}" for k, v in values.items())
            for name, values in PRESETS.items()),
    )
    add = parser.add_argument
    add("--preset", choices=["auto", "laptop", "paper"], default="auto",
        help="defaults to start from; auto: paper on cuda, laptop elsewhere")
    add("--model", help="hub id, local path, or smollm2-135m (offline)")
    add("--n", type=int, help="language-model nodes")
    add("--demonstrators", type=int, help="scripted nodes that always answer right in tags")
    add("--rounds", type=int, help="rounds to run")
    add("--questions", type=int, help="B: fixed questions per node and round (default: the "
        "paper's protocol, I = train budget - J)")
    add("--completions", type=int, help="L: completions per question")
    add("--train-budget", type=int, help="I+J: groups in each training set")
    add("--num-external", type=int, help="J: external groups per training set")
    add("--max-new-tokens", type=int, help="longest completion, in tokens")
    add("--lr", type=float, help="Adam learning rate")
    add("--lora", action=argparse.BooleanOptionalAction, default=None,
        help="LM nodes share one frozen base with a LoRA adapter each (--no-lora: full copies)")
    add("--device", default="auto", help="auto (cuda, mps, cpu), cuda, mps or cpu")
    add("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
        help="compute dtype; auto: bfloat16 on cuda, float32 elsewhere")
    add("--seed", type=int, default=0, help="seed of the env and every node")
    add("--threads", type=int,
        help="torch CPU threads, GRPOConfig.torch_threads (default: torch's choice); "
             "1 is much faster on a CPU shared with other work")
    add("--save-dir", type=Path, help="save every LM node here at the end")
    add("--ray-address", help="run the LM nodes in Ray actors: 'local' starts Ray here, "
        "'auto' or HOST:PORT joins a running cluster (default: in this process)")
    add("--gpus-per-node", type=float, default=0,
        help="with --ray-address: GPUs for each LM node's actor (the LoRA swarm's one actor)")
    return parser


def resolve_args(args: argparse.Namespace) -> dict:
    preset = args.preset
    if preset == "auto":
        preset = "paper" if resolve_device(args.device).type == "cuda" else "laptop"
    values = dict(PRESETS[preset], preset=preset)
    for key in PRESETS["laptop"]:
        given = getattr(args, key, None)
        if given is not None:
            values[key] = given
    return values


def tag_share(completions) -> float:
    texts = [c for question in completions for c in question]
    return sum(extract_tag(t) is not None for t in texts) / max(len(texts), 1)


class PrintRound(sapo_env.runtime.Callback):
    """One line per round: each node's reward and <answer>-tag share, and the round time."""

    def __init__(self, kinds: dict[str, str]):
        self.kinds = kinds
        self.start = time.perf_counter()

    def on_round_end(self, record: sapo_env.runtime.RoundRecord) -> None:
        cells = [f"{name} ({self.kinds[name]}) reward {reward:.3f} tags "
                 f"{tag_share(record.actions[name]['completions']):.2f}"
                 for name, reward in record.rewards.items()]
        now = time.perf_counter()
        print(f"round {record.round:4d} | " + " | ".join(cells) + f" | {now - self.start:.1f} s",
              flush=True)
        self.start = now


def main(argv: list[str] | None = None) -> sapo_env.runtime.History:
    args = build_parser().parse_args(argv)
    v = resolve_args(args)
    env_options = dict(tasks=EASY_ARITHMETIC, answer_format="lenient") if v["easy"] else {}
    env = sapo_env.parallel_env(
        n=v["n"] + v["demonstrators"], questions_per_round=v["questions"],
        completions_per_question=v["completions"], train_budget=v["train_budget"],
        num_external=v["num_external"], max_rounds=v["rounds"], **env_options,
    )
    config = GRPOConfig(max_new_tokens=v["max_new_tokens"], learning_rate=v["lr"],
                        use_lora=v["lora"], device=args.device, dtype=args.dtype,
                        torch_threads=args.threads)
    streams = np.random.SeedSequence(args.seed).spawn(v["n"] + v["demonstrators"] + 1)
    print(f"preset {v['preset']}: {v['n']} x {v['model']} ({'LoRA swarm' if v['lora'] else 'full'}"
          f"), {v['demonstrators']} demonstrator(s), questions "
          f"{v['questions'] or v['train_budget'] - v['num_external']} L={v['completions']} "
          f"I+J={v['train_budget']} J={v['num_external']}, {v['rounds']} rounds", flush=True)
    make_swarm = partial(lora_swarm, v["model"], v["n"], config,
                         num_external=v["num_external"], seed=streams[-1])
    make_node = [partial(GRPOAgent, v["model"], config=config, num_external=v["num_external"],
                         seed=streams[i]) for i in range(v["n"])]
    if args.ray_address is not None:  # the nodes are built in their actors (agents.wrappers.remote)
        from agents.wrappers.remote import remote, remote_joint

        ray = require("ray", "examples/lm_swarm.py --ray-address")

        if not ray.is_initialized():  # (a caller may have started it)
            ray.init(address=args.ray_address)  # "local" is Ray's: always a new one here
        lm_agents = (list(remote_joint(make_swarm, num_gpus=args.gpus_per_node).values())
                     if v["lora"] else [remote(f, num_gpus=args.gpus_per_node)
                                        for f in make_node])
    else:
        lm_agents = make_swarm() if v["lora"] else [f() for f in make_node]
    demonstrators = [
        DemonstratorAgent(num_external=v["num_external"],
                          seed=int(streams[v["n"] + k].generate_state(1)[0]))
        for k in range(v["demonstrators"])
    ]
    agents = lm_agents + demonstrators  # LM nodes are node_0 .. node_{n-1}, as lora_swarm binds
    kinds = {name: ("LM" if i < v["n"] else "demo") for i, name in enumerate(env.possible_agents)}
    history = sapo_env.runtime.run(env, agents, seed=args.seed, callbacks=[PrintRound(kinds)],
                           progress=False)
    print("cumulative reward per node:",
          {name: round(float(np.nansum(history.node_rewards(name))), 3)
           for name in history.agents})
    if args.save_dir is not None:
        for name, agent in zip(env.possible_agents, lm_agents):
            if args.ray_address is None:
                agent.save(args.save_dir / name)
            else:  # saved where the actor runs: a path on that machine
                agent.call("save", args.save_dir / name)
        print(f"saved {len(lm_agents)} nodes under {args.save_dir}")
    return history


if __name__ == "__main__":
    main()
