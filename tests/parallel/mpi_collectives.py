"""Run under mpiexec by test_collectives.py: count the MPI calls of each kind of block step.

usage: mpiexec -n P python mpi_collectives.py OUT.json

The library's communicators are wrapped in objects that record every method called on them
(collectives, and the point-to-point calls of blocks whose partials travel as messages),
independently of the library's own ``collectives`` counter, which is reported beside.
Rank 0 writes, per grid and kind of step, the calls of each step (three steps of each kind)
and their names. ``SAPPORO_MPI_CHECK`` is taken from the environment.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from sapporo.parallel import ParallelLibrary
from sapporo.reference import plummer

WORLD = MPI.COMM_WORLD
N = 256


class Counting:
    """A communicator whose method calls are recorded in ``calls``."""

    def __init__(self, comm, calls: list[str]):
        self._comm = comm
        self._calls = calls

    def __getattr__(self, name: str):
        attr = getattr(self._comm, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self._calls.append(name)
            return attr(*args, **kwargs)

        return call


def steps(decomposition: str) -> dict:
    x, v, m = plummer(N, seed=2)
    ids = np.arange(N)
    rng = np.random.default_rng(4)
    out: dict = {}
    with ParallelLibrary(decomposition=decomposition, order=4, precision="double") as pl:
        pl.set_j_particles(ids, ids, 0.0, m, x, v)
        pl.set_time(0.0)
        pl.compute(x[:8], v[:8], ids[:8], 1e-4)  # build and warm
        calls: list[str] = []
        pl.comm = Counting(pl.comm, calls)
        pl._row_comm = Counting(pl._row_comm, calls)
        pl._col_comm = Counting(pl._col_comm, calls)
        t = 0.0

        def block(ni: int, how: str) -> tuple[int, int, list[str]]:
            nonlocal t
            sel = np.sort(rng.choice(N, size=ni, replace=False))
            t += 2.0**-10
            calls.clear()
            before = pl.collectives
            pl.set_j_particles(sel, ids[sel], t, m[sel], x[sel], v[sel])
            pl.set_time(t)
            if how == "started":
                f = pl.start_compute(x[sel], v[sel], ids[sel], 1e-4).result()
            elif how == "lists":
                f = pl.compute(x[sel], v[sel], ids[sel], 1e-4, h2=0.01)
            else:
                f = pl.compute(x[sel], v[sel], ids[sel], 1e-4)
            assert f.ni == ni and np.isfinite(f.acc).all()
            return len(calls), pl.collectives - before, list(calls)

        for name, ni, how in (("ni=1", 1, "compute"), ("ni=16", 16, "compute"),
                              ("ni=200", 200, "compute"), ("started", 16, "started"),
                              ("lists", 16, "lists")):
            out[name] = [block(ni, how) for _ in range(3)]
        # rows combined by slices (the slices sent as messages, then an allgather), the
        # partials sent as messages even where they would fit in the first exchange
        pl.scatter_min_bytes = 0
        pl._room = 0
        out["by slices"] = [block(64, "compute") for _ in range(3)]
        grid = [pl.rows, pl.cols]
        check = pl.check_calls
    return {"grid": grid, "check": check, "steps": out}


def main() -> None:
    result = {"size": WORLD.size, "runs": {dec: steps(dec) for dec in ("j", "2d")}}
    if WORLD.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
