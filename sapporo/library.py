"""The force library: j-particle memory, on-device prediction, forces on blocks of i-particles.

Conventions: G = 1; ``acc = sum_j m_j r_ij / R^3``, ``pot = -sum_j m_j / R`` with
``r_ij = x_j - x_i`` and ``R^2 = |r_ij|^2 + eps2``; jerk and snap are the unscaled time
derivatives of the acceleration. A j-particle whose id equals the i-particle's id is excluded
(no force, not a neighbour), so eps2 = 0 is allowed.

Memory model (as on a GRAPE board): j-particles live in numbered memory slots
("addresses"); the host keeps a mirror and sends only changed addresses, batched, before the
next force call. Before each force call the j-particles are predicted on the device to the
time given by :meth:`Library.set_time`. With several devices, addresses are spread round-robin
(address ``a`` lives on device ``a % ndev``), each device computes partial forces, and the host
combines them in a fixed order (that of the parts, see ``_combine_parts``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import operator
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from . import config
from .backend import (
    Buffer,
    Context,
    DeviceInfo,
    Event,
    HostBuffer,
    Kernel,
    Launch,
    Program,
    get_backend,
)
from .errors import BackendError, InputError, NonFiniteError, SapporoError
from .launch import NI_CHUNK, LaunchConfig, LaunchTable, check_table, load_table, split_j

log = logging.getLogger(__name__)

RAW_N = 6  # double4 records per raw j-particle: x|m, v|t, a, jerk, snap, crackle
J_BYTES = RAW_N * 32 + 8  # bytes per j-address: the raw records and the id (int64)
NCO = 12  # result rows: ax ay az pot jx jy jz nn_r2 sx sy sz nn_id
OC_NNR2, OC_NNID = 7, 11
#: the reduce kernel's lanes per i-particle and i-particles per group (common.h/.cuh);
#: the lanes fix the order in which parts are summed (see _combine_parts)
REDUCE_LANES, REDUCE_ROWS = 32, 4
EPS2_ARG = 4  # position of eps2 among the force kernel's arguments
#: work-group size of the one-particle-per-work-item kernels (scatter, predict, reduce);
#: left to itself PoCL picks groups that make the prediction twice as slow
LINEAR_LOCAL = 64
#: partial results up to this many doubles are combined on the host, not by the reduce
#: kernel: on CPUs, where the host combination saves a launch (tens of us on PoCL) ...
HOST_REDUCE_MAX = 1 << 16
#: ... and on GPUs, where a launch costs a few us and the download of every part with the
#: merge in numpy costs more (512 parts of 8 i-particles: 393 kB over PCIe, ~30 us of numpy)
GPU_HOST_REDUCE_MAX = 0
MAX_ID = 2**31 - 1
MAX_ADDRESS = 2**31 - 2
DEFAULT_NB_CAPACITY = 256
#: the lists of a chunk of NI_CHUNK i-particles take NI_CHUNK * capacity * 4 bytes (2 GiB)
MAX_NB_CAPACITY = 65536
J_SLACK = 16  # j-records past the capacity, read (masked) by the j-vector kernels
#: predictions of at most this many j-particles run on the companion device with a small
#: force launch (N = 16k: 364 us with it against 349 us on the threaded device)
SMALL_PREDICT_MAX = 8192

_EXT = {"opencl": "cl", "cuda": "cu"}


# ---------------------------------------------------------------------------------------------
# input validation


#: arrays up to this size are checked in Python floats (a numpy reduction costs ~1.5 us)
_SMALL = 48


def _all_finite(arr: np.ndarray) -> bool:
    """Whether every element of a float array is finite. Small arrays: a finite sum in
    Python floats means finite terms, and only an infinite or NaN sum (a non-finite term,
    or an overflow) looks at the elements. Larger ones: ``np.isfinite`` (a numpy sum would
    warn on overflow, and silencing it costs as much as the test)."""
    if arr.size <= _SMALL:
        return math.isfinite(sum(arr.ravel().tolist())) or bool(np.isfinite(arr).all())
    return bool(np.isfinite(arr).all())


def _real_array(name: str, value: Any, what: str) -> np.ndarray:
    """``value`` as a float64 array; integers are fine, complex numbers, strings, booleans
    and objects are not (numpy would drop imaginary parts or parse text silently)."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected {what}") from None
    if arr.dtype.kind not in "fiu":
        raise InputError(f"{name}: expected {what} of real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


def _int_arg(name: str, value: Any, lo: int, hi: int, note: str = "") -> int:
    """An integer argument in [lo, hi]: ints, or floats with an integral value (``note``:
    what the range is, for the message)."""
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"{name}: expected an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"{name}: expected an integer, got {value!r}") from None
        if not (math.isfinite(f) and f == math.floor(f)):
            raise InputError(f"{name}: expected an integer, got {value!r}") from None
        v = int(f)
    if not lo <= v <= hi:
        raise InputError(f"{name}: {v} outside [{lo}, {hi}]{note}")
    return v


def _vec3(name: str, value: Any, n: int | None) -> np.ndarray:
    arr = _real_array(name, value, "an array of shape (n, 3)")
    if arr.ndim == 1 and arr.shape == (3,) and n in (None, 1):
        arr = arr.reshape(1, 3)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise InputError(f"{name}: expected shape (n, 3), got {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise InputError(f"{name}: expected {n} rows, got {arr.shape[0]}")
    if not _all_finite(arr):
        bad = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise InputError(f"{name}: non-finite value in row {bad}: {arr[bad].tolist()}")
    return np.ascontiguousarray(arr)


def _ints(name: str, value: Any, n: int | None, lo: int, hi: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise InputError(f"{name}: expected a 1-D array of integers, got shape {arr.shape}")
    if arr.dtype.kind not in "iu" and arr.size:
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise InputError(f"{name}: expected integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if n is not None and arr.shape[0] != n:
        raise InputError(f"{name}: expected {n} values, got {arr.shape[0]}")
    if arr.size <= _SMALL:  # Python ints: a numpy min and max cost ~3 us
        vals = arr.tolist()
        out = bool(vals) and (min(vals) < lo or max(vals) > hi)
    else:
        out = arr.view(np.uint64).max() > hi if lo == 0 else (arr.min() < lo or arr.max() > hi)
    if out:
        bad = arr[(arr < lo) | (arr > hi)][0]
        raise InputError(f"{name}: value {bad} outside [{lo}, {hi}]")
    return arr


def _scalars(name: str, value: Any, n: int, nonneg: bool = False) -> np.ndarray:
    arr = _real_array(name, value, f"a number or an array of {n} numbers")
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise InputError(f"{name}: expected a scalar or shape ({n},), got {arr.shape}")
    if not _all_finite(arr):
        raise InputError(f"{name}: non-finite value at position {int(np.argmin(np.isfinite(arr)))}")
    if nonneg and (arr < 0).any():
        raise InputError(f"{name}: negative value at position {int(np.argmax(arr < 0))}")
    return arr


def _scalar(name: str, value: Any, nonneg: bool = False) -> float:
    if isinstance(value, (complex, np.complexfloating)):
        raise InputError(f"{name}: expected a real number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(v):
        raise InputError(f"{name}: non-finite value {v}")
    if nonneg and v < 0:
        raise InputError(f"{name}: must be >= 0, got {v}")
    return v


# ---------------------------------------------------------------------------------------------
# results


@dataclass
class ForceResult:
    """Forces on a block of i-particles (all arrays float64 unless stated).

    Attributes
    ----------
    acc : (ni, 3) array
        Acceleration.
    jerk : (ni, 3) array or None
        Its time derivative (order >= 4).
    snap : (ni, 3) array or None
        Second time derivative (order 6).
    pot : (ni,) array
        Potential (negative).
    nn_index : (ni,) int64 array
        Id of the nearest neighbour by unsoftened distance, -1 when there is none.
    nn_r2 : (ni,) array
        Its unsoftened squared distance, inf when there is none.
    neighbour_counts : (ni,) int64 array or None
        Exact number of neighbours (even on overflow); None when no ``h2`` was given.
    overflow : bool
        True when any neighbour list held more than ``capacity`` entries.
    capacity : int
        Neighbour-list capacity per i-particle.
    """

    acc: np.ndarray
    jerk: np.ndarray | None
    snap: np.ndarray | None
    pot: np.ndarray
    nn_index: np.ndarray
    nn_r2: np.ndarray
    neighbour_counts: np.ndarray | None = None
    overflow: bool = False
    capacity: int = DEFAULT_NB_CAPACITY
    _lists: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list, repr=False)

    @property
    def ni(self) -> int:
        """Number of i-particles."""
        return self.acc.shape[0]

    def neighbours(self, k: int) -> np.ndarray:
        """Ascending ids of the neighbours of the k-th i-particle (at most ``capacity``)."""
        if self.neighbour_counts is None:
            raise InputError("neighbours: no neighbour lists were computed (pass h2 to compute)")
        k = _int_arg("neighbours: k", k, -self.ni, self.ni - 1,
                     f" (out of range for {self.ni} i-particles)") % self.ni
        parts = [lists[k, : min(int(counts[k]), lists.shape[1])] for counts, lists in self._lists]
        ids = np.sort(np.concatenate(parts).astype(np.int64)) if parts else np.zeros(0, np.int64)
        return ids[: self.capacity]


class PendingForce:
    """A force computation in flight; :meth:`result` waits for it (GRAPE's lasthalf)."""

    def __init__(self, lib: Library, finish: Any):
        self._lib = lib
        self._finish = finish
        self._result: ForceResult | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """True once :meth:`result` has been collected."""
        return self._result is not None or self._error is not None

    def result(self) -> ForceResult:
        """Wait for the devices and return the forces.

        Raises
        ------
        NonFiniteError
            When a result is not finite; the message names the i-particle.
        """
        with self._lib._lock:
            if self._error is not None:
                raise self._error
            if self._result is None:
                try:
                    self._result = self._finish()
                except BaseException as exc:
                    self._error = exc
                    raise
                finally:
                    self._finish = None
                    if self._lib._pending is self:
                        self._lib._pending = None
            return self._result


# ---------------------------------------------------------------------------------------------
# one device


@dataclass
class _Plan:
    """Everything about one force launch except the particle data (see _Device._plan)."""

    gen: int
    table: LaunchTable
    cfg: LaunchConfig
    ni_pad: int
    nparts: int
    h_in: HostBuffer
    idata: np.ndarray
    h_out: HostBuffer
    out: np.ndarray
    partial: Buffer
    force: Launch  # argument EPS2_ARG is set per call
    reduce: Launch | None  # None: the host combines the parts
    h_cnt: HostBuffer | None
    h_lst: HostBuffer | None
    counts: np.ndarray | None
    lists: np.ndarray | None


class _Device:
    """Buffers and programs of one device; j-addresses are local to it."""

    def __init__(self, lib: Library, ctx: Context):
        self.lib = lib
        self.ctx = ctx
        self.info: DeviceInfo = ctx.info
        self.ext = _EXT[self.info.backend]
        # predict.cl/.cu programs (scatter_j and predict) by (companion device, derivative
        # records the predictor reads: PRED_TERMS), built when first needed
        self._predict_progs: dict[tuple[bool, int], Program] = {}
        self.table: LaunchTable = load_table(self.info, lib.order, lib.precision)
        self.cap = 0  # j capacity (local addresses)
        self.j: dict[str, Buffer] = {}
        # On devices that compute on host memory the raw records and ids live in host
        # arrays that the kernels read directly: storing j-particles queues no command.
        self.j_hosts: dict[str, HostBuffer] = {}
        self.h_raw: np.ndarray | None = None
        self.h_id: np.ndarray | None = None
        self.bufs: dict[str, Buffer] = {}
        self.kernel_seconds = 0.0
        self.events: list[Event] = []
        self._kernels: dict[tuple[LaunchConfig, bool, bool], tuple[Kernel, Kernel]] = {}
        self.hosts: dict[str, HostBuffer] = {}
        # launch plans by (slot, ni, nj, neighbour lists): everything about a force launch
        # but the particle data, valid while no buffer was reallocated (generation)
        self._plans: dict[tuple, _Plan] = {}
        self._predicts: dict[tuple[int, bool, int], tuple[int, Launch]] = {}  # (gen, launch)
        self._gen = 0

    # -- memory
    def _reuse(self, store: dict[str, Any], name: str, nbytes: int, alloc: Any) -> Any:
        """The buffer ``name`` of ``store``, reallocated with ``alloc`` when too small."""
        buf = store.get(name)
        if buf is None or buf.nbytes < nbytes:
            if buf is not None:
                self.ctx.finish()  # queued work may still use it
                buf.free()
            buf = alloc(max(nbytes, 64))
            store[name] = buf
            self._gen += 1
        return buf

    def _buf(self, name: str, nbytes: int) -> Buffer:
        return self._reuse(self.bufs, name, nbytes, self.ctx.alloc)

    def _host(self, name: str, nbytes: int) -> HostBuffer:
        return self._reuse(self.hosts, name, nbytes, self.ctx.alloc_host)

    def ensure_j_capacity(self, n: int) -> bool:
        """Grow the j-buffers to hold ``n`` local addresses (allocate them on first use, even
        for none); True when they were (re)allocated."""
        if n <= self.cap and self.j:
            return False
        cap = max(n, 2 * self.cap, 1024)
        self.ctx.finish()  # queued work may still use the old buffers
        self._free_j()
        self._gen += 1
        rs = 4 if self.lib.precision == "double-single" else 8
        # J_SLACK records past the end: the j-vector kernels (jv) read whole vectors of
        # records; there they find id -1 (no interaction) and finite zeros
        slots = cap + J_SLACK
        h_raw = self.ctx.alloc_host(cap * RAW_N * 32)
        if h_raw.zero_copy:
            h_id = self.ctx.alloc_host(slots * 4)
            self.j_hosts = {"raw": h_raw, "id": h_id}
            self.h_raw = h_raw.view(np.float64, (cap, RAW_N, 4))
            self.h_raw[:] = 0.0
            self.h_id = h_id.view(np.int32, (slots,))
            self.h_id[:] = -1
            self.j = {"raw": h_raw.buffer, "id": h_id.buffer}
        else:
            h_raw.free()
            self.j = {"raw": self.ctx.alloc(cap * RAW_N * 32), "id": self.ctx.alloc(slots * 4)}
            self.j["id"].fill(-1)
        self.j["pos"] = self.ctx.alloc(slots * 4 * rs)
        self.j["vel"] = self.ctx.alloc(slots * 4 * rs)
        if self.lib.precision == "double-single":
            self.j["pos_lo"] = self.ctx.alloc(slots * 16)
        if self.lib.order >= 6:
            self.j["acc"] = self.ctx.alloc(slots * 4 * rs)
        for name, buf in self.j.items():
            if name not in ("raw", "id"):
                buf.fill(0)
        self.cap = cap
        return True

    def upload_j(self, local_addr: np.ndarray, raw: np.ndarray, ids: np.ndarray) -> None:
        """Send records for the given local addresses (contiguous block or scatter)."""
        n = local_addr.size
        if n == 0:
            return
        if self.h_raw is not None:  # the kernels read these host arrays themselves
            self.h_raw[local_addr] = raw
            self.h_id[local_addr] = ids
            return
        lo, hi = int(local_addr[0]), int(local_addr[-1])
        if hi - lo + 1 == n:  # one contiguous block: plain copies
            # not waited for: the sources are fresh arrays (raw comes from fancy indexing)
            # that nothing else writes, and the backends keep them alive until copied
            self.j["raw"].upload(np.ascontiguousarray(raw), offset=lo * RAW_N * 32, wait=False)
            self.j["id"].upload(np.ascontiguousarray(ids, dtype=np.int32), offset=lo * 4,
                                wait=False)
            return
        # host buffers: asynchronous copies (page-locked on CUDA), written only here, after
        # the previous call's work has been waited for
        addr = self._host("scatter_addr", n * 4)
        packed = self._host("scatter_raw", n * RAW_N * 32)
        pid = self._host("scatter_id", n * 4)
        addr.view(np.int32, (n,))[:] = local_addr
        packed.view(np.float64, raw.shape)[:] = raw
        pid.view(np.int32, (n,))[:] = ids
        for host, nbytes in ((addr, n * 4), (packed, raw.nbytes), (pid, n * 4)):
            host.to_device(nbytes)
        scatter = self._predict_prog(False, self.lib._pred_terms).kernel("scatter_j")
        scatter(*_linear(n), np.int32(n), addr.buffer, packed.buffer, pid.buffer,
                self.j["raw"], self.j["id"])

    def small_launch(self, ni: int, nj_local: int) -> bool:
        """Whether a force launch on ``ni`` i-particles goes to the companion device."""
        if self.ctx.small_pairs <= 0 or ni > NI_CHUNK:
            return False
        ni_pad = _round_up(ni, self.table.for_ni(ni).i_per_group)
        return ni_pad * max(nj_local, 1) <= self.ctx.small_pairs

    def predict(self, n_local: int, t: float, small: bool = False) -> None:
        """Predict the first ``n_local`` addresses to ``t`` (on the companion device when
        the force launch that follows goes there: no hand-off between the two)."""
        if n_local == 0:
            return
        terms = self.lib._pred_terms
        key = (n_local, small, terms)
        launch = self._predicts.get(key)
        if launch is None or launch[0] != self._gen:
            kernel = self._predict_prog(small, terms).kernel("predict")
            j = self.j
            args: list[Any] = [np.int32(n_local), np.float64(t), j["raw"], j["pos"]]
            if self.lib.precision == "double-single":
                args.append(j["pos_lo"])
            args.append(j["vel"])
            if self.lib.order >= 6:
                args.append(j["acc"])
            if len(self._predicts) > 64:
                self._predicts.clear()
            launch = self._predicts[key] = (self._gen, kernel.prepare(*_linear(n_local), *args))
        launch[1].set(1, np.float64(t))
        self._record(launch[1]())

    def _predict_prog(self, small: bool, terms: int) -> Program:
        """The predict program for the device or its companion, reading ``terms``
        derivative records (built once)."""
        prog = self._predict_progs.get((small, terms))
        if prog is None:
            defs = {**self.lib._base_defines(), "PRED_TERMS": terms}
            prog = self.ctx.build(f"predict.{self.ext}", defs, small=small)
            self._predict_progs[(small, terms)] = prog
        return prog

    def _record(self, ev: Event) -> None:
        if self.lib.profiling:
            self.events.append(ev)

    # -- forces
    def _plan(self, slot: int, ni: int, nj_local: int, ngb: bool) -> _Plan:
        """Launch shape, buffers, views and arguments of a force launch (cached)."""
        key = (slot, ni, nj_local, ngb)
        plan = self._plans.get(key)
        if plan is not None and plan.gen == self._gen and plan.table is self.table:
            return plan
        lib = self.lib
        cfg = self.table.for_ni(ni)
        ni_pad = _round_up(ni, cfg.i_per_group)
        nci = 11 if lib.order >= 6 else 8
        h_in = self._host(f"idata{slot}", nci * ni_pad * 8)
        nparts, jchunk = split_j(cfg, self.info, ni_pad, nj_local)
        # small launches run on the companion device where there is one (PoCL's
        # single-threaded device: no hand-off to worker threads)
        kernel, reduce_k = self.kernels(cfg, ngb, self.small_launch(ni, nj_local))
        # few results: the host combines the parts (one kernel launch less)
        limit = HOST_REDUCE_MAX if self.info.device_type == "cpu" else GPU_HOST_REDUCE_MAX
        host_reduce = nparts == 1 or nparts * NCO * ni_pad <= limit  # one part: nothing to do
        out_shape = (nparts if host_reduce else 1, NCO, ni_pad)
        h_out = self._host(f"out{slot}", math.prod(out_shape) * 8)
        partial = h_out.buffer if host_reduce else self._buf("partial", nparts * NCO * ni_pad * 8)
        h_cnt = h_lst = None
        if ngb:
            h_cnt = self._host(f"nbcount{slot}", ni_pad * 4)
            h_lst = self._host(f"nblist{slot}", ni_pad * lib.nb_capacity * 4)
        j = self.j
        args: list[Any] = [np.int32(nj_local), np.int32(ni), np.int32(ni_pad), np.int32(jchunk),
                           np.float64(0.0), j["pos"]]  # [EPS2_ARG]: set per call
        if lib.precision == "double-single":
            args.append(j["pos_lo"])
        args.append(j["vel"])
        if lib.order >= 6:
            args.append(j["acc"])
        args += [j["id"], h_in.buffer, partial]
        if ngb:
            args += [h_cnt.buffer, h_lst.buffer]
        force = kernel.prepare((ni_pad // cfg.i_per_item, nparts * cfg.lj), (cfg.li, cfg.lj),
                               *args)
        reduce = None
        if not host_reduce:
            reduce = reduce_k.prepare(
                (REDUCE_LANES, _round_up(ni, REDUCE_ROWS)), (REDUCE_LANES, REDUCE_ROWS),
                np.int32(ni), np.int32(ni_pad), np.int32(nparts), partial, h_out.buffer)
        plan = _Plan(
            gen=self._gen, table=self.table, cfg=cfg, ni_pad=ni_pad, nparts=nparts,
            h_in=h_in, idata=h_in.view(np.float64, (nci, ni_pad)), h_out=h_out,
            out=h_out.view(np.float64, out_shape), partial=partial, force=force,
            reduce=reduce, h_cnt=h_cnt, h_lst=h_lst,
            counts=None if h_cnt is None else h_cnt.view(np.int32, (ni_pad,)),
            lists=None if h_lst is None else h_lst.view(np.int32, (ni_pad, lib.nb_capacity)),
        )
        if len(self._plans) > 512:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def launch_force(self, slot: int, xi: np.ndarray, vi: np.ndarray, ids: np.ndarray,
                     h2: np.ndarray | None, ai: np.ndarray | None, nj_local: int,
                     eps2: float) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Enqueue the forces on one chunk of i-particles.

        Returns host arrays (results by part, neighbour counts, neighbour lists) that hold
        the results once the queue has finished, until the next call with the same
        ``slot``. On CPU devices they are the memory the kernels work on (no copies).
        """
        ni = xi.shape[0]
        ngb = h2 is not None
        plan = self._plan(slot, ni, nj_local, ngb)
        idata = plan.idata
        if ni == 1:  # one active particle (frequent): one assignment from Python floats
            col = [*xi[0].tolist(), float(h2[0]) if ngb else 0.0, *vi[0].tolist(), float(ids[0])]
            if ai is not None:
                col += ai[0].tolist()
            idata[:, 0] = col
        else:
            idata[0:3, :ni] = xi.T
            idata[3, :ni] = h2 if ngb else 0.0
            idata[4:7, :ni] = vi.T
            idata[7, :ni] = ids
            if ai is not None:
                idata[8:11, :ni] = ai.T
        if ni < plan.ni_pad:
            idata[:, ni:] = idata[:, ni - 1 : ni]  # padding repeats the last particle
        plan.h_in.to_device(idata.nbytes)
        if plan.force.args[EPS2_ARG] != eps2:
            plan.force.set(EPS2_ARG, np.float64(eps2))
        if ngb:
            plan.counts[:] = 0
            plan.h_cnt.to_device(plan.counts.nbytes)
        self._record(plan.force())
        if plan.reduce is not None:
            self._record(plan.reduce())
        plan.h_out.from_device(plan.out.nbytes)
        if ngb:
            plan.h_cnt.from_device(plan.counts.nbytes)
            plan.h_lst.from_device(plan.lists.nbytes)
        return plan.out, plan.counts, plan.lists

    def kernels(self, cfg: LaunchConfig, ngb: bool,
                small: bool = False) -> tuple[Kernel, Kernel]:
        """The force and reduce kernels for a launch shape (built once), for the device or
        for its companion of small launches."""
        key = (cfg, ngb, small)
        if key not in self._kernels:
            defs = {**self.lib._base_defines(), **cfg.defines(), "NGB": int(ngb),
                    "NB_CAP": self.lib.nb_capacity}
            prog = self.ctx.build(f"force.{self.ext}", defs, small=small)
            self._kernels[key] = (prog.kernel("force"), prog.kernel("reduce"))
        return self._kernels[key]

    def finish(self) -> None:
        self.ctx.finish()
        if self.events:
            self.kernel_seconds += sum(ev.elapsed or 0.0 for ev in self.events)
            self.events.clear()

    def _free_j(self) -> None:
        for name, buf in self.j.items():
            if name not in self.j_hosts:
                buf.free()
        for host in self.j_hosts.values():
            host.free()
        self.j, self.j_hosts = {}, {}
        self.h_raw = self.h_id = None

    def close(self) -> None:
        self._free_j()
        for buf in list(self.bufs.values()) + list(self.hosts.values()):
            buf.free()
        self.bufs.clear()
        self.hosts.clear()
        # drop kernel references before the context goes (PyCUDA frees modules with it)
        self._kernels.clear()
        self._predict_progs.clear()
        self._predicts.clear()
        self.ctx.close()


def _combine_parts(parts: np.ndarray) -> np.ndarray:
    """Combine (nparts, NCO, n) partial results as the ``reduce`` kernel does. Also combines
    the results of several devices (as if they were parts).

    Sums: lane l (of REDUCE_LANES) sums parts l, l + REDUCE_LANES, ... in order, then a
    halving tree adds lane l + s into lane l (s = 16, 8, 4, 2, 1) where that lane holds
    parts: the kernel's order, so the host and the device give the same bits. Nearest
    neighbour: minimum r^2, ties to the lower id (order-independent)."""
    nparts, n = parts.shape[0], parts.shape[2]
    if nparts == 1:
        return parts[0]
    lanes = min(nparts, REDUCE_LANES)
    full = nparts // REDUCE_LANES * REDUCE_LANES
    if full:  # whole rows of lanes: one reduction over the outer axis adds them in order
        x = np.add.reduce(parts[:full].reshape(-1, REDUCE_LANES, NCO, n), axis=0)
        rest = nparts - full
        if rest:
            x[:rest] += parts[full:]
    else:
        x = parts.copy()
    s = REDUCE_LANES // 2
    while s >= 1:
        m = min(s, lanes - s)  # lanes l < s whose partner l + s holds parts
        if m > 0:
            x[:m] += x[s : s + m]
        s //= 2
    out = x[0]
    if n == 1 and nparts <= 16:  # one i-particle over a few parts: plain Python
        best_r2, best_id = float(parts[0, OC_NNR2, 0]), -1.0
        for r2, pid in zip(parts[:, OC_NNR2, 0].tolist(), parts[:, OC_NNID, 0].tolist(),
                           strict=True):
            if pid >= 0 and (best_id < 0 or r2 < best_r2 or (r2 == best_r2 and pid < best_id)):
                best_r2, best_id = r2, pid
        out[OC_NNR2, 0], out[OC_NNID, 0] = best_r2, best_id
        return out
    r2, pid = parts[:, OC_NNR2], parts[:, OC_NNID]
    valid = pid >= 0
    r2v = np.where(valid, r2, np.inf)
    best = r2v.min(axis=0)
    nid = np.where(valid & (r2v == best), pid, np.inf).min(axis=0)
    found = nid < np.inf
    out[OC_NNR2] = np.where(found, best, parts[0, OC_NNR2])
    out[OC_NNID] = np.where(found, nid, -1.0)
    return out


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _linear(n: int) -> tuple[tuple[int], tuple[int]]:
    """Global and local size of a one-work-item-per-element launch over ``n`` elements."""
    return (_round_up(n, LINEAR_LOCAL),), (LINEAR_LOCAL,)


# ---------------------------------------------------------------------------------------------
# the library

_F = TypeVar("_F", bound=Callable[..., Any])


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
    order : {2, 4, 6}
        2: acceleration and potential; 4: + jerk; 6: + snap.
    precision : {"double-single", "double"}
        ``"double-single"``: j - i position differences in hi/lo float pairs, the rest in
        float, partial sums in double (relative error ~1e-6). ``"double"``: all in double.
    backend : {None, "opencl", "cuda"}
        None: ``SAPPORO_BACKEND``, else CUDA when usable, else OpenCL.
    devices : None, list of int, or "all"
        None: ``SAPPORO_DEVICES``, else the backend's first device.
    nb_capacity : int
        Neighbour-list capacity per i-particle (``SAPPORO_NB_CAPACITY``, default 256).
    profiling : bool
        Time kernels on the device (see :attr:`kernel_seconds`).
    """

    def __init__(
        self,
        order: int = 4,
        precision: str = "double-single",
        backend: str | None = None,
        devices: Any = None,
        nb_capacity: int | None = None,
        profiling: bool = False,
    ):
        self._lock = threading.RLock()  # calls from several threads are serialised
        try:
            self.order = config.parse_order(order, "order")
            self.precision = config.parse_precision(precision, "precision")
        except SapporoError as exc:
            raise InputError(str(exc)) from None
        env = config.from_environment()
        if nb_capacity is None:
            nb_capacity = env.nb_capacity or DEFAULT_NB_CAPACITY
        self.nb_capacity = _int_arg("nb_capacity", nb_capacity, 1, MAX_NB_CAPACITY)
        self.profiling = bool(profiling)
        be = get_backend(backend)
        self.backend_name = be.name
        available = be.devices()
        if devices is None:
            devices = env.devices if env.devices is not None else [0]
        if isinstance(devices, str):
            if devices.strip().lower() != "all":
                devices = config.parse_devices(devices, "devices")
            else:
                devices = list(range(len(available)))
        if isinstance(devices, (int, np.integer)):
            devices = [int(devices)]
        devices = list(devices)
        if not devices:
            raise InputError("devices: empty device list")
        for d in devices:
            if not isinstance(d, (int, np.integer)) or not 0 <= d < len(available):
                raise InputError(
                    f"devices: {d!r} is not a device index of backend {be.name} "
                    f"(0..{len(available) - 1}; see 'sapporo info')"
                )
        if len(set(devices)) != len(devices):
            raise InputError(f"devices: repeated index in {devices}")
        self._devs: list[_Device] = []
        try:
            for d in devices:
                ctx = be.open(int(d), profiling=self.profiling)
                if not ctx.info.double_support:
                    ctx.close()
                    raise BackendError(
                        f"device {ctx.info.name} has no double-precision support, which "
                        "both precisions need (double-single sums partial results in double)"
                    )
                self._devs.append(_Device(self, ctx))
        except BaseException:
            for dev in self._devs:
                dev.close()
            raise
        self._raw = np.zeros((0, RAW_N, 4), dtype=np.float64)
        self._ids = np.full(0, -1, dtype=np.int64)
        # addresses changed since the last upload; an empty entry at first, so that the
        # first call allocates the j-buffers even when no j-particle was ever stored
        self._dirty: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        # derivative records (a, jerk, snap, crackle) the predictor reads: those past it are
        # zero in every record stored so far (grows, never shrinks)
        self._pred_terms = 0
        self._n_stored = 0
        self._time = 0.0
        self._predicted_time: float | None = None
        self._predicted_n = [0] * len(self._devs)
        self._pending: PendingForce | None = None
        self._closed = False
        # result rows this order fills: acc, pot (+ jerk) (+ snap); the others stay zero
        self._rows = [0, 1, 2, 3] + ([4, 5, 6] if self.order >= 4 else []) + (
            [8, 9, 10] if self.order >= 6 else [])
        log.info(
            "sapporo: order %d, %s, %s on %s", self.order, self.precision, self.backend_name,
            ", ".join(d.info.name for d in self._devs),
        )

    # -- properties
    @property
    def device_infos(self) -> list[DeviceInfo]:
        """The devices in use."""
        return [d.info for d in self._devs]

    @property
    def device_name(self) -> str:
        """Name(s) of the devices in use."""
        names = [d.info.name for d in self._devs]
        return names[0] if len(set(names)) == 1 and len(names) == 1 else " + ".join(names)

    @property
    def n_stored(self) -> int:
        """Number of j-addresses in use (highest address set + 1)."""
        return self._n_stored

    @property
    def ndev(self) -> int:
        """Number of devices."""
        return len(self._devs)

    @property
    def kernel_seconds(self) -> float:
        """Device time spent in kernels so far (only with ``profiling=True``)."""
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

    def _base_defines(self) -> dict[str, int]:
        return {"ORDER": self.order, "PRECISION": 1 if self.precision == "double-single" else 2}

    def _check_open(self) -> None:
        if self._closed:
            raise SapporoError("the library has been closed")

    # -- lifecycle
    @_serialised
    def close(self) -> None:
        """Release the devices (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._pending = None
        for d in self._devs:
            try:
                d.close()
            except Exception as exc:  # pragma: no cover - driver trouble at shutdown
                log.warning("closing %s: %s", d.info.name, exc)
        self._devs = []
        # the host mirror of the j-particles goes too (a closed library may stay referenced)
        self._raw = np.zeros((0, RAW_N, 4))
        self._ids = np.zeros(0, dtype=np.int64)
        self._dirty = []

    def __enter__(self) -> Library:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass

    # -- j-particles
    @_serialised
    def set_j_particles(
        self,
        address: Any,
        index: Any,
        t: Any,
        mass: Any,
        x: Any,
        v: Any,
        a: Any = None,
        jerk: Any = None,
        snap: Any = None,
        crackle: Any = None,
    ) -> None:
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
        """
        self._check_open()
        addr = _ints("address", address, None, 0, MAX_ADDRESS)
        n = addr.size
        if n == 0:
            return
        ids = _ints("index", index, n, 0, MAX_ID)
        tj = _scalars("t", t, n)
        m = _scalars("mass", mass, n)
        rec = np.zeros((n, RAW_N, 4), dtype=np.float64)
        rec[:, 0, :3] = _vec3("x", x, n)
        rec[:, 0, 3] = m
        rec[:, 1, :3] = _vec3("v", v, n)
        rec[:, 1, 3] = tj
        terms = self._pred_terms
        for q, (name, val) in enumerate(
            (("a", a), ("jerk", jerk), ("snap", snap), ("crackle", crackle)), start=2
        ):
            if val is not None:
                rec[:, q, :3] = _vec3(name, val, n)
                if q - 1 > terms and rec[:, q, :3].any():
                    terms = q - 1
        top = int(addr.max()) + 1
        if top > self._raw.shape[0]:
            self._grow(top)
        self._raw[addr] = rec
        self._ids[addr] = ids
        self._dirty.append(addr)
        # a predictor that reads more records from now on (the records just stored make
        # the next force call predict again anyway)
        self._pred_terms = terms
        self._n_stored = max(self._n_stored, top)

    @_serialised
    def reset(self) -> None:
        """Forget every j-particle (addresses become unused; memory is kept)."""
        self._check_open()
        self._raw[: self._n_stored] = 0.0
        self._ids[: self._n_stored] = -1
        self._dirty.append(np.arange(self._n_stored))
        self._n_stored = 0

    def _j_capacity(self) -> int:
        """How many j-addresses the devices hold: 80% of the smallest one's memory."""
        mem = min(d.info.global_mem_size for d in self._devs)
        return int(0.8 * mem * self.ndev) // J_BYTES

    @property
    def max_address(self) -> int:
        """The largest j-address :meth:`set_j_particles` accepts (device memory, MAX_ADDRESS)."""
        return min(MAX_ADDRESS, self._j_capacity() - 1)

    def _grow(self, top: int) -> None:
        limit = self._j_capacity()
        if top > limit:
            mem = min(d.info.global_mem_size for d in self._devs)
            need = top * J_BYTES / self.ndev
            raise InputError(
                f"address: {top - 1} needs {need / 2**30:.1f} GiB of j-memory per device, "
                f"more than the device has ({mem / 2**30:.1f} GiB; the largest address "
                f"that fits is {self.max_address})"
            )
        # doubling, but never beyond what the devices hold
        cap = min(max(top, 2 * self._raw.shape[0], 1024), limit)
        raw = np.zeros((cap, RAW_N, 4), dtype=np.float64)
        ids = np.full(cap, -1, dtype=np.int64)
        k = self._raw.shape[0]
        raw[:k], ids[:k] = self._raw, self._ids
        self._raw, self._ids = raw, ids

    @_serialised
    def set_time(self, t: float) -> None:
        """Predict j-particles to time ``t`` before the next force call."""
        self._check_open()
        self._time = _scalar("t", t)

    def _hold(self) -> contextlib.AbstractContextManager[Any]:
        """Keep every device ready for the operations of one call (see Context.hold)."""
        if len(self._devs) == 1:
            return self._devs[0].ctx.hold()
        stack = contextlib.ExitStack()
        for dev in self._devs:
            stack.enter_context(dev.ctx.hold())
        return stack

    def _n_local(self, n: int, d: int) -> int:
        """Local addresses of device d among global addresses [0, n)."""
        return max(0, -(-(n - d) // self.ndev))

    def _sync_j(self, small: list[bool] | None = None) -> None:
        """Send changed addresses and predict, where needed (``small[d]``: on device d's
        companion, because the force launch that follows goes there)."""
        nd = self.ndev
        changed = False
        if self._dirty:
            # each changed address once, in increasing order (the last write is in _raw)
            if len(self._dirty) == 1 and self._dirty[0].size == 1:  # a block step of one
                dirty = self._dirty[0]
            else:
                dirty = np.unique(np.concatenate(self._dirty))
            dirty = dirty[: np.searchsorted(dirty, self._n_stored)]
            for d, dev in enumerate(self._devs):
                n_loc = self._n_local(self._n_stored, d)
                if dev.ensure_j_capacity(n_loc):
                    sel = np.arange(d, self._n_stored, nd)  # everything, after a reallocation
                else:
                    sel = dirty if nd == 1 else dirty[dirty % nd == d]
                if sel.size:
                    dev.upload_j(sel if nd == 1 else sel // nd, self._raw[sel], self._ids[sel])
            self._dirty.clear()
            changed = True
        if changed or self._predicted_time != self._time:
            for d, dev in enumerate(self._devs):
                n_loc = self._n_local(self._n_stored, d)
                dev.predict(n_loc, self._time, bool(small and small[d]))
                self._predicted_n[d] = n_loc
            self._predicted_time = self._time

    # -- forces
    @_serialised
    def compute(self, x: Any, v: Any, index: Any, eps2: float, h2: Any = None, a: Any = None,
                nj: int | None = None) -> ForceResult:
        """Forces on i-particles from j-addresses [0, nj); blocking. See :meth:`start_compute`."""
        self._check_open()
        with self._hold():  # one context switch for the whole call (CUDA)
            return self.start_compute(x, v, index, eps2, h2=h2, a=a, nj=nj).result()

    @_serialised
    def start_compute(self, x: Any, v: Any, index: Any, eps2: float, h2: Any = None,
                      a: Any = None, nj: int | None = None) -> PendingForce:
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
            Predicted accelerations of the i-particles (required for order 6).
        nj : int, optional
            Use j-addresses [0, nj) (default: every stored address).
        """
        self._check_open()
        if self._pending is not None:
            # Collect an earlier computation nobody waited for; its buffers are reused.
            try:
                self._pending.result()
            except SapporoError:
                pass
        xi = _vec3("x", x, None)
        ni = xi.shape[0]
        if ni == 0:
            raise InputError("x: no i-particles (ni = 0)")
        vi = _vec3("v", v, ni)
        ids = _ints("index", index, ni, 0, MAX_ID)
        eps2 = _scalar("eps2", eps2, nonneg=True)
        if a is None and self.order >= 6:
            raise InputError("a: order 6 needs the i-particles' predicted accelerations")
        ai = None if a is None else _vec3("a", a, ni)  # checked always, used by order 6
        if self.order < 6:
            ai = None
        ngb = h2 is not None
        h2v = _scalars("h2", h2, ni, nonneg=True) if ngb else None
        if nj is None:
            nj = self._n_stored
        else:
            nj = _int_arg("nj", nj, 0, self._n_stored, " (addresses stored)")
        with self._hold():
            # the prediction goes with a small launch to the companion unless it is itself
            # large (it is O(N); one core against all of them)
            self._sync_j([dev.small_launch(ni, self._n_local(nj, d))
                          and self._n_local(self._n_stored, d) <= SMALL_PREDICT_MAX
                          for d, dev in enumerate(self._devs)])

            chunks = []
            for k, c0 in enumerate(range(0, ni, NI_CHUNK)):
                c1 = min(ni, c0 + NI_CHUNK)
                per_dev = [
                    dev.launch_force(k, xi[c0:c1], vi[c0:c1], ids[c0:c1],
                                     None if h2v is None else h2v[c0:c1],
                                     None if ai is None else ai[c0:c1], self._n_local(nj, d), eps2)
                    for d, dev in enumerate(self._devs)
                ]
                chunks.append((c0, c1, per_dev))

        def finish() -> ForceResult:
            for dev in self._devs:
                dev.finish()
            return self._assemble(chunks, ni, ids, ngb)

        pending = PendingForce(self, finish)
        self._pending = pending
        return pending

    def _assemble(self, chunks: list, ni: int, ids: np.ndarray, ngb: bool) -> ForceResult:
        if len(chunks) == 1 and self.ndev == 1:  # the common case, without copies
            out = _combine_parts(chunks[0][2][0][0][:, :, :ni])
        else:
            out = np.empty((NCO, ni), dtype=np.float64)
            for c0, c1, per_dev in chunks:
                nic = c1 - c0
                by_dev = [_combine_parts(o[:, :, :nic]) for o, _, _ in per_dev]
                out[:, c0:c1] = (_combine_parts(np.stack(by_dev)) if len(by_dev) > 1
                                 else by_dev[0])
        if ni == 1 and not ngb:
            return self._assemble_one(out, ids)
        counts = None
        lists: list[tuple[np.ndarray, np.ndarray]] = []
        if ngb:
            counts = np.zeros(ni, dtype=np.int64)
            for d in range(self.ndev):
                dev_counts = np.concatenate([pd[d][1][: c1 - c0] for c0, c1, pd in chunks])
                dev_lists = np.concatenate([pd[d][2][: c1 - c0] for c0, c1, pd in chunks])
                counts += dev_counts
                lists.append((dev_counts, dev_lists))
        # (The nearest-neighbour rows are not checked: r^2 is inf when there is no
        # neighbour.)
        if not _all_finite(out[self._rows]):
            self._raise_non_finite(out, ids)
        acc = out[0:3].T.copy()
        pot = out[3].copy()
        jerk = out[4:7].T.copy() if self.order >= 4 else None
        snap = out[8:11].T.copy() if self.order >= 6 else None
        nn_id = out[OC_NNID].astype(np.int64)
        nn_r2 = out[OC_NNR2].copy()
        nn_r2[nn_id < 0] = np.inf
        overflow = bool(ngb and (counts > self.nb_capacity).any())
        return ForceResult(
            acc=acc, jerk=jerk, snap=snap, pot=pot, nn_index=nn_id, nn_r2=nn_r2,
            neighbour_counts=counts, overflow=overflow, capacity=self.nb_capacity,
            _lists=lists,
        )

    def _assemble_one(self, out: np.ndarray, ids: np.ndarray) -> ForceResult:
        """:meth:`_assemble` for a single i-particle without neighbour lists (frequent in
        block steps): one copy of the twelve numbers, and the results as views of it (no
        two overlap)."""
        col = out[:, 0].copy()
        r = col.tolist()
        if not all(math.isfinite(r[k]) for k in self._rows):
            self._raise_non_finite(out, ids)
        nn_id = int(r[OC_NNID])
        if nn_id < 0:
            col[OC_NNR2] = math.inf
        return ForceResult(
            acc=col[0:3].reshape(1, 3), pot=col[3:4],
            jerk=col[4:7].reshape(1, 3) if self.order >= 4 else None,
            snap=col[8:11].reshape(1, 3) if self.order >= 6 else None,
            nn_index=np.array([nn_id], dtype=np.int64), nn_r2=col[OC_NNR2 : OC_NNR2 + 1],
            neighbour_counts=None, overflow=False, capacity=self.nb_capacity,
        )

    def _raise_non_finite(self, out: np.ndarray, ids: np.ndarray) -> None:
        finite = np.isfinite(out[self._rows]).all(axis=0)
        if finite.all():  # the sum overflowed, not a term
            return
        bad = np.flatnonzero(~finite)
        k = int(bad[0])
        hint = ("coincident particles with eps2 = 0, or overflow?" if self.precision == "double"
                else "coincident particles with eps2 = 0, or pair terms beyond single "
                "precision's range (~3e38: double-single computes them in float; use N-body "
                "units or precision='double', see docs/accuracy.md)")
        raise NonFiniteError(
            f"non-finite force on i-particle {k} (id {int(ids[k])}) and {bad.size - 1} "
            f"other(s): {hint}"
        )
