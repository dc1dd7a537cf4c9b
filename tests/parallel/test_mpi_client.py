"""An MPI-parallel C client of the GRAPE-6 API (tests/parallel/mpi_client.c): each rank opens
the library, stores its own j-slice and reduces the forces with MPI; the result equals the
float64 reference. Skips without an MPI C compiler (the mpich wheel has ``mpicc``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_launch import HERE, find_mpicc, launch, mpi_env

from sapporo.reference import forces, plummer, relative_vector_error


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mpicc = find_mpicc()
    if mpicc is None:
        pytest.skip("no MPI C compiler (mpicc): pip install -e '.[mpi]' (the mpich wheel has "
                    "one) or apt-get install libmpich-dev")
    prefix = tmp_path_factory.mktemp("capi-mpi")
    proc = subprocess.run([sys.executable, "-m", "sapporo.cli", "capi", "build", "--prefix",
                           str(prefix)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"sapporo capi build failed:\n{proc.stdout}{proc.stderr}"
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
    ic.write_text(f"{n}\n" + "".join(
        " ".join(repr(float(q)) for q in (m[i], *x[i], *v[i])) + "\n" for i in range(n)))
    out = tmp_path / "forces.txt"
    env = {k: val for k, val in mpi_env(SAPPORO_PRECISION="double").items()
           if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    proc = launch(mpiexec, nranks, [str(client), str(ic), str(out), repr(eps2)], cwd=tmp_path,
                  env=env)
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
