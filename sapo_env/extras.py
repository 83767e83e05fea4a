"""Optional packages: ``require("ray", "agents.wrappers.remote")`` imports one, or answers in
one line which extra of sapo-env installs it.

The core (the env, the runner, the simulated and scripted agents) needs none of them; each
extra of ``pyproject.toml`` brings the packages of one kind of work. A missing one raises
``ModuleNotFoundError`` (an ``ImportError``, so ``except ImportError`` around optional
features keeps working) with its ``name`` set to the package::

    >>> from sapo_env.extras import EXTRAS, require
    >>> EXTRAS["matplotlib"]
    'plot'
    >>> require("math", "this example").sqrt(4.0)
    2.0
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS = {
    "torch": "lm", "transformers": "lm", "peft": "lm", "gguf": "lm", "accelerate": "lm",
    "stable_baselines3": "meta", "supersuit": "meta", "tensorboard": "meta",
    "ray": "ray", "matplotlib": "plot", "datasets": "data", "wandb": "wandb",
    "httpx2": "served", "scipy": "stats",
}
"""Top-level module -> the extra that installs it (``pip install 'sapo-env[EXTRA]'``)."""


def missing_extra(module: str, needed_by: str) -> ModuleNotFoundError:
    """The one-line error for a missing optional package ``module`` (a top-level name of
    ``EXTRAS``), which ``needed_by`` (what the user asked for) needs."""
    top = module.partition(".")[0]
    if top not in EXTRAS:
        raise ValueError(f"{top!r} is not an optional package; expected one of {list(EXTRAS)}")
    first = " (install the torch build for your hardware first)" if EXTRAS[top] == "lm" else ""
    return ModuleNotFoundError(f"{needed_by} needs {top!r}, which is not installed: pip install "
                               f"'sapo-env[{EXTRAS[top]}]'{first}", name=top)


def require(module: str, needed_by: str) -> ModuleType:
    """``import module`` (e.g. ``"ray"``, ``"matplotlib.pyplot"``); ``missing_extra``'s error
    when its package, or an optional package it imports, is not installed. Any other missing
    module raises as it is."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if missing not in EXTRAS:
            raise
        raise missing_extra(missing, needed_by) from None
