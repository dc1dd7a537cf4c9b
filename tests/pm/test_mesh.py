"""ParticleMesh against independent float64 NumPy computations and physical checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sapporo import reference
from sapporo.errors import ConfigError, InputError
from sapporo.pm import ParticleMesh

# ---------------------------------------------------------------------------------------------
# An independent float64 implementation of the whole pipeline, for small meshes. Weights are
# the window functions evaluated at the distance to every mesh point (no first-point
# arithmetic as in the kernels); the isolated potential is a direct sum over mesh-cell pairs
# (no FFT); the periodic one a complex FFT.


def window_weights(u: np.ndarray, grid: int, window: str, periodic: bool) -> np.ndarray:
    """(n, grid) weights of 1-D mesh coordinates ``u`` (point i at u = i)."""
    d = u[:, None] - np.arange(grid)[None, :]
    if periodic:
        d = (d + grid / 2) % grid - grid / 2
    a = np.abs(d)
    if window == "ngp":
        return ((d >= -0.5) & (d < 0.5)).astype(float)
    if window == "cic":
        return np.maximum(0.0, 1.0 - a)
    return np.where(a < 0.5, 0.75 - a**2, np.where(a < 1.5, 0.5 * (1.5 - a) ** 2, 0.0))


def numpy_pm(x, m, grid, box, boundary, window, stencil):
    h = box / grid
    periodic = boundary == "periodic"
    u = (x + box / 2) / h - 0.5
    w = [window_weights(u[:, d], grid, window, periodic) for d in range(3)]
    rho = np.einsum("p,pi,pj,pk->ijk", m, *w) / h**3
    if periodic:
        k = 2 * np.pi * np.fft.fftfreq(grid, d=h)
        k2 = k[:, None, None] ** 2 + k[None, :, None] ** 2 + k[None, None, :] ** 2
        k2[0, 0, 0] = 1.0
        green = -4 * np.pi / k2
        green[0, 0, 0] = 0.0
        phi = np.fft.ifftn(np.fft.fftn(rho) * green).real
    else:
        c = np.arange(grid) * h
        pts = np.stack(np.meshgrid(c, c, c, indexing="ij"), -1).reshape(-1, 3)
        r = np.linalg.norm(pts[:, None, :] - pts[None, :, :], axis=-1)
        self_term = (3 * math.log(2 + math.sqrt(3)) - math.pi / 2) / h  # uniform cube
        with np.errstate(divide="ignore"):
            g = np.where(r > 0, -1.0 / r, -self_term)
        phi = (g @ (rho.reshape(-1) * h**3)).reshape(grid, grid, grid)
    acc = np.zeros((3, grid, grid, grid))
    for ax in range(3):
        def sh(s, ax=ax):
            if periodic:
                return np.roll(phi, -s, axis=ax)
            out = np.full_like(phi, np.nan)
            src = [slice(None)] * 3
            dst = [slice(None)] * 3
            if s > 0:
                src[ax], dst[ax] = slice(s, None), slice(None, -s)
            else:
                src[ax], dst[ax] = slice(None, s), slice(-s, None)
            out[tuple(dst)] = phi[tuple(src)]
            return out
        if stencil == 2:
            acc[ax] = -(sh(1) - sh(-1)) / (2 * h)
        else:
            acc[ax] = -(8 * (sh(1) - sh(-1)) - (sh(2) - sh(-2))) / (12 * h)
    acc = np.nan_to_num(acc)  # points whose stencil leaves an isolated mesh: never used
    pot = np.einsum("pi,pj,pk,ijk->p", *w, phi)
    a = np.stack([np.einsum("pi,pj,pk,ijk->p", *w, acc[d]) for d in range(3)], axis=1)
    return a, pot


CASES = [("isolated", "ngp", 2), ("isolated", "cic", 2), ("isolated", "tsc", 4),
         ("periodic", "ngp", 4), ("periodic", "cic", 2), ("periodic", "tsc", 2)]


@pytest.mark.parametrize("boundary,window,stencil", CASES)
def test_small_mesh_matches_numpy(backend, meshes, boundary, window, stencil) -> None:
    """Double precision: the same sums in another order, so agreement to ~1e-12 of the
    largest value (1e-10 leaves room for the FFT's round-off on 8^3 to 16^3 points).
    Single: float32 positions and meshes, 2e-5."""
    rng = np.random.default_rng(7)
    grid, box = 8, 2.0
    pm = meshes(backend, grid, box, boundary=boundary, window=window, stencil=stencil)
    lo, hi = pm.usable_region()
    x = rng.uniform(lo, hi, (60, 3))
    x[0] = lo + 1e-9 * box  # next to the corners of the usable region (not on a
    x[1] = hi - 1e-9 * box  # point's boundary, where the two sides may round apart)
    m = rng.uniform(0.5, 1.5, 60)
    acc_ref, pot_ref = numpy_pm(x, m, grid, box, boundary, window, stencil)
    res = pm.forces(x, m)
    scale_a, scale_p = np.abs(acc_ref).max(), np.abs(pot_ref).max()
    assert np.abs(res.acc - acc_ref).max() < 1e-10 * scale_a
    assert np.abs(res.pot - pot_ref).max() < 1e-10 * scale_p
    single = meshes(backend, grid, box, boundary=boundary, window=window, stencil=stencil,
                    precision="single")
    x[1] = hi - 1e-6 * box  # hi - 1e-9 box rounds to hi in float32 (outside)
    acc_ref, pot_ref = numpy_pm(x, m, grid, box, boundary, window, stencil)
    rs = single.forces(x, m)
    assert np.abs(rs.acc - acc_ref).max() < 2e-5 * scale_a
    assert np.abs(rs.pot - pot_ref).max() < 2e-5 * scale_p


def test_assignment_is_deterministic(backend, meshes) -> None:
    """Fixed-point sums: the mesh density and the forces are the same bits whatever the
    particle order (float atomics would not give that)."""
    rng = np.random.default_rng(3)
    pm = meshes(backend, 16, 1.0, window="tsc", stencil=2)  # margin 2 cells
    x = rng.normal(0, 0.08, (5000, 3))
    m = rng.uniform(0.1, 1.0, 5000)
    r1 = pm.forces(x, m)
    rho1 = pm.density()
    perm = rng.permutation(5000)
    r2 = pm.forces(x[perm], m[perm])
    rho2 = pm.density()
    assert np.array_equal(rho1, rho2)
    assert np.array_equal(r1.acc[perm], r2.acc)
    assert np.array_equal(r1.pot[perm], r2.pot)
    # and the mass on the mesh is the mass given, to the fixed-point resolution
    assert abs(rho1.sum() * (1.0 / 16) ** 3 - m.sum()) < 1e-12 * m.sum()


@pytest.mark.parametrize("precision,tol", [("double", 1e-12), ("single", 2e-6)])
def test_float_atomics_agree_with_fixed_point(backend, meshes, precision, tol) -> None:
    """The comparison variant (float atomics) gives the same density up to the rounding
    of its sums: 1e-12 (double) or 2e-6 (single, float32 sums of up to ~100 terms) of the
    largest cell."""
    rng = np.random.default_rng(8)
    x = np.clip(rng.normal(0, 0.1, (4000, 3)), -0.3, 0.3)
    m = rng.uniform(0.1, 1.0, 4000)
    fixed = meshes(backend, 16, 1.0, window="tsc", precision=precision)
    flt = meshes(backend, 16, 1.0, window="tsc", precision=precision, assignment="float")
    rf, rx = fixed.forces(x, m), flt.forces(x, m)
    d1, d2 = fixed.density(), flt.density()
    assert np.abs(d1 - d2).max() <= tol * np.abs(d1).max()
    assert np.abs(rf.acc - rx.acc).max() <= 10 * tol * np.abs(rf.acc).max()


@pytest.mark.parametrize("boundary", ["isolated", "periodic"])
def test_momentum_conservation(backend, meshes, boundary) -> None:
    """Same window both ways, an even Green's function and an antisymmetric difference
    operator make the mesh force between two particles antisymmetric: sum m a vanishes
    to round-off (1e-12 of sum m |a|; the fixed-point rounding of the masses is 2^-62
    of the total)."""
    rng = np.random.default_rng(11)
    for window, stencil in (("cic", 2), ("tsc", 4)):
        pm = meshes(backend, 16, 1.0, boundary=boundary, window=window, stencil=stencil)
        x = np.clip(rng.normal(0.0, 0.12, (2000, 3)), *pm.usable_region())
        x = np.minimum(x, np.nextafter(pm.usable_region()[1], 0))
        m = rng.uniform(0.1, 2.0, 2000)
        r = pm.forces(x, m)
        total = (m[:, None] * r.acc).sum(axis=0)
        assert np.abs(total).max() < 1e-12 * (m[:, None] * np.abs(r.acc)).sum()


def _probe_errors(pm: ParticleMesh, rng: np.random.Generator, n: int = 2000):
    """A unit point mass near the centre and massless probes: radius in cells, relative
    radial error and relative tangential force."""
    h = pm.h
    c = rng.uniform(-0.5, 0.5, 3) * h
    rc = np.exp(rng.uniform(np.log(0.3), np.log(12.0), n))
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1)[:, None]
    xp = c + (rc * h)[:, None] * d
    r = pm.forces(np.vstack([c, xp]), np.r_[1.0, np.zeros(n)])
    a = r.acc[1:]
    exact = 1.0 / (rc * h) ** 2
    ar = -(a * d).sum(axis=1)
    at = np.linalg.norm(a + ar[:, None] * d, axis=1)
    return rc, ar / exact - 1.0, at / exact


@pytest.mark.parametrize("window", ["cic", "tsc"])
def test_point_mass_force_profile(backend, meshes, window) -> None:
    """Isolated, 32^3: the mesh force of a point mass against 1/r^2 by radius in cells.

    Measured (docs/pm.md): rms radial error 1.7% at 4-8 cells and 0.5% at 8-12 with the
    2-point gradient, 0.8% / 0.2% (CIC) and 0.25% / 0.02% (TSC) with the 4-point one;
    tangential alike. Bounds are about twice the measured rms (random probes); inside a
    cell the force is strongly softened (the mesh's resolution limit)."""
    rng = np.random.default_rng(5)
    for stencil, b8, b12 in ((2, 0.035, 0.012), (4, 0.02 if window == "cic" else 0.006,
                                                 0.005 if window == "cic" else 0.001)):
        pm = meshes(backend, 32, 1.0, window=window, stencil=stencil)
        rc, er, et = _probe_errors(pm, rng)
        s48, s812 = (rc >= 4) & (rc < 8), (rc >= 8) & (rc < 12)
        assert np.sqrt(np.mean(er[s48] ** 2)) < b8
        assert np.sqrt(np.mean(et[s48] ** 2)) < b8
        assert np.sqrt(np.mean(er[s812] ** 2)) < b12
        assert np.sqrt(np.mean(et[s812] ** 2)) < b12
        assert abs(np.mean(er[s48])) < 0.005  # no bias beyond the resolution
        assert np.mean(er[rc < 1]) < -0.5  # softened inside a cell


@pytest.mark.parametrize("stencil", [2, 4])
def test_periodic_sinusoid(backend, meshes, stencil) -> None:
    """rho = rho0 (1 + A sin(k x)) with particles on the mesh points (CIC then assigns
    exactly): phi = -4 pi rho0 A sin(k x) / k^2 with the continuous Green's function, to
    round-off; the acceleration carries the finite-difference factor of the stencil,
    sin(kh)/(kh) (2-point, 6.4e-3 off at 32 points per wavelength) or
    (8 sin(kh) - sin(2kh))/(6kh) (4-point, 5e-5), which is checked to 1e-10."""
    grid, box = 32, 1.0
    h = box / grid
    pm = meshes(backend, grid, box, boundary="periodic", window="cic", stencil=stencil)
    c = -box / 2 + (np.arange(grid) + 0.5) * h
    x = np.stack(np.meshgrid(c, c, c, indexing="ij"), -1).reshape(-1, 3)
    k, amp, rho0 = 2 * np.pi / box, 0.3, 1.0
    m = rho0 * h**3 * (1 + amp * np.sin(k * x[:, 1]))
    r = pm.forces(x, m)
    phi_exact = -4 * np.pi * rho0 * amp * np.sin(k * x[:, 1]) / k**2
    amp_phi = 4 * np.pi * rho0 * amp / k**2
    assert np.abs(r.pot - phi_exact).max() < 1e-10 * amp_phi
    kh = k * h
    factor = math.sin(kh) / kh if stencil == 2 else (8 * math.sin(kh) - math.sin(2 * kh)) / (
        6 * kh)
    ay_exact = 4 * np.pi * rho0 * amp * np.cos(k * x[:, 1]) / k  # -dphi/dy
    assert np.abs(r.acc[:, 1] - factor * ay_exact).max() < 1e-10 * amp_phi * k
    assert np.abs(r.acc[:, [0, 2]]).max() < 1e-10 * amp_phi * k
    # against the analytic acceleration itself: the stencil's truncation error
    bound = 7e-3 if stencil == 2 else 1e-4
    assert np.abs(r.acc[:, 1] - ay_exact).max() < bound * amp_phi * k


def test_periodic_deconvolution_and_discrete_green(backend) -> None:
    """The discrete Green's function gives the 7-point Laplacian's potential (the
    continuous one times k^2 / k_d^2); deconvolution divides by the CIC window squared
    (for a mode along y only, sinc(kh/2)^-4)."""
    grid, box = 16, 1.0
    h = box / grid
    c = -box / 2 + (np.arange(grid) + 0.5) * h
    x = np.stack(np.meshgrid(c, c, c, indexing="ij"), -1).reshape(-1, 3)
    k, amp = 2 * np.pi * 2 / box, 0.2
    m = h**3 * (1 + amp * np.sin(k * x[:, 1]))
    phi_cont = -4 * np.pi * amp * np.sin(k * x[:, 1]) / k**2
    kd2 = (2 - 2 * math.cos(k * h)) / h**2
    sinc = math.sin(k * h / 2) / (k * h / 2)
    with ParticleMesh(grid, box, "periodic", "cic", backend=backend, green="discrete") as pm:
        r = pm.forces(x, m)
        assert np.abs(r.pot - phi_cont * k**2 / kd2).max() < 1e-10 * np.abs(phi_cont).max()
    with ParticleMesh(grid, box, "periodic", "cic", backend=backend, deconvolve=True) as pm:
        r = pm.forces(x, m)
        assert np.abs(r.pot - phi_cont / sinc**4).max() < 1e-10 * np.abs(phi_cont).max()


def test_plummer_against_direct_sum(backend, meshes) -> None:
    """A 4000-body Plummer sphere (truncated at 3 length units, scale radius a = 3 pi / 16)
    on a 64^3 isolated mesh with h = 0.125 = 0.21 a, against the float64 direct sum.
    Measured: median relative force error 0.75% (CIC, 2-point) / 0.6% (TSC, 4-point)
    beyond 2 a, 0.26% / 0.06% beyond 3 a; the tail comes from close neighbours, which
    the direct sum resolves and the mesh smooths. Bounds: 1.5% and 0.6% on the median."""
    x, _, m = reference.plummer(4000, seed=3)
    keep = np.linalg.norm(x, axis=1) < 3.0
    x, m = x[keep], m[keep]
    n = len(x)
    ref = reference.forces(x, None, np.arange(n), x, None, m, np.arange(n), 0.0, order=2)
    radius = np.linalg.norm(x, axis=1) / (3 * np.pi / 16)
    for window, stencil in (("cic", 2), ("tsc", 4)):
        pm = meshes(backend, 64, 8.0, window=window, stencil=stencil)
        r = pm.forces(x, m)
        err = np.linalg.norm(r.acc - ref.acc, axis=1) / np.linalg.norm(ref.acc, axis=1)
        assert np.median(err[radius > 2]) < 0.015
        assert np.median(err[radius > 3]) < 0.006
        # potential: the mesh adds each particle's own self-potential, m * 2.38 / h at most
        perr = np.abs(r.pot - ref.pot) / np.abs(ref.pot)
        assert np.median(perr[radius > 2]) < 0.01


# ---------------------------------------------------------------------------------------------
# bad input


def test_bad_construction(backend) -> None:
    for grid in (0, 1, -4, 2.5, "32", True, None):
        with pytest.raises(InputError, match="grid"):
            ParticleMesh(grid, 1.0, backend=backend)
    for box in (0.0, -1.0, float("nan"), float("inf"), "x", None):
        with pytest.raises(InputError, match="box"):
            ParticleMesh(16, box, backend=backend)
    with pytest.raises(InputError, match="boundary"):
        ParticleMesh(16, 1.0, boundary="open", backend=backend)
    with pytest.raises(InputError, match="window"):
        ParticleMesh(16, 1.0, window="pcs", backend=backend)
    with pytest.raises(InputError, match="solver"):
        ParticleMesh(16, 1.0, solver="sor", backend=backend)
    with pytest.raises(InputError, match="precision"):
        ParticleMesh(16, 1.0, precision="half", backend=backend)
    with pytest.raises(InputError, match="stencil"):
        ParticleMesh(16, 1.0, stencil=3, backend=backend)
    with pytest.raises(ConfigError, match="isolated"):
        ParticleMesh(16, 1.0, boundary="periodic", solver="multigrid", backend=backend)
    with pytest.raises(ConfigError, match="multigrid"):
        ParticleMesh(36, 1.0, solver="multigrid", backend=backend)
    with pytest.raises(InputError, match="too small"):
        ParticleMesh(3, 1.0, window="tsc", stencil=4, backend=backend)
    with pytest.raises(InputError, match="devices"):
        ParticleMesh(16, 1.0, backend=backend, devices=[0, 1])
    with pytest.raises(InputError, match="devices"):
        ParticleMesh(16, 1.0, backend=backend, devices=99)


@pytest.mark.parametrize(("lacking", "precision", "match"), [
    ("double_support", "double", "needs fp64"),
    ("int64_atomics", "single", "cl_khr_int64_base_atomics")])
def test_a_device_without_what_the_kernels_need_is_refused(backend, monkeypatch, lacking,
                                                           precision, match) -> None:
    """A device without fp64 (for double) or 64-bit integer atomics (the mass assignment;
    Apple's OpenCL has none) is refused with what it lacks, before any kernel is built."""
    import dataclasses

    real_open = ParticleMesh._open

    def opened_without(backend, devices):
        ctx = real_open(backend, devices)
        ctx.info = dataclasses.replace(ctx.info, **{lacking: False})
        return ctx

    monkeypatch.setattr(ParticleMesh, "_open", staticmethod(opened_without))
    with pytest.raises(ConfigError, match=match) as err:
        ParticleMesh(16, 1.0, precision=precision, backend=backend)
    assert "lacks" in str(err.value)


def test_bad_particles(backend, meshes) -> None:
    pm = meshes(backend, 16, 2.0, window="cic", stencil=2)
    lo, hi = pm.usable_region()
    assert lo == pytest.approx(-1.0 + 1.5 * 2.0 / 16) and hi == -lo  # CIC + 2-point: 1.5
    x = np.zeros((5, 3))
    m = np.ones(5)
    bad = x.copy()
    bad[2, 1] = np.nan
    bad[4, 0] = np.inf
    with pytest.raises(InputError, match=r"2 particle\(s\) with non-finite.*index 2"):
        pm.forces(bad, m)
    out = x.copy()
    out[3] = [0.0, 0.0, hi]  # the upper bound is excluded
    out[1] = [5.0, 0.0, 0.0]
    with pytest.raises(InputError, match=r"2 particle\(s\) outside.*index 1, \[5\.0"):
        pm.forces(out, m)
    with pytest.raises(InputError, match="mass"):
        pm.forces(x, [1, 1, -1, 1, 1])
    with pytest.raises(InputError, match="mass"):
        pm.forces(x, [1, 1, np.nan, 1, 1])
    with pytest.raises(InputError, match="shape"):
        pm.forces(np.zeros((5, 2)), m)
    with pytest.raises(InputError, match="shape"):
        pm.forces(x, np.ones(4))
    with pytest.raises(InputError, match="no particles"):
        pm.forces(np.zeros((0, 3)), np.zeros(0))
    # the same mesh still works afterwards
    r = pm.forces(np.array([[0.1, 0.0, 0.0], [-0.1, 0.0, 0.0]]), [1.0, 1.0])
    assert r.acc[0, 0] < 0 < r.acc[1, 0]
    # periodic meshes take the whole box, [-box/2, box/2)
    per = meshes(backend, 16, 2.0, boundary="periodic")
    assert per.usable_region() == (-1.0, 1.0)
    per.forces(np.array([[-1.0, -1.0, np.nextafter(1.0, 0)]]), [1.0])
    with pytest.raises(InputError, match="outside the box"):
        per.forces(np.array([[1.0, 0.0, 0.0]]), [1.0])


def test_zero_mass_gives_zero_force(backend, meshes) -> None:
    pm = meshes(backend, 16, 2.0, window="cic")
    r = pm.forces(np.zeros((3, 3)), np.zeros(3))
    assert np.all(r.acc == 0) and np.all(r.pot == 0)
