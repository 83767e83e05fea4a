"""Execute the classroom notebooks, so that their saved outputs are those of a real run.

Each notebook imports the script of the same name beside it (one source for both) and has one
cell tagged ``parameters`` holding the script's defaults. ``execute`` runs a notebook in a fresh
kernel, inside this folder, after a cell that overrides some of those values (as papermill
injects parameters); tests/test_notebooks.py runs the notebooks that way at small budgets.
From the repository root, ``make notebooks`` runs them all at their defaults and saves each
with its outputs; give names to run only some. Needs nbclient and ipykernel (the dev extra:
``pip install -e '.[dev]'``).

Run:  python examples/classroom/run_notebooks.py [01_one_round_by_hand ...]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOTEBOOKS = sorted(p.stem for p in HERE.glob("0*.ipynb"))


def with_parameters(notebook: Any, parameters: dict[str, Any]) -> Any:
    """``notebook`` with a cell after its ``parameters`` cell setting ``parameters``."""
    import nbformat

    tagged = [k for k, cell in enumerate(notebook.cells)
              if "parameters" in cell.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise ValueError(f"expected one cell tagged 'parameters', found {len(tagged)}")
    source = "# injected parameters\n" + "".join(f"{k} = {v!r}\n" for k, v in parameters.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    notebook.cells.insert(tagged[0] + 1, cell)
    return notebook


def execute(name: str, parameters: dict[str, Any] | None = None) -> Any:
    """Run notebook ``name`` (its stem, e.g. ``03_aha_spreads``) in a fresh kernel inside this
    folder, with ``parameters`` overriding its defaults; returns the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(HERE / f"{name}.ipynb", as_version=4)
    if parameters:
        notebook = with_parameters(notebook, parameters)
    # no timeout: a cell runs as long as its training does (minutes on a busy CPU)
    NotebookClient(notebook, timeout=None, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    return notebook


def text_output(notebook: Any) -> str:
    """Everything the notebook's cells printed."""
    return "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for out in cell.get("outputs", []) if out.get("output_type") == "stream")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"notebooks to run (default all: {' '.join(NOTEBOOKS)})")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(NOTEBOOKS))
    if unknown:
        parser.error(f"no notebook named {unknown}; expected some of {NOTEBOOKS}")
    import nbformat

    for name in args.names or NOTEBOOKS:
        wall = time.perf_counter()
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        notebook = execute(name)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the kernel, once it has ended
        nbformat.write(notebook, HERE / f"{name}.ipynb")
        print(f"{name}.ipynb: {time.perf_counter() - wall:.0f} s wall, "
              f"{used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime:.0f} s CPU "
              f"in its kernel", flush=True)


if __name__ == "__main__":
    main()
