"""Experiment harnesses: they wire agents into swarms and report what happened.

The layers, each importing only those before it::

    sapo_env      the environment (a PettingZoo ParallelEnv and its pure functions)
    agents        reference agents that plug into it
    experiments   harnesses that run agents in the env: ``reproduce`` (the paper's table),
                  ``bench_ratio``, ``attack``, ``format_propagation``, each a sweep on one
                  skeleton (``sweep``: runs, resume, report; ``sweep_cli``: its command), and
                  the ``sapo-env`` command line (``sapo_experiments.cli``)

A harness takes agent factories, so your own agents run through it without editing the library.
"""
