"""Run under mpiexec by test_shapes.py: ranks that make a force call with different shapes.

usage: mpiexec -n P python mpi_shapes.py MODE OUTDIR DECOMPOSITION

Every rank writes into OUTDIR/rank<r>.txt, for each case, ``CAUGHT rank <r> <case>
<seconds> <Class>: <message>`` (``NOERROR rank <r> <case>`` if the call raised nothing), then
``INSTEP rank <r> <case> <bool>``: whether a good call right after it gave bitwise the result
of the same call made before any case (the ranks are in step, no message left over). At the
end ``OK rank <r> <checksum>``. MODE ``ni`` runs the case ``ni`` only (rank 1 passes 7
i-particles, the others 8); MODE ``all`` every case. ``SAPPORO_MPI_CHECK`` is taken from the
environment (the tests turn it off).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

from sapporo.errors import SapporoError
from sapporo.parallel import ParallelLibrary
from sapporo.reference import plummer

WORLD = MPI.COMM_WORLD
RANK = WORLD.rank
N = 512
#: a block whose partials do not fit in the first exchange: sent as messages
LARGE = 300


def say(line: str) -> None:
    with open(f"{sys.argv[2]}/rank{RANK}.txt", "a") as fh:
        fh.write(line + "\n")


def main() -> None:
    mode, dec = sys.argv[1], sys.argv[3]
    x, v, m = plummer(N, seed=1)
    ids = np.arange(N)
    eps2 = 1e-4
    half = RANK >= WORLD.size // 2  # the last row of a 2 x 2 grid
    # case: (ni on this rank, h2 on this rank, scatter_min_bytes on this rank or None)
    cases = {
        "ni": (7 if RANK == 1 else 8, None, None),
        "half": (7 if half else 8, None, None),  # ranks agree within each row of 2 x 2
        "large": (8 if RANK == 1 else LARGE, None, None),  # one rank's partials inline
        "large2": (LARGE + 1 if RANK == 1 else LARGE, None, None),  # every rank's sent
        "largehalf": (LARGE + 1 if half else LARGE, None, None),
        "lists": (8, 0.01 if RANK == 1 else None, None),
        "scatter": (LARGE, None, 0 if RANK == 1 else None),
    }
    if mode == "ni":
        cases = {"ni": cases["ni"]}
    with ParallelLibrary(decomposition=dec, order=4, precision="double") as pl:
        pl.set_j_particles(ids, ids, 0.0, m, x, v)
        pl.set_time(0.0)
        default_smb = pl.scatter_min_bytes

        def good() -> list[bytes]:
            out = []
            for ni in (8, LARGE):
                f = pl.compute(x[:ni], v[:ni], ids[:ni], eps2)
                out.append(f.acc.tobytes() + f.pot.tobytes() + f.nn_index.tobytes())
            return out

        before = good()
        for name, (ni, h2, smb) in cases.items():
            if smb is not None:
                pl.scatter_min_bytes = smb
            t0 = time.perf_counter()
            try:
                pl.compute(x[:ni], v[:ni], ids[:ni], eps2, h2=h2)
            except SapporoError as exc:
                say(f"CAUGHT rank {RANK} {name} {time.perf_counter() - t0:.3f} "
                    f"{type(exc).__name__}: {exc}")
            else:
                say(f"NOERROR rank {RANK} {name}")
            pl.scatter_min_bytes = default_smb
            say(f"INSTEP rank {RANK} {name} {good() == before}")
        f = pl.compute(x, v, ids, eps2)
        say(f"OK rank {RANK} {float(np.abs(f.acc).sum())!r} grid {pl.rows}x{pl.cols}")


if __name__ == "__main__":
    main()
