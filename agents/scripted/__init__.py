"""Scripted nodes: agents that play without learning a policy.

- ``demonstrator``: :class:`DemonstratorAgent`, a node that knows the answers.
- ``random_agent``: :class:`RandomAgent`, random text and a fixed J: the noise floor.
- ``replay``: :class:`ReplayAgent`, a node that publishes a recorded node's groups again.

All three are also in ``agents``; importing this folder loads none of its modules.
"""
