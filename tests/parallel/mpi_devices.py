"""Run under mpiexec by test_parallel.py: which device each rank's library opened.

usage: mpiexec -n P python mpi_devices.py   (prints "RANK r node n device d launcher l")
"""

from __future__ import annotations

import sys

from sapporo.parallel.library import ParallelLibrary, launcher_device

with ParallelLibrary(order=4) as pl:
    # one write per line: the launcher interleaves the ranks' writes
    sys.stdout.write(f"RANK {pl.rank} node {pl.node_rank} device {pl.device_infos[0].index} "
                     f"launcher {launcher_device()}\n")
    sys.stdout.flush()
