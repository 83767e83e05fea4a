"""``python -m sapo_experiments.format_propagation``: ``sapo-env format-propagation``."""

from sapo_experiments.format_propagation.cli import main

main()
