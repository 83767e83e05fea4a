"""``python -m sapo_experiments.reproduce``: the same as ``sapo-env reproduce``."""

from sapo_experiments.reproduce.cli import main

main()
