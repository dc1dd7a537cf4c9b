"""Run under mpiexec by test_parallel.py: errors on one rank end the call on every rank.

usage: mpiexec -n P python mpi_errors.py MODE OUTDIR

Caught modes write, on every rank, into OUTDIR/rank<r>.txt, ``CAUGHT rank <r> <call>
<Class>: <message>`` for each failing call (``NOERROR rank <r> <call>`` for an attempted call
that raised nothing) and then ``OK rank <r> <checksum>`` after a good force call (the ranks
are still in step). Mode ``uncaught`` lets the error propagate: every rank must exit with it.
``SAPPORO_MPI_CHECK`` is taken from the environment.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

from sapporo.errors import BackendError, SapporoError
from sapporo.parallel import ParallelLibrary
from sapporo.reference import plummer

WORLD = MPI.COMM_WORLD
RANK = WORLD.rank
N = 64


class _LostDevice:
    """Stands for a library whose device fails while computing (``failing="compute"``) or
    in another call (``"set_j_particles"``, ``"set_time"``)."""

    def __init__(self, lib, failing: str = "compute"):
        self._lib = lib
        self._failing = failing

    def __getattr__(self, name):
        if name == self._failing:
            def lost(*args, **kwargs):
                raise BackendError("device lost (simulated)")

            return lost
        return getattr(self._lib, name)

    def start_compute(self, *args, **kwargs):
        if self._failing != "compute":
            return self._lib.start_compute(*args, **kwargs)

        class Pending:
            def result(self):
                raise BackendError("device lost (simulated)")

        return Pending()


def say(line: str) -> None:
    with open(f"{sys.argv[2]}/rank{RANK}.txt", "a") as fh:
        fh.write(line + "\n")


def attempt(what: str, fn) -> None:
    try:
        fn()
    except SapporoError as exc:
        say(f"CAUGHT rank {RANK} {what} {type(exc).__name__}: {exc}")
    else:
        say(f"NOERROR rank {RANK} {what}")


def main() -> None:
    mode = sys.argv[1]
    x, v, m = plummer(N, seed=1)
    ids = np.arange(N)
    one = 1  # the rank that goes wrong
    if mode == "open":  # a device index that exists on no rank, given on one rank only
        attempt("open", lambda: ParallelLibrary(order=4, devices=[99] if RANK == one else None))
        # devices may differ between ranks (here: an explicit [0] on one rank)
        ParallelLibrary(order=4, devices=[0] if RANK == one else None).close()
        # other options may not
        attempt("options", lambda: ParallelLibrary(order=4 if RANK != one else 6))
    if mode == "checkdiffer":  # the debug setting on one rank only
        saved = os.environ.get("SAPPORO_MPI_CHECK")
        if RANK == one:
            os.environ["SAPPORO_MPI_CHECK"] = "0" if saved == "1" else "1"
        attempt("open", lambda: ParallelLibrary(order=4))
        if saved is None:
            os.environ.pop("SAPPORO_MPI_CHECK", None)
        else:
            os.environ["SAPPORO_MPI_CHECK"] = saved
    pl = ParallelLibrary(decomposition="2d" if mode.endswith("2d") else "j", order=4,
                         precision="double")
    if mode.endswith("scatter"):  # rows combined by slices even when small
        pl.scatter_min_bytes = 0
    if "msg" in mode:  # partials sent as messages, none in the first exchange
        pl._room = 0
    pl.set_j_particles(np.arange(N), ids, 0.0, m, x, v)
    pl.set_time(0.0)
    xi = x.copy()
    if mode.startswith("nan"):
        if RANK == one:
            xi[3, 1] = np.nan
        attempt("compute", lambda: pl.compute(xi, v, ids, 1e-4))
    elif mode == "mismatch":
        attempt("compute", lambda: pl.compute(x, v, ids, 1e-4 if RANK != one else 2e-4))
        attempt("set_time", lambda: pl.set_time(0.0 if RANK != one else 0.5))
    elif mode == "jnan":  # every rank passes it; only the owner of address 5 sees it
        mm = m.copy()
        mm[5] = np.inf
        attempt("set_j", lambda: pl.set_j_particles(np.arange(N), ids, 0.0, mm, x, v))
    elif mode == "shape":
        attempt("set_j", lambda: pl.set_j_particles(np.arange(N), ids, 0.0, m, x[:-1], v))
        attempt("compute", lambda: pl.compute(x, v[:-2], ids, 1e-4))
    elif mode.startswith("lost"):
        if RANK == one:
            pl._lib = _LostDevice(pl._lib)
        attempt("compute", lambda: pl.compute(x, v, ids, 1e-4))
        if RANK == one:
            pl._lib = pl._lib._lib
    elif mode in ("jlost", "tlost"):  # rank 1's own library fails in a call of no collective
        if RANK == one:
            pl._lib = _LostDevice(pl._lib, "set_j_particles" if mode == "jlost" else "set_time")
        attempt("set_j", lambda: pl.set_j_particles(np.arange(N), ids, 0.0, m, x, v))
        attempt("set_time", lambda: pl.set_time(0.0))
        attempt("compute", lambda: pl.compute(x, v, ids, 1e-4))
        if RANK == one:
            pl._lib = pl._lib._lib
        pl.set_j_particles(np.arange(N), ids, 0.0, m, x, v)
        pl.set_time(0.0)
    elif mode == "ragged":  # no array at all: raised at once, before any collective
        attempt("set_j", lambda: pl.set_j_particles([[0, 1], [2]], [0, 1], 0.0, m[:2], x[:2],
                                                    v[:2]))
        attempt("compute", lambda: pl.compute([[0.0, 0.0, 0.0], [1.0, 1.0]], v[:2], ids[:2],
                                              1e-4))
    elif mode == "unreported":  # a held failure and no force call after it: a warning
        if RANK == one:
            pl._lib = _LostDevice(pl._lib, "set_j_particles")
        pl.set_j_particles(np.arange(N), ids, 0.0, m, x, v)
        pl.close()
        say(f"CLOSED rank {RANK}")
        return
    elif mode == "overflow":  # each rank's partial is finite, their sum is not
        big = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
        pl.set_j_particles([0, 1], [100, 101], 0.0, [1e308, 1e308], big, big * 0)
        attempt("compute", lambda: pl.compute(np.zeros((1, 3)), np.zeros((1, 3)), [5], 0.0))
        pl.set_j_particles([0, 1], [100, 101], 0.0, [0.0, 0.0], big, big * 0)
    elif mode == "uncaught":
        if RANK == one:
            xi[0, 0] = np.inf
        try:
            pl.compute(xi, v, ids, 1e-4)
        except SapporoError as exc:  # noted where it is raised, then left uncaught
            say(f"RAISED rank {RANK}: {type(exc).__name__}: {exc}")
            raise
        say(f"UNREACHED rank {RANK}")
    f = pl.compute(x, v, ids, 1e-4)
    say(f"OK rank {RANK} {float(np.abs(f.acc).sum())!r}")
    pl.close()


if __name__ == "__main__":
    main()
