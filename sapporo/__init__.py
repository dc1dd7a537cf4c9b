"""sapporo: GRAPE-compatible direct-summation gravity on GPUs and CPUs.

Conventions everywhere: G = 1; positions, velocities and masses in the integrator's units;
the potential is negative; acceleration, jerk and snap are returned unscaled
(``acc = sum_j m_j r_ij / R^3`` with ``r_ij = x_j - x_i`` and ``R^2 = |r_ij|^2 + eps2``).

Importing the package touches no device; backends load when a :class:`Library` opens.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from sapporo.errors import (
    BackendError,
    BuildError,
    ConfigError,
    InputError,
    NonFiniteError,
    SapporoError,
)

__version__ = "0.1.0"

__all__ = ["BackendError", "BuildError", "ConfigError", "ForceResult", "InputError", "Library",
           "NonFiniteError", "PendingForce", "SapporoError", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from sapporo.core.library import ForceResult, Library, PendingForce

_LAZY = {"Library": "core.library", "ForceResult": "core.library",
         "PendingForce": "core.library"}

#: Public modules, imported on first use (``sapporo.reference.forces``, ...): name -> where
#: it lives. ``import sapporo.hermite`` and ``from sapporo.hermite import ...`` work too.
_MODULES = {
    "backend": "backend", "config": "config", "errors": "errors", "reference": "reference",
    "hermite": "nbody.hermite", "ic": "nbody.ic", "snapshot": "nbody.snapshot",
    "parallel": "parallel", "pm": "pm", "plots": "perf.plots",
}


def __getattr__(name: str) -> Any:
    from importlib import import_module

    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    if name in _MODULES:
        return import_module(f".{_MODULES[name]}", __name__)
    raise AttributeError(f"module 'sapporo' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names: those of ``__all__`` and the public modules."""
    return sorted({*__all__, *_MODULES})


class _PublicAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``sapporo.hermite`` and the other public modules that live in a subpackage, under
    their public names: the import returns the module itself (one object, two names)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        prefix, _, name = fullname.partition(".")
        if prefix != __name__ or _MODULES.get(name, name) == name:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module(f"{__name__}.{_MODULES[spec.name.split('.')[1]]}")

    def exec_module(self, module: Any) -> None:
        """Nothing to run: the module was imported under its own name."""


if not any(isinstance(f, _PublicAlias) for f in sys.meta_path):
    sys.meta_path.append(_PublicAlias())
