"""Run under mpiexec by test_parallel_run.py: sapporo.parallel.run_cli with a command body
that fails on rank 1 only, after the library opened.

usage: mpiexec -n P python mpi_cli.py OUTDIR
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from sapporo.parallel import library as parallel


def body(args: argparse.Namespace) -> int:
    opts = parallel.library_options(args)
    lib = opts["library_factory"](order=4, precision="double")
    x = np.eye(3)
    lib.set_j_particles(np.arange(3), np.arange(3), 0.0, np.ones(3), x, x)
    if lib.rank == 1:
        raise RuntimeError("a failure of rank 1 alone (simulated)")
    lib.set_time(0.0)  # the other ranks wait here for rank 1, which never comes
    lib.compute(x, x, np.arange(3), 1e-4)
    return 0


if __name__ == "__main__":
    ns = argparse.Namespace(out=sys.argv[1], quiet=False, no_plots=False, decomposition="j")
    sys.exit(parallel.run_cli(ns, body, "mpi_cli"))
