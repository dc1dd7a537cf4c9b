"""The force library: j-particle memory, on-device prediction, forces on blocks of i-particles.

Conventions: G = 1; ``acc = sum_j m_j r_ij / R^3``, ``pot = -sum_j m_j / R`` with
``r_ij = x_j - x_i`` and ``R^2 = |r_ij|^2 + eps2``; jerk and snap are the unscaled time
derivatives of the acceleration. A j-particle whose id equals the i-particle's id is excluded
(no force, not a neighbour), so eps2 = 0 is allowed.

Memory model (as on a GRAPE board): j-particles live in numbered memory slots
("addresses"); the host keeps a mirror and the device's records follow it. Before each force
call the j-particles are predicted on the device to the time given by
:meth:`Library.set_time`. With several devices, addresses are spread round-robin (address
``a`` lives on device ``a % ndev``), each device computes partial forces, and they are
combined in a fixed order. Every force call runs in the native engine
(:mod:`sapporo.core.engine`) on the launches this library plans
(:mod:`sapporo.core.device`); Python checks the arguments the engine does not take as they
are (:mod:`sapporo.core.validate`) and reads its results into a
:class:`~sapporo.core.results.ForceResult`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from sapporo import config
from sapporo.backend import DeviceInfo, get_backend
from sapporo.core import engine, layout
from sapporo.core.device import J_MIN, Device, Variant, check_cutoff, j_bytes
from sapporo.core.launch import NI_CHUNK, LaunchTable, check_table
from sapporo.core.layout import (
    ACC_ROWS,
    CRACKLE_ROWS,
    JERK_ROWS,
    OC_NNID,
    OC_NNR2,
    OC_POT,
    SNAP_ROWS,
)
from sapporo.core.results import DEFAULT_NB_CAPACITY, ForceResult, PendingForce
from sapporo.core.validate import COORD_LIMIT, all_finite, int_arg, ints, scalar, scalars, vec3
from sapporo.errors import BackendError, InputError, NonFiniteError, SapporoError

__all__ = ["DEFAULT_NB_CAPACITY", "ForceResult", "Library", "PendingForce"]

log = logging.getLogger(__name__)

MAX_ID = layout.MAX_ID  #: the largest id (layout.h)
MAX_ADDRESS = layout.MAX_ADDRESS  #: the largest j-address (layout.h)
#: the lists of a chunk of NI_CHUNK i-particles take NI_CHUNK * capacity * 4 bytes (2 GiB)
MAX_NB_CAPACITY = config.MAX_NB_CAPACITY
#: the smallest normal float: double-single computes pair terms in float, where a smaller
#: non-zero mass is a denormal (or zero) and its force is silently lost
FLT_MIN = 1.1754943508222875e-38


# ---------------------------------------------------------------------------------------------
# the library

_F = TypeVar("_F", bound=Callable[..., Any])
_now = time.perf_counter


def _h2_rows(h2: Any, x: Any, ids: bool) -> Any:
    """A scalar neighbour radius squared as one per i-particle, as the engine takes it (it
    checks the values); anything else as it is. A library without ids (``ids``) refuses."""
    if not ids:
        raise InputError("h2: neighbour lists need the ids; this library was opened with "
                         "ids=False (every pair counts, as on GRAPE-5)")
    if isinstance(h2, (float, int, np.floating, np.integer)) and not isinstance(h2, bool):
        with contextlib.suppress(TypeError):  # (x is no sequence: the library names it)
            return np.full(len(x), h2, dtype=np.float64)
    return h2


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on another C library."""
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def _give_back_freed_memory() -> None:
    """Return the heap a closed library freed to the system: glibc keeps freed blocks in
    the arenas of the threads that used them (the runtime's worker threads), so a program
    that opens and closes libraries (GRAPE-5 contexts, tests) would otherwise keep every
    library's memory it ever had (64 contexts opened and closed 12 times: 307 -> 1717 MB;
    trimmed, 142 MB flat)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _serialised(method: _F) -> _F:
    """Run ``method`` under the library's lock: one call at a time, whatever the thread."""

    @functools.wraps(method)
    def locked(self: Library, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]


class Library:
    """Direct-summation gravity on one or several devices (GRAPE-6 semantics).

    Parameters
    ----------
    order : {2, 4, 6, 8}
        2: acceleration and potential; 4: + jerk; 6: + snap; 8: + crackle.
    precision : {"double-single", "double", "single"}
        ``"double-single"``: j - i position differences in hi/lo float pairs, the rest in
        float, partial sums in double (relative error ~1e-6). ``"double"``: all in double.
        ``"single"`` (order 2 only, for tree codes): double-single without the low parts,
        differences of float positions (docs/accuracy.md states its error).
    backend : {None, "opencl", "cuda"}
        None: ``SAPPORO_BACKEND``, else CUDA when usable, else OpenCL.
    devices : None, list of int, or "all"
        None: ``SAPPORO_DEVICES``, else the backend's first device.
    nb_capacity : int
        Neighbour-list capacity per i-particle (``SAPPORO_NB_CAPACITY``, default 256).
    profiling : bool
        Time kernels on the device (see :attr:`kernel_seconds`).
    cutoff : float or None
        Order 2 only: compute the short-range part of a TreePM / P^3M split of gravity
        instead of Newton's, with this split length; None (the default): Newton's. Each
        pair's acceleration is multiplied by ``g(R)`` and its potential by ``h(R)``
        (``R^2 = r^2 + eps2``); coincident pairs (``R = 0``) are left out. The value is
        compiled into the force kernel (one build per length). See docs/accuracy.md.
    cutoff_shape : {"s2", "gauss"}
        ``"s2"`` (default): Phantom-GRAPE's PG5/table split, Hockney & Eastwood's S2 shape
        of diameter ``cutoff`` (the force is zero for ``R >= cutoff``). ``"gauss"``: the
        Gaussian split of :class:`sapporo.pm.P3M` with ``r_s = cutoff`` (``g = erfc(x) +
        2 x exp(-x^2) / sqrt(pi)``, ``h = erfc(x)``, ``x = R / (2 r_s)``), whose mesh
        (``ParticleMesh(split=r_s)``) gives the long-range part.
    ids : bool
        True (the default): an i-particle skips the j-particles with its id (self-exclusion)
        and gets its nearest neighbour. False: the kernels read no ids, as GRAPE-5 computes:
        every pair counts (a particle that is also a j-particle adds ``-m / eps`` to its own
        potential; without softening its force is not finite), ``nn_index`` is -1 and
        neighbour lists are refused. The order-2 kernels then run about a fifth faster.
        The C API's GRAPE-5 contexts use it.
    instance : int
        Libraries of different instances never share a compiled kernel (on PoCL, whose CPU
        drivers must not run one from two threads at once). The C API's GRAPE-5 contexts,
        which compute at the same time from a tree code's threads, use it; the Python API
        computes one call at a time, so 0 (the default) serves it.
    twin : bool
        On PoCL's CPU device with two cores or more, a small force call (one that runs on
        PoCL's single-threaded companion device rather than its threaded one) computes half
        of its j-range on a second core, from a thread of the library's own. True (the
        default): where there is that second core; False: one core per call, for programs
        that compute from several threads at once (the C API's GRAPE-5 contexts).
    """

    def __init__(self, order: int = 4, precision: str = "double-single",
                 backend: str | None = None, devices: Any = None, nb_capacity: int | None = None,
                 profiling: bool = False, cutoff: float | None = None, cutoff_shape: str = "s2",
                 ids: bool = True, instance: int = 0, twin: bool = True):
        self._lock = threading.RLock()  # calls from several threads are serialised
        if not isinstance(order, str):
            order = int_arg("order", order, 0, 2**31, " (expected 2, 4, 6 or 8)")
        if not isinstance(precision, str):
            raise InputError(f"precision: expected 'double', 'double-single' or 'single', got "
                             f"{precision!r}")
        try:
            self.order = config.parse_order(order, "order")
            self.precision = config.parse_precision(precision, "precision")
        except SapporoError as exc:
            raise InputError(str(exc)) from None
        if self.precision == "single" and self.order != 2:
            raise InputError(f"precision 'single' is for order 2 (tree codes, the GRAPE-5 "
                             f"calls), not order {self.order}: use 'double-single'")
        env = config.from_environment()
        if nb_capacity is None:
            nb_capacity = env.nb_capacity or DEFAULT_NB_CAPACITY
        self.nb_capacity = int_arg("nb_capacity", nb_capacity, 1, MAX_NB_CAPACITY)
        self.profiling = bool(profiling)
        self.cutoff, self.cutoff_shape = check_cutoff(self.order, cutoff, cutoff_shape)
        self.instance = int_arg("instance", instance, 0, 2**31 - 1)
        if not isinstance(ids, (bool, np.bool_)):
            raise InputError(f"ids: expected True or False, got {ids!r}")
        self.ids = bool(ids)
        if not isinstance(twin, (bool, np.bool_)):
            raise InputError(f"twin: expected True or False, got {twin!r}")
        self._variant = Variant(self.order, self.precision, self.nb_capacity, self.profiling,
                                self.cutoff, self.cutoff_shape, self.ids)
        be = get_backend(backend)
        self.backend_name = be.name
        available = be.devices()
        if devices is None:
            devices = env.devices if env.devices is not None else [0]
        if isinstance(devices, str):
            devices = (list(range(len(available))) if devices.strip().lower() == "all"
                       else config.parse_devices(devices, "devices"))
        if isinstance(devices, (int, np.integer)):
            devices = [int(devices)]
        devices = list(devices)
        if not devices:
            raise InputError("devices: empty device list")
        for d in devices:
            if not isinstance(d, (int, np.integer)) or not 0 <= d < len(available):
                raise InputError(f"devices: {d!r} is not a device index of backend {be.name} "
                                 f"(0..{len(available) - 1}; see 'sapporo info')")
        if len(set(devices)) != len(devices):
            raise InputError(f"devices: repeated index in {devices}")
        self._devs: list[Device] = []
        try:
            for d in devices:
                ctx = be.open(int(d), profiling=self.profiling, instance=self.instance,
                              twin=bool(twin))
                if not ctx.info.double_support:
                    ctx.close()
                    raise BackendError(f"device {ctx.info.name} has no double-precision support, "
                                       "which both precisions need (double-single sums "
                                       "partial results in double)")
                self._devs.append(Device(self._variant, ctx))
        except BaseException:
            for dev in self._devs:
                dev.close()
            raise
        # the host mirror of the j-particles: raw records per address, and ids
        self._raw_n = layout.raw_n(self.order)
        self._raw = np.zeros((0, self._raw_n, 4), dtype=np.float64)
        self._ids = np.full(0, -1, dtype=np.int64)
        self._lost = False  # a device lost its records (new buffers): upload them all again
        # derivative records the predictor reads: those past it are zero in every record
        # stored so far (grows, never shrinks)
        self._pred_terms = 0
        # the addresses in use (the highest stored + 1): a cell the engine raises as it stores
        self._stored = np.zeros(1, dtype=np.int64)
        self._phases: dict[str, float] | None = None  # time per phase (sapporo.perf.latency)
        self._pending: PendingForce | None = None
        self._closed = False
        # the native engine (made on first use; None again after a device failed), whether
        # it was tried, and its result rows
        self._engine: Any = None
        self._engine_tried = False
        self._engine_out: np.ndarray | None = None
        # the generation of the launches the engine's plans hold: bumped by a new table
        self._lgen = np.zeros(1, dtype=np.int64)
        # the addresses the engine uploads from the mirror with the next plans it installs
        # (DP_UPLOAD), and those of the last plans (kept alive until it has read them)
        self._upload = np.zeros(0, dtype=np.int32)
        self._uploaded = self._upload
        self._planner_exc: SapporoError | None = None  # the planner's error, raised as it was
        self._filled_rows = layout.result_rows(self.order)  # the rows the kernels fill
        self._nco = layout.nco(self.order)
        log.info("sapporo: order %d, %s, %s on %s", self.order, self.precision,
                 self.backend_name, ", ".join(d.info.name for d in self._devs))

    # -- properties
    @property
    def device_infos(self) -> list[DeviceInfo]:
        """The devices in use."""
        return [d.info for d in self._devs]

    @property
    def device_name(self) -> str:
        """Name(s) of the devices in use."""
        return " + ".join(d.info.name for d in self._devs)

    @property
    def n_stored(self) -> int:
        """Number of j-addresses in use (highest address set + 1)."""
        return int(self._stored[0])

    @property
    def ndev(self) -> int:
        """Number of devices."""
        return len(self._devs)

    @property
    def kernel_seconds(self) -> float:
        """Device time spent in kernels so far, in seconds (only with ``profiling=True``;
        0.0 without).

        It counts the kernels that the native engine runs for the library's calls, each
        timed by the runtime (OpenCL's event profiling, CUDA's events): the prediction of the
        j-particles, the force, the reduce that combines its j-parts where a kernel does that,
        and the scatter of stored j-particles into device memory; not the copies between host
        and device, nor any time on the host. A call counts once its work has finished (a
        pending :meth:`start_compute` when its result is collected).
        """
        return sum(d.kernel_seconds for d in self._devs)

    def launch_tables(self) -> list[LaunchTable]:
        """The launch-parameter table of each device (from a profile or defaults)."""
        return [d.table for d in self._devs]

    @_serialised
    def set_launch_table(self, table: LaunchTable) -> None:
        """Use ``table`` for every device from now on (tuning sweeps and experiments).

        Raises :class:`~sapporo.errors.ConfigError` when a configuration does not fit a
        device (local memory, group size, a shape the backend's kernels do not have).
        """
        self._check_open()
        for d in self._devs:
            check_table(table, d.info, self.order, self.precision)
        for d in self._devs:
            d.table = table
        self._lgen[0] += 1  # the engine's plans hold the old launches: made again

    def _check_open(self) -> None:
        if self._closed:
            raise SapporoError("the library has been closed")

    def _collect_pending(self) -> None:
        """Collect a result nobody waited for while the devices hold it (their buffers are
        about to be reused or freed); it, or its error, stays stored for its own
        :meth:`PendingForce.result`."""
        if self._pending is not None:
            with contextlib.suppress(Exception):
                self._pending.result()

    # -- lifecycle
    @_serialised
    def close(self) -> None:
        """Release the devices (idempotent)."""
        if self._closed:
            return
        self._collect_pending()
        self._closed = True
        self._pending = None
        self._drop_engine()
        for d in self._devs:
            try:
                d.close()
            except Exception as exc:  # pragma: no cover - driver trouble at shutdown
                log.warning("closing %s: %s", d.info.name, exc)
        self._devs = []
        # the host mirror of the j-particles goes too (a closed library may stay referenced)
        self._raw = np.zeros((0, self._raw_n, 4))
        self._ids = np.zeros(0, dtype=np.int64)
        self._engine_out = None
        self._stored[0] = 0
        _give_back_freed_memory()

    def _collected(self, pending: PendingForce) -> None:
        """A pending result was collected: it no longer holds the buffers."""
        if self._pending is pending:
            self._pending = None

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.close()

    # -- j-particles
    def set_j_particles(self, address: Any, index: Any, t: Any, mass: Any, x: Any, v: Any,
                        a: Any = None, jerk: Any = None, snap: Any = None, crackle: Any = None,
                        pop: Any = None, d5: Any = None) -> None:
        """Store j-particles in memory slots ``address`` (any order, any number of times).

        Parameters
        ----------
        address : int or (n,) ints >= 0
            Memory slots; memory grows as addresses grow.
        index : int or (n,) ints
            Particle ids (0 <= id < 2**31), used for self-exclusion and neighbour output.
        t : float or (n,)
            Time of the particle data (prediction uses ``set_time(t) - t``).
        mass : float or (n,)
        x, v : (n, 3)
            Position and velocity.
        a, jerk, snap, crackle : (n, 3) or None
            Unscaled derivatives (None: zero), all used by the predictor.
        pop, d5 : (n, 3) or None
            Order 8 only: the 4th and 5th derivatives of the acceleration (None: zero),
            which the 8th-order predictor adds (positions then err by O(dt^8)).
        """
        with self._lock:
            eng = self._engine or self._engine_ready()  # (closed: no engine, and the error)
            ph = self._phases
            t0 = _now() if ph is not None else 0.0
            args = (address, index, t, mass, x, v, a, jerk, snap, crackle, pop, d5)
            if not self._engine_call(eng.put_j, *args):
                # types the engine does not take, or a value it refuses: converted and
                # checked here (named in the library's words), then stored after all
                self._planner_exc = None
                cols = self._j_columns(*args)
                if cols and not self._engine_call(eng.put_j, *cols):
                    raise self._refusal(eng)
            if ph is not None:
                ph["store"] += _now() - t0

    def _j_columns(self, address: Any, index: Any, t: Any, mass: Any, x: Any, v: Any,
                   *derivs: Any) -> tuple[Any, ...]:
        """The arguments of :meth:`set_j_particles` checked and converted to the arrays the
        engine takes (InputError naming what is wrong)."""
        addr = ints("address", address, None, 0, MAX_ADDRESS)
        n = addr.size
        if n == 0:
            return ()
        ids = ints("index", index, n, 0, MAX_ID)
        if self.order < 8 and (derivs[4] is not None or derivs[5] is not None):
            raise InputError(f"{'pop' if derivs[4] is not None else 'd5'}: the 4th and 5th "
                             "derivatives are taken at order 8 only")
        cols = [scalars("t", t, n), scalars("mass", mass, n), vec3("x", x, n, limit=COORD_LIMIT),
                vec3("v", v, n)]
        cols += [None if val is None else vec3(name, val, n) for name, val in
                 zip(("a", "jerk", "snap", "crackle", "pop", "d5"), derivs, strict=True)]
        return (addr, ids, *(None if u is None else np.ascontiguousarray(u) for u in cols))

    def _refusal(self, eng: Any) -> SapporoError:
        """Why the engine refused arguments the library's own checks passed: a rule only it
        knows (its message), or the planner's error (the capacity) as it was raised."""
        exc, self._planner_exc = self._planner_exc, None
        return exc or InputError(eng.error)

    @_serialised
    def reset(self) -> None:
        """Forget every j-particle (addresses become unused; memory is kept)."""
        self._engine_call(self._engine_ready().reset)

    def _j_capacity(self) -> int:
        """How many j-addresses the devices hold: 80% of the smallest one's memory, and no
        buffer beyond the largest one a device allocates (address a lives on device a % ndev,
        so the first device holds the most)."""
        mem = min(d.info.global_mem_size for d in self._devs)
        return min(int(0.8 * mem * self.ndev) // j_bytes(self.order),
                   min(d.max_j for d in self._devs) * self.ndev)

    @property
    def max_address(self) -> int:
        """The largest j-address :meth:`set_j_particles` accepts (device memory, MAX_ADDRESS)."""
        self._check_open()
        return min(MAX_ADDRESS, self._j_capacity() - 1)

    def _grow(self, top: int) -> None:
        limit = self._j_capacity()
        if top > limit:
            mem = min(d.info.global_mem_size for d in self._devs)
            need = top * j_bytes(self.order) / self.ndev
            one = min((d.info.max_alloc_size for d in self._devs if d.info.max_alloc_size),
                      default=0)
            raise InputError(
                f"address: {top - 1} is beyond the j-memory of {self.device_name}: it holds "
                f"addresses 0 .. {min(limit, MAX_ADDRESS + 1) - 1} (addresses up to "
                f"{top - 1} need {need / 2**30:.2f} GiB per device, of {mem / 2**30:.1f} GiB"
                + (f", in buffers of at most {one / 2**30:.2f} GiB" if one else "") + ")")
        # doubling, but never beyond what the devices hold
        cap = min(max(top, 2 * self._raw.shape[0], J_MIN), limit)
        try:
            raw = np.zeros((cap, self._raw_n, 4), dtype=np.float64)
            ids = np.full(cap, -1, dtype=np.int64)
        except MemoryError:
            raise BackendError(
                f"address: {top - 1}: the host has no room for the library's copy of {cap} "
                f"j-addresses ({cap * (self._raw_n * 32 + 8)} bytes)") from None
        k = self._raw.shape[0]
        raw[:k], ids[:k] = self._raw, self._ids
        self._raw, self._ids = raw, ids

    def set_time(self, t: float) -> None:
        """Predict j-particles to time ``t`` before the next force call."""
        with self._lock:
            eng = self._engine or self._engine_ready()
            eng.set_time(t if type(t) is float and math.isfinite(t) else scalar("t", t))

    def _n_local(self, n: int, d: int) -> int:
        """Local addresses of device d among global addresses [0, n)."""
        return max(0, -(-(n - d) // self.ndev))

    # -- force calls in C (sapporo.core.engine)
    def _plans(self, lists: bool, top: int = 0, terms: int = 0) -> int | list[dict[str, Any]]:
        """The native engine's plans, with neighbour lists or not: per device, one per entry
        of its launch table (and per companion of small launches), each serving its block
        sizes on any number of j-addresses (``sapporo/core/plan.c`` shapes every call); -1
        when a backend has no native launches or buffer handles.

        The memory is made ready first (:meth:`_sync_j`), so that C starts from a consistent
        state. Each plan carries the generations of its device's and the library's memory
        and where their current values are: the engine never uses a plan whose memory
        moved, and asks again.
        """
        entries = [dev.ctx.native_entry_points() for dev in self._devs]
        if None in entries:
            return -1
        with self._lock:
            self._check_open()
            self._collect_pending()
            self._sync_j(top, terms)
            out: list[dict[str, Any]] = []
            mirror = {
                "order": self.order, "nci": layout.nci(self.order), "nco": self._nco,
                "pred_terms": self._pred_terms, "n_stored_at": self._stored.ctypes.data,
                "mirror_cap": self._raw.shape[0], "ds": int(self._variant.ds),
                "check_rows": sum(1 << int(r) for r in self._filled_rows), "max_id": MAX_ID,
                "mirror_raw": self._raw.ctypes.data, "mirror_ids": self._ids.ctypes.data,
                "lgen": int(self._lgen[0]), "lgen_at": self._lgen.ctypes.data,
                "upload": self._upload.ctypes.data, "nupload": self._upload.size,
                "nb_cap": self.nb_capacity if lists else 0}
            for d, dev in enumerate(self._devs):
                plans = dev.plans(lists, self._pred_terms, self._n_local(self.n_stored, d))
                if plans is None:
                    return -1
                for w in plans:  # (the generation once every buffer is there)
                    w.update(mirror, dev=d, entry=entries[d], gen=int(dev.gen_cell[0]))
                out.extend(plans)
            return out

    def _engine_ready(self) -> Any:
        """The native engine (made on first use, not when the library opens), or why there
        is none (a closed library, a runtime without its entry points, a device that failed
        before)."""
        self._check_open()
        if not self._engine_tried:
            for dev in self._devs:
                if dev.ctx.native_entry_points() is None:
                    raise BackendError(f"{dev.info.name}: the {self.backend_name} runtime "
                                       "gives no entry points for the native engine (see "
                                       "'sapporo info')")
            module = engine.load()
            if self.ndev > module.MAX_DEV:
                raise BackendError(f"{self.ndev} devices: the native engine serves at most "
                                   f"{module.MAX_DEV} per library")
            self._engine_out = np.zeros(module.NCO_MAX * module.NI_MAX)
            me = weakref.ref(self)  # the engine must not keep its library alive (no GC there)

            def planner(lists: int, top: int, terms: int) -> Any:
                lib = me()
                return -1 if lib is None else lib._engine_planner(lists, top, terms)

            self._engine = module.Engine(self._engine_out, planner, self.ndev)
            self._engine_tried = True
        if self._engine is None:
            raise BackendError(f"{self._devs[0].info.name}: the device failed earlier (see "
                               "the first error); open a new Library")
        return self._engine

    def _drop_engine(self) -> None:
        """No force call from now on (a runtime error: the device's state is unknown); the
        engine's call in flight finished."""
        eng, self._engine = self._engine, None
        if eng is not None:
            eng.disable()

    def _engine_planner(self, lists: int, top: int, terms: int) -> Any:
        """The engine's planner: the words of every plan (:meth:`_plans`, with neighbour
        lists or not, for a memory of addresses [0, top) whose predictor reads ``terms``
        derivatives; :func:`sapporo.core.engine.plan_words`), -1 (never for this library),
        or (code, message): why not (the error kept for the library to raise)."""
        try:
            plans = self._plans(bool(lists), top, terms)
        except SapporoError as exc:
            self._planner_exc = exc
            code = -1 if isinstance(exc, InputError) else -4
            return code, str(exc)
        if isinstance(plans, int):
            return plans
        words = np.concatenate([engine.plan_words(p) for p in plans])
        # the engine uploads them as it installs the plans: none for the next ones
        self._uploaded, self._upload = self._upload, np.zeros(0, dtype=np.int32)
        return words

    def _engine_call(self, method: Callable[..., Any], *args: Any) -> Any:
        """A method of the engine; its error as the library's (:meth:`_engine_error`), and
        the host out of memory for its buffers as a :class:`BackendError`."""
        try:
            return method(*args)
        except RuntimeError as exc:
            raise self._engine_error(exc) from None
        except MemoryError:
            raise BackendError(f"{self.device_name}: the host has no memory for the engine's "
                               "buffers of this call") from None

    def _engine_error(self, exc: RuntimeError) -> SapporoError:
        """The engine's error (``_engine.Error(message, code)``) as the exception to raise:
        the planner's own as it was, an argument's as :class:`InputError`, a force that is
        not finite as :class:`NonFiniteError`; else a device failed (:class:`BackendError`
        naming it) and the engine takes no call from now on."""
        mod = engine.load()
        msg, code = exc.args if len(exc.args) == 2 else (str(exc), mod.ERR_BACKEND)
        planned, self._planner_exc = self._planner_exc, None
        if planned is not None:
            return planned
        if code == mod.ERR_INPUT:
            return InputError(msg)
        if code == mod.ERR_NONFINITE:
            return NonFiniteError(msg)
        self._drop_engine()
        return BackendError(f"{self.device_name}: {msg}")

    def _sync_j(self, top: int, terms: int) -> None:
        """The library's memory as the engine asks for it: room for the addresses [0, top)
        in the host mirror and on every device (a device that cannot allocate raises
        :class:`BackendError` naming it and the bytes; the library keeps computing with what
        it held), and ``terms`` derivative records the predictor reads (never fewer). A
        device whose buffers were made again gets every record uploaded from the mirror.
        (The engine has waited for its calls in flight before it asks.)"""
        if top > self._raw.shape[0]:
            self._grow(top)
        self._pred_terms = max(self._pred_terms, min(terms, self._raw_n - 2))
        need = max(top, self.n_stored)
        try:
            for d, dev in enumerate(self._devs):
                self._lost |= dev.ensure_j_capacity(self._n_local(need, d))
        except BackendError:
            self._lost = True
            raise
        if self._lost:
            self._upload = np.arange(self.n_stored, dtype=np.int32)
            self._lost = False

    def _engine_chunks(self, xi: np.ndarray, vi: np.ndarray, ids: np.ndarray, eps2: float,
                       h2v: np.ndarray | None, ai: np.ndarray | None, ji: np.ndarray | None,
                       nj: int) -> ForceResult:
        """:meth:`compute` of more than ``NI_CHUNK`` checked i-particles, one engine call
        per chunk of ``NI_CHUNK``."""
        eng, nco = self._engine, self._nco
        rows, lists = [], []
        for c0 in range(0, xi.shape[0], NI_CHUNK):
            c = slice(c0, c0 + NI_CHUNK)
            ai_c, ji_c, h2_c = (None if u is None else u[c] for u in (ai, ji, h2v))
            k = self._engine_call(eng.compute, xi[c], vi[c], ids[c], eps2, ai_c, ji_c, nj, h2_c)
            if not k:
                raise self._refusal(eng)
            rows.append(self._engine_out[: nco * k].reshape(nco, k).copy())
            if h2v is not None:
                lists.append(self._engine_lists(eng, k))
        out = np.concatenate(rows, axis=1)
        if h2v is None:
            return self._result(out, ids)
        counts, table = (np.concatenate(part) for part in zip(*lists, strict=True))
        return self._result(out, ids, counts, (counts, table))

    def _engine_lists(self, eng: Any, ni: int) -> tuple[np.ndarray, np.ndarray]:
        """The neighbour counts (ni,) and lists (ni, capacity; ascending, -1 past a list's
        end) of engine ``eng``'s last call (none when no i-particle wanted a list)."""
        counts = np.empty(ni, dtype=np.int64)
        table = np.empty((ni, self.nb_capacity), dtype=np.int32)
        eng.lists(counts, table)
        return counts, table

    def _engine_begin(self, x: Any, v: Any, index: Any, eps2: Any, h2: Any, a: Any,
                      jerk: Any, nj: int | None) -> PendingForce | None:
        """:meth:`start_compute` in C, or None: the engine did not take the arguments as
        they are (types to convert, or a value the library names)."""
        eng = self._engine
        ni = self._engine_call(eng.start, x, v, index, eps2, a, jerk,
                               self._stored[0] if nj is None else nj, h2)
        if ni == 0:
            return None
        ids = np.array(index, dtype=np.int64).reshape(-1)  # the caller may reuse its array

        def finish() -> ForceResult:
            return self._engine_result(eng, self._engine_call(eng.finish, ni), ids,
                                       h2 is not None)

        pending = PendingForce(self._lock, finish, self._collected)
        self._pending = pending
        return pending

    def _engine_result(self, eng: Any, ni: int, index: Any, lists: bool) -> ForceResult:
        """The :class:`ForceResult` of engine ``eng``'s rows for ni i-particles, with its
        neighbour lists when asked for."""
        nco = self._nco
        out = self._engine_out[: nco * ni].reshape(nco, ni)  # type: ignore[index]
        if not lists:
            return self._result(out, index)
        counts, table = self._engine_lists(eng, ni)
        return self._result(out, index, counts, (counts, table))

    # -- forces
    def compute(self, x: Any, v: Any, index: Any, eps2: float, h2: Any = None, a: Any = None,
                nj: int | None = None, jerk: Any = None) -> ForceResult:
        """Forces on i-particles from j-addresses [0, nj); blocking. See :meth:`start_compute`."""
        with self._lock:
            eng = self._engine or self._engine_ready()
            if self._pending is None and (nj is None or type(nj) is int):
                ph = self._phases
                t0 = _now() if ph is not None else 0.0
                if h2 is not None:
                    h2 = _h2_rows(h2, x, self.ids)
                ni = self._engine_call(eng.compute, x, v, index, eps2, a, jerk,
                                       self._stored[0] if nj is None else nj, h2)
                if ni:
                    res = self._engine_result(eng, ni, index, h2 is not None)
                    if ph is not None:
                        ph["step"] += _now() - t0
                    return res
                self._planner_exc = None  # converted and checked, without a second try
                return self._start_converted(x, v, index, eps2, h2, a, nj, jerk).result()
            return self.start_compute(x, v, index, eps2, h2=h2, a=a, nj=nj,
                                      jerk=jerk).result()

    def start_compute(self, x: Any, v: Any, index: Any, eps2: float, h2: Any = None,
                      a: Any = None, nj: int | None = None, jerk: Any = None) -> PendingForce:
        """Start the forces on i-particles and return at once (GRAPE's firsthalf).

        Parameters
        ----------
        x, v : (ni, 3)
            Positions and velocities of the i-particles at the current time.
        index : (ni,) ints
            Their ids: a j-particle with the same id is excluded.
        eps2 : float
            Softening length squared (>= 0; 0 is fine thanks to self-exclusion).
        h2 : float or (ni,), optional
            Neighbour radius squared per i-particle; switches neighbour lists on.
        a : (ni, 3), optional
            Predicted accelerations of the i-particles (required for orders 6 and 8).
        nj : int, optional
            Use j-addresses [0, nj) (default: every stored address).
        jerk : (ni, 3), optional
            Predicted jerks of the i-particles (required for order 8).
        """
        with self._lock:
            if self._engine is None:
                self._engine_ready()
            if self._pending is not None:
                self._collect_pending()
            if nj is None or type(nj) is int:
                h2v = None if h2 is None else _h2_rows(h2, x, self.ids)
                pending = self._engine_begin(x, v, index, eps2, h2v, a, jerk, nj)
                if pending is not None:
                    return pending
                self._planner_exc = None
            return self._start_converted(x, v, index, eps2, h2, a, nj, jerk)

    def _start_converted(self, x: Any, v: Any, index: Any, eps2: Any, h2: Any, a: Any,
                         nj: Any, jerk: Any) -> PendingForce:
        """:meth:`start_compute` of arguments the engine did not take as they are (types to
        convert, or a value to name): checked here, in the library's words, then started
        (the caller holds the lock; nothing is pending)."""
        ph = self._phases
        t0 = _now() if ph is not None else 0.0
        xi = vec3("x", x, None, limit=COORD_LIMIT)
        ni = xi.shape[0]
        if ni == 0:
            raise InputError("x: no i-particles (ni = 0)")
        vi = vec3("v", v, ni)
        ids = ints("index", index, ni, 0, MAX_ID)
        eps2 = scalar("eps2", eps2, nonneg=True)
        if a is None and self.order >= 6:
            raise InputError(f"a: order {self.order} needs the i-particles' predicted "
                             "accelerations")
        ai = None if a is None else vec3("a", a, ni)  # checked always, used by orders 6, 8
        if jerk is None and self.order >= 8:
            raise InputError("jerk: order 8 needs the i-particles' predicted jerks "
                             "(compute(..., a=ai, jerk=ji))")
        ji = None if jerk is None else vec3("jerk", jerk, ni)  # checked always, used by 8
        h2v = None if h2 is None else scalars("h2", h2, ni, nonneg=True)
        nj = self.n_stored if nj is None else int_arg("nj", nj, 0, self.n_stored,
                                                      " (addresses stored)")
        if ph is not None:
            ph["checks"] += _now() - t0
        if ni > NI_CHUNK:  # more than one launch: computed now, in chunks
            res = self._engine_chunks(xi, vi, ids, eps2, h2v, ai, ji, nj)
            pending = PendingForce(self._lock, lambda: res, self._collected)
        else:
            pending = self._engine_begin(xi, vi, ids, eps2, h2v, ai, ji, nj)
            if pending is None:
                raise self._refusal(self._engine)
        self._pending = pending
        return pending

    def _result(self, out: np.ndarray, ids: Any, counts: np.ndarray | None = None,
                lists: tuple[np.ndarray, np.ndarray] | None = None,
                checked: bool = True) -> ForceResult:
        """The :class:`ForceResult` of the combined rows ``out`` (nco, ni), with the
        neighbour counts and lists (see ``ForceResult._lists``) when they were asked for;
        ``checked``: the engine found the rows finite (the MPI layer's sums of finite parts
        are checked here). The one reader of result rows in Python."""
        if not checked and not all_finite(out[self._filled_rows]):
            bad = np.flatnonzero(~np.isfinite(out[self._filled_rows]).all(axis=0))
            raise NonFiniteError(f"non-finite force on i-particle {bad[0]} (id "
                                 f"{int(ids[bad[0]])}) and {bad.size - 1} other(s): the sum "
                                 "of finite parts overflowed")
        out = out.copy()  # (the engine's rows are its buffer)
        order = self.order
        if out.shape[1] == 1:  # one i-particle (a block step's usual): views of the copy
            if out[OC_NNID, 0] < 0:
                out[OC_NNR2, 0] = np.inf
            acc = out[ACC_ROWS].reshape(1, 3)
            jerk = out[JERK_ROWS].reshape(1, 3) if order >= 4 else None
            snap = out[SNAP_ROWS].reshape(1, 3) if order >= 6 else None
            crackle = out[CRACKLE_ROWS].reshape(1, 3) if order >= 8 else None
            pot, nn_r2 = out[OC_POT], out[OC_NNR2]
        else:
            out[OC_NNR2, out[OC_NNID] < 0] = np.inf
            acc = out[ACC_ROWS].T.copy()
            jerk = out[JERK_ROWS].T.copy() if order >= 4 else None
            snap = out[SNAP_ROWS].T.copy() if order >= 6 else None
            crackle = out[CRACKLE_ROWS].T.copy() if order >= 8 else None
            pot, nn_r2 = out[OC_POT].copy(), out[OC_NNR2].copy()
        nn_id = out[OC_NNID].astype(np.int64)
        ngb = counts is not None
        overflow = bool(ngb and np.maximum.reduce(counts, initial=0) > self.nb_capacity)
        return ForceResult(acc=acc, jerk=jerk, snap=snap, crackle=crackle, pot=pot,
                           nn_index=nn_id, nn_r2=nn_r2, neighbour_counts=counts,
                           overflow=overflow, capacity=self.nb_capacity, _lists=lists, _rows=out)
