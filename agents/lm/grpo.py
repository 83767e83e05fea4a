"""The reference SAPO node: a language model that acts by sampling and learns with GRPO.

``GRPOAgent(model, tokenizer=None, config=GRPOConfig(), num_external=4, seed=0)`` plays one
node of a ``sapo_env`` swarm:

``act(observation)``
    builds one prompt per question with the tokenizer's chat template (the observation's
    system prompt, the question as the user turn), samples ``completions_per_question``
    completions for every question in one batched ``generate`` call (left padding), decodes
    them without special tokens and returns them with ``num_external``, the J of the node's
    next round (the observation's ``num_external`` is the J in force now). To choose J
    adaptively, give ``sapo_env.runtime.run`` a ratio policy for the node (``agents.ratio``).
    With ``GRPOConfig.share_logprobs`` the action also carries each completion's sampled
    token ids (EOS included where it ended) and their log-probabilities under the policy
    that sampled them, at the sampling temperature (one forward pass without gradient), for
    receivers' ``off_policy_correction`` (:mod:`agents.lm.off_policy`).
``learn(batch)``
    a GRPO step on the training set the env assembled. Local and external groups are treated
    alike: each completion is re-encoded as text with this agent's tokenizer, under the chat
    prompt of the group's own system prompt, with EOS only where the text ended within
    ``max_new_tokens`` (:mod:`agents.lm.encoding`). Its token log-probabilities under the
    current policy serve as the "old" ones (detached), as the paper does for external text
    "however unlikely", and :func:`agents.lm.loss.grpo_loss` is minimised with the advantages
    the env computed. As in genrl and TRL, the loss divides by every completion token (or
    completion) of the batch, zero-advantage groups included; those need no forward pass
    when ``beta`` is 0. ``GRPOConfig.count_zero_advantage_groups`` and
    ``mask_truncated_completions`` change what counts. Returns ``loss``, ``clip_fraction``,
    ``ratio_mean``, ``kl`` (the last three averaged over the tokens trained on), ``grad_norm``
    (before clipping), ``tokens`` (completion tokens trained on), ``normalizer`` (the loss's
    denominator), ``truncated`` (completions that did not end), ``groups`` (trained on),
    ``skipped_groups`` (no forward pass), ``rejected_completions`` (external completions that
    ``min_external_logprob`` dropped, :mod:`agents.lm.received_logprob`), ``seconds``,
    ``generated_tokens`` (completion tokens sampled in its actions since the previous
    ``learn``, EOS included; none inside ``evaluation_scope``) and ``optimizer_steps``
    (``num_iterations``; 0 with nothing to train on; less each step skipped for a non-finite
    gradient).
``save(path)`` / ``load(path)``
    weights (or the LoRA adapter), optimizer state and random state: a loaded agent continues
    exactly as the saved one would have. ``save(path, optimizer=False)`` is lighter and not
    exact (sizes: :mod:`agents.lm.weights`).

``model`` is a Hugging Face id or path, a loaded ``PreTrainedModel`` (the agent then owns it
and trains it in place) or ``"smollm2-135m"`` (offline, see :mod:`agents.lm.models`). Many agents
sharing one frozen base with an adapter each: :func:`agents.lora_swarm`, which builds them
with :meth:`GRPOAgent.with_adapter`.

Precision: forward passes run under ``torch.autocast`` in the compute dtype (bfloat16 on
cuda by default) while trainable weights stay float32, because Adam updates at a learning
rate of 1e-6 are below bfloat16's resolution and would vanish. A LoRA base is frozen, so it
is stored in the compute dtype.

Randomness: each agent owns its torch random state (:class:`agents.lm.torch_rng.TorchRNG`,
seeded from ``seed`` through a ``numpy.random.SeedSequence``) and swaps it in only around its
own sampling and training, so agents do not perturb each other or the global generators:
same seed, same completions.

Example::

    import sapo_env.runtime
    from agents import GRPOAgent, GRPOConfig

    env = sapo_env.parallel_env(n=2)
    config = GRPOConfig(max_new_tokens=64)
    agents = [GRPOAgent("smollm2-135m", config=config, seed=s) for s in range(2)]
    sapo_env.runtime.run(env, agents, rounds=5)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agents.lm.encoding import EncodedGroup, MicroBatch, encode_group
from agents.lm.generation import (
    base_model,
    chat_prompt_ids,
    eos_token_ids,
    forward_accepts,
    generate_completions,
    sampled_token_count,
)
from agents.lm.grpo_config import GRPOConfig
from agents.lm.grpo_update import GRPOUpdate
from agents.lm.loss import token_logprobs
from agents.lm.models import (
    attach_lora_adapter,
    autocast,
    claim_model,
    enable_gradient_checkpointing,
    load_model,
    resolve_device,
    resolve_dtype,
)
from agents.lm.received_logprob import sampled_token_logprobs
from agents.lm.torch_rng import TorchRNG
from agents.lm.weights import load_weights, save_weights
from sapo_env.validation import check_int

__all__ = ["GRPOAgent", "GRPOConfig"]

logger = logging.getLogger(__name__)


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
            num_external=num_external, seed=seed,
        )

    @classmethod
    def with_adapter(
        cls,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        config: GRPOConfig,
        adapter_name: str,
        *,
        num_external: int = 4,
        seed: int | np.random.SeedSequence = 0,
    ) -> GRPOAgent:
        """An agent that trains its own LoRA adapter ``adapter_name`` on a shared, loaded base.

        ``model`` is a ``PreTrainedModel`` already on ``config.device`` (a frozen base may be
        stored in the compute dtype), or the peft model that earlier calls returned as
        ``agent.model``: the new adapter is added to it, so many agents share one base in
        memory. The caller owns the base (:func:`agents.lm.models.claim_model` it); each agent
        trains only its adapter. ``config.use_lora`` must be True. :func:`agents.lora_swarm`
        is the usual way in.
        """
        if not config.use_lora:
            raise ValueError("with_adapter needs config.use_lora=True, got use_lora=False")
        agent = cls.__new__(cls)
        agent._setup(model, tokenizer, config, adapter_name=adapter_name,
                     num_external=num_external, seed=seed)
        return agent

    def _setup(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        config: GRPOConfig,
        *,
        adapter_name: str | None,
        num_external: int,
        seed: int | np.random.SeedSequence,
    ) -> None:
        check_int("num_external", num_external, 0)
        device = resolve_device(config.device)
        if config.torch_threads is not None and device.type == "cpu":
            torch.set_num_threads(config.torch_threads)
        self.config = config
        self.tokenizer = tokenizer
        self.num_external = int(num_external)
        self.device = device
        self.dtype = resolve_dtype(config.dtype, device)
        self.adapter_name = adapter_name
        self.rng = TorchRNG(seed, device)
        self.steps = 0
        self._warned_budget = False
        self._sampled_tokens = 0  # since the last learn: its generated_tokens

        if adapter_name is not None:
            with self.rng.scope():  # adapter init draws random numbers
                model = attach_lora_adapter(
                    model, adapter_name, rank=config.lora_rank, alpha=config.lora_alpha,
                    dropout=config.lora_dropout, target_modules=config.lora_target_modules,
                )
        self.model = model
        self.eos_ids = eos_token_ids(base_model(model), tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_ids[0]
        base = base_model(model)
        if config.gradient_checkpointing:
            enable_gradient_checkpointing(base)
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
            reference = copy.deepcopy(model).to(self.dtype).eval()
            reference.requires_grad_(False)
            self._reference = reference
        model.eval()

    # ------------------------------------------------------------------ acting

    def prompt_ids(self, question: str, system_prompt: str) -> list[int]:
        """This agent's encoding of a question under a system prompt (the chat template's)."""
        return chat_prompt_ids(self.tokenizer, system_prompt, question)

    def _activate(self) -> None:
        if self.adapter_name is not None:
            self.model.set_adapter(self.adapter_name)

    def act(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        """Completions for the observation's questions and the J to ask for; see module doc."""
        prompts = self.build_prompts(observation)
        self._activate()
        sampled = generate_completions(
            self.model, prompts, config=self.config, pad_id=self.pad_id, eos_ids=self.eos_ids,
            device=self.device, dtype=self.dtype, rng=self.rng,
        )
        ids = [s.ids for s in sampled]
        if not self.config.share_logprobs:
            return self.build_action(observation, ids)
        tokens = [s.ids + ([] if s.stop is None else [s.stop]) for s in sampled]
        logprobs = sampled_token_logprobs(self, prompts, tokens)
        return self.build_action(observation, ids, (tokens, logprobs))

    @contextlib.contextmanager
    def evaluation_scope(self) -> Iterator[None]:
        """Inside, ``act`` leaves no trace: the random state is put back afterwards, so
        evaluating in the middle of a run (``sapo_env.runtime.metrics``' held-out evaluation enters
        this scope) does not change the run, nor the next ``learn``'s ``generated_tokens``."""
        state, sampled = self.rng.state_dict(), self._sampled_tokens
        try:
            yield
        finally:
            self.rng.load_state_dict(state)
            self._sampled_tokens = sampled

    def build_prompts(self, observation: Mapping[str, Any]) -> list[list[int]]:
        """The rows to generate: each question's prompt, L times, in question order."""
        system = observation["system_prompt"]
        copies = int(observation["completions_per_question"])
        prompts = [self.prompt_ids(q["prompt"], system) for q in observation["questions"]]
        return [p for p in prompts for _ in range(copies)]

    def build_action(self, observation: Mapping[str, Any], ids: Sequence[Sequence[int]],
                     shared: tuple[Sequence[Sequence[int]], Sequence[Sequence[float]]] | None
                     = None) -> dict:
        """Decode generated rows (from :meth:`build_prompts`) into the env's action.

        With ``share_logprobs``, ``shared`` is each row's sampled tokens (EOS included where
        it ended) and their log-probs; None computes them here
        (:func:`agents.lm.received_logprob.sampled_token_logprobs`), taking a row shorter than
        ``max_new_tokens`` to have ended with this agent's EOS. Every action is built here,
        so the rows' tokens are counted here (:meth:`take_sampled_tokens`)."""
        self._sampled_tokens += sampled_token_count(ids, self.config.max_new_tokens)
        copies = int(observation["completions_per_question"])
        texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)

        def per_question(rows: Sequence[Any]) -> tuple:
            return tuple(tuple(rows[q * copies : (q + 1) * copies])
                         for q in range(len(rows) // copies))

        action = {"completions": per_question(texts),
                  "num_external": self.choose_num_external(observation)}
        if self.config.share_logprobs:
            if shared is None:
                limit = self.config.max_new_tokens
                tokens = [list(r) + ([self.eos_ids[0]] if len(r) < limit else []) for r in ids]
                prompts = self.build_prompts(observation)
                shared = (tokens, sampled_token_logprobs(self, prompts, tokens))
            tokens, logprobs = shared
            action["token_ids"] = per_question([list(map(int, t)) for t in tokens])
            action["logprobs"] = per_question([list(map(float, lp)) for lp in logprobs])
        return action

    def take_sampled_tokens(self) -> int:
        """The completion tokens sampled in the actions built since the last call (see
        ``build_action``), and start counting afresh: ``GRPOUpdate.begin`` takes them as the
        update's ``generated_tokens``."""
        sampled, self._sampled_tokens = self._sampled_tokens, 0
        return sampled

    def choose_num_external(self, observation: Mapping[str, Any]) -> int:
        """The fixed J, clamped to [0, train_budget]."""
        wanted = self.num_external
        budget = int(observation["train_budget"])
        chosen = min(max(wanted, 0), budget)
        if chosen != wanted and not self._warned_budget:
            logger.warning("num_external %d is outside [0, train_budget=%d]; using %d",
                           wanted, budget, chosen)
            self._warned_budget = True
        return chosen

    # ------------------------------------------------------------------ learning

    def encode_group(self, group: Mapping[str, Any]) -> EncodedGroup:
        """Prompt ids, completion ids (+ EOS where ended) and ended flags: what ``learn`` sees."""
        return encode_group(self.tokenizer, group, max_new_tokens=self.config.max_new_tokens,
                            eos_id=self.eos_ids[0])

    def policy_logprobs(self, batch: MicroBatch) -> torch.Tensor:
        """``(S, C)``: the log-probability of each completion token of ``batch``
        (``agents.lm.encoding.micro_batches``) under this agent's current policy (its adapter
        active), at the sampling temperature; with gradients unless called under
        ``torch.no_grad``. Padding positions hold values to be masked out
        (``batch.completion_mask``)."""
        self._activate()
        return self._token_logprobs(self.model, batch)

    def _token_logprobs(self, model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
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

    def _reference_logprobs(self, batch: MicroBatch) -> torch.Tensor:
        with torch.no_grad():
            if self._reference is not None:
                return self._token_logprobs(self._reference, batch)
            with self.model.disable_adapter():
                return self._token_logprobs(self.model, batch)

    def learn(self, batch: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """One GRPO update (``num_iterations`` optimizer steps) on the env's training set."""
        update = GRPOUpdate.begin(self, batch)
        if not update.micro:
            return update.finish()
        self._activate()
        self.model.train()
        try:
            with self.rng.scope():  # LoRA dropout, if any, draws from the agent's stream
                for iteration in range(self.config.num_iterations):
                    self.optimizer.zero_grad(set_to_none=True)
                    for k, mb in enumerate(update.micro):
                        logp = self._token_logprobs(self.model, mb)
                        update.loss(k, logp, iteration, self._reference_logprobs).backward()
                    update.step()
        finally:
            self.model.eval()
            self.optimizer.zero_grad(set_to_none=True)
        return update.finish()

    # ------------------------------------------------------------------ checkpoints

    def save(self, path: str | Path, optimizer: bool = True) -> None:
        """Weights (or adapter), random state and the optimizer's state into directory ``path``.

        ``optimizer=False`` leaves out Adam's moments (twice the trainable weights, two thirds
        of a full node's checkpoint; :mod:`agents.lm.weights`): a lighter save whose ``load``
        restarts the moments from zero, so training does not resume bit for bit."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        # A LoRA swarm generates from a joint stream; a batched swarm (rng None) does not.
        joint_rng = None if self.joint_actor is None else self.joint_actor.rng
        save_weights(self.model, self.adapter_name, path)
        state = {
            "optimizer": self.optimizer.state_dict() if optimizer else None,
            "rng": self.rng.state_dict(),
            "joint_rng": None if joint_rng is None else joint_rng.state_dict(),
            "steps": self.steps,
        }
        torch.save(state, path / "state.pt")
        config = {k: (list(v) if isinstance(v, tuple) else v)
                  for k, v in dataclasses.asdict(self.config).items()}
        (path / "grpo_config.json").write_text(json.dumps(config, indent=2))

    def load(self, path: str | Path) -> None:
        """Restore what :meth:`save` wrote; the agent must have the same model and config."""
        path = Path(path)
        load_weights(self.model, self.adapter_name, path, self.device)
        # Checkpoints written before groups carried their system prompt also hold a
        # "system_prompt" entry; nothing reads it any more.
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
        if state["optimizer"] is None:  # a light save: Adam starts again from zero
            self.optimizer.state.clear()
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        self.rng.load_state_dict(state["rng"])
        if self.joint_actor is not None and self.joint_actor.rng is not None \
                and state.get("joint_rng") is not None:
            self.joint_actor.rng.load_state_dict(state["joint_rng"])
        self.steps = int(state["steps"])
