"""Shared code of the MPI tests: find mpiexec and mpi4py, run a script on P ranks with a timeout.

The tests skip (with the reason) where mpi4py or an ``mpiexec`` is missing; install them
with ``pip install -e '.[mpi]'`` (the mpi4py and mpich wheels). MPICH's launcher runs more
ranks than cores without any flag.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: seconds one mpiexec launch may take before the test fails (a hang is a failure)
TIMEOUT = 120


def find_mpiexec() -> str | None:
    """``mpiexec`` beside this Python (the mpich wheel's), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpiexec")


def mpi_env(**extra: str) -> dict[str, str]:
    """The environment of a launch: no SAPPORO_DEVICES (each rank picks its own device),
    the backend's threads shared fairly between oversubscribed ranks."""
    env = {k: v for k, v in os.environ.items() if k != "SAPPORO_DEVICES"}
    env.update(extra)
    return env


def launch(mpiexec: str, nranks: int, args: list[str], cwd: Path | None = None,
           timeout: float = TIMEOUT, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess:
    """``mpiexec -n nranks <args>``; a launch that outlives ``timeout`` fails the test."""
    cmd = [mpiexec, "-n", str(nranks), *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=env or mpi_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s (a hang?)\n"
                    f"stdout:\n{exc.stdout}\nstderr:\n{exc.stderr}")


def find_mpicc() -> str | None:
    """The MPI C compiler: ``$MPICC``, else beside this Python (the mpich wheel's), else on
    PATH."""
    if os.environ.get("MPICC"):
        return shutil.which(os.environ["MPICC"].split()[0])
    beside = Path(sys.executable).parent / "mpicc"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpicc")
