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


def find_mpifort() -> str | None:
    """The MPI Fortran compiler: ``$MPIFC``, else ``mpifort`` or ``mpif90`` beside this
    Python, else on PATH. The mpich wheel has none; Debian's ``libmpich-dev`` has both."""
    if os.environ.get("MPIFC"):
        return shutil.which(os.environ["MPIFC"].split()[0])
    for name in ("mpifort", "mpif90"):
        beside = Path(sys.executable).parent / name
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    for name in ("mpifort", "mpif90"):
        if path := shutil.which(name):
            return path
    return None


def mpiexec_for(compiler: str) -> str | None:
    """The launcher of the MPI that ``compiler`` belongs to, found beside the compiler's
    real file: ``mpiexec.<suffix>`` where Debian's alternatives name it ``mpifort.<suffix>``
    (``mpifort.mpich`` -> ``mpiexec.mpich``, whatever ``/usr/bin/mpiexec`` points to), else
    ``mpiexec``; None when there is none."""
    real = Path(os.path.realpath(compiler))
    suffix = real.name.partition(".")[2]
    for name in ([f"mpiexec.{suffix}"] if suffix else []) + ["mpiexec"]:
        path = real.parent / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None
