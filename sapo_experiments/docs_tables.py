"""The documentation tables made from the registries: the attacks of docs/hostile-nodes.md
(:mod:`sapo_env.attacks`) and the ratio policies of docs/ratio-policies.md
(:mod:`agents.ratio.registry`).

Each table stands between two markers in its page (``TABLES``) and is written from the
registry's entries, in the registry's order. ``python -m sapo_experiments.docs_tables``
(``make docs-tables``) rewrites them; ``--check`` rewrites nothing and exits 1 with the
differences: a registered name the table lacks, a name it lists that is not registered, or a
row that differs from its entry. The tests run the check.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"  #: the repository's docs folder


def attack_rows() -> list[tuple[str, str]]:
    """``(name, row)`` of every registered attack: the env's and the agents' (the attack
    experiment imports the agents that register theirs)."""
    from sapo_env.attacks import attacks
    from sapo_experiments.attack import config  # noqa: F401 - its imports register attacks

    return [(a.name, f"| `{a.name}` | {a.kind} | {a.does} | {a.models} |") for a in attacks()]


def ratio_policy_rows() -> list[tuple[str, str]]:
    """``(label, row)`` of every registered ratio policy."""
    from agents.ratio.registry import ratio_policies

    return [(e.label, f"| `{e.shown_as}` | `{e.label}` | {e.kind} | {e.rule} |")
            for e in ratio_policies()]


@dataclass(frozen=True)
class Table:
    """A table of a docs page made from a registry."""

    name: str
    page: str
    """The page, relative to the docs folder."""
    header: str
    column: int
    """The column holding each row's name (from 0)."""
    rows: Callable[[], list[tuple[str, str]]]

    @property
    def begin(self) -> str:
        return (f"<!-- the {self.name} table: written by `make docs-tables` from the registry; "
                "edit the entries, not this table -->")

    @property
    def end(self) -> str:
        return f"<!-- end of the {self.name} table -->"

    def text(self) -> str:
        """The table as the registry has it, between its markers."""
        lines = [self.begin, self.header,
                 "|" + " --- |" * self.header.count(" | ") + " --- |",
                 *(row for _, row in self.rows()), self.end]
        return "\n".join(lines)

    def span(self, page: str) -> tuple[int, int]:
        """Where the table stands in ``page``, markers included."""
        start, stop = page.find(self.begin), page.find(self.end)
        if start < 0 or stop < start:
            raise ValueError(f"{self.page} has no {self.name} table between the markers "
                             f"{self.begin!r} and {self.end!r}")
        return start, stop + len(self.end)

    def listed(self, page: str) -> list[str]:
        """The names the table in ``page`` lists."""
        start, stop = self.span(page)
        cells = [line.split("|")[1:-1] for line in page[start:stop].splitlines()[3:-1]]
        return [re.sub(r"^`(.*)`$", r"\1", c[self.column].strip()) for c in cells if c]


TABLES = (
    Table("attacks", "hostile-nodes.md", "| attack | kind | what it does | what it models |", 0,
          attack_rows),
    Table("ratio policies", "ratio-policies.md", "| policy | bench-ratio label | kind | rule |",
          1, ratio_policy_rows),
)


def check(docs: Path = DOCS, tables: Sequence[Table] = TABLES) -> list[str]:
    """What differs between the tables in ``docs`` and the registries (empty: nothing)."""
    problems = []
    for table in tables:
        page = (docs / table.page).read_text()
        listed, registered = table.listed(page), [name for name, _ in table.rows()]
        found = [f"{table.page}: the {table.name} table lacks registered {n!r}"
                 for n in registered if n not in listed]
        found += [f"{table.page}: the {table.name} table lists {n!r}, which is not registered"
                  for n in listed if n not in registered]
        start, stop = table.span(page)
        if not found and page[start:stop] != table.text():
            found.append(f"{table.page}: the {table.name} table differs from the registry (its "
                         "rows or their order)")
        problems += found
    return problems


def write(docs: Path = DOCS, tables: Sequence[Table] = TABLES) -> list[Path]:
    """Rewrite each table of ``docs`` from its registry; the pages written."""
    written = []
    for table in tables:
        path = docs / table.page
        page = path.read_text()
        start, stop = table.span(page)
        new = page[:start] + table.text() + page[stop:]
        if new != page:
            path.write_text(new)
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="rewrite nothing; exit 1 if a table differs from its registry")
    parser.add_argument("--docs", type=Path, default=DOCS, help="the docs folder")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.docs)
        print("\n".join(problems) or "the docs tables match the registries")
        return 1 if problems else 0
    for path in write(args.docs):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
