"""Running a swarm in the env: ``run(env, agents)`` drives the act -> step -> learn loop.

    >>> import sapo_env.runtime
    >>> from sapo_env.runtime import run
    >>> from agents import DemonstratorAgent
    >>> env = sapo_env.parallel_env(n=2, max_rounds=3)
    >>> history = run(env, [DemonstratorAgent(seed=0), DemonstratorAgent(seed=1)], seed=0,
    ...               progress=False)
    >>> history.rewards.shape
    (3, 2)

What is here: the loop (``runner``), how agents are called (``agent_calls``: the protocols an
agent, a joint actor or a remote node implements), asynchronous rounds (``asynchronous``),
checkpoints (``checkpoint``), what a run records (``records``), callbacks that evaluate on
held-out questions (``held_out``) or write TensorBoard runs (``tensorboard``), and the
measures of a finished run (``metrics``). It builds on the env (``sapo_env``), which never
imports it.
"""

from __future__ import annotations

from sapo_env.runtime.agent_calls import Agent, AgentCalls, NodeFailure
from sapo_env.runtime.checkpoint import Checkpoint
from sapo_env.runtime.records import Callback, History, RatioPolicy, RoundRecord
from sapo_env.runtime.runner import play_round, run

__all__ = [
    "Agent",
    "AgentCalls",
    "Callback",
    "Checkpoint",
    "History",
    "NodeFailure",
    "RatioPolicy",
    "RoundRecord",
    "play_round",
    "run",
]
