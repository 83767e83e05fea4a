"""Many GRPO nodes on one machine: one frozen base model, one LoRA adapter per node.

``lora_swarm(model, n, config)`` loads ``model`` once (a hub id or path, a ``PreTrainedModel``
or ``"smollm2-135m"``) and returns ``n`` :class:`~agents.lm.grpo.GRPOAgent` objects, each with its
own adapter, Adam state and random stream (built with :meth:`GRPOAgent.with_adapter`, one
adapter after another on the same peft model). Memory is one base plus n small adapters
instead of n full models with their gradients and Adam moments.

Joint generation: the agents share a :class:`JointActor` as ``agent.joint_actor``. Given the
observations of several of them, keyed by env node name, ``act_jointly`` generates every completion
of every node in one batched ``generate`` call with a per-row adapter
(:mod:`agents.lm.mixed_adapters`): fewer, larger calls (their gain over acting node by node:
BENCHMARKS.md, "LM agent"). ``sapo_env.runtime.run`` uses it whenever live agents share a joint
actor. Joint generation draws from the joint actor's own random stream, so a node's completions
differ from those it would sample alone (each path is reproducible from the seed).

Binding node names: agent ``i`` plays node ``names[i]``, by default ``node_i`` (the env's own
names, when the swarm's agents are the first n of the env and passed in order). When they
play other nodes, say so: ``lora_swarm(model, 3, config, names=["node_1", "node_2",
"node_3"])`` or later ``agents[0].joint_actor.bind([...])``. ``act_jointly`` rejects names it
does not know.

Example::

    import sapo_env.runtime
    from agents import GRPOConfig, lora_swarm

    env = sapo_env.parallel_env(n=4)
    agents = lora_swarm("smollm2-135m", 4, GRPOConfig(learning_rate=1e-5))
    sapo_env.runtime.run(env, agents, rounds=10)  # one generate call per round for all four

(This module is ``agents.lm.lora`` rather than ``agents.lora_swarm``: a submodule named like the
function would shadow it in ``from agents import lora_swarm``.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agents.lm.generation import generate_completion_ids
from agents.lm.grpo import GRPOAgent
from agents.lm.grpo_config import GRPOConfig
from agents.lm.models import claim_model, load_model, resolve_device, resolve_dtype
from agents.lm.torch_rng import TorchRNG


def members_by_name(agents: Sequence[Any], names: Sequence[str]) -> dict[str, Any]:
    """``{names[i]: agents[i]}``, for a joint actor whose agent ``i`` plays node ``names[i]``."""
    names = list(names)
    if len(names) != len(agents) or len(set(names)) != len(names):
        raise ValueError(
            f"names must be {len(agents)} distinct node names, one per agent, got {names}"
        )
    return dict(zip(names, agents))


class JointActor:
    """Acts for several agents of one :func:`lora_swarm` in one generate call."""

    def __init__(self, model: torch.nn.Module, agents: Sequence[GRPOAgent],
                 names: Sequence[str], rng: TorchRNG):
        self.model = model
        self.agents = tuple(agents)
        self.rng = rng  #: the random stream of joint generation (saved by every member)
        self.members: dict[str, GRPOAgent] = {}
        self.bind(names)

    def bind(self, names: Sequence[str]) -> None:
        """Agent ``i`` of the swarm plays env node ``names[i]``."""
        self.members = members_by_name(self.agents, names)

    def act_jointly(self, observations: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
        """Actions for the given nodes (a subset of the swarm), from one generate call."""
        unknown = [name for name in observations if name not in self.members]
        if unknown:
            raise ValueError(
                f"observations for {unknown}, but this lora_swarm's agents play "
                f"{list(self.members)}; pass names= to lora_swarm or call joint_actor.bind()"
            )
        rows: list[list[int]] = []
        adapters: list[str] = []
        spans: dict[str, tuple[int, int]] = {}
        for name, observation in observations.items():
            agent = self.members[name]
            prompts = agent.build_prompts(observation)
            spans[name] = (len(rows), len(rows) + len(prompts))
            rows.extend(prompts)
            adapters.extend([agent.adapter_name] * len(prompts))
        first = self.agents[0]
        ids = generate_completion_ids(
            self.model, rows, config=first.config, pad_id=first.pad_id, eos_ids=first.eos_ids,
            device=first.device, dtype=first.dtype, rng=self.rng, adapter_names=adapters,
        )
        return {
            name: self.members[name].build_action(observations[name], ids[start:end])
            for name, (start, end) in spans.items()
        }


def lora_swarm(
    model: str | PreTrainedModel,
    n: int,
    config: GRPOConfig | None = None,
    *,
    tokenizer: PreTrainedTokenizerBase | str | None = None,
    names: Sequence[str] | None = None,
    num_external: int | Sequence[int] = 4,
    seed: int | np.random.SeedSequence = 0,
) -> list[GRPOAgent]:
    """``n`` GRPO agents sharing one frozen base, each with its own LoRA adapter.

    Args:
        model: base model: hub id or path, ``PreTrainedModel`` or ``"smollm2-135m"``.
        n: number of agents.
        config: shared hyperparameters; ``use_lora`` is forced on (generation settings are
            shared too, as joint generation samples all rows alike).
        tokenizer: the base model's tokenizer when ``model`` is an object without a path.
        names: env node played by each agent (default ``node_0`` ... ``node_{n-1}``).
        num_external: J of every agent, or one per agent.
        seed: root seed; each agent and the joint generation get an independent stream.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    config = dataclasses.replace(config or GRPOConfig(), use_lora=True)
    externals = [num_external] * n if isinstance(num_external, int) else list(num_external)
    if len(externals) != n:
        raise ValueError(f"num_external must be an int or {n} ints, got {num_external}")
    names = [f"node_{i}" for i in range(n)] if names is None else list(names)

    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    # The base is frozen, so it is stored in the compute dtype (half the memory on cuda).
    base, tokenizer = load_model(model, tokenizer, device=device, dtype=dtype)
    claim_model(base)
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    streams = root.spawn(n + 1)

    agents: list[GRPOAgent] = []
    shared: torch.nn.Module = base
    for i in range(n):
        agent = GRPOAgent.with_adapter(
            shared, tokenizer, config, f"lora_{i}", num_external=externals[i], seed=streams[i],
        )
        shared = agent.model  # the PeftModel after the first adapter; later ones add to it
        agents.append(agent)
    joint = JointActor(shared, agents, names, TorchRNG(streams[n], device))
    for agent in agents:
        agent.joint_actor = joint
    return agents
