"""The ratio-policy registry: every ratio policy by label, registered where it is defined.

A policy class registers itself with the :func:`ratio_policy` decorator: its label (what
``sapo-env bench-ratio --policies`` calls it), its kind (``KINDS``), the rule it follows in one
line (the table of docs/ratio-policies.md is made from the entries), and what
``sapo-env bench-ratio`` needs to build and tune it. Importing :mod:`agents.ratio` registers
the built-in ones; adding a policy is one module whose class is decorated::

    @ratio_policy("my-rule", kind="rule", rule="J + 1 whenever the pool beats my reward")
    class MyRule:
        def choose(self, observation): ...
        def update(self, reward, info): ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sapo_env.registry import Registry, caller_place

KINDS: dict[str, str] = {
    "fixed": "J set in advance, whatever happens",
    "rule": "a hand-written rule on the node's rewards and the pool",
    "bandit": "a bandit over J, learning from the payoff of each J",
    "contextual": "a contextual bandit over J, reading the node's situation",
    "learned": "a policy trained elsewhere (on the meta env)",
}
"""The kinds of ratio policy, in the order lists and tables give them."""
NEEDS: dict[str, str] = {
    "seed": "a numpy.random.SeedSequence for its randomness",
    "max_rounds": "the rounds of the run",
    "path": "the file of a trained model (bench-ratio's --sb3-model)",
}
"""What a policy may need, beyond its settings, to be built for one node of one run."""
GRID_ARMS = [0, 2, 4, 6, 7]
"""The J values of bench-ratio's fixed ratios (J = 8 answers nothing and earns 0), as a tuning
setting's arms."""


@dataclass(frozen=True)
class RatioPolicyEntry:
    """One ratio policy, as the registry keeps it."""

    label: str
    """Its name in ``sapo-env bench-ratio`` (``FixedRatio``'s and ``ScheduledRatio``'s are the
    forms of their labels, ``fixed-J`` and ``schedule-J1,J2,...``, which bench-ratio
    parses)."""
    kind: str
    """One of ``KINDS``."""
    rule: str
    """What it does, in one line (markdown)."""
    shown_as: str
    """How the docs table writes it built: ``PoolQuality()``."""
    make: Callable[..., Any]
    """Builds the policy: ``make(**needs, **settings)``."""
    needs: tuple[str, ...] = ()
    """Of ``NEEDS``: what ``make`` takes beyond the settings."""
    tuning: tuple[Mapping[str, Any], ...] = ()
    """The settings bench-ratio's tuning tries (the first its defaults), as plain JSON data;
    a policy with a tuning is played by bench-ratio by default."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"ratio policy {self.label!r}: kind must be one of {list(KINDS)}, "
                             f"got {self.kind!r}")
        unknown = [n for n in self.needs if n not in NEEDS]
        if unknown:
            raise ValueError(f"ratio policy {self.label!r}: needs {unknown} are not among "
                             f"{list(NEEDS)}")
        object.__setattr__(self, "needs", tuple(self.needs))
        object.__setattr__(self, "tuning", tuple(self.tuning))


REGISTRY: Registry[RatioPolicyEntry] = Registry("ratio policy")
C = TypeVar("C", bound=type)


def ratio_policy(label: str, *, kind: str, rule: str, shown_as: str | None = None,
                 make: str | None = None, needs: tuple[str, ...] = (),
                 tuning: tuple[Mapping[str, Any], ...] = ()) -> Callable[[C], C]:
    """A class decorator registering the class as the ratio policy ``label`` (a
    ``RatioPolicyEntry``; ``shown_as`` defaults to ``Name()``, ``make`` names a classmethod to
    build it with instead of the class). A label registered from two places is a
    ``ValueError`` naming both."""
    place = caller_place()

    def register(cls: C) -> C:
        REGISTRY.add(label, RatioPolicyEntry(
            label, kind, rule, shown_as or f"{cls.__name__}()",
            getattr(cls, make) if make else cls, needs, tuning), place)
        return cls

    return register


def ratio_policies(kind: str | None = None) -> tuple[RatioPolicyEntry, ...]:
    """The registered policies (of ``kind``), the kinds in ``KINDS``' order, each kind's in
    registration order."""
    return tuple(e for k in KINDS if kind in (None, k) for e in REGISTRY.values()
                 if e.kind == k)
