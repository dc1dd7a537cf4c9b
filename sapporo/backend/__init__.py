"""Backend selection: explicit name, ``SAPPORO_BACKEND``, or automatic.

Automatic selection takes CUDA when PyCUDA imports and sees a device, else OpenCL. The
backend modules are imported lazily, so a machine without PyCUDA never imports it.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass

from sapporo import config
from sapporo.backend.base import (
    Backend,
    Buffer,
    Capabilities,
    Context,
    DeviceInfo,
    Event,
    HostBuffer,
    Kernel,
    Launch,
    NativeLaunch,
    Program,
)
from sapporo.errors import BackendError

__all__ = ["Backend", "BackendStatus", "Buffer", "Capabilities", "Context", "DeviceInfo", "Event",
           "HostBuffer", "Kernel", "Launch", "NativeLaunch", "Program", "capabilities",
           "get_backend", "probe_backends"]

log = logging.getLogger(__name__)

_CLASSES = {"opencl": "OpenCLBackend", "cuda": "CUDABackend"}  # by module
_INSTALL_HINT = ("To compute on the CPU, install the PoCL OpenCL runtime: pip install "
                 "pocl-binary-distribution (the 'pocl' extra: pip install -e \".[pocl]\" from a "
                 "source checkout), or on CPUs newer than its LLVM 14 (e.g. AMD Zen 5) the "
                 "distribution's PoCL (Debian/Ubuntu: apt install pocl-opencl-icd). For NVIDIA "
                 "GPUs install PyCUDA (pip install pycuda, the 'cuda' extra).")
_cache: dict[str, Backend | str] = {}  # a backend, or why it is unusable


@dataclass
class BackendStatus:
    """Whether a backend is usable here, and why not."""

    name: str
    backend: Backend | None
    devices: list[DeviceInfo]
    reason: str  # empty when usable


def _class(name: str) -> type[Backend]:
    return getattr(importlib.import_module(f"{__name__}.{name}"), _CLASSES[name])


def _load(name: str) -> Backend:
    if name not in _cache:
        try:
            _cache[name] = _class(name)()
        except BackendError as exc:
            _cache[name] = str(exc)
    result = _cache[name]
    if isinstance(result, str):
        # A new exception each time: re-raising a cached one would grow its traceback,
        # which would keep every caller's frames (and objects) alive.
        raise BackendError(result)
    return result


def capabilities(name: str) -> Capabilities:
    """What backend ``name``'s kernels offer (declared by the backend; no device needed)."""
    if name not in _CLASSES:
        raise BackendError(f"unknown backend {name!r} (expected one of {sorted(_CLASSES)})")
    return _class(name).capabilities


def _probe(name: str) -> BackendStatus:
    """Backend ``name`` with its devices, or the reason it is unusable."""
    try:
        backend = _load(name)
    except BackendError as exc:
        return BackendStatus(name, None, [], str(exc))
    devices = backend.devices()
    reason = "" if devices else (getattr(backend, "reason", "") or "no device")
    return BackendStatus(name, backend, devices, reason)


def probe_backends() -> list[BackendStatus]:
    """Try every backend; report devices or the reason it is unusable."""
    return [_probe(name) for name in ("cuda", "opencl")]


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name`` (``opencl``/``cuda``), else ``SAPPORO_BACKEND``, else auto.

    Raises
    ------
    BackendError
        When the requested backend (or, automatically, every backend) has no usable device;
        the message says what was tried and how to install the CPU runtime.
    """
    name = config.parse_backend(name) if name is not None else config.from_environment().backend
    if name is not None:
        status = _probe(name)
        if status.backend is None:
            raise BackendError(f"backend {name!r} is unusable: {status.reason}. {_INSTALL_HINT}")
        if not status.devices:
            raise BackendError(f"backend {name!r} has no usable device: {status.reason}. "
                               f"{_INSTALL_HINT}")
        return status.backend
    tried = []
    for status in probe_backends():
        if status.devices:
            log.debug("automatic backend selection: %s", status.name)
            return status.backend
        tried.append(f"{status.name}: {status.reason}")
    raise BackendError("no usable compute device. Tried " + "; ".join(tried) + ". " + _INSTALL_HINT)
