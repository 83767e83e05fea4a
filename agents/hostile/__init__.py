"""Hostile nodes: agents that attack a swarm.

- ``adversarial``: :class:`AdversarialAgent` and :func:`adversarial_swarm` (also in
  ``agents``), attacks made of the text a node writes and shares.
- ``remote_junk``: :class:`RemoteJunkNode`, a remote node that sends the driver plain data the
  env refuses.

Importing this folder loads none of its modules.
"""
