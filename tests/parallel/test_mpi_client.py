"""MPI-parallel C and Fortran clients of the GRAPE-6 API (tests/parallel/mpi_client.c and
mpi_client.f90): each rank opens the library, stores its own j-slice and reduces the forces
with MPI; the result equals the float64 reference. The C client skips without an MPI C
compiler (the mpich wheel has ``mpicc``), the Fortran one without an MPI Fortran compiler
(``apt-get install libmpich-dev``: ``mpifort``, run with that MPI's own ``mpiexec``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import HERE, find_mpicc, find_mpiexec, find_mpifort, launch, mpi_env, mpiexec_for

from sapporo.reference import forces, plummer, relative_vector_error


@pytest.fixture(scope="module")
def capi_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``sapporo capi build`` into a folder of this module (libsapporo.so and libg6.so)."""
    prefix = tmp_path_factory.mktemp("capi-mpi")
    proc = subprocess.run([sys.executable, "-m", "sapporo.cli", "capi", "build", "--prefix",
                           str(prefix)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"sapporo capi build failed:\n{proc.stdout}{proc.stderr}"
    return prefix


def write_ic(path: Path, x: np.ndarray, v: np.ndarray, m: np.ndarray) -> None:
    """The clients' initial conditions: N, then "m x y z vx vy vz" per particle."""
    path.write_text(f"{len(m)}\n" + "".join(
        " ".join(repr(float(q)) for q in (m[i], *x[i], *v[i])) + "\n" for i in range(len(m))))


def client_env() -> dict[str, str]:
    """A client's environment: float64 forces, no help to find Python or sapporo."""
    return {k: val for k, val in mpi_env(SAPPORO_PRECISION="double").items()
            if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}


@pytest.fixture(scope="module")
def client(request: pytest.FixtureRequest) -> Path:
    mpicc = find_mpicc()
    if mpicc is None:
        pytest.skip("no MPI C compiler (mpicc): pip install -e '.[mpi]' (the mpich wheel has "
                    "one) or apt-get install libmpich-dev")
    prefix = request.getfixturevalue("capi_prefix")  # built only when there is a compiler
    exe = prefix / "mpi_client"
    cmd = [mpicc, "-O2", "-std=gnu99", "-Wall", str(HERE / "mpi_client.c"), "-o", str(exe),
           f"-I{prefix / 'include'}", f"-L{prefix / 'lib'}", f"-Wl,-rpath,{prefix / 'lib'}",
           "-lsapporo", "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    return exe


@pytest.mark.parametrize("nranks", [1, 3])
def test_mpi_c_client(mpiexec: str, client: Path, tmp_path: Path, nranks: int) -> None:
    n, eps2 = 200, 1e-4
    x, v, m = plummer(n, seed=11)
    ic = tmp_path / "ic.txt"
    write_ic(ic, x, v, m)
    out = tmp_path / "forces.txt"
    proc = launch(mpiexec, nranks, [str(client), str(ic), str(out), repr(eps2)], cwd=tmp_path,
                  env=client_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in range(nranks):  # every rank stored its own slice
        assert f"rank {r} of {nranks}: {len(range(r, n, nranks))} j-particles" in proc.stdout
    data = np.loadtxt(out)
    assert data.shape == (n, 9) and (data[:, 0] == np.arange(n)).all()
    ids = np.arange(n)
    ref = forces(x, v, ids, x, v, m, ids, eps2, order=4)
    assert relative_vector_error(data[:, 1:4], ref.acc, ref.acc_abs).max() < 1e-12
    assert relative_vector_error(data[:, 4:7], ref.jerk, ref.jerk_abs).max() < 1e-12
    assert relative_vector_error(data[:, 7], ref.pot, ref.pot_abs).max() < 1e-12
    assert (data[:, 8].astype(int) == ref.nn_index).all()


@pytest.fixture(scope="module")
def fortran_client(request: pytest.FixtureRequest) -> tuple[Path, str]:
    """mpi_client.f90 built with the MPI Fortran compiler and linked as phiGRAPE links a
    GRAPE-6 library (``-lg6``); with the launcher of the same MPI."""
    mpifort = find_mpifort()
    if mpifort is None:
        pytest.skip("no MPI Fortran compiler (mpifort or mpif90; the mpich wheel has none): "
                    "apt-get install libmpich-dev, or set MPIFC")
    launcher = mpiexec_for(mpifort) or find_mpiexec()
    if launcher is None:
        pytest.skip(f"no mpiexec beside {mpifort} nor on PATH")
    capi_prefix = request.getfixturevalue("capi_prefix")
    build = capi_prefix / "fortran"
    build.mkdir()
    exe = build / "mpi_client_f"
    lib = capi_prefix / "lib"
    cmd = [mpifort, "-O2", "-Wall", f"-J{build}", str(HERE / "mpi_client.f90"), "-o",
           str(exe), f"-L{lib}", f"-Wl,-rpath,{lib}", "-lg6"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    return exe, launcher


def fortran_env() -> dict[str, str]:
    """client_env(), and what Open MPI's launcher needs to run as root or oversubscribed
    (ignored by MPICH)."""
    env = client_env()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


PASS_LINE = re.compile(
    r"^mpi_client_f: (PASS|FAIL) ranks (\d+) n (\d+) max relative error acc\s+(\S+) "
    r"jerk\s+(\S+) pot\s+(\S+) nn mismatches (\d+)$", re.M)


@pytest.mark.parametrize("nranks", [2, 4])  # 4: more ranks than this machine's cores
def test_mpi_fortran_client(fortran_client: tuple[Path, str], tmp_path: Path,
                            nranks: int) -> None:
    exe, launcher = fortran_client
    n, eps2, ti, tol = 200, 1e-4, 0.0625, 1e-12
    x, v, m = plummer(n, seed=12)
    ic = tmp_path / "ic.txt"
    write_ic(ic, x, v, m)
    out = tmp_path / "forces.txt"
    proc = launch(launcher, nranks, [str(exe), str(ic), str(out), repr(eps2), repr(ti),
                                     repr(tol)], cwd=tmp_path, env=fortran_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in range(nranks):  # every rank stored its own slice
        assert f"rank {r} of {nranks}: {len(range(r, n, nranks))} j-particles" in proc.stdout
    found = PASS_LINE.search(proc.stdout)
    assert found, proc.stdout + proc.stderr
    verdict, ranks, count, *errors, mismatches = found.groups()
    assert (verdict, int(ranks), int(count), int(mismatches)) == ("PASS", nranks, n, 0)
    assert all(float(e) < tol for e in errors), found[0]
    # and the program's own reference against sapporo's: the j-particles carry a = -x and
    # jerk = -v at t = 0 and are predicted to ti, as the program sends its i-particles
    xp = x + ti * (v + ti * (-x / 2 + ti * (-v / 6)))
    vp = v + ti * (-x + ti * (-v / 2))
    data = np.loadtxt(out)
    assert data.shape == (n, 9) and (data[:, 0] == np.arange(n)).all()
    ids = np.arange(n)
    ref = forces(xp, vp, ids, xp, vp, m, ids, eps2, order=4)
    assert relative_vector_error(data[:, 1:4], ref.acc, ref.acc_abs).max() < tol
    assert relative_vector_error(data[:, 4:7], ref.jerk, ref.jerk_abs).max() < tol
    assert relative_vector_error(data[:, 7], ref.pot, ref.pot_abs).max() < tol
    assert (data[:, 8].astype(int) == ref.nn_index).all()


def test_mpi_fortran_client_fails_loudly(fortran_client: tuple[Path, str],
                                         tmp_path: Path) -> None:
    """A result outside the tolerance (here: any, tolerance -1) gives FAIL and a non-zero
    exit status on the launcher."""
    exe, launcher = fortran_client
    x, v, m = plummer(16, seed=13)
    ic = tmp_path / "ic.txt"
    write_ic(ic, x, v, m)
    proc = launch(launcher, 2, [str(exe), str(ic), str(tmp_path / "forces.txt"), "1e-4",
                                "0.0", "-1.0"], cwd=tmp_path, env=fortran_env())
    assert proc.returncode != 0, proc.stdout + proc.stderr
    found = PASS_LINE.search(proc.stdout)
    assert found and found[1] == "FAIL", proc.stdout + proc.stderr
