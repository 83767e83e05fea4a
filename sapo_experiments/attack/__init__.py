"""``sapo-env attack``: hostile nodes against a swarm of simulated learners, with and without
defenses.

Eighteen attacks (forged rewards, forged metadata, duplicate spam, packets slow to
re-verify, replays, floods of self-chosen questions, sybils, held-out questions, absurd rounds,
malformed packets, impersonation by name and framing on the wire; garbage text, confident wrong
answers, free riding, poisoned completions and answers slow to score as agents; plain-data
junk from remote nodes) by 10, 30 and 50% of the nodes, against no defense, every defense
(packet verification, reputation-weighted sampling, a per-source cap, the learners'
log-probability check) and each defense alone.
Reported: the honest nodes' cumulative reward with its 95% CI and as a share of the clean
swarm's, the poisoner's attack success, and whether honest nodes keep 90% of their clean
reward at 30% adversaries with the defenses on. ::

    from sapo_experiments.attack import AttackConfig, attack
    result = attack(AttackConfig(quick=True))
    print(result.table_markdown)

Modules: ``config`` (attacks, defenses, the grid), ``sweep`` (running and resuming),
``report`` (statistics, tables, verdict, figure), ``cli``.
"""

from sapo_env.deprecation import renamed
from sapo_experiments.attack.config import ATTACKS, DEFENSES, AttackConfig, RunSpec
from sapo_experiments.attack.report import ConditionResult
from sapo_experiments.attack.sweep import AttackResult, attack, run_one

__all__ = ["ATTACKS", "DEFENSES", "AttackConfig", "AttackResult", "ConditionResult", "RunSpec",
           "attack", "run_one"]

__getattr__ = renamed(__name__, {"Cell": "ConditionResult"})
