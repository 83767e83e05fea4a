"""A swarm of small GRPO nodes acting and learning in one vectorised call per round.

``batched_swarm(agents)`` takes :class:`~agents.lm.grpo.GRPOAgent` objects whose models share one
Llama configuration (tiny models: :mod:`agents.tiny`) and makes them act and learn together:
their weights are stacked on a node axis and every forward pass of a round, generation and
training alike, runs once for all of them (:mod:`agents.tiny.grouped_llama`). A node of eight
costs about what one node costs, where node by node each paid the full Python and kernel
overhead of a model this small (BENCHMARKS.md, "Batched tiny swarm").

Nothing else changes: each agent keeps its own model, optimizer and random stream, and its
update is :class:`agents.lm.grpo_update.GRPOUpdate`, the one ``GRPOAgent.learn`` runs. The
result is the node-by-node result (tested: the same completions, and weights equal to float
rounding after learning), so a swarm can be switched between the two freely.

- Generation samples each node's rows from its own random stream with the draws
  ``transformers``' ``generate`` makes (temperature, top-k, top-p, then one multinomial per
  step over the node's rows, until every row of the node has ended: drawn for all nodes in one
  operation, each node's random numbers from its own stream), from logits computed for all
  nodes at once with a key/value cache.
- Learning forwards every node's training set in one batch with gradients, each distinct
  prompt once and the completions after it, adds the nodes' losses (each node's gradient
  reaches only its own weights) and lets each agent clip and step.
- ``share_prompts`` (default True): in both, the completions of one prompt read its keys and values
  once (:func:`~agents.tiny.grouped_llama.grouped_prefix_forward`) rather than each from its own
  copy, and the layers compute with :mod:`agents.tiny.fast_kernels` on the prompts' real tokens
  alone; the same results to float rounding, for less CPU time a round, in float32 and less again
  in bfloat16 (BENCHMARKS.md, "Prompt-prefix sharing"). False computes as before the option, bit
  for bit.

``sapo_env.runtime.run`` uses both through the joint-actor protocol (``act_jointly``,
``learn_jointly``; :mod:`sapo_env.runtime.agent_calls`). Requirements, checked here: full
fine-tuning (no LoRA), ``beta`` 0, one device, one Llama configuration :func:`check_supported`
accepts, and the same sampling settings for every agent.

Example::

    import sapo_env.runtime
    from agents import GRPOAgent, GRPOConfig
    from agents.tiny import batched_swarm

    agents = batched_swarm([GRPOAgent(model, tokenizer, GRPOConfig(...), seed=s)
                            for s, model in enumerate(models)])
    sapo_env.runtime.run(sapo_env.parallel_env(n=len(agents), system_prompt=""), agents, rounds=10)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from agents.lm.generation import base_model, left_padded
from agents.lm.grpo_update import GRPOUpdate
from agents.lm.lora import members_by_name
from agents.lm.loss import token_logprobs
from agents.lm.models import autocast
from agents.tiny.fast_kernels import fast_weights
from agents.tiny.grouped_llama import (
    GroupedCache,
    RowCache,
    check_supported,
    grouped_forward,
    grouped_prefix_forward,
    stack_weights,
)
from agents.tiny.learn_batches import CopiedPromptBatch, SharedPromptBatch

# Settings that must be equal across nodes: generation samples every row alike.
_SHARED_SETTINGS = ("temperature", "top_p", "top_k", "max_new_tokens", "num_iterations")


class BatchedSwarm:
    """The joint actor and learner of a :func:`batched_swarm`; see the module docstring."""

    #: No joint random stream: every node samples from its own (``GRPOAgent.rng``).
    rng = None

    def __init__(self, agents: Sequence[Any], names: Sequence[str], share_prompts: bool = True):
        if not agents:
            raise ValueError("batched_swarm needs at least one agent")
        first = agents[0]
        for i, agent in enumerate(agents):
            cfg = agent.config
            if cfg.use_lora:
                raise ValueError(f"agent {i}: batched_swarm trains whole models; got use_lora=True")
            if cfg.beta != 0:
                raise ValueError(f"agent {i}: batched_swarm needs beta=0, got beta={cfg.beta}")
            for name in _SHARED_SETTINGS:
                if getattr(cfg, name) != getattr(first.config, name):
                    raise ValueError(
                        f"agent {i}: {name}={getattr(cfg, name)!r} differs from agent 0's "
                        f"{getattr(first.config, name)!r}; batched_swarm samples all nodes alike"
                    )
            if agent.device != first.device or agent.dtype != first.dtype:
                raise ValueError(f"agent {i} is on {agent.device}/{agent.dtype}, agent 0 on "
                                 f"{first.device}/{first.dtype}")
            check_supported(base_model(agent.model).config)
            if _architecture(agent.model) != _architecture(first.model):
                raise ValueError(f"agent {i}'s model configuration differs from agent 0's")
            if agent.eos_ids != first.eos_ids or agent.pad_id != first.pad_id:
                raise ValueError(f"agent {i}'s tokenizer has other EOS/pad ids than agent 0's")
        self.agents = tuple(agents)
        self.share_prompts = share_prompts
        self.members: dict[str, Any] = {}
        self.bind(names)
        self.model_config = base_model(first.model).config
        cfg = first.config
        warpers = LogitsProcessorList()
        if cfg.temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(cfg.temperature))
        if cfg.top_k:
            warpers.append(TopKLogitsWarper(cfg.top_k))
        if cfg.top_p < 1.0:
            warpers.append(TopPLogitsWarper(cfg.top_p))
        self._warpers = warpers

    def bind(self, names: Sequence[str]) -> None:
        """Agent ``i`` of the swarm plays env node ``names[i]``."""
        self.members = members_by_name(self.agents, names)

    def _agents_of(self, nodes: Sequence[str]) -> list[Any]:
        unknown = [name for name in nodes if name not in self.members]
        if unknown:
            raise ValueError(f"nodes {unknown} are not in this batched swarm, which plays "
                             f"{list(self.members)}; pass names= to batched_swarm")
        return [self.members[name] for name in nodes]

    # ------------------------------------------------------------------ acting

    def act_jointly(self, observations: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
        """Actions for the given nodes, from one batched generation."""
        nodes = list(observations)
        agents = self._agents_of(nodes)
        copies = {int(observations[name]["completions_per_question"]) for name in nodes}
        if len(copies) != 1:
            raise ValueError(f"completions_per_question differs between nodes: {sorted(copies)}")
        prompts = [[agent.prompt_ids(q["prompt"], observations[name]["system_prompt"])
                    for q in observations[name]["questions"]]
                   for name, agent in zip(nodes, agents)]
        # with share_logprobs, each node's sampled tokens and their log-probs go in its action
        shared = [None] * len(agents)
        sharing = any(agent.config.share_logprobs for agent in agents)
        ids = self.generate(agents, prompts, copies.pop(), shared if sharing else None)
        return {name: agent.build_action(observations[name], rows, sent)
                for name, agent, rows, sent in zip(nodes, agents, ids, shared)}

    def generate(self, agents: Sequence[Any], prompts: Sequence[Sequence[Sequence[int]]],
                 copies: int, logprobs: list | None = None) -> list[list[list[int]]]:
        """Per agent, ``copies`` completions of each of its prompts (rows in prompt order,
        each prompt's copies together), as token ids up to EOS. ``logprobs``, a list with one
        entry per agent, receives each agent's ``(tokens, logprobs)``: per row the sampled
        tokens, EOS included where the row ended, and the log-probability of each under the
        policy that drew it at the sampling temperature (``log_softmax(logits / T)``)."""
        first = agents[0]
        device, cfg = first.device, first.config
        widths = [len(p) * copies for p in prompts]
        results: list[list[list[int]]] = [[] for _ in agents]
        live = [i for i, width in enumerate(widths) if width]
        if not live:
            return results
        agents = [agents[i] for i in live]
        prompts = [prompts[i] for i in live]
        widths = [widths[i] for i in live]
        n, questions = len(agents), max(len(p) for p in prompts)
        flat = [p for node in prompts for p in node]
        ids, mask = left_padded(flat, first.pad_id)
        length = ids.shape[1]
        grid = torch.full((n, questions, length), first.pad_id, dtype=torch.long)
        grid_mask = torch.zeros((n, questions, length), dtype=torch.long)
        row = 0
        for i, node in enumerate(prompts):
            grid[i, : len(node)] = ids[row : row + len(node)]
            grid_mask[i, : len(node)] = mask[row : row + len(node)]
            row += len(node)
        grid, grid_mask = grid.to(device), grid_mask.to(device)
        eos = torch.tensor(first.eos_ids, device=device)
        rows = questions * copies
        tokens = torch.full((n, rows, cfg.max_new_tokens), first.pad_id, dtype=torch.long,
                            device=device)
        unfinished = torch.zeros((n, rows), dtype=torch.bool, device=device)
        picked = None if logprobs is None else torch.zeros(tokens.shape, device=device)
        for i, width in enumerate(widths):
            unfinished[i, :width] = True
        drawing = [True] * n  # a node stops drawing once all its rows have ended, as generate
        with torch.no_grad(), autocast(device, first.dtype):
            weights = stack_weights([agent.model for agent in agents])
            arithmetic = "fast" if self.share_prompts else "reference"
            if self.share_prompts:
                weights = fast_weights(weights, self.model_config)
            positions = (grid_mask.cumsum(dim=2) - 1).clamp(min=0)
            logits, cache = grouped_forward(weights, self.model_config, grid, grid_mask,
                                            positions, logits_to_keep=1, arithmetic=arithmetic)
            if self.share_prompts:
                # Each prompt's keys and values once, read by all its rows as they decode
                # (contiguous: read at every step, which would copy strided ones each time).
                prompt_cache = GroupedCache([k.contiguous() for k in cache.keys],
                                            [v.contiguous() for v in cache.values],
                                            cache.key_mask, cache.length)
                cache = RowCache.empty(self.model_config, n, questions, copies,
                                       cfg.max_new_tokens, prompt_cache.keys[0].dtype, device)
            else:
                # Each prompt's keys and values once, then copied to each of its rows.
                copy_of = torch.arange(questions, device=device).repeat_interleave(copies)
                cache = cache.select_rows(copy_of.expand(n, -1)).with_room(cfg.max_new_tokens)
            logits = logits.repeat_interleave(copies, dim=1)
            position = positions[:, :, -1:].repeat_interleave(copies, dim=1)
            for step in range(cfg.max_new_tokens):
                scores = logits[:, :, -1, :].float()
                scores = self._warpers(None, scores.reshape(n * rows, -1)).reshape(n, rows, -1)
                probs = torch.softmax(scores, dim=-1)
                drawn = torch.where(unfinished, _sample(agents, probs, widths, drawing),
                                    torch.full_like(unfinished, first.pad_id, dtype=torch.long))
                tokens[:, :, step] = drawn
                if picked is not None:
                    picked[:, :, step] = torch.log_softmax(
                        logits[:, :, -1, :].float() / cfg.temperature, dim=-1
                    ).gather(2, drawn[:, :, None]).squeeze(2)
                unfinished &= ~torch.isin(drawn, eos)
                drawing = [drawing[i] and bool(unfinished[i].any()) for i in range(n)]
                if not any(drawing) or step + 1 == cfg.max_new_tokens:
                    break
                position = position + 1
                if self.share_prompts:
                    logits, cache = grouped_prefix_forward(
                        weights, self.model_config, prompt_cache,
                        drawn.reshape(n, questions, copies, 1),
                        torch.ones_like(drawn).reshape(n, questions, copies, 1),
                        position.reshape(n, questions, copies, 1), cache=cache)
                    logits = logits.reshape(n, rows, 1, -1)
                else:
                    logits, cache = grouped_forward(
                        weights, self.model_config, drawn[:, :, None],
                        torch.ones_like(drawn[:, :, None]), position, cache=cache)
        _unpack(tokens, eos, picked, live, widths, results, logprobs)
        return results

    # ------------------------------------------------------------------ learning

    def learn_jointly(self, batches: Mapping[str, Sequence[Mapping[str, Any]]]
                      ) -> dict[str, dict[str, float]]:
        """Each node's GRPO update on its batch, the forward passes of all in one call: per
        node the metrics ``GRPOAgent.learn`` returns, its own ``generated_tokens`` (what it
        sampled in this swarm's ``act_jointly`` since its last update) and ``optimizer_steps``
        included."""
        nodes = list(batches)
        agents = self._agents_of(nodes)
        # One micro-batch per node: the nodes' rows are batched across the node axis instead.
        updates = [GRPOUpdate.begin(agent, batches[name], micro_batch_size=1 << 30)
                   for name, agent in zip(nodes, agents)]
        training = [u for u in updates if u.micro]
        if training:
            self._train(training)
        return {name: u.finish() for name, u in zip(nodes, updates)}

    def _train(self, updates: Sequence[GRPOUpdate]) -> None:
        agents = [u.agent for u in updates]
        first = agents[0]
        layout = SharedPromptBatch if self.share_prompts else CopiedPromptBatch
        batch = layout.of(updates, first.pad_id, first.device)
        for agent in agents:
            agent.model.train()
        try:
            for iteration in range(first.config.num_iterations):
                for agent in agents:
                    agent.optimizer.zero_grad(set_to_none=True)
                weights = stack_weights([agent.model for agent in agents])
                with autocast(first.device, first.dtype):
                    logits = batch.completion_logits(weights, self.model_config)
                total = 0.0
                for i, u in enumerate(updates):
                    mb = u.micro[0]
                    node_logits = logits[i, : mb.input_ids.shape[0], : mb.completion_width]
                    if u.agent.config.temperature != 1.0:
                        node_logits = node_logits / u.agent.config.temperature
                    targets = mb.input_ids[:, -mb.completion_width :]
                    total = total + u.loss(0, token_logprobs(node_logits, targets), iteration)
                total.backward()  # each node's loss depends only on its own weights
                for u in updates:
                    u.step()
        finally:
            for agent in agents:
                agent.model.eval()
                agent.optimizer.zero_grad(set_to_none=True)


def _architecture(model: Any) -> dict[str, Any]:
    """A model's configuration without where it was loaded from."""
    config = base_model(model).config.to_dict()
    return {k: v for k, v in config.items() if k not in ("_name_or_path", "name_or_path")}


def batched_swarm(agents: Sequence[Any], names: Sequence[str] | None = None,
                  share_prompts: bool = True) -> list[Any]:
    """Make ``agents`` (GRPOAgents of one tiny Llama shape) act and learn in one call each
    round; returns them. ``names``: the env node each plays (default ``node_0`` ...).

    ``share_prompts``: the completions of one prompt read its keys and values once, in
    generation and in learning (:func:`~agents.tiny.grouped_llama.grouped_prefix_forward`),
    instead of each from its own copy. Both give the same completions and updates to float
    rounding; False reproduces runs made before the option existed bit for bit."""
    names = [f"node_{i}" for i in range(len(agents))] if names is None else list(names)
    joint = BatchedSwarm(agents, names, share_prompts)
    for agent in agents:
        agent.joint_actor = joint
    return list(agents)


def _sample(agents: Sequence[Any], probs: torch.Tensor, widths: Sequence[int],
            drawing: Sequence[bool]) -> torch.Tensor:
    """One token per row of ``probs`` ``(n, rows, V)``: for each drawing node i, its first
    ``widths[i]`` rows drawn from its own random stream exactly as ``torch.multinomial(probs[i,
    :widths[i]], 1)`` draws them (the most probable token elsewhere).

    ``torch.multinomial`` draws one sample a row as ``argmax(p / E)``, E exponential draws of
    the stream, row after row (tests/test_batched_swarm.py checks that it still does): so each
    node's exponentials come from its stream and one division and argmax serve all nodes."""
    if not torch.isfinite(probs).all() or (probs < 0).any():
        raise RuntimeError("generation: the probabilities hold inf, nan or a negative value")
    noise = torch.ones_like(probs)
    for i, agent in enumerate(agents):
        if drawing[i]:
            with agent.rng.scope():
                noise[i, : widths[i]].exponential_()
    return (probs / noise).argmax(dim=-1)


def _unpack(tokens: torch.Tensor, eos: torch.Tensor, picked: torch.Tensor | None,
            live: Sequence[int], widths: Sequence[int], results: list[list[list[int]]],
            logprobs: list | None) -> None:
    """Each live node's rows of ``tokens`` ``(n, rows, max_new_tokens)`` cut at their first
    EOS into ``results[i]``; with ``logprobs``, each row's tokens and ``picked`` log-probs up
    to and with that EOS into ``logprobs[i]``."""
    ended = torch.isin(tokens, eos)
    lengths = torch.where(ended.any(dim=2), ended.int().argmax(dim=2), tokens.shape[2])
    tokens, lengths = tokens.cpu(), lengths.cpu()
    for k, i in enumerate(live):
        results[i] = [tokens[k, r, : lengths[k, r]].tolist() for r in range(widths[k])]
        if logprobs is not None:  # a row that ended keeps its EOS here
            ends = [int(m) + (int(m) < tokens.shape[2]) for m in lengths[k, : widths[k]]]
            logprobs[i] = ([tokens[k, r, :e].tolist() for r, e in enumerate(ends)],
                           [picked[k, r, :e].tolist() for r, e in enumerate(ends)])
