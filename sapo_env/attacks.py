"""The attack registry: every hostile node's attack by name, registered where it is defined.

Three kinds (``KINDS``): ``packet`` attacks forge what a node sends on the wire, inside the env
(``SwarmConfig.adversaries``; :mod:`sapo_env.defenses.transport_attacks` defines and registers
them); ``text`` attacks are hostile agents whose text the env scores and publishes as any node's
(:mod:`agents.hostile.adversarial`); ``remote`` attacks are remote nodes that send plain data the
runner screens (:mod:`agents.hostile.remote_junk`). An ``Attack`` entry says what the attack does
and models (the table of docs/hostile-nodes.md is made from the entries) and what the attack
experiment, ``sapo-env attack``, needs to run it.

The env reads only the names of the ``packet`` attacks (``check_adversaries``); it registers
them when ``sapo_env`` is imported. The agents' attacks are registered when their modules are
imported (the attack experiment imports them); this module imports nothing of the env's
above it, so that the config can check names here.

Adding an attack is one module: a transport attack decorated with
:func:`sapo_env.defenses.transport_attacks.transport_attack`, or an agent's module calling
``register_attack(Attack(name, "text", ..., swarm=...))``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sapo_env.registry import NamesView, Registry, caller_place

KINDS: dict[str, str] = {
    "packet": "packets forged on the wire, inside the env (SwarmConfig.adversaries)",
    "text": "a hostile agent: text the env scores and publishes as any node's",
    "remote": "a remote node sending plain data that the runner screens",
}
"""The kinds of attack, in the order lists and tables give them."""

SwarmBuilder = Callable[[Mapping[str, Any], str, Sequence[str], Any], dict[str, Any]]
"""``(agents, attack, nodes, seed) -> agents``: the swarm with ``nodes`` made hostile by the
attack named ``attack`` (``seed`` a ``numpy.random.SeedSequence`` for their randomness)."""


@dataclass(frozen=True)
class Attack:
    """One attack, as the registry keeps it."""

    name: str
    """What ``SwarmConfig.adversaries``, ``sapo-env attack --attacks`` and the docs call it."""
    kind: str
    """One of ``KINDS``."""
    does: str
    """What it does, in one line (markdown)."""
    models: str
    """What it models, in one line (markdown)."""
    swarm: SwarmBuilder | None = None
    """For ``text`` and ``remote`` attacks: how the attack experiment makes nodes hostile
    (None for ``packet`` attacks, which the env applies)."""
    experiment_env: Mapping[str, Any] = field(default_factory=dict)
    """``SwarmConfig`` settings the attack experiment's runs of this attack add."""
    experiment_j: int | None = None
    """The J its nodes start with in the attack experiment (None: the honest nodes')."""
    in_grid: bool = True
    """Whether ``sapo-env attack`` runs it by default (False: only when named in
    ``--attacks``)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"attack {self.name!r}: kind must be one of {list(KINDS)}, got "
                             f"{self.kind!r}")
        if (self.swarm is None) != (self.kind == "packet"):
            raise ValueError(f"attack {self.name!r}: a {self.kind} attack needs "
                             f"{'no' if self.kind == 'packet' else 'a'} swarm builder")
        object.__setattr__(self, "experiment_env", dict(self.experiment_env))


REGISTRY: Registry[Attack] = Registry("attack")


def register_attack(attack: Attack, place: str | None = None) -> Attack:
    """Register ``attack`` (see ``Registry.add``); ``place`` defaults to the caller's
    ``module:line``."""
    return REGISTRY.add(attack.name, attack, place or caller_place())


def attacks(kind: str | None = None) -> tuple[Attack, ...]:
    """The registered attacks (of ``kind``), the kinds in ``KINDS``' order, each kind's in
    registration order."""
    return tuple(a for k in KINDS if kind in (None, k) for a in REGISTRY.values()
                 if a.kind == k)


def transport_attack_names() -> tuple[str, ...]:
    """Every attack ``SwarmConfig.adversaries`` may name: the ``packet`` attacks."""
    return tuple(a.name for a in attacks("packet"))


TransportAttack = str
"""A ``packet`` attack's name (``transport_attack_names()`` lists them)."""
TRANSPORT_ATTACK_NAMES = NamesView(transport_attack_names)
"""Every attack ``SwarmConfig.adversaries`` may name, as registered when read."""


def check_adversaries(adversaries: Any, names: Sequence[str]) -> dict[str, str] | None:
    """``SwarmConfig.adversaries`` validated: known nodes, registered ``packet`` attacks."""
    if adversaries is None:
        return None
    if not isinstance(adversaries, Mapping):
        raise ValueError(f"adversaries must be a mapping node -> attack, got {adversaries!r}")
    known = transport_attack_names()
    unknown = sorted(set(adversaries) - set(names), key=str)
    bad = sorted(set(map(str, adversaries.values())) - set(known))
    if unknown or bad:
        raise ValueError(f"adversaries: unknown nodes {unknown} (expected node_0..node_"
                         f"{len(names) - 1}) or attacks {bad} (expected one of "
                         f"{sorted(known)})")
    return dict(adversaries)
