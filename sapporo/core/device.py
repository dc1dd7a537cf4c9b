"""Per-device work of the force library: buffers, programs, launch plans.

A :class:`Device` owns one open backend context: the device copy of the j-particles (local
addresses), the predicted records, the kernels built for the library's :class:`Variant`,
and cached launch plans, which the native engine runs (:mod:`sapporo.core.engine`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sapporo.backend import (
    Buffer,
    Context,
    DeviceInfo,
    HostBuffer,
    Kernel,
    Launch,
    Program,
    capabilities,
)
from sapporo.config import CUTOFF_RANGE
from sapporo.core import layout
from sapporo.core.launch import NI_CHUNK, LaunchConfig, LaunchTable, load_table
from sapporo.core.layout import MAX_PARTS, REDUCE_LANES, REDUCE_ROWS
from sapporo.errors import BackendError, InputError

__all__ = ["CUTOFF_SHAPES", "J_MIN", "Device", "Variant", "check_cutoff", "j_bytes"]

#: work-group size of the one-particle-per-work-item kernels (scatter, predict, reduce);
#: left to itself PoCL picks groups that make the prediction twice as slow
LINEAR_LOCAL = 64
#: partial results up to this many doubles are combined on the host, not by the reduce
#: kernel, on devices that compute on host memory (CPUs), where the host combination saves a
#: launch (tens of us on PoCL) ...
HOST_REDUCE_MAX = 1 << 16
#: ... and on devices with memory of their own (GPUs, or a CPU with
#: SAPPORO_NATIVE_MEMORY=device), where a launch costs a few us and the download of every
#: part costs more (512 parts of 8 i-particles: 393 kB over PCIe)
GPU_HOST_REDUCE_MAX = 0
#: j-addresses memory holds at least (the host mirror, and each device's records): a tree
#: code's lists of up to this many j-particles are stored by the engine from the first
#: call, and larger sets grow by doubling (each growth one call into Python)
J_MIN = 16384
J_SLACK = 16  # j-records past the capacity, read (masked) by the j-vector kernels
#: j-records the native engine places with one scatter launch on device memory (larger
#: batches take several, or two copies when their addresses are consecutive)
SCATTER_MAX = 256
#: predictions of at most this many j-particles run on the companion device with a small
#: force launch: there the force launch need not wait for the threaded device's hand-off.
#: Block step of one particle, PoCL 3.1 on 2 Zen 5 cores: N = 16k 132-136 us against
#: 169-201 us with the prediction on the threaded device, N = 32k 208-215 against 241-245;
#: at N = 64k and 4 active particles the threaded device wins (501-845 against 965 us)
SMALL_PREDICT_MAX = 32768
#: small force calls of at least TWIN_NI padded i-particles and TWIN_PAIRS padded i x j
#: pairs split their j-range between the companion (the calling thread) and its twin (a
#: thread of the engine), where the context has one (sapporo/core/twin.c). The twin's core
#: reads its half of the j-records from the caller's caches, about 5 ns a record (4th
#: order, N = 16k, 2 Zen 4 cores: one active particle took 130 us split against 85), and
#: each half pays PoCL's per-command cost: blocks of 16 and more on 2048 j-particles and
#: more earn that back (N = 1k: 16 active 34 us split against 25-34, 64 active 56-76
#: against 72-76)
TWIN_NI = 16
TWIN_PAIRS = 32768
#: the splits of the cutoff force (:class:`Variant`), in the order of the kernels' CUTOFF
#: values 1, 2 (sapporo/variants.h)
CUTOFF_SHAPES = ("s2", "gauss")


def check_cutoff(order: int, cutoff: Any, shape: Any) -> tuple[float | None, str]:
    """The cutoff arguments of :class:`sapporo.Library` checked: ``(cutoff, shape)`` with
    ``cutoff`` a float (or None: no cutoff) and ``shape`` lower case.

    Raises
    ------
    InputError
        A cutoff at an order other than 2, a length that is not a finite number in
        :data:`CUTOFF_RANGE`, or an unknown shape.
    """
    if not isinstance(shape, str) or shape.strip().lower() not in CUTOFF_SHAPES:
        raise InputError(f"cutoff_shape: expected one of {', '.join(CUTOFF_SHAPES)}, got "
                         f"{shape!r}")
    shape = shape.strip().lower()
    if cutoff is None:
        return None, shape
    if (isinstance(cutoff, bool) or not isinstance(cutoff, (int, float, np.integer, np.floating))
            or not math.isfinite(cutoff)
            or not CUTOFF_RANGE[0] <= cutoff <= CUTOFF_RANGE[1]):
        raise InputError(f"cutoff: expected a split length between {CUTOFF_RANGE[0]:g} and "
                         f"{CUTOFF_RANGE[1]:g}, got {cutoff!r}")
    if order != 2:
        raise InputError(f"cutoff: the short-range (cutoff) force needs order 2, not {order} "
                         "(it has no jerk)")
    return float(cutoff), shape


def j_bytes(order: int) -> int:
    """Bytes per j-address at ``order``: its raw records and the id (int64)."""
    return layout.raw_n(order) * 32 + 8


@dataclass(frozen=True)
class Variant:
    """What every kernel of a library is built for; fixed for the library's lifetime.

    Parameters
    ----------
    order : {2, 4, 6, 8}
    precision : {"double-single", "double", "single"}
    nb_capacity : int
        Neighbour-list capacity per i-particle.
    profiling : bool
        Record kernel events and sum their device time.
    cutoff : float or None
        Order 2 only: the split length of the short-range (cutoff) force, or None for
        Newton's (see :class:`sapporo.Library`).
    cutoff_shape : {"s2", "gauss"}
        The split the cutoff force is the short-range part of.
    ids : bool
        False: the kernels read no ids (every pair counts, no nearest neighbour, no lists).
    """

    order: int
    precision: str
    nb_capacity: int
    profiling: bool = False
    cutoff: float | None = None
    cutoff_shape: str = "s2"
    ids: bool = True

    @property
    def ds(self) -> bool:
        """True for the float records of double-single (and of single, its order-2 form
        without the low parts)."""
        return self.precision != "double"

    def defines(self) -> dict[str, int]:
        """The compile-time definitions common to every kernel of this variant."""
        return {"ORDER": self.order, "PRECISION": 1 if self.ds else 2}

    def force_defines(self) -> dict[str, Any]:
        """The force kernel's definitions of the cutoff (none without one, so that the
        Newtonian kernels are built exactly as before): ``CUTOFF`` (1 S2, 2 Gaussian) and
        ``CUTOFF_R``, the split length as a double literal (``repr``: the same double); and
        ``SINGLE`` for single; ``IDS`` 0 without ids."""
        out: dict[str, Any] = {"SINGLE": 1} if self.precision == "single" else {}
        if not self.ids:
            out["IDS"] = 0
        if self.cutoff is not None:
            out.update(CUTOFF=CUTOFF_SHAPES.index(self.cutoff_shape) + 1,
                       CUTOFF_R=repr(float(self.cutoff)))
        return out


class Device:
    """Buffers and programs of one device; j-addresses are local to it."""

    def __init__(self, variant: Variant, ctx: Context):
        self.variant = variant
        self.ctx = ctx
        self.raw_n = layout.raw_n(variant.order)  # raw records per j-address
        self.info: DeviceInfo = ctx.info
        self.ext = capabilities(self.info.backend).kernel_ext
        ds = variant.ds
        # the positions of the arguments the engine sets per call: the prediction's time,
        # the force's eps2 and ni
        self.t_arg = layout.arg_index(layout.PREDICT_ARGS, "t", variant.order, ds)
        self.eps2_arg = layout.arg_index(layout.FORCE_ARGS, "eps2_d", variant.order, ds)
        self.ni_arg = layout.arg_index(layout.FORCE_ARGS, "ni", variant.order, ds)
        # predict.cl/.cu programs (scatter_j and predict) by (companion device, derivative
        # records the predictor reads: PRED_TERMS), built when first needed
        self._predict_progs: dict[tuple[bool, int, bool], Program] = {}
        self.table: LaunchTable = load_table(self.info, variant.order, variant.precision)
        self.cap = 0  # j capacity (local addresses)
        self.j: dict[str, Buffer] = {}
        # On devices that compute on host memory the raw records and ids live in host
        # arrays that the kernels read directly: storing j-particles queues no command.
        self.j_hosts: dict[str, HostBuffer] = {}
        self.h_raw: np.ndarray | None = None
        self.h_id: np.ndarray | None = None
        self.bufs: dict[str, Buffer] = {}
        # the device time of the kernels run for the library (profiling), which the native
        # engine adds through the cell's address
        self.seconds_cell = np.zeros(1, dtype=np.float64)
        self._kernels: dict[tuple[LaunchConfig, bool, bool], tuple[Kernel, Kernel]] = {}
        self.hosts: dict[str, HostBuffer] = {}
        # the prepared predictions by (companion, derivative terms): (generation, launch)
        self._predicts: dict[tuple[bool, int, bool], tuple[int, Launch]] = {}
        # the generation of this device's memory: bumped whenever a buffer is reallocated
        # (launch plans hold buffers; the native engine reads it through its address)
        self.gen_cell = np.zeros(1, dtype=np.int64)

    # -- memory
    def _reuse(self, store: dict[str, Any], name: str, nbytes: int, alloc: Any) -> Any:
        """The buffer ``name`` of ``store``, reallocated with ``alloc`` when too small."""
        buf = store.get(name)
        if buf is None or buf.nbytes < nbytes:
            if buf is not None:  # plans may hold it: they go (a first one moves nothing)
                self.ctx.finish()  # queued work may still use it
                buf.free()
                self.gen_cell[0] += 1
            buf = alloc(max(nbytes, 64))
            store[name] = buf
        return buf

    def _buf(self, name: str, nbytes: int) -> Buffer:
        return self._reuse(self.bufs, name, nbytes, self.ctx.alloc)

    def _host(self, name: str, nbytes: int) -> HostBuffer:
        return self._reuse(self.hosts, name, nbytes, self.ctx.alloc_host)

    @property
    def max_j(self) -> int:
        """The most local j-addresses this device's buffers can hold: no buffer beyond the
        device's largest allocation (``DeviceInfo.max_alloc_size``; its raw records are the
        largest, ``raw_n`` double4 per address)."""
        limit = self.info.max_alloc_size
        if limit <= 0:
            return layout.MAX_ADDRESS + 1
        per_slot = 4 * (4 if self.variant.ds else 8)  # a predicted position or velocity
        return max(0, min(limit // (self.raw_n * 32), limit // per_slot - J_SLACK))

    def ensure_j_capacity(self, n: int) -> bool:
        """Grow the j-buffers to hold ``n`` local addresses (allocate them on first use, even
        for none); True when they were (re)allocated.

        Raises
        ------
        BackendError
            When the device cannot allocate them (the message names the device and the
            bytes); the buffers are then as they were, records included.
        """
        if n <= self.cap and self.j:
            return False
        cap = min(max(n, 2 * self.cap, J_MIN), max(n, self.max_j))
        self.ctx.finish()  # queued work may still use the old buffers
        old = self.cap
        try:
            self._alloc_j(cap)
        except (BackendError, MemoryError) as exc:
            self._free_j()
            if old:  # as large as it was (the library then uploads every record again)
                self._alloc_j(old)
            raise BackendError(f"{self.info.name}: j-memory for {n} addresses "
                               f"({cap * self.bytes_per_address()} bytes, with room to grow) "
                               f"could not be allocated: {exc or type(exc).__name__}") from None
        return True

    def bytes_per_address(self) -> int:
        """Device bytes per local j-address, all its buffers (the module's :func:`j_bytes` is
        the raw records and id the capacity is estimated from)."""
        return self.raw_n * 32 + 4 + sum(self._predicted_bytes().values())

    def _predicted_bytes(self) -> dict[str, int]:
        """Bytes per local j-address of each buffer of predicted records (position, its low
        part in double-single, velocity, acceleration and jerk where the order reads them)."""
        var, rs = self.variant, 4 if self.variant.ds else 8
        sizes = {"pos": 4 * rs, "pos_lo": 16 * var.ds, "vel": 4 * rs,
                 "acc": 4 * rs * (var.order >= 6), "jerk": 4 * rs * (var.order >= 8)}
        return {name: size for name, size in sizes.items() if size}

    def _alloc_j(self, cap: int) -> None:
        """The j-buffers (re)allocated for ``cap`` local addresses, zeroed."""
        self._free_j()
        self.gen_cell[0] += 1
        self.cap = 0
        # J_SLACK records past the end: the j-vector kernels (jv) read whole vectors of
        # records; there they find id -1 (no interaction) and finite zeros
        slots = cap + J_SLACK
        h_raw = self.ctx.alloc_host(cap * self.raw_n * 32)
        self.j_hosts = {"raw": h_raw}  # (freed with the others if one fails)
        if h_raw.zero_copy:
            h_id = self.j_hosts["id"] = self.ctx.alloc_host(slots * 4)
            self.h_raw = h_raw.view(np.float64, (cap, self.raw_n, 4))
            self.h_raw[:] = 0.0
            self.h_id = h_id.view(np.int32, (slots,))
            self.h_id[:] = -1
            self.j = {"raw": h_raw.buffer, "id": h_id.buffer}
        else:
            h_raw.free()
            self.j_hosts = {}
            self.j["raw"] = self.ctx.alloc(cap * self.raw_n * 32)
            self.j["id"] = self.ctx.alloc(slots * 4)
            # addresses never stored read as zeros, as in host memory: the predictor reads
            # every record up to the last stored one, and garbage there would predict
            # non-finite positions that reach the sums (0 * inf)
            self.j["raw"].fill(0)
            self.j["id"].fill(-1)
        for name, size in self._predicted_bytes().items():
            if name in ("pos", "pos_lo") and self.h_raw is not None and self.variant.order == 2:
                # host arrays: the engine writes j-records that do not move there itself
                # (order 2: eng_still)
                host = self.j_hosts[name] = self.ctx.alloc_host(slots * size)
                host.array[:] = 0
                self.j[name] = host.buffer
            else:
                self.j[name] = self.ctx.alloc(slots * size)
                self.j[name].fill(0)
        self.cap = cap

    @property
    def host_reduce_max(self) -> int:
        """Parts of at most this many doubles are combined on the host, larger ones by the
        reduce kernel."""
        return HOST_REDUCE_MAX if self.h_raw is not None else GPU_HOST_REDUCE_MAX

    def predict_launch(self, terms: int, small: bool = False, twin: bool = False) -> Launch:
        """The prepared prediction, reading ``terms`` derivative records, on the device, its
        companion or the companion's twin (the engine sets its length ``n`` and grid per
        call, its time ``t`` at :attr:`t_arg`); cached while no buffer is reallocated."""
        key = (small, terms, twin)
        launch = self._predicts.get(key)
        if launch is None or launch[0] != self.gen_cell[0]:
            kernel = self._predict_prog(small, terms, twin).kernel("predict")
            args = layout.kernel_args(layout.PREDICT_ARGS, {
                "n": np.int32(0), "t": np.float64(0.0), **self.j},  # the j-buffers by name
                self.variant.order, self.variant.ds)
            launch = self._predicts[key] = (int(self.gen_cell[0]),
                                            kernel.prepare(*_linear(1), *args))
        return launch[1]

    def scatter_launch(self, terms: int) -> tuple[Launch, HostBuffer]:
        """Device memory: the prepared scatter of up to :data:`SCATTER_MAX` packed j-records
        (its argument ``n`` set per call, at position 0) and its staging host buffer (per
        record its ``raw_n`` double4, then its address and id in one more), for the
        native engine's stores."""
        packed = self._host("scatter_batch", SCATTER_MAX * (self.raw_n + 1) * 32)
        kernel = self._predict_prog(False, terms).kernel("scatter_j")
        launch = kernel.prepare(*_linear(SCATTER_MAX), *layout.kernel_args(
            layout.SCATTER_ARGS, {
                "n": np.int32(0), "packed": packed.buffer, "raw": self.j["raw"],
                "jid": self.j["id"]},
            self.variant.order, self.variant.ds))
        return launch, packed

    def _predict_prog(self, small: bool, terms: int, twin: bool = False) -> Program:
        """The predict program for the device, its companion or the companion's twin (a
        program of its own: TWIN), reading ``terms`` derivative records (built once)."""
        prog = self._predict_progs.get((small, terms, twin))
        if prog is None:
            defs = {**self.variant.defines(), "PRED_TERMS": terms,
                    **({"TWIN": 1} if twin else {})}
            prog = self.ctx.build(f"predict.{self.ext}", defs, small=small, twin=twin)
            self._predict_progs[(small, terms, twin)] = prog
        return prog

    # -- forces
    def _ranges(self) -> list[tuple[LaunchConfig, int, int]]:
        """The table's entries with the block sizes each serves (``for_ni``): (config,
        ni_lo, ni_hi), blocks up to :data:`NI_CHUNK`; entries that serve none left out."""
        out, lo = [], 1
        entries = self.table.entries
        for k, (ni_max, cfg) in enumerate(entries):
            hi = NI_CHUNK if k == len(entries) - 1 else min(ni_max, NI_CHUNK)
            if lo <= hi:
                out.append((cfg, lo, hi))
            lo = max(lo, hi + 1)
        return out

    def _max_parts(self, cfg: LaunchConfig, ni_lo: int, ni_hi: int) -> int:
        """The most doubles of j-parts (parts times padded block) a launch of ``cfg`` on
        ``ni_lo .. ni_hi`` i-particles writes per result row, on any number of j-addresses
        (split_j's parts are at most this many)."""
        step = cfg.i_per_group
        target = self.info.compute_units * cfg.groups_per_cu
        return max(pad * min(-(-target // max(1, pad // step)), MAX_PARTS)
                   for pad in range(_round_up(ni_lo, step), _round_up(ni_hi, step) + 1, step))

    def plans(self, ngb: bool, terms: int, n_pred: int) -> list[dict[str, Any]] | None:
        """The device's part of the engine's plans (``sapporo/plan.h``; the library adds the
        rest), one for every entry of the launch table, on the device and (where there is
        one) on its companion of small launches. Each serves the force calls of its range of
        block sizes on any number of j-addresses: the engine derives each call's launch from
        it by arithmetic (``sapporo/core/plan.c``: the padded block, the parts of the
        j-range, whether the host or the reduce kernel combines them). Every force kernel
        the table names is built now, and the buffers the largest call needs are allocated
        before any launch holds them (no buffer is reallocated while they are made). None
        when a launch or a buffer has no native handle.

        ``terms``: the derivative records the prediction reads; ``n_pred``: the device's
        j-addresses it predicts."""
        var = self.variant
        nci, nco = layout.nci(var.order), layout.nco(var.order)
        limit = self.host_reduce_max
        # the companion's twin takes half of a small call's j-range (host memory only; not
        # with lists, whose counts both halves would share)
        twin = getattr(self.ctx, "twin", False) and self.h_raw is not None and not ngb
        shapes = []
        for cfg, lo, hi in self._ranges():
            for small in (False, True) if self.ctx.small_pairs > 0 else (False,):
                pad = _round_up(hi, cfg.i_per_group)
                parts = pad * nco if small else self._max_parts(cfg, lo, hi) * nco
                shapes.append((cfg, lo, hi, small, pad, parts))
        pad_max = max(s[4] for s in shapes)
        # the force writes its parts to "out" when the host combines them (one part, or at
        # most `limit` doubles; two parts of a call split with the twin), else to "partial"
        # for the reduce kernel
        out_n = max(max(min(s[5], limit), (2 if twin and s[3] else 1) * nco * s[4])
                    for s in shapes)
        partial_n = max((s[5] for s in shapes if s[5] > limit), default=0)
        h_in = self._host("idata", nci * pad_max * 8)
        h_out = self._host("out", out_n * 8)
        h_twin = self._host("twin_out", out_n * 8) if twin else None
        partial = self._buf("partial", partial_n * 8) if partial_n else None
        h_cnt = h_lst = None
        if ngb:
            h_cnt = self._host("nbcount", pad_max * 4)
            h_lst = self._host("nblist", pad_max * var.nb_capacity * 4)
        if self.h_raw is not None:  # the device computes on these host arrays
            memory = {"memory": 0, "dev_raw": self.h_raw.ctypes.data,
                      "dev_ids": self.h_id.ctypes.data, "queue": 0, "idata_buf": 0,
                      "out_buf": 0, "nb_counts_buf": 0, "nb_lists_buf": 0, "scatter_max": 0,
                      "scatter_batch": 0, "scatter_batch_buf": 0}
            scatter = None
        else:  # its own memory: the engine queues the copies
            scatter_launch, batch = self.scatter_launch(terms)
            handles = [self.j["raw"].native(), self.j["id"].native(), self.ctx.native_queue(),
                       h_in.buffer.native(), h_out.buffer.native(), batch.buffer.native(),
                       scatter_launch.native()]
            if None in handles:
                return None
            memory = {"memory": 1, "dev_raw": handles[0], "dev_ids": handles[1],
                      "queue": handles[2], "idata_buf": handles[3], "out_buf": handles[4],
                      "nb_counts_buf": 0 if h_cnt is None else h_cnt.buffer.native(),
                      "nb_lists_buf": 0 if h_lst is None else h_lst.buffer.native(),
                      "scatter_max": SCATTER_MAX, "scatter_batch": batch.array.ctypes.data,
                      "scatter_batch_buf": handles[5]}
            scatter = handles[6]
        partial_buf = 0 if partial is None else partial.native()
        plans = []
        for cfg, lo, hi, small, pad, parts in shapes:
            kernel, reduce_k = self.kernels(cfg, ngb, small)

            def force_args(out: Any) -> list[Any]:
                return layout.kernel_args(layout.FORCE_ARGS, {
                    "nj": np.int32(0), "ni": np.int32(0), "ni_pad": np.int32(0),
                    "jchunk": np.int32(0), "eps2_d": np.float64(0.0),  # set per call
                    **{"j" + name: buf for name, buf in self.j.items()},  # jpos, jid, ...
                    "idata": h_in.buffer, "out": out,
                    "nb_count": None if h_cnt is None else h_cnt.buffer,
                    "nb_list": None if h_lst is None else h_lst.buffer,
                }, var.order, var.ds, ngb)

            grid = ((pad // cfg.i_per_item, cfg.lj), (cfg.li, cfg.lj))
            force = kernel.prepare(*grid, *force_args(h_out.buffer))
            twin_force = None
            if small and h_twin is not None:
                twin_kernel = self.kernels(cfg, ngb, small, twin=True)[0]
                twin_force = twin_kernel.prepare(*grid, *force_args(h_twin.buffer)).native()
                if twin_force is None:
                    return None
            reduce = None
            if parts > limit:
                reduce = reduce_k.prepare(
                    (REDUCE_LANES, _round_up(hi, REDUCE_ROWS)), (REDUCE_LANES, REDUCE_ROWS),
                    *layout.kernel_args(layout.REDUCE_ARGS, {
                        "ni": np.int32(0), "ni_pad": np.int32(0), "nparts": np.int32(1),
                        "partial": partial, "out": h_out.buffer}, var.order, var.ds))
            # the prediction before a small force launch goes to the companion too, unless
            # it is itself large (it is O(N); one core against all of them)
            predict_small = small and n_pred <= SMALL_PREDICT_MAX
            predict = self.predict_launch(terms, predict_small)
            # ... and where it does, the twin predicts the half of a split call it reads
            twin_predict = (self.predict_launch(terms, True, twin=True).native()
                            if predict_small and twin_force is not None else None)
            self.ctx.finish()
            launches = [predict.native(), force.native(), scatter,
                        None if reduce is None else reduce.native(), twin_force, twin_predict]
            if None in launches[:2] or (reduce is not None and None in (launches[3], partial_buf)):
                return None
            plans.append({
                "ni_pad_max": pad, "raw_n": self.raw_n, "j_cap": self.cap,
                "spin_ns": int(getattr(self.ctx, "spin_seconds", 0.0) * 1e9),
                "idata": h_in.array.ctypes.data, "out": h_out.array.ctypes.data,
                "out_bytes": out_n * 8, **memory,
                "gen_at": self.gen_cell.ctypes.data,
                **{"pred_" + k: (self.j_hosts[n].array.ctypes.data if n in self.j_hosts else 0)
                   for k, n in (("pos", "pos"), ("lo", "pos_lo"))},
                "small": int(small), "ni_lo": lo, "ni_hi": hi,
                "i_per_group": cfg.i_per_group, "i_per_item": cfg.i_per_item, "lj": cfg.lj,
                "j_align": cfg.j_align, "min_jchunk": cfg.min_jchunk,
                "target_groups": self.info.compute_units * cfg.groups_per_cu,
                "small_pairs": self.ctx.small_pairs, "host_reduce_max": limit,
                "out_arg": layout.arg_index(layout.FORCE_ARGS, "out", var.order, var.ds, ngb),
                "partial_buf": partial_buf if reduce is not None else 0,
                "seconds_at": self.seconds_cell.ctypes.data if var.profiling else 0,
                "context": self.ctx.native_context() or 0,
                "nb_counts": 0 if h_cnt is None else h_cnt.array.ctypes.data,
                "nb_lists": 0 if h_lst is None else h_lst.array.ctypes.data,
                "twin_out": 0 if twin_force is None else h_twin.array.ctypes.data,
                "twin_pairs": TWIN_PAIRS, "twin_ni": TWIN_NI,
                "launches": launches,
                "call_args": (self.t_arg, self.eps2_arg, -1, -1, self.eps2_arg, self.t_arg),
                # the scatter's n, the reduce's ni: arg 0
                "ni_args": (-1, self.ni_arg, 0, 0, self.ni_arg, -1),
            })
        return plans

    def kernels(self, cfg: LaunchConfig, ngb: bool, small: bool = False,
                twin: bool = False) -> tuple[Kernel, Kernel]:
        """The force and reduce kernels for a launch shape (built once), for the device,
        for its companion of small launches or for the companion's twin (``TWIN``: the
        launch computes the call's second half of parts)."""
        key = (cfg, ngb, small, twin)
        if key not in self._kernels:
            defs = {**self.variant.defines(), **cfg.defines(), "NGB": int(ngb),
                    "NB_CAP": self.variant.nb_capacity, **self.variant.force_defines(),
                    **({"TWIN": 1} if twin else {})}
            prog = self.ctx.build(f"force.{self.ext}", defs, small=small, twin=twin)
            self._kernels[key] = (prog.kernel("force"), prog.kernel("reduce"))
        return self._kernels[key]

    @property
    def kernel_seconds(self) -> float:
        """Device time of the kernels run for the library so far (with profiling; 0.0
        without): see :attr:`sapporo.Library.kernel_seconds`."""
        return float(self.seconds_cell[0])

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


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _linear(n: int) -> tuple[tuple[int], tuple[int]]:
    """Global and local size of a one-work-item-per-element launch over ``n`` elements."""
    return (_round_up(n, LINEAR_LOCAL),), (LINEAR_LOCAL,)


