"""Wrappers: an agent that plays through another one and changes how, when or where it runs.

- ``wrapper``: :class:`AgentWrapper`, the base: it learns through ``inner`` and its checkpoint
  state is ``inner``'s.
- ``slow``: :class:`SlowAgent`, a slower machine (acting and learning take at least a time).
- ``churning``: :class:`ChurningAgent`, a node that sits rounds out and leaves the swarm
  (:func:`churning` builds it where a remote node is built).
- ``remote``: :func:`remote` and :func:`remote_swarm`, nodes in Ray actors (the ``ray`` extra).

Importing this folder loads none of its modules.
"""
