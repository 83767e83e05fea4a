"""What ``sapo-env attack`` runs: the attacks, the defenses, the grid, the sweep's settings.

Every run is one swarm of simulated learners under the paper's protocol (every honest node at
4/4) in which the last ``round(fraction * n)`` nodes attack (``sapo_env.defenses.transport_attacks``
picks them); the others are the honest nodes whose reward is measured.

Attacks: every attack of the registry (:mod:`sapo_env.attacks`), each registered where it is
defined: forged packets (``SwarmConfig.adversaries``, :mod:`sapo_env.defenses.transport_attacks`,
whose attacks' docstrings say what each models and what stops it); agents
(:mod:`agents.hostile.adversarial`), a free rider at J = 8 from round 0 (its entry's
``experiment_j``); remote nodes that send plain data the env refuses (``REMOTE_ATTACKS``,
:mod:`agents.hostile.remote_junk`), screened by the runner. ``ALL_ATTACKS`` are those the experiment
can run (``--attacks``' choices), the kinds in the registry's order; ``ATTACKS``, the ones it
runs by default, all but those registered with ``in_grid=False`` (``misleading``).

``ATTACK_ENV`` are env settings an attack's runs add, with and without defenses (its entry's
``experiment_env``):
``slow_packets`` runs give the round a scoring budget of ``SLOW_PACKETS_ROUND_BUDGET``
(``round_score_budget``: each of the 10 nodes gets a tenth of it; the env's default is no
round budget and 10 s a node). Each slow sender spends its whole share every round it is
verified, and all of them together at most the round budget, however many there are; at
10 s a node the attack's 18 runs would take about 12 hours. An honest node here spends at
most 5 ms a round scoring, well within its share.

Defenses (``DEFENSES``), each a set of switches:

==============  ============================================================================
``none``        nothing checked: ``verify_packets=False``, uniform sampling, no cap, no
                log-probability check (how the paper's reference code trusted packets)
``verify``      ``verify_packets=True`` (the env's default)
``reputation``  ``external_sampling="reputation"``
``cap``         ``max_external_per_source=1``
``logprob``     the learners' ``min_external_logprob=-10`` (per choice)
``all``         the four together
==============  ============================================================================

The grid: every attack at every fraction with ``none`` and ``all``; at ``ablation_fraction``
(30%) each single defense against the attacks it is meant to stop (``TARGETS``) and the
honest nodes alone (``ABSENT``); and the clean swarm (no adversary) with ``none`` and
``all``. The clean swarm's honest nodes (the same names) are each run's baseline, paired by
seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.hostile import adversarial, remote_junk  # noqa: F401 - they register their attacks
from sapo_env.attacks import REGISTRY, Attack, attacks
from sapo_env.defenses.transport_attacks import (  # noqa: F401 - importable from here too
    SLOW_PACKETS_ROUND_BUDGET,
    adversary_nodes,
)
from sapo_env.registry import NamesView, TableView
from sapo_env.validation import check_int
from sapo_experiments.sweep import RunSpecBase, SweepConfig, run_key

ALL_ATTACKS = NamesView(lambda: [a.name for a in attacks()])
"""Every registered attack, as registered when read: what ``attacks`` may name."""
ATTACKS = NamesView(lambda: [a.name for a in attacks() if a.in_grid])
"""The attacks run by default."""
REMOTE_ATTACKS = NamesView(lambda: [a.name for a in attacks("remote")])
"""Attacks by remote nodes, which the runner screens."""
ATTACK_ENV = TableView(lambda: {a.name: a.experiment_env for a in attacks()
                                if a.experiment_env})
"""Env settings an attack's runs add (see the module docstring)."""
CLEAN = "clean"  #: the attack label of the swarm without adversaries
ABSENT = "absent"
"""The attack label of the honest nodes alone: the adversaries' places left empty (a swarm of
n - k nodes), the most a defense that shuts the adversaries out can give back."""
LOGPROB_THRESHOLD = -10.0  #: the ``logprob`` defense's threshold, per choice
DEFENSES: dict[str, dict[str, Any]] = {
    "none": {"verify_packets": False},
    "verify": {"verify_packets": True},
    "reputation": {"verify_packets": False, "external_sampling": "reputation"},
    "cap": {"verify_packets": False, "max_external_per_source": 1},
    "logprob": {"verify_packets": False, "min_external_logprob": LOGPROB_THRESHOLD},
    "all": {"verify_packets": True, "external_sampling": "reputation",
            "max_external_per_source": 1, "min_external_logprob": LOGPROB_THRESHOLD},
}
LEARNER_SWITCHES = ("min_external_logprob",)  #: defense switches of the learners, not the env
TARGETS: dict[str, tuple[str, ...]] = {
    "verify": ("forge_rewards", "duplicate_spam"),
    "reputation": ("duplicate_spam",),
    "cap": ("duplicate_spam",),
    "logprob": ("poison",),
}
"""The attacks each single defense is run against in the ablation: those it is meant to stop
(verification stops ``forge_metadata`` as it stops ``forge_rewards``; the full grid's ``all``
column shows it)."""
HONEST_J = 4  #: every honest node's J (the paper's best, 4/4)

FULL = {"rounds": 160, "seeds": 3, "fractions": (0.1, 0.3, 0.5), "ablation": True,
        "out": "out/attack"}
QUICK = {"rounds": 8, "seeds": 2, "fractions": (0.3,), "ablation": False,
         "out": "out/attack-quick"}


@dataclass(frozen=True)
class AttackConfig(SweepConfig):
    """Settings of the attack experiment (and ``SweepConfig``'s: ``out``, ``seeds``, ``rounds``,
    ``jobs``, ``ray``, ...). A field left at None takes ``FULL``'s value, or with
    ``quick=True`` (a smoke test of seconds, too short to conclude anything, as its table says;
    its time: BENCHMARKS.md, "Figures the code cites") ``QUICK``'s: seeds per cell 3, quick 2
    (paired across cells); rounds per run 160, quick 8; output folder ``out/attack``, quick
    ``out/attack-quick``."""

    attacks: tuple[str, ...] = ATTACKS
    """Attacks to run, of ``ALL_ATTACKS`` (default: ``ATTACKS``)."""
    fractions: tuple[float, ...] | None = None
    """Fractions of adversarial nodes (None: 10, 30 and 50%; quick: 30%)."""
    ablation: bool | None = None
    """Also run each single defense at ``ablation_fraction`` against its ``TARGETS`` (None:
    yes, quick no)."""
    ablation_fraction: float = 0.3
    """The fraction of the single-defense runs and of the goal."""
    n_agents: int = 10
    """Nodes per swarm; 10 makes 10, 30 and 50% whole nodes."""

    def presets(self) -> dict[str, Any]:
        return QUICK if self.quick else FULL

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [a for a in self.attacks if a not in ALL_ATTACKS]
        if unknown or not self.attacks:
            raise ValueError(f"attacks must be among {list(ALL_ATTACKS)}, got "
                             f"{list(self.attacks)}")
        object.__setattr__(self, "attacks", tuple(dict.fromkeys(self.attacks)))
        fractions = tuple(sorted(set(self.fractions)))
        for f in (*fractions, self.ablation_fraction):
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 < f < 1.0:
                raise ValueError(f"fractions must be numbers in (0, 1), got {f!r}")
        object.__setattr__(self, "fractions", fractions)
        check_int("n_agents", self.n_agents, 1)
        for f in (*fractions, self.ablation_fraction):
            k = len(adversary_nodes(self.n_agents, f))
            if k == 0 or k == self.n_agents:
                raise ValueError(f"fraction {f} of n_agents={self.n_agents} makes {k} "
                                 "adversaries: expected at least one adversary and one honest "
                                 "node")

    def specs(self) -> list[RunSpec]:
        """Every run of the grid (see the module docstring), clean runs first."""
        cells = [(CLEAN, 0.0, d) for d in ("none", "all")]
        cells += [(a, f, d) for a in self.attacks for f in self.fractions for d in ("none", "all")]
        if self.ablation:
            cells += [(a, self.ablation_fraction, d) for d, targets in TARGETS.items()
                      for a in targets if a in self.attacks]
            cells.append((ABSENT, self.ablation_fraction, "none"))
        cells = list(dict.fromkeys(cells))
        return [RunSpec(a, f, d, k, self) for a, f, d in cells for k in range(self.seeds)]

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "defenses": DEFENSES, "targets": TARGETS,
                "attack_env": dict(ATTACK_ENV)}


@dataclass(frozen=True)
class RunSpec(RunSpecBase):
    """One run: an attack by a fraction of the nodes against a defense, under one seed."""

    attack: str
    fraction: float
    defense: str
    seed_index: int
    config: AttackConfig

    @property
    def name(self) -> str:
        return f"{self.attack}_{round(self.fraction * 100)}_{self.defense}_seed{self.seed_index}"

    def entry(self) -> Attack | None:
        """The attack's registry entry (None for ``CLEAN`` and ``ABSENT``); a ``ValueError`` if
        this process has not registered it (an attack of a module the worker processes do not
        import: run it with ``jobs=1``)."""
        return None if self.attack in (CLEAN, ABSENT) else REGISTRY.get(self.attack)

    @property
    def kind(self) -> str | None:
        """The attack's kind (``sapo_env.attacks.KINDS``; None for ``CLEAN`` and ``ABSENT``)."""
        entry = self.entry()
        return entry and entry.kind

    @property
    def transport(self) -> bool:
        """Whether the attack forges packets (an env setting) rather than text (agents)."""
        return self.kind == "packet"

    @property
    def remote(self) -> bool:
        """Whether the adversaries are remote nodes the runner screens."""
        return self.kind == "remote"

    def adversaries(self) -> list[str]:
        """The adversarial nodes (for ``ABSENT``: the nodes left out)."""
        return [] if self.attack == CLEAN else adversary_nodes(self.config.n_agents,
                                                               self.fraction)

    def key(self) -> str:
        from agents.sim.simulated import SimulatedLearnerConfig

        c = self.config
        return run_key({"attack": self.attack, "fraction": self.fraction,
                        "defense": DEFENSES[self.defense], "seed": self.seed_index,
                        "base_seed": c.base_seed, "rounds": c.rounds, "n_agents": c.n_agents,
                        "learner": repr(SimulatedLearnerConfig()),
                        **({"env": ATTACK_ENV[self.attack]} if self.attack in ATTACK_ENV
                           else {})})
