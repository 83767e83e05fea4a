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

import agents as _agents


def check_agents(module: object) -> None:
    """Raise a one-line ``ImportError`` unless ``module`` (what ``import agents`` gave) is
    sapo-env's ``agents``: another distribution may install a top-level package of that name
    (OpenAI's Agents SDK, ``openai-agents``, does), and the harnesses would fail further in
    with an error that does not say why."""
    if not getattr(module, "SAPO_ENV_AGENTS", False):
        where = getattr(module, "__file__", None) or repr(module)
        raise ImportError(
            f"'import agents' found {where}, which is "
            "not sapo-env's agents package: another one installs a top-level 'agents' too "
            "(OpenAI's Agents SDK, openai-agents, does); install sapo-env in an environment "
            "without it")


check_agents(_agents)
