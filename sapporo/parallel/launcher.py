"""What an MPI launcher told this process, read from its environment; imports nothing.

The C API's open and the OpenCL backend read the job's number of ranks and each rank's index
on its node before any MPI library is loaded (a GRAPE-6 client calls MPI itself), so this
lives apart from :mod:`sapporo.parallel.library` and mpi4py.
"""

from __future__ import annotations

import os

__all__ = ["LOCAL_RANK_VARIABLES", "SIZE_VARIABLES", "launcher_device", "launcher_local_rank",
           "launcher_size"]

#: environment variables that hold the number of ranks of the job, set by the launchers of
#: MPICH (Hydra, also Intel MPI and Slurm's PMI), Open MPI and MVAPICH
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
#: ... and the rank's index on its node
LOCAL_RANK_VARIABLES = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")


def _env_int(names: tuple[str, ...]) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                continue
    return None


def launcher_size() -> int:
    """Number of ranks the MPI launcher started (1 outside ``mpiexec``)."""
    size = _env_int(SIZE_VARIABLES)
    return size if size is not None and size > 0 else 1


def launcher_local_rank() -> int | None:
    """This process's index among the ranks on its node (None when unknown)."""
    return _env_int(LOCAL_RANK_VARIABLES)


def launcher_device(backend: str | None = None) -> int | None:
    """The device a rank of a multi-rank launch takes by default: its rank on the node
    modulo the backend's device count (None outside a launcher, or with one rank). The
    C API's open uses it when neither SAPPORO_DEVICES nor a sapporo2.config names devices."""
    local = launcher_local_rank()
    if local is None or launcher_size() <= 1:
        return None
    from sapporo.backend import get_backend

    return local % max(1, len(get_backend(backend).devices()))
