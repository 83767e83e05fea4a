"""Command-line help from a config's own field docstrings, so that ``--help`` and the config's
documentation are one text and cannot drift apart.

A config field is documented by the string literal under it::

    @dataclass(frozen=True)
    class Config:
        rounds: int = 10
        \"\"\"Rounds per run.\"\"\"

``field_docs`` reads those strings from the class's source (and its dataclass bases'), once;
``field_help`` turns one into an option's help: reStructuredText markup dropped, the names of
fields that have an option of their own replaced by that option, and ``%`` escaped for
argparse.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import textwrap
from collections.abc import Mapping

_ROLE = re.compile(r":(?:attr|class|func|meth|mod|data):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each documented field of dataclass ``cls`` (and of its dataclass bases; a subclass's
    wins) -> its docstring on one line. A class whose source cannot be read documents nothing."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # built in an interpreter session: no source
            continue
        body = ast.parse(source).body[0].body
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


_NO_DEFAULT = object()


def default_text(value: object) -> str:
    """A default as the command line writes it: a sequence space-separated, a bool on or off."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return " ".join(map(str, value))
    return str(value)


def field_help(cls: type, name: str, options: Mapping[str, str] | None = None,
               lead: str = "", tail: str = "", default: object = _NO_DEFAULT) -> str:
    """The help of the option that sets field ``name`` of ``cls``: ``lead``, the field's
    docstring (its first word in lower case after a ``lead``), ``tail``, then "Default:
    ``default``." if one is given (``default_text``). In the docstring, ````x```` and
    ``:role:`x``` become ``x``, and a field named in ``options`` (field -> its option, e.g.
    ``{"rounds": "--rounds"}``) becomes its option. ``KeyError`` for a field without a
    docstring."""
    options = options or {}

    def plain(match: re.Match[str]) -> str:
        text = match.group(1)
        return options.get(text, text)

    text = _LITERAL.sub(plain, _ROLE.sub(plain, field_docs(cls)[name]))
    if lead and text[:1].isupper() and text[1:2].islower():  # "lead: the doc", not "lead: The"
        text = text[0].lower() + text[1:]
    text = lead + text + tail
    if default is not _NO_DEFAULT:
        text += f" Default: {default_text(default)}."
    return text.replace("%", "%%")
