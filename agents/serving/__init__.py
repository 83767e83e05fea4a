"""The served node: ``ServedAgent``, a node whose policy is a model behind an OpenAI-compatible
server, and a local server to run one against.

- ``served``: :class:`ServedAgent` (also ``agents.ServedAgent``).
- ``served_config``: :class:`ServedConfig`, how it asks its server and what the server may cost.
- ``served_http``: its requests to an untrusted server, bounded in time and in bytes.
- ``llama_server``: :class:`LocalServer`, llama-cpp-python's server on a GGUF model, started as
  a child process.

The node needs the ``served`` extra (httpx2); importing this folder loads none of its modules.
"""
