"""Configuration of a SAPO swarm: ``SwarmConfig``, with the paper's defaults (its question mix,
``TaskSpec`` and ``PAPER_TASKS``, is :mod:`sapo_env.task_specs`, importable from here too).

Every field is documented beside its definition and validated on construction; a bad value
raises ``ValueError`` naming the field, the value and what is allowed.

Example::

    from sapo_env import SwarmConfig
    config = SwarmConfig(n_agents=4)                  # 4 nodes, the paper's protocol at 4/4
    isolated = config.replace(num_external=0)         # 8/0: every node answers 8 questions
    # the oversampled control: 16 questions, own zero-advantage groups dropped, 8 trained on
    control = config.replace(num_external=0, questions_per_round=16, filter_local=True)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sapo_env.attacks import TransportAttack, check_adversaries
from sapo_env.churn import check_join_rounds
from sapo_env.rollouts import DEFAULT_EPS
from sapo_env.sampling import FILTERS, SAMPLERS, ExternalSampler, GroupFilter
from sapo_env.scoring.answers import EXTRACTORS, AnswerExtractor
from sapo_env.scoring.datasets import MAX_QUESTIONS_PER_STREAM
from sapo_env.scoring.guard import DEFAULT_MAX_ANSWER_CHARS, DEFAULT_TIME_LIMIT, ScoringLimits
from sapo_env.task_specs import (  # noqa: F401 - TaskSpecLike importable from here too
    PAPER_TASKS,
    TaskSpec,
    TaskSpecLike,
    coerce_tasks,
)
from sapo_env.validation import check_int, unknown_names

# reasoning-gym's ``SYSTEM_PROMPTS["default"]``, the paper's, written out so that importing the
# config does not import reasoning-gym (tests/test_config.py keeps the two equal).
DEFAULT_SYSTEM_PROMPT = (
    "Given a problem, your task is to answer the question by thinking step-by-step in a clear "
    "and specific manner.\nOnce you have thought about the reasoning process, provide the "
    "answer in the following format:\n<answer>answer here</answer>\nDo not explain your "
    "reasoning inside the answer tags, provide only the final answer. When an example is "
    "provided, you should strictly follow the format of the output/answer in that example.\n"
)

FilterName = Literal["zero_advantage", "none"]
SamplingName = Literal["uniform", "reputation"]
AnswerFormatName = Literal["tag", "lenient"]
ExternalSource = Literal["swarm", "self_replay"]


@dataclass(frozen=True)
class SwarmConfig:
    """Everything that defines a SAPO swarm. Defaults are the paper's (arXiv 2509.08721)."""

    # --- swarm -------------------------------------------------------------------------------
    n_agents: int = 8
    """Number of nodes, named ``node_0 … node_{n-1}``."""
    max_rounds: int = 2000
    """Rounds after which every node is truncated."""

    # --- questions ---------------------------------------------------------------------------
    tasks: tuple[TaskSpec, ...] = PAPER_TASKS
    """Question mix of every node: task names, ``(name, weight, config)`` tuples or TaskSpecs."""
    node_tasks: Mapping[str, tuple[TaskSpec, ...]] | None = None
    """Per-node task lists (specialist nodes), keyed by node name; others use ``tasks``."""
    questions_per_round: int | None = None
    """Questions a node answers per round (one task drawn by weight per question). ``None``, the
    paper's protocol: I = ``train_budget`` - J, where J is the node's ``num_external`` in force
    that round, so J trades the node's own generation against the pool's supply (the paper's
    Section 5: "each agent samples I specialties, receives one question per specialty"). An int
    B: every node answers B questions whatever its J and trains on I of them (the fixed
    protocol; B > ``train_budget`` with ``filter_local`` is an oversampling baseline)."""
    completions_per_question: int = 8
    """L: completions per question; a question with its L completions is a group."""
    shared_questions: bool = False
    """If True every node gets the same questions each round."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """System prompt shown to every node (reasoning-gym's default asks for ``<answer>`` tags)."""

    # --- scoring -----------------------------------------------------------------------------
    answer_format: AnswerFormatName | AnswerExtractor = "tag"
    """How an answer is read from a completion before reasoning-gym scores it: ``"tag"`` (last
    ``<answer>`` tag, reasoning-gym's ``extract_answer``), ``"lenient"`` (tag if present, else a
    final "answer is X" / "Answer: X", else the last line) or
    ``extract(completion) -> str | None``. A completion it reads no answer from (None) scores
    0 and counts in ``infos[node]["no_answer"]``, not in ``scoring_failures``."""
    advantage_eps: float = DEFAULT_EPS
    """Added to the group's reward standard deviation when normalising advantages."""
    max_completion_chars: int = 16384
    """Longest completion accepted, in characters (longer is an input error, not a truncation)."""
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS
    """Longest extracted answer that is scored, in characters: a longer one scores 0 without
    being parsed and counts in ``infos[node]["scoring_failures"]["too_long"]``. 2048: about ten
    times the longest honest answer of the paper's nine tasks (docs/provenance.md, "Scoring
    limits"); raise it for tasks with longer answers, such as tower_of_hanoi and
    palindrome_partitioning."""
    score_time_limit: float | None = DEFAULT_TIME_LIMIT
    """Seconds one completion's extraction and scoring may take before it is interrupted; it then
    scores 0 and counts in ``infos[node]["scoring_failures"]["timeout"]`` (None: no limit). 1.0:
    about four times the slowest honest score of any reasoning-gym task (docs/provenance.md,
    "Scoring limits"). Enforced with SIGALRM in the main thread on POSIX only (see
    ``sapo_env.scoring.guard``); a run whose scoring hits it depends on the machine's speed, so it
    is no longer reproducible from its seed."""
    node_score_budget: float | None = 10.0
    """Seconds of scoring each node gets per round, all its completions together, then the
    re-scoring of its packets and the reading of their log-probs (None: none). What it no longer
    covers scores 0 unscored (``scoring_failures["budget"]``): one node's 64 slow answers delay a
    round by about this, not by 64 time limits. 10 s: over fifteen times what the paper's nine
    tasks need at 16 questions a node (docs/provenance.md, "Scoring limits"); raise it for slow
    tasks such as intermediate_integration."""
    round_score_budget: float | None = None
    """Seconds of scoring the whole round gets, all nodes together (None: only each node's
    ``node_score_budget``). Each node then gets an equal share, ``round_score_budget /
    n_agents`` (or ``node_score_budget`` if smaller): however many nodes send slow answers or
    packets, the round's scoring lasts at most this (plus the scoring child's 2 s kill grace
    off the main thread), and no node's slowness eats another's share. Off by default because
    the share shrinks as the swarm grows: set it to bound a step whatever the number of
    hostile nodes, with a share well above an honest node's need (``scoring_budget``)."""

    # --- training set ------------------------------------------------------------------------
    train_budget: int = 8
    """I + J: groups in each node's training set per round (the paper: 8)."""
    num_external: int | Mapping[str, int] | None = None
    """J of round 0: an int for every node, a mapping naming every node, or None for half the
    budget (``train_budget // 2``: 4 of 8, the paper's best configuration, 4/4). From then on a
    node's action sets its J for its next round."""
    filter: FilterName | GroupFilter = "zero_advantage"
    """Which groups may be trained on: ``"zero_advantage"`` drops groups whose rewards are all
    equal (they carry no gradient), ``"none"`` keeps all, or ``filter(group) -> keep``."""
    filter_local: bool = False
    """Also filter a node's own groups (the paper filters only external ones). With
    ``questions_per_round`` > ``train_budget`` this gives the oversampled, filtered baseline
    that separates filtering from sharing. Without oversampling it drops groups that carry no
    gradient and replaces none of them, which still changes a GRPO step: they count in the
    loss's normaliser (``agents.GRPOConfig.count_zero_advantage_groups``), so each step on the
    remaining groups is longer."""
    rescue: bool = False
    """Replace each own group of a node's training set in which every completion failed by
    other nodes' groups on the same question with some but not all completions right (``1 <=
    k < L`` successes), marked ``local=False, rescue=True`` and carrying their sender's
    advantages: GRAFT's targeted exchange (arXiv 2609.37868; :mod:`sapo_env.rescue` states
    the reading). Needs ``shared_questions`` (nodes must answer the same questions) and not
    ``filter_local`` (which drops all-fail groups before they could be rescued). The agent
    decides how much each rescue group counts (``agents.GRPOConfig.rescue_gate``). False:
    the paper's protocol."""
    rescue_candidates: int | None = 1
    """With ``rescue``: most peer groups that replace one all-fail group, drawn uniformly from
    its candidates with the node's sampling stream (None: every candidate). 1: GRAFT's one
    peer group per prompt, which keeps a training set at ``train_budget`` groups."""
    external_source: ExternalSource = "swarm"
    """Where the J external groups come from: ``"swarm"`` (other nodes' shared groups) or
    ``"self_replay"`` (the node's own groups of earlier rounds inside the pool window: the
    control that separates sharing from reuse)."""
    external_sampling: SamplingName | ExternalSampler = "uniform"
    """How J groups are drawn from the candidates: ``"uniform"`` without replacement,
    ``"reputation"`` in proportion to their source's reputation (the share of what it published
    that was accepted, new and informative: a defense against hostile nodes,
    :mod:`sapo_env.defenses.reputation`), or ``sampler(candidates, k, rng) -> chosen``."""

    # --- shared pool -------------------------------------------------------------------------
    pool_window: int = 1
    """Rounds a shared group stays in the pool (1 = this round only: the synchronous round)."""
    pool_capacity: int | None = None
    """Most groups the pool holds; the oldest are evicted first. None: no bound beyond the
    window."""

    # --- hostile nodes and defenses (docs/hostile-nodes.md) -----------------------------
    adversaries: Mapping[str, TransportAttack] | None = None
    """Nodes whose published groups are forged on the way to the pool, as a node building its
    own packets could send them: node -> ``"forge_rewards"``, ``"forge_metadata"`` or
    ``"duplicate_spam"`` (:mod:`sapo_env.defenses.transport_attacks`; ``adversaries.assign(n,
    0.3, attack)`` names the last 30% of the nodes). Attacks made of text alone are agents
    (``agents.hostile.adversarial``)."""
    verify_packets: bool = True
    """Re-derive every published group's question and answer from its ``ref``, re-score its
    completions, and drop it if anything differs, if its source was not dealt that question this
    round or already published it (:mod:`sapo_env.defenses.packets`); infos count the drops
    (``rejected_groups``); packets pass :mod:`sapo_env.defenses.packet_schema` whatever this is.
    Only forged packets ever fail: groups the env built itself pass by construction."""
    max_external_per_source: int | None = None
    """At most this many external groups from one source in a node's training set (None: no
    cap): bounds what any one node, spammer or poisoner, can put in another's batch. Works
    with the ``"uniform"`` and ``"reputation"`` samplers."""

    # --- churn (sapo_env.churn) --------------------------------------------------------------
    join_rounds: Mapping[str, int] | None = None
    """Nodes that join a running swarm: node -> the first round it plays (they are left out of
    ``env.agents`` until then). Leaving and going offline are actions (``sapo_env.churn``)."""

    def __post_init__(self) -> None:
        check_int("n_agents", self.n_agents, 1)
        check_int("max_rounds", self.max_rounds, 1)
        if self.questions_per_round is not None:
            check_int("questions_per_round", self.questions_per_round, 1)
        check_int("completions_per_question", self.completions_per_question, 1)
        check_int("train_budget", self.train_budget, 0)
        check_int("max_completion_chars", self.max_completion_chars, 1)
        check_int("max_answer_chars", self.max_answer_chars, 1)
        for name in ("score_time_limit", "node_score_budget", "round_score_budget"):
            limit = getattr(self, name)
            if limit is not None and (isinstance(limit, bool) or not isinstance(
                    limit, (int, float)) or not math.isfinite(limit) or limit <= 0):
                raise ValueError(f"{name} must be None or a number of seconds > 0, "
                                 f"got {limit!r}")
        check_int("pool_window", self.pool_window, 1)
        if self.pool_capacity is not None:
            check_int("pool_capacity", self.pool_capacity, 1)
        if not (isinstance(self.advantage_eps, (int, float)) and self.advantage_eps > 0):
            raise ValueError(f"advantage_eps must be a float > 0, got {self.advantage_eps!r}")
        if self.max_rounds * self.max_questions >= MAX_QUESTIONS_PER_STREAM:
            raise ValueError(
                f"max_rounds * questions per round must be < {MAX_QUESTIONS_PER_STREAM} "
                f"(seed block of one question stream), got {self.max_rounds} * "
                f"{self.max_questions}"
            )
        self._check_num_external()
        object.__setattr__(self, "tasks", coerce_tasks(self.tasks, "tasks", self.max_rounds))
        if self.node_tasks is not None:
            names = {f"node_{i}" for i in range(self.n_agents)}
            unknown = sorted(set(self.node_tasks) - names)
            if unknown:
                raise ValueError(
                    f"node_tasks: unknown nodes {unknown}; expected names node_0..node_"
                    f"{self.n_agents - 1}"
                )
            if self.shared_questions:
                raise ValueError(
                    "node_tasks must be None when shared_questions=True "
                    "(every node gets the same questions, so they share one task mix)"
                )
            object.__setattr__(
                self,
                "node_tasks",
                {k: coerce_tasks(v, f"node_tasks[{k!r}]", self.max_rounds)
                 for k, v in self.node_tasks.items()},
            )
        _check_choice("filter", self.filter, tuple(FILTERS))
        _check_choice("external_sampling", self.external_sampling,
                      (*SAMPLERS, "reputation"))
        _check_choice("answer_format", self.answer_format, tuple(EXTRACTORS))
        if self.external_source not in ("swarm", "self_replay"):
            raise ValueError(
                f"external_source must be 'swarm' or 'self_replay', got {self.external_source!r}"
            )
        if self.external_source == "self_replay" and self.pool_window < 2:
            raise ValueError(
                "pool_window must be >= 2 when external_source='self_replay' (self-replay draws "
                f"from the node's own groups of earlier rounds), got {self.pool_window}"
            )
        self._check_defenses()
        self._check_rescue()
        object.__setattr__(self, "join_rounds", check_join_rounds(
            self.join_rounds, self.agent_names, self.max_rounds))
        for name in ("filter_local", "shared_questions", "verify_packets", "rescue"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.system_prompt, str):
            raise ValueError(f"system_prompt must be a str, got {type(self.system_prompt)}")

    def _check_defenses(self) -> None:
        object.__setattr__(self, "adversaries", check_adversaries(self.adversaries,
                                                                  self.agent_names))
        if self.max_external_per_source is not None:
            check_int("max_external_per_source", self.max_external_per_source, 1)
            if callable(self.external_sampling):
                raise ValueError("max_external_per_source works with external_sampling "
                                 "'uniform' or 'reputation', not a custom sampler (cap "
                                 "inside the sampler instead)")

    def _check_rescue(self) -> None:
        if self.rescue_candidates is not None:
            check_int("rescue_candidates", self.rescue_candidates, 1)
        if self.rescue is not True:
            return
        if not self.shared_questions:
            raise ValueError("rescue=True needs shared_questions=True: a group is rescued by "
                             "other nodes' groups on the same question, got "
                             "shared_questions=False")
        if self.filter_local:
            raise ValueError("rescue=True and filter_local=True: filter_local drops the own "
                             "all-fail groups that rescue replaces; set one of them")

    def _check_num_external(self) -> None:
        value = self.num_external
        if value is None:
            return
        if isinstance(value, Mapping):
            names = set(self.agent_names)
            if set(value) != names:
                raise ValueError(
                    f"num_external: a mapping must name every node node_0..node_"
                    f"{self.n_agents - 1} once; missing {sorted(names - set(value))}, "
                    f"unknown {sorted(set(value) - names, key=str)}"
                )
            for node, j in value.items():
                _check_j(f"num_external[{node!r}]", j, self.train_budget)
            object.__setattr__(self, "num_external", dict(value))
        else:
            _check_j("num_external", value, self.train_budget)

    @property
    def agent_names(self) -> tuple[str, ...]:
        return tuple(f"node_{i}" for i in range(self.n_agents))

    @property
    def scoring_budget(self) -> float | None:
        """Seconds of scoring each node gets a round: ``node_score_budget``, or its share of
        ``round_score_budget`` if that is smaller (None: no budget)."""
        share = None if self.round_score_budget is None else self.round_score_budget / self.n_agents
        budgets = [b for b in (self.node_score_budget, share) if b is not None]
        return min(budgets) if budgets else None

    @property
    def scoring_limits(self) -> ScoringLimits:
        """The limits every completion is scored under (``sapo_env.scoring.guard``)."""
        return ScoringLimits(self.max_answer_chars, self.score_time_limit)

    @property
    def paper_protocol(self) -> bool:
        """True when a node's J decides how many questions it answers (``questions_per_round``
        is None)."""
        return self.questions_per_round is None

    @property
    def max_questions(self) -> int:
        """The most questions a node answers in a round."""
        return self.train_budget if self.questions_per_round is None else self.questions_per_round

    def questions_for(self, num_external: int) -> int:
        """Questions a node with J = ``num_external`` in force answers this round."""
        if self.questions_per_round is None:
            return self.train_budget - num_external
        return self.questions_per_round

    def initial_num_external(self, agent: str) -> int:
        """J of round 0 for one node."""
        if self.num_external is None:
            return self.train_budget // 2
        if isinstance(self.num_external, Mapping):
            return self.num_external[agent]
        return self.num_external

    def tasks_of(self, agent: str) -> tuple[TaskSpec, ...]:
        """The task mix of one node."""
        if self.node_tasks is not None and agent in self.node_tasks:
            return self.node_tasks[agent]
        return self.tasks

    def summary(self) -> dict[str, Any]:
        """Every field, shortened for display (``sapo-env info``, TensorBoard's config text):
        task names only, the system prompt's first line, callables by name."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "tasks":
                value = ", ".join(t.name for t in value)
            elif isinstance(value, str) and "\n" in value:
                value = value.splitlines()[0] + " ..."
            elif callable(value):
                value = getattr(value, "__name__", repr(value))
            out[f.name] = value
        return out

    def replace(self, **changes: Any) -> SwarmConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


def _check_j(name: str, value: Any, train_budget: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= train_budget:
        raise ValueError(f"{name} (J of round 0) must be an int in [0, {train_budget}] "
                         f"(train_budget), got {value!r}")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if callable(value):
        return
    if value not in choices:
        allowed = " | ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be {allowed} or a callable, got {value!r}")


def config_from(n: int | None, config: SwarmConfig | None, overrides: dict[str, Any]
                ) -> SwarmConfig:
    """The config of ``parallel_env(n, config, **overrides)``: ``config`` (default
    ``SwarmConfig()``) with ``n`` nodes and the overrides, PettingZoo's ``max_cycles`` read as
    ``max_rounds``; a conflict or an unknown field raises ``ValueError``."""
    if "max_cycles" in overrides:  # PettingZoo's name for the episode length
        if "max_rounds" in overrides:
            raise ValueError(f"max_cycles={overrides['max_cycles']!r} and max_rounds="
                             f"{overrides['max_rounds']!r} both set the run length; give one")
        overrides["max_rounds"] = overrides.pop("max_cycles")
    if n is not None:
        if "n_agents" in overrides:
            raise ValueError(f"n={n!r} and n_agents={overrides['n_agents']!r} both set the "
                             "number of nodes; give one")
        if config is not None and config.n_agents != n:
            raise ValueError(f"n={n!r} conflicts with config.n_agents={config.n_agents}; "
                             "give one of them (or config.replace(n_agents=...))")
        overrides["n_agents"] = n
    unknown = sorted(set(overrides) - set(SwarmConfig.field_names()))
    if unknown:
        raise ValueError(f"unknown SwarmConfig field "
                         f"{unknown_names(unknown, SwarmConfig.field_names())}; see "
                         "help(sapo_env.SwarmConfig)")
    return (config or SwarmConfig()).replace(**overrides)
