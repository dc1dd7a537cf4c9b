"""Tests of the float64 NumPy oracle, ``sapporo.reference``, on its own."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from sapporo.reference import (
    ReferenceForces,
    forces,
    plummer,
    predict,
    relative_vector_error,
    uniform_cube,
)

# --------------------------------------------------------------------------- helpers


def loop_forces(xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, eps2, h2):
    """Plain scalar double loop with ``math``; sums with ``math.fsum``."""
    out = {k: [] for k in (
        "acc", "jerk", "snap", "pot", "acc_abs", "jerk_abs", "snap_abs", "pot_abs",
        "nn_index", "nn_r2", "neighbours", "neighbour_r2")}
    for i in range(len(xi)):
        terms = {"acc": [], "jerk": [], "snap": [], "pot": []}
        nn_id, nn_r2 = -1, math.inf
        nbrs = []
        for j in range(len(xj)):
            if idx_j[j] == idx_i[i]:
                continue
            rx, ry, rz = (float(xj[j][k]) - float(xi[i][k]) for k in range(3))
            vx, vy, vz = (float(vj[j][k]) - float(vi[i][k]) for k in range(3))
            ax, ay, az = (float(aj[j][k]) - float(ai[i][k]) for k in range(3))
            r2 = rx * rx + ry * ry + rz * rz
            if r2 < nn_r2 or (r2 == nn_r2 and idx_j[j] < nn_id):
                nn_id, nn_r2 = int(idx_j[j]), r2
            if r2 < h2[i]:
                nbrs.append((int(idx_j[j]), r2))
            m = float(mj[j])
            R2 = r2 + eps2
            R = math.sqrt(R2)
            mR3 = m / (R2 * R)
            acc = (mR3 * rx, mR3 * ry, mR3 * rz)
            alpha = (rx * vx + ry * vy + rz * vz) / R2
            jerk = tuple(
                mR3 * vk - 3 * alpha * ak for vk, ak in zip((vx, vy, vz), acc, strict=True)
            )
            beta = (vx * vx + vy * vy + vz * vz + rx * ax + ry * ay + rz * az) / R2 + alpha**2
            snap = tuple(
                mR3 * ak - 6 * alpha * jk - 3 * beta * ck
                for ak, jk, ck in zip((ax, ay, az), jerk, acc, strict=True)
            )
            terms["acc"].append(acc)
            terms["jerk"].append(jerk)
            terms["snap"].append(snap)
            terms["pot"].append(-m / R)
        for name in ("acc", "jerk", "snap"):
            out[name].append([math.fsum(t[k] for t in terms[name]) for k in range(3)])
            out[name + "_abs"].append(math.fsum(math.hypot(*t) for t in terms[name]))
        out["pot"].append(math.fsum(terms["pot"]))
        out["pot_abs"].append(-math.fsum(terms["pot"]))
        out["nn_index"].append(nn_id)
        out["nn_r2"].append(nn_r2)
        nbrs.sort()
        out["neighbours"].append([p[0] for p in nbrs])
        out["neighbour_r2"].append([p[1] for p in nbrs])
    return {
        k: (val if k.startswith("neighbour") else np.array(val, dtype=float))
        for k, val in out.items()
    }


def mixed_system(seed=3):
    """36 j-particles with shuffled ids; 14 of them plus 2 strangers as i-particles."""
    rng = np.random.default_rng(seed)
    xj, vj, _ = uniform_cube(36, seed=seed)
    mj = rng.uniform(0.5, 2.0, 36) / 36
    aj = rng.normal(0.0, 0.3, (36, 3))
    idx_j = rng.permutation(36) + 1000
    pick = rng.choice(36, 14, replace=False)
    xi = np.vstack([xj[pick], rng.uniform(-1, 1, (2, 3))])
    vi = np.vstack([vj[pick], rng.normal(0, 0.1, (2, 3))])
    ai = np.vstack([aj[pick], rng.normal(0, 0.3, (2, 3))])
    idx_i = np.concatenate([idx_j[pick], [5000, 5001]])
    h2 = rng.uniform(0.05, 1.0, 16)
    return xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, h2


def all_self(x, v, m, eps2, order=4, **kw):
    ids = np.arange(len(x))
    return forces(x, v, ids, x, v, m, ids, eps2, order=order, **kw)


# --------------------------------------------------------------------------- vs double loop


@pytest.mark.parametrize("order", [2, 4, 6])
@pytest.mark.parametrize("eps2", [0.01, 0.0])
def test_matches_python_double_loop(order, eps2):
    xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, h2 = mixed_system()
    ref = loop_forces(xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, eps2, h2)
    kw = {"ai": ai, "aj": aj} if order == 6 else {}
    f = forces(xi, vi, idx_i, xj, vj, mj, idx_j, eps2, order=order, h2=h2, **kw)

    assert isinstance(f, ReferenceForces)
    # The self-excluded i-particles must have been excluded (not NaN), with eps2 = 0 too.
    assert np.all(np.isfinite(f.acc)) and np.all(np.isfinite(f.pot))
    tol = 1e-13
    assert np.max(relative_vector_error(f.acc, ref["acc"], ref["acc_abs"])) < tol
    assert np.max(relative_vector_error(f.pot, ref["pot"], ref["pot_abs"])) < tol
    np.testing.assert_allclose(f.acc_abs, ref["acc_abs"], rtol=tol)
    np.testing.assert_allclose(f.pot_abs, ref["pot_abs"], rtol=tol)
    if order >= 4:
        assert np.max(relative_vector_error(f.jerk, ref["jerk"], ref["jerk_abs"])) < tol
        np.testing.assert_allclose(f.jerk_abs, ref["jerk_abs"], rtol=tol)
    else:
        assert f.jerk is None and f.jerk_abs is None
    if order == 6:
        assert np.max(relative_vector_error(f.snap, ref["snap"], ref["snap_abs"])) < tol
        np.testing.assert_allclose(f.snap_abs, ref["snap_abs"], rtol=tol)
    else:
        assert f.snap is None and f.snap_abs is None

    # Nearest neighbours and neighbour lists: exactly equal, r^2 bit for bit.
    assert f.nn_index.dtype == np.int64
    np.testing.assert_array_equal(f.nn_index, ref["nn_index"])
    np.testing.assert_array_equal(f.nn_r2, ref["nn_r2"])
    assert len(f.neighbours) == len(f.neighbour_r2) == len(xi)
    n_total = 0
    for got, got_r2, want, want_r2 in zip(
        f.neighbours, f.neighbour_r2, ref["neighbours"], ref["neighbour_r2"], strict=True
    ):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_r2, want_r2)
        n_total += len(want)
    assert n_total > 30  # the lists are not trivially empty
    # The nearest-neighbour ids are ids, not positions in the j arrays.
    assert np.all(f.nn_index >= 1000)


def test_scalar_h2_and_no_h2():
    xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, _ = mixed_system(seed=8)
    ref = loop_forces(xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, 0.0, np.full(16, 0.3))
    f = forces(xi, vi, idx_i, xj, vj, mj, idx_j, 0.0, h2=0.3)
    for got, want in zip(f.neighbours, ref["neighbours"], strict=True):
        np.testing.assert_array_equal(got, want)
    g = forces(xi, vi, idx_i, xj, vj, mj, idx_j, 0.0)
    assert g.neighbours is None and g.neighbour_r2 is None
    np.testing.assert_array_equal(g.acc, f.acc)


# --------------------------------------------------------------------------- derivatives


def five_point_first(f, h):
    return (-f(2 * h) + 8 * f(h) - 8 * f(-h) + f(-2 * h)) / (12 * h)


def five_point_second(f, h):
    return (-f(2 * h) + 16 * f(h) - 30 * f(0.0) + 16 * f(-h) - f(-2 * h)) / (12 * h * h)


@pytest.mark.parametrize("eps2", [0.05, 0.0])
def test_jerk_and_snap_are_time_derivatives(eps2):
    """Along x(t) = x + v t + a t^2/2 + j t^3/6 (via predict), jerk = acc', snap = acc''.

    Five-point stencils, h = 1e-3: truncation ~h^4, round-off ~1e-16/h^2 (observed:
    ~4e-12 for jerk, ~2e-11 for snap from jerk, ~6e-10 for snap from acc).  Tolerances,
    relative to the sum of magnitudes of the pair terms: 1e-10, 1e-9 and 1e-8.
    """
    rng = np.random.default_rng(11)
    n = 5
    # Well-separated bodies (separations >~ 1), so the time scales are ~1.
    corners = [[0, 0, 0], [1.5, 0, 0], [0, 1.5, 0], [0, 0, 1.5], [1.2, 1.2, 1.2]]
    x = np.array(corners, dtype=float) + rng.uniform(-0.2, 0.2, (n, 3))
    v = rng.normal(0, 0.5, (n, 3))
    a = rng.normal(0, 0.5, (n, 3))
    jrk = rng.normal(0, 0.5, (n, 3))
    m = rng.uniform(0.5, 1.5, n)
    ids = np.arange(n) + 7

    def at(t, order):
        xp, vp, ap = predict(t, 0.0, x, v, a, jrk)
        return forces(xp, vp, ids, xp, vp, m, ids, eps2, order=order, ai=ap, aj=ap)

    f0 = at(0.0, 6)
    h = 1e-3
    jerk_fd = five_point_first(lambda t: at(t, 2).acc, h)
    snap_fd = five_point_second(lambda t: at(t, 2).acc, h)
    snap_fd_j = five_point_first(lambda t: at(t, 4).jerk, h)
    assert np.max(relative_vector_error(jerk_fd, f0.jerk, f0.jerk_abs)) < 1e-10
    assert np.max(relative_vector_error(snap_fd_j, f0.snap, f0.snap_abs)) < 1e-9
    assert np.max(relative_vector_error(snap_fd, f0.snap, f0.snap_abs)) < 1e-8
    # A wrong sign or factor in a term would be far above these tolerances.
    assert np.min(f0.jerk_abs) > 0.1 and np.min(f0.snap_abs) > 0.1


@pytest.mark.parametrize("eps2", [0.05, 0.0])
def test_acc_is_minus_gradient_of_potential(eps2):
    """acc_i = -grad_{x_i} pot_i; central differences with h = 1e-5, tolerance 1e-8."""
    x, v, m = uniform_cube(8, seed=4)
    ids = np.arange(8)
    f = forces(x, v, ids, x, v, m, ids, eps2, order=2)
    h = 1e-5
    grad = np.zeros((8, 3))
    for k in range(3):
        step = np.zeros(3)
        step[k] = h
        up = forces(x + step, v, ids, x, v, m, ids, eps2, order=2).pot
        down = forces(x - step, v, ids, x, v, m, ids, eps2, order=2).pot
        grad[:, k] = (up - down) / (2 * h)
    assert np.max(relative_vector_error(-grad, f.acc, f.acc_abs)) < 1e-8


# --------------------------------------------------------------------------- conservation


@pytest.mark.parametrize("eps2", [1e-4, 0.0])
def test_momentum_and_angular_momentum_conservation(eps2):
    x, v, m = plummer(256, seed=5)
    a0 = all_self(x, v, m, eps2, order=2).acc
    f = all_self(x, v, m, eps2, order=6, ai=a0, aj=a0)
    for name in ("acc", "jerk", "snap"):
        val = getattr(f, name)
        total = np.linalg.norm(m @ val)
        scale = np.sum(m * np.linalg.norm(val, axis=1))
        assert total < 1e-13 * scale, name
    torque = np.linalg.norm(m @ np.cross(x, f.acc))
    assert torque < 1e-13 * np.sum(m * np.linalg.norm(x, axis=1) * np.linalg.norm(f.acc, axis=1))
    # The potential energy counts every pair twice with the same value.
    pairs = 0.0
    for i in range(len(x)):
        d = np.sqrt(np.sum((x[i + 1:] - x[i]) ** 2, axis=1) + eps2)
        pairs -= np.sum(m[i] * m[i + 1:] / d)
    assert abs(0.5 * np.sum(m * f.pot) - pairs) < 1e-13 * abs(pairs)


# --------------------------------------------------------------------------- two body


@pytest.mark.parametrize("eps2", [0.0, 0.3])
def test_two_body_known_answers(eps2):
    d, m0, m1 = 1.5, 2.0, 3.0
    x = np.array([[0.0, 0.0, 0.0], [d, 0.0, 0.0]])
    u, w = 0.7, -0.4  # radial and tangential relative velocity of particle 1
    v = np.array([[0.0, 0.0, 0.0], [u, w, 0.0]])
    m = np.array([m0, m1])
    ids = np.array([10, 20])
    R2 = d * d + eps2
    R3 = R2**1.5
    f = forces(x, v, ids, x, v, m, ids, eps2, order=4, h2=10.0)

    np.testing.assert_allclose(f.acc[0], [m1 * d / R3, 0, 0], rtol=1e-15, atol=0)
    np.testing.assert_allclose(f.acc[1], [-m0 * d / R3, 0, 0], rtol=1e-15, atol=0)
    np.testing.assert_allclose(f.pot, [-m1 / math.sqrt(R2), -m0 / math.sqrt(R2)], rtol=1e-15)
    np.testing.assert_allclose(f.acc_abs, [m1 * d / R3, m0 * d / R3], rtol=1e-15)
    np.testing.assert_allclose(f.pot_abs, -f.pot, rtol=0)
    # jerk = m v / R^3 - 3 (r.v / R^2) m r / R^3 with r = d x, v = (u, w, 0)
    jx = m1 * u / R3 - 3 * (d * u / R2) * m1 * d / R3
    np.testing.assert_allclose(f.jerk[0], [jx, m1 * w / R3, 0], rtol=1e-14, atol=0)
    np.testing.assert_allclose(f.jerk[1], [-jx * m0 / m1, -m0 * w / R3, 0], rtol=1e-14, atol=0)
    if eps2 == 0.0:
        np.testing.assert_allclose(f.acc[0, 0], m1 / d**2, rtol=1e-15)
        np.testing.assert_allclose(f.jerk[0, 0], -2 * m1 * u / d**3, rtol=1e-14)
    np.testing.assert_array_equal(f.nn_index, [20, 10])
    np.testing.assert_array_equal(f.nn_r2, [d * d, d * d])
    assert [list(n) for n in f.neighbours] == [[20], [10]]


@pytest.mark.parametrize("eps2", [0.0, 0.3])
def test_two_body_snap_known_answers(eps2):
    """At rest with relative acceleration (p, q, 0) and r = (d, 0, 0).

    snap_x = m p (1/R^3 - 3 d^2/R^5), snap_y = m q / R^3.
    """
    d, m1 = 2.0, 3.0
    p, q = 0.5, -0.25
    x = np.array([[0.0, 0.0, 0.0], [d, 0.0, 0.0]])
    v = np.zeros((2, 3))
    acc = np.array([[0.0, 0.0, 0.0], [p, q, 0.0]])
    m = np.array([1.0, m1])
    ids = np.array([0, 1])
    R2 = d * d + eps2
    f = forces(x, v, ids, x, v, m, ids, eps2, order=6, ai=acc, aj=acc)
    want = [m1 * p * (R2**-1.5 - 3 * d * d * R2**-2.5), m1 * q * R2**-1.5, 0.0]
    np.testing.assert_allclose(f.snap[0], want, rtol=1e-14, atol=0)
    np.testing.assert_array_equal(f.jerk, np.zeros((2, 3)))
    if eps2 == 0.0:
        np.testing.assert_allclose(f.snap[0, 0], -2 * m1 * p / d**3, rtol=1e-14)


# --------------------------------------------------------------------------- chunking


def test_chunking_does_not_change_results():
    x, v, m = plummer(150, seed=2)
    a = all_self(x, v, m, 1e-3, order=2).acc
    ids = np.arange(150) * 3
    common = dict(order=6, ai=a[:100], aj=a, h2=0.2)
    one = forces(x[:100], v[:100], ids[:100], x, v, m, ids, 1e-3, chunk_elements=10**9, **common)
    for chunk in (1, 150 * 7, 150 * 33 + 5):
        several = forces(
            x[:100], v[:100], ids[:100], x, v, m, ids, 1e-3, chunk_elements=chunk, **common
        )
        for name in ("acc", "jerk", "snap"):
            assert np.max(relative_vector_error(
                getattr(several, name), getattr(one, name), getattr(one, name + "_abs")
            )) <= 1e-15
        for name in ("pot", "acc_abs", "jerk_abs", "snap_abs", "pot_abs"):
            np.testing.assert_allclose(getattr(several, name), getattr(one, name), rtol=1e-15)
        np.testing.assert_array_equal(several.nn_index, one.nn_index)
        np.testing.assert_array_equal(several.nn_r2, one.nn_r2)
        for p, q in zip(several.neighbours, one.neighbours, strict=True):
            np.testing.assert_array_equal(p, q)


# --------------------------------------------------------------------------- predict


def test_predict_against_explicit_polynomial():
    rng = np.random.default_rng(7)
    n = 6
    x, v, a, j, s, c = (rng.normal(0, 1, (n, 3)) for _ in range(6))
    t = 0.9
    for tj in (0.25, rng.uniform(0, 0.8, n)):
        xp, vp, ap = predict(t, tj, x, v, a, j, s, c)
        assert xp.shape == vp.shape == ap.shape == (n, 3)
        assert xp.dtype == vp.dtype == ap.dtype == np.float64
        for i in range(n):
            dt = t - (tj if np.isscalar(tj) else float(tj[i]))
            for k in range(3):
                want_x = (x[i, k] + v[i, k] * dt + a[i, k] * dt**2 / 2 + j[i, k] * dt**3 / 6
                          + s[i, k] * dt**4 / 24 + c[i, k] * dt**5 / 120)
                want_v = (v[i, k] + a[i, k] * dt + j[i, k] * dt**2 / 2 + s[i, k] * dt**3 / 6
                          + c[i, k] * dt**4 / 24)
                want_a = a[i, k] + j[i, k] * dt + s[i, k] * dt**2 / 2 + c[i, k] * dt**3 / 6
                assert xp[i, k] == pytest.approx(want_x, rel=1e-14, abs=1e-15)
                assert vp[i, k] == pytest.approx(want_v, rel=1e-14, abs=1e-15)
                assert ap[i, k] == pytest.approx(want_a, rel=1e-14, abs=1e-15)


def test_predict_missing_terms_are_zero():
    rng = np.random.default_rng(8)
    x, v, a, j = (rng.normal(0, 1, (4, 3)) for _ in range(4))
    z = np.zeros((4, 3))
    tj = np.array([0.0, 0.1, 0.2, 0.3])
    for given in ((), (a,), (a, j)):
        full = given + (z,) * (4 - len(given))
        got = predict(1.0, tj, x, v, *given)
        want = predict(1.0, tj, x, v, *full)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    # Only x and v: straight lines and zero acceleration.
    xp, vp, ap = predict(2.0, 0.5, x, v)
    np.testing.assert_allclose(xp, x + 1.5 * v, rtol=1e-15)
    np.testing.assert_array_equal(vp, v)
    np.testing.assert_array_equal(ap, z)
    # Keyword form: snap without jerk.
    s = rng.normal(0, 1, (4, 3))
    xp, vp, ap = predict(1.0, 0.0, x, v, snap=s)
    np.testing.assert_allclose(xp, x + v + s / 24, rtol=1e-14)
    np.testing.assert_allclose(ap, s / 2, rtol=1e-15)


def test_predict_at_own_time_returns_copies():
    x, v, _ = uniform_cube(5)
    a = np.ones((5, 3))
    xp, vp, ap = predict(0.3, 0.3, x, v, a)
    np.testing.assert_array_equal(xp, x)
    np.testing.assert_array_equal(vp, v)
    np.testing.assert_array_equal(ap, a)
    assert xp is not x and vp is not v and ap is not a
    xp[:] = 0.0
    assert np.all(x != 0.0)


# --------------------------------------------------------------------------- edge cases


def test_nearest_neighbour_ties_go_to_lower_id():
    xi = np.array([[0.0, 0.0, 0.0]])
    # Equidistant candidates, the lowest id not first; the particle itself is nearest of all.
    xj = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 0], [-1.0, 0, 0], [0, 0, -1.0], [3.0, 0, 0]])
    idx_j = np.array([9, 7, 5, 3, 4, 1])
    m = np.full(6, 0.1)
    f = forces(xi, np.zeros((1, 3)), [5], xj, np.zeros((6, 3)), m, idx_j, 0.0, h2=1.5)
    assert f.nn_index[0] == 3
    assert f.nn_r2[0] == 1.0
    np.testing.assert_array_equal(f.neighbours[0], [3, 4, 7, 9])
    np.testing.assert_array_equal(f.neighbour_r2[0], [1.0, 1.0, 1.0, 1.0])
    # Ties are exact and on distance only: a boundary pair (r^2 == h2) is not a neighbour.
    g = forces(xi, np.zeros((1, 3)), [5], xj, np.zeros((6, 3)), m, idx_j, 0.0, h2=1.0)
    assert len(g.neighbours[0]) == 0


def test_no_candidate_gives_minus_one_and_inf():
    x = np.array([[0.5, -0.5, 2.0], [1.0, 1.0, 1.0]])
    v = np.zeros((2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Each j set holds only the i-particle itself: nothing, not even 0/0, with eps2 = 0.
        f = forces(x, v, [4, 4], x[:1], v[:1], [1.0], [4], 0.0, order=6, ai=v, aj=v[:1], h2=9.0)
        empty = forces(x, v, [4, 8], np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0),
                       np.zeros(0, dtype=np.int64), 0.0, h2=9.0)
    for r in (f, empty):
        np.testing.assert_array_equal(r.nn_index, [-1, -1])
        assert np.all(np.isinf(r.nn_r2))
        np.testing.assert_array_equal(r.acc, np.zeros((2, 3)))
        np.testing.assert_array_equal(r.jerk, np.zeros((2, 3)))
        np.testing.assert_array_equal(r.pot, np.zeros(2))
        np.testing.assert_array_equal(r.acc_abs, np.zeros(2))
        assert all(len(n) == 0 for n in r.neighbours)
    np.testing.assert_array_equal(f.snap, np.zeros((2, 3)))


def test_empty_i_set():
    x, v, m = uniform_cube(10)
    f = forces(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0, dtype=int), x, v, m,
               np.arange(10), 0.0, order=6, ai=np.zeros((0, 3)), aj=v, h2=1.0)
    assert f.acc.shape == f.jerk.shape == f.snap.shape == (0, 3)
    assert f.pot.shape == f.nn_index.shape == f.nn_r2.shape == (0,)
    assert f.neighbours == [] and f.neighbour_r2 == []


def test_zero_mass_particles_are_neighbours_without_force():
    xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, _ = mixed_system(seed=12)
    # A fast, accelerated but massless particle right next to the first i-particle.
    ghost_x = xi[0] + np.array([1e-3, 0.0, 0.0])
    xj2 = np.vstack([xj, ghost_x])
    vj2 = np.vstack([vj, [[5.0, 5.0, 5.0]]])
    aj2 = np.vstack([aj, [[1.0, 2.0, 3.0]]])
    mj2 = np.append(mj, 0.0)
    idx_j2 = np.append(idx_j, 77)
    with_ghost = forces(xi, vi, idx_i, xj2, vj2, mj2, idx_j2, 0.0, order=6, ai=ai, aj=aj2, h2=0.01)
    without = forces(xi, vi, idx_i, xj, vj, mj, idx_j, 0.0, order=6, ai=ai, aj=aj, h2=0.01)
    for name in ("acc", "jerk", "snap"):
        assert np.max(relative_vector_error(
            getattr(with_ghost, name), getattr(without, name), getattr(without, name + "_abs")
        )) < 1e-15
    np.testing.assert_allclose(with_ghost.pot, without.pot, rtol=1e-15)
    np.testing.assert_allclose(with_ghost.acc_abs, without.acc_abs, rtol=1e-15)
    assert with_ghost.nn_index[0] == 77
    assert with_ghost.nn_r2[0] == pytest.approx(1e-6, rel=1e-9)
    assert 77 in with_ghost.neighbours[0]
    assert without.nn_index[0] != 77


def test_far_from_origin_shift():
    x, v, m = plummer(64, seed=9)
    a = all_self(x, v, m, 1e-4, order=2).acc
    near = all_self(x, v, m, 1e-4, order=6, ai=a, aj=a)
    far = all_self(x + 1e4, v, m, 1e-4, order=6, ai=a, aj=a)
    for name in ("acc", "jerk", "snap"):
        err = relative_vector_error(getattr(far, name), getattr(near, name),
                                    getattr(near, name + "_abs"))
        assert np.max(err) < 1e-9, name
    np.testing.assert_allclose(far.pot, near.pot, rtol=1e-9)
    np.testing.assert_array_equal(far.nn_index, near.nn_index)


def test_coincident_pair_is_non_finite_without_warnings():
    x = np.array([[0.1, 0.2, 0.3], [0.1, 0.2, 0.3], [5.0, 0.0, 0.0]])
    v = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    m = np.array([1.0, 1.0, 1.0])
    ids = np.array([0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = forces(x, v, ids, x, v, m, ids, 0.0, order=6, ai=v, aj=v, h2=1.0)
        err = relative_vector_error(f.acc, np.zeros((3, 3)), f.acc_abs)
    for r in (f.acc, f.jerk, f.snap):
        assert not np.all(np.isfinite(r[:2]))
        assert np.all(np.isfinite(r[2]))
    assert f.pot[0] == -np.inf and f.pot[1] == -np.inf
    assert np.isfinite(f.pot[2])
    assert not np.all(np.isfinite(err[:2]))
    np.testing.assert_array_equal(f.nn_index, [1, 0, 0])
    np.testing.assert_array_equal(f.nn_r2[:2], [0.0, 0.0])
    np.testing.assert_array_equal(f.neighbours[0], [1])


def test_inputs_not_modified_and_lists_accepted():
    xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, h2 = mixed_system()
    copies = [np.copy(arr) for arr in (xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, h2)]
    f = forces(xi, vi, idx_i, xj, vj, mj, idx_j, 0.01, order=6, ai=ai, aj=aj, h2=h2)
    for arr, cp in zip((xi, vi, ai, idx_i, xj, vj, aj, mj, idx_j, h2), copies, strict=True):
        np.testing.assert_array_equal(arr, cp)
    g = forces(xi.tolist(), vi.tolist(), idx_i.tolist(), xj.tolist(), vj.tolist(),
               mj.tolist(), idx_j.tolist(), 0.01, order=6, ai=ai.tolist(), aj=aj.tolist(),
               h2=h2.tolist())
    np.testing.assert_array_equal(g.snap, f.snap)


def test_order_two_needs_no_velocities():
    x, v, m = uniform_cube(20, seed=1)
    ids = np.arange(20)
    f = forces(x, None, ids, x, None, m, ids, 0.01, order=2)
    g = forces(x, v, ids, x, v, m, ids, 0.01, order=2)
    np.testing.assert_array_equal(f.acc, g.acc)
    assert f.jerk is None and f.snap is None


# --------------------------------------------------------------------------- bad input

X5 = np.zeros((5, 3))
X4 = np.zeros((4, 3))
I5 = np.arange(5)
M4 = np.ones(4)
I4 = np.arange(4)


def _call(**over):
    args = dict(xi=X5, vi=X5, index_i=I5, xj=X4, vj=X4, mj=M4, index_j=I4, eps2=0.1)
    kw = {k: over.pop(k) for k in list(over) if k in ("order", "ai", "aj", "h2",
                                                         "chunk_elements")}
    args.update(over)
    return forces(*args.values(), **kw)


@pytest.mark.parametrize(
    "name, over",
    [
        ("order", {"order": 3}),
        ("order", {"order": True}),
        ("xi", {"xi": np.zeros((5, 2))}),
        ("xi", {"xi": np.zeros(15)}),
        ("xi", {"xi": np.zeros((5, 3), dtype=complex)}),
        ("vi", {"vi": X4}),
        ("vi", {"vi": None}),
        ("index_i", {"index_i": np.arange(4)}),
        ("index_i", {"index_i": np.full(5, 0.5)}),
        ("xj", {"xj": np.zeros((4, 4))}),
        ("vj", {"vj": X5}),
        ("vj", {"vj": None}),
        ("mj", {"mj": np.ones(5)}),
        ("mj", {"mj": np.ones((4, 1))}),
        ("mj", {"mj": np.array(["a"] * 4)}),
        ("index_j", {"index_j": np.arange(5)}),
        ("eps2", {"eps2": -1e-3}),
        ("eps2", {"eps2": np.nan}),
        ("eps2", {"eps2": np.ones(5)}),
        ("ai", {"order": 6, "aj": X4}),
        ("aj", {"order": 6, "ai": X5}),
        ("ai", {"order": 6, "ai": X4, "aj": X4}),
        ("aj", {"order": 6, "ai": X5, "aj": X5}),
        ("h2", {"h2": np.ones(4)}),
        ("h2", {"h2": np.ones((5, 1))}),
        ("chunk_elements", {"chunk_elements": 0}),
    ],
)
def test_forces_bad_input_names_argument(name, over):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        _call(**over)


@pytest.mark.parametrize(
    "name, args",
    [
        ("x", (1.0, 0.0, np.zeros((3, 2)), np.zeros((3, 3)))),
        ("v", (1.0, 0.0, X5, X4)),
        ("a", (1.0, 0.0, X5, X5, X4)),
        ("jerk", (1.0, 0.0, X5, X5, X5, X4)),
        ("snap", (1.0, 0.0, X5, X5, X5, X5, X4)),
        ("crackle", (1.0, 0.0, X5, X5, X5, X5, X5, X4)),
        ("tj", (1.0, np.zeros(4), X5, X5)),
        ("t", (np.zeros(5), 0.0, X5, X5)),
    ],
)
def test_predict_bad_input_names_argument(name, args):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        predict(*args)


def test_helpers_bad_input():
    for fn in (plummer, uniform_cube):
        for n in (0, -3, 2.5, True):
            with pytest.raises(ValueError, match=r"^n\b"):
                fn(n)
    with pytest.raises(ValueError, match="same shape"):
        relative_vector_error(np.zeros((3, 3)), np.zeros((2, 3)), 1.0)


# --------------------------------------------------------------------------- helpers


def test_relative_vector_error():
    res = np.array([[1.0, 2.0, 2.0], [0.0, 0.0, 0.0], [3.0, 4.0, 0.0]])
    ref = np.zeros((3, 3))
    scale = np.array([2.0, 0.0, 0.0])
    np.testing.assert_allclose(relative_vector_error(res, ref, scale), [1.5, 0.0, 5.0])
    np.testing.assert_allclose(relative_vector_error(res, ref, 10.0), [0.3, 0.0, 0.5])
    np.testing.assert_allclose(
        relative_vector_error(np.array([1.0, -2.0]), np.array([0.5, 0.0]), np.array([0.5, 0.0])),
        [1.0, 2.0],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bad = relative_vector_error(np.array([[np.nan, 0, 0]]), np.zeros((1, 3)), 0.0)
    assert np.isnan(bad[0])


def test_plummer_properties():
    x, v, m = plummer(4096, seed=0)
    assert x.shape == v.shape == (4096, 3) and m.shape == (4096,)
    assert x.dtype == v.dtype == m.dtype == np.float64
    np.testing.assert_array_equal(m, np.full(4096, 1 / 4096))
    assert abs(m.sum() - 1.0) < 1e-14
    assert np.linalg.norm(m @ x) < 1e-14 and np.linalg.norm(m @ v) < 1e-14

    kinetic = 0.5 * np.sum(m * np.sum(v * v, axis=1))
    potential = 0.5 * np.sum(m * all_self(x, v, m, 0.0, order=2).pot)
    energy = kinetic + potential
    # Henon units: E = -1/4, virial ratio 1/2; sampling noise for n = 4096 is ~1-2 %.
    assert abs(energy + 0.25) < 0.025
    assert 0.45 < kinetic / -potential < 0.55
    # Plummer half-mass radius: 1.3048 a, a = 3 pi / 16 in Henon units.
    r_half = np.median(np.linalg.norm(x, axis=1))
    assert r_half == pytest.approx(1.3048 * 3 * np.pi / 16, rel=0.05)


def test_plummer_and_cube_reproducible():
    for fn in (plummer, uniform_cube):
        a = fn(300, seed=42)
        b = fn(300, seed=42)
        c = fn(300, seed=43)
        for p, q in zip(a, b, strict=True):
            np.testing.assert_array_equal(p, q)
        assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[1], c[1])
    x, v, m = uniform_cube(1000, seed=1)
    assert np.all(np.abs(x) <= 1.0) and x.min() < -0.9 and x.max() > 0.9
    assert 0.0 < np.std(v) < 0.2
    np.testing.assert_array_equal(m, np.full(1000, 1e-3))
