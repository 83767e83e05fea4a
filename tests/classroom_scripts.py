"""The classroom's scripts as modules, as their notebooks import them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

CLASSROOM = Path(__file__).resolve().parents[1] / "examples" / "classroom"


def story(name: str) -> ModuleType:
    """The script ``examples/classroom/<name>.py`` as a module, registered in ``sys.modules``
    (its dataclasses look their module up there while the class is made)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CLASSROOM / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
