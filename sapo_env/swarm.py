"""The SAPO swarm as a PettingZoo ``ParallelEnv``.

N nodes (``node_0 … node_{n-1}``) each answer reasoning-gym questions with L completions,
publish (some of) their question groups as plain text to a shared pool, and get back a training
set of I of their own groups and J groups from the pool (I + J = ``train_budget``). The env
verifies every completion with reasoning-gym's scorer, computes GRPO group advantages and
assembles every training set in the same synchronous step.

Under the paper's protocol (the default) a node with J external groups answers only
I = ``train_budget`` - J questions itself, so J trades its own generation against the pool's
supply; ``questions_per_round=B`` fixes B questions for every node instead. A node's action
sets its J for its *next* round (J must be known before that round's questions are drawn); the
observation carries the J in force this round, and ``SwarmConfig.num_external`` sets round 0's.

Arguments (of ``parallel_env``, ``raw_env`` and ``env``):
    n: number of nodes (``SwarmConfig.n_agents``), default 8.
    config: a ``SwarmConfig``; defaults are the paper's.
    render_mode: None or ``"ansi"`` (``render()`` returns a round summary).
    scoring: None (in process) or ``RayScoring(workers=2)`` (``sapo_env.scoring.round_scoring``).
    **overrides: any ``SwarmConfig`` field, e.g. ``train_budget=8, pool_window=4``;
        ``max_cycles`` is accepted as PettingZoo's name for ``max_rounds``.

Observation, action and reward of a node: see ``sapo_env.types`` and docs/environment.md.

Example::

    >>> import sapo_env
    >>> from agents import DemonstratorAgent
    >>> env = sapo_env.parallel_env(n=2, max_rounds=3)       # J = 4 in round 0: 4 questions
    >>> observations, infos = env.reset(seed=0)
    >>> len(observations["node_0"]["questions"]), observations["node_0"]["num_external"]
    (4, 4)
    >>> nodes = {a: DemonstratorAgent(accuracy=0.5, num_external=2, seed=i)
    ...          for i, a in enumerate(env.agents)}
    >>> actions = {a: nodes[a].act(observations[a]) for a in env.agents}
    >>> observations, rewards, terminations, truncations, infos = env.step(actions)
    >>> [g["local"] for g in observations["node_0"]["batch"]]   # I=4 own, J=4 from node_1
    [True, True, True, True, False, False, False, False]
    >>> len(observations["node_0"]["questions"])                # J=2 from now on: I=6
    6
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from functools import partial
from typing import Any

import gymnasium
import numpy as np
import pettingzoo
from pettingzoo import ParallelEnv
from pettingzoo.utils import parallel_to_aec, wrappers

from sapo_env import churn, env_state, spaces
from sapo_env.actions import ParsedAction, parse_actions
from sapo_env.collection_pause import paused_collection
from sapo_env.config import SwarmConfig, config_from
from sapo_env.defenses.packets import PacketVerifier
from sapo_env.defenses.publication import PacketFate, publish_round
from sapo_env.defenses.reputation import group_weights, source_reputation
from sapo_env.observations import observe
from sapo_env.one_at_a_time import Busy, one_at_a_time
from sapo_env.pool import SharedPool
from sapo_env.render import LastRound, round_table
from sapo_env.rescue import (
    CandidateIndex,
    candidate_index,
    complementarity,
    rescue_batch,
    solved_questions,
    success_counts,
)
from sapo_env.rollouts import group_advantages, has_zero_advantage, make_group
from sapo_env.sampling import (
    Assembly,
    ExternalSampler,
    assemble_batch,
    get_filter,
    get_sampler,
    sample_weighted,
)
from sapo_env.scoring.answers import get_extractor
from sapo_env.scoring.round_scoring import LocalScoring, Scoring, Unanswered, score_round
from sapo_env.tasks import DrawnQuestion, QuestionSource, reference_answer
from sapo_env.types import Group, NodeInfo, Observation, StepResult


class SwarmEnv(ParallelEnv):
    """A SAPO swarm; build it with ``sapo_env.parallel_env``."""

    metadata = {"name": "sapo_swarm_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(self, config: SwarmConfig | None = None, render_mode: str | None = None,
                 scoring: Scoring | None = None):
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.config = config if config is not None else SwarmConfig()
        self.render_mode = render_mode
        self._scoring = scoring if scoring is not None else LocalScoring()
        self.possible_agents = list(self.config.agent_names)
        self.agents: list[str] = []
        self.round = 0
        # One space object per node, built on first use and then reused (PettingZoo checks
        # identity); a 512-node swarm that never asks for its spaces does not build 1024 of them.
        self._observation_spaces: dict[str, gymnasium.spaces.Dict] = {}
        self._action_spaces: dict[str, gymnasium.spaces.Dict] = {}
        self._extract = get_extractor(self.config.answer_format)
        self._unanswered = Unanswered(self.config.answer_format)  # its warning: once per env
        self._self_replay = self.config.external_source == "self_replay"
        self._keep = get_filter(self.config.filter)
        self._sampler = (None if self.config.external_sampling == "reputation"
                         else get_sampler(self.config.external_sampling))
        self._verifier = (PacketVerifier(self.config, self._scoring)
                          if self.config.verify_packets else None)
        self._run: env_state.RunState | None = None  # set by reset()
        self._busy = Busy()  # step and reset: one at a time (sapo_env.one_at_a_time)
        #: every packet of the last step and its fate (``sapo_env.defenses.publication``)
        self.last_packets: tuple[PacketFate, ...] = ()

    def observation_space(self, agent: str) -> gymnasium.spaces.Dict:
        return self._space(self._observation_spaces, spaces.observation_space, agent)

    def action_space(self, agent: str) -> gymnasium.spaces.Dict:
        return self._space(self._action_spaces, lambda config: spaces.action_space(
            config, lambda: self._num_questions(agent)), agent)

    def _space(self, cache: dict, build, agent: str) -> gymnasium.spaces.Dict:
        if agent not in cache:
            if agent not in self.possible_agents:
                raise KeyError(f"unknown node {agent!r}; nodes are node_0..node_"
                               f"{self.config.n_agents - 1}")
            cache[agent] = build(self.config)
        return cache[agent]

    def _num_questions(self, agent: str) -> int:
        """Questions ``agent`` answers this round (before reset: in round 0)."""
        if self._run is None or agent not in self.agents:
            return self.config.questions_for(self.config.initial_num_external(agent))
        return len(self._run.drawn[agent])

    @one_at_a_time
    @paused_collection
    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, Observation], dict[str, NodeInfo]]:
        """Start a run. ``seed`` fixes everything; without one, a reset continues from the last
        seed's stream (a new, different run). ``options={"state": state}`` instead puts the env
        back in a state :meth:`state_dict` returned (here or in another process) and returns
        that moment's observations; stepping on is exact. A state from another config, or
        malformed, raises ``ValueError`` and leaves the env as it was
        (:mod:`sapo_env.env_state`). Other options are ignored, as Gymnasium's envs do."""
        self.last_packets = ()
        if options and "state" in options:
            if seed is not None:
                raise ValueError(f"reset got seed={seed!r} and a state: the state holds its "
                                 "own seed; give one of them")
            self._run, self.agents, self.round = env_state.restore(
                self.config, self._keep, options["state"])
            return self._observations(), {a: {} for a in self.agents}
        c, nodes = self.config, self.possible_agents
        seed_sequence = (np.random.SeedSequence(seed) if seed is not None or self._run is None
                         else self._run.seed_sequence)
        question_seq, sampling_seq = seed_sequence.spawn(1)[0].spawn(2)
        self.agents = churn.present_at_start(nodes, c.join_rounds)
        self.round = 0
        sampling = sampling_seq.spawn(len(nodes))
        self._run = env_state.RunState(
            seed_sequence, QuestionSource(c, question_seq),
            rngs={a: np.random.default_rng(s) for a, s in zip(nodes, sampling)},
            pool=SharedPool(c.pool_window, c.pool_capacity, self._keep),
            # self-replay: each node's own groups of earlier rounds inside the window
            replay={a: SharedPool(c.pool_window - 1, None, self._keep) for a in nodes}
            if self._self_replay else {},
            batches={a: () for a in nodes}, drawn={},
            num_external={a: c.initial_num_external(a) for a in nodes})
        self._run.drawn = self._draw_questions()
        return self._observations(), {a: {} for a in self.agents}

    def state_dict(self) -> dict[str, Any]:
        """The env's full state as plain, picklable data, for ``reset(options={"state": ...})``
        (:mod:`sapo_env.env_state` lists what it holds)."""
        if self._run is None:
            raise RuntimeError("state_dict() called before reset(): call reset() first")
        return env_state.capture(self.config, self.round, self.agents, self._run)

    @one_at_a_time
    @paused_collection
    def step(self, actions: dict[str, Any]) -> StepResult:
        """One synchronous round: validate, score, publish, assemble, return. A live node's
        action may also be ``{"offline": True}`` or ``None`` (offline), ``{"pending": True}``
        (still answering) or ``{"leave": True}``; late joiners join (``sapo_env.churn``). A call
        while another ``step`` or ``reset`` of this env runs raises ``RuntimeError``
        (``one_at_a_time``)."""
        if self._run is None:
            raise RuntimeError("step() called before reset(): call reset() first")
        if not self.agents:
            raise RuntimeError("step() called on a finished run: call reset() first")
        run = self._run
        playing, absent = churn.split_actions(actions, self.agents)
        parsed = parse_actions(playing, {a: len(run.drawn[a]) for a in self.agents
                                         if a not in absent}, self.config)
        spent: dict[str, float] = {}  # one scoring budget a node: its completions, its packets
        scores, failures = self._score(parsed, spent)  # node -> (questions, L); -> by reason
        empty = np.zeros((0, self.config.completions_per_question), np.float32)
        flat = np.concatenate([*scores.values(), empty])  # every group of the round, in order
        groups = self._groups(parsed, scores, flat)
        # Publishing and assembly run the config's filter and sampler, which may be user code
        # that raises: then the pools and sampling streams are put back as they were.
        saved = run.sharing_state()
        try:
            rejected, packets = self._publish(groups, parsed, spent, failures)
            sampler = self._external_sampler(rejected)
            rescuers = candidate_index(run.pool.candidates_for(None)) if self.config.rescue \
                else None
            assemblies = {a: self._assemble(a, groups[a], sampler, rescuers) for a in parsed}
            infos = self._infos(groups, scores, flat, failures, parsed, assemblies, rejected)
            for a in run.replay:  # after assembly: a node replays only earlier rounds
                run.replay[a].publish(self.round, groups.get(a, []))
        except BaseException:
            run.restore_sharing_state(saved)
            raise
        # A node that answered nothing (J = train_budget) earned nothing this round.
        rewards = {a: float(scores[a].mean()) if scores[a].size else 0.0 for a in parsed}
        run.batches = {a: assemblies[a].batch if a in parsed else () for a in self.possible_agents}
        self.last_packets = packets
        run.last_round = LastRound(self.round, len(run.pool), dict(rewards),  # who played
                                   dict(run.num_external), assemblies)
        # a pending node keeps its questions (and their round); any other gives them up
        run.held = {a: run.held.get(a, self.round) for a, s in absent.items() if s == "pending"}
        self.round += 1
        finished = self.round >= self.config.max_rounds
        absent.update(dict.fromkeys(churn.joining_at(self.config.join_rounds, self.round),
                                    "joined"))
        rewards.update(dict.fromkeys(absent, 0.0))
        infos.update({a: churn.absent_info(s, run.num_external[a]) for a, s in absent.items()})
        run.num_external.update({a: parsed[a].num_external for a in parsed})
        leaving = [a for a, s in absent.items() if s == "left"]
        returning = [a for a in self.possible_agents if a in rewards]  # every key, node order
        self.agents = [a for a in returning if a not in leaving]
        run.drawn = self._draw_questions()
        observations = self._observations(returning)
        terminations = {a: a in leaving for a in returning}
        truncations = {a: finished and a not in leaving for a in returning}
        if finished:
            self.agents = []
        return (observations, {a: rewards[a] for a in returning}, terminations, truncations,
                {a: infos[a] for a in returning})

    def _draw_questions(self) -> dict[str, list[DrawnQuestion]]:
        """This round's questions: as many per node as its J in force asks for (a pending node
        keeps those it holds), from the tasks whose first round has come."""
        run = self._run
        fresh = run.questions.draw_round({a: self.config.questions_for(run.num_external[a])
                                          for a in self.agents if a not in run.held}, self.round)
        return {a: run.drawn[a] if a in run.held else fresh[a] for a in self.agents}

    def _score(self, parsed: dict[str, ParsedAction], spent: dict[str, float]
               ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, int]]]:
        """Per node that plays, its (questions, L) verifier scores and its scoring failures
        counted by reason (``sapo_env.scoring.guard``); the seconds it took go to ``spent``,
        the completions with no extractable answer to ``self._unanswered``."""
        return score_round(
            self._run.drawn, {a: parsed[a].completions for a in parsed}, self._extract,
            self.config.scoring_limits, self.config.completions_per_question, self._scoring,
            self.config.scoring_budget, spent, self._unanswered)

    def _groups(self, parsed: dict[str, ParsedAction], scores: dict[str, np.ndarray],
                flat: np.ndarray) -> dict[str, list[Group]]:
        """Every node's groups, with advantages computed for all of them in one call."""
        advantages = group_advantages(flat, self.config.advantage_eps)
        run, groups, row = self._run, {}, 0
        for a in parsed:
            asked = run.held.get(a, self.round)  # the round of its questions
            groups[a] = [make_group(a, asked, k, d.question, reference_answer(d.entry),
                                    parsed[a].completions[k], scores[a][k], advantages[row + k],
                                    self.config.system_prompt, **parsed[a].token_fields(k))
                         for k, d in enumerate(run.drawn[a])]
            row += len(groups[a])
        return groups

    def _publish(self, groups: dict[str, list[Group]], parsed: dict[str, ParsedAction],
                 spent: dict[str, float], failures: dict[str, dict[str, int]]
                 ) -> tuple[Counter, tuple[PacketFate, ...]]:
        """Send the shared groups (forged on the way by adversaries), pool those that pass the
        packet schema and verification: the rejected ones counted by sender, and each packet's
        fate (``sapo_env.defenses.publication``). Re-scoring a packet is charged to its
        sender's budget (``spent``) and failures."""
        pool = self._run.pool
        # a late node's groups older than the pool window are not shared (infos count them)
        built = [g for a in parsed for g, s in zip(groups[a], parsed[a].share)
                 if s and pool.in_window(g["round"], self.round)]
        dealt = {a: [d.question["ref"] for d in self._run.drawn[a]] for a in parsed}
        return publish_round(built, self.round, self.config, pool, self._extract,
                             self._verifier, dealt, spent, failures)

    def _external_sampler(self, rejected: Counter) -> ExternalSampler:
        """This round's sampler: the config's, with reputations and per-source caps."""
        cap = self.config.max_external_per_source
        if self._sampler is None:  # "reputation": the pool's, after this round's publication
            pool = self._run.pool.state_dict()
            reputation = source_reputation(pool["groups"], pool["passes_filter"], rejected)
            return lambda candidates, k, rng: sample_weighted(
                candidates, k, rng, group_weights(candidates, reputation), cap)
        return self._sampler if cap is None else partial(sample_weighted, max_per_source=cap)

    def _external_source(self, agent: str) -> tuple[SharedPool, str | None]:
        """``agent``'s external groups: the pool less its own, or (self-replay) its own."""
        if self._self_replay:
            return self._run.replay[agent], None
        return self._run.pool, agent

    def _assemble(self, agent: str, own: list[Group], sampler: ExternalSampler,
                  rescuers: CandidateIndex | None) -> Assembly:
        """``agent``'s training set; with ``rescuers`` (the pool's rescue candidates by
        question), its all-fail own groups rescued (``sapo_env.rescue``)."""
        num_external = self._run.num_external[agent]
        local = [g for g in own if self._keep(g)] if self.config.filter_local else own
        pool, excluded = self._external_source(agent)
        candidates = pool.candidates_for(excluded)
        assembly = assemble_batch(agent, local, candidates,
                                  self.config.train_budget - num_external, num_external,
                                  self._run.rngs[agent], sampler)
        if rescuers is None:
            return assembly
        batch, rescued = rescue_batch(agent, assembly.batch, rescuers,
                                      self.config.rescue_candidates, self._run.rngs[agent])
        return dataclasses.replace(assembly, batch=batch, num_local=assembly.num_local - rescued,
                                   rescued=rescued)

    def _infos(self, groups: dict[str, list[Group]], scores: dict[str, np.ndarray],
               flat: np.ndarray, failures: dict[str, dict[str, int]],
               parsed: dict[str, ParsedAction], assemblies: dict[str, Assembly],
               rejected: Counter) -> dict[str, NodeInfo]:
        """Per-node facts of the round (:class:`sapo_env.types.NodeInfo`)."""
        run = self._run
        taken = Counter(g["source"] for a in parsed for g in assemblies[a].batch
                        if not g["local"] and g["source"] != a)
        # every group's mean, zero-advantage flag and successes in one call, sliced per node
        all_means, all_zero = flat.mean(axis=1).tolist(), has_zero_advantage(flat).tolist()
        all_successes = success_counts(flat).tolist()
        solved = solved_questions([g for a in parsed for g in groups[a]], all_successes)
        infos, row = {}, 0
        for a in parsed:
            end = row + len(scores[a])
            group_means, zero = all_means[row:end], all_zero[row:end]
            successes = all_successes[row:end]
            row = end
            by_task: dict[str, list[float]] = {}
            for g, mean in zip(groups[a], group_means):
                by_task.setdefault(g["task"], []).append(mean)
            shared = [m for m, s in zip(group_means, parsed[a].share) if s]
            source, others = self._external_source(a)
            infos[a] = {
                "status": "online",
                "num_external": run.num_external[a],
                "generated_completions": int(scores[a].size),
                "task_scores": {t: sum(v) / len(v) for t, v in sorted(by_task.items())},
                "local_groups": assemblies[a].num_local,
                "external_groups": assemblies[a].num_external,
                "local_shortfall": assemblies[a].local_shortfall,
                "external_shortfall": assemblies[a].external_shortfall,
                "pool_size": source.count_for(others),
                "pool_size_filtered": source.count_for(others, filtered=True),
                "pool_mean_reward_filtered": source.mean_reward_for(others, filtered=True),
                "zero_advantage_fraction": sum(zero) / len(zero) if zero else None,
                "all_fail_groups": successes.count(0),
                "complementarity": complementarity(a, groups[a], solved, successes),
                "rescued_groups": assemblies[a].rescued,
                "batch_mean_reward": assemblies[a].mean_reward,
                "shared_groups": len(shared),
                "staleness": self.round - (asked := run.held.get(a, self.round)),
                "stale_unshared": 0 if run.pool.in_window(asked, self.round) else len(shared),
                "shared_mean_reward": sum(shared) / len(shared) if shared else None,
                "taken_by_others": taken[a],
                "scoring_failures": failures[a],
                "no_answer": self._unanswered.by_node[a],
                "rejected_groups": rejected[a],
                "rejected_groups_swarm": sum(rejected.values()),
            }
        return infos

    def _observations(self, nodes: list[str] | None = None) -> dict[str, Observation]:
        """The observations of ``nodes`` (default: the live ones; one that left: no questions)."""
        return observe(self.config, self._run, self.round,
                       self.agents if nodes is None else nodes)

    def render(self) -> str | None:
        """With ``render_mode="ansi"``: a table of the last round (reward, J, batch per node)."""
        if self.render_mode is None:
            gymnasium.logger.warn("render() called with render_mode=None; use 'ansi'")
            return None
        last = self._run.last_round if self._run is not None else None
        return round_table(last, self.round, len(self.agents), self.config)

    def close(self) -> None:
        """End the scoring child process, if one was started (``scoring.process_scoring``)."""
        self._scoring.close()


def parallel_env(n: int | None = None, config: SwarmConfig | None = None,
                 render_mode: str | None = None, scoring: Scoring | None = None,
                 **overrides: Any) -> SwarmEnv:
    """The swarm as a PettingZoo ``ParallelEnv`` (see the module docstring)."""
    return SwarmEnv(config_from(n, config, overrides), render_mode=render_mode,
                    scoring=scoring)


def raw_env(n: int | None = None, config: SwarmConfig | None = None,
            render_mode: str | None = None, scoring: Scoring | None = None,
            **overrides: Any) -> pettingzoo.AECEnv:
    """The swarm as an AEC env (``parallel_to_aec``): nodes act in turn, the round runs when the
    last one has acted."""
    return parallel_to_aec(parallel_env(n, config, render_mode, scoring, **overrides))


def env(n: int | None = None, config: SwarmConfig | None = None,
        render_mode: str | None = None, scoring: Scoring | None = None,
        **overrides: Any) -> pettingzoo.AECEnv:
    """``raw_env`` with PettingZoo's order-enforcing wrapper, as PettingZoo's own envs are."""
    return wrappers.OrderEnforcingWrapper(raw_env(n, config, render_mode, scoring, **overrides))
