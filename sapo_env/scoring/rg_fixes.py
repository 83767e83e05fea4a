"""reasoning-gym as sapo-env uses it: imported on first use, with fixes for behaviour that breaks
long runs installed.

``import reasoning_gym`` is slow (it imports every task module, and matplotlib through
cellpylib), so ``import sapo_env`` does not import it: :func:`load_reasoning_gym` does, the first
time the env needs a task (checking a ``SwarmConfig``'s tasks, drawing or re-deriving a
question), and installs the fixes then. Code that scores untrusted answers with reasoning-gym
directly should call it first.

Each fix keeps reasoning-gym's results exactly as they were (same questions, same answers, same
scores) and only removes a failure:

- ``basic_arithmetic``'s ``find_common_divisors`` lists the divisors of a gcd by trial division
  up to its square root. When an expression divides a product of five 4-digit numbers (the
  paper's config allows it) the gcd is ~1e18 and generating one question takes hours. The
  replacement factorises with sympy (a reasoning-gym dependency) and returns the same list in
  the same order, in about a millisecond.
- Scorers that execute answer text (``eval``, sympy's ``parse_expr``) read it with parsers that
  evaluate nothing: ``sapo_env.scoring.safe_scorers``, installed by ``apply`` too.

(Generator items that raise are handled where questions are drawn: ``sapo_env.tasks``.)
"""

from __future__ import annotations

import functools
import math
from types import ModuleType


@functools.cache
def load_reasoning_gym() -> ModuleType:
    """The ``reasoning_gym`` module, with the fixes installed (imported and installed once)."""
    import reasoning_gym

    apply()
    return reasoning_gym


def find_common_divisors(a: int, b: int) -> list[int]:
    """reasoning-gym's ``find_common_divisors``: each divisor d of gcd(a, b) with d*d <= gcd,
    in increasing order, each followed by gcd // d unless that is d itself."""
    from sympy import divisors  # loaded with reasoning-gym, which needs it

    gcd = math.gcd(a, b)
    found: list[int] = []
    for d in divisors(gcd) if gcd else ():
        if d * d > gcd:
            break
        found.append(d)
        if d * d != gcd:
            found.append(gcd // d)
    return found


def apply() -> None:
    """Install the fixes (idempotent); ``add_terms`` looks the function up in its module."""
    import reasoning_gym.arithmetic.basic_arithmetic as basic_arithmetic

    from sapo_env.scoring import safe_scorers

    basic_arithmetic.find_common_divisors = find_common_divisors
    safe_scorers.apply()
