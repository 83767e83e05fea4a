"""The reference SAPO node: a language model that acts by sampling and learns with GRPO.

``GRPOAgent(model, tokenizer=None, config=GRPOConfig(), num_external=4, ratio_policy=None,
seed=0)`` plays one node of a ``sapo_env`` swarm:

``act(observation)``
    builds one prompt per question with the tokenizer's chat template (the observation's
    system prompt, the question as the user turn), samples ``completions_per_question``
    completions for every question in one batched ``generate`` call (left padding), decodes
    them without special tokens and returns them with ``num_external``, the J of the node's
    next round: from ``ratio_policy(observation)`` when given, else the fixed
    ``num_external`` (the observation's ``num_external`` is the J in force now).
``learn(batch)``
    a GRPO step on the training set the env assembled. Local and external groups are treated
    alike: each completion is re-encoded as text (prompt under this agent's chat template +
    completion + EOS) with this agent's tokenizer, its token log-probabilities under the
    current policy serve as the "old" ones (detached), as the paper does for external text
    "however unlikely", and :func:`agents.loss.grpo_loss` is minimised with the advantages
    the env computed. Groups whose advantages are all zero are skipped (no forward, no
    backward). Returns ``loss``, ``clip_fraction``, ``ratio_mean``, ``kl``, ``grad_norm``,
    ``tokens``, ``groups``, ``skipped_groups`` and ``seconds``.
``save(path)`` / ``load(path)``
    weights (or the LoRA adapter), optimizer state and random state: a loaded agent continues
    exactly as the saved one would have.

``model`` is a Hugging Face id or path, a loaded ``PreTrainedModel`` (the agent then owns it
and trains it in place) or ``"smollm2-135m"`` (offline, see :mod:`agents.models`). Many agents
sharing one frozen base with an adapter each: :func:`agents.lora_swarm`.

Precision: forward passes run under ``torch.autocast`` in the compute dtype (bfloat16 on
cuda by default) while trainable weights stay float32, because Adam updates at a learning
rate of 1e-6 are below bfloat16's resolution and would vanish. A LoRA base is frozen, so it
is stored in the compute dtype.

Randomness: each agent owns its torch random state (seeded from ``seed`` through a
``numpy.random.SeedSequence``) and swaps it in only around its own sampling and training, so
agents do not perturb each other or the global generators: same seed, same completions.

Example::

    import sapo_env
    from agents import GRPOAgent, GRPOConfig

    env = sapo_env.parallel_env(n=2)
    config = GRPOConfig(max_new_tokens=64)
    agents = [GRPOAgent("smollm2-135m", config=config, seed=s) for s in range(2)]
    sapo_env.run(env, agents, rounds=5)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import math
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agents.generation import (
    base_model,
    chat_prompt_ids,
    eos_token_ids,
    forward_accepts,
    generate_completion_ids,
)
from agents.loss import NORMALIZATIONS, LossNormalization, grpo_loss, token_logprobs
from agents.models import (
    DTYPE_NAMES,
    DtypeSpec,
    autocast,
    load_model,
    resolve_device,
    resolve_dtype,
)

logger = logging.getLogger(__name__)

RatioPolicy = Callable[[Mapping[str, Any]], int]


@dataclass(frozen=True)
class GRPOConfig:
    """Hyperparameters of a GRPO node; defaults are the SAPO paper's / its reference code's."""

    # --- generation ---
    temperature: float = 1.0
    """Sampling temperature of ``act``; ``learn`` scores tokens at the same temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 samples from the whole distribution (the paper)."""
    top_k: int = 0
    """Sample among the k likeliest tokens; 0 disables it (transformers would default to 50)."""
    max_new_tokens: int = 256
    """Most tokens generated per completion; also the most completion tokens ``learn`` trains
    on (longer external completions are cut there, which bounds memory)."""
    generation_batch_size: int | None = None
    """Most sequences per ``generate`` call (memory bound); None: all B x L at once."""

    # --- objective ---
    epsilon_low: float = 0.2
    """The importance ratio is clipped below at 1 - epsilon_low (paper: 0.2)."""
    epsilon_high: float = 0.28
    """... and above at 1 + epsilon_high (paper: 0.28, DAPO's clip-higher)."""
    beta: float = 0.0
    """Weight of the KL penalty to the initial policy; the paper used none (0.0). When > 0,
    full fine-tuning keeps a frozen copy of the initial model; LoRA uses the base with the
    adapter disabled."""
    loss_normalization: LossNormalization = "token"
    """``"token"``: sum over all completion tokens of the batch / their count (DAPO, the
    reference implementation); ``"sequence"``: mean per completion, then mean (GRPO)."""
    num_iterations: int = 1
    """Optimizer steps on each batch (GRPO's mu). With 1 the ratio is exactly 1 and clipping
    never binds; more reuses the batch and makes the clip matter."""

    # --- optimizer (Adam) ---
    learning_rate: float = 1e-6
    """Adam step size. The reference implementation started at 1e-5 and later used 1e-6,
    which is also TRL's GRPO default and stable for 0.5B full fine-tuning; LoRA usually
    wants 10-100x more."""
    adam_beta1: float = 0.9
    """Adam's first-moment decay."""
    adam_beta2: float = 0.999
    """Adam's second-moment decay."""
    adam_epsilon: float = 1e-8
    """Adam's denominator epsilon."""
    weight_decay: float = 0.0
    """Decoupled weight decay (AdamW); 0 is plain Adam, as in the paper."""
    max_grad_norm: float | None = 1.0
    """Gradients are clipped to this global norm; None disables clipping."""

    # --- memory ---
    micro_batch_size: int = 8
    """Sequences per forward/backward pass in ``learn``; gradients accumulate over the batch,
    so this bounds memory without changing the update."""
    gradient_checkpointing: bool = True
    """Recompute each layer's activations in the backward pass instead of keeping them: on
    SmolLM2 on a CPU the activations of one micro-batch of 8 outweighed a LoRA node's whole
    state, and checkpointing cut a 4-node LoRA swarm's peak memory by 40% for 37% more
    ``learn`` time (BENCHMARKS.md). On by default, as in TRL's ``GRPOConfig``; turn it off
    when memory is plentiful and ``learn`` time matters."""

    # --- LoRA ---
    use_lora: bool = False
    """Train a LoRA adapter on a frozen base instead of every weight."""
    lora_rank: int = 16
    """Rank r of the adapter matrices."""
    lora_alpha: float = 32.0
    """Adapter scale numerator: the update is scaled by lora_alpha / lora_rank."""
    lora_dropout: float = 0.0
    """Dropout on the adapter input; 0 keeps act and learn on the same policy."""
    lora_target_modules: tuple[str, ...] | Literal["all-linear"] = "all-linear"
    """Module names that get adapters, or ``"all-linear"`` (every linear layer but the head)."""

    # --- hardware ---
    device: str = "auto"
    """``"auto"`` (cuda, then mps, then cpu) or any torch device string."""
    dtype: DtypeSpec = "auto"
    """Compute dtype: ``"auto"`` is bfloat16 on cuda and float32 elsewhere."""
    torch_threads: int | None = None
    """torch's CPU threads (``torch.set_num_threads``), set when an agent is built on the cpu;
    None leaves torch's setting alone. The setting is process-wide, so agents built later win.
    On a 2-core machine shared with other work, one SmolLM2 node's ``act`` took 170 s at 2
    threads and 8 s at 1 (threads spin waiting for a core another process holds): use 1
    there, and leave it unset on an idle machine or a GPU."""

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, expected: str) -> None:
            if not ok:
                raise ValueError(f"{field} must be {expected}, got {getattr(self, field)!r}")

        need(self.temperature > 0, "temperature", "> 0")
        need(0 < self.top_p <= 1, "top_p", "in (0, 1]")
        need(self.top_k >= 0, "top_k", ">= 0")
        need(self.max_new_tokens >= 1, "max_new_tokens", ">= 1")
        need(
            self.generation_batch_size is None or self.generation_batch_size >= 1,
            "generation_batch_size", "None or >= 1",
        )
        need(0 <= self.epsilon_low < 1, "epsilon_low", "in [0, 1)")
        need(self.epsilon_high >= 0, "epsilon_high", ">= 0")
        need(self.beta >= 0, "beta", ">= 0")
        need(self.loss_normalization in NORMALIZATIONS, "loss_normalization",
             f"one of {NORMALIZATIONS}")
        need(self.num_iterations >= 1, "num_iterations", ">= 1")
        need(self.learning_rate >= 0, "learning_rate", ">= 0")
        need(0 <= self.adam_beta1 < 1, "adam_beta1", "in [0, 1)")
        need(0 <= self.adam_beta2 < 1, "adam_beta2", "in [0, 1)")
        need(self.adam_epsilon > 0, "adam_epsilon", "> 0")
        need(self.weight_decay >= 0, "weight_decay", ">= 0")
        need(self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm",
             "None or > 0")
        need(self.micro_batch_size >= 1, "micro_batch_size", ">= 1")
        need(self.lora_rank >= 1, "lora_rank", ">= 1")
        need(self.lora_alpha > 0, "lora_alpha", "> 0")
        need(0 <= self.lora_dropout < 1, "lora_dropout", "in [0, 1)")
        targets = self.lora_target_modules
        need(targets == "all-linear" or (isinstance(targets, (tuple, list)) and len(targets) > 0
             and all(isinstance(t, str) for t in targets)),
             "lora_target_modules", "'all-linear' or a non-empty tuple of module names")
        if isinstance(targets, list):  # frozen dataclass: keep it hashable and immutable
            object.__setattr__(self, "lora_target_modules", tuple(targets))
        need(self.dtype in DTYPE_NAMES, "dtype", f"one of {DTYPE_NAMES}")
        need(isinstance(self.device, str) and bool(self.device), "device", "a device string")
        need(self.torch_threads is None or self.torch_threads >= 1, "torch_threads",
             "None or >= 1")


# --------------------------------------------------------------------------- randomness


def torch_seed(seed: int | np.random.SeedSequence) -> int:
    """A 63-bit torch seed drawn from a SeedSequence, so nearby ints give unrelated streams."""
    sequence = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return int(sequence.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


class TorchRNG:
    """A private torch random state (CPU + the accelerator) swapped in only inside ``scope()``.

    ``transformers.generate`` and dropout draw from torch's global generators and accept no
    ``torch.Generator``; forking the global state around each use gives every agent its own
    reproducible stream and leaves the caller's global state untouched.
    """

    def __init__(self, seed: int | np.random.SeedSequence, device: torch.device):
        value = torch_seed(seed)
        self.device = device
        self.cpu_state = torch.Generator().manual_seed(value).get_state()
        self.accelerator_state: torch.Tensor | None = None
        if device.type in ("cuda", "mps"):
            # Seed the device generator, read its state back, and put the caller's back.
            outer = _get_accelerator_state(device.type, device)
            if device.type == "cuda":
                with torch.cuda.device(device):
                    torch.cuda.manual_seed(value)
            else:
                torch.mps.manual_seed(value)
            self.accelerator_state = _get_accelerator_state(device.type, device)
            _set_accelerator_state(device.type, device, outer)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        kind = self.device.type
        with torch.random.fork_rng(devices=[]):  # the CPU generator
            torch.set_rng_state(self.cpu_state)
            outer = None
            if self.accelerator_state is not None:  # cuda or mps
                outer = _get_accelerator_state(kind, self.device)
                _set_accelerator_state(kind, self.device, self.accelerator_state)
            try:
                yield
            finally:
                self.cpu_state = torch.get_rng_state()
                if outer is not None:
                    self.accelerator_state = _get_accelerator_state(kind, self.device)
                    _set_accelerator_state(kind, self.device, outer)

    def state_dict(self) -> dict[str, torch.Tensor | None]:
        return {"cpu": self.cpu_state.clone(), "accelerator": self.accelerator_state}

    def load_state_dict(self, state: Mapping[str, torch.Tensor | None]) -> None:
        self.cpu_state = state["cpu"].clone()
        if state.get("accelerator") is not None and self.accelerator_state is not None:
            self.accelerator_state = state["accelerator"].clone()


def _get_accelerator_state(kind: str, device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if kind == "cuda" else torch.mps.get_rng_state()


def _set_accelerator_state(kind: str, device: torch.device, state: torch.Tensor) -> None:
    if kind == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.mps.set_rng_state(state)


# --------------------------------------------------------------------------- the agent

# Base models owned by an agent: a second agent training the same object in place would
# silently share weights with the first.
_OWNED_MODELS: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def claim_model(model: torch.nn.Module) -> None:
    if model in _OWNED_MODELS:
        raise ValueError(
            "this model object already belongs to another GRPOAgent, which trains it in place; "
            "pass copy.deepcopy(model), a model id, or use agents.lora_swarm to share a frozen base"
        )
    _OWNED_MODELS.add(model)


@dataclass
class _Encoded:
    """One micro-batch on the device: left-padded prompts, right-padded completions."""

    input_ids: torch.Tensor  # (S, P + C)
    attention_mask: torch.Tensor  # (S, P + C)
    position_ids: torch.Tensor  # (S, P + C)
    completion_mask: torch.Tensor  # (S, C)
    advantages: torch.Tensor  # (S,)
    completion_width: int  # C


class GRPOAgent:
    """A language-model node trained with GRPO; see the module docstring."""

    #: Set by :func:`agents.lora_swarm`: generates for the whole swarm in one call.
    joint_actor: Any = None

    def __init__(
        self,
        model: str | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | str | None = None,
        config: GRPOConfig | None = None,
        num_external: int = 4,
        ratio_policy: RatioPolicy | None = None,
        seed: int | np.random.SeedSequence = 0,
    ):
        config = config or GRPOConfig()
        device = resolve_device(config.device)
        dtype = resolve_dtype(config.dtype, device)
        # Trainable weights stay float32 (see module docstring); a frozen LoRA base need not.
        storage = dtype if config.use_lora else torch.float32
        base, tokenizer = load_model(model, tokenizer, device=device, dtype=storage)
        claim_model(base)
        self._setup(
            base, tokenizer, config, adapter_name="default" if config.use_lora else None,
            num_external=num_external, ratio_policy=ratio_policy, seed=seed,
            device=device, dtype=dtype,
        )

    @classmethod
    def _create(cls, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                config: GRPOConfig, **kwargs: Any) -> GRPOAgent:
        """An agent on an already loaded (possibly shared peft) model; used by lora_swarm."""
        agent = cls.__new__(cls)
        agent._setup(model, tokenizer, config, **kwargs)
        return agent

    def _setup(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        config: GRPOConfig,
        *,
        adapter_name: str | None,
        num_external: int,
        ratio_policy: RatioPolicy | None,
        seed: int | np.random.SeedSequence,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        if num_external < 0:
            raise ValueError(f"num_external must be >= 0, got {num_external}")
        if config.torch_threads is not None and device.type == "cpu":
            torch.set_num_threads(config.torch_threads)
        self.config = config
        self.tokenizer = tokenizer
        self.num_external = int(num_external)
        self.ratio_policy = ratio_policy
        self.device = device
        self.dtype = dtype
        self.adapter_name = adapter_name
        self.rng = TorchRNG(seed, device)
        self.steps = 0
        self.system_prompt = ""
        self._warned_budget = False

        if adapter_name is not None:
            with self.rng.scope():  # adapter init draws random numbers
                model = _attach_adapter(model, adapter_name, config)
        self.model = model
        self.eos_ids = eos_token_ids(base_model(model), tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]
        base = base_model(model)
        if config.gradient_checkpointing:
            # transformers 5.2x renamed it (the old name warns); 4.x has only the old one.
            enable = getattr(base, "activation_checkpointing_enable", None)
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                base.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False}
                )
        self._logits_to_keep = forward_accepts(base, "logits_to_keep")

        if adapter_name is None:
            self.trainable_parameters = [p for p in model.parameters()]
            for p in self.trainable_parameters:
                p.requires_grad_(True)
        else:
            marker = f".{adapter_name}."
            self.trainable_parameters = [p for n, p in model.named_parameters() if marker in n]
            if not self.trainable_parameters:
                raise ValueError(f"no LoRA parameters found for adapter {adapter_name!r}")
        self.optimizer = torch.optim.AdamW(
            self.trainable_parameters, lr=config.learning_rate,
            betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon,
            weight_decay=config.weight_decay,
        )
        self._reference: torch.nn.Module | None = None
        if config.beta > 0 and adapter_name is None:
            reference = copy.deepcopy(model).to(dtype).eval()
            reference.requires_grad_(False)
            self._reference = reference
        model.eval()

    # ------------------------------------------------------------------ acting

    def prompt_ids(self, question: str, system_prompt: str | None = None) -> list[int]:
        """This agent's encoding of a question (system prompt: the last one observed)."""
        system = self.system_prompt if system_prompt is None else system_prompt
        return chat_prompt_ids(self.tokenizer, system, question)

    def _activate(self) -> None:
        if self.adapter_name is not None:
            self.model.set_adapter(self.adapter_name)

    def act(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        """Completions for the observation's questions and the J to ask for; see module doc."""
        prompts = self.build_prompts(observation)
        self._activate()
        ids = generate_completion_ids(
            self.model, prompts, config=self.config, pad_id=self.pad_id, eos_ids=self.eos_ids,
            device=self.device, dtype=self.dtype, rng=self.rng,
        )
        return self.build_action(observation, ids)

    @contextlib.contextmanager
    def evaluation_scope(self) -> Iterator[None]:
        """Inside, ``act`` leaves no trace: the random state and the last system prompt are put
        back afterwards, so evaluating in the middle of a run (``sapo_env.metrics``' held-out
        evaluation enters this scope) does not change the run."""
        rng, system_prompt = self.rng.state_dict(), self.system_prompt
        try:
            yield
        finally:
            self.rng.load_state_dict(rng)
            self.system_prompt = system_prompt

    def build_prompts(self, observation: Mapping[str, Any]) -> list[list[int]]:
        """The rows to generate: each question's prompt, L times, in question order."""
        self.system_prompt = observation["system_prompt"]
        copies = int(observation["completions_per_question"])
        prompts = [self.prompt_ids(q["prompt"]) for q in observation["questions"]]
        return [p for p in prompts for _ in range(copies)]

    def build_action(self, observation: Mapping[str, Any], ids: Sequence[Sequence[int]]) -> dict:
        """Decode generated rows (from :meth:`build_prompts`) into the env's action."""
        copies = int(observation["completions_per_question"])
        texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        completions = tuple(
            tuple(texts[q * copies : (q + 1) * copies]) for q in range(len(texts) // copies)
        )
        return {"completions": completions, "num_external": self.choose_num_external(observation)}

    def choose_num_external(self, observation: Mapping[str, Any]) -> int:
        """J from the ratio policy, else the fixed one, clamped to [0, train_budget]."""
        policy = self.ratio_policy
        wanted = int(policy(observation) if policy is not None else self.num_external)
        budget = int(observation["train_budget"])
        chosen = min(max(wanted, 0), budget)
        if chosen != wanted and not self._warned_budget:
            logger.warning("num_external %d is outside [0, train_budget=%d]; using %d",
                           wanted, budget, chosen)
            self._warned_budget = True
        return chosen

    # ------------------------------------------------------------------ learning

    def encode_group(self, group: Mapping[str, Any]) -> tuple[list[int], list[list[int]]]:
        """Prompt ids and completion ids (+ EOS) of a group, as ``learn`` trains on them."""
        prompt = self.prompt_ids(group["question"])
        limit = self.config.max_new_tokens
        encoded = self.tokenizer(list(group["completions"]), add_special_tokens=False)["input_ids"]
        return prompt, [ids[:limit] + [self.eos_ids[0]] for ids in encoded]

    def _micro_batches(self, groups: Sequence[Mapping[str, Any]]) -> list[_Encoded]:
        rows: list[tuple[list[int], list[int], float]] = []
        for group in groups:
            prompt, completions = self.encode_group(group)
            advantages = np.asarray(group["advantages"], dtype=np.float32)
            if len(advantages) != len(completions):
                raise ValueError(
                    f"group {group.get('id')!r} has {len(completions)} completions but "
                    f"{len(advantages)} advantages"
                )
            rows.extend((prompt, c, float(a)) for c, a in zip(completions, advantages))
        # Similar lengths together: less padding, same loss (normalization is global).
        rows.sort(key=lambda r: len(r[0]) + len(r[1]))
        batches = []
        size = self.config.micro_batch_size
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            p_width = max(len(r[0]) for r in chunk)
            c_width = max(len(r[1]) for r in chunk)
            ids = torch.full((len(chunk), p_width + c_width), self.pad_id, dtype=torch.long)
            attention = torch.zeros_like(ids)
            completion_mask = torch.zeros((len(chunk), c_width), dtype=torch.bool)
            for i, (prompt, completion, _) in enumerate(chunk):
                ids[i, p_width - len(prompt) : p_width] = torch.tensor(prompt)
                ids[i, p_width : p_width + len(completion)] = torch.tensor(completion)
                attention[i, p_width - len(prompt) : p_width + len(completion)] = 1
                completion_mask[i, : len(completion)] = True
            # Positions count real tokens only, so left padding does not shift them.
            positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
            batches.append(_Encoded(
                ids.to(self.device), attention.to(self.device), positions.to(self.device),
                completion_mask.to(self.device),
                torch.tensor([r[2] for r in chunk], dtype=torch.float32, device=self.device),
                c_width,
            ))
        return batches

    def _token_logprobs(self, model: torch.nn.Module, batch: _Encoded) -> torch.Tensor:
        width = batch.completion_width
        kwargs: dict[str, Any] = {"use_cache": False}
        if self._logits_to_keep:
            # Only the completion's logits: the (S, T, V) tensor dominates memory.
            kwargs["logits_to_keep"] = width + 1
        with autocast(self.device, self.dtype):
            logits = model(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                position_ids=batch.position_ids, **kwargs,
            ).logits
        logits = logits[:, -(width + 1) : -1, :]
        if self.config.temperature != 1.0:
            logits = logits / self.config.temperature
        return token_logprobs(logits, batch.input_ids[:, -width:])

    def _reference_logprobs(self, batch: _Encoded) -> torch.Tensor:
        with torch.no_grad():
            if self._reference is not None:
                return self._token_logprobs(self._reference, batch)
            with self.model.disable_adapter():
                return self._token_logprobs(self.model, batch)

    def learn(self, batch: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """One GRPO update (``num_iterations`` optimizer steps) on the env's training set."""
        start = time.perf_counter()
        groups = [g for g in batch if np.any(np.asarray(g["advantages"]) != 0)]
        metrics = {
            "loss": 0.0, "clip_fraction": 0.0, "ratio_mean": 1.0, "kl": 0.0, "grad_norm": 0.0,
            "tokens": 0.0, "groups": float(len(groups)),
            "skipped_groups": float(len(batch) - len(groups)), "seconds": 0.0,
        }
        if not groups:
            metrics["seconds"] = time.perf_counter() - start
            return metrics
        self._activate()
        micro = self._micro_batches(groups)
        total_tokens = float(sum(int(b.completion_mask.sum()) for b in micro))
        total_sequences = float(sum(b.input_ids.shape[0] for b in micro))
        old: list[torch.Tensor] = []
        reference: list[torch.Tensor | None] = []
        sums = {"loss": 0.0, "clipped": 0.0, "ratio": 0.0, "kl": 0.0, "grad_norm": 0.0}
        cfg = self.config
        self.model.train()
        try:
            with self.rng.scope():  # LoRA dropout, if any, draws from the agent's stream
                for iteration in range(cfg.num_iterations):
                    self.optimizer.zero_grad(set_to_none=True)
                    for k, mb in enumerate(micro):
                        logp = self._token_logprobs(self.model, mb)
                        if iteration == 0:
                            # All micro-batches of the first pass see the same weights (one
                            # step per pass), so these are the sampling policy's log-probs.
                            old.append(logp.detach())
                            reference.append(self._reference_logprobs(mb) if cfg.beta > 0 else None)
                        out = grpo_loss(
                            logp, old[k], mb.advantages, mb.completion_mask,
                            epsilon_low=cfg.epsilon_low, epsilon_high=cfg.epsilon_high,
                            normalization=cfg.loss_normalization, beta=cfg.beta,
                            ref_logp=reference[k], total_tokens=total_tokens,
                            total_sequences=total_sequences,
                        )
                        out.loss.backward()
                        sums["loss"] += float(out.loss.detach())
                        sums["clipped"] += float(out.clipped_tokens)
                        sums["ratio"] += float(out.ratio_sum)
                        sums["kl"] += float(out.kl_sum)
                    norm = torch.nn.utils.clip_grad_norm_(
                        self.trainable_parameters, cfg.max_grad_norm or math.inf
                    )
                    sums["grad_norm"] += float(norm)
                    if torch.isfinite(norm):
                        self.optimizer.step()
                        self.steps += 1
                    else:
                        logger.warning("non-finite gradient norm %s; step skipped", float(norm))
        finally:
            self.model.eval()
            self.optimizer.zero_grad(set_to_none=True)
        iterations = cfg.num_iterations
        metrics.update(
            loss=sums["loss"] / iterations,
            clip_fraction=sums["clipped"] / (total_tokens * iterations),
            ratio_mean=sums["ratio"] / (total_tokens * iterations),
            kl=sums["kl"] / (total_tokens * iterations),
            grad_norm=sums["grad_norm"] / iterations,
            tokens=total_tokens,
            seconds=time.perf_counter() - start,
        )
        return metrics

    # ------------------------------------------------------------------ checkpoints

    def save(self, path: str | Path) -> None:
        """Weights (or adapter), optimizer and random state into directory ``path``."""
        from safetensors.torch import save_file, save_model

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.adapter_name is None:
            save_model(self.model, str(path / "model.safetensors"))  # handles tied weights
        else:
            from peft import get_peft_model_state_dict

            adapter = get_peft_model_state_dict(self.model, adapter_name=self.adapter_name)
            weights = {k: v.detach().contiguous() for k, v in adapter.items()}
            save_file(weights, str(path / "adapter_model.safetensors"))
            self.model.peft_config[self.adapter_name].save_pretrained(str(path))
        state = {
            "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.state_dict(),
            "joint_rng": None if self.joint_actor is None else self.joint_actor.rng.state_dict(),
            "steps": self.steps,
            "system_prompt": self.system_prompt,
        }
        torch.save(state, path / "state.pt")
        config = {k: (list(v) if isinstance(v, tuple) else v)
                  for k, v in dataclasses.asdict(self.config).items()}
        (path / "grpo_config.json").write_text(json.dumps(config, indent=2))

    def load(self, path: str | Path) -> None:
        """Restore what :meth:`save` wrote; the agent must have the same model and config."""
        from safetensors.torch import load_file, load_model

        path = Path(path)
        if self.adapter_name is None:
            if not (path / "model.safetensors").is_file():
                raise FileNotFoundError(f"{path} holds no model.safetensors (a LoRA checkpoint?)")
            load_model(self.model, str(path / "model.safetensors"), device=str(self.device))
        else:
            if not (path / "adapter_model.safetensors").is_file():
                raise FileNotFoundError(f"{path} holds no adapter_model.safetensors")
            from peft import set_peft_model_state_dict

            weights = load_file(str(path / "adapter_model.safetensors"), device=str(self.device))
            set_peft_model_state_dict(self.model, weights, adapter_name=self.adapter_name)
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.load_state_dict(state["rng"])
        if self.joint_actor is not None and state.get("joint_rng") is not None:
            self.joint_actor.rng.load_state_dict(state["joint_rng"])
        self.steps = int(state["steps"])
        self.system_prompt = state["system_prompt"]


def _attach_adapter(model: torch.nn.Module, name: str, config: GRPOConfig) -> torch.nn.Module:
    """Add LoRA adapter ``name``: wraps a plain model, or adds to an existing peft model."""
    from peft import LoraConfig, PeftModel, get_peft_model

    targets = config.lora_target_modules
    lora = LoraConfig(
        r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
        target_modules=targets if targets == "all-linear" else list(targets),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft reads transformers' deprecated `is_gradient_checkpointing`: noise, not news.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing",
                                category=FutureWarning)
        if isinstance(model, PeftModel):
            model.add_adapter(name, lora)
            return model
        # autocast_adapter_dtype keeps adapter weights float32 on a bf16 base (precision note).
        return get_peft_model(model, lora, adapter_name=name, autocast_adapter_dtype=True)
