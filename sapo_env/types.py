"""The data that crosses the environment boundary, as typed dictionaries.

Observations, actions, groups and infos are plain ``dict``/``tuple``/``numpy`` values
(Gymnasium's ``Dict`` and ``Sequence`` spaces require exactly those types); these ``TypedDict``
classes document their keys for readers and type checkers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypedDict

import numpy as np
from typing_extensions import NotRequired


class QuestionRef(TypedDict):
    """Enough to re-derive a question and its answer with reasoning-gym alone.

    ``reasoning_gym.create_dataset(task, seed=seed, size=index + 1, **config)[index]``
    """

    task: str
    config: dict[str, Any]
    seed: int
    index: int


class Question(TypedDict):
    """One question of a node's batch for the round."""

    id: str  #: stable identity of the question: ``"{task}/{seed}/{index}"``
    task: str  #: reasoning-gym task name
    prompt: str  #: the question text (the user turn; the system prompt is separate)
    ref: QuestionRef


class Group(TypedDict):
    """One rollout: a question with its L completions, scored by the env's verifier."""

    id: str  #: ``"{source}/r{round}/q{k}"``
    source: str  #: node that generated the completions
    round: int  #: round in which they were generated
    task: str
    question: str  #: the prompt text the completions answer
    system_prompt: str  #: the system prompt they were written under (re-encoding needs it)
    answer: str  #: reference answer (an example of a correct one where the scorer checks validity)
    ref: QuestionRef
    completions: tuple[str, ...]
    rewards: np.ndarray  #: float32, shape (L,), verifier scores in [0, 1]
    advantages: np.ndarray  #: float32, shape (L,), group-relative advantages
    #: only where the sender sent them (``group.get("logprobs")`` is None otherwise): per
    #: completion, the sender's log-probability of each token it sampled, EOS included where
    #: the completion ended (read-only float32 arrays; :mod:`sapo_env.sender_logprobs`)
    logprobs: NotRequired[tuple[np.ndarray, ...]]
    #: only with ``logprobs``, if sent: the ids of those tokens (read-only int32 arrays)
    token_ids: NotRequired[tuple[np.ndarray, ...]]
    local: NotRequired[bool]  #: only inside ``batch``: True for the node's own groups
    #: only inside ``batch``, only on the groups of another node that replace one of the
    #: node's own all-fail groups (``SwarmConfig.rescue``): True
    rescue: NotRequired[bool]


class ActionMask(TypedDict):
    """Gymnasium's sample mask for the action space: ``action_space.sample(mask)`` draws a
    valid random action (``completions`` and ``share`` fixed to the round's question count)."""

    completions: tuple[int, None]
    num_external: None
    share: tuple[int, None]


class Observation(TypedDict):
    round: int
    system_prompt: str
    completions_per_question: int  #: L, completions expected per question
    train_budget: int  #: I + J, groups in each training set (the most J can be)
    num_external: int  #: J in force this round: this round's training set takes J external groups
    #: the questions to answer this round: I = train_budget - J of them under the paper's
    #: protocol (none when J = train_budget), questions_per_round under the fixed one
    questions: tuple[Question, ...]
    #: groups from other nodes now in the shared pool: a read-only sequence (a tuple, or a
    #: ``sapo_env.pool_view.PoolView`` of the pool, shared by every node's view)
    pool: Sequence[Group]
    batch: tuple[Group, ...]  #: training set assembled for this node at the last step
    action_mask: ActionMask  #: PettingZoo's convention, for sampling random valid actions


def action_mask(num_questions: int) -> ActionMask:
    """The sample mask of a round with ``num_questions`` questions."""
    return {"completions": (num_questions, None), "num_external": None,
            "share": (num_questions, None)}


def make_observation(
    *,
    round: int,
    system_prompt: str,
    completions_per_question: int,
    train_budget: int,
    num_external: int,
    questions: tuple[Question, ...],
    pool: Sequence[Group] = (),
    batch: tuple[Group, ...] = (),
) -> Observation:
    """A node's observation (the env's, and any code that asks an agent to act outside it,
    such as held-out evaluation); the action mask follows from the questions."""
    return {
        "round": round, "system_prompt": system_prompt,
        "completions_per_question": completions_per_question, "train_budget": train_budget,
        "num_external": num_external, "questions": questions, "pool": pool, "batch": batch,
        "action_mask": action_mask(len(questions)),
    }


class Action(TypedDict):
    """What a node does in a round.

    ``num_external`` always sets the node's J for its *next* round: J must be known before that
    round's questions are drawn, since under the paper's protocol the node then answers
    I = train_budget - J questions. The J of round 0 is ``SwarmConfig.num_external``; the J in
    force this round is the observation's ``num_external``.
    """

    completions: tuple[tuple[str, ...], ...]  #: one tuple of L strings per question, in order
    num_external: int  #: J of the node's next round, in [0, train_budget]
    share: NotRequired[Any]  #: one 0/1 per question: which groups to publish (default all)
    #: optional, per question, per completion: the log-probability of each sampled token at
    #: the sampling temperature, EOS included where it ended (finite, <= 0, at most
    #: ``max_completion_chars`` per completion); carried to receivers in the node's groups
    logprobs: NotRequired[Any]
    #: optional, only with ``logprobs``: the ids of those tokens (ints in [0, 2**31))
    token_ids: NotRequired[Any]


class NodeInfo(TypedDict, total=False):
    """``infos[node]`` of a step: the node's facts of the round, deterministic values only (no
    timings), as a plain ``dict``.

    ``reset`` gives every node an empty info. In a step, every node returned gets ``status``,
    ``num_external`` and ``generated_completions``; a node that played the round (``status ==
    "online"``) gets every key below, one that did not (offline, pending, left or just joined:
    :mod:`sapo_env.churn`) only those three. A value of None means "nothing to average".
    """

    status: Literal["online", "offline", "pending", "left", "joined"]  #: ``churn.STATUSES``
    num_external: int  #: J in force this round
    generated_completions: int  #: completions the node generated this round: its generation cost
    task_scores: dict[str, float]  #: mean score of its groups per task, tasks sorted by name
    local_groups: int  #: own groups in its training set (I, less any shortfall and rescues)
    external_groups: int  #: external groups in its training set
    local_shortfall: int  #: own groups asked for but not available (never padded)
    external_shortfall: int  #: external groups asked for but not available (never padded)
    pool_size: int  #: external candidates before the filter
    pool_size_filtered: int  #: external candidates after the filter
    #: the filtered candidates' mean group reward (None: no candidate)
    pool_mean_reward_filtered: float | None
    zero_advantage_fraction: float | None  #: of its own groups (None: it answered nothing)
    all_fail_groups: int  #: own groups in which no completion scored 1
    #: of the all-fail groups' questions, the share another node solved this round (None:
    #: no all-fail group; :mod:`sapo_env.rescue`)
    complementarity: float | None
    rescued_groups: int  #: own groups replaced by rescue groups (``SwarmConfig.rescue``)
    #: mean reward over every completion of its training set, received groups included (None:
    #: an empty training set)
    batch_mean_reward: float | None
    shared_groups: int  #: own groups it chose to share this round
    staleness: int  #: rounds its answers arrived late (0 but for a pending node's late action)
    stale_unshared: int  #: shared groups too old for the pool window, so not published
    shared_mean_reward: float | None  #: mean reward of its shared groups (None: none shared)
    #: its groups in other nodes' training sets (a group two nodes took counts twice)
    taken_by_others: int
    #: its completions that scored 0 because scoring failed, by reason
    #: (``sapo_env.scoring.guard.FAILURE_REASONS``: every reason, 0 included)
    scoring_failures: dict[str, int]
    no_answer: int  #: its completions from which ``answer_format`` read no answer
    rejected_groups: int  #: its published groups that packet verification dropped
    rejected_groups_swarm: int  #: the round's published groups that verification dropped


StepResult = tuple[dict[str, Observation], dict[str, float], dict[str, bool], dict[str, bool],
                   dict[str, NodeInfo]]
"""What ``env.step`` returns, by node: observations, rewards, terminations, truncations and
infos (PettingZoo's order)."""
