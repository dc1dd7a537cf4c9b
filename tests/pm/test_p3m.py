"""P^3M: the split mesh force plus the direct short-range sum, against the direct sum."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sapporo import reference
from sapporo.errors import ConfigError, InputError
from sapporo.pm import P3M, ParticleMesh


@pytest.fixture(scope="module")
def plummer_direct():
    x, _, m = reference.plummer(3000, seed=5)
    keep = np.linalg.norm(x, axis=1) < 3.0
    x, m = x[keep], m[keep]
    n = len(x)
    ref = reference.forces(x, None, np.arange(n), x, None, m, np.arange(n), 0.0, order=2)
    return x, m, ref


def test_p3m_against_direct_sum(backend, plummer_direct) -> None:
    """Plummer sphere (about 2900 bodies), isolated 32^3 mesh, box 8, TSC, 4-point
    gradient, r_s = 1.25 cells, cut 4.5 r_s, window deconvolution. Measured: median
    relative force error 0.18%, largest 0.8%, over every particle (the plain mesh: median
    16%, largest 280%, inside the core); potential median 1e-4. Bounds: 0.4%, 2%, 5e-4."""
    x, m, ref = plummer_direct
    with P3M(32, 8.0, backend=backend) as p3m:
        r = p3m.forces(x, m)
    err = np.linalg.norm(r.acc - ref.acc, axis=1) / np.linalg.norm(ref.acc, axis=1)
    assert np.median(err) < 0.004 and err.max() < 0.02
    perr = np.abs(r.pot - ref.pot) / np.abs(ref.pot)
    assert np.median(perr) < 5e-4
    assert set(r.timings) >= {"assignment", "poisson", "short_range"}


@pytest.mark.parametrize(("shape", "settings", "n", "tol"), [
    ("gauss", {"split": 1.0, "cut": 4.0}, 700, 1e-12), ("s2", {"split": 4.0}, 500, 1e-11)])
def test_short_range_kernel_against_numpy(backend, shape, settings, n, tol) -> None:
    """The short-range kernel alone against a NumPy pair sum of the same split with the
    nearest image (periodic) over all pairs within the cut: the chaining mesh must find every
    such pair. Gaussian: the same erfc arithmetic in double, 1e-12 of the largest value. S2:
    the kernel's closed forms (sapporo/s2.h) against the reference's factors (g from the S2
    force, h by quadrature), 1e-11."""
    rng = np.random.default_rng(6 if shape == "gauss" else 7)
    for boundary in ("periodic", "isolated"):
        with P3M(16, 1.0, boundary, backend=backend, split_shape=shape, **settings) as p3m:
            lo, hi = p3m.mesh.usable_region()
            x = rng.uniform(lo, hi, (n, 3))
            m = rng.uniform(0.5, 1.5, n)
            acc, pot = p3m.short_range(x, m)
            rs, rcut = p3m.rs, p3m.rcut
        d = x[None, :, :] - x[:, None, :]
        if boundary == "periodic":
            d -= np.round(d)
        r = np.linalg.norm(d, axis=-1)
        near = (r < rcut) & (r > 0)
        rr = np.where(near, r, 1.0)
        if shape == "gauss":
            h = np.vectorize(math.erfc)(rr / (2 * rs))
            g = h + rr / (rs * math.sqrt(math.pi)) * np.exp(-(rr / (2 * rs)) ** 2)
        else:
            assert rcut == rs  # (S2: the cut is the diameter)
            g, h = reference.cutoff_factors(rr, rs, "s2")
        f = np.where(near, m[None, :] * g / rr**3, 0.0)
        acc_ref = (f[:, :, None] * d).sum(axis=1)
        pot_ref = -np.where(near, m[None, :] * h / rr, 0.0).sum(axis=1)
        assert near.sum() > 20 * n  # a real test: many pairs within the cut
        assert np.abs(acc - acc_ref).max() < tol * np.abs(acc_ref).max()
        assert np.abs(pot - pot_ref).max() < tol * np.abs(pot_ref).max()


def test_s2_p3m_against_direct_sum(backend, plummer_direct) -> None:
    """The S2 split (split_shape="s2", the GRAPE-5 cutoff force's): the same sphere and
    mesh, a = 4 cells, no cut beyond a (the short-range force ends there). Measured: median
    0.44%, largest 4.4% (as the mesh plus the force kernels' cutoff pairs,
    test_s2_mesh_plus_cutoff_pairs_is_newton), potential median 1.6e-4; momentum to
    round-off. Bounds: 0.6%, 6%, 3e-4, 1e-12."""
    x, m, ref = plummer_direct
    with P3M(32, 8.0, backend=backend, split=4.0, split_shape="s2") as p3m:
        assert p3m.rcut == p3m.rs == 4.0 * p3m.mesh.h
        r = p3m.forces(x, m)
    err = np.linalg.norm(r.acc - ref.acc, axis=1) / np.linalg.norm(ref.acc, axis=1)
    assert np.median(err) < 0.006 and err.max() < 0.06
    perr = np.abs(r.pot - ref.pot) / np.abs(ref.pot)
    assert np.median(perr) < 3e-4
    total = (m[:, None] * r.acc).sum(axis=0)
    assert np.abs(total).max() < 1e-12 * (m[:, None] * np.abs(r.acc)).sum()


def test_periodic_p3m_compact_cluster(backend, plummer_direct) -> None:
    """A compact cluster in a large periodic box feels its images only as a weak tide, of
    order (size / box)^3: the Plummer sphere (r < 3) scaled by 0.25 in a box of 8 against
    the isolated direct sum. Measured median 0.17%, largest 0.7% (the plain periodic mesh:
    median 42%, the cluster spans a few cells); bounds 0.5% and 2%."""
    x, m, _ = plummer_direct
    xs = 0.25 * x
    n = len(xs)
    ref = reference.forces(xs, None, np.arange(n), xs, None, m, np.arange(n), 0.0, order=2)
    with P3M(64, 8.0, "periodic", backend=backend) as p3m:
        r = p3m.forces(xs, m)
    err = np.linalg.norm(r.acc - ref.acc, axis=1) / np.linalg.norm(ref.acc, axis=1)
    assert np.median(err) < 0.005 and err.max() < 0.02


def test_p3m_momentum(backend, plummer_direct) -> None:
    """Both parts are antisymmetric pair forces: sum m a vanishes to round-off."""
    x, m, _ = plummer_direct
    with P3M(32, 8.0, backend=backend) as p3m:
        r = p3m.forces(x, m)
    total = (m[:, None] * r.acc).sum(axis=0)
    assert np.abs(total).max() < 1e-12 * (m[:, None] * np.abs(r.acc)).sum()


def test_p3m_bad_settings(backend) -> None:
    with pytest.raises(ConfigError, match="3 cut radii"):
        P3M(8, 1.0, "periodic", backend=backend, split=2.0)
    with pytest.raises(ConfigError, match="split"):
        P3M(16, 1.0, backend=backend, split=0.0)
    with pytest.raises(ConfigError, match="cut"):
        P3M(16, 1.0, backend=backend, cut=float("nan"))
    with pytest.raises(ConfigError, match="S2 split's short-range force ends"):
        P3M(16, 1.0, backend=backend, split_shape="s2", cut=2.0)
    with pytest.raises(InputError, match="split_shape"):
        P3M(16, 1.0, backend=backend, split_shape="cubic")


@pytest.mark.parametrize("boundary", ["isolated", "periodic"])
def test_s2_mesh_plus_cutoff_pairs_is_newton(backend, plummer_direct, boundary) -> None:
    """TreePM with Phantom-GRAPE's PG5/table split: the mesh's long-range part of the S2
    split of diameter a (``split_shape="s2"``) plus the pair force of
    ``Library(order=2, cutoff=a, cutoff_shape="s2")``, the kernel of the GRAPE-5 cutoff
    calls, is Newton's. a = 4 cells, TSC, deconvolution; isolated: the Plummer sphere in a
    box of 8 on 32^3 cells, measured median 0.44 %, largest 4.4 %, potential median 1.1e-3
    (a = 8 cells: 0.07 % and 0.33 %); periodic: the sphere scaled by 0.25 on 64^3 cells,
    median 0.92 %, largest 3.0 %. Both parts are pair forces: momentum to round-off."""
    import sapporo

    x, m, ref = plummer_direct
    grid, scale = (32, 1.0) if boundary == "isolated" else (64, 0.25)
    x = x * scale
    n = len(x)
    ids = np.arange(n)
    if scale != 1.0:
        ref = reference.forces(x, None, ids, x, None, m, ids, 0.0, order=2)
    a = 4 * 8.0 / grid
    with ParticleMesh(grid, 8.0, boundary, backend=backend, split=a, split_shape="s2",
                      deconvolve=True) as pm:
        far = pm.forces(x, m)
    with sapporo.Library(order=2, precision="double", backend=backend, cutoff=a,
                         cutoff_shape="s2") as lib:
        lib.set_j_particles(ids, ids, 0.0, m, x, np.zeros_like(x))
        near = lib.compute(x, np.zeros_like(x), ids, 0.0)
    acc = far.acc + near.acc
    err = np.linalg.norm(acc - ref.acc, axis=1) / np.linalg.norm(ref.acc, axis=1)
    median, largest = (0.008, 0.08) if boundary == "isolated" else (0.015, 0.06)
    assert np.median(err) < median and err.max() < largest
    if boundary == "isolated":
        assert np.median(np.abs(far.pot + near.pot - ref.pot) / np.abs(ref.pot)) < 3e-3
    total = (m[:, None] * acc).sum(axis=0)
    assert np.abs(total).max() < 1e-12 * (m[:, None] * np.abs(acc)).sum()
    with pytest.raises(InputError, match="split_shape"):
        ParticleMesh(16, 1.0, split=0.2, split_shape="tophat", backend=backend)
