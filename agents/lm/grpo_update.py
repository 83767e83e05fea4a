"""One GRPO update of one agent, in the steps every caller takes: begin, loss, step, finish.

``GRPOAgent.learn`` runs them for one agent; a batched swarm (:mod:`agents.tiny.batched`) runs
them for many agents whose forward passes it computes in one call. Both therefore use the same
training set, loss, normaliser, clipping and optimizer step: one GRPO update in the project.

- :meth:`GRPOUpdate.begin` screens external completions (``min_external_logprob``), re-encodes
  the batch with the agent's tokenizer (:func:`agents.lm.encoding.training_set`) and packs the
  rows into micro-batches.
- :meth:`GRPOUpdate.loss` is :func:`agents.lm.loss.grpo_loss` of micro-batch ``k`` given the
  token log-probabilities the caller computed under the current weights; in the first
  iteration they are also kept, detached, as the "old" policy's.
  With ``off_policy_correction`` set, the first iteration also turns the rows' sender
  log-probs into per-token weights (:func:`agents.lm.off_policy.correction_weights`), kept for
  the later iterations.
- :meth:`GRPOUpdate.step` clips the gradient norm and takes the optimizer step (skipped, and
  logged, when the norm is not finite).
- :meth:`GRPOUpdate.finish` returns the metrics ``learn`` reports, among them what the
  node's round cost: ``generated_tokens`` (taken from the agent at ``begin``: the tokens it
  sampled since its last update) and ``optimizer_steps`` (the steps ``step`` took).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agents.lm.encoding import MicroBatch, TrainingSet, micro_batches, training_set
from agents.lm.loss import grpo_loss
from agents.lm.off_policy import correction_weights, graft_gate
from agents.lm.received_logprob import screen_external

logger = logging.getLogger(__name__)


@dataclass
class GRPOUpdate:
    """The state of one agent's update between its steps; see the module docstring."""

    agent: Any  #: the GRPOAgent being updated
    data: TrainingSet
    micro: list[MicroBatch]
    metrics: dict[str, float]
    start: float
    old: list[torch.Tensor] = field(default_factory=list)
    reference: list[torch.Tensor | None] = field(default_factory=list)
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("loss", "clipped", "ratio", "kl", "grad_norm"), 0.0))
    weights: list[torch.Tensor | None] = field(default_factory=list)

    @classmethod
    def begin(cls, agent: Any, batch: Sequence[Mapping[str, Any]],
              micro_batch_size: int | None = None) -> GRPOUpdate:
        """Encode ``batch`` for ``agent``; ``micro_batch_size`` None: the agent's config's."""
        start = time.perf_counter()
        cfg = agent.config
        batch, rejected = screen_external(agent, batch)  # min_external_logprob, when set
        data = training_set(batch, agent.encode_group, cfg)
        trained_tokens = float(sum(len(row.completion) for row in data.rows))
        metrics = {
            "loss": 0.0, "clip_fraction": 0.0, "ratio_mean": 1.0, "kl": 0.0, "grad_norm": 0.0,
            "tokens": trained_tokens,
            "normalizer": float(data.tokens if cfg.loss_normalization == "token"
                                else data.sequences),
            "truncated": float(data.truncated), "groups": float(data.groups),
            "skipped_groups": float(len(batch) - data.groups), "seconds": 0.0,
            "rejected_completions": float(rejected),
            "generated_tokens": float(agent.take_sampled_tokens()), "optimizer_steps": 0.0,
        }
        if cfg.off_policy_correction != "none":
            metrics.update(_OFF_POLICY_METRICS, off_policy_groups=float(data.corrected_groups),
                           off_policy_uncorrected_groups=float(data.uncorrected_groups))
        if data.rescue_groups:
            metrics.update(_RESCUE_METRICS, rescue_groups=float(data.rescue_groups),
                           rescue_ungated_groups=float(data.rescue_ungated_groups))
        size = micro_batch_size or cfg.micro_batch_size
        micro = micro_batches(data.rows, size, agent.pad_id, agent.device) if data.rows else []
        return cls(agent, data, micro, metrics, start)

    def loss(self, k: int, logp: torch.Tensor, iteration: int,
             reference_logprobs: Callable[[MicroBatch], torch.Tensor] | None = None
             ) -> torch.Tensor:
        """The loss of micro-batch ``k`` given its log-probabilities ``logp`` ``(S, C)``.

        ``reference_logprobs(micro_batch)`` gives the reference policy's, needed when
        ``beta`` > 0 (called once per micro-batch, in the first iteration)."""
        cfg = self.agent.config
        mb = self.micro[k]
        if iteration == 0:
            # All micro-batches of the first pass see the same weights (one step per pass),
            # so these are the sampling policy's log-probs.
            self.old.append(logp.detach())
            if cfg.beta > 0:
                if reference_logprobs is None:
                    raise ValueError(f"beta={cfg.beta} > 0 needs reference log-probabilities")
                self.reference.append(reference_logprobs(mb))
            else:
                self.reference.append(None)
            self.weights.append(self._correction(mb, self.old[k]))
        out = grpo_loss(
            logp, self.old[k], mb.advantages, mb.completion_mask,
            epsilon_low=cfg.epsilon_low, epsilon_high=cfg.epsilon_high,
            normalization=cfg.loss_normalization, beta=cfg.beta, ref_logp=self.reference[k],
            total_tokens=self.data.tokens, total_sequences=self.data.sequences,
            token_weights=self.weights[k],
        )
        self.sums["loss"] += float(out.loss.detach())
        self.sums["clipped"] += float(out.clipped_tokens)
        self.sums["ratio"] += float(out.ratio_sum)
        self.sums["kl"] += float(out.kl_sum)
        return out.loss

    def _correction(self, mb: MicroBatch, old: torch.Tensor) -> torch.Tensor | None:
        """The per-token weights of micro-batch ``mb``: the off-policy correction's, times the
        rescue gate's on rescue rows (None: 1 everywhere)."""
        cfg = self.agent.config
        if mb.sender_logprobs is None:
            return None
        weights = None
        if cfg.off_policy_correction != "none":
            c = correction_weights(
                cfg.off_policy_correction, old, mb.sender_logprobs, mb.advantages,
                mb.completion_mask, mb.corrected, cap=cfg.tis_cap,
                threshold=cfg.ftis_kl_threshold, mean_threshold=cfg.ftis_mean_threshold,
                statistic=cfg.ftis_statistic)
            m = self.metrics
            m["off_policy_tokens"] += c.tokens
            m["off_policy_weight_sum"] += c.weight_sum
            m["off_policy_truncated_tokens"] += c.truncated
            m["off_policy_filtered"] += c.filtered
            m["off_policy_far_sum"] += c.far_sum
            m["off_policy_far_mean"] += c.far_mean
            weights = c.weights
        gated = mb.rescue & mb.corrected
        if cfg.rescue_gate == "none" or not bool(gated.any()):
            return weights
        gate = torch.where(gated, graft_gate(old, mb.sender_logprobs, mb.completion_mask,
                                             cfg.rescue_gate_threshold), 1.0)
        self.metrics["rescue_gated_completions"] += int(gated.sum())
        self.metrics["rescue_gate_sum"] += float(gate[gated].sum())
        self.metrics["rescue_gate_zero"] += int((gate[gated] == 0).sum())
        gate = gate.to(old.dtype)[:, None].expand_as(old)
        return gate if weights is None else weights * gate

    def step(self) -> None:
        """Clip the gradient norm to ``max_grad_norm`` and step the agent's optimizer."""
        agent = self.agent
        norm = torch.nn.utils.clip_grad_norm_(
            agent.trainable_parameters, agent.config.max_grad_norm or math.inf
        )
        self.sums["grad_norm"] += float(norm)
        if torch.isfinite(norm):
            agent.optimizer.step()
            agent.steps += 1
            self.metrics["optimizer_steps"] += 1.0
        else:
            logger.warning("non-finite gradient norm %s; step skipped", float(norm))

    def finish(self) -> dict[str, float]:
        """The metrics of the update (see ``GRPOAgent.learn``)."""
        metrics = dict(self.metrics)
        if self.micro:
            iterations = self.agent.config.num_iterations
            per_token = metrics["tokens"] * iterations
            metrics.update(
                loss=self.sums["loss"] / iterations,
                clip_fraction=self.sums["clipped"] / per_token,
                ratio_mean=self.sums["ratio"] / per_token,
                kl=self.sums["kl"] / per_token,
                grad_norm=self.sums["grad_norm"] / iterations,
            )
        if "rescue_gate_sum" in metrics:
            gated, total = metrics.pop("rescue_gated_completions"), metrics.pop("rescue_gate_sum")
            metrics.update(rescue_gated_completions=gated,
                           rescue_gate_mean=total / gated if gated else 1.0)
        if "off_policy_tokens" in metrics:
            tokens = metrics.pop("off_policy_tokens")
            total = metrics.pop("off_policy_weight_sum")
            truncated = metrics.pop("off_policy_truncated_tokens")
            metrics.update(off_policy_tokens=tokens,
                           off_policy_weight_mean=total / tokens if tokens else 1.0,
                           off_policy_truncated_fraction=truncated / tokens if tokens else 0.0)
        metrics["seconds"] = time.perf_counter() - self.start
        return metrics


# Sums kept while the first iteration runs; finish() turns them into the reported metrics.
_OFF_POLICY_METRICS = dict.fromkeys(("off_policy_tokens", "off_policy_weight_sum",
                                     "off_policy_truncated_tokens", "off_policy_filtered",
                                     "off_policy_far_sum", "off_policy_far_mean"), 0.0)
_RESCUE_METRICS = dict.fromkeys(("rescue_gated_completions", "rescue_gate_sum",
                                 "rescue_gate_zero"), 0.0)
