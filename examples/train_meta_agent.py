"""Learn a SAPO node's I:J ratio with PPO, then compare it with the fixed ratios of the paper.

Every round a SAPO node trains on ``train_budget`` = 8 groups: I of its own and J taken from
the swarm's shared pool. Under the paper's protocol it answers only I = 8 - J questions, so a
larger J saves generation but gives the pool less to share. Here each node of a swarm of
simulated learners is an RL agent whose only action is its J for the next round
(``sapo_experiments.meta.parallel_env``); all nodes share one PPO policy (parameter sharing through
SuperSuit, the usual way to train a PettingZoo swarm with stable-baselines3).

Steps, top to bottom:
    1. build the meta env and wrap it as a stable-baselines3 vector env (one slot per node),
    2. train PPO (an MLP on the ``RatioFeatures`` vector), logging to TensorBoard,
    3. save the model,
    4. evaluate it on held-out seeds: whole swarms driven by the learned policy (``SB3Ratio``)
       against swarms at fixed J (``FixedRatio``), with ``sapo_env.runtime.run``.

Run:
    python examples/train_meta_agent.py              # 96,000 timesteps
    python examples/train_meta_agent.py --timesteps 9600   # a tenth of that
    python examples/train_meta_agent.py --quick      # a smoke test
    tensorboard --logdir runs/meta/tensorboard

The nodes inside are the calibrated simulated learners; ``--learner MODULE:FACTORY`` takes any
agent factory, e.g. ``sapo_experiments.bench_ratio.tracks:BENCH_LEARNER``, the nodes of
``sapo-env bench-ratio``'s simulated track (the model then plays that track's world).

Measured times (the default was not timed): BENCHMARKS.md, "Commands as a user runs them".

Needs the ``meta`` extra: ``pip install 'sapo-env[meta]'`` (stable-baselines3, SuperSuit,
TensorBoard).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

try:
    import supersuit as ss
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import set_random_seed
except ModuleNotFoundError as error:  # the meta extra is optional: say what to install
    raise SystemExit(f"{Path(__file__).name} needs {error.name}: "
                     "pip install 'sapo-env[meta]'") from None

import sapo_env
import sapo_env.runtime
from agents.ratio.rules import FixedRatio
from agents.ratio.sb3 import SB3Ratio
from sapo_experiments import learners, meta


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--seed", type=int, default=0,
                        help="root seed: training and evaluation seeds are drawn from it")
    parser.add_argument("--timesteps", type=int, default=96_000,
                        help="PPO timesteps: node-rounds, so n x rounds per episode")
    parser.add_argument("--n", type=int, default=8, help="nodes in the swarm")
    parser.add_argument("--learner", type=learners.load,
                        default="sapo_experiments.learners:simulated_learners",
                        metavar="MODULE:FACTORY",
                        help="the agent factory of the nodes inside, in training and in the "
                             "evaluation (sapo_experiments.learners)")
    parser.add_argument("--rounds", type=int, default=meta.DEFAULT_MAX_ROUNDS,
                        help="rounds per episode (and per evaluation run)")
    parser.add_argument("--reward", choices=sorted(meta.REWARDS), default="own",
                        help="'own': a node's own round reward; 'swarm_mean': the swarm's "
                             "mean (cooperative)")
    parser.add_argument("--generation-cost", type=float, default=0.0,
                        help="subtracted from the reward per completion a node generates")
    parser.add_argument("--eval-seeds", type=int, default=2,
                        help="held-out swarms each policy is evaluated on")
    parser.add_argument("--fixed", type=int, nargs="+", default=[0, 2, 4, 6, 7],
                        help="the fixed J baselines: the paper's 8/0, 6/2, 4/4, 2/6, and 1/7")
    parser.add_argument("--out", type=Path, default=Path("runs/meta"),
                        help="where the model and the TensorBoard logs go")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: 4 nodes, 20-round episodes, 1024 timesteps, "
                             "one evaluation seed, J in {0, 4}")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.rounds, args.timesteps, args.eval_seeds = 4, 20, 1024, 1
        args.fixed = [0, 4]
    return args


def make_vec_env(args: argparse.Namespace, seed: int):
    """The meta env as a stable-baselines3 VecEnv: one slot per node, all sharing one policy."""
    env = meta.parallel_env(n=args.n, learner=args.learner, max_rounds=args.rounds,
                            reward=args.reward, generation_cost=args.generation_cost)
    venv = ss.pettingzoo_env_to_vec_env_v1(env)  # n slots: parameter sharing
    venv = ss.concat_vec_envs_v1(venv, 1, num_cpus=0, base_class="stable_baselines3")
    # SuperSuit's SB3 wrapper cannot take a seed through PPO(seed=...) (its inner vec env has
    # no seed()), so seed the meta env directly: later resets continue its seeded stream.
    venv.venv.reset(seed=seed)
    return venv


def train(args: argparse.Namespace, seed: int) -> PPO:
    set_random_seed(seed)  # torch, numpy and random: PPO's own sampling
    venv = make_vec_env(args, seed)
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=min(args.rounds, 200),  # rounds per update and env slot: x n samples an update
        batch_size=min(args.rounds, 200),
        gamma=0.99,  # a horizon of ~100 rounds: long enough to see sharing pay off
        ent_coef=0.01,  # keep trying other J while the learners improve
        tensorboard_log=str(args.out / "tensorboard"),
        verbose=0,
    )
    model.learn(total_timesteps=args.timesteps, tb_log_name=f"ppo_{args.reward}_seed{args.seed}")
    venv.close()
    return model


def evaluate(args: argparse.Namespace, model: PPO, eval_seeds: list[int]) -> dict[str, dict]:
    """Each policy drives every node of a fresh swarm, on the same held-out seeds."""
    candidates = {f"fixed J={j}": (lambda j=j: FixedRatio(j)) for j in args.fixed}
    candidates["PPO (learned)"] = lambda: SB3Ratio(model, max_rounds=args.rounds)
    results = {}
    for name, make_policy in candidates.items():
        cumulative, objective, generated, mean_j = [], [], [], []
        for seed in eval_seeds:
            env = sapo_env.parallel_env(n=args.n, max_rounds=args.rounds)
            nodes = args.learner(env.possible_agents, 4, np.random.SeedSequence(seed))
            policies = {a: make_policy() for a in env.possible_agents}
            history = sapo_env.runtime.run(env, nodes, seed=seed, progress=False,
                                           ratio_policies=policies)
            net = history.rewards - args.generation_cost * history.generated
            cumulative.append(history.cumulative_reward)
            objective.append(float(net.mean(axis=1).sum()))  # what training maximised
            generated.append(history.generated_per_node_round)
            mean_j.append(float(history.num_external[1:].mean()))  # round 0's J is preset
        results[name] = {"cumulative": cumulative, "objective": objective,
                         "generated": float(np.mean(generated)), "mean_j": float(np.mean(mean_j))}
    return results


def print_table(results: dict[str, dict], args: argparse.Namespace) -> None:
    print(f"\nheld-out evaluation: {args.n} nodes x {args.rounds} rounds, "
          f"{args.eval_seeds} seed(s), reward '{args.reward}', generation cost "
          f"{args.generation_cost}")
    print(f"{'policy':<16} {'cumulative reward':>18} {'minus cost':>11} "
          f"{'completions/node-round':>23} {'mean J':>7}")
    for name, r in results.items():
        print(f"{name:<16} {np.mean(r['cumulative']):10.2f} +- {np.std(r['cumulative']):5.2f} "
              f"{np.mean(r['objective']):11.2f} {r['generated']:23.1f} {r['mean_j']:7.2f}")
    print("(cumulative reward: sum over rounds of the swarm's mean reward, mean +- sd over "
          "seeds)")


def main(argv: list[str] | None = None) -> dict[str, dict]:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    # A small MLP next to a single-threaded env: one torch thread avoids OpenMP threads
    # spinning against the env for the same cores.
    torch.set_num_threads(1)
    # Separate branches of one SeedSequence: no held-out swarm was ever a training episode.
    train_seq, eval_seq = np.random.SeedSequence(args.seed).spawn(2)
    train_seed = int(train_seq.generate_state(1)[0])
    eval_seeds = eval_seq.generate_state(args.eval_seeds).tolist()

    start = time.perf_counter()
    model = train(args, train_seed)
    print(f"trained PPO for {args.timesteps} timesteps in {time.perf_counter() - start:.0f} s")
    model_path = args.out / "ppo_ratio.zip"
    model.save(model_path)

    start = time.perf_counter()
    results = evaluate(args, model, eval_seeds)
    print(f"evaluated in {time.perf_counter() - start:.0f} s")
    print_table(results, args)
    print(f"\nmodel:       {model_path}  (SB3Ratio.load(path, max_rounds={args.rounds}))")
    print(f"TensorBoard: tensorboard --logdir {args.out / 'tensorboard'}")
    return results


if __name__ == "__main__":
    main()
