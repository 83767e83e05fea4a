"""Questions from reasoning-gym, and their verification.

Each node draws its questions from one *stream* per task: a reasoning-gym dataset with its own
seed, read at increasing indices. reasoning-gym derives item ``i`` of seed ``s`` from
``s + i``, so consecutive seeds overlap; every stream therefore owns a block of
``MAX_QUESTIONS_PER_STREAM`` seeds, and blocks never overlap within a run. Every question carries
a ``ref`` from which anyone can re-derive it, and its answer, with reasoning-gym alone::

    reasoning_gym.create_dataset(ref["task"], seed=ref["seed"], size=ref["index"] + 1,
                                 **ref["config"])[ref["index"]]

Scoring is reasoning-gym's own ``score_answer`` for the task after answer extraction, with the
scorers that would execute answer text made safe (``sapo_env.scoring.safe_scorers``) and every
completion scored under ``sapo_env.scoring.guard`` (size and time limits, failures score 0).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sapo_env.config import MAX_QUESTIONS_PER_STREAM, SwarmConfig, TaskSpec
from sapo_env.rng_state import generator_from_state, generator_state
from sapo_env.scoring.answers import AnswerExtractor
from sapo_env.scoring.datasets import (  # noqa: F401 - generate importable from here too
    DrawnQuestion,
    cached_dataset,
    cached_entry,
    dataset_for,
    freeze,
    generate,
    resolve,
)
from sapo_env.scoring.guard import DEFAULT_LIMITS, ScoringLimits
from sapo_env.types import Question, QuestionRef
from sapo_env.validation import check_int

logger = logging.getLogger(__name__)

# Consecutive generator failures tolerated before a task is declared broken.
_MAX_SKIPS = 100
# Largest seed block index: keeps every seed below 2**62 (JSON-safe, fits int64 spaces).
_MAX_BLOCK = 2**62 // MAX_QUESTIONS_PER_STREAM
# The last block is reserved for held-out evaluation questions (sapo_env.runtime.metrics): training
# streams always take blocks below it, so no training question is ever a held-out one.
HELD_OUT_BLOCK = _MAX_BLOCK - 1


def reference_answer(entry: dict[str, Any]) -> str:
    """The answer to show for a reasoning-gym entry.

    Tasks whose scorer checks validity rather than equality (propositional_logic) have
    ``answer=None``; their metadata holds an example of a correct answer, which is used instead.
    """
    if entry.get("answer") is not None:
        return str(entry["answer"])
    return str(entry.get("metadata", {}).get("example_answer", ""))


class QuestionStream:
    """Consecutive items of one task's dataset under one seed."""

    def __init__(self, spec: TaskSpec, seed: int):
        self.spec = spec
        self.seed = seed
        self.config_items = freeze(spec.config)
        self.dataset = cached_dataset(spec.name, self.config_items, seed)
        self.next_index = 0

    def draw(self) -> DrawnQuestion:
        for _ in range(_MAX_SKIPS):
            index = self.next_index
            self.next_index += 1
            try:
                entry = cached_entry(self.spec.name, self.config_items, self.seed, index)
                break
            except Exception as error:  # noqa: BLE001 (a reasoning-gym generator bug)
                # A few items crash their generator (decimal_arithmetic divides by zero about
                # once in 10,000). Skipping to the next index is deterministic, and the ref
                # records the index actually used, so re-deriving still works.
                logger.warning("reasoning-gym %s failed to generate item %d of seed %d (%s: "
                               "%s); skipping it", self.spec.name, index, self.seed,
                               type(error).__name__, error)
        else:
            raise RuntimeError(f"reasoning-gym task {self.spec.name!r} failed to generate "
                               f"{_MAX_SKIPS} items in a row; check its config")
        ref: QuestionRef = {
            "task": self.spec.name,
            "config": self.spec.config,
            "seed": self.seed,
            "index": index,
        }
        return DrawnQuestion(_question(ref, entry), entry, self.dataset)

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands, as plain data."""
        return {"task": self.spec.name, "seed": self.seed, "next_index": self.next_index}

    @classmethod
    def from_state_dict(cls, spec: TaskSpec, state: Any, where: str) -> QuestionStream:
        """The stream of ``spec`` that ``state`` describes (``ValueError`` naming ``where``)."""
        if not isinstance(state, Mapping) or set(state) != {"task", "seed", "next_index"}:
            raise ValueError(f"{where}: expected a dict with keys 'task', 'seed', 'next_index' "
                             f"(QuestionStream.state_dict), got {state!r:.80}")
        if state["task"] != spec.name:
            raise ValueError(f"{where}: is a stream of task {state['task']!r}, expected "
                             f"{spec.name!r} (the config's task list)")
        for key, top in (("seed", 2**62), ("next_index", MAX_QUESTIONS_PER_STREAM)):
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not 0 <= value < top:
                raise ValueError(f"{where}: {key} must be an int in [0, {top}), got {value!r}")
        stream = cls(spec, int(state["seed"]))
        stream.next_index = int(state["next_index"])
        return stream


def _question(ref: QuestionRef, entry: dict[str, Any]) -> Question:
    return {"id": f"{ref['task']}/{ref['seed']}/{ref['index']}", "task": ref["task"],
            "prompt": entry["question"], "ref": ref}


def redraw(ref: QuestionRef) -> DrawnQuestion:
    """The question a stream drew at ``ref``, as it was drawn (restoring a checkpoint)."""
    entry = resolve(ref)
    return DrawnQuestion(_question(ref, entry), entry, dataset_for(ref))


class QuestionSource:
    """Draws every node's questions each round, deterministically from a seed sequence."""

    def __init__(self, config: SwarmConfig, seed_sequence: np.random.SeedSequence):
        self.config = config
        task_seq, block_seq = seed_sequence.spawn(2)
        block_rng = np.random.default_rng(block_seq)
        # Owners of question streams: every node, or one shared owner for shared questions.
        owners = ("shared",) if config.shared_questions else config.agent_names
        n_streams = sum(len(config.tasks_of(o)) for o in owners)
        first_block = int(block_rng.integers(0, HELD_OUT_BLOCK - n_streams + 1))
        block = iter(range(first_block, first_block + n_streams))
        self._streams = {
            owner: [QuestionStream(spec, next(block) * MAX_QUESTIONS_PER_STREAM) for spec in
                    config.tasks_of(owner)]
            for owner in owners
        }
        self._task_rngs = {
            owner: np.random.default_rng(s)
            for owner, s in zip(owners, task_seq.spawn(len(owners)))
        }
        self._specs = {owner: config.tasks_of(owner) for owner in owners}

    def state_dict(self) -> dict[str, Any]:
        """Every stream's position and every owner's task generator, as plain data."""
        return {"streams": {owner: [s.state_dict() for s in streams]
                            for owner, streams in self._streams.items()},
                "task_rngs": {owner: generator_state(rng)
                              for owner, rng in self._task_rngs.items()}}

    def load_state_dict(self, state: Mapping[str, Any], where: str = "questions") -> None:
        """Continue from a :meth:`state_dict` of a source with the same config. A state that
        does not fit raises ``ValueError`` naming ``where`` and changes nothing."""
        owners = sorted(self._streams)
        if not isinstance(state, Mapping) or set(state) != {"streams", "task_rngs"}:
            raise ValueError(f"{where}: expected a dict with keys 'streams' and 'task_rngs' "
                             f"(QuestionSource.state_dict), got {state!r:.80}")
        for key in ("streams", "task_rngs"):
            if not isinstance(state[key], Mapping) or set(state[key]) != set(owners):
                got = list(state[key]) if isinstance(state[key], Mapping) else state[key]
                raise ValueError(f"{where}['{key}']: expected one entry per stream owner "
                                 f"{owners}, got {got!r:.80}")
        streams, rngs = {}, {}
        for owner in owners:
            specs, saved = self.config.tasks_of(owner), state["streams"][owner]
            if not isinstance(saved, (list, tuple)) or len(saved) != len(specs):
                raise ValueError(f"{where}['streams'][{owner!r}]: expected {len(specs)} streams "
                                 f"(one per task), got {saved!r:.80}")
            streams[owner] = [QuestionStream.from_state_dict(
                spec, s, f"{where}['streams'][{owner!r}][{k}]") for k, (spec, s) in
                enumerate(zip(specs, saved))]
            rngs[owner] = generator_from_state(state["task_rngs"][owner],
                                               f"{where}['task_rngs'][{owner!r}]")
        self._streams, self._task_rngs = streams, rngs

    def _draw_for(self, owner: str, count: int, round_: int) -> list[DrawnQuestion]:
        streams = self._streams[owner]
        weights = np.array([s.weight if s.first_round <= round_ else 0.0
                            for s in self._specs[owner]])
        choices = self._task_rngs[owner].choice(len(streams), size=count,
                                                p=weights / weights.sum())
        return [streams[c].draw() for c in choices]

    def draw_round(self, counts: Mapping[str, int], round_: int = 0
                   ) -> dict[str, list[DrawnQuestion]]:
        """The questions of round ``round_``: ``counts[node]`` for each node of ``counts``,
        from the tasks whose ``first_round`` has come.

        With shared questions every node gets the first ``counts[node]`` of one common draw.
        """
        if self.config.shared_questions:
            shared = self._draw_for("shared", max(counts.values(), default=0), round_)
            return {agent: shared[:count] for agent, count in counts.items()}
        return {agent: self._draw_for(agent, count, round_) for agent, count in counts.items()}


def score_completions(
    drawn: DrawnQuestion, completions: Sequence[str], extract: AnswerExtractor,
    limits: ScoringLimits = DEFAULT_LIMITS, failures: dict[str, int] | None = None,
) -> np.ndarray:
    """Verifier scores of a question's completions after answer extraction (``drawn.score``)."""
    return drawn.score(completions, extract, limits, failures)


# Training streams never use HELD_OUT_BLOCK, so held-out questions drawn from
# it are disjoint from every training question by construction.
_TASK_SLOTS = 64  # the held-out block is split into this many per-task seed ranges


def held_out_questions(config: SwarmConfig, n_questions: int = 64, seed: int = 0
                       ) -> list[DrawnQuestion]:
    """A fixed held-out question set for a swarm configuration.

    Tasks are drawn by the configuration's weights (``config.tasks``); seeds come from a seed
    block no training stream ever uses, so no held-out question is a training question. The
    same ``(config.tasks, n_questions, seed)`` gives the same set.
    """
    check_int("n_questions", n_questions, 1)
    specs = config.tasks
    if len(specs) > _TASK_SLOTS:
        raise ValueError(f"held-out evaluation supports at most {_TASK_SLOTS} tasks, "
                         f"got {len(specs)}")
    slot = MAX_QUESTIONS_PER_STREAM // _TASK_SLOTS
    if n_questions > slot // 2:
        raise ValueError(f"n_questions must be <= {slot // 2}, got {n_questions}")
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    weights = np.array([s.weight for s in specs])
    choices = rng.choice(len(specs), size=n_questions, p=weights / weights.sum())
    # one seed per task inside its slot, leaving room for n_questions consecutive items
    starts = [HELD_OUT_BLOCK * MAX_QUESTIONS_PER_STREAM + k * slot
              + int(rng.integers(0, slot - n_questions)) for k in range(len(specs))]
    streams = [QuestionStream(spec, start) for spec, start in zip(specs, starts)]
    return [streams[c].draw() for c in choices.tolist()]
