"""Public names that were renamed, kept working for one more release with a warning.

A module (or a package that re-exports it) that renamed ``Old`` to ``New`` sets::

    __getattr__ = renamed(__name__, {"Old": "New"})

and ``module.Old``, or ``from module import Old``, gives ``New``, the very same object, with a
``DeprecationWarning`` that names the new name. The old names stop working in sapo-env
``REMOVED_IN``. docs/architecture.md's glossary lists the names and why they changed.

Example (a module ``demo`` that renamed ``Old`` to ``New``)::

    >>> import sys, types, warnings
    >>> demo = sys.modules["demo"] = types.ModuleType("demo")
    >>> demo.New = "the object"
    >>> demo.__getattr__ = renamed("demo", {"Old": "New"})
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     demo.Old
    'the object'
    >>> print(caught[0].message)
    demo.Old is now demo.New; the old name will stop working in sapo-env 0.9.0
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

REMOVED_IN = "0.9.0"
"""The release in which the old names stop working."""


def renamed(module: str, names: Mapping[str, str], stacklevel: int = 2
            ) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module``: each old name of ``names`` (old -> new) gives
    the module's attribute of the new name, with a ``DeprecationWarning``; any other name
    raises ``AttributeError`` as usual. ``stacklevel`` makes the warning name the line that
    used the old name: 2 where the function is the module's ``__getattr__``, 3 where the
    module's own ``__getattr__`` calls it."""
    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is now {module}.{names[name]}; the old name will stop "
                      f"working in sapo-env {REMOVED_IN}", DeprecationWarning,
                      stacklevel=stacklevel)
        return getattr(sys.modules[module], names[name])

    return __getattr__
