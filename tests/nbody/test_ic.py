"""Star-cluster initial conditions (``sapporo.nbody.ic``): no device needed."""

from __future__ import annotations

import numpy as np
import pytest

from sapporo import InputError, reference
from sapporo.nbody.ic import (
    kinetic_energy,
    king,
    king_model,
    lagrangian_radii,
    plummer,
    potential_energy,
    star_cluster,
    to_henon_units,
    to_nbody_units,
    two_component_counts,
)


def test_plummer_reproducible_and_in_henon_units():
    x1, v1, m1 = plummer(2048, seed=5)
    x2, v2, m2 = plummer(2048, seed=5)
    x3, _, _ = plummer(2048, seed=6)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(v1, v2)
    assert not np.array_equal(x1, x3)
    assert m1.sum() == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose(m1 @ x1, 0.0, atol=1e-15)
    np.testing.assert_allclose(m1 @ v1, 0.0, atol=1e-15)
    e = kinetic_energy(v1, m1) + potential_energy(x1, m1)
    assert e == pytest.approx(-0.25, rel=0.05)  # statistically Henon units
    # half-mass radius of a Plummer sphere in Henon units: 0.7686
    assert lagrangian_radii(x1, m1, (0.5,))[0] == pytest.approx(0.7686, rel=0.06)
    np.testing.assert_array_equal(x1, reference.plummer(2048, 5)[0])


def test_potential_energy_matches_pair_sum():
    x, _, m = plummer(50, seed=1)
    w = 0.0
    for i in range(50):
        for j in range(i + 1, 50):
            w -= m[i] * m[j] / np.sqrt(np.sum((x[i] - x[j]) ** 2) + 1e-4)
    assert potential_energy(x, m, eps2=1e-4) == pytest.approx(w, rel=1e-13)


def test_henon_scaling_exact():
    rng = np.random.default_rng(0)
    x, v, m = rng.normal(size=(300, 3)), rng.normal(size=(300, 3)), rng.uniform(1, 2, 300)
    x, v, m = to_henon_units(x, v, m)
    assert m.sum() == pytest.approx(1.0, rel=1e-14)
    assert potential_energy(x, m) == pytest.approx(-0.5, rel=1e-12)
    assert kinetic_energy(v, m) == pytest.approx(0.25, rel=1e-12)
    np.testing.assert_allclose(m @ x, 0.0, atol=1e-14)


def test_two_component_cluster():
    n, f, mu = 1000, 0.3, 5.0
    x, v, m = star_cluster(n, seed=2, heavy_fraction=f, mass_ratio=mu)
    light, heavy = m.min(), m.max()
    assert heavy / light == pytest.approx(mu, rel=1e-12)
    n_h, _ = two_component_counts(n, f, mu)
    assert np.sum(m == heavy) == n_h
    assert m[m == heavy].sum() == pytest.approx(f, abs=0.005)
    assert m.sum() == pytest.approx(1.0, rel=1e-13)
    e = kinetic_energy(v, m) + potential_energy(x, m)
    assert e == pytest.approx(-0.25, rel=1e-12)
    assert 2 * kinetic_energy(v, m) == pytest.approx(-potential_energy(x, m), rel=1e-12)
    again = star_cluster(n, seed=2, heavy_fraction=f, mass_ratio=mu)
    np.testing.assert_array_equal(again[2], m)
    np.testing.assert_array_equal(again[0], x)


def test_central_black_hole():
    x, v, m = star_cluster(513, seed=3, bh_mass=0.01)
    assert m.size == 513 and m[-1] == pytest.approx(0.01, rel=1e-12)
    np.testing.assert_array_equal(x[-1], 0.0)
    np.testing.assert_array_equal(v[-1], 0.0)
    assert np.all(m[:-1] == pytest.approx((1 - 0.01) / 512, rel=1e-12))
    assert kinetic_energy(v, m) + potential_energy(x, m) == pytest.approx(-0.25, rel=1e-12)
    x2, v2, m2 = star_cluster(201, seed=3, bh_mass=0.05, heavy_fraction=0.2, mass_ratio=10)
    assert m2[-1] == pytest.approx(0.05, rel=1e-12)
    assert len(np.unique(m2[:-1])) == 2


def test_lagrangian_radii_of_shells():
    # 10 particles of equal mass at radii 1..10: 10 % inside r = 1, 50 % at r = 5.
    x = np.zeros((10, 3))
    x[:, 0] = np.arange(1, 11)
    m = np.full(10, 0.1)
    r = lagrangian_radii(x, m, (0.1, 0.5, 0.9, 1.0), centre=np.zeros(3))
    np.testing.assert_allclose(r, [1, 5, 9, 10])


@pytest.mark.parametrize(
    "kwargs, match",
    [({"n": 0}, "n must be"), ({"n": 10, "heavy_fraction": 1.0}, "heavy_fraction"),
     ({"n": 10, "heavy_fraction": -0.1}, "heavy_fraction"), ({"n": 10, "bh_mass": 1.5}, "bh_mass"),
     ({"n": 10, "heavy_fraction": 0.2, "mass_ratio": 0.5}, "mass_ratio"),
     ({"n": 1, "bh_mass": 0.1}, "too small"), ({"n": 2, "bh_mass": 0.5}, "too small"),
     ({"n": 2, "bh_mass": 0.5, "heavy_fraction": 0.3}, "too small"),
     ({"n": 1, "heavy_fraction": 0.3}, "too small"),
     ({"n": 16, "seed": 1.5}, "seed"), ({"n": 16, "seed": -1}, "seed"),
     ({"n": 16, "seed": True}, "seed"), ({"n": 16, "seed": "1"}, "seed"),
     ({"n": 16, "seed": -1, "bh_mass": 0.1}, "seed")],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(InputError, match=match):
        star_cluster(**kwargs)


@pytest.mark.parametrize("kwargs", [{"n": 3, "bh_mass": 0.5}, {"n": 2, "heavy_fraction": 0.3},
                                    {"n": 3, "bh_mass": 0.5, "heavy_fraction": 0.3}])
def test_smallest_clusters_are_finite(kwargs):
    x, v, m = star_cluster(**kwargs)
    assert np.all(np.isfinite(x)) and np.all(np.isfinite(v)) and m.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("fn", [plummer, reference.plummer, reference.uniform_cube])
@pytest.mark.parametrize("seed", [-1, 1.5, True, None])
def test_seed_must_be_a_non_negative_integer(fn, seed):
    with pytest.raises(InputError, match="seed"):
        fn(16, seed=seed)
    fn(16, seed=np.int64(7))  # NumPy integers are fine


@pytest.mark.parametrize("n", [2, 7, 500])
def test_plummer_exact_scaling_gives_standard_units(n):
    x, v, m = plummer(n, seed=4, exact=True)
    k, w = kinetic_energy(v, m), potential_energy(x, m)
    assert k + w == pytest.approx(-0.25, rel=1e-13, abs=0.0)
    assert k == pytest.approx(0.25, rel=1e-13) and w == pytest.approx(-0.5, rel=1e-13)
    np.testing.assert_allclose(m @ x, 0.0, atol=1e-15)
    np.testing.assert_allclose(m @ v, 0.0, atol=1e-15)
    # The same particles as the default, only moved and rescaled.
    x0, v0, m0 = plummer(n, seed=4)
    np.testing.assert_allclose(m, m0, rtol=1e-15)
    scale = np.linalg.norm(x[1] - x[0]) / np.linalg.norm(x0[1] - x0[0])
    np.testing.assert_allclose(x - x[0], scale * (x0 - x0[0]), rtol=1e-12, atol=1e-15)


def test_plummer_default_is_analytic_and_off_by_the_sampling_noise():
    x, v, m = plummer(500, seed=4)
    e = kinetic_energy(v, m) + potential_energy(x, m)
    assert e != -0.25 and abs(e + 0.25) < 0.1  # a few 1/sqrt(N)
    np.testing.assert_array_equal(x, reference.plummer(500, 4)[0])


def test_star_cluster_exact_option():
    x, v, m = star_cluster(300, seed=2, exact=True)
    assert kinetic_energy(v, m) + potential_energy(x, m) == pytest.approx(-0.25, rel=1e-13)
    np.testing.assert_array_equal(x, plummer(300, seed=2, exact=True)[0])
    with pytest.raises(InputError, match="n >= 2"):
        plummer(1, exact=True)


# ------------------------------------------------------------------------ King models


@pytest.mark.parametrize("w0, c", [(3, 0.67), (6, 1.26), (7, 1.53), (9, 2.12), (12, 2.74)])
def test_king_concentration_as_tabulated(w0, c):
    # c = log10(r_t / r0), the values tabulated for King (1966) models to two decimals
    assert king_model(w0).concentration == pytest.approx(c, abs=0.006)


@pytest.mark.parametrize("w0", [1, 6, 12])
def test_king_model_is_in_henon_units_and_in_virial_equilibrium(w0):
    model = king_model(w0)
    assert model.r[0] == 0.0 and model.r[-1] == model.r_tidal
    assert np.all(np.diff(model.r) > 0) and np.all(np.diff(model.mass) > 0)
    assert model.mass[-1] == 1.0 and model.w[0] == w0 and model.w[-1] == 0.0
    assert model.concentration == pytest.approx(np.log10(model.r_tidal / model.r_core))
    # Potential energy -int M(r) / r dM = -1/2 (the model solution uses another formula).
    mid_m = 0.5 * (model.mass[1:] + model.mass[:-1])
    mid_r = 0.5 * (model.r[1:] + model.r[:-1])
    assert -np.sum(mid_m / mid_r * np.diff(model.mass)) == pytest.approx(-0.5, rel=1e-4)
    # Kinetic energy from the distribution function at each radius: 1/4, the virial value.
    # <v^2> = int v^4 f dv / int v^2 f dv with f = exp(W - v^2/2) - 1 (sigma = 1).
    q = np.linspace(0.0, 1.0, 401)[None, :]
    vmax = np.sqrt(2.0 * model.w)[:, None]
    f = np.expm1(model.w[:, None] - 0.5 * (q * vmax) ** 2)

    def integral(y: np.ndarray) -> np.ndarray:  # trapezoid rule over q
        return np.sum(0.5 * (y[:, 1:] + y[:, :-1]), axis=1) * (q[0, 1] - q[0, 0])

    v2 = vmax[:, 0] ** 2 * integral(q**4 * f) / np.maximum(integral(q**2 * f), 1e-300)
    kinetic = 0.5 * model.sigma**2 * np.sum(0.5 * (v2[1:] + v2[:-1]) * np.diff(model.mass))
    assert kinetic == pytest.approx(0.25, rel=1e-3)


def test_king_sample_follows_the_model():
    """W0 = 6, N = 4096: the cumulative mass profile is within the sampling noise of the
    model's own solution (Kolmogorov-Smirnov, 99 % bound 1.63 / sqrt(N)), the virial ratio
    is 1/2 within 2 % and the centre of mass is at rest at the origin."""
    n = 4096
    model = king_model(6.0)
    x, v, m = king(n, 6.0, seed=0)
    r = np.sort(np.linalg.norm(x, axis=1))
    cdf = np.interp(r, model.r, model.mass)
    steps = np.arange(n + 1) / n
    distance = max(np.max(steps[1:] - cdf), np.max(cdf - steps[:-1]))
    assert distance < 1.63 / np.sqrt(n)
    assert r[-1] <= model.r_tidal
    k, w = kinetic_energy(v, m), potential_energy(x, m)
    assert k / -w == pytest.approx(0.5, rel=0.02)
    assert k + w == pytest.approx(-0.25, rel=0.05)
    assert m.sum() == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose(m @ x, 0.0, atol=1e-15)
    np.testing.assert_allclose(m @ v, 0.0, atol=1e-15)
    again = king(n, 6.0, seed=0)
    np.testing.assert_array_equal(again[0], x)
    np.testing.assert_array_equal(again[1], v)


def test_king_speeds_below_escape():
    model = king_model(3.0)
    x, v, _ = king(2000, 3.0, seed=2)
    r = np.linalg.norm(x, axis=1)
    psi = np.interp(r, model.r, model.w) * model.sigma**2
    # the centre-of-mass shift is tiny; allow for it
    assert np.all(np.sum(v * v, axis=1) <= 2.0 * psi + 1e-3)


def test_king_exact_and_components():
    x, v, m = king(300, 5.0, seed=3, exact=True)
    assert kinetic_energy(v, m) == pytest.approx(0.25, rel=1e-13)
    assert potential_energy(x, m) == pytest.approx(-0.5, rel=1e-13)
    np.testing.assert_array_equal(star_cluster(300, 3, exact=True, model="king", w0=5.0)[0], x)
    x, v, m = star_cluster(301, seed=3, bh_mass=0.01, heavy_fraction=0.2, mass_ratio=5,
                           model="king", w0=5.0)
    assert m[-1] == pytest.approx(0.01) and len(np.unique(m[:-1])) == 2
    assert kinetic_energy(v, m) + potential_energy(x, m) == pytest.approx(-0.25, rel=1e-12)


@pytest.mark.parametrize("w0", [0.5, 12.5, float("nan"), "6", True])
def test_king_w0_range(w0):
    with pytest.raises(InputError, match="W0"):
        king_model(w0)
    with pytest.raises(InputError, match="W0"):
        star_cluster(16, model="king", w0=w0)


def test_unknown_model():
    with pytest.raises(InputError, match="model"):
        star_cluster(16, model="hernquist")


def test_to_nbody_units_keeps_the_virial_ratio():
    rng = np.random.default_rng(5)
    x, v, m = rng.normal(size=(200, 3)) * 4, rng.normal(size=(200, 3)) * 0.01, rng.uniform(
        1, 2, 200)
    g = 2.5
    q = kinetic_energy(v - m @ v / m.sum(), m) / -(g * potential_energy(x, m))
    xs, vs, ms = to_nbody_units(x, v, m, g=g)
    k, w = kinetic_energy(vs, ms), potential_energy(xs, ms)
    assert k + w == pytest.approx(-0.25, rel=1e-12) and k / -w == pytest.approx(q, rel=1e-12)
    with pytest.raises(InputError, match="not bound"):
        to_nbody_units(x, v * 1e3, m)
