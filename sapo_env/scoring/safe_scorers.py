"""reasoning-gym scorers that evaluate answer text, made safe; installed with reasoning-gym's
other fixes when sapo-env first loads it (``sapo_env.scoring.rg_fixes.load_reasoning_gym``).

A completion is untrusted text, and some of reasoning-gym's scorers execute it: they read an
answer with Python's ``eval`` or with sympy's ``parse_expr``, which turns the text into Python
source and evaluates it (``__import__('os').system(...)`` would run; ``9**9**9**9`` would
compute for ever). Every such call reachable from a ``score_answer`` of reasoning-gym 0.1.19 (how
they were found: docs/provenance.md, "Scoring limits") goes through
``sapo_env.scoring.safe_parsing``, which evaluates nothing. One paper task is also fixed for cost.
Four scorers are rewritten or wrapped here, so the reasoning-gym versions are pinned (0.1.19 to
0.1.25) and a test fails if one of those four changes upstream:

=========================  ===============================  =====================================
task                       reads the answer with            now
=========================  ===============================  =====================================
binary_matrix (paper),     ``eval`` (a Python list, for     ``literal``: the same value for any
n_queens, spiral_matrix,   partial credit)                  literal; an expression such as
string_insertion                                            ``[[0]*3]*3`` is not read (scores 0)
number_sorting             ``eval`` of its own reference    ``literal`` (same value)
bitwise_arithmetic         ``eval`` of its own problem      ``integer_arithmetic`` (same value)
countdown, puzzle24        ``sympy.parse_expr``             ``sympy_expression``
simple_integration,        ``sympy.parse_expr``             the same scorer with
intermediate_integration,                                   ``sympy_expression``
polynomial_multiplication
propositional_logic        its own parser, O(n**2), and a   ``propositional_expression``, O(n log
(paper)                    truth table of 2**n rows for n   n); more than ``MAX_EXTRA_PROPOSITIONS``
                           propositions                     propositions besides the task's
                                                            variables score 0
=========================  ===============================  =====================================

For the modules that call ``eval`` or a module-level ``parse_expr``, that name is bound in the
module itself (module globals come before builtins), so reasoning-gym's scorer runs unchanged;
the scorers that call ``sympy.parse_expr`` through the sympy module are replaced by the same
logic written with ``sympy_expression``; ``restore()`` puts reasoning-gym's own back.

The contract: never stricter than reasoning-gym on an answer an honest model writes, and
bounded on any other. ``sympy_expression`` reads every form ``parse_expr`` reads for these
tasks' answers (``pow(x, 5)``, ``Pow(x, 2)``, ``cbrt(x)``, ``root(x, 3)``, ``abs``, ``Max``,
``Min``, ``sign``, ``floor``, ``factorial``, ``Add(...)``, ...: the names of
``sapo_env.scoring.sympy_whitelist``) to the same expression, so the scores are reasoning-gym's; it
refuses, and the scorers score 0, only what no answer needs: other names, attributes,
keyword arguments, text as code (``S("...")``), and numbers beyond the bounds of
``sympy_whitelist`` (exponents over 1000, exact numbers over 8192 bits, factorials of numbers
over 1000), each refused before it is computed. ``tests/test_safe_scoring.py`` checks reference
answers and typical wrong answers of every patched task against the original scorers, and
``tests/test_safe_scorers_differential.py`` 300 entries of each task ``_SCORERS`` replaces,
with rewritten forms and wrong answers.

Scorers that raise, recurse without bound or run long on other crafted text are not rewritten here:
``sapo_env.scoring.guard`` bounds every scorer's time and input size and scores their failures 0.
The scorers that need it, on hostile answers of up to 2048 characters: coin_flip
(``Fraction('1e999999999')`` computes 10**999999999; stopped by the time limit),
propositional_logic (RecursionError past ~1000 nested brackets or connectives), calendar_arithmetic
(OverflowError on a huge integer), prime_factorization and boxnet (raise on malformed answers).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import sympy
from reasoning_gym.algebra import (
    intermediate_integration,
    polynomial_multiplication,
    simple_integration,
)
from reasoning_gym.algorithmic import binary_matrix, number_sorting, spiral_matrix, string_insertion
from reasoning_gym.arithmetic import bitwise_arithmetic
from reasoning_gym.games import countdown, n_queens, puzzle24
from reasoning_gym.logic import propositional_logic

from sapo_env.scoring.safe_parsing import (
    integer_arithmetic,
    literal,
    propositional_expression,
    sympy_expression,
)

MAX_EXTRA_PROPOSITIONS = 4
"""Most propositions a propositional_logic answer may name besides the task's variables."""
_CACHED_CHARS = 256  # longer texts are parsed every time (a cache of them would hold megabytes)


def parse_proposition(text: str) -> Any:
    """propositional_logic's ``parse_expr``: ``propositional_expression``, remembered for short
    texts (its scorer parses every premise again for every completion, and the same answer
    twice here)."""
    if isinstance(text, str) and len(text) <= _CACHED_CHARS:
        return _remembered_proposition(text)
    return propositional_expression(text)


@lru_cache(maxsize=4096)
def _remembered_proposition(text: str) -> Any:
    return propositional_expression(text)


# module -> {global name: safe replacement}
_MODULE_NAMES = {
    binary_matrix: {"eval": literal},
    n_queens: {"eval": literal},
    spiral_matrix: {"eval": literal},
    string_insertion: {"eval": literal},
    number_sorting: {"eval": literal},
    bitwise_arithmetic: {"eval": integer_arithmetic},
    countdown: {"parse_expr": sympy_expression},
    puzzle24: {"parse_expr": sympy_expression},
    propositional_logic: {"parse_expr": parse_proposition},
}


def score_integration(self: Any, answer: str | None, entry: dict[str, Any]) -> float:
    """simple_integration's and intermediate_integration's scorer: 1.0 when the derivative of
    the answer (the constant ``C`` allowed) simplifies to the integrand, else 0.0."""
    if not isinstance(answer, str):
        return 0.0
    try:
        metadata = entry["metadata"]
        x = sympy.Symbol(metadata["variable"])
        expression = sympy_expression(answer, {metadata["variable"]: x, "C": sympy.Symbol("C")})
        integrand = sympy_expression(metadata["integrand"], {metadata["variable"]: x})
        return 1.0 if sympy.simplify(sympy.diff(expression, x) - integrand) == 0 else 0.0
    except Exception:  # noqa: BLE001 (as reasoning-gym: an unreadable answer is wrong)
        return 0.0


def score_polynomial(self: Any, answer: str | None, entry: dict[str, Any]) -> float:
    """polynomial_multiplication's scorer: 1.0 when the answer parses to the same expression as
    the reference (sympy's structural equality), else 0.0."""
    if answer is None:
        return 0.0
    try:
        return 1.0 if sympy_expression(answer) == sympy_expression(entry["answer"]) else 0.0
    except Exception:  # noqa: BLE001 (as reasoning-gym: an unreadable answer is wrong)
        return 0.0


def score_propositional_logic(self: Any, answer: str | None, entry: dict[str, Any]) -> float:
    """propositional_logic's scorer, except that an answer naming more than
    ``MAX_EXTRA_PROPOSITIONS`` propositions besides the task's variables scores 0.0: the scorer
    checks validity with a truth table of 2**(propositions) rows, built as a list."""
    if isinstance(answer, str):
        try:
            expression = parse_proposition(answer)
        except ValueError:
            expression = None  # reasoning-gym's scorer gives it its own verdict
        if expression is not None:
            extra = _propositions(expression) - set(entry["metadata"]["variables"])
            if len(extra) > MAX_EXTRA_PROPOSITIONS:
                return 0.0
    return _ORIGINAL_SCORERS[propositional_logic.PropositionalLogicDataset](self, answer, entry)


def _propositions(expression: Any) -> set[str]:
    names, stack = set(), [expression]
    while stack:
        node = stack.pop()
        if node.operator is None:
            names.add(node.left)
        else:
            stack.extend(n for n in (node.left, node.right) if n is not None)
    return names


_SCORERS: dict[type, Callable[..., float]] = {
    propositional_logic.PropositionalLogicDataset: score_propositional_logic,
    simple_integration.SimpleIntegrationDataset: score_integration,
    intermediate_integration.IntermediateIntegrationDataset: score_integration,
    polynomial_multiplication.PolynomialMultiplicationDataset: score_polynomial,
}

# reasoning-gym's own, for restore(); None: the name was not bound in the module (eval)
_ORIGINAL_NAMES = {(module, name): module.__dict__.get(name)
                   for module, names in _MODULE_NAMES.items() for name in names}
_ORIGINAL_SCORERS = {cls: cls.__dict__["score_answer"] for cls in _SCORERS}


def apply() -> None:
    """Install the safe parsers and scorers (idempotent)."""
    for module, names in _MODULE_NAMES.items():
        for name, replacement in names.items():
            setattr(module, name, replacement)
    for cls, scorer in _SCORERS.items():
        cls.score_answer = scorer


def restore() -> None:
    """Put reasoning-gym's own parsers and scorers back, to measure or compare them; they
    execute answer text: ``apply()`` again before scoring anything untrusted."""
    for (module, name), original in _ORIGINAL_NAMES.items():
        if original is None:
            module.__dict__.pop(name, None)  # the builtin again
        else:
            setattr(module, name, original)
    for cls, scorer in _ORIGINAL_SCORERS.items():
        cls.score_answer = scorer
