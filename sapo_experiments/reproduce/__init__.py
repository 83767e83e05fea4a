"""Reproduce the SAPO paper's controlled experiment: table, figures and TensorBoard runs.

The paper (arXiv 2509.08721, Section 5) trains 8 nodes for 2000 rounds with I local and J
external groups per round, I + J = 8, and reports the cumulative reward of 8/0 (no sharing),
6/2, 4/4 and 2/6. In its protocol a node with J external groups answers only I questions itself
("each agent samples I specialties, receives one question per specialty"), so sharing saves
generation and the pool shrinks as the nodes take more. ``reproduce`` runs those four
configurations under that protocol (``protocol="fixed"``: every node answers 8 questions
whatever its J, the protocol of sapo-env before 0.2) plus two controls its reviewers asked
for, over several seeds:

- ``8/0 oversampled + filtered``: the no-sharing baseline draws 16 questions, drops its own
  zero-advantage groups and trains on up to 8 informative ones (at twice the generation cost),
  so that filtering alone could explain SAPO's gain if it did.
- ``4/4 self-replay``: the node answers 4 questions and fills the J slots from its *own*
  informative groups of the previous round (``external_source="self_replay"``), so that reuse
  alone cannot either.

and, when named in ``experiments``, two more: ``8/0 filtered`` (8 questions, own
zero-advantage groups dropped: the same budget; the dropped groups carry no gradient but count
in the loss's normaliser, so every step on the rest is longer) and ``4/4 answering 8`` (8
questions answered, 4 own + 4 external trained on: sharing without the saved generation).

With ``learner="sim"`` (the default) the nodes are ``agents.sim.simulated.SimulatedLearner``s: the
whole sweep takes minutes on a CPU (docs/reproducing.md gives its times), and says something about
sampling dynamics, nothing about language models. ``learner="grpo"`` runs ``agents.GRPOAgent``
language models (GPUs); any agent factory runs your own agents (``sapo_experiments.learners``).

Outputs in ``out``:
    ``results.md``, ``results.csv``   cumulative reward, mean and 95% CI over seeds, its ratio
                                      to 8/0 (paired by seed), the paper's numbers beside it,
                                      completions generated per node-round, reward per 1,000
                                      generated completions, the final moving reward and
                                      held-out pass@1
    ``figure1_trajectories.png``      per-node moving reward in seed 0, one panel per
                                      configuration, each node named with its kind
    ``figure2_moving_average.png``    moving-average swarm reward with the min/max band over
                                      nodes, all configurations in one panel
    ``held_out.png``                  held-out pass@1 at each evaluation (points, 95% CI
                                      bars across seeds) and, on an axis of its own, the
                                      training reward
    ``runs/<experiment>_seed<k>.npz`` one run's arrays (a finished run is reused on resume)
    ``tensorboard/<experiment>_seed<k>/``  ``tensorboard --logdir <out>/tensorboard``
    ``summary.json``                  the settings, date, machine and wall time

Command line: ``sapo-env reproduce [--quick] [--seeds 3] [--jobs 2] [--out DIR] ...``
(``python -m sapo_experiments.reproduce --help``); it first prints what the sweep trains and
about how long it will take (``plan``), and heads the table it prints as this run's.

Example::

    from sapo_experiments.reproduce import ReproduceConfig, reproduce
    result = reproduce(ReproduceConfig(quick=True, out="out/reproduce-quick"))
    print(result.table_markdown)

Modules: ``config`` (the configurations and the sweep's settings), ``sapo_experiments.learners``
(agent factories), ``sweep`` (one run, and the report of them all: ``sapo_experiments.sweep``
runs and resumes them), ``report`` (statistics, the table, what changed over the run),
``figures``, ``plan`` (what a sweep trains and for how long), ``cli``.
"""

from sapo_env.deprecation import renamed
from sapo_experiments.learners import AgentFactory, GRPOLearners, simulated_learners
from sapo_experiments.reproduce.config import (
    BY_LABEL,
    CONDITIONS,
    FULL,
    QUICK,
    TINY_FULL,
    TINY_QUICK,
    Condition,
    ReproduceConfig,
    RunSpec,
)
from sapo_experiments.reproduce.report import Row, mean_ci, smoothing_window, verdict
from sapo_experiments.reproduce.sweep import ReproduceResult, reproduce, run_one
from sapo_experiments.run_files import load_run
from sapo_experiments.sweep import seeds_of

__all__ = [
    "BY_LABEL",
    "CONDITIONS",
    "FULL",
    "QUICK",
    "TINY_FULL",
    "TINY_QUICK",
    "AgentFactory",
    "Condition",
    "GRPOLearners",
    "ReproduceConfig",
    "ReproduceResult",
    "Row",
    "RunSpec",
    "load_run",
    "mean_ci",
    "reproduce",
    "run_one",
    "seeds_of",
    "simulated_learners",
    "smoothing_window",
    "verdict",
]

__getattr__ = renamed(__name__, {"Experiment": "Condition", "EXPERIMENTS": "CONDITIONS"})
