"""``python -m experiments.reproduce``: the same as ``sapo-env reproduce``."""

from experiments.reproduce.cli import main

main()
