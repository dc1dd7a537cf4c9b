"""sapporo: GRAPE-compatible direct-summation gravity on GPUs and CPUs.

Conventions everywhere: G = 1; positions, velocities and masses in the integrator's units;
the potential is negative; acceleration, jerk and snap are returned unscaled
(``acc = sum_j m_j r_ij / R^3`` with ``r_ij = x_j - x_i`` and ``R^2 = |r_ij|^2 + eps2``).

Importing the package touches no device; backends load when a :class:`Library` opens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    BackendError,
    BuildError,
    ConfigError,
    InputError,
    NonFiniteError,
    SapporoError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "BuildError",
    "ConfigError",
    "ForceResult",
    "InputError",
    "Library",
    "NonFiniteError",
    "PendingForce",
    "SapporoError",
    "__version__",
]

if TYPE_CHECKING:  # pragma: no cover
    from .library import ForceResult, Library, PendingForce

_LAZY = {"Library": "library", "ForceResult": "library", "PendingForce": "library"}


#: Public modules, imported on first use (``sapporo.reference.forces``, ...).
_MODULES = ("backend", "config", "errors", "hermite", "ic", "plots", "reference", "snapshot")


def __getattr__(name: str) -> Any:
    from importlib import import_module

    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    if name in _MODULES:
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module 'sapporo' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names: those of ``__all__`` and the public modules."""
    return sorted({*__all__, *_MODULES})
