"""``python -m experiments.format_propagation``: the same as ``sapo-env format-propagation``."""

from experiments.format_propagation.cli import main

main()
