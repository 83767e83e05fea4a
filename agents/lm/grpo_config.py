"""``GRPOConfig``: the hyperparameters of a :class:`~agents.lm.grpo.GRPOAgent`.

Every field is documented beside it (its meaning, the reference behind its default and how it
interacts with the others), grouped as in docs/language-models.md: generation, objective, optimizer,
memory, LoRA, hardware. Defaults are the SAPO paper's or its reference code's (genrl, with
TRL's ``GRPOTrainer`` where genrl is silent). Invalid values raise ``ValueError`` naming the
field and the value.

Example::

    >>> from agents.lm.grpo_config import GRPOConfig
    >>> GRPOConfig(max_new_tokens=64).epsilon_high
    0.28
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agents.lm.loss import NORMALIZATIONS, LossNormalization
from agents.lm.models import DTYPE_NAMES, DtypeSpec
from agents.lm.off_policy import (
    CORRECTIONS,
    FTIS_STATISTICS,
    GATES,
    FTISStatistic,
    OffPolicyCorrection,
    RescueGate,
)
from sapo_env.validation import check_int


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
    on, EOS included (longer external completions are cut there, which bounds memory, and
    count as not ended: see ``mask_truncated_completions``)."""
    generation_batch_size: int | None = None
    """Most sequences per ``generate`` call (memory bound); None: all B x L at once."""
    share_logprobs: bool = False
    """Send, with each completion, the log-probability of each token this node sampled (at
    ``temperature``, EOS included where it ended) and the tokens' ids: the action's optional
    ``logprobs`` and ``token_ids`` (:mod:`sapo_env.sender_logprobs`), which a receiver's
    ``off_policy_correction`` reads. They are ``log_softmax(logits / temperature)`` of the
    sampling weights, which is the sampling distribution itself when ``top_k`` and ``top_p``
    are off (the defaults). ``GRPOAgent.act`` pays one more forward pass without gradient per
    round for them (the batched tiny swarm reads them off its sampling step). Off by default:
    the paper's packets are plain text."""

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
    reference implementation); ``"sequence"``: mean per completion, then mean (GRPO). Which
    completions count is set by the next two fields."""
    count_zero_advantage_groups: bool = True
    """Whether groups whose advantages are all zero count in the loss's normaliser: their
    completion tokens under ``"token"``, their completions under ``"sequence"``. True is the
    reference: genrl divides by every completion token of the batch, and TRL's ``"dapo"``,
    ``"bnpo"`` and ``"grpo"`` losses count every completion alike. Such a group adds nothing to the
    gradient but dilutes the step: one informative and one zero-advantage group of equal lengths
    move half as far as the informative group alone, which is part of why filtering the external
    pool pays in the paper. False leaves them out of the step entirely, so the step size does not
    depend on how many groups were uninformative. Either way they get no forward pass when ``beta``
    is 0 (their loss is zero whatever the weights); with ``beta > 0`` and True they are trained for
    their KL term, as in the reference."""
    mask_truncated_completions: bool = False
    """Leave completions that never ended out of the loss and of its token normaliser (TRL's
    option of the same name, default False there too; DAPO's overlong filtering; genrl has
    none): a cut answer's reward says little about its tokens. A completion ended when its
    re-encoding with this agent's tokenizer, plus EOS, fits in ``max_new_tokens``; ``learn``
    appends EOS only to those, and trains a cut one, when not masked, on its first
    ``max_new_tokens`` tokens without EOS (:mod:`agents.lm.encoding`). Under ``"sequence"`` a
    masked completion still counts as a sequence with zero loss, as in TRL. The metric
    ``truncated`` says how many completions of a batch were cut."""
    num_iterations: int = 1
    """Optimizer steps on each batch (GRPO's mu). With 1 the ratio is exactly 1 and clipping
    never binds; more reuses the batch and makes the clip matter."""
    off_policy_correction: OffPolicyCorrection = "none"
    """How external groups, sampled by another node's policy, are weighted
    (:mod:`agents.lm.off_policy`, where each choice is stated against its source):
    ``"none"``: ratio 1, every token as if this node had sampled it (the paper and genrl; the
    default, for fidelity); ``"tis"``: truncated importance sampling against the sender's
    log-probs, each external token's loss times ``min(exp(old_logp - sender_logp), tis_cap)``
    (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
    training"; TRL's ``vllm_importance_sampling_correction``); ``"ftis"``: the same, and
    F-TIS's filter (arXiv 2605.22537) drops external completions with a negative advantage
    whose sender is far from this policy (``ftis_kl_threshold``). A group is corrected only
    when its packet carries log-probs and token ids and this agent's re-encoding of every
    completion gives exactly the sender's token ids (a shared tokenizer and
    ``max_new_tokens``); any other external group falls back to ratio 1, counted by the
    metric ``off_policy_uncorrected_groups``. Own groups always have ratio 1."""
    tis_cap: float = 2.0
    """C, the truncation of the importance weight: weights above it are cut to it, which
    bounds how much one received token can weigh (and what a sender lying about its
    log-probs can do: at most C times its weight under ratio 1). 2.0: the C of Yao et al.'s
    example, of F-TIS and of verl's ``tis_imp_ratio_cap`` (docs/provenance.md)."""
    ftis_kl_threshold: float = 50.0
    """g of the F-TIS filter: a negative-advantage external completion is dropped when the sender
    found it more likely than this policy does by more than g nats (the sum over its tokens of
    ``sender_logp - old_logp``). 50: F-TIS's default g (docs/provenance.md). Used by ``"ftis"``
    with ``ftis_statistic="sum"``."""
    ftis_statistic: FTISStatistic = "sum"
    """Which divergence the F-TIS filter compares: ``"sum"`` over the completion's tokens
    against ``ftis_kl_threshold`` (the reading of F-TIS's per-sequence KL), or ``"mean"`` per
    token against ``ftis_mean_threshold`` (length-normalised, as TRL's
    ``off_policy_mask_threshold``). With short completions the summed 50 nats almost never
    binds (13 tokens need 3.8 nats each); the mean does not depend on length. Whichever is
    used, the metrics ``off_policy_far_sum`` and ``off_policy_far_mean`` count what each would
    drop."""
    ftis_mean_threshold: float = 0.5
    """The per-token threshold of ``ftis_statistic="mean"``, in nats per token (about TRL's
    ``off_policy_mask_threshold`` scale)."""
    rescue_gate: RescueGate = "none"
    """How much each completion of a rescue group counts (a peer's group put in place of an
    own all-fail group: ``sapo_env.SwarmConfig.rescue``): ``"none"``, fully (times any
    ``off_policy_correction`` weight, as every external group); ``"graft"``, times GRAFT's
    compatibility gate :func:`agents.lm.off_policy.graft_gate` (``rescue_gate_threshold``),
    which needs the sender's log-probs (``share_logprobs`` on the sending nodes; a group
    without usable ones is trained ungated, counted in ``rescue_ungated_groups``)."""
    rescue_gate_threshold: float = 0.8
    """The gate's cut: a rescue completion whose compatibility (geometric-mean per-token
    likelihood ratio, receiver to sender) is at or below it gets weight 0 (GRAFT's 0.8)."""
    min_external_logprob: float | None = None
    """Drop an external completion whose mean token log-probability under this node's current
    policy is below this, before the step (None: keep all; own groups are never checked). The
    defense of "Hail to the Thief" (arXiv 2511.09780; docs/provenance.md, "Poisoned completions")
    against poisoned completions, which are correct but carry an injected behaviour, for a swarm
    whose nodes all train the same model. Costs a forward pass per external completion; in a
    heterogeneous swarm it drops honest text from other models too. No recommended value: measure
    what your own samples score (:func:`agents.lm.received_logprob.completion_logprobs`) and stay
    below it. Off by default."""

    # --- optimizer (Adam) ---
    learning_rate: float = 1e-6
    """Adam step size. 1e-6: the reference implementation's value and TRL's GRPO default,
    stable for 0.5B full fine-tuning; LoRA usually wants 10-100x more."""
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
    """Recompute each layer's activations in the backward pass instead of keeping them: less
    peak memory for more ``learn`` time (both measured in BENCHMARKS.md, "LM agent"); for a
    small model the activations of a micro-batch can outweigh a LoRA node's whole state. On by
    default, as in TRL's ``GRPOConfig``; turn it off when memory is plentiful and ``learn``
    time matters."""

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
    On a CPU shared with other work, use 1: with more, torch's threads spin waiting for cores
    other processes hold, and a node's ``act`` can take many times longer. Leave it unset on
    an idle machine or a GPU."""

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, expected: str) -> None:
            if not ok:
                raise ValueError(f"{field} must be {expected}, got {getattr(self, field)!r}")

        need(self.temperature > 0, "temperature", "> 0")
        need(0 < self.top_p <= 1, "top_p", "in (0, 1]")
        check_int("top_k", self.top_k, 0)
        check_int("max_new_tokens", self.max_new_tokens, 1)
        if self.generation_batch_size is not None:
            check_int("generation_batch_size", self.generation_batch_size, 1)
        need(0 <= self.epsilon_low < 1, "epsilon_low", "in [0, 1)")
        need(self.epsilon_high >= 0, "epsilon_high", ">= 0")
        need(self.beta >= 0, "beta", ">= 0")
        need(self.loss_normalization in NORMALIZATIONS, "loss_normalization",
             f"one of {NORMALIZATIONS}")
        for flag in ("count_zero_advantage_groups", "mask_truncated_completions"):
            need(isinstance(getattr(self, flag), bool), flag, "a bool")
        check_int("num_iterations", self.num_iterations, 1)
        need(isinstance(self.share_logprobs, bool), "share_logprobs", "a bool")
        need(self.off_policy_correction in CORRECTIONS, "off_policy_correction",
             f"one of {CORRECTIONS}")
        need(isinstance(self.tis_cap, (int, float)) and not isinstance(self.tis_cap, bool)
             and 1 <= self.tis_cap < float("inf"), "tis_cap", "a finite number >= 1")
        need(isinstance(self.ftis_kl_threshold, (int, float))
             and not isinstance(self.ftis_kl_threshold, bool)
             and abs(self.ftis_kl_threshold) < float("inf"), "ftis_kl_threshold",
             "a finite number")
        need(self.ftis_statistic in FTIS_STATISTICS, "ftis_statistic",
             f"one of {FTIS_STATISTICS}")
        need(self.rescue_gate in GATES, "rescue_gate", f"one of {GATES}")
        for name in ("ftis_mean_threshold", "rescue_gate_threshold"):
            value = getattr(self, name)
            need(isinstance(value, (int, float)) and not isinstance(value, bool)
                 and 0 <= value < float("inf"), name, "a finite number >= 0")
        need(self.min_external_logprob is None or (
            isinstance(self.min_external_logprob, (int, float))
            and not isinstance(self.min_external_logprob, bool)
            and self.min_external_logprob <= 0), "min_external_logprob",
             "None or a log-probability <= 0")
        need(self.learning_rate >= 0, "learning_rate", ">= 0")
        need(0 <= self.adam_beta1 < 1, "adam_beta1", "in [0, 1)")
        need(0 <= self.adam_beta2 < 1, "adam_beta2", "in [0, 1)")
        need(self.adam_epsilon > 0, "adam_epsilon", "> 0")
        need(self.weight_decay >= 0, "weight_decay", ">= 0")
        need(self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm",
             "None or > 0")
        check_int("micro_batch_size", self.micro_batch_size, 1)
        check_int("lora_rank", self.lora_rank, 1)
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
        if self.torch_threads is not None:
            check_int("torch_threads", self.torch_threads, 1)
