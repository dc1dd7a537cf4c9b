"""The Python half of the GRAPE-6 C API (``libsapporo.so``), run by its embedded interpreter.

The C half (``capi/shim.c``) validates arguments, buffers j-particles and calls the
functions declared in ``capi/bridge.h``; :func:`bind` attaches one ``@ffi.def_extern`` to
each of them.  :class:`Bridge` holds the state (one :class:`sapporo.Library` per process)
and works on NumPy arrays only, so it can be tested without C.

Conventions: G = 1, float64; everything handed to the library is unscaled (the C half has
already multiplied the GRAPE-scaled ``a/2``, ``jerk/6``, ``snap/18`` back).
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

from sapporo import config
from sapporo.backend.base import usable_cores
from sapporo.errors import (
    BackendError,
    ConfigError,
    InputError,
    NonFiniteError,
    SapporoError,
)

__all__ = ["DEFAULT_NPIPES", "MAX_NPIPES", "Bridge", "bind", "device_count", "open_settings",
           "read_npipes"]

logger = logging.getLogger(__name__)

#: g6_npipes() when ``SAPPORO_NPIPES`` is not set, and its largest value (defined in
#: sapporo.config with the other settings' ranges)
DEFAULT_NPIPES = config.DEFAULT_NPIPES
MAX_NPIPES = config.MAX_NPIPES
#: Order and precision of ``g6_open`` when neither the caller nor the environment says.
DEFAULT_ORDER = 4
DEFAULT_PRECISION = "double-single"
#: Device file read by ``g6_open`` when ``SAPPORO_CONFIG`` is not set and it exists.
LOCAL_CONFIG_FILE = "sapporo2.config"


def open_settings(
    order: int = 0,
    precision: str | None = None,
    backend: str | None = None,
    devices: str | list[int] | int | None = None,
) -> dict[str, Any]:
    """Resolve the arguments of ``Library(...)`` for an open call from C.

    Explicit arguments win (``order`` 0 and ``None`` mean "not given"); then the
    ``SAPPORO_*`` variables; then, for the devices, the ``sapporo2.config`` file named by
    ``SAPPORO_CONFIG`` (or ``./sapporo2.config`` when present); then 4th order,
    double-single precision, automatic backend and the first device.

    ``devices`` (and a ``sapporo2.config`` file) may also give a number ``n`` of devices,
    whichever (sapporo2's negative count): the backend's first ``n`` devices, fewer (with a
    warning) where it has fewer; ``n = 0`` means all of them.

    Returns
    -------
    dict
        Keyword arguments for :class:`sapporo.Library`.
    """
    env = config.from_environment()
    order_ = config.parse_order(order) if order else env.order
    precision_ = config.parse_precision(precision) if precision is not None else env.precision
    backend_ = config.parse_backend(backend) if backend is not None else env.backend
    devices_ = devices if devices is not None else env.devices
    if devices_ is None:
        path = env.config_file
        if path is None and os.path.isfile(LOCAL_CONFIG_FILE):
            path = LOCAL_CONFIG_FILE
        if path is not None:
            try:
                devices_ = config.read_sapporo2_config(path)
            except UnicodeDecodeError:
                raise ConfigError(
                    f"{path}: not a text file (a sapporo2.config holds the device count, "
                    "then one device id per line)"
                ) from None
    if devices_ is None:
        # one rank of an MPI job (mpiexec, srun): the device of its rank on the node
        from sapporo.parallel import launcher

        local = launcher.launcher_device(backend_)
        if local is not None:
            devices_ = [local]
    if isinstance(devices_, int):
        devices_ = _any_devices(backend_, devices_)
    return {
        "order": order_ or DEFAULT_ORDER,
        "precision": precision_ or DEFAULT_PRECISION,
        "backend": backend_,
        "devices": devices_,
    }


def read_npipes() -> int:
    """``SAPPORO_NPIPES``, else :data:`DEFAULT_NPIPES`; a value outside 1 ..
    :data:`MAX_NPIPES` is clamped, with a warning (:func:`sapporo.config.int_setting`).

    Reads that variable only, so a malformed ``SAPPORO_BACKEND`` does not spoil the count.

    Raises
    ------
    ConfigError
        When the variable is not an integer (g6_npipes() answers :data:`DEFAULT_NPIPES`
        meanwhile, and g6_open refuses it).
    """
    n = config.int_setting("SAPPORO_NPIPES")
    return DEFAULT_NPIPES if n is None else n


def device_count(backend: str | None = None) -> int:
    """Devices of the backend g6_open would use (``SAPPORO_BACKEND``, else automatic).

    sapporo_light's ``get_device_count()``; ``backend`` overrides the variable.
    """
    from sapporo.backend import get_backend

    if backend is None:
        backend = config.parse_backend(os.environ.get("SAPPORO_BACKEND") or None,
                                       "SAPPORO_BACKEND")
    return len(get_backend(backend).devices())


def _any_devices(backend: str | None, n: int) -> str | list[int]:
    """``n`` devices of the backend, whichever: its first ``n`` (0: ``"all"``)."""
    from sapporo.backend import get_backend

    if n == 0:
        return "all"
    available = len(get_backend(backend).devices())
    if n > available:
        logger.warning("%d devices asked for (any), the backend has %d: using %d", n,
                       available, available)
        n = available
    return list(range(n))


class Bridge:
    """State behind the C API: the open libraries (GRAPE-6's, and one per GRAPE-5 context),
    whose engines the C half calls for every j-particle and force."""

    def __init__(self) -> None:
        self.lib: Any = None
        self.g5: dict[int, Any] = {}  # GRAPE-5: one library of order 2 per context id
        # the engines the C half holds, by context (None: GRAPE-6's), alive until closed
        self._engines: dict[int | None, Any] = {}

    def open(self, **kwargs: Any) -> None:
        """Open the library with :func:`open_settings` applied to ``kwargs``."""
        from sapporo.core.library import Library

        if self.lib is not None:
            return
        read_npipes()  # a malformed SAPPORO_NPIPES is refused here, not at the first force call
        settings = open_settings(**kwargs)
        was_enabled = gc.isenabled()
        gc.disable()  # the backend's start-up makes many objects and no garbage
        try:
            self.lib = Library(**settings)
        finally:
            if was_enabled:
                gc.enable()
        logger.info("C API opened %s", settings)

    def close(self) -> None:
        """Close the library and drop every result (idempotent)."""
        self._engines.pop(None, None)
        lib, self.lib = self.lib, None
        if lib is not None:
            lib.close()

    def engine(self, context: int | None = None) -> tuple[int, int]:
        """The addresses of the native engine's C function table (``engine_api.h``) and of
        the engine of the open library (GRAPE-6's, or GRAPE-5 context ``context``'s), which
        the C half calls for every j-particle and force.  The engine stays alive until that
        library closes, even if the library drops it (a device that failed)."""
        import ctypes

        from sapporo.core import _engine  # type: ignore[attr-defined]

        lib = self.lib if context is None else self.g5.get(context)
        if lib is None:
            raise SapporoError("the library is not open (call g6_open first)")
        eng = self._engines[context] = lib._engine_ready()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        return (int(get(_engine.C_API, b"sapporo.core._engine.C_API")),
                int(get(eng.handle, b"sapporo.core._engine.Engine")))

    def g5_open(self, context: int, devices: list[int] | None = None,
                cutoff: float = -1.0) -> Any:
        """Open the library of GRAPE-5 context ``context`` (order 2; precision, backend and
        devices as for g6_open, or ``devices``: g5_open_special's) unless it is open; return
        it.

        ``cutoff``: the S2 split length of the short-range force (g5_set_cutoff_scale's; 0:
        Newtonian forces), or negative for ``SAPPORO_G5_CUTOFF``'s. The library's
        ``cutoff`` says what it was opened with.

        The library's instance is the context id modulo the cores this process may use, so
        that a tree code's threads (one context each, as many as cores) compute at once on
        PoCL, each with kernels of its own (:class:`~sapporo.core.library.Library`); and it
        has no twin: those threads keep the cores busy, and a list the calling thread just
        stored is in its own core's caches (one thread gained nothing from a second core on
        tree-walk lists, two lost up to a third).
        """
        from sapporo.core.library import Library

        lib = self.g5.get(context)
        if lib is None:
            settings = open_settings(order=2, devices=devices)
            length = config.g5_cutoff_setting() if cutoff < 0 else (float(cutoff) or None)
            if length is not None:
                settings.update(cutoff=length, cutoff_shape="s2")
            lib = self.g5[context] = Library(**settings, ids=False, twin=False,
                                             instance=context % usable_cores())
            logger.info("C API opened GRAPE-5 context %d %s", context, settings)
        return lib

    def g5_close(self, context: int) -> None:
        """Close the library of GRAPE-5 context ``context`` (idempotent)."""
        self._engines.pop(context, None)
        lib = self.g5.pop(context, None)
        if lib is not None:
            lib.close()


def _error_code(lib: Any, exc: BaseException) -> int:
    """The ``SAPPORO_ERR_*`` code (from sapporo.h, through ``lib``) for an exception."""
    for cls, name in (
        (InputError, "SAPPORO_ERR_INPUT"),
        (ConfigError, "SAPPORO_ERR_CONFIG"),
        (NonFiniteError, "SAPPORO_ERR_NONFINITE"),
        (BackendError, "SAPPORO_ERR_BACKEND"),
        (SapporoError, "SAPPORO_ERR_STATE"),
    ):
        if isinstance(exc, cls):
            return int(getattr(lib, name))
    return int(lib.SAPPORO_ERR_INTERNAL)


def bind(ffi: Any, lib: Any, bridge: Bridge | None = None) -> Bridge:
    """Attach the Python implementation of every function of ``capi/bridge.h``.

    Called once by the embedded init code of ``libsapporo.so``.  Each function returns 0
    or a positive value on success; an exception becomes its ``SAPPORO_ERR_*`` code, with
    the message handed to the C half (which prints it and keeps it for
    ``sapporo_last_error()``).
    """
    import sapporo

    state = bridge if bridge is not None else Bridge()
    internal = int(lib.SAPPORO_ERR_INTERNAL)

    def on_error(exc_type: type, exc: BaseException, tb: Any) -> int:
        code = _error_code(lib, exc)
        message = str(exc) if isinstance(exc, SapporoError) else f"{exc_type.__name__}: {exc}"
        lib.shim_report(code, " ".join(message.split()).encode("utf-8", "replace"), 0)
        return code

    def extern(func: Any) -> Any:
        return ffi.def_extern(error=internal, onerror=on_error)(func)

    def text(p: Any) -> str | None:
        return None if p == ffi.NULL else ffi.string(p).decode()

    def device_list(ndev: int, devices: Any) -> list[int] | None:
        return [int(d) for d in ffi.unpack(devices, ndev)] if ndev > 0 else None

    def hand_over(context: int | None, api_out: Any, engine_out: Any) -> int:
        api, engine = state.engine(context)
        api_out[0] = ffi.cast("void *", api)
        engine_out[0] = ffi.cast("void *", engine)
        return 0

    @extern
    def shim_py_npipes() -> int:
        return read_npipes()

    @extern
    def shim_py_device_count() -> int:
        return device_count()

    @extern
    def shim_py_version(buffer: Any, size: int) -> int:
        data = sapporo.__version__.encode()[: max(size - 1, 0)]
        ffi.memmove(buffer, data + b"\0", len(data) + 1)
        return 0

    @extern
    def shim_py_open(order: int, precision: Any, backend: Any, ndev: int, devices: Any,
                     max_address: Any, api_out: Any, engine_out: Any) -> int:
        # ndev > 0: these devices; < 0: any -ndev of them (sapporo2); 0: not given.
        devs = -ndev if ndev < 0 else device_list(ndev, devices)
        state.open(order=order, precision=text(precision), backend=text(backend), devices=devs)
        max_address[0] = state.lib.max_address
        return hand_over(None, api_out, engine_out)

    @extern
    def shim_py_close() -> int:
        state.close()
        return 0

    @extern
    def shim_py_g5_open(context, ndev, devices, cutoff, max_address, api_out, engine_out,
                        slot_out) -> int:
        # ndev > 0: the devices g5_open_special named; 0: as g6_open chooses them
        lib = state.g5_open(context, device_list(ndev, devices), float(cutoff[0]))
        cutoff[0] = getattr(lib, "cutoff", None) or 0.0
        max_address[0] = lib.max_address
        # the lock of its instance where kernels must not run at once from two contexts
        shared = any(d.ctx.one_kernel_at_a_time for d in getattr(lib, "_devs", ()))
        slot_out[0] = lib.instance if shared else -1
        return hand_over(context, api_out, engine_out)

    @extern
    def shim_py_g5_close(context) -> int:
        state.g5_close(context)
        return 0

    lib.shim_mark_ready()
    return state
