"""Warm starts: a tiny model taught reasoning-gym tasks by supervised training, cached on disk.

A freshly initialised tiny model (:mod:`agents.tiny.model`) never answers right, so GRPO has
no signal to learn from. ``warm_start(config)`` first trains one by plain next-token loss on the
completion a node is rewarded for (``<answer>{answer}</answer>`` + EOS, after the prompt
``GRPOAgent`` builds under an empty system prompt; :mod:`agents.tiny.questions`), with Adam,
until it reaches a target accuracy or a step budget. Every ``eval_every`` steps it measures
per-task accuracy by *sampling*, as the node will in the env (:mod:`agents.tiny.evaluation`),
on held-out warm-start questions of ``eval_tasks`` (keyed by ``eval_labels`` where given). A
*specialist* is trained on one task and evaluated on others too: a node that knows task A and
not task B.

Randomness: the config's ``seed`` feeds one ``numpy.random.SeedSequence``, spawned into the
initial weights, the question streams and task draws, and evaluation sampling. Training has no
other randomness (no dropout), so the same config gives bit-identical weights on the same
machine, torch build and thread count (tested).

Cache: the result is saved under ``cache_dir / <hash of the config>`` (default
``agents.lm.models.cache_dir() / "tiny-warm-start"``): ``save_pretrained`` model and tokenizer
and ``warm_start.json`` (the config, the steps taken, per-step losses, the accuracy curve,
wall and CPU seconds). A second call with the same config returns that folder without
training. ``load_tiny(path)`` gives the model and tokenizer back, ready for
``agents.GRPOAgent(model, tokenizer=tokenizer, config=...)``; the env must then use
``system_prompt=""``, the prompt the model was trained under.

Example::

    from agents import SPECIALIST_TASKS, WarmStartConfig, load_tiny, read_report, warm_start
    path = warm_start(WarmStartConfig(tasks=[SPECIALIST_TASKS["spell_backward"]]))
    model, tokenizer = load_tiny(path)
    read_report(path)["accuracy"]  # {'spell_backward': 0.205}: reached at step 150
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from agents.lm.models import cache_dir as default_cache_dir
from agents.tiny.config import SPECIALIST_TASKS, TinyModelConfig, WarmStartConfig
from agents.tiny.evaluation import sampled_accuracy
from agents.tiny.model import tiny_model
from agents.tiny.questions import (
    collate,
    draw_batch,
    evaluation_questions,
    supervised_example,
    training_streams,
)
from agents.tiny.tokenizer import TOKENIZER_VERSION, tiny_tokenizer

logger = logging.getLogger(__name__)

CACHE_VERSION = 1
"""Bumped whenever training changes what a config produces; part of the cache key."""
REPORT_FILE = "warm_start.json"

__all__ = ["SPECIALIST_TASKS", "TinyModelConfig", "WarmStartConfig", "cache_key", "cache_path",
           "load_tiny", "read_report", "short_of_target", "train", "warm_start"]


def cache_key(config: WarmStartConfig) -> str:
    """A hash of the config and of what turns it into weights (the versions of this module's
    training and of the vocabulary): the name of its folder in the cache."""
    payload = {"config": config.to_dict(), "cache": CACHE_VERSION,
               "tokenizer": TOKENIZER_VERSION}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


# ------------------------------------------------------------------ training


def train(config: WarmStartConfig, progress: int | None = None
          ) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast, dict[str, Any]]:
    """Train a tiny model as ``config`` says, without the cache: ``(model, tokenizer, report)``
    (the report is what ``warm_start.json`` holds). ``progress``: None, quiet; an int, a
    progress bar over the steps on that line (0 the first; one per process training in
    parallel), which shows the accuracy at each evaluation; where stderr is not a terminal (a
    log file, a pipe), a plain line at each evaluation instead (bars of processes training
    side by side would interleave their cursor moves there)."""
    wall, cpu = time.perf_counter(), time.process_time()
    tokenizer = tiny_tokenizer()
    init_seq, data_seq, eval_seq = np.random.SeedSequence(config.seed).spawn(3)
    model = tiny_model(tokenizer, config.model, init_seq)
    data_rng = np.random.default_rng(data_seq)
    streams = training_streams(config.tasks, data_rng)
    weights = np.array([s.weight for s in config.tasks])
    weights /= weights.sum()
    held_out = {label: evaluation_questions(s, config.eval_size)
                for label, s in config.labelled().items()}
    targets = config.targets()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    losses: list[float] = []
    curve: list[dict[str, Any]] = []
    reached = False
    name = "warm start " + "+".join(s.name for s in config.tasks)
    lines = progress is not None and not sys.stderr.isatty()  # plain lines, not a bar
    bar = tqdm(total=config.max_steps, unit="step", disable=progress is None or lines,
               position=progress or 0, desc=name, leave=True, dynamic_ncols=True)
    for step in range(1, config.max_steps + 1):
        drawn = draw_batch(streams, weights, data_rng, config.batch_size)
        tagged = tag_draws(config.tag_probability, data_rng, len(drawn))
        ids, mask, labels = collate([supervised_example(tokenizer, d, t)
                                     for d, t in zip(drawn, tagged)],
                                    tokenizer.pad_token_id)
        model.train()
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        losses.append(float(loss.detach()))
        bar.update()
        if step % config.eval_every and step != config.max_steps:
            continue
        # The same sampling stream at every evaluation: differences along the curve are the
        # model's, not the draws'.
        accuracy = sampled_accuracy(model, tokenizer, held_out,
                                    max_new_tokens=config.max_new_tokens, seed=eval_seq)
        since = curve[-1]["step"] if curve else 0
        curve.append({"step": step, "loss": float(np.mean(losses[since:])), "accuracy": accuracy,
                      "seconds": time.perf_counter() - wall})
        logger.info("warm start step %d: loss %.3f, accuracy %s", step, curve[-1]["loss"],
                    {k: round(v, 3) for k, v in accuracy.items()})
        shown = "accuracy " + ", ".join(f"{k} {v:.2f}" for k, v in accuracy.items()
                                        if k in targets or not targets)
        reached = all(accuracy[task] >= target for task, target in targets.items())
        if targets and reached:
            bar.total = step  # done early: the bar ends full, not at a third
            shown += ", target reached"
        bar.set_postfix_str(shown)
        if lines:
            print(f"{name}: step {step}/{config.max_steps}, {shown}", file=sys.stderr,
                  flush=True)
        if targets and reached:
            break
    bar.close()
    model.eval()
    report = {
        "config": config.to_dict(), "cache_key": cache_key(config), "steps": len(losses),
        "reached": bool(targets) and reached, "accuracy": curve[-1]["accuracy"],
        "curve": curve, "losses": losses,
        "seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu,
        "torch_threads": torch.get_num_threads(),
    }
    return model, tokenizer, report


def tag_draws(tag_probability: float, rng: np.random.Generator, size: int) -> list[bool]:
    """Which of ``size`` targets carry the tags. Only a probability strictly between 0 and 1
    draws from ``rng``, so that always-tagged warm starts keep the draws they had before the
    option existed (and their weights)."""
    if tag_probability in (0, 1):
        return [bool(tag_probability)] * size
    return (rng.random(size) < tag_probability).tolist()


# ------------------------------------------------------------------ cache


def cache_path(config: WarmStartConfig, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder ``warm_start(config, cache_dir)`` returns, whether or not it exists yet."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "tiny-warm-start"
    return root / cache_key(config)


def warm_start(config: WarmStartConfig | None = None,
               cache_dir: str | os.PathLike | None = None, progress: int | None = None) -> Path:
    """The folder of the model ``config`` trains: from the cache, else trained and saved
    (see the module docstring). ``cache_dir``: the cache's root (default
    ``agents.lm.models.cache_dir() / "tiny-warm-start"``); ``progress``: ``train``'s."""
    config = config or WarmStartConfig()
    target = cache_path(config, cache_dir)
    if (target / REPORT_FILE).is_file():
        logger.info("warm start found in the cache: %s", target)
        return target
    logger.info("warm start %s: training", target.name)
    model, tokenizer, report = train(config, progress)
    root = target.parent
    root.mkdir(parents=True, exist_ok=True)
    # Written to a temporary sibling and renamed, so that a reader never sees half a model.
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=root))
    try:
        with _no_progress_bars():  # transformers' "Writing model shards" bar, for a tiny model
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / REPORT_FILE).write_text(json.dumps(report, indent=1) + "\n")
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / REPORT_FILE).is_file():
                raise
            # Another process saved the same config first; its copy is as good as ours.
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info("warm start saved to %s", target)
    return target


def read_report(path: str | os.PathLike) -> dict[str, Any]:
    """The ``warm_start.json`` of a saved warm start: config, steps, accuracy, curve, seconds."""
    return json.loads((Path(path) / REPORT_FILE).read_text())


def short_of_target(config: WarmStartConfig, report: dict[str, Any]) -> str | None:
    """A line saying where a warm start stopped and what it reached, if it has a target and
    stopped at its step cap short of it (``report``: its ``warm_start.json``); else None."""
    targets = config.targets()
    if not targets or report["reached"]:
        return None
    short = ", ".join(f"{task} {report['accuracy'][task]:.2f} (target {target:g})"
                      for task, target in targets.items() if report["accuracy"][task] < target)
    return (f"warm start {'+'.join(s.name for s in config.tasks)} stopped at its "
            f"{report['steps']}-step cap short of its target: held-out accuracy {short}; "
            "it is used as it is")


def load_tiny(path: str | os.PathLike) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A saved tiny model (float32, CPU, eval mode) and its tokenizer."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no saved model in {path} (expected config.json there)")
    # quietly: a swarm loads one model per node, and its log should show rounds, not a
    # "Loading weights" bar per node
    with _no_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    return model.eval(), tokenizer


def tiny_nodes(folders: Sequence[str | os.PathLike], config: Any, num_external: int,
               seeds: Sequence[np.random.SeedSequence]) -> list[Any]:
    """One ``GRPOAgent`` per seed, node ``i`` loaded from ``folders[i % len(folders)]`` (warm
    starts dealt round-robin, as specialists), each trained with ``config`` (a
    ``GRPOConfig``) and asking for ``num_external`` external groups."""
    from agents.lm.grpo import GRPOAgent

    return [GRPOAgent(*load_tiny(folders[i % len(folders)]), config,
                      num_external=num_external, seed=seed) for i, seed in enumerate(seeds)]


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off inside, restored after (not for the whole process)."""
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
