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
import re
from typing import Any

import numpy as np

from sapporo import config
from sapporo.core.layout import nco, raw_n
from sapporo.errors import (
    BackendError,
    ConfigError,
    InputError,
    NonFiniteError,
    SapporoError,
)

#: raw records per j-particle in the C half's buffer (the most any order uses)
JB_RECORDS = raw_n(8)

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
    """State behind the C API: the open library, the pending force, the last result."""

    def __init__(self) -> None:
        self.lib: Any = None
        self._pending: Any = None
        self._pending_ni = 0
        self._result: Any = None
        self._nb_arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._engine: Any = None  # the library's native engine, while C holds it
        self.g5: dict[int, Any] = {}  # GRAPE-5: one library of order 2 per context id

    # ------------------------------------------------------------------------ lifecycle
    def npipes(self) -> int:
        """i-particles per force call: :func:`read_npipes`."""
        return read_npipes()

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
        self._engine = None
        lib, self.lib = self.lib, None
        self._pending = self._result = self._nb_arrays = None
        if lib is not None:
            lib.close()

    def _open_lib(self) -> Any:
        if self.lib is None:
            raise SapporoError("the library is not open (call g6_open first)")
        if hasattr(self.lib, "_engine_wait"):
            self.lib._engine_wait()  # C may have left a force call in flight
        return self.lib

    # ------------------------------------------------------------------------ the engine
    def engine(self) -> tuple[int, int]:
        """The addresses of the native engine's C function table (``engine_api.h``) and of
        the open library's engine, for the C half to run block steps without Python; (0, 0)
        for a stand-in library (tests). The engine stays alive until close."""
        lib = self.lib
        if lib is None:
            raise SapporoError("the library is not open (call g6_open first)")
        api, engine = _engine_of(lib)
        self._engine = lib._engine if engine else None
        return api, engine

    # ------------------------------------------------------------------------ j-particles
    def set_j_records(self, address: np.ndarray, index: np.ndarray, records: np.ndarray,
                      given: int) -> None:
        """Store a batch of j-particles given as raw records, (n, JB_RECORDS, 4) in the
        rows of sapporo/layout.h (x|mass, v|t, a, jerk, snap, crackle, pop, d5), as the C
        half buffers them; ``given``: the highest record that may hold data.

        The C half has checked them (finite values, positions below COORD_LIMIT, addresses
        within the device memory, indices >= 0), so they go to the library's checked path:
        only what C does not check is checked here (pop and d5 below order 8, and in
        double-single the range of masses)."""
        _store(self._open_lib(), address, index, records, given)

    # ------------------------------------------------------------------------ GRAPE-5
    def g5_open(self, context: int, devices: list[int] | None = None) -> Any:
        """Open the library of GRAPE-5 context ``context`` (order 2; precision, backend and
        devices as for g6_open, or ``devices``: g5_open_special's) unless it is open; return
        it."""
        from sapporo.core.library import Library

        lib = self.g5.get(context)
        if lib is None:
            settings = open_settings(order=2, devices=devices)
            lib = self.g5[context] = Library(**settings)
            logger.info("C API opened GRAPE-5 context %d %s", context, settings)
        return lib

    def g5_close(self, context: int) -> None:
        """Close the library of GRAPE-5 context ``context`` (idempotent)."""
        lib = self.g5.pop(context, None)
        if lib is not None:
            lib.close()

    def g5_lib(self, context: int) -> Any:
        """The open library of GRAPE-5 context ``context``."""
        lib = self.g5.get(context)
        if lib is None:
            raise SapporoError(f"GRAPE-5 context {context} is not open (call g5_open first)")
        if hasattr(lib, "_engine_wait"):
            lib._engine_wait()
        return lib

    def g5_force(self, context: int, nj: int, x: np.ndarray, eps2: float) -> Any:
        """Forces on the i-particles ``x`` from addresses [0, nj) of a GRAPE-5 context, with
        softening ``eps2``; every i-index is 1 and every j-index 0, so no pair is excluded."""
        lib = self.g5_lib(context)
        ni = len(x)
        try:
            return lib.compute(x, np.zeros((ni, 3)), np.ones(ni, dtype=np.int64), eps2, nj=nj)
        except NonFiniteError as exc:  # the i-particles' ids (all 1) mean nothing here
            message = re.sub(r" \(id \d+\)", "", str(exc), count=1)
            raise NonFiniteError(f"{message}; GRAPE-5 excludes no pair, so an i-particle at "
                                 "a j-particle's position needs eps > 0") from None


    def set_time(self, t: float) -> None:
        """Time to which j-particles are predicted before the next force call."""
        self._open_lib().set_time(t)

    # ------------------------------------------------------------------------ forces
    def start(
        self,
        nj: int,
        index: np.ndarray,
        x: np.ndarray,
        v: np.ndarray,
        a: np.ndarray | None,
        eps2: float,
        h2: np.ndarray | None,
        jerk: np.ndarray | None = None,
    ) -> None:
        """Start a force call (firsthalf); ``jerk``: the i-particles' predicted jerks
        (order 8).

        ``h2[i]`` only shapes particle i's neighbour list: a finite positive value asks for
        one; zero, a negative value or a non-finite one (clients pass uninitialised arrays)
        gives particle i no list and never costs the forces (the C half warns about the
        non-finite ones). All of them without a list: lists off.
        """
        lib = self._open_lib()
        self._pending = self._result = self._nb_arrays = None
        if h2 is not None:
            wanted = np.isfinite(h2) & (h2 > 0.0)
            if not wanted.any():
                h2 = None
            elif not wanted.all():
                h2 = np.where(wanted, h2, 0.0)
        a = a if lib.order >= 6 else None
        jerk = jerk if lib.order >= 8 else None
        if lib.order >= 8 and (a is None or jerk is None):
            raise InputError(f"{'a' if a is None else 'jerk'}: order 8 needs the "
                             "i-particles' predicted accelerations and jerks "
                             "(sapporo_calc_firsthalf8)")
        extra = {} if jerk is None else {"jerk": jerk}
        self._pending = lib.start_compute(x, v, index, eps2, h2=h2, a=a, nj=nj, **extra)
        self._pending_ni = len(index)

    def finish(self, ni: int) -> Any:
        """Wait for the pending force (lasthalf) and return its ``ForceResult``."""
        pending, self._pending = self._pending, None
        if pending is None:
            raise SapporoError("no force call pending (call g6calc_firsthalf first)")
        self._result = pending.result()
        if ni != self._pending_ni:
            raise InputError(f"ni = {ni} differs from the firsthalf call's ni = "
                             f"{self._pending_ni}")
        return self._result

    def non_finite(self, rows: np.ndarray, index: np.ndarray) -> None:
        """Raise the library's :class:`NonFiniteError` for the engine's result rows (nco x
        ni, flat) of a call whose force is not finite (the C API's lasthalf)."""
        lib = self._open_lib()
        out = rows.reshape(-1, index.size)
        lib._raise_non_finite(out, index)
        raise NonFiniteError(f"non-finite force sum on {index.size} i-particle(s) (overflow)")

    def read_neighbours(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """Neighbour lists of the last force call as int32 CSR arrays.

        Returns
        -------
        offsets : ndarray, shape (ni + 1,)
            List k is ``ids[offsets[k]:offsets[k + 1]]`` (ascending indices, at most the
            library's ``nb_capacity`` of them).
        counts : ndarray, shape (ni,)
            Full list lengths, also on overflow.
        ids : ndarray
            The lists, concatenated.
        overflow : bool
            Whether any list exceeded the capacity.
        """
        res = self._result
        if res is None:
            raise SapporoError("no force result to read neighbour lists from")
        ni = len(res.pot)
        if res.neighbour_counts is None:
            zeros = np.zeros(ni + 1, dtype=np.int32)
            self._nb_arrays = (zeros, zeros[:ni], zeros[:0])
            return (*self._nb_arrays, False)
        lists = [res.neighbours(k) for k in range(ni)]
        offsets = np.zeros(ni + 1, dtype=np.int32)
        np.cumsum([len(x) for x in lists], out=offsets[1:])
        ids = (np.concatenate(lists) if ni else np.zeros(0)).astype(np.int32)
        counts = np.asarray(res.neighbour_counts, dtype=np.int32)
        self._nb_arrays = (offsets, counts, ids)
        return offsets, counts, ids, bool(res.overflow)


def _engine_of(lib: Any) -> tuple[int, int]:
    """The addresses of the native engine's C function table (``engine_api.h``) and of the
    library's engine; (0, 0) for a stand-in library (tests)."""
    if not hasattr(lib, "_engine_start"):  # a stand-in library (tests)
        return 0, 0
    if not lib._engine_tried:
        lib._engine_start()
    if lib._engine is None:
        return 0, 0
    import ctypes

    from sapporo.core import _engine  # type: ignore[attr-defined]

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return (int(get(_engine.C_API, b"sapporo.core._engine.C_API")),
            int(get(lib._engine.handle, b"sapporo.core._engine.Engine")))


def _store(lib: Any, address: np.ndarray, index: np.ndarray, records: np.ndarray,
           given: int) -> None:
    """j-particles as raw records into ``lib`` (see :meth:`Bridge.set_j_records`)."""
    n = int(address.shape[0])
    if n == 0:
        return
    if given >= 6 and lib.order < 8:
        raise InputError("pop: the 4th and 5th derivatives are taken at order 8 only "
                         f"(the library has order {lib.order})")
    with lib._lock:
        lib._check_open()
        if lib.precision == "double-single":
            lib._check_float_masses(records[:, 0, 3])
        lib._store_checked(address.astype(np.int64), index.astype(np.int64),
                           records[:, : raw_n(lib.order)], given)


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
        lib.shim_record_error(code, " ".join(message.split()).encode("utf-8", "replace"))
        return code

    def extern(func: Any) -> Any:
        return ffi.def_extern(error=internal, onerror=on_error)(func)

    def text(p: Any) -> str | None:
        return None if p == ffi.NULL else ffi.string(p).decode()

    # Views of the C arrays, valid during the call only: the library copies what it keeps.
    def vectors(p: Any, n: int) -> np.ndarray | None:
        if p == ffi.NULL:
            return None
        return np.frombuffer(ffi.buffer(p, 24 * n), dtype=np.float64).reshape(n, 3)

    def scalars(p: Any, n: int, dtype: type) -> np.ndarray | None:
        if p == ffi.NULL:
            return None
        return np.frombuffer(ffi.buffer(p, np.dtype(dtype).itemsize * n), dtype=dtype)

    def put(p: Any, values: np.ndarray) -> None:
        if p != ffi.NULL:
            src = np.ascontiguousarray(values, dtype=np.float64)
            ffi.memmove(p, src, src.nbytes)

    @extern
    def shim_py_npipes() -> int:
        return state.npipes()

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
                     max_address: Any) -> int:
        # ndev > 0: these devices; < 0: any -ndev of them (sapporo2); 0: not given.
        if ndev > 0:
            devs: list[int] | int | None = [int(d) for d in ffi.unpack(devices, ndev)]
        else:
            devs = -ndev if ndev < 0 else None
        state.open(order=order, precision=text(precision), backend=text(backend), devices=devs)
        max_address[0] = state.lib.max_address
        return 0

    @extern
    def shim_py_close() -> int:
        state.close()
        return 0

    @extern
    def shim_py_set_j(n, address, index, records, given) -> int:
        rec = np.frombuffer(ffi.buffer(records, 8 * 4 * JB_RECORDS * n), dtype=np.float64)
        state.set_j_records(scalars(address, n, np.int32), scalars(index, n, np.int32),
                            rec.reshape(n, JB_RECORDS, 4), given)
        return 0

    @extern
    def shim_py_start(nj, ni, index, x, v, a, jerk, eps2, h2, set_time, ti) -> int:
        if set_time:  # g6_set_ti's time, kept by C until the force call
            state.set_time(ti)
        order = state.lib.order if state.lib is not None else 0
        # only what this order reads: order 2 no velocities, below 6 no accelerations
        v_ = vectors(v, ni) if order >= 4 else np.zeros((ni, 3))
        a_ = vectors(a, ni) if order >= 6 else None
        jerk_ = vectors(jerk, ni) if order >= 8 else None
        state.start(nj, scalars(index, ni, np.int32), vectors(x, ni), v_, a_,
                    eps2, scalars(h2, ni, np.float64), jerk_)
        return 0

    @extern
    def shim_py_finish(ni, rows, order) -> int:
        put(rows, state.finish(ni)._rows)  # read in C, as the engine's rows are
        order[0] = state.lib.order
        return 0

    @extern
    def shim_py_non_finite(ni, rows, index) -> int:
        order = state._open_lib().order
        state.non_finite(scalars(rows, ni * nco(order), np.float64),
                         scalars(index, ni, np.int32))
        return 0

    @extern
    def shim_py_engine(api_out, engine_out) -> int:
        api, engine = state.engine()
        api_out[0] = ffi.cast("void *", api)
        engine_out[0] = ffi.cast("void *", engine)
        return 0

    @extern
    def shim_py_g5_open(context, ndev, devices, max_address, api_out, engine_out,
                        one_out) -> int:
        # ndev > 0: the devices g5_open_special named; 0: as g6_open chooses them
        lib = state.g5_open(context, [int(d) for d in ffi.unpack(devices, ndev)]
                            if ndev > 0 else None)
        api, engine = _engine_of(lib)
        max_address[0] = lib.max_address
        one_out[0] = int(any(d.ctx.one_kernel_at_a_time for d in getattr(lib, "_devs", ())))
        api_out[0] = ffi.cast("void *", api)
        engine_out[0] = ffi.cast("void *", engine)
        return 0

    @extern
    def shim_py_g5_close(context) -> int:
        state.g5_close(context)
        return 0

    @extern
    def shim_py_g5_set_j(context, n, address, index, records) -> int:
        # two double4 per particle (x|m, v|t: GRAPE-5 has no derivatives)
        rec = np.frombuffer(ffi.buffer(records, 8 * 4 * 2 * n), dtype=np.float64)
        _store(state.g5_lib(context), scalars(address, n, np.int32),
               scalars(index, n, np.int32), rec.reshape(n, 2, 4), 1)
        return 0

    @extern
    def shim_py_g5_force(context, nj, ni, x, eps2, rows) -> int:
        put(rows, state.g5_force(context, nj, vectors(x, ni), eps2)._rows)
        return 0

    @extern
    def shim_py_read_neighbours(ni_out, offsets_out, counts_out, ids_out) -> int:
        offsets, counts, ids, overflow = state.read_neighbours()
        ni_out[0] = len(counts)
        offsets_out[0] = ffi.from_buffer("int[]", offsets)
        counts_out[0] = ffi.from_buffer("int[]", counts)
        ids_out[0] = ffi.from_buffer("int[]", ids)
        return int(overflow)

    lib.shim_mark_ready()
    return state
