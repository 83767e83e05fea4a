"""Execute the classroom notebooks and save them with the outputs of a real run.

Each notebook imports the script of the same name beside it (one source for both) and has one
cell tagged ``parameters`` holding the script's defaults. ``execute`` runs a notebook in a fresh
kernel, inside this folder, after a cell that overrides some of those values (as papermill
injects parameters); tests/test_notebooks.py runs the notebooks that way at small budgets.
From the repository root, ``make notebooks`` runs them all at their defaults and saves the
executed copies in ``examples/classroom/out/`` (git ignores it; ``--out DIR`` elsewhere), so
that running them leaves the checkout as it was; give names to run only some. A maintainer who
means to replace the tracked notebooks' saved outputs passes ``--update-tracked``. Needs
nbclient and ipykernel (the dev or classroom extra: ``pip install -e '.[classroom]'``).

Run:  python examples/classroom/run_notebooks.py [--out DIR | --update-tracked]
      [01_one_round_by_hand ...]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOTEBOOKS = sorted(p.stem for p in HERE.glob("0*.ipynb"))
OUT = HERE / "out"


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


def kernel_config() -> Any:
    """Configuration of the kernel manager: CurveZMQ encryption of the kernel's sockets where
    this jupyter_client can provision the keys and the kernel declares support for them.
    Without it ipykernel starts every kernel by warning that its local TCP traffic is plain
    text; with an older jupyter_client, or a pyzmq without CurveZMQ, nothing changes."""
    import zmq
    from jupyter_client import KernelManager
    from traitlets.config import Config

    if "transport_encryption" not in KernelManager.class_trait_names() or not zmq.has("curve"):
        return Config()
    return Config({"KernelManager": {"transport_encryption": "auto"}})


def execute(name: str, parameters: dict[str, Any] | None = None) -> Any:
    """Run notebook ``name`` (its stem, e.g. ``03_aha_spreads``) in a fresh kernel inside this
    folder, with ``parameters`` overriding its defaults; returns the executed notebook (the
    file on disk is not changed)."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(HERE / f"{name}.ipynb", as_version=4)
    if parameters:
        notebook = with_parameters(notebook, parameters)
    # no timeout: a cell runs as long as its training does (minutes on a busy CPU)
    NotebookClient(notebook, timeout=None, kernel_name="python3", config=kernel_config(),
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
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, default=OUT,
                       help="folder for the executed notebooks (default examples/classroom/out/, "
                            "which git ignores)")
    where.add_argument("--update-tracked", action="store_true",
                       help="for maintainers: overwrite the tracked notebooks beside this script "
                            "with the executed ones")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(NOTEBOOKS))
    if unknown:
        parser.error(f"no notebook named {unknown}; expected some of {NOTEBOOKS}")
    import nbformat

    folder = HERE if args.update_tracked else args.out
    folder.mkdir(parents=True, exist_ok=True)
    for name in args.names or NOTEBOOKS:
        wall = time.perf_counter()
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        notebook = execute(name)
        used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the kernel, once it has ended
        nbformat.write(notebook, folder / f"{name}.ipynb")
        print(f"{folder / name}.ipynb: {time.perf_counter() - wall:.0f} s wall, "
              f"{used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime:.0f} s CPU "
              f"in its kernel", flush=True)


if __name__ == "__main__":
    main()
