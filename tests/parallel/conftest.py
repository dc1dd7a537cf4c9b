"""Fixtures of the MPI tests: ``mpiexec`` skips (with the reason) without mpi4py or mpiexec."""

from __future__ import annotations

import importlib.util

import pytest
from mpi_launch import find_mpiexec


@pytest.fixture(scope="session")
def mpiexec() -> str:
    """The launcher's path; skips where mpi4py or mpiexec is missing."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed: pip install -e '.[mpi]'")
    exe = find_mpiexec()
    if exe is None:
        pytest.skip("no mpiexec found: pip install -e '.[mpi]' (the mpich wheel has one)")
    return exe
