"""One run of the experiment: a condition under one seed, round by round, with its metrics.

The loop is ``sapo_env.runtime.run``'s, written out with ``sapo_env.runtime.play_round`` because
the metrics need each round's questions, which the observations *before* the step hold.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from sapo_experiments.format_propagation.config import BY_NAME, Condition, FormatConfig, RunSpec
from sapo_experiments.format_propagation.metrics import METRICS, round_metrics
from sapo_experiments.run_files import RunFile
from sapo_experiments.sweep import seeds_of

logger = logging.getLogger(__name__)


class StopsPublishing:
    """A node that leaves the pool: from ``round`` on it still acts, but shares no group.

    The env has no churn, so "the demonstrator leaves" is modelled as its action's ``share``
    flags all 0: nothing it writes reaches the pool (its groups stay out of every training set)
    while the swarm's size, question streams and everyone's J stay as they were.
    """

    def __init__(self, agent: Any, round: int):
        self.agent = agent
        self.round = round

    def act(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        action = dict(self.agent.act(observation))
        if observation["round"] >= self.round:
            action["share"] = (0,) * len(observation["questions"])
        return action

    def learn(self, batch: Sequence[Any]) -> Mapping[str, float] | None:
        return self.agent.learn(batch)


def build_agents(config: FormatConfig, condition: Condition, seed: np.random.SeedSequence
                 ) -> list[Any]:
    """The LM nodes (one LoRA swarm on one base, or tiny nodes) and, where the condition has
    one, the demonstrator as the last node."""
    if config.tiny is not None:
        return tiny_agents(config, condition, seed)
    from agents import DemonstratorAgent, GRPOConfig
    from agents.lm.lora import lora_swarm

    lm_seed, demo_seed = seed.spawn(2)
    grpo = GRPOConfig(max_new_tokens=config.max_new_tokens, learning_rate=config.learning_rate,
                      use_lora=True, gradient_checkpointing=False, device=config.device,
                      torch_threads=config.threads)
    model, tokenizer = (config.model, None) if isinstance(config.model, str) else config.model()
    nodes: list[Any] = lora_swarm(model, config.lm_nodes, grpo, tokenizer=tokenizer,
                                  num_external=config.external(condition), seed=lm_seed)
    if condition.demonstrator:
        demo: Any = DemonstratorAgent(
            accuracy=config.demo_accuracy, tag_probability=config.demo_tag_probability,
            num_external=0, seed=int(demo_seed.generate_state(1)[0]))
        if condition.leaves:
            demo = StopsPublishing(demo, config.first_absent_round)
        nodes.append(demo)
    return nodes


def tiny_agents(config: FormatConfig, condition: Condition, seed: np.random.SeedSequence
                ) -> list[Any]:
    """Tiny GRPO nodes warm-started to write bare answers and, where the condition has one, a
    tiny demonstrator warm-started to tag some of its answers (``TinyNodes``); they act and
    learn as one batched swarm, except a demonstrator that leaves, which acts on its own."""
    from agents import GRPOConfig
    from agents.tiny.batched import batched_swarm
    from agents.tiny.warm_start import tiny_nodes
    from sapo_experiments.learners import warm_starts

    grpo = GRPOConfig(max_new_tokens=config.max_new_tokens, learning_rate=config.learning_rate,
                      gradient_checkpointing=False, device=config.device,
                      torch_threads=config.threads)
    folders = warm_starts(config.tiny_warm_starts())  # cached by the sweep, else one thread
    streams = seed.spawn(config.lm_nodes + 1)
    nodes = tiny_nodes(folders[:1], grpo, config.external(condition), streams[:config.lm_nodes])
    names = [f"node_{i}" for i in range(config.lm_nodes + condition.demonstrator)]
    if not condition.demonstrator:
        return batched_swarm(nodes, names)
    demo = tiny_nodes(folders[1:], grpo, 0, streams[-1:])[0]
    if condition.leaves:
        return [*batched_swarm(nodes, names[:-1]), StopsPublishing(demo, config.first_absent_round)]
    return batched_swarm([*nodes, demo], names)


def format_scalars(values: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """What the loggers get beside the env's scalars: ``format/tag_use/node_k``,
    ``format/lenient_accuracy/node_k`` and ``format/informative_external/node_k`` (external
    groups that carried gradient)."""
    return {f"format/{k}/{a}": v[k] for a, v in values.items()
            for k in ("tag_use", "lenient_accuracy", "informative_external")}


def _loggers(config: FormatConfig, spec: RunSpec, condition: Condition) -> list[Any]:
    """The run's loggers (``config.tensorboard``, ``config.wandb``); one whose package is
    missing is skipped with a warning (they are optional extras)."""
    hparams = {"condition": condition.label, "seed_index": spec.seed_index,
               "model": config.model_name(), "learning_rate": config.learning_rate,
               "max_new_tokens": config.max_new_tokens, "demo_accuracy": config.demo_accuracy,
               "demo_tag_probability": config.demo_tag_probability,
               "leave_round": config.first_absent_round if condition.leaves else None}
    loggers: list[Any] = []
    if config.tensorboard:
        # a run done again starts its folder afresh, or old and new event files would both show
        shutil.rmtree(config.out / "tensorboard" / spec.name, ignore_errors=True)
        try:
            from sapo_env.runtime.tensorboard import TensorBoardCallback

            loggers.append(TensorBoardCallback(config.out / "tensorboard", run_name=spec.name,
                                               flush_every=5, hparams=hparams))
        except ImportError as error:
            logger.warning("%s; writing no TensorBoard runs", error)
    if config.wandb:
        try:
            from sapo_env.runtime.wandb_logger import WandbCallback

            loggers.append(WandbCallback(run_name=spec.name, group=Path(config.out).name,
                                         log_dir=config.out, hparams=hparams))
        except ImportError as error:
            logger.warning("%s; logging no W&B runs", error)
    return loggers


def run_one(spec: RunSpec) -> Path:
    """Run one condition under one seed; save its arrays to ``out/runs/<name>.npz``."""
    return compute(spec).save()


def compute(spec: RunSpec) -> RunFile:
    """Run one condition under one seed; its file holds the per-round metrics of every node,
    the round times and one completion per node and round."""
    import sapo_env.runtime

    config, condition = spec.config, BY_NAME[spec.condition]
    env = sapo_env.parallel_env(config=config.swarm_config(condition))
    env_seed, agent_seed = seeds_of(config.base_seed, spec.seed_index)
    agents = dict(zip(env.possible_agents, build_agents(config, condition, agent_seed)))
    names = tuple(env.possible_agents)
    arrays = {m: np.full((config.rounds, len(names)), np.nan) for m in METRICS}
    round_seconds = np.zeros(config.rounds)
    samples = [[""] * len(names) for _ in range(config.rounds)]  # one completion per node
    loggers = _loggers(config, spec, condition)
    calls = sapo_env.runtime.AgentCalls(agents)  # how each node is called, once a run
    observations, _ = env.reset(seed=env_seed)
    for log in loggers:
        log.on_run_start(env, agents)
    bar = tqdm(range(config.rounds), desc=spec.name, unit="round", disable=not config.progress)
    for t in bar:
        started = time.perf_counter()
        questions = {a: observations[a]["questions"] for a in env.agents}
        record = sapo_env.runtime.play_round(env, calls, observations)
        observations = record.observations
        round_seconds[t] = time.perf_counter() - started
        values = {a: round_metrics(questions[a], record.actions[a], record.rewards[a],
                                   observations[a]["batch"], record.learn_metrics[a])
                  for a in record.rewards}
        for a, v in values.items():
            for m in METRICS:
                arrays[m][t, names.index(a)] = v[m]
            completions = record.actions[a]["completions"]
            samples[t][names.index(a)] = completions[0][0] if completions else ""
        lm = [v for a, v in values.items() if names.index(a) < config.lm_nodes]
        bar.set_postfix(tags=f"{np.mean([v['tag_use'] for v in lm]):.2f}",
                        reward=f"{np.mean([v['reward'] for v in lm]):.2f}")
        for log in loggers:
            log.on_round_end(record)
            log.log_scalars(record.round, format_scalars(values))
    for log in loggers:
        log.on_run_end(None)
    meta = {"key": spec.key(), "condition": condition.label, "seed_index": spec.seed_index,
            "env_seed": env_seed, "seconds": float(round_seconds.sum()), "agents": list(names),
            "lm_nodes": config.lm_nodes, "leave_round": (config.first_absent_round
                                                         if condition.leaves else None)}
    return RunFile(spec.path, meta, {"round_seconds": round_seconds,
                                     "samples": np.asarray(samples, dtype=str), **arrays})
