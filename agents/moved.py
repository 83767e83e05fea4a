"""The old paths of the modules that moved into ``agents``' folders, kept working for one release.

``MOVED`` maps each old dotted path to its module's new one (``agents.grpo`` is now
``agents.lm.grpo``). Importing an old path (``import agents.grpo``, ``from agents.grpo import
GRPOAgent``) gives the module at its new path, the very same object, and warns once with a
``DeprecationWarning`` that names the new path. The module keeps its own ``__name__`` and
``__spec__``: pickles name the new path, ``importlib.reload`` reloads the module where it
lives, and a pickle that names an old path still loads. There is no file at an old path: an
import finder on ``sys.meta_path`` (:func:`install`, which ``import agents`` calls) answers for
the names of ``MOVED`` and for no other.

These aliases go in the release after next (0.9.0).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

MOVED = {
    "agents.adversarial": "agents.hostile.adversarial",
    "agents.checkpoints": "agents.lm.weights",
    "agents.churning": "agents.wrappers.churning",
    "agents.demonstrator": "agents.scripted.demonstrator",
    "agents.encoding": "agents.lm.encoding",
    "agents.generation": "agents.lm.generation",
    "agents.grpo": "agents.lm.grpo",
    "agents.grpo_config": "agents.lm.grpo_config",
    "agents.grpo_update": "agents.lm.grpo_update",
    "agents.injection": "agents.sim.injection",
    "agents.llama_server": "agents.serving.llama_server",
    "agents.lora": "agents.lm.lora",
    "agents.loss": "agents.lm.loss",
    "agents.mixed_adapters": "agents.lm.mixed_adapters",
    "agents.models": "agents.lm.models",
    "agents.off_policy": "agents.lm.off_policy",
    "agents.random_agent": "agents.scripted.random_agent",
    "agents.received_logprob": "agents.lm.received_logprob",
    "agents.remote": "agents.wrappers.remote",
    "agents.remote_junk": "agents.hostile.remote_junk",
    "agents.replay": "agents.scripted.replay",
    "agents.served": "agents.serving.served",
    "agents.served_config": "agents.serving.served_config",
    "agents.served_http": "agents.serving.served_http",
    "agents.simulated": "agents.sim.simulated",
    "agents.simulated_config": "agents.sim.simulated_config",
    "agents.simulated_text": "agents.sim.simulated_text",
    "agents.slow": "agents.wrappers.slow",
    "agents.torch_rng": "agents.lm.torch_rng",
    "agents.wrapper": "agents.wrappers.wrapper",
}
"""Old dotted path -> new dotted path of every module that moved."""


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of ``MOVED`` (and nothing else) for the import system."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, AliasLoader(MOVED[fullname]))


class AliasLoader(importlib.abc.Loader):
    """Loads an old path as the module at ``new``: imports it, warns, and hands it over."""

    def __init__(self, new: str):
        self.new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        # stacklevel 2: the import system's own frames are skipped, so this names the importer
        warnings.warn(f"{spec.name} has moved to {self.new}; the old path will stop working "
                      "in sapo-env 0.9.0", DeprecationWarning, stacklevel=2)
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just set the alias's spec on the module: it gets its own back,
        # which pickle, reload and the module's imports read.
        module.__spec__ = self._spec


def install() -> None:
    """Put a :class:`MovedFinder` first on ``sys.meta_path``, once."""
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())
