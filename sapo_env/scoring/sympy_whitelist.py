"""What a sympy answer may call, and the bounds that keep every step of it quick.

``sapo_env.scoring.safe_parsing.sympy_expression`` reads answer text as ``sympy.parse_expr``
does but evaluates the syntax tree itself, one operation at a time; this module is its
vocabulary. ``parse_expr`` resolves a name in ``from sympy import *`` and Python's builtin
functions, so an honest answer may spell a power ``x**5``, ``pow(x, 5)`` or ``Pow(x, 5)``, a
root ``sqrt(x)``, ``cbrt(x)``, ``root(x, 3)`` or ``x**(1/3)``, and reasoning-gym scores all of
them. Admitted (``FUNCTIONS``, ``CONSTANTS``), each with positional arguments only, at most as
many as the mathematical function takes (``sqrt(x, False)`` and ``Pow(x, 2, False)`` would pass
sympy's ``evaluate`` flag, which leaves numbers unevaluated where no bound below sees them):

- powers and roots: ``pow`` (Python's builtin; with a modulus as well), ``Pow``, ``sqrt``,
  ``cbrt``, ``root``, ``real_root``, ``exp``;
- sums and products written as calls: ``Add``, ``Mul``; ``S`` and ``sympify`` of anything but
  a string (``S("...")`` is sympy's ``eval`` of the text);
- the elementary functions: trigonometric, hyperbolic and their inverses, ``atan2``, ``log``
  (with a base) and ``ln``;
- ``abs`` / ``Abs``, ``sign``, ``floor``, ``ceiling``, ``frac``, ``re``, ``im``,
  ``conjugate``, ``Max`` / ``max``, ``Min`` / ``min`` (``parse_expr`` maps the builtins to
  these), ``Mod``;
- ``factorial`` (also ``n!``), ``factorial2`` (``n!!``), ``binomial``, ``gamma``;
- the special functions an antiderivative may need: ``erf``, ``erfc``, ``erfi``, ``Ei``,
  ``Si``, ``Ci``, ``Shi``, ``Chi``, ``li``, ``LambertW``, and ``Integral`` (reasoning-gym's own
  answers to intermediate_integration hold it where sympy found no closed form);
- constants: ``pi``, ``E``, ``I``, ``oo``, ``zoo``, ``nan``, ``EulerGamma``, ``GoldenRatio``,
  ``Catalan``.

Not admitted: any other name (``N(pi, 10**9)``, ``Function('f')``, ``integrate``, ``diff``,
``Derivative``), attributes (``S.Half``), keyword arguments. A call of a name sympy does not
know, which ``parse_expr`` makes an undefined function of (``f(x)``), is refused too: it scores
0 in reasoning-gym unless it cancels out.

Bounds, checked before a call computes (``check_power``, ``check_integer_part`` and each
function's own, ``Admitted.bound``) and on every result (``checked``), so that no step builds
a number too large to compute quickly, a computation in C that no signal interrupts:

- ``MAX_EXPONENT``: a numeric exponent of ``**``, ``pow``, ``Pow``, ``exp``, or one that
  ``root``, ``sqrt`` and ``cbrt`` build (``1/n``), at most this in magnitude, and the
  denominator of a rational one too (``root(2, 10**9)``); so is the argument of the other
  functions that grow like ``exp`` (``sinh``, ``cosh``, ``Ei``, ``Shi``, ``Chi``; the square
  of ``erfi``'s), which keeps every number an answer can build quick to evaluate to a few
  digits;
- ``MAX_BITS``: no exact number (numerator or denominator) of more bits, in a result, in the
  terms and factors sympy combined into it, or in a power about to be taken
  (bits of the base times the exponent); the numbers among the arguments of ``Add`` and
  ``Mul`` hold at most this many bits together; no decimal number beyond 2**MAX_BITS (or
  below 2**-MAX_BITS); no integer part taken (``floor``, ``ceiling``, ``frac``, ``Mod``,
  ``%``, ``//``, ``Integer(...)``, and the ``int()`` puzzle24's scorer takes of the whole
  answer) of an inexact number beyond 2**MAX_BITS, which sympy would evaluate to all its
  digits;
- ``MAX_FACTORIAL``: a numeric argument of ``factorial``, ``factorial2`` and ``gamma`` at
  most this in magnitude (``factorial(10**7)`` is refused, not computed), and ``binomial(n,
  k)`` of at most this many steps (the smaller of k and n - k) and ``MAX_BITS`` bits;
- ``MAX_LATTICE_ARGUMENTS``: ``Max`` and ``Min`` compare their arguments pairwise.

What the bounds leave to ``sapo_env.scoring.guard``'s time limit: sympy's own algorithms,
which can run long in Python on small crafted numbers (comparing or taking the integer part of
an irrational expression that nearly cancels, ``atan2`` or ``LambertW`` of nested constants),
as the integration scorers' ``simplify`` can on any crafted answer; Python code is
interrupted by the guard's timer, which a single huge multiplication would not be.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy

MAX_EXPONENT = 1000
"""Largest magnitude of a numeric exponent in a sympy expression (honest answers: <= 10)."""
MAX_BITS = 8192
"""Largest exact number (numerator or denominator, in bits) a sympy expression may hold
(about 2,500 digits; honest answers of the sympy-scored tasks stay under 64 bits)."""
MAX_FACTORIAL = 1000
"""Largest number whose factorial, double factorial, binomial or gamma may be taken
(1000! has 8,530 bits, more than ``MAX_BITS``: the result check refuses it anyway)."""
MAX_LATTICE_ARGUMENTS = 8
"""Most arguments of one ``Max`` or ``Min``, nested ones flattened into it (sympy compares
them pairwise to drop the redundant ones)."""


def _magnitude(number: Any) -> float:
    """|number| of a numeric sympy expression, as a float (inf when it has none)."""
    try:
        return abs(complex(number))
    except (TypeError, ValueError, OverflowError):
        return float("inf")


def _bits(number: Any) -> int:
    """Bits of the larger of the numerator and denominator of an exact number, else 0."""
    if isinstance(number, sympy.Rational):
        return max(number.p.bit_length(), number.q.bit_length())
    return 0


def binary_magnitude(number: Any) -> float:
    """log2 of |number| for a numeric sympy expression, from a 15-digit evaluation (mpmath
    keeps exponents exact, so this is quick for any number the bounds here let be built);
    -inf for 0 or what does not evaluate to a number, inf when the evaluation fails."""
    try:
        value = number.evalf(15)
    except Exception:  # noqa: BLE001 (sympy raises many kinds; refuse rather than guess)
        return float("inf")
    top = float("-inf")
    for term in sympy.Add.make_args(value):  # a + b*I
        coefficient = term.as_coeff_Mul()[0]
        if isinstance(coefficient, sympy.Float) and coefficient._mpf_[1]:
            _, _, exponent, bits = coefficient._mpf_
            top = max(top, exponent + bits)
    return top


def check_integer_part(*args: Any) -> None:
    """Refuse to take the integer part of an inexact number beyond 2**MAX_BITS (floor, ceiling,
    %, //, Integer(...), int()): sympy evaluates it to as many digits as it has."""
    for arg in args:
        if (isinstance(arg, sympy.Expr) and arg.is_number and not isinstance(arg, sympy.Rational)
                and binary_magnitude(arg) > MAX_BITS):
            raise ValueError(f"integer part of a number beyond 2**{MAX_BITS}")


def _coefficients(expression: Any) -> list[Any]:
    """The numeric coefficient of an expression, or of each term of a sum."""
    if not isinstance(expression, sympy.Expr):
        return []
    terms = expression.args if expression.is_Add else (expression,)
    return [term.as_coeff_Mul()[0] for term in terms]


def check_power(base: Any, exponent: Any) -> None:
    """Refuse a power that would build a huge exact number: sympy computes numeric powers
    exactly, and distributes integer powers over products ((2*x)**n = 2**n * x**n)."""
    if not getattr(exponent, "is_number", False):
        return
    magnitude = _magnitude(exponent)
    if magnitude > MAX_EXPONENT or (
            isinstance(exponent, sympy.Rational) and exponent.q > MAX_EXPONENT):
        raise ValueError(f"exponent larger than {MAX_EXPONENT} or finer than 1/{MAX_EXPONENT}")
    if max(map(_bits, _coefficients(base)), default=0) * magnitude > MAX_BITS:
        raise ValueError(f"power would exceed {MAX_BITS} bits")


def checked(value: Any) -> Any:
    """``value``, unless it, one of its terms or one of their factors is an exact number of
    more than MAX_BITS bits, a decimal number beyond 2**MAX_BITS (or below 2**-MAX_BITS) or a
    power with a numeric exponent beyond MAX_EXPONENT (sympy combines x**a * x**b, (x**a)**b
    and exp(a)*exp(b), and distributes a number over a sum)."""
    if not isinstance(value, sympy.Basic):
        return value
    parts = [value]
    if value.is_Add or value.is_Mul:
        for arg in value.args:
            parts += arg.args if arg.is_Mul else (arg,)
    for part in parts:
        if (part.is_Pow or isinstance(part, sympy.exp)) and part.exp.is_number and (
                _magnitude(part.exp) > MAX_EXPONENT):
            raise ValueError(f"exponent larger than {MAX_EXPONENT}")
        if _bits(part) > MAX_BITS:
            raise ValueError(f"number larger than {MAX_BITS} bits")
        if isinstance(part, sympy.Float) and part._mpf_[1] and (
                abs(part._mpf_[2] + part._mpf_[3]) > MAX_BITS):
            raise ValueError(f"decimal number beyond 2**{MAX_BITS} or 2**-{MAX_BITS}")
    return value


# --- the bound each function keeps, checked on its arguments before the call ---------------


def _no_bound(*args: Any) -> None:
    pass


def _power(base: Any, exponent: Any, *modulus: Any) -> None:
    check_power(base, exponent)


def _root(base: Any, n: Any = 2, k: Any = 0) -> None:
    """root(x, n, k) = x**(1/n) * (-1)**(2*k/n)."""
    check_power(base, 1 / sympy.sympify(n))
    check_power(sympy.S.NegativeOne, 2 * sympy.sympify(k) / n)


def _exponential(exponent: Any) -> None:
    check_power(sympy.E, exponent)


def _exponential_of_square(x: Any) -> None:
    """erfi(x) grows like exp(x**2)."""
    if getattr(x, "is_number", False) and _magnitude(x) ** 2 > MAX_EXPONENT:
        raise ValueError(f"erfi of a number beyond {MAX_EXPONENT ** 0.5:.0f}")


def _factorial(*args: Any) -> None:
    for arg in args:
        if getattr(arg, "is_number", False) and _magnitude(arg) > MAX_FACTORIAL:
            raise ValueError(f"factorial of a number larger than {MAX_FACTORIAL}")


def _binomial(n: Any, k: Any) -> None:
    """binomial(n, k) multiplies min(k, n - k) factors of n's size (and stays unevaluated for
    a symbolic k)."""
    if not getattr(k, "is_number", False):
        return
    steps = min(_magnitude(k), _magnitude(n - k)) if getattr(n, "is_number", False) else (
        _magnitude(k))
    if steps > MAX_FACTORIAL or steps * _bits(n) > MAX_BITS:
        raise ValueError(f"binomial of more than {MAX_FACTORIAL} steps or {MAX_BITS} bits")


def _sum_or_product(*args: Any) -> None:
    """Sympy adds or multiplies all the numbers among the arguments at once."""
    if sum(_bits(c) for arg in args for c in _coefficients(arg)) > MAX_BITS:
        raise ValueError(f"the numbers of a sum or product exceed {MAX_BITS} bits together")


def _lattice(cls: type) -> Callable[..., None]:
    def bound(*args: Any) -> None:
        flat = sum(len(a.args) if isinstance(a, cls) else 1 for a in args)
        if flat > MAX_LATTICE_ARGUMENTS:
            raise ValueError(f"{cls.__name__} of {flat} arguments, more than "
                             f"{MAX_LATTICE_ARGUMENTS}")
    return bound


def _not_text(value: Any) -> None:
    if not isinstance(value, sympy.Basic):
        raise ValueError(f"S or sympify of a {type(value).__name__} is not allowed")


@dataclass(frozen=True)
class Admitted:
    """A function an answer may call: the callable, how many positional arguments it takes,
    and the bound checked on them before the call."""

    function: Callable[..., Any]
    fewest: int = 1
    most: int | None = 1
    """None: any number (Add, Mul, Max, Min)."""
    bound: Callable[..., None] = _no_bound

    def __call__(self, *args: Any) -> Any:
        if len(args) < self.fewest or (self.most is not None and len(args) > self.most):
            raise ValueError(f"a call with {len(args)} arguments, expected {self.fewest} to "
                             f"{self.most or 'any number'}")
        self.bound(*args)
        return checked(self.function(*args))


_ELEMENTARY = (
    "sin cos tan cot sec csc asin acos atan acot asec acsc "
    "tanh coth sech csch asinh acosh atanh acoth asech acsch "
    "sign re im conjugate erf erfc Si Ci li"
).split()
_EXPONENTIAL = "exp sinh cosh Ei Shi Chi".split()  # grow like exp(x): x bounded as exp's
_INTEGER_PART = "floor ceiling frac".split()

FUNCTIONS: dict[str, Admitted] = {
    **{name: Admitted(getattr(sympy, name)) for name in _ELEMENTARY},
    **{name: Admitted(getattr(sympy, name), bound=_exponential) for name in _EXPONENTIAL},
    **{name: Admitted(getattr(sympy, name), bound=check_integer_part) for name in _INTEGER_PART},
    "abs": Admitted(sympy.Abs), "Abs": Admitted(sympy.Abs),
    "erfi": Admitted(sympy.erfi, bound=_exponential_of_square),
    "atan2": Admitted(sympy.atan2, 2, 2), "Mod": Admitted(sympy.Mod, 2, 2, check_integer_part),
    "log": Admitted(sympy.log, 1, 2), "ln": Admitted(sympy.log),
    "LambertW": Admitted(sympy.LambertW, 1, 2),
    "pow": Admitted(builtins.pow, 2, 3, _power), "Pow": Admitted(sympy.Pow, 2, 2, _power),
    "sqrt": Admitted(sympy.sqrt, bound=_root), "cbrt": Admitted(sympy.cbrt, bound=_root),
    "root": Admitted(sympy.root, 2, 3, _root), "real_root": Admitted(sympy.real_root, 1, 2, _root),
    "Add": Admitted(sympy.Add, 0, None, _sum_or_product),
    "Mul": Admitted(sympy.Mul, 0, None, _sum_or_product),
    **{name: Admitted(cls, 0, None, _lattice(cls))
       for name, cls in [("Max", sympy.Max), ("max", sympy.Max), ("Min", sympy.Min),
                         ("min", sympy.Min)]},
    "factorial": Admitted(sympy.factorial, bound=_factorial),
    "factorial2": Admitted(sympy.factorial2, bound=_factorial),
    "gamma": Admitted(sympy.gamma, bound=_factorial),
    "binomial": Admitted(sympy.binomial, 2, 2, _binomial),
    "S": Admitted(lambda value: sympy.sympify(value, strict=True), bound=_not_text),
    "sympify": Admitted(lambda value: sympy.sympify(value, strict=True), bound=_not_text),
    "Integral": Admitted(sympy.Integral, 1, None),
}
"""Name -> what calling it in an answer does (see the module docstring)."""

CONSTANTS: dict[str, Any] = {name: getattr(sympy, name) for name in (
    "pi", "E", "I", "oo", "zoo", "nan", "EulerGamma", "GoldenRatio", "Catalan")}
"""Name -> the sympy constant an answer may name."""
