"""The worlds ``sapo-env bench-ratio`` ranks ratio policies in: its tracks, by name (``TRACKS``).

``sim``, the world in which the paper's claim holds
    Simulated learners past the Aha (``BENCH_LEARNER``). A simulated node adopts any strategy
    it reads from another node, so sharing pays by construction, as the paper found (1.5-1.9x):
    the best fixed ratio shares in most scenarios. Eight scenarios, three by default (those
    with headroom); minutes of CPU. Its leaderboard is records/bench-ratio/.
``real``, the world this project measured
    Tiny transformer nodes trained by GRPO (``REAL_LEARNER``): every node of a seed starts
    from one common base stopped at 0.10 held-out accuracy on basic_arithmetic (two one-digit
    terms; a base per seed), received groups are weighted by truncated importance sampling
    against their sender's log-probs, matrix products run in bfloat16. Every node follows the
    policy (scenario ``all``); the fixed ratios are the paper's four, 8/0, 6/2, 4/4 and 2/6
    (``REAL_FIXED``); the oracle is the best of every two-phase schedule of them
    (``REAL_ORACLE_GRID``) on the training seeds; the built-in policies play with the settings
    the ``sim`` track tuned (its tuning budget is not spent again); held-out accuracy is
    evaluated before round 0, every 50 rounds and at the end. Hours of CPU; its plan and run
    arrays are records/bench-ratio-real/.

A track gives the learner, the scenarios, the fixed ratios, the oracle's search and the
presets (``full`` or ``quick``) of a ``BenchConfig`` field left at None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.sim.simulated_text import STRATEGIES
from sapo_experiments import learners
from sapo_experiments.bench_ratio.policies import ADAPTIVE, FIXED_GRID
from sapo_experiments.learners import AgentFactory

BENCH_LEARNER = learners.SimulatedLearners({
    "known_strategies": STRATEGIES, "start_tag_prob": 0.3, "slot_aligned_draws": True})
"""The ``sim`` track's nodes: simulated learners that start past the "Aha". Every node
knows every strategy from round 0 and tags 30% of its answers, so rewards move within the
first hundred rounds; and a question slot's random numbers do not depend on J, so the same
seed under two policies differs only through what the policies change. Why not the
calibrated default (``sapo_experiments.learners.simulated_learners``): over a few hundred rounds
its runs hinge on when a node stumbles on the best strategy (probability 5e-5 per completion),
so seeds disagree by a third of the cumulative reward and a J's effect is lost in that
(records/bench-ratio/README.md has the numbers); it learns over the paper's 2000 rounds, which a
benchmark of many policies and seeds cannot afford on a laptop."""

REAL_LEARNER = learners.TinyLearners(
    specialties=("basic_arithmetic",), common_base=True, target_accuracy=0.1,
    off_policy_correction="tis", dtype="bfloat16")
"""The ``real`` track's nodes (``sapo-env reproduce --learner tiny --tiny-common-base
--tiny-specialties basic_arithmetic --tiny-target-accuracy 0.1 --tiny-off-policy tis
--tiny-dtype bfloat16``): the sparse-signal regime of records/tiny-reproduce/sparse-signal/."""

DEFAULT_SCENARIOS = ("adversarial", "on-off", "drift")
"""The ``sim`` scenarios whose headroom the held-out seeds decide (records/bench-ratio/README.md):
in ``all``, ``focal``, ``mixed``, ``curriculum`` and ``churn`` the oracle does not beat the
best fixed ratio beyond its CI, so no policy can be ranked on adaptation there; they stay
playable with ``scenarios=``."""
FULL = {"rounds": 300, "seeds": 10, "tune_seeds": 3, "scenarios": DEFAULT_SCENARIOS,
        "out": "out/bench-ratio", "held_out_every": 50, "held_out_questions": 0}
QUICK = {"rounds": 40, "seeds": 2, "tune_seeds": 2, "scenarios": ("focal", "adversarial"),
         "out": "out/bench-ratio-quick", "held_out_every": 50, "held_out_questions": 0}

REAL_FIXED = (0, 2, 4, 6)
"""The ``real`` track's fixed ratios: the paper's 8/0, 6/2, 4/4 and 2/6."""
REAL_ORACLE_GRID = tuple((a, b) for a in REAL_FIXED for b in REAL_FIXED if a != b)
"""The ``real`` oracle's candidates: every schedule of two equal phases, each a J of
``REAL_FIXED`` (12), each played on the training seeds."""
REAL_FULL = {"rounds": 200, "seeds": 12, "tune_seeds": 2, "scenarios": ("all",),
             "out": "out/bench-ratio-real", "held_out_every": 50, "held_out_questions": 256}
REAL_QUICK = {"rounds": 30, "seeds": 4, "tune_seeds": 2, "scenarios": ("all",),
              "out": "out/bench-ratio-real-quick", "held_out_every": 50,
              "held_out_questions": 64}


@dataclass(frozen=True)
class Track:
    """A world to rank ratio policies in."""

    name: str
    world: str  #: one sentence: which world this is (the table's header says it)
    learner: AgentFactory
    full: Mapping[str, Any]  #: the ``BenchConfig`` presets of the full benchmark
    quick: Mapping[str, Any]  #: and of ``quick``
    fixed_grid: tuple[int, ...] = FIXED_GRID
    """The fixed ratios played and searched for the best, and the J of the oracle's phases."""
    oracle_grid: tuple[tuple[int, ...], ...] = ()
    """The oracle's candidates, each played whole on the training seeds (``()``: coordinate
    ascent over four equal phases, :mod:`sapo_experiments.bench_ratio.tuning`)."""
    quick_policies: tuple[str, ...] | None = None
    """The policies of ``quick`` (None: as the full benchmark's)."""
    tune_policies: bool = True
    """Tune the built-in policies here (False: they play with the ``sim`` track's settings)."""

    def presets(self, quick: bool) -> Mapping[str, Any]:
        return self.quick if quick else self.full

    def default_policies(self, quick: bool) -> tuple[str, ...]:
        """The policies played when none are given."""
        if quick and self.quick_policies is not None:
            return self.quick_policies
        return tuple(f"fixed-{j}" for j in self.fixed_grid) + tuple(ADAPTIVE)


TRACKS: dict[str, Track] = {t.name: t for t in [
    Track("sim", "simulated learners, the world in which the paper's claim (sharing pays "
          "1.5-1.9x) holds by construction", BENCH_LEARNER, FULL, QUICK),
    Track("real", "tiny real learners from one common base at 0.10 accuracy with TIS, the "
          "world this project measured (per round, 8/0 was the best fixed ratio in every "
          "regime it ran)", REAL_LEARNER, REAL_FULL, REAL_QUICK, REAL_FIXED,
          REAL_ORACLE_GRID, quick_policies=("fixed-0", "fixed-4"), tune_policies=False),
]}
