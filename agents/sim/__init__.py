"""The simulated learner: ``SimulatedLearner``, a cheap stand-in for a language-model node.

- ``simulated``: :class:`SimulatedLearner` and :func:`simulated_swarm` (also in ``agents``).
- ``simulated_config``: :class:`SimulatedLearnerConfig`, its hyperparameters.
- ``simulated_text``: how it writes a completion and reads one back.
- ``injection``: an injected behaviour (the poisoning attack's line), how the simulated
  learner picks it up, and the check that stops it.

Importing this folder loads none of its modules.
"""
