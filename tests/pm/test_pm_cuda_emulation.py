"""kernels_cuda/pm.cu on the CPU emulation of CUDA (tests/cudaemu), against the OpenCL
kernels (themselves checked against NumPy in test_mesh.py): the same arithmetic in
double, so the results agree to round-off (1e-12 relative; the order of a few sums may
differ). Skipped where no C++ compiler can build the emulation."""

from __future__ import annotations

import numpy as np
import pytest

from sapporo.backend import probe_backends
from sapporo.pm import ParticleMesh
from sapporo.pm.integrator import Leapfrog

cudaemu = pytest.importorskip("cudaemu")
fake_pycuda = pytest.importorskip("cudaemu.fake_pycuda")
ok, why = cudaemu.available()
pytestmark = [pytest.mark.skipif(not ok, reason=why),
              pytest.mark.skipif(not any(s.name == "opencl" and s.devices
                                         for s in probe_backends()),
                                 reason="no OpenCL device for the comparison")]

CASES = [dict(boundary="isolated", window="tsc", stencil=4),
         dict(boundary="periodic", window="cic", stencil=2),
         dict(boundary="isolated", window="ngp", stencil=2, precision="single"),
         dict(boundary="isolated", window="cic", solver="multigrid"),
         dict(boundary="periodic", window="tsc", assignment="float")]


@pytest.mark.parametrize("opts", CASES, ids=lambda o: "-".join(map(str, o.values())))
def test_emulated_cuda_matches_opencl(opts) -> None:
    rng = np.random.default_rng(9)
    grid, box = 8, 2.0
    with ParticleMesh(grid, box, backend="opencl", **opts) as cl_pm:
        lo, hi = cl_pm.usable_region()
        x = rng.uniform(lo, hi, (40, 3))
        m = rng.uniform(0.5, 1.5, 40)
        want = cl_pm.forces(x, m)
        sim = Leapfrog(cl_pm, x, np.zeros_like(x), m * 1e-3, 0.01)
        sim.step(2)
        want_x = sim.state()[0]
    tol = 1e-12 if opts.get("precision", "double") == "double" else 1e-6
    with fake_pycuda.emulated_cuda():
        with ParticleMesh(grid, box, backend="cuda", **opts) as cu_pm:
            assert cu_pm._ctx.info.backend == "cuda"
            got = cu_pm.forces(x, m)
            sim = Leapfrog(cu_pm, x, np.zeros_like(x), m * 1e-3, 0.01)
            sim.step(2)
            got_x = sim.state()[0]
    assert np.abs(got.acc - want.acc).max() <= tol * np.abs(want.acc).max()
    assert np.abs(got.pot - want.pot).max() <= tol * np.abs(want.pot).max()
    assert np.abs(got_x - want_x).max() <= tol * box


@pytest.mark.parametrize(("boundary", "shape"), [("isolated", "gauss"),
                                                 ("periodic", "gauss"), ("periodic", "s2")])
def test_emulated_cuda_p3m_matches_opencl(boundary, shape) -> None:
    from sapporo.pm import P3M

    rng = np.random.default_rng(10)
    kw = {"split": 1.0, "cut": 4.0} if shape == "gauss" else {"split": 4.0}
    with P3M(16, 1.0, boundary, backend="opencl", split_shape=shape, **kw) as p3m:
        lo, hi = p3m.mesh.usable_region()
        x = rng.uniform(lo, hi, (200, 3))
        m = rng.uniform(0.5, 1.5, 200)
        want = p3m.forces(x, m)
    with fake_pycuda.emulated_cuda():
        with P3M(16, 1.0, boundary, backend="cuda", split_shape=shape, **kw) as p3m:
            got = p3m.forces(x, m)
    assert np.abs(got.acc - want.acc).max() <= 1e-12 * np.abs(want.acc).max()
    assert np.abs(got.pot - want.pot).max() <= 1e-12 * np.abs(want.pot).max()
