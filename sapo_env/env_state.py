"""The env's full state as plain data: ``SwarmEnv.state_dict()`` and
``SwarmEnv.reset(options={"state": state})``.

A state is a dict of plain values only (dicts, lists, tuples, str, int, float, bool, None, numpy
arrays and numpy bit-generator states, no live objects), so it survives a round trip through
``sapo_env.runtime.plain_data`` (the checkpoints' format, which reading cannot turn into code)
and can be written to disk and restored in another process. Restoring it gives back the
observations of the moment it was taken, and stepping on from there gives exactly what the
uninterrupted env gives, bit for bit.

Keys (``STATE_FORMAT`` 2):

=================  ==========================================================================
``format``         ``STATE_FORMAT``
``config``         the config's fingerprint, every field as a string (:func:`config_fingerprint`);
                   restoring checks it against the env's own config
``round``          rounds played
``agents``         the live nodes
``seed_sequence``  the seed sequence of the last ``reset(seed=...)`` (a reset without a seed
                   continues from it)
``questions``      every question stream's position and task generator
                   (``QuestionSource.state_dict``)
``drawn``          per live node, the refs of this round's questions (re-derived with
                   reasoning-gym on restore)
``held``           per pending node (``sapo_env.churn``), the round of the questions it
                   still holds
``num_external``   per node, the J in force this round
``sampling_rngs``  per node, the bit-generator state of its batch sampling
``pool``           the shared pool (``SharedPool.state_dict``: groups as plain dicts)
``replay``         per node, its self-replay pool (empty unless ``external_source="self_replay"``)
``batches``        per node, the training set assembled for it at the last step
``last_round``     what ``render()`` describes: the last round's pool size, rewards, J and
                   batch counts (None before the first step)
=================  ==========================================================================

The state shares the env's group records, which are read-only: treat it as read-only data.
Restoring copies what it keeps, and a state that does not fit the env (another config, a
missing key, a value of the wrong kind) raises ``ValueError`` naming the field and leaves the
env as it was.

Example::

    >>> import sapo_env
    >>> from sapo_env.runtime import plain_data
    >>> env = sapo_env.parallel_env(n=2, max_rounds=5)
    >>> observations, infos = env.reset(seed=0)
    >>> state = plain_data.decode(plain_data.encode(env.state_dict()))
    >>> again = sapo_env.parallel_env(n=2, max_rounds=5)
    >>> restored, _ = again.reset(options={"state": state})
    >>> restored["node_0"]["questions"] == observations["node_0"]["questions"]
    True
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sapo_env.config import SwarmConfig, TaskSpec
from sapo_env.pool import SharedPool, restore_group
from sapo_env.render import LastRound
from sapo_env.rng_state import (
    generator_from_state,
    generator_state,
    seed_sequence_from_state,
    seed_sequence_state,
)
from sapo_env.sampling import Assembly, GroupFilter
from sapo_env.tasks import DrawnQuestion, QuestionSource, redraw
from sapo_env.types import Group

STATE_FORMAT = 2  # 2: pending nodes' held questions
STATE_KEYS = ("format", "config", "round", "agents", "seed_sequence", "questions", "drawn",
              "held", "num_external", "sampling_rngs", "pool", "replay", "batches", "last_round")
_BATCH_COUNTS = ("num_local", "num_external", "local_shortfall", "external_shortfall",
                 "rescued")


@dataclass
class RunState:
    """What the env holds between two steps of a run, besides its ``round`` and ``agents``:
    ``reset`` builds it, ``step`` advances it, and :func:`capture` and :func:`restore` turn it
    into plain data and back."""

    seed_sequence: np.random.SeedSequence
    """Of the last ``reset(seed=...)``; a reset without a seed continues from it."""
    questions: QuestionSource
    """Every node's question streams."""
    rngs: dict[str, np.random.Generator]
    """Per node, the generator of its batch sampling."""
    pool: SharedPool
    """The shared pool."""
    replay: dict[str, SharedPool]
    """Per node, its own earlier groups (``external_source="self_replay"``; else empty)."""
    batches: dict[str, tuple[Group, ...]]
    """Per node, the training set assembled for it at the last step."""
    num_external: dict[str, int]
    """Per node, the J in force this round."""
    drawn: dict[str, list[DrawnQuestion]]
    """Per live node, this round's questions."""
    held: dict[str, int] = dataclasses.field(default_factory=dict)
    """Per pending node (``sapo_env.churn``), the round of the questions it still holds."""
    last_round: LastRound | None = None
    """What ``render()`` describes (None before the first step)."""

    def sharing_state(self) -> tuple:
        """What publishing and assembly change (the pools, the sampling streams), to put back
        with :meth:`restore_sharing_state` when a user's filter or sampler raises mid-step."""
        return (self.pool.state(), {a: p.state() for a, p in self.replay.items()},
                {a: r.bit_generator.state for a, r in self.rngs.items()})

    def restore_sharing_state(self, saved: tuple) -> None:
        pool, replay, rngs = saved
        self.pool.restore(pool)
        for a, state in replay.items():
            self.replay[a].restore(state)
        for a, state in rngs.items():
            self.rngs[a].bit_generator.state = state


def config_fingerprint(config: SwarmConfig) -> dict[str, str]:
    """Every field of ``config`` as a string that is the same in every process: task specs as
    sorted JSON, functions by their import path."""
    return {f.name: _describe(getattr(config, f.name)) for f in dataclasses.fields(config)}


def _describe(value: Any) -> str:
    if isinstance(value, TaskSpec):
        first = [value.first_round] if value.first_round else []  # as before curricula
        return json.dumps([value.name, value.weight, value.config, *first], sort_keys=True)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    if callable(value):
        return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', repr(value))}"
    return repr(value)


def capture(config: SwarmConfig, round_: int, agents: list[str], run: RunState
            ) -> dict[str, Any]:
    """The state of an env at ``round_`` with live ``agents`` (see the module docstring)."""
    last = run.last_round
    return {
        "format": STATE_FORMAT,
        "config": config_fingerprint(config),
        "round": round_,
        "agents": list(agents),
        "seed_sequence": seed_sequence_state(run.seed_sequence),
        "questions": run.questions.state_dict(),
        "drawn": {a: [dict(d.question["ref"]) for d in run.drawn[a]] for a in agents},
        "held": dict(run.held),
        "num_external": dict(run.num_external),
        "sampling_rngs": {a: generator_state(r) for a, r in run.rngs.items()},
        "pool": run.pool.state_dict(),
        "replay": {a: p.state_dict() for a, p in run.replay.items()},
        "batches": {a: list(batch) for a, batch in run.batches.items()},
        "last_round": None if last is None else {
            "round": last.round, "pool_size": last.pool_size, "rewards": dict(last.rewards),
            "num_external": dict(last.num_external),
            "assemblies": {a: {k: getattr(s, k) for k in _BATCH_COUNTS}
                           for a, s in last.assemblies.items()}},
    }


def restore(config: SwarmConfig, keep: GroupFilter, state: Any
            ) -> tuple[RunState, list[str], int]:
    """The run state, live nodes and round that ``state`` describes, for an env of ``config``
    whose pools keep groups by ``keep``; ``ValueError`` naming the field when the state does
    not fit that env (which is then left as it was: nothing is assigned here)."""
    names = list(config.agent_names)
    if not isinstance(state, Mapping):
        raise ValueError(f"state must be a dict from env.state_dict(), got {type(state).__name__}")
    missing, unknown = set(STATE_KEYS) - set(state), set(state) - set(STATE_KEYS)
    if missing or unknown:
        raise ValueError(f"state: missing keys {sorted(missing)}, unknown keys "
                         f"{sorted(map(str, unknown))}; expected those of env.state_dict()")
    if state["format"] != STATE_FORMAT:
        raise ValueError(f"state['format'] is {state['format']!r}; this version of sapo-env "
                         f"reads format {STATE_FORMAT}")
    _check_config(state["config"], config_fingerprint(config))
    round_ = state["round"]
    if not _is_int(round_) or not 0 <= round_ <= config.max_rounds:
        raise ValueError(f"state['round'] must be an int in [0, {config.max_rounds}] "
                         f"(max_rounds), got {round_!r}")
    agents = state["agents"]
    if not isinstance(agents, (list, tuple)) or not all(type(a) is str for a in agents) \
            or len(set(agents)) != len(agents) or not set(agents) <= set(names):
        raise ValueError(f"state['agents'] must list distinct nodes of {names}, got {agents!r}")
    agents = [a for a in names if a in agents]
    num_external = _per_node(state, "num_external", agents, names, lambda a, j, where: _j(
        j, where, config.train_budget))
    seed_sequence = seed_sequence_from_state(state["seed_sequence"], "state['seed_sequence']")
    questions = QuestionSource(config, np.random.SeedSequence(0))  # its streams are replaced
    questions.load_state_dict(state["questions"], "state['questions']")
    drawn = _per_node(state, "drawn", agents, agents, lambda a, refs, where: _drawn(
        refs, where, config.questions_for(num_external[a]),
        {s.name: s.config for s in config.tasks_of(a)}))
    held = _per_node(state, "held", [], agents, lambda a, r, where: _held_round(
        r, where, int(round_)))
    rngs = _per_node(state, "sampling_rngs", names, names,
                     lambda a, rng, where: generator_from_state(rng, where))
    pool = SharedPool(config.pool_window, config.pool_capacity, keep)
    pool.load_state_dict(state["pool"], config, "state['pool']")
    replay_nodes = names if config.external_source == "self_replay" else []
    replay = _per_node(state, "replay", replay_nodes, replay_nodes, lambda a, s, where: _pool(
        SharedPool(config.pool_window - 1, None, keep), s, where, config))
    batches = _per_node(state, "batches", agents, names, lambda a, groups, where: _batch(
        groups, where, config))
    last_round = _last_round(state["last_round"], batches, names)
    return RunState(seed_sequence, questions, rngs, pool, replay, batches, num_external, drawn,
                    held, last_round), agents, int(round_)


def _check_config(saved: Any, own: dict[str, str]) -> None:
    if not isinstance(saved, Mapping):
        raise ValueError(f"state['config'] must be the config's fingerprint (a dict), got "
                         f"{type(saved).__name__}")
    differ = [k for k in sorted(set(saved) | set(own)) if saved.get(k) != own.get(k)]
    if differ:
        details = "; ".join(f"{k}: {saved.get(k, '(absent)')!s:.60} in the state, "
                            f"{own.get(k, '(absent)')!s:.60} in this env" for k in differ)
        raise ValueError(f"state was taken from an env with another config ({details}); "
                         "restore it into an env built with the same SwarmConfig")


def _per_node(state: Mapping[str, Any], key: str, required: list[str], allowed: list[str],
              load: Callable[[str, Any, str], Any]) -> dict[str, Any]:
    """``state[key]`` as {node: load(node, value, where)}: every node of ``required``, none
    outside ``allowed``."""
    value = state[key]
    if not isinstance(value, Mapping) or not set(required) <= set(value) <= set(allowed):
        got = sorted(map(str, value)) if isinstance(value, Mapping) else type(value).__name__
        raise ValueError(f"state['{key}'] must map the nodes {required} (and at most "
                         f"{allowed}) to their values, got {got}")
    return {a: load(a, value[a], f"state['{key}']['{a}']") for a in allowed if a in value}


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _j(value: Any, where: str, train_budget: int) -> int:
    if not _is_int(value) or not 0 <= value <= train_budget:
        raise ValueError(f"{where} must be an int in [0, {train_budget}] (train_budget), "
                         f"got {value!r}")
    return int(value)


def _held_round(value: Any, where: str, round_: int) -> int:
    if not _is_int(value) or not 0 <= value < round_:
        raise ValueError(f"{where} must be the round of the questions the node holds, an int in "
                         f"[0, {round_}), got {value!r}")
    return int(value)


def _drawn(refs: Any, where: str, count: int, tasks: Mapping[str, Any]) -> list[DrawnQuestion]:
    if not isinstance(refs, (list, tuple)) or len(refs) != count:
        raise ValueError(f"{where} must list the {count} refs of the node's questions this "
                         f"round (its J in force), got {refs!r:.80}")
    for k, ref in enumerate(refs):
        if (not isinstance(ref, Mapping) or set(ref) != {"task", "config", "seed", "index"}
                or type(ref["task"]) is not str or ref["task"] not in tasks
                or ref["config"] != tasks[ref["task"]]
                or not _is_int(ref["seed"]) or not _is_int(ref["index"])):
            raise ValueError(f"{where}[{k}] must be a question ref (task, config, seed, index) "
                             f"of one of the node's tasks {sorted(tasks)}, got {ref!r:.120}")
    return [redraw(dict(ref)) for ref in refs]


def _pool(pool: SharedPool, state: Any, where: str, config: SwarmConfig) -> SharedPool:
    pool.load_state_dict(state, config, where)
    return pool


def _batch(groups: Any, where: str, config: SwarmConfig) -> tuple[Group, ...]:
    if not isinstance(groups, (list, tuple)):
        raise ValueError(f"{where} must be a list of groups, got {type(groups).__name__}")
    batch = tuple(restore_group(g, f"{where}[{k}]", config) for k, g in enumerate(groups))
    if not all(isinstance(g.get("local"), bool) for g in batch):
        raise ValueError(f"{where}: every group of a batch must say whether it is local "
                         "(a bool 'local')")
    return batch


def _last_round(last: Any, batches: Mapping[str, tuple], names: list[str]) -> LastRound | None:
    """``render()``'s record of the last round."""
    if last is None:
        return None
    keys = {"round", "pool_size", "rewards", "num_external", "assemblies"}
    if not isinstance(last, Mapping) or set(last) != keys:
        raise ValueError(f"state['last_round'] must be None or a dict with keys {sorted(keys)}")
    try:
        assemblies = {a: Assembly(batches.get(a, ()), **{k: int(counts[k]) for k in _BATCH_COUNTS})
                      for a, counts in last["assemblies"].items()}
        rewards = {a: float(r) for a, r in last["rewards"].items()}
        num_external = {a: int(j) for a, j in last["num_external"].items()}
        round_, pool_size = int(last["round"]), int(last["pool_size"])
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as error:
        raise ValueError(f"state['last_round'] is malformed: {error!r}") from None
    if not set(assemblies) == set(rewards) <= set(names):
        raise ValueError(f"state['last_round'] must describe the same nodes of {names} in "
                         "'rewards' and 'assemblies'")
    return LastRound(round_, pool_size, rewards, num_external, assemblies)
