"""Tiny GRPO learners as an agent factory (``TinyLearners``: specialists, a common base,
partial specialists, one stronger peer) and their warm starts, cached on disk
(``warm_starts``). ``sapo_experiments.learners`` exports them beside the other factories."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from sapo_experiments.allocator import keep_freed_memory

CORRECTIONS = ("none", "tis", "ftis")
"""``agents.lm.off_policy.CORRECTIONS``, without importing torch to check a config."""
GATES = ("none", "graft")
"""``agents.lm.off_policy.GATES``, likewise."""
FTIS_STATISTICS = ("sum", "mean")
"""``agents.lm.off_policy.FTIS_STATISTICS``, likewise."""

OPERATORS = ("+", "-", "*", "/")
"""The operators of reasoning-gym's basic_arithmetic (``BasicArithmeticDatasetConfig.operators``,
each question's operator drawn uniformly from those given)."""


class SlowDtypeWarning(UserWarning):
    """A compute dtype that this machine runs far slower than float32."""


SLOW_BFLOAT16 = (
    "tiny learners in bfloat16 on a CPU without native bfloat16 instructions (AVX512-BF16 or "
    "AMX): its matrix products are emulated, about 10x slower than in float32 (measured on an "
    "AVX2 EPYC: 14 s against 1.4 s a round of 8 nodes). --tiny-dtype fast picks float32 here; "
    "another dtype plays other runs (and on the real ratio track, finds no tuning entry).")


def native_bfloat16() -> bool:
    """Whether this machine computes bfloat16 natively: a CUDA GPU, or a CPU with the
    instructions oneDNN checks for (AVX512-BF16, AMX)."""
    import torch

    if torch.cuda.is_available():
        return True
    try:
        return torch.backends.mkldnn.is_available() and bool(
            torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@dataclass(frozen=True)
class TinyLearners:
    """Tiny GRPO nodes (``agents.tiny``, ~1M parameters, on a CPU), as one batched swarm.

    Four kinds of swarm, each asked every question its nodes were warm-started on
    (:meth:`swarm_settings`):

    - Specialists (the default): node ``i`` is warm-started on ``specialties[i % k]`` alone
      (a supervised warm start to ``target_accuracy`` on that task, cached on disk), the same
      warm starts for every seed. A node that never answers a task right gets no signal on it
      from its own groups (all its completions score 0, so their advantages are 0), and only
      other nodes' groups can show it what a right answer looks like; but that text is the
      other kind's, which the node would rarely write.
    - A common base (``common_base=True``): every node of a run starts from one warm start
      trained on all the specialties together and stopped early at ``target_accuracy``, the
      paper's setting (one base model for every node). Each seed has its own, independently
      trained base (its warm-start seed is drawn from the run's agent seed), so seeds differ
      in their start, not only in their sampling. With a low target on a binary-reward task
      many of a node's own groups are all wrong, and another node's rare success is text the
      node could have written: the sparse-signal regime where sharing could pay.
    - Partial specialists on one task (``partial_specialists=("+", "-")``): node ``i`` is
      warm-started on basic_arithmetic with ``partial_specialists[i % k]`` as its only
      operator, to ``target_accuracy`` on that part, and the swarm is asked basic_arithmetic
      with all of them: a ``+`` node meets ``-`` questions it fails and a ``-`` peer solves,
      in the same answer format, and its peers' right answers are text of its own task. Each
      seed has its own bases, one per part, trained from the seed's warm-start seed.
    - One stronger peer (``common_base=True, strong_nodes=1, strong_target_accuracy=0.5``):
      a common base per seed, with nodes ``0 .. strong_nodes - 1`` starting from the same
      warm start trained further, to ``strong_target_accuracy``. Training is deterministic
      and stops at the first evaluation at or above the target, so the strong base is the
      weak one's training run continued: the two differ in stage only.

    Example::

        TinyLearners(partial_specialists=("+", "-"), target_accuracy=0.3)
        TinyLearners(common_base=True, target_accuracy=0.1, strong_nodes=1,
                     strong_target_accuracy=0.5)
    """

    specialties: tuple[str, ...] = ("basic_arithmetic", "spell_backward")
    """Tasks of ``agents.tiny.SPECIALIST_TASKS``, one per specialist kind, dealt round-robin."""
    learning_rate: float = 3e-4
    """GRPO's Adam step size (the tiny model's; the paper's 1e-6 was for 0.5B parameters)."""
    max_new_tokens: int = 12
    """Tokens sampled per completion (every answer of the specialist tasks fits)."""
    max_grad_norm: float | None = 1.0
    """Gradient-norm clipping of the GRPO step (None: off, as genrl's trainer)."""
    target_accuracy: float = 0.3
    """Each specialist's warm-start accuracy on its own task (a common base's on every
    specialty), where reached within ``warm_start_steps``."""
    common_base: bool = False
    """Start every node of a run from one warm start on every specialty, a different one per
    seed: the paper's setting, one base model for every node; False: specialists, the same
    for every seed."""
    hidden_sizes: tuple[int, ...] = (128,)
    """Widths of the nodes' models, dealt round-robin (node ``i``: ``hidden_sizes[i % k]``),
    each with heads of 32 and an MLP three times as wide (128: the default
    ``agents.tiny.TinyModelConfig``). Two or more make a swarm of mixed capacity, which needs
    ``common_base``: each width is warm-started on its own, from the seed's warm-start seed,
    to ``target_accuracy`` within ``warm_start_steps`` (a narrow model may stop short)."""

    partial_specialists: tuple[str, ...] = ()
    """Operators of basic_arithmetic (of ``OPERATORS``), one per kind of partial specialist,
    dealt round-robin: node ``i`` is warm-started on ``SPECIALIST_TASKS["basic_arithmetic"]``
    with ``partial_specialists[i % k]`` as its only operator, and the swarm's one task is
    basic_arithmetic with all of them (``specialties`` becomes ``("basic_arithmetic",)``:
    leave it at its default or give that). Each base is evaluated on its part and on the whole
    mix (its report's accuracies ``basic_arithmetic (+)`` and ``basic_arithmetic (+ -)``).
    Two or more distinct operators, one width, no ``common_base``; empty: off."""
    strong_nodes: int = 0
    """With ``common_base`` (and one width): nodes ``0 .. strong_nodes - 1`` start from the
    seed's base trained on to ``strong_target_accuracy``, the others from it at
    ``target_accuracy``; at least one node of a swarm must be weak. 0: off."""
    strong_target_accuracy: float | None = None
    """The strong nodes' warm-start target, above ``target_accuracy`` and at most 1; given
    exactly when ``strong_nodes`` is."""
    strong_warm_start_steps: int | None = None
    """Most supervised steps of the strong nodes' base (None: ``warm_start_steps``): a higher
    target takes longer (0.5 on basic_arithmetic is not reached in 600 steps)."""

    off_policy_correction: str = "none"
    """``GRPOConfig.off_policy_correction`` of every node: ``"none"`` (ratio 1, the paper's
    and genrl's), ``"tis"`` or ``"ftis"`` (weights against the sender's log-probs, which
    every node then sends: ``share_logprobs``); see ``agents.lm.off_policy``."""

    ftis_statistic: str = "sum"
    """``GRPOConfig.ftis_statistic`` of every node, with ``off_policy_correction="ftis"``:
    ``"sum"`` (50 nats over the completion) or ``"mean"`` (0.5 nats a token)."""
    rescue_gate: str = "none"
    """``GRPOConfig.rescue_gate`` of every node: how much the completions of a rescue group
    count (``SwarmConfig.rescue``); ``"graft"`` needs the sender's log-probs, which every
    node then sends."""

    warm_start_steps: int = 600
    """Most supervised steps of a warm start."""
    batched: bool = True
    """Act and learn as one batched swarm (``agents.tiny.batched_swarm``; the same result as
    node by node, faster)."""
    share_prompts: bool = True
    """The batched swarm's completions read their prompt's keys and values once
    (``batched_swarm(share_prompts=...)``, for less CPU a round: BENCHMARKS.md, "Prompt-prefix
    sharing"). Its results equal the copied path's to float rounding, not bit for bit: a run
    follows the copied one until a rounding difference flips a sampled token. False repeats the
    runs in records/tiny-reproduce/ made before it existed."""
    torch_threads: int | None = 1
    """torch threads of the process: models this small run fastest on one thread, and a
    sweep runs one run per core (None: torch's default)."""
    dtype: str = "auto"
    """Compute dtype of acting and learning: ``"auto"`` (``GRPOConfig``'s: float32 on a CPU,
    bfloat16 on a GPU), ``"float32"``, ``"bfloat16"``, or ``"fast"``: bfloat16 where this machine
    multiplies it natively (a GPU, or a CPU with AVX512-BF16 or AMX), else float32. In bfloat16 the
    matrix products run under autocast while weights and Adam's moments stay float32: a faster run
    (BENCHMARKS.md, "The main job"), but rounded otherwise than the float32 runs in
    records/tiny-reproduce/, so not the same runs. The warm starts are float32 whatever this
    says."""

    def __post_init__(self) -> None:
        for name, allowed in (("off_policy_correction", CORRECTIONS),
                              ("ftis_statistic", FTIS_STATISTICS), ("rescue_gate", GATES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        sizes = self.hidden_sizes
        if (not isinstance(sizes, (tuple, list)) or not sizes
                or any(isinstance(h, bool) or not isinstance(h, int) or h < 32 or h % 32
                       for h in sizes) or len(set(sizes)) != len(sizes)):
            raise ValueError(f"hidden_sizes must be distinct multiples of 32, got {sizes!r}")
        self._check_partial_specialists()
        self._check_strong_nodes()
        if len(sizes) > 1 and not self.common_base:
            raise ValueError(f"hidden_sizes {tuple(sizes)} mixes widths, which needs "
                             f"common_base=True (specialists of mixed widths would confound "
                             f"task and width)")
        object.__setattr__(self, "hidden_sizes", tuple(sizes))

    @property
    def shares_logprobs(self) -> bool:
        """Whether the nodes send their log-probs: an off-policy correction or the rescue
        gate reads them."""
        return self.off_policy_correction != "none" or self.rescue_gate != "none"

    def _check_partial_specialists(self) -> None:
        parts = self.partial_specialists
        if isinstance(parts, str) or not isinstance(parts, (tuple, list)):
            raise ValueError(f"partial_specialists must be a tuple of operators of "
                             f"{OPERATORS}, got {parts!r}")
        object.__setattr__(self, "partial_specialists", tuple(parts))
        if not parts:
            return
        if len(parts) < 2 or len(set(parts)) != len(parts) or any(
                p not in OPERATORS for p in parts):
            raise ValueError(f"partial_specialists must be two or more distinct operators of "
                             f"{OPERATORS}, got {tuple(parts)!r}")
        if self.common_base:
            raise ValueError(f"partial_specialists {tuple(parts)} trains a base per part and "
                             f"seed of its own: common_base must be False, got True")
        if len(self.hidden_sizes) > 1:
            raise ValueError(f"partial_specialists takes one width, got hidden_sizes "
                             f"{tuple(self.hidden_sizes)}")
        if tuple(self.specialties) not in (DEFAULT_SPECIALTIES, ("basic_arithmetic",)):
            raise ValueError(f"specialties does not apply to partial_specialists (their task "
                             f"is basic_arithmetic): leave it at {DEFAULT_SPECIALTIES}, got "
                             f"{tuple(self.specialties)}")
        object.__setattr__(self, "specialties", ("basic_arithmetic",))  # what the swarm asks

    def _check_strong_nodes(self) -> None:
        strong, target = self.strong_nodes, self.strong_target_accuracy
        if isinstance(strong, bool) or not isinstance(strong, int) or strong < 0:
            raise ValueError(f"strong_nodes must be an int >= 0, got {strong!r}")
        steps = self.strong_warm_start_steps
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                                  or steps < 1 or not strong):
            raise ValueError(f"strong_warm_start_steps must be None or an int >= 1 with "
                             f"strong_nodes > 0, got {steps!r} (strong_nodes={strong!r})")
        if not strong:
            if target is not None:
                raise ValueError(f"strong_target_accuracy ({target!r}) needs strong_nodes > 0, "
                                 f"got strong_nodes=0")
            return
        if not self.common_base or len(self.hidden_sizes) > 1:
            raise ValueError(f"strong_nodes ({strong}) needs common_base=True and one width, "
                             f"got common_base={self.common_base}, hidden_sizes "
                             f"{tuple(self.hidden_sizes)}")
        if (isinstance(target, bool) or not isinstance(target, (int, float))
                or not self.target_accuracy < target <= 1):
            raise ValueError(f"strong_target_accuracy must be a number above target_accuracy "
                             f"({self.target_accuracy:g}) and at most 1 with strong_nodes "
                             f"({strong}), got {target!r}")

    def check_swarm_size(self, n: int) -> None:
        """``ValueError`` unless a swarm of ``n`` nodes has every kind these settings deal: a
        node per partial specialist, and a weak node beside the strong ones."""
        parts = self.partial_specialists
        if parts and n < len(parts):
            raise ValueError(f"a swarm of partial_specialists {parts} needs a node per part: "
                             f"n_agents must be >= {len(parts)}, got {n}")
        if self.strong_nodes >= n:
            raise ValueError(f"strong_nodes ({self.strong_nodes}) must be below the number of "
                             f"nodes ({n}), so that weak nodes learn beside the strong")

    def per_seed(self) -> bool:
        """Whether each run seed has its own warm starts (a common base, partial specialists)
        rather than one set for every seed (specialists)."""
        return self.common_base or bool(self.partial_specialists)

    def node_kinds(self, n: int) -> list[str]:
        """What each of ``n`` nodes is, for reports: its specialty, its width, "all" (a common
        base), its part (``"+ only"``), or "strong" / "weak"."""
        self.check_swarm_size(n)
        if self.partial_specialists:
            parts = self.partial_specialists
            return [f"{parts[i % len(parts)]} only" for i in range(n)]
        if self.strong_nodes:
            return ["strong" if i < self.strong_nodes else "weak" for i in range(n)]
        if len(self.hidden_sizes) > 1:
            return [f"width {self.hidden_sizes[i % len(self.hidden_sizes)]}" for i in range(n)]
        if self.common_base:
            return ["all"] * n
        return [self.specialties[i % len(self.specialties)] for i in range(n)]

    def compute_dtype(self) -> str:
        """``dtype`` resolved for this machine: ``"fast"`` becomes ``"bfloat16"`` or
        ``"float32"``; the others are returned as they are. ``"bfloat16"`` on a CPU without
        native bfloat16 instructions warns (``SlowDtypeWarning``): its products are emulated
        there, about ten times slower than float32."""
        if self.dtype == "bfloat16" and not native_bfloat16():
            warnings.warn(SLOW_BFLOAT16, SlowDtypeWarning, stacklevel=2)
        if self.dtype != "fast":
            return self.dtype
        return "bfloat16" if native_bfloat16() else "float32"

    def warm_start_configs(self, seeds: Sequence[np.random.SeedSequence] = ()) -> list[Any]:
        """The warm starts: one per specialty, or with ``common_base`` one per run seed of
        ``seeds`` (the agent seeds the factory is called with) and width, width by width;
        with ``strong_nodes`` a seed's weak base and then its strong one (the same config but
        for ``target_accuracy``); with ``partial_specialists`` a seed's base per part, in
        their order."""
        from agents.tiny.config import SPECIALIST_TASKS, TinyModelConfig, WarmStartConfig

        unknown = [s for s in self.specialties if s not in SPECIALIST_TASKS]
        if unknown or not self.specialties:
            raise ValueError(f"specialties must be tasks of {list(SPECIALIST_TASKS)}, "
                             f"got {list(self.specialties)}")
        every = [SPECIALIST_TASKS[s] for s in self.specialties]
        settings = {"eval_tasks": every, "target_accuracy": self.target_accuracy,
                    "max_steps": self.warm_start_steps, "max_new_tokens": self.max_new_tokens}
        # at 128 this is TinyModelConfig()'s default shape
        models = [TinyModelConfig(hidden_size=h, num_heads=h // 32, num_kv_heads=h // 32,
                                  intermediate_size=3 * h) for h in self.hidden_sizes]
        if self.partial_specialists:
            whole = arithmetic_with(self.partial_specialists)
            return [WarmStartConfig(tasks=[part], seed=base_seed(s), model=models[0],
                                    **{**settings, "eval_tasks": [part, whole],
                                       "eval_labels": (_label(part), _label(whole))})
                    for s in seeds for part in map(arithmetic_with, self.partial_specialists)]
        if self.common_base:
            bases = [WarmStartConfig(tasks=every, seed=base_seed(s), model=m, **settings)
                     for s in seeds for m in models]
            if not self.strong_nodes:
                return bases
            steps = self.strong_warm_start_steps or self.warm_start_steps
            return [c for b in bases for c in (b, replace(
                b, target_accuracy=self.strong_target_accuracy, max_steps=steps))]
        # specialists have one width (checked on construction)
        return [WarmStartConfig(tasks=[task], model=models[0], **settings) for task in every]

    def warm_starts(self, jobs: int = 1, seeds: Sequence[np.random.SeedSequence] = (),
                    progress: bool = False) -> list[Path]:
        """The folders of :meth:`warm_start_configs` (``warm_starts`` below, on
        ``torch_threads`` threads). Call it before starting runs in parallel, so that they do
        not train the same one."""
        return warm_starts(self.warm_start_configs(seeds), jobs, self.torch_threads, progress)

    def swarm_settings(self) -> dict[str, Any]:
        """``SwarmConfig`` fields these nodes need: the specialties' tasks, and the empty
        system prompt the tiny models were warm-started with (JSON data, as run names)."""
        from agents.tiny.config import SPECIALIST_TASKS

        tasks = ([arithmetic_with(self.partial_specialists)] if self.partial_specialists
                 else [SPECIALIST_TASKS[s] for s in self.specialties])
        return {"tasks": [[t.name, t.weight, dict(t.config)] for t in tasks],
                "system_prompt": ""}

    def __call__(self, names: Sequence[str], num_external: int,
                 seed: np.random.SeedSequence) -> list:
        keep_freed_memory()  # this process runs the swarm (sapo_experiments.allocator)
        from agents import GRPOConfig
        from agents.tiny.batched import batched_swarm
        from agents.tiny.warm_start import tiny_nodes

        config = GRPOConfig(max_new_tokens=self.max_new_tokens, learning_rate=self.learning_rate,
                            max_grad_norm=self.max_grad_norm, gradient_checkpointing=False,
                            torch_threads=self.torch_threads, dtype=self.compute_dtype(),
                            off_policy_correction=self.off_policy_correction,
                            ftis_statistic=self.ftis_statistic, rescue_gate=self.rescue_gate,
                            share_logprobs=self.shares_logprobs)
        self.check_swarm_size(len(names))
        folders = self.warm_starts(seeds=[seed])  # per seed: this seed's, per width or part
        agents = tiny_nodes(self._node_folders(folders, len(names)), config, num_external,
                            seed.spawn(len(names)))
        if not self.batched:
            return agents
        widths = len(self.hidden_sizes)  # node i has width i % widths
        for w in range(widths):  # one batched swarm per model shape
            batched_swarm(agents[w::widths], list(names)[w::widths],
                          share_prompts=self.share_prompts)
        return agents

    def _node_folders(self, folders: list[Path], n: int) -> list[Path]:
        """One run's warm starts (:meth:`warm_starts` for its seed) as ``tiny_nodes`` deals
        them round-robin: with ``strong_nodes``, one per node, the strong first."""
        if not self.strong_nodes:
            return folders
        weak, strong = folders
        return [strong if i < self.strong_nodes else weak for i in range(n)]

DEFAULT_SPECIALTIES = TinyLearners.specialties


def arithmetic_with(operators: Sequence[str]) -> Any:
    """``SPECIALIST_TASKS["basic_arithmetic"]`` (two one-digit terms) with only these
    operators (a ``TaskSpec``; each question's operator drawn uniformly from them)."""
    from agents.tiny.config import SPECIALIST_TASKS
    from sapo_env.config import TaskSpec

    task = SPECIALIST_TASKS["basic_arithmetic"]
    return TaskSpec(task.name, task.weight, {**task.config, "operators": list(operators)})


def _label(task: Any) -> str:
    """``"basic_arithmetic (+ -)"``: a task of :func:`arithmetic_with`, named by its
    operators."""
    return f"{task.name} ({' '.join(task.config['operators'])})"


def base_seed(seed: np.random.SeedSequence) -> int:
    """The warm-start seed of a common base, drawn from a run's agent seed without spawning
    from it (spawning would change the nodes' own seeds)."""
    return int(seed.generate_state(1, dtype=np.uint32)[0])


def warm_starts(configs: Sequence[Any], jobs: int = 1, torch_threads: int | None = 1,
                progress: bool = False) -> list[Path]:
    """The folder of each tiny warm start of ``configs`` (``agents.tiny.WarmStartConfig``),
    read from the cache. Those not cached yet are trained first, up to ``jobs`` at a time,
    each in a fresh process on ``torch_threads`` threads (the weights depend on the thread
    count, and this way not on the caller's settings); with ``progress``, each shows a bar
    over its steps, on a line of its own, and after them a line for each warm start, cached
    or not, that stopped at its step cap short of its target."""
    from agents.tiny.warm_start import REPORT_FILE, cache_path, read_report, short_of_target

    missing = list({cache_path(c): c for c in configs
                    if not (cache_path(c) / REPORT_FILE).is_file()}.values())
    if missing:
        jobs = min(jobs, len(missing))
        # bar lines 0..jobs-1: two warm starts running side by side never share one
        lines = [k % jobs if progress else None for k in range(len(missing))]
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
            list(pool.map(_train_warm_start, missing, [torch_threads] * len(missing), lines))
    if progress:
        for config in {cache_path(c): c for c in configs}.values():
            line = short_of_target(config, read_report(cache_path(config)))
            if line:
                print(line, flush=True)
    return [cache_path(c) for c in configs]


def _train_warm_start(config: Any, torch_threads: int | None, line: int | None) -> Path:
    """One warm start, in a worker process of ``warm_starts`` (its bar on ``line``)."""
    keep_freed_memory()
    import torch

    from agents.tiny.warm_start import warm_start

    if torch_threads:
        torch.set_num_threads(torch_threads)
    return warm_start(config, progress=line)
