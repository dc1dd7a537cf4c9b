"""The block-time-step Hermite integrators (``sapporo.nbody.hermite``) and their native core
(``sapporo.nbody._hermite``).

Host-only tests (the core's step quantisation and criteria, the predictor, the correctors on
a polynomial force field) use a stub library, which the core calls the library's way; the
others run on the real library (every usable backend, through PoCL on a CPU), where the core
calls the library's native engine.

Energy bounds (relative, Plummer N = 128, eps = 0.01, t = 0 -> 0.25, default criterion and
eta): 4th order 1e-7 (double-single and double), 6th order double 1e-10 and double-single
1e-7. Measured on PoCL: 8e-9 (4th, double), 4e-9 (4th, double-single), 2e-12 (6th, double),
7e-9 (6th, double-single).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sapporo import InputError, reference
from sapporo.nbody import _hermite
from sapporo.nbody.hermite import (
    DT_MAX,
    DT_MIN,
    HermiteIntegrator,
    floor_pow2,
    predict_taylor,
)
from sapporo.nbody.ic import plummer
from sapporo.nbody.snapshot import h5py_available, load, save

# --------------------------------------------------------------------------- helpers


class PolynomialLibrary:
    """A stub library: every particle feels the same acceleration ``A(t)``, a polynomial.

    Then ``x(t) = x0 + v0 t + integral integral A``; the Hermite correctors must reproduce it
    to round-off when A has degree <= 2 (4th order) or <= 4 (6th order).
    """

    def __init__(self, order: int, coeffs: np.ndarray) -> None:
        self.order = order
        self.precision = "double"
        self.device_name = "polynomial stub"
        self.coeffs = np.asarray(coeffs, dtype=np.float64)  # (degree + 1, 3), A = sum c_k t^k
        self.t = 0.0
        self.uploads = 0

    def deriv(self, k: int, t: float) -> np.ndarray:
        """k-th time derivative of A at t."""
        out = np.zeros(3)
        for p in range(k, len(self.coeffs)):
            out += self.coeffs[p] * math.perm(p, k) * t ** (p - k)
        return out

    def set_j_particles(self, *args, **kw) -> None:
        self.uploads += 1

    def set_time(self, t: float) -> None:
        self.t = float(t)

    def compute(self, x, v, index, eps2, h2=None, a=None, nj=None, jerk=None):
        n = len(x)

        class R:
            pass

        r = R()
        r.acc = np.tile(self.deriv(0, self.t), (n, 1))
        r.jerk = np.tile(self.deriv(1, self.t), (n, 1))
        r.snap = np.tile(self.deriv(2, self.t), (n, 1)) if self.order >= 6 else None
        r.crackle = np.tile(self.deriv(3, self.t), (n, 1)) if self.order == 8 else None
        r.pot = np.zeros(n)
        return r

    def close(self) -> None:
        pass


class RecordingLibrary:
    """Wraps a real library and checks, at every block step, the active set it is asked for."""

    def __init__(self, lib) -> None:
        self.lib = lib
        self.order = lib.order
        self.precision = lib.precision
        self.device_name = lib.device_name
        self.integrator: HermiteIntegrator | None = None
        self.blocks_checked = 0

    def set_j_particles(self, *args, **kw):
        return self.lib.set_j_particles(*args, **kw)

    def set_time(self, t):
        self.block_time = float(t)
        return self.lib.set_time(t)

    def compute(self, x, v, index, eps2, h2=None, a=None, nj=None):
        it = self.integrator
        if it is not None and self.block_time > it.time:  # a block step, not energy()
            t_next = it.t + it.dt
            assert self.block_time == t_next.min()
            expected = it.ids[t_next == self.block_time]
            np.testing.assert_array_equal(np.sort(index), np.sort(expected))
            self.blocks_checked += 1
        return self.lib.compute(x, v, index, eps2, h2=h2, a=a, nj=nj)


def kepler_ic(e: float, a: float = 1.0):
    """Two bodies of mass 1/2 at apocentre; relative orbit semi-major axis a."""
    m = np.array([0.5, 0.5])
    r = a * (1 + e)
    vrel = math.sqrt((1 - e) / (a * (1 + e)))
    x = np.array([[r / 2, 0, 0], [-r / 2, 0, 0]])
    v = np.array([[0, vrel / 2, 0], [0, -vrel / 2, 0]])
    return x, v, m


def kepler_relative_position(t: float, e: float, a: float = 1.0) -> np.ndarray:
    """x0 - x1 of :func:`kepler_ic` at time t, from Kepler's equation (Newton iteration)."""
    mean = math.pi + t / a**1.5
    ecc = mean
    for _ in range(60):
        ecc -= (ecc - e * math.sin(ecc) - mean) / (1 - e * math.cos(ecc))
    return -np.array([a * (math.cos(ecc) - e), a * math.sqrt(1 - e * e) * math.sin(ecc), 0.0])


# --------------------------------------------------------------------------- host only


def test_floor_pow2_exact():
    x = np.array([1.0, 0.75, 0.125, 0.13, 3.0, 2.0**-25, 1e-9])
    np.testing.assert_array_equal(floor_pow2(x), [1.0, 0.5, 0.125, 0.125, 2.0, 2.0**-25,
                                                  2.0**-30])


def quantise(crit, dt_old, t_new, t_limit=None):
    """The native core's step quantisation, element by element."""
    return np.array([_hermite.quantise(c, d, t, DT_MIN, DT_MAX, t_limit)
                     for c, d, t in zip(crit, dt_old, t_new, strict=True)])


def test_quantise_steps_invariants():
    rng = np.random.default_rng(3)
    n = 5000
    dt_old = 2.0 ** -rng.integers(3, 26, n)
    t_new = dt_old * rng.integers(1, 1000, n)  # a multiple of the old step
    crit = 10.0 ** rng.uniform(-10, 1, n)
    crit[:10] = np.nan
    dt = quantise(crit, dt_old, t_new)
    frac, _ = np.frexp(dt)
    assert np.all(frac == 0.5)  # powers of two
    assert np.all((dt >= DT_MIN) & (dt <= DT_MAX))
    assert np.all(np.fmod(t_new, dt) == 0.0)  # commensurate
    assert np.all(dt <= 2 * dt_old)  # at most doubles
    grew = dt > dt_old
    assert grew.any() and np.all(np.fmod(t_new[grew], 2 * dt_old[grew]) == 0.0)
    shrink = floor_pow2(np.clip(crit, DT_MIN, DT_MAX)) < dt_old
    np.testing.assert_array_equal(dt[shrink], floor_pow2(np.clip(crit, DT_MIN, DT_MAX))[shrink])
    assert np.all(dt[:10] >= np.minimum(dt_old[:10], DT_MAX))  # NaN means "as large as allowed"
    capped = quantise(crit, dt_old, t_new, t_limit=float(t_new.max()))
    below = t_new < t_new.max()
    assert np.all(t_new[below] + capped[below] <= t_new.max())
    # the doubled step would pass the limit: capped at the room left
    assert _hermite.quantise(1.0, 2.0**-4, 0.375, DT_MIN, DT_MAX, None) == 2.0**-3
    assert _hermite.quantise(1.0, 2.0**-4, 0.375, DT_MIN, DT_MAX, 0.4375) == 2.0**-4


def step(order, criterion, eta, eta4, norms, noise=0.0, tau=0.01, n0=None):
    """The native core's guarded criterion from the norms of the derivatives."""
    n0 = norms[:4] if n0 is None else n0
    return _hermite.step(order, criterion, eta, eta4, noise, tau, list(n0), list(norms))


def test_step_criteria_values():
    # |a| = 1, |j| = 2, |s| = 3, |c| = 4, |a4| = 5, |a5| = 6, |a6| = 7, |a7| = 8
    d = [float(k) for k in range(1, 9)]
    a1sq, a2sq, a4sq, a6sq = 1 * 3 + 4, 2 * 4 + 9, 4 * 6 + 25, 6 * 8 + 49
    assert step(4, "aarseth", 0.02, 0.01, d[:4])[0] == pytest.approx(
        math.sqrt(0.02 * a1sq / a2sq), rel=1e-15)
    assert step(4, "generalised", 0.1, 0.01, d[:4])[0] == pytest.approx(
        0.1 * math.sqrt(a1sq / a2sq), rel=1e-15)
    gen6 = 0.1 * (math.sqrt(a1sq) / math.sqrt(a4sq)) ** (1 / 3)
    assert step(6, "generalised", 0.1, 0.01, d[:6])[0] == pytest.approx(gen6, rel=1e-14)
    avg = 0.5 * (math.sqrt(0.01 * a1sq / a2sq) + gen6)
    assert step(6, "average", 0.1, 0.01, d[:6])[0] == pytest.approx(avg, rel=1e-14)
    gen8 = 0.1 * (a1sq / a6sq) ** (1 / 10)
    assert step(8, "generalised", 0.1, 0.01, d)[0] == pytest.approx(gen8, rel=1e-14)
    assert step(8, "generalised", 0.1, 0.01, d)[1] is False


@pytest.mark.parametrize("order, criterion, scale", [
    (4, "aarseth", 0.27 * math.sqrt(0.01)), (6, "generalised", 0.32 * 0.1),
    (8, "average", 0.5 * (0.73 * math.sqrt(0.01) + 0.17 * 0.1)),
])
def test_steps_never_below_the_floor(order, criterion, scale):
    """A criterion driven to nothing by huge higher derivatives gives 1/8 of the fallback,
    ``scale`` T1 with T1 = |a| / |j| (4th order) or |a| / sqrt(|j|^2 + |a||s|)."""
    n = [1.0, 2.0, 3.0] + [1e30] * 5
    t1 = 0.5 if order == 4 else 1.0 / math.sqrt(4.0 + 3.0)
    got, fell = step(order, criterion, 0.01 if criterion == "aarseth" else 0.1, 0.01,
                     n[: order])
    assert not fell
    assert got == pytest.approx(0.125 * scale * t1, rel=1e-14)


def test_host_predictor_matches_reference():
    rng = np.random.default_rng(1)
    x, v, a, j, s, c = (rng.normal(size=(7, 3)) for _ in range(6))
    h = rng.uniform(0, 0.1, 7)
    xp, vp, ap = predict_taylor(h, x, v, a, j, s, c)
    rx, rv, ra = reference.predict(0.0, -h, x, v, a, j, s, c)
    np.testing.assert_allclose(xp, rx, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(vp, rv, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(ap, ra, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("order, degree", [(4, 2), (6, 4)])
def test_corrector_exact_for_polynomial_force(order, degree):
    rng = np.random.default_rng(order)
    coeffs = rng.normal(size=(degree + 1, 3))
    lib = PolynomialLibrary(order, coeffs)
    x0 = rng.normal(size=(3, 3))
    v0 = rng.normal(size=(3, 3))
    dt = 2.0**-4
    it = HermiteIntegrator(lib, x0, v0, np.ones(3), order=order, dt_min=dt, dt_max=dt)
    it.evolve(1.0)
    # x(t) = x0 + v0 t + sum c_k t^(k+2) / ((k+1)(k+2))
    t = 1.0
    dx = sum(coeffs[k] * t ** (k + 2) / ((k + 1) * (k + 2)) for k in range(degree + 1))
    dv = sum(coeffs[k] * t ** (k + 1) / (k + 1) for k in range(degree + 1))
    np.testing.assert_allclose(it.x, x0 + v0 * t + dx, rtol=0, atol=1e-12)
    np.testing.assert_allclose(it.v, v0 + dv, rtol=0, atol=1e-12)
    np.testing.assert_allclose(it.snap[0], lib.deriv(2, t), rtol=0, atol=1e-9)
    np.testing.assert_allclose(it.crackle[0], lib.deriv(3, t), rtol=0, atol=1e-7)
    assert it.block_steps == 16 and it.steps == 48
    # the start's force calls (two at 6th order), one trial step, 16 block steps
    assert it.interactions == (16 + 1 + (2 if order == 6 else 1)) * 3 * 3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"eta": 0.0}, "eta"),
        ({"eta": -1.0}, "eta"),
        ({"eta": float("nan")}, "eta"),
        ({"dt_min": 2.0**-2, "dt_max": 2.0**-3}, "dt_min"),
        ({"dt_max": 0.1}, "dt_max must be a power of two"),
        ({"dt_min": 3e-8}, "dt_min must be a power of two"),
        ({"order": 5}, "order must be 4, 6 or 8"),
        ({"order": 2}, "order"),
        ({"criterion": "fastest"}, "criterion"),
        ({"eps2": -1.0}, "eps2"),
    ],
)
def test_bad_parameters(kwargs, match):
    x, v, m = plummer(8)
    lib = PolynomialLibrary(kwargs.get("order", 4), np.zeros((1, 3)))
    with pytest.raises(InputError, match=match):
        HermiteIntegrator(lib, x, v, m, **kwargs)


def test_bad_initial_conditions():
    x, v, m = plummer(8)
    lib = PolynomialLibrary(4, np.zeros((1, 3)))
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(InputError, match=r"^x: non-finite value in row 3"):
        HermiteIntegrator(lib, bad, v, m)
    with pytest.raises(InputError, match="^v: expected 8 rows"):
        HermiteIntegrator(lib, x, v[:5], m)
    with pytest.raises(InputError, match="^m: negative value"):
        HermiteIntegrator(lib, x, v, -m)
    with pytest.raises(InputError, match="^ids: must be distinct"):
        HermiteIntegrator(lib, x, v, m, ids=np.zeros(8, dtype=int))
    with pytest.raises(InputError, match="library has order 4"):
        HermiteIntegrator(lib, x, v, m, order=6)
    assert issubclass(InputError, ValueError)


# --------------------------------------------------------------------------- on the library


@pytest.mark.parametrize(
    "order, precision, bound",
    [(4, "double-single", 1e-7), (4, "double", 1e-7), (6, "double-single", 1e-7),
     (6, "double", 1e-10)],
)
def test_energy_conservation_plummer(backend, order, precision, bound):
    x, v, m = plummer(128, seed=1)
    with HermiteIntegrator({"backend": backend, "precision": precision}, x, v, m,
                           order=order, eps2=1e-4) as it:
        e0 = it.energy()
        it.evolve(0.25)
        e1 = it.energy()
        assert it.synchronised and it.time == 0.25
        assert it.block_steps > 50 and it.steps > it.block_steps
        assert it.interactions >= it.steps * 128
    err = abs((e1 - e0) / e0)
    assert err < bound, f"relative energy error {err:.3e} above {bound:g}"


def test_block_invariants(backend):
    import sapporo

    x, v, m = plummer(96, seed=4)
    with sapporo.Library(order=6, precision="double", backend=backend) as real:
        rec = RecordingLibrary(real)
        it = HermiteIntegrator(rec, x, v, m, order=6, eps2=1e-4, criterion="average",
                               dt_max=2.0**-4)
        rec.integrator = it
        seen: list[int] = []

        def check(integ: HermiteIntegrator) -> None:
            frac, _ = np.frexp(integ.dt)
            assert np.all(frac == 0.5)
            assert np.all((integ.dt >= integ.dt_min) & (integ.dt <= integ.dt_max))
            assert np.all(np.fmod(integ.t, integ.dt) == 0.0)
            assert np.all(integ.t <= integ.time)
            assert np.all(integ.t + integ.dt > integ.time)
            seen.append(int(np.sum(integ.t == integ.time)))

        it.evolve(0.25, callback=check, callback_steps=1)
        assert len(seen) == it.block_steps > 20
        assert sum(seen) == it.steps
        assert rec.blocks_checked == it.block_steps
        assert len(set(it.dt)) > 1  # really individual steps
        assert it.n_active_counts.sum() == it.block_steps
        assert np.dot(np.arange(it.n + 1), it.n_active_counts) == it.steps


@pytest.mark.parametrize("order, eta, pos_bound, e_bound",
                         [(4, 0.01, 1e-3, 1e-5), (6, 0.1, 1e-7, 1e-8)])
def test_kepler_orbit(backend, order, eta, pos_bound, e_bound):
    e = 0.5
    x, v, m = kepler_ic(e)
    t_end = 10 * 2 * math.pi  # ten orbits (a = 1, M = 1)
    with HermiteIntegrator({"backend": backend, "precision": "double"}, x, v, m,
                           order=order, eta=eta) as it:
        e0 = it.energy()
        assert e0 == pytest.approx(-0.125, rel=1e-14)  # -m1 m2 / (2a)
        it.evolve(t_end)
        rel = it.x[0] - it.x[1]
        expected = kepler_relative_position(it.time, e)
        assert np.linalg.norm(rel - expected) < pos_bound
        assert abs((it.energy() - e0) / e0) < e_bound
        assert np.all(it.t == it.time)
        assert it.time == pytest.approx(t_end, abs=DT_MIN)


@pytest.mark.parametrize("order", [4, 6])
def test_resume_equals_uninterrupted(backend, order, tmp_path):
    x, v, m = plummer(64, seed=7)
    opts = {"backend": backend, "precision": "double-single"}
    kw = {"order": order, "eps2": 1e-4, "criterion": "average"}

    with HermiteIntegrator(opts, x, v, m, **kw) as ref:
        ref.evolve(0.125)
        ref.evolve(0.25)
        want = ref.state()

    with HermiteIntegrator(opts, x, v, m, **kw) as first:
        first.evolve(0.125)
        path = save(tmp_path / "half.npz", first.state())
    with HermiteIntegrator.from_snapshot(load(path), {"backend": backend}) as second:
        assert second.precision == "double-single"
        second.evolve(0.25)
        got = second.state()

    for name in ("x", "v", "a", "jerk", "snap", "crackle", "t", "dt", "pot"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.counters["steps"] == want.counters["steps"]
    assert got.counters["block_steps"] == want.counters["block_steps"]
    np.testing.assert_array_equal(got.n_active_counts, want.n_active_counts)


def test_interrupt_mid_run_and_resume(backend, tmp_path):
    x, v, m = plummer(48, seed=2)
    opts = {"backend": backend, "precision": "double"}
    with HermiteIntegrator(opts, x, v, m, order=6, eps2=1e-4) as ref:
        ref.evolve(0.25)
        want = ref.state()

    calls = []

    def stop_after_30(integ: HermiteIntegrator) -> None:
        calls.append(integ.time)
        if len(calls) == 30:
            integ.request_stop()

    with HermiteIntegrator(opts, x, v, m, order=6, eps2=1e-4) as it:
        with pytest.raises(KeyboardInterrupt):
            it.evolve(0.25, callback=stop_after_30, callback_steps=1)
        assert it.interrupted and len(calls) == 30 and it.block_steps == 30
        assert not it.synchronised and 0 < it.time < 0.25
        name = "cut.h5" if h5py_available() else "cut.npz"
        path = save(tmp_path / name, it.state())
    with HermiteIntegrator.from_snapshot(load(path), opts) as resumed:
        assert resumed.time == calls[-1]
        resumed.evolve(0.25)
        got = resumed.state()
    np.testing.assert_array_equal(got.x, want.x)
    np.testing.assert_array_equal(got.v, want.v)
    np.testing.assert_array_equal(got.dt, want.dt)
    assert got.counters["steps"] == want.counters["steps"]


@pytest.mark.parametrize("order, degree", [(4, 3), (6, 5), (8, 7)])
def test_interpolated_derivatives_exact_for_polynomial_force(order, degree):
    """The derivatives the core interpolates from a, j (, s, c) at both ends of a step are
    exact when the force is a polynomial of the interpolant's degree: 4th order a cubic
    (snap and crackle, kept in the state), 6th order a quintic (crackle), 8th order a degree-7
    polynomial (the 4th and 5th derivatives, kept for the predictor)."""
    rng = np.random.default_rng(degree)
    coeffs = rng.normal(size=(degree + 1, 3))
    lib = PolynomialLibrary(order, coeffs)
    dt = 2.0**-4
    it = HermiteIntegrator(lib, rng.normal(size=(2, 3)), rng.normal(size=(2, 3)), np.ones(2),
                           order=order, dt_min=dt, dt_max=dt)
    for t in (0.25, 0.5):
        it.evolve(t)
        checks = [(it.crackle, 3)] + ([(it.snap, 2)] if order == 4 else [])
        if order == 8:
            checks += [(it.pop, 4), (it.d5, 5)]
        for got, k in checks:
            want = np.tile(lib.deriv(k, t), (2, 1))
            np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-8,
                                       err_msg=f"derivative {k}, t={t}")


@pytest.mark.parametrize("order, criterion, used", [
    (4, "aarseth", (2, 3)), (4, "average", (2, 3)),
    (6, "aarseth", (3,)), (6, "generalised", (3, 4, 5)),
])
def test_unresolved_derivatives_take_the_fallback(order, criterion, used):
    """A derivative the criterion uses counts as unresolved below twice its force-noise
    bound: just below (1.9x) the core falls back, just above (2.1x) it does not; the
    derivatives the criterion does not use never count."""
    noise, tau = 1e-3, 0.01
    n0 = [1.0, 2.0, 4.0][: 3 if order == 6 else 2] + [0.0] * (2 if order == 4 else 1)
    n_end = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0][: 6 if order == 6 else 4]
    # the error bounds of the interpolated derivatives (docs/integrator.md)
    da, dj = noise * 1.0, noise * 2.0
    if order == 4:
        s3 = 3.0 * (dj + da / tau) / tau**2
        bounds = {2: dj / tau + tau * s3, 3: s3}
    else:
        ds = noise * 4.0
        s4 = 3.0 * (ds + dj / tau) / tau**2
        s5 = 15.0 * (ds * tau**2 + 3.0 * dj * tau + 3.0 * da) / tau**5
        s3 = ds / tau + s5 * tau**2 / 6.0
        bounds = {3: s3 + tau * s4 + 0.5 * tau**2 * s5, 4: s4 + tau * s5, 5: s5}
    resolved = {k: 10.0 * 2.0 * b for k, b in bounds.items()}
    eta = 0.01 if criterion == "aarseth" else 0.1
    for k in bounds:
        for factor, expect in ((1.9, k in used), (2.1, False)):
            n = list(n_end)
            for q, b in resolved.items():
                n[q] = b
            n[k] = factor * bounds[k]
            _, fell = step(order, criterion, eta, 0.01, n, noise=noise, tau=tau, n0=n0)
            assert fell is expect, (k, factor)
    n = list(n_end)
    for q, b in resolved.items():
        n[q] = b
    assert step(order, criterion, eta, 0.01, n, noise=noise, tau=tau, n0=n0)[1] is False


def test_force_noise_switches_steps_to_the_fallback():
    """With a force noise far above the true one the interpolated derivatives are not
    trusted: steps come from the fallback (counted); with none, never."""
    x, v, m = plummer(64, seed=5)
    counts = {}
    for noise in (0.0, 0.1):
        with HermiteIntegrator({"precision": "double"}, x, v, m, order=4, eps2=1e-4,
                               force_noise=noise) as it:
            it.evolve(2.0**-5)
            counts[noise] = it.fallback_steps
    assert counts[0.0] == 0 and counts[0.1] > 0
