"""Parsers for untrusted answer text that evaluate nothing.

reasoning-gym reads some answers with Python's ``eval`` or sympy's ``parse_expr`` (which builds
Python source from the text and evaluates it): a completion could run any code in the env's
process. These replacements accept what an honest answer is written in and give the same
values, and refuse everything else with ``ValueError`` (or the ``SyntaxError`` of Python's
parser; the scorers already treat an answer they cannot read as wrong):

- ``literal(text)``: a Python literal (numbers, strings, lists, tuples, dicts, sets, booleans,
  None): ``ast.literal_eval``, which builds values and calls nothing. It refuses text over
  ``MAX_TEXT_CHARS``; Python's parser refuses nesting deeper than 200 brackets and integers of
  more than 4300 digits.
- ``integer_arithmetic(text)``: an integer expression with ``+ - * & | ^ << >>`` and unary
  ``- + ~`` (shifts up to ``MAX_SHIFT`` bits).
- ``propositional_expression(text)``: what propositional_logic's own ``parse_expr`` returns
  (the same tree, the same errors), in O(n log n) time instead of O(n**2): its parser rescans
  the whole text at every level, so 2,000 characters of ``¬¬¬…`` took seconds.
- ``sympy_expression(text, local_dict=None)``: what ``sympy.parse_expr`` returns for the same
  text (same tokenizer and standard transformations, so ``5!`` and ``0.[3]`` read as there),
  computed by walking the parsed syntax tree instead of ``eval``. Admitted: numbers
  (``Integer``, ``Float``, ``Rational`` and ``Symbol`` as the transformations write them, with
  no precision or assumption arguments), symbols, ``+ - * / // % **``, and the functions and
  constants of ``sapo_env.scoring.sympy_whitelist`` called by name with positional arguments: every
  form of an answer that reasoning-gym's scorers read for the sympy-scored tasks (``pow(x, 5)``,
  ``Pow(x, 2)``, ``cbrt(x)``, ``root(x, 3)``, ``abs``, ``Max``, ``floor``, ``factorial``,
  ...), checked against reasoning-gym by ``tests/test_safe_scorers_differential.py``. Refused:
  every other name and call, attributes, subscripts, keyword arguments, lambdas, comparisons,
  strings other than a ``Float``'s digits or a ``Symbol``'s name. Bounded: no numeric exponent
  beyond ``MAX_EXPONENT``, no exact number of more than ``MAX_BITS`` bits, no factorial of a
  number over ``MAX_FACTORIAL``, checked before each power, call or operation computes and on
  its result (``9**9**9**9``, ``pow(9, 9**9)``, ``factorial(10**7)``, ``root(2, 10**9)`` and
  ``1e999999999`` are refused in well under a millisecond), no decimal number of more than
  ``MAX_FLOAT_DIGITS`` digits, and no tree deeper than ``MAX_DEPTH``.

Example::

    >>> from sapo_env.scoring.safe_parsing import literal, sympy_expression
    >>> literal("[[0, 1], [1, 0]]")
    [[0, 1], [1, 0]]
    >>> sympy_expression("x**2/2 + C")
    C + x**2/2
    >>> sympy_expression("__import__('os').system('echo hi')")
    Traceback (most recent call last):
    ...
    ValueError: not allowed in an expression: Call
"""

from __future__ import annotations

import ast
import bisect
import builtins
import operator
import re
import types
from collections import defaultdict
from functools import lru_cache
from typing import Any

import sympy
from reasoning_gym.logic.propositional_logic import Expression, Operator
from sympy.parsing.sympy_parser import standard_transformations, stringify_expr

from sapo_env.scoring.sympy_whitelist import (
    CONSTANTS,
    FUNCTIONS,
    MAX_EXPONENT,
    check_integer_part,
    check_power,
    checked,
)
from sapo_env.scoring.sympy_whitelist import MAX_BITS as MAX_BITS  # noqa: F401 (re-exported)
from sapo_env.scoring.sympy_whitelist import MAX_FACTORIAL as MAX_FACTORIAL  # noqa: F401 (re-exported)

MAX_TEXT_CHARS = 65536
"""Longest text any parser here reads; the env's own limit (``max_answer_chars``) is lower."""
MAX_SHIFT = 4096
"""Largest shift in ``integer_arithmetic`` (reasoning-gym's bitwise_arithmetic shifts by <= 3)."""
MAX_FLOAT_DIGITS = 1000
"""Longest decimal number ``sympy_expression`` reads (honest answers: under 20 digits)."""
MAX_DEPTH = 200
"""Deepest syntax tree ``sympy_expression`` walks (Python's parser allows 200 brackets)."""

# What sympy's auto_number and auto_symbol transformations write around literals and new names.
_CONSTRUCTORS = frozenset({"Integer", "Float", "Rational", "Symbol"})


def _check_length(text: str) -> None:
    if not isinstance(text, str):
        raise ValueError(f"expected answer text (str), got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"answer of {len(text)} characters is longer than {MAX_TEXT_CHARS}")


def literal(text: str) -> Any:
    """The Python literal ``text`` spells (in place of ``eval`` on an answer)."""
    _check_length(text)
    return ast.literal_eval(text)


_INTEGER_OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
}


def integer_arithmetic(text: str) -> int:
    """The value of an integer expression (in place of ``eval`` on bitwise_arithmetic's
    problems)."""
    _check_length(text)
    return _integer(ast.parse(text.strip(), mode="eval").body)


def _integer(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _INTEGER_OPERATORS:
        return _INTEGER_OPERATORS[type(node.op)](_integer(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _INTEGER_OPERATORS:
        left, right = _integer(node.left), _integer(node.right)
        if isinstance(node.op, ast.LShift) and right > MAX_SHIFT:
            raise ValueError(f"shift by {right} bits is more than {MAX_SHIFT}")
        return _INTEGER_OPERATORS[type(node.op)](left, right)
    raise ValueError(f"not allowed in an integer expression: {type(node).__name__}")


@lru_cache(maxsize=1)
def _sympy_names() -> dict[str, Any]:
    """The names ``sympy.parse_expr`` resolves: ``from sympy import *``, the builtin functions,
    and sympy's Max and Min for max and min (its transformations decide by these which words
    become new symbols)."""
    names = {name: getattr(sympy, name) for name in sympy.__all__}
    names.update((name, value) for name, value in vars(builtins).items()
                 if isinstance(value, types.BuiltinFunctionType))
    names.update(max=sympy.Max, min=sympy.Min)
    return names


_SYMPY_OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos,
}


def sympy_expression(text: str, local_dict: dict[str, Any] | None = None) -> Any:
    """``sympy.parse_expr(text, local_dict)`` without ``eval``; ValueError for anything an
    answer has no business writing (see the module docstring)."""
    _check_length(text)
    local_dict = dict(local_dict or {})
    code = stringify_expr(text, local_dict, _sympy_names(), standard_transformations)
    try:
        tree = ast.parse(code, mode="eval")
    except (RecursionError, MemoryError):  # a long chain of operators; Python's parser stack
        raise ValueError("expression too deeply nested") from None
    value = _SympyEvaluator(local_dict).value(tree.body, 0)
    check_integer_part(value)  # countdown and puzzle24 take float() and int() of it
    return value


class _SympyEvaluator:
    """Evaluates the syntax tree sympy's transformations produced, as ``eval`` would, one
    allowed operation at a time."""

    def __init__(self, local_dict: dict[str, Any]):
        self.local_dict = local_dict

    def value(self, node: ast.AST, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ValueError(f"expression nested deeper than {MAX_DEPTH}")
        depth += 1
        if isinstance(node, ast.BinOp) and type(node.op) in _SYMPY_OPERATORS:
            left, right = self.value(node.left, depth), self.value(node.right, depth)
            if isinstance(node.op, ast.Pow):
                check_power(left, right)
            elif isinstance(node.op, (ast.Mod, ast.FloorDiv)):
                check_integer_part(left, right)
            return checked(_SYMPY_OPERATORS[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _SYMPY_OPERATORS:
            return checked(_SYMPY_OPERATORS[type(node.op)](self.value(node.operand, depth)))
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            return self.call(node.func.id, node.args, depth)
        raise ValueError(f"not allowed in an expression: {type(node).__name__}")

    def name(self, name: str) -> Any:
        if name in self.local_dict:
            return self.local_dict[name]
        if name in CONSTANTS:
            return CONSTANTS[name]
        raise ValueError(f"not allowed in an expression: {name}")

    def call(self, name: str, args: list[ast.expr], depth: int) -> Any:
        if name in self.local_dict:
            raise ValueError(f"not allowed in an expression: a call of {name}")
        if name in _CONSTRUCTORS:
            return checked(self.construct(name, args, depth))
        if name in FUNCTIONS:
            values = [tuple(self.value(item, depth) for item in a.elts)  # an Integral's limits
                      if isinstance(a, ast.Tuple) and name == "Integral"
                      else self.value(a, depth) for a in args]
            return FUNCTIONS[name](*values)
        raise ValueError(f"not allowed in an expression: {name}")

    def construct(self, name: str, args: list[ast.expr], depth: int) -> Any:
        """Integer(2), Float('1.5'), Symbol('y'), Rational(Integer(3), Integer(9)): the
        literals sympy's transformations write, with no precision or assumption arguments."""
        if not 1 <= len(args) <= (2 if name == "Rational" else 1):
            raise ValueError(f"{name} with {len(args)} arguments is not allowed")
        values = []
        for arg in args:
            if isinstance(arg, ast.Constant) and type(arg.value) is int:
                values.append(arg.value)
            elif isinstance(arg, ast.Constant) and type(arg.value) is str:
                if name == "Float" and not _small_float(arg.value):
                    raise ValueError(f"Float({arg.value[:20]!r}) is not an ordinary number")
                if name not in ("Float", "Symbol"):
                    raise ValueError(f"{name} of a string is not allowed")
                values.append(arg.value)
            else:
                values.append(self.value(arg, depth))
        if name == "Integer":
            check_integer_part(*values)
        return getattr(sympy, name)(*values)


# A decimal number of at most MAX_FLOAT_DIGITS digits whose exponent, if any, is at most
# MAX_EXPONENT: sympy turns the exponent of '1e999999999' into an exact power of ten, which
# takes minutes, and reads '1.5000…' in time cubic in the digits.
_FLOAT = re.compile(
    r"\s*[+-]?(?P<digits>[\d_]*\.?[\d_]*)(?:[eE](?P<exponent>[+-]?\d{1,6}))?\s*")


def _small_float(text: str) -> bool:
    match = _FLOAT.fullmatch(text)
    return (bool(match) and abs(int(match.group("exponent") or 0)) <= MAX_EXPONENT
            and len(match.group("digits")) <= MAX_FLOAT_DIGITS)


# Binary connectives from the loosest to the tightest: the text splits at the rightmost loosest
# one outside brackets (propositional_logic's parse_expr).
_CONNECTIVES = (Operator.IFF, Operator.IMPLIES, Operator.OR, Operator.AND)


def propositional_expression(text: str) -> Expression:
    """propositional_logic's ``parse_expr(text)`` (a reasoning-gym ``Expression``): ValueError
    for an empty part, RecursionError for nesting deeper than Python's recursion limit."""
    _check_length(text)
    return _PropositionParser(text).parse(0, len(text))


class _PropositionParser:
    """Parses ``text[a:b]`` as reasoning-gym does: strip; unwrap a bracket pair enclosing the
    whole; split at the rightmost loosest connective outside brackets; a leading ``¬``; else a
    proposition named by the text. What it rescans is precomputed once:

    - ``depth[i]``: ``(`` minus ``)`` in ``text[:i]``; a connective at i is outside brackets
      in ``text[a:b]`` (reasoning-gym counts brackets from b leftwards) iff depth[i] == depth[b];
    - ``positions[(connective, d)]``: where that connective stands at depth d, in order;
    - ``closing[a]``: the ``)`` matching the ``(`` at a (a pair encloses ``text[a:b]`` iff
      closing[a] == b - 1);
    - ``first[i]`` / ``after_last[i]``: the bounds of ``text[i:…]`` / ``text[…:i]`` stripped.
    """

    def __init__(self, text: str):
        self.text = text
        n = len(text)
        self.depth = [0] * (n + 1)
        self.positions: dict[tuple[str, int], list[int]] = defaultdict(list)
        self.closing: dict[int, int] = {}
        opened: list[int] = []
        connectives = {c.value for c in _CONNECTIVES}
        for i, char in enumerate(text):
            step = 0
            if char == "(":
                opened.append(i)
                step = 1
            elif char == ")":
                if opened:
                    self.closing[opened.pop()] = i
                step = -1
            elif char in connectives:
                self.positions[(char, self.depth[i])].append(i)
            self.depth[i + 1] = self.depth[i] + step
        self.first = [n] * (n + 1)
        for i in range(n - 1, -1, -1):
            self.first[i] = self.first[i + 1] if text[i].isspace() else i
        self.after_last = [0] * (n + 1)
        for i in range(1, n + 1):
            self.after_last[i] = self.after_last[i - 1] if text[i - 1].isspace() else i

    def parse(self, a: int, b: int) -> Expression:
        a = self.first[a]
        if a >= b:
            raise ValueError("Empty expression")
        b = self.after_last[b]
        text = self.text
        if text[a] == "(" and text[b - 1] == ")" and self.closing.get(a) == b - 1:
            return self.parse(a + 1, b - 1)
        for connective in _CONNECTIVES:
            at = self.positions.get((connective.value, self.depth[b]), ())
            k = bisect.bisect_left(at, b) - 1
            if k >= 0 and at[k] >= a:
                return Expression(connective, self.parse(a, at[k]), self.parse(at[k] + 1, b))
        if text[a] == Operator.NOT.value:
            return Expression(Operator.NOT, self.parse(a + 1, b))
        return Expression(None, text[a:b])
