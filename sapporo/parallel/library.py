"""sapporo over MPI: one force library spread over the ranks of a communicator.

:class:`ParallelLibrary` has the contract of :class:`sapporo.Library` (the same methods, the
same :class:`~sapporo.ForceResult`, the same errors) and is used SPMD: every rank makes the
same calls with the same arguments and gets the same, bitwise identical results.

The ranks form a grid of ``rows x cols``: j-address ``a`` is stored by every rank of column
``a % cols`` at local address ``a // cols``; the i-block is cut into ``rows`` contiguous
pieces; the partial forces of a row are combined in column order along the row, and the
rows' pieces gathered along the columns. ``decomposition="j"`` is the grid ``1 x P``,
``"2d"`` the most square one, ``"auto"`` picks by :func:`auto_rows`. A block step costs one
collective (two on a 2-D grid), whose first exchange has a size fixed when the library
opens (:data:`INLINE_BYTES`). An error of a rank's own library travels, as a flag, with the
next gather of forces, and every rank raises it; ranks that passed different shapes all
raise the same :class:`~sapporo.InputError`. docs/parallel.md has the details.

mpi4py is imported only when a :class:`ParallelLibrary` is made (``pip install
'sapporo-nbody[mpi]'``); what the launcher set in the environment is read by
:mod:`sapporo.parallel.launcher`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import tempfile
import threading
import time
import traceback
import zlib
from concurrent.futures import Future
from typing import Any

import numpy as np

from sapporo import config, errors
from sapporo.core import layout, validate
from sapporo.core.results import PendingForce
from sapporo.errors import ConfigError, InputError, NonFiniteError, SapporoError
from sapporo.parallel.launcher import (  # noqa: F401 (re-exported: part of the interface)
    LOCAL_RANK_VARIABLES,
    SIZE_VARIABLES,
    launcher_device,
    launcher_local_rank,
    launcher_size,
)

log = logging.getLogger(__name__)

DECOMPOSITIONS = ("j", "2d", "auto")
#: "auto" uses the j-decomposition up to this many ranks and the 2-D grid beyond (the model
#: of tune/mpi_bench.py puts the 2-D grid ahead from 8 ranks on: docs/parallel.md)
AUTO_J_MAX_RANKS = 4
#: default of ParallelLibrary.scatter_min_bytes: combining by slices saves a rank about
#: (cols - 2) x its partials' bytes of traffic for one more collective
SCATTER_MIN_BYTES = 1 << 17
#: The first exchange of a force call along a row (and column) is an allgather of a size
#: fixed when the library opens: each rank's header (failed, ni, neighbour lists asked for,
#: scatter_min_bytes) and room for this many bytes of its partial forces; larger partials go
#: as messages, received once the headers agree. So no collective's size depends on an
#: argument before every rank's value of it is known (on 2 ranks of one node an allgather of
#: 4 kB took 1-2 us more than one of 112 bytes, one of 8 kB 8 us more)
INLINE_BYTES = 4096
_HEAD = 4  # doubles of the header
_TAG = 42  # tag of the messages of partial forces
#: seconds a failing rank waits between its message and MPI_Abort, so that the launcher
#: forwards the message before the job is killed
ABORT_GRACE = 0.2
_NO_ID = np.iinfo(np.int64).max  # padding of neighbour lists while merging


def auto_rows(size: int) -> int:
    """The rows of the grid that ``decomposition="auto"`` uses on ``size`` ranks: 1 (the
    j-decomposition) up to :data:`AUTO_J_MAX_RANKS` ranks, else as for ``"2d"``."""
    return 1 if size <= AUTO_J_MAX_RANKS else square_rows(size)


def square_rows(size: int) -> int:
    """The largest divisor of ``size`` that is at most its square root (rows of ``"2d"``)."""
    r = math.isqrt(size)
    while size % r:
        r -= 1
    return r


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ConfigError(
            f"sapporo.parallel needs mpi4py ({exc}): pip install mpi4py mpich (the 'mpi' extra: "
            'pip install -e ".[mpi]" from a source checkout), or mpi4py built against your '
            "cluster's MPI"
        ) from None
    return MPI


def _digest(*values: Any) -> int:
    """A CRC-32 of the arguments (dtype, shape and bytes of each), to check that every rank
    passed the same ones."""
    crc = 0
    for value in values:
        try:
            arr = np.asarray(value)
        except Exception:  # unconvertible: its repr
            crc = zlib.crc32(repr(value).encode(), crc)
            continue
        crc = zlib.crc32(f"{arr.dtype.str}{arr.shape}".encode(), crc)
        if arr.dtype.kind in "biufc":
            crc = zlib.crc32(np.ascontiguousarray(arr).view(np.uint8).ravel(), crc)
        else:
            crc = zlib.crc32(repr(arr.tolist()).encode(), crc)
    return crc


def _array(name: str, value: Any) -> np.ndarray:
    """``value`` as an array, or an :class:`InputError` naming ``name``."""
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: expected an array, got {type(value).__name__} ({exc})"
                         ) from None


def _non_finite_row(value: Any) -> int | None:
    """The first row of a float array (0 for a number) that holds a value that is not
    finite; None when there is none, or ``value`` is no float array."""
    arr = None if value is None else np.asarray(value)
    if arr is None or arr.dtype.kind != "f" or np.isfinite(arr).all():
        return None
    return int(np.argwhere(~np.isfinite(arr))[0][0]) if arr.ndim else 0


def _everywhere(exc: SapporoError) -> SapporoError:
    """Mark ``exc`` as raised on every rank alike (``exc.all_ranks``)."""
    exc.all_ranks = True  # type: ignore[attr-defined]
    return exc


def _rank_list(ranks: list[int]) -> str:
    """``"rank 1"``, ``"ranks 0, 2"``, ``"ranks 0-5, 7"`` (runs of three or more as ranges)."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    words = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run))
             for run in runs]
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(words)


def _by_value(values: np.ndarray, show: Any) -> str:
    """``"ranks 0, 2: 8; rank 1: 7"``: the ranks of each value, in order of their first."""
    groups: dict[float, list[int]] = {}
    for rank, value in enumerate(values.tolist()):
        groups.setdefault(value, []).append(rank)
    return "; ".join(f"{_rank_list(ranks)}: {show(value)}" for value, ranks in groups.items())


#: what the ranks' headers must agree on, as the error that names it words it: (field,
#: what the ranks did, the value as shown, the rule)
_HEADER_CHECKS = (
    (1, "passed different numbers of i-particles", lambda v: f"{v:.0f}",
     "every rank passes the same i-particles"),
    (2, "asked for neighbour lists differently", lambda v: "h2" if v else "no h2",
     "every rank passes h2, or none does"),
    (3, "set different scatter_min_bytes", lambda v: f"{v:.0f}",
     "set it alike on every rank"),
)


def _error_class(name: str) -> type[SapporoError]:
    cls = getattr(errors, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, SapporoError) else SapporoError


def _rows_of(name: str, value: Any, ni: int, lo: int, hi: int, vector: bool) -> Any:
    """Rows ``[lo, hi)`` of a per-i-particle argument; scalars (and values the library will
    refuse anyway) pass unchanged. A length other than ``ni`` is refused here, since a slice
    could hide it."""
    if value is None:
        return None
    try:
        arr = np.asarray(value)
    except Exception:
        return value
    if arr.ndim == 0 or arr.dtype.kind not in "biuf":
        return value
    if vector and ni == 1 and arr.shape == (3,):
        return arr
    if arr.shape[0] != ni:
        raise InputError(f"{name}: expected {ni} rows (as x), got {arr.shape[0]}")
    return arr[lo:hi]


def _merge_lists(pairs: list[tuple[np.ndarray, np.ndarray]], ni: int,
                 capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge neighbour lists: ``pairs`` of (lengths (ni,), ids (ni, width)); the result holds
    for each i-particle the smallest ``capacity`` ids of the union, ascending. Folded two
    at a time, so that memory stays at (ni, 2 capacity) whatever the number of pairs."""
    lens = np.zeros(ni, np.int64)
    ids = np.zeros((ni, 0), np.int64)
    for more_lens, more in pairs:
        w0, w1 = ids.shape[1], more.shape[1]
        merged = np.full((ni, max(w0 + w1, 1)), _NO_ID, dtype=np.int64)
        for col, (ln, block) in ((0, (lens, ids)), (w0, (more_lens, more))):
            w = block.shape[1]
            if w:
                valid = np.arange(w)[None, :] < ln[:, None]
                merged[:, col:col + w] = np.where(valid, block, _NO_ID)
        merged.sort(axis=1)
        lens = np.minimum(lens + more_lens, capacity)
        top = int(lens.max()) if ni else 0
        ids = merged[:, :top]
    return lens, ids.copy()


#: local blocks of at most this many i-particles are computed at once with
#: :meth:`Library.compute <sapporo.Library.compute>`, which runs them in C on a CPU (the
#: native engine, :mod:`sapporo.core.engine`); larger ones are started and collected later
SYNC_LOCAL_MAX = 256


class ParallelLibrary:
    """:class:`sapporo.Library` spread over the ranks of an MPI communicator (SPMD).

    Parameters
    ----------
    comm : mpi4py communicator, optional
        The ranks to use (default ``MPI.COMM_WORLD``); the library works on a duplicate.
    decomposition : {"j", "2d", "auto"}
        ``"j"``: every rank stores a slice of the j-particles and computes partial forces on
        the whole i-block; ``"2d"``: ranks in a ``rows x cols`` grid, i-block split over rows,
        j-particles over columns; ``"auto"``: see :func:`auto_rows`.
    rows : int, optional
        Rows of the grid (a divisor of the number of ranks); overrides ``decomposition``.
    **kwargs
        Arguments of :class:`sapporo.Library`. Without ``devices`` (and without
        ``SAPPORO_DEVICES``) each rank takes the device whose index is its rank on the node
        modulo the backend's device count.
    """

    def __init__(self, comm: Any = None, decomposition: str = "auto", rows: int | None = None,
                 **kwargs: Any):
        MPI = _mpi()
        self._MPI = MPI
        base = MPI.COMM_WORLD if comm is None else comm
        if not isinstance(decomposition, str) or decomposition.lower() not in DECOMPOSITIONS:
            raise InputError(f"decomposition: expected one of {DECOMPOSITIONS}, got "
                             f"{decomposition!r}")
        size = base.Get_size()
        if rows is None:
            decomposition = decomposition.lower()
            rows = {"j": 1, "2d": square_rows(size), "auto": auto_rows(size)}[decomposition]
        elif isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1 \
                or size % int(rows):
            raise InputError(f"rows: expected a divisor of the {size} ranks, got {rows!r}")
        self.rows = int(rows)
        self.cols = size // self.rows
        self.decomposition = "j" if self.rows == 1 else "2d"
        self.comm = base.Dup()
        self.size = size
        self.rank = self.comm.Get_rank()
        self.row, self.col = divmod(self.rank, self.cols)
        self._row_comm = self.comm.Split(self.row, self.col)  # the ranks of my row
        self._col_comm = self.comm.Split(self.col, self.row)  # ... and of my column
        self.comm_seconds = self.compute_seconds = 0.0
        #: a row is combined by slices (each rank combines one, then an allgather) instead
        #: of by every rank when (cols - 2) x the bytes of a rank's partials reach this (the
        #: same on every rank: a force call whose ranks differ raises)
        self.scatter_min_bytes = SCATTER_MIN_BYTES
        self.collectives = 0
        #: every call checks, with a collective of its own, that no rank failed and that the
        #: ranks passed the same arguments (``SAPPORO_MPI_CHECK=1``, a debug setting)
        self.check_calls = False
        #: (call, error) of this rank's first failure not yet reported to the other ranks
        self._held: tuple[str, BaseException] | None = None
        self._closed = False
        self._n_stored = 0
        self._time = 0.0
        self._pending: PendingForce | None = None
        self._lib: Any = None
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.node_rank = node.Get_rank()
        node_size = node.Get_size()
        node.Free()

        def open_local() -> Any:
            from sapporo import Library, config
            from sapporo.backend import get_backend

            opts = dict(kwargs)
            settings = config.from_environment()
            self.check_calls = settings.mpi_check
            if opts.get("devices") is None and settings.devices is None:
                count = len(get_backend(opts.get("backend")).devices())
                opts["devices"] = [self.node_rank % max(1, count)]
            # ranks that share a node keep its cores busy: no second core per small call
            opts.setdefault("twin", node_size == 1)
            return Library(**opts)

        try:
            # the devices may differ from rank to rank; the other options may not
            same = sorted((k, val) for k, val in kwargs.items() if k != "devices")
            self._lib = self._checked(open_local, _digest(decomposition, rows, repr(same)))
            # the largest global address every rank can hold, the device names, the checks
            info = self._timed(self.comm.allgather, (self._lib.max_address,
                                                     self._lib.device_name, self.check_calls))
            if len({c for _, _, c in info}) > 1:
                raise _everywhere(ConfigError(
                    "SAPPORO_MPI_CHECK differs between the ranks (on: ranks "
                    f"{', '.join(str(r) for r, i in enumerate(info) if i[2])}): set it "
                    "alike on every rank"))
        except BaseException:
            if self._lib is not None:
                self._lib.close()
            self._free_comms()
            raise
        #: the largest j-address :meth:`set_j_particles` accepts (on every rank)
        self.max_address = min(layout.MAX_ADDRESS, (min(i[0] for i in info) + 1) * self.cols - 1)
        #: the grid and the names of the devices of all ranks
        self.device_name = (f"{size} ranks ({self.rows} x {self.cols}, {self.decomposition}) "
                            f"on {' + '.join(sorted({i[1] for i in info}))}")
        self.order: int = self._lib.order
        self.precision: str = self._lib.precision
        self.nb_capacity: int = self._lib.nb_capacity
        self.backend_name: str = self._lib.backend_name
        self.profiling: bool = self._lib.profiling
        #: i-particles of a row's piece whose partials fit in the fixed-size first exchange
        self._room = INLINE_BYTES // (8 * self._ncols())
        log.info("sapporo.parallel: rank %d of %d, grid %d x %d", self.rank, size, self.rows,
                 self.cols)

    def _timed(self, fn: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.comm_seconds += time.perf_counter() - t0
            self.collectives += 1

    def _check(self, error: BaseException | None, digest: int) -> None:
        """Collective: raise on every rank when a rank failed or the arguments differ."""
        flags = np.array([1.0 if error is not None else 0.0, float(digest)])
        every = np.empty((self.size, 2))
        self._timed(self.comm.Allgather, flags, every)
        if every[:, 0].any():
            self._gather_errors(error)
        if (every[:, 1] != every[0, 1]).any():
            bad = int(np.flatnonzero(every[:, 1] != every[0, 1])[0])
            raise _everywhere(InputError(
                f"the ranks passed different arguments (rank {bad} differs from rank 0): "
                "every rank must make the same calls (SPMD)"))

    def _gather_errors(self, error: BaseException | None, call: str = "") -> None:
        """Collective, once some rank failed: exchange the messages and raise, on every rank
        alike, the error of the first failing rank. ``call`` names the earlier call that
        failed on this rank (its error was held)."""
        mine = None if error is None else (type(error).__name__, str(error))
        if error is not None and not isinstance(error, SapporoError):
            mine = ("SapporoError", f"{type(error).__name__}: {error}")
        if mine is not None and call:
            mine = (mine[0], f"{call}: {mine[1]}")
        got = self._timed(self.comm.allgather, mine)
        failures = [(r, *item) for r, item in enumerate(got) if item is not None]
        rank, cls, msg = failures[0]
        if len(failures) == self.size and all(f[1:] == (cls, msg) for f in failures):
            raise _everywhere(_error_class(cls)(f"on every rank: {msg}")) from error
        others = [r for r, _, _ in failures[1:]]
        more = (f" (rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} "
                "failed too)") if others else ""
        raise _everywhere(_error_class(cls)(f"rank {rank} of {self.size}: {msg}{more}")
                          ) from error

    def _checked(self, fn: Any, digest: int) -> Any:
        """Run ``fn`` here, then check collectively (:meth:`_check`); its value."""
        error, value = None, None
        try:
            value = fn()
        except Exception as exc:
            error = exc
        self._check(error, digest)
        return value

    def _step(self, call: str, prepare: Any, local: Any, *args: Any) -> Any:
        """One call of a block step: ``prepare()`` (this layer's checks, alike on every rank;
        an error raises at once everywhere), then ``local(prepared)`` (this rank's library;
        an error is held for the next gather of forces); the prepared value. With
        :attr:`check_calls`, both run under :meth:`_checked`, with a CRC of ``args``."""
        if self.check_calls:
            def both() -> Any:
                prepared = prepare()
                local(prepared)
                return prepared

            return self._checked(both, _digest(call, *args))
        try:
            prepared = prepare()
        except SapporoError as exc:
            raise _everywhere(exc) from None
        except Exception as exc:  # as _gather_errors words an error that is not sapporo's
            raise _everywhere(SapporoError(f"{type(exc).__name__}: {exc}")) from exc
        try:
            local(prepared)
        except Exception as exc:
            if self._held is None:  # the first failure is the one reported
                self._held = (call, exc)
        return prepared

    def _check_open(self) -> None:
        if self._closed:
            raise SapporoError("the library has been closed")

    @property
    def n_stored(self) -> int:
        """Number of j-addresses in use (highest address set + 1), over all ranks."""
        return self._n_stored

    @property
    def local(self) -> Any:
        """This rank's :class:`sapporo.Library` (its j-slice in local addresses)."""
        return self._lib

    @property
    def device_infos(self) -> list[Any]:
        """This rank's devices."""
        return self._lib.device_infos

    @property
    def ndev(self) -> int:
        """Number of devices of this rank."""
        return self._lib.ndev

    @property
    def kernel_seconds(self) -> float:
        """Kernel time of this rank's devices (with ``profiling=True``)."""
        return self._lib.kernel_seconds

    def launch_tables(self) -> list[Any]:
        """The launch tables of this rank's devices."""
        return self._lib.launch_tables()

    def set_launch_table(self, table: Any) -> None:
        """Use ``table`` on every rank's devices (collective)."""
        self._check_open()
        self._checked(lambda: self._lib.set_launch_table(table), _digest(repr(table)))

    def _free_comms(self) -> None:
        for name in ("_row_comm", "_col_comm", "comm"):
            c = getattr(self, name, None)
            if c is not None:
                with contextlib.suppress(Exception):  # MPI already finalised
                    c.Free()
                setattr(self, name, None)

    def close(self) -> None:
        """Release this rank's devices and the communicators (idempotent; call it on every
        rank)."""
        if self._closed:
            return
        if self._held is not None:
            call, exc = self._held
            log.warning("sapporo.parallel: rank %d: %s failed and no force call came after "
                        "it to report it: %s: %s", self.rank, call or "start_compute",
                        type(exc).__name__, exc)
            self._held = None
        self._closed = True
        self._pending = None
        if self._lib is not None:
            self._lib.close()
        self._free_comms()

    def __enter__(self) -> ParallelLibrary:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort, no MPI calls
        lib = getattr(self, "_lib", None)
        if lib is not None and not getattr(self, "_closed", True):
            with contextlib.suppress(Exception):
                lib.close()

    def set_j_particles(self, address: Any, index: Any, t: Any, mass: Any, x: Any, v: Any,
                        a: Any = None, jerk: Any = None, snap: Any = None,
                        crackle: Any = None, pop: Any = None, d5: Any = None) -> None:
        """Store j-particles (as :meth:`sapporo.Library.set_j_particles`); each rank keeps
        the addresses of its column. Every rank makes the call; no collective (but see
        :attr:`check_calls`): bad arguments raise at once on every rank, a failure of this
        rank's library is raised on every rank by the next force call's result."""
        self._check_open()

        def prepare() -> tuple[np.ndarray, dict[str, Any], int]:
            addr = validate.ints("address", _array("address", address), None, 0,
                                 self.max_address)
            n = addr.size
            if n == 0:
                return addr, {}, 0
            args = {"index": index, "t": t, "mass": mass, "x": x, "v": v, "a": a,
                    "jerk": jerk, "snap": snap, "crackle": crackle, "pop": pop, "d5": d5}
            local = {k: _rows_of(k, val, n, 0, n, k not in ("index", "t", "mass"))
                     for k, val in args.items()}
            for k, val in local.items():  # named by global position, whoever owns it
                bad = _non_finite_row(val)
                if bad is not None:
                    where = (f" at position {bad} (address {int(addr[bad])})"
                             if np.ndim(val) >= 1 and np.shape(val)[0] == n else "")
                    raise InputError(f"{k}: non-finite value{where}")
            return addr, local, int(addr.max()) + 1

        def store(prepared: tuple[np.ndarray, dict[str, Any], int]) -> None:
            addr, local, _ = prepared
            n = addr.size
            mine = np.flatnonzero(addr % self.cols == self.col)
            if mine.size == 0:
                return
            # this column's rows of every per-particle array (numbers, and the vector of a
            # single particle, as they are)
            sel = {k: np.asarray(val)[mine] if np.ndim(val) and not (
                n == 1 and np.shape(val) == (3,)) else val for k, val in local.items()}
            self._lib.set_j_particles(addr[mine] // self.cols, **sel)

        _, _, top = self._step("set_j_particles", prepare, store, address, index, t, mass, x,
                               v, a, jerk, snap, crackle, pop, d5)
        self._n_stored = max(self._n_stored, top)

    def reset(self) -> None:
        """Forget every j-particle (memory is kept)."""
        self._check_open()
        self._lib.reset()
        self._n_stored = 0

    def set_time(self, t: float) -> None:
        """Predict j-particles to time ``t`` before the next force call. No collective (but
        see :attr:`check_calls`): a failure is raised on every rank by the next force
        call's result."""
        self._check_open()
        self._step("set_time", lambda: t, self._lib.set_time, t)
        self._time = t  # for the CRC of start_compute's arguments

    def compute(self, x: Any, v: Any, index: Any, eps2: float, h2: Any = None, a: Any = None,
                nj: int | None = None, jerk: Any = None) -> Any:
        """Forces on i-particles from j-addresses [0, nj); blocking. Collective."""
        return self.start_compute(x, v, index, eps2, h2=h2, a=a, nj=nj, jerk=jerk).result()

    def start_compute(self, x: Any, v: Any, index: Any, eps2: float, h2: Any = None,
                      a: Any = None, nj: int | None = None, jerk: Any = None) -> PendingForce:
        """Start the forces (as :meth:`sapporo.Library.start_compute`). Every rank makes
        the call; the :meth:`result` of what it returns is the step's collective, and it
        raises on every rank what failed on any rank since the last result (here, or in
        :meth:`set_j_particles` and :meth:`set_time`). A bad shape of ``x`` raises at once,
        on every rank alike."""
        self._check_open()
        if self._pending is not None and not self._pending.done():
            with contextlib.suppress(SapporoError):  # an earlier one nobody waited for
                self._pending.result()

        def prepare() -> dict[str, Any]:
            """What sizes the gather: checked at once."""
            xa = _array("x", x)
            if xa.ndim == 1 and xa.shape == (3,):
                ni = 1
            elif xa.ndim == 2 and xa.shape[1] == 3:
                ni = xa.shape[0]
            else:
                raise InputError(f"x: expected shape (n, 3), got {xa.shape}")
            if ni == 0:
                raise InputError("x: no i-particles (ni = 0)")
            lo, hi = self.row * ni // self.rows, (self.row + 1) * ni // self.rows
            return {"ni": ni, "lo": lo, "hi": hi, "ngb": h2 is not None, "index": index,
                    "x": xa}

        def start(state: dict[str, Any]) -> None:
            """The rest of the checks and this rank's force call: its errors travel with
            the gather, so that an argument only one rank got wrong is raised by all."""
            if self._held is not None:  # an earlier call failed here: no use computing
                return
            ni, lo, hi, xa = state["ni"], state["lo"], state["hi"], state.pop("x")
            njg = self._n_stored if nj is None else validate.int_arg(
                "nj", nj, 0, self._n_stored, " (addresses stored)")
            if self.rows == 1:
                xi, vi, ii, hi2, ai, ji = x, v, index, h2, a, jerk
            else:
                for name, val in (("x", xa), ("v", v), ("a", a), ("h2", h2), ("jerk", jerk)):
                    row = _non_finite_row(val)
                    if row is not None:
                        raise InputError(f"{name}: non-finite value in row {row}")
                args = {"x": xa, "v": v, "index": index, "h2": h2, "a": a, "jerk": jerk}
                xi, vi, ii, hi2, ai, ji = (
                    _rows_of(name, val, ni, lo, hi, vector=name not in ("index", "h2"))
                    for name, val in args.items())
            if hi > lo:
                # j-addresses [0, njg) of this column, in local addresses
                nj_loc = min(max(0, -(-(njg - self.col) // self.cols)), self._lib.n_stored)
                t0 = time.perf_counter()
                if hi2 is None and hi - lo <= SYNC_LOCAL_MAX:
                    # computed now; a non-finite force is raised by result(), as when started
                    done: Future = Future()
                    try:
                        done.set_result(self._lib.compute(xi, vi, ii, eps2, a=ai, nj=nj_loc,
                                                          jerk=ji))
                    except NonFiniteError as exc:
                        done.set_exception(exc)
                    state["local"] = done  # not after another error (held by _step)
                else:
                    state["local"] = self._lib.start_compute(xi, vi, ii, eps2, h2=hi2, a=ai,
                                                             nj=nj_loc, jerk=ji)
                self.compute_seconds += time.perf_counter() - t0

        # errors of this call carry no call name: the call is the one that reports them
        state = self._step("", prepare, start, x, v, index, eps2, h2, a, nj, jerk,
                           self._time, self._n_stored)
        state.pop("x", None)
        pending = PendingForce(threading.RLock(), lambda: self._finish(state))
        self._pending = pending
        return pending

    def _ncols(self) -> int:
        """Doubles per i-particle in the exchanged partial results: the library's result
        rows (``layout.h``: acc, pot, jerk, snap, crackle, nearest neighbour) and the
        neighbour count."""
        return layout.nco(self.order) + 1

    def _pack(self, res: Any, n: int) -> np.ndarray:
        """(n, K) partial results: the rows of ``res`` (None: no force, no neighbour) and
        the neighbour counts, per i-particle."""
        buf = np.zeros((n, self._ncols()))
        buf[:, layout.OC_NNID] = -1.0
        buf[:, layout.OC_NNR2] = np.inf
        if res is None:
            return buf
        buf[:, :-1] = res._rows.T
        if res.neighbour_counts is not None:
            buf[:, -1] = res.neighbour_counts
        return buf

    def _combine(self, parts: np.ndarray) -> np.ndarray:
        """Combine (ncols, n, K) partials of a row as a library combines its devices (the
        native engine's ``combine``: one order of the sums, the nearest neighbour of the
        smallest r^2, ties to the lower id; the neighbour counts summed)."""
        from sapporo.core import engine

        k, n = parts.shape[2], parts.shape[1]
        out = np.empty((k, n))
        engine.load().combine(np.ascontiguousarray(parts.transpose(0, 2, 1)), out)
        return out.T

    def _inline(self, ni: int) -> bool:
        """Whether the partials of a block of ``ni`` i-particles travel inside the fixed-size
        first exchange (every row's piece fits its room), as the sender of a header with
        this ``ni`` decided."""
        return -(-ni // self.rows) <= self._room

    def _wait(self, requests: list[Any]) -> None:
        """Wait for point-to-point messages (their time counts as communication)."""
        t0 = time.perf_counter()
        self._MPI.Request.Waitall(requests)
        self.comm_seconds += time.perf_counter() - t0

    def _drop(self, comm: Any, senders: list[int], sends: list[Any]) -> None:
        """A call that raises: receive and drop the messages of partials that ``senders``
        posted, whatever their size, and finish this rank's own, so that no message is left
        to match a later call's."""
        t0 = time.perf_counter()
        status = self._MPI.Status()
        for q in senders:
            msg = comm.Mprobe(source=q, tag=_TAG, status=status)
            msg.Recv([np.empty(status.Get_count(self._MPI.DOUBLE)), self._MPI.DOUBLE])
        self.comm_seconds += time.perf_counter() - t0
        self._wait(sends)

    def _exchange(self, comm: Any, heads: np.ndarray, part: np.ndarray | None,
                  sends: list[Any], ranks: range) -> tuple[np.ndarray, np.ndarray | None]:
        """The first exchange of a force call along ``comm`` (whose ranks are ``ranks`` of
        the library's, in order), an allgather of a fixed size: this rank's headers
        (``heads``) and its partials when they travel inline (``part``; None: ``sends``
        carry them). Returns every rank's header (one row per rank of the library's) and
        the parts gathered, one row per rank of ``comm``; None when the headers disagree or
        show a failure, after the messages of partials were received and dropped."""
        width = heads.size
        fixed = np.empty(width + self._room * self._ncols())
        fixed[:width] = heads.ravel()
        if part is not None:
            fixed[width:width + part.size] = part.ravel()
        got = np.empty((len(ranks), fixed.size))
        self._timed(comm.Allgather, fixed, got)
        every = got[:, :width].reshape(-1, _HEAD)
        if self._agree(every):
            return every, got[:, width:]
        me = comm.Get_rank()  # those that sent messages, as their own headers decided
        self._drop(comm, [q for q, rank in enumerate(ranks)
                          if q != me and not self._inline(int(every[rank, 1]))], sends)
        return every, None

    @staticmethod
    def _agree(heads: np.ndarray) -> bool:
        """Whether the headers (one row per rank) show no failure and the same shapes."""
        rows = heads.tolist()  # a few values a rank: plain Python is the quickest
        first = rows[0][1:]
        return not any(h[0] for h in rows) and all(h[1:] == first for h in rows)

    def _row(self, head: tuple[float, ...], part: np.ndarray) -> tuple[np.ndarray, Any]:
        """Combine the row's partials (``part``: this rank's, (n, K)) in column order. One
        allgather of a fixed size carries the headers and, when they fit, the partials;
        larger partials are sent to each rank of the row before it, all of them or (a large
        block, see :attr:`scatter_min_bytes`) the slice of the i-particles that rank combines,
        the combined slices then gathered. Returns the row's headers (cols, _HEAD) and the
        combined (n, K) rows, None when the headers disagree or show a failure."""
        c, (n, k), me, comm = self.cols, part.shape, self.col, self._row_comm
        inline = self._inline(int(head[1]))
        slices = not inline and c > 1 and (c - 2) * n * k * 8 >= self.scatter_min_bytes
        bounds = [q * n // c for q in range(c + 1)]
        others = [q for q in range(c) if q != me]
        # messages are posted first: they travel while the headers are gathered
        sends = [] if inline else [
            comm.Isend(part[bounds[q]:bounds[q + 1]] if slices else part, dest=q, tag=_TAG)
            for q in others]
        heads, got = self._exchange(comm, np.array(head), part if inline else None, sends,
                                    range(c))
        if got is None:
            return heads, None
        if inline:
            return heads, self._combine(got[:, :n * k].reshape(c, n, k))
        lo, hi = (bounds[me], bounds[me + 1]) if slices else (0, n)
        parts = np.empty((c, hi - lo, k))
        parts[me] = part[lo:hi]
        self._wait([comm.Irecv(parts[q], source=q, tag=_TAG) for q in others] + sends)
        mine = self._combine(parts)
        if not slices:
            return heads, mine
        full = np.empty((n, k))
        self._timed(comm.Allgatherv, mine.ravel(),
                    [full, ([(bounds[q + 1] - bounds[q]) * k for q in range(c)],
                            [b * k for b in bounds[:-1]]), self._MPI.DOUBLE])
        return heads, full

    def _column(self, row_heads: np.ndarray, mine: Any, ni: int, lo: int,
                hi: int) -> tuple[np.ndarray, Any]:
        """Gather the rows' combined pieces along the column, as :meth:`_row` does: one
        allgather of a fixed size with the headers of the whole row (so that every rank
        then holds every rank's) and the piece when it fits, else the pieces as messages.
        Returns every rank's header (size, _HEAD) and the (ni, K) rows, None when the
        headers disagree or show a failure."""
        r, me, k, comm = self.rows, self.row, self._ncols(), self._col_comm
        piece = np.zeros((hi - lo, k)) if mine is None else np.ascontiguousarray(mine)
        inline = self._inline(ni)
        others = [q for q in range(r) if q != me]
        sends = [] if inline else [comm.Isend(piece, dest=q, tag=_TAG) for q in others]
        heads, got = self._exchange(comm, row_heads, piece if inline else None, sends,
                                    range(self.col, self.size, self.cols))
        if got is None:
            return heads, None
        starts = [q * ni // r for q in range(r + 1)]
        full = np.empty((ni, k))
        if inline:
            for q in range(r):
                rows_q = full[starts[q]:starts[q + 1]]
                rows_q[...] = got[q, :rows_q.size].reshape(-1, k)
        else:
            full[lo:hi] = piece
            self._wait([comm.Irecv(full[starts[q]:starts[q + 1]], source=q, tag=_TAG)
                        for q in others] + sends)
        return heads, full

    def _verdict(self, heads: np.ndarray, error: BaseException | None, call: str) -> None:
        """Raise, on every rank alike, what the ranks' headers (one row per rank, which
        disagree or show a failure) say: ranks that made the call with different shapes, or
        the failure of a rank."""
        for field, what, show, why in _HEADER_CHECKS:
            values = heads[:, field]
            if (values != values[0]).any():
                raise _everywhere(InputError(f"ParallelLibrary.compute: the ranks {what}: "
                                             f"{_by_value(values, show)} ({why})")) from error
        self._gather_errors(error, call)

    def _finish(self, state: dict[str, Any]) -> Any:
        """Collect the local partials, combine them along the rows, gather the rows."""
        ni, lo, hi, ngb = state["ni"], state["lo"], state["hi"], state["ngb"]
        n = hi - lo
        error: BaseException | None = None
        res = None
        t0 = time.perf_counter()
        try:
            if "local" in state:
                res = state["local"].result()
        except Exception as exc:
            error = exc
        self.compute_seconds += time.perf_counter() - t0
        # the first failure of this rank since the last gather (this call's, or one held)
        call = ""
        if self._held is not None:
            (call, error), self._held = self._held, None
        # 1. along the row: my header and the partials of my i-rows, combined in column order
        head = (float(error is not None), float(ni), float(ngb), float(self.scatter_min_bytes))
        heads, full = self._row(head, self._pack(None if error else res, n))
        # 2. along the column: the headers of my row and the combined rows
        if self.rows > 1:
            heads, full = self._column(heads, full, ni, lo, hi)
        if full is None:  # every rank holds every rank's header: all raise the same
            self._verdict(heads, error, call)
        # 3. neighbour lists: merged along the row, gathered along the column
        lens = lists = None
        if ngb:
            mine = []  # this rank's lists: the ids its library kept
            if res is not None:
                counts, ids = res._lists
                mine.append((np.minimum(counts, ids.shape[1]), ids.astype(np.int64)))
            here = _merge_lists(mine, n, self.nb_capacity)
            along = self._timed(self._row_comm.allgather, here)
            row_lists = _merge_lists(along, n, self.nb_capacity)
            if self.rows > 1:
                pieces = self._timed(self._col_comm.allgather, row_lists)
                width = max(p[1].shape[1] for p in pieces)
                lens = np.concatenate([p[0] for p in pieces])
                lists = np.concatenate([np.pad(p[1], ((0, 0), (0, width - p[1].shape[1])),
                                               constant_values=_NO_ID) for p in pieces])
            else:
                lens, lists = row_lists
        return self._result(full, ngb, lens, lists, state["index"])

    def _result(self, full: np.ndarray, ngb: bool, lens: Any, lists: Any, index: Any) -> Any:
        """The :class:`~sapporo.ForceResult` of the combined (ni, K) rows, as the local
        library reads its own; a force that is not finite raises on every rank."""
        counts = full[:, -1].astype(np.int64) if ngb else None
        try:
            return self._lib._result(np.ascontiguousarray(full[:, :-1].T),
                                     np.asarray(index).reshape(-1), counts,
                                     (lens, lists) if ngb else None, checked=False)
        except NonFiniteError as exc:
            raise _everywhere(exc) from None


def under_mpi() -> bool:
    """True when this process is one of several ranks started by an MPI launcher."""
    return launcher_size() > 1


class CommandRun:
    """One run of a command under ``mpiexec`` (see :func:`run_cli`)."""

    def __init__(self, decomposition: str | None):
        self.world = _mpi().COMM_WORLD
        self.rank = self.world.Get_rank()
        self.decomposition = (decomposition or config.from_environment().decomposition
                              or "auto")
        self.met = False  # this rank took part in the meeting before the library opens

    def _meet(self, failed: bool) -> list[bool]:
        """Collective on the world: which ranks failed before opening the library."""
        self.met = True
        return self.world.allgather(failed)

    def factory(self, **kwargs: Any) -> ParallelLibrary:
        """Make the run's :class:`ParallelLibrary` once every rank got this far."""
        failed = self._meet(False)
        if any(failed):
            raise _everywhere(SapporoError(f"rank {failed.index(True)} failed before the "
                                           "library opened"))
        return ParallelLibrary(decomposition=self.decomposition, **kwargs)


def library_options(args: Any) -> dict[str, Any]:
    """Options a command adds to its library's under ``mpiexec`` (``{}`` otherwise): the
    :class:`ParallelLibrary` factory of the run :func:`run_cli` started."""
    run = getattr(args, "_mpi_run", None)
    return {} if run is None else {"library_factory": run.factory}


def run_cli(args: Any, body: Any, name: str) -> int:
    """Run ``body(args)`` on every rank of ``mpiexec``: rank 0 writes ``args.out`` and
    talks; the other ranks compute the same and write into a private temporary folder,
    removed at the end (with ``SAPPORO_RANK_OUTPUT=1``: into ``<out>.rank<r>``, kept).
    Errors raised on every rank alike are reported by rank 0; a rank's failure before the
    library opens ends the run on every rank; any other failure of a single rank aborts the
    job (``MPI_Abort``). Returns the exit status (2 for bad input, 1 for other errors)."""

    run = CommandRun(getattr(args, "decomposition", None))
    args._mpi_run = run
    root = run.rank == 0
    err = sys.stderr
    tmp = None
    if not root:
        if config.from_environment().rank_output:
            args.out = f"{args.out}.rank{run.rank}"  # kept, to compare the ranks' runs
        else:
            tmp = tempfile.TemporaryDirectory(prefix=f"sapporo-rank{run.rank}-")
            args.out = tmp.name
        args.quiet, args.no_plots = True, True
    try:
        return int(body(args) or 0)
    except Exception as exc:
        code = 2 if isinstance(exc, (InputError, ConfigError)) else 1
        text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, SapporoError) else str(exc)
        if not run.met:  # failed before the library: tell the others, who wait there
            failed = run._meet(True)
            if root or not failed[0]:
                err.write(f"{name}: error" + (f" on rank {run.rank}" if not root else "")
                          + f": {text}\n")
            return code
        if getattr(exc, "all_ranks", False):  # raised on every rank alike
            if root:
                err.write(f"{name}: error: {text}\n")
            return code
        # the verdict first, in one write: an abort may cut off what the launcher has not
        # forwarded yet (seen with MPICH's Hydra on a loaded machine)
        err.write(f"{name}: error on rank {run.rank} of {run.world.Get_size()}: "
                  f"{text}\n{name}: aborting every rank\n")
        err.flush()
        if not isinstance(exc, (SapporoError, OSError)):
            traceback.print_exc(file=err)
            err.flush()
        time.sleep(ABORT_GRACE)
        run.world.Abort(code)
        return code  # pragma: no cover - Abort does not return
    finally:
        if tmp is not None:
            tmp.cleanup()


def run_report(lib: Any) -> dict[str, Any]:
    """The parallel part of ``sapporo run``'s summary (``{}`` for a one-process library)."""
    if not isinstance(lib, ParallelLibrary):
        return {}
    return {"mpi_ranks": lib.size, "decomposition": lib.decomposition,
            "grid": [lib.rows, lib.cols], "communication_seconds": lib.comm_seconds,
            "collectives": lib.collectives}


def progress_note(lib: Any) -> str:
    """The parallel part of ``sapporo run``'s progress line (``""`` for one process)."""
    if not isinstance(lib, ParallelLibrary):
        return ""
    return f"  P = {lib.size} ({lib.decomposition}), comm {lib.comm_seconds:.1f} s"
