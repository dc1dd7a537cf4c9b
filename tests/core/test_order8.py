"""Order 8: crackle (the third time derivative of the acceleration) on every backend.

The reference's crackle (Taylor-series arithmetic, sapporo.reference) is itself checked
against finite differences of the pair acceleration along the exact polynomial path, in
40-digit decimal arithmetic; the library (recurrence in alpha, beta, gamma) is checked
against the reference with the tolerances of the other orders: 1e-12 (double) and 1e-5
(double-single) relative to the sum of the pairwise magnitudes.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal

import numpy as np
import pytest

import sapporo
from sapporo import reference as ref
from sapporo.backend import capabilities
from sapporo.core.launch import LaunchConfig, LaunchTable
from sapporo.errors import InputError

TOL = {"double": 1e-12, "double-single": 1e-5}
EPS2 = 1e-4
PRECISIONS = ["double", "double-single"]


# --------------------------------------------------------------------------------------------
# the reference's crackle against high-precision finite differences


def _pair_acc(r: list[Decimal], m: Decimal, eps2: Decimal) -> list[Decimal]:
    s = r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + eps2
    q = m / (s * s.sqrt())
    return [q * c for c in r]


def _fd_crackle(rel: np.ndarray, m: float, eps2: float) -> list[Decimal]:
    """d^3/dt^3 of m r(t) / (|r(t)|^2 + eps2)^(3/2) at t = 0 along r(t) = r + v t + a t^2/2 +
    j t^3/6 (``rel``: rows r, v, a, j), by a sixth-order central difference in 40 digits."""
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        d = [[Decimal(float(x)) for x in row] for row in rel]
        mm, e2 = Decimal(float(m)), Decimal(float(eps2))
        h = Decimal("1e-6")
        coef = {1: Decimal(-488), 2: Decimal(338), 3: Decimal(-72), 4: Decimal(7)}
        out = [Decimal(0)] * 3
        for k, c in coef.items():  # f''' ~ sum_k c_k (f(kh) - f(-kh)) / (240 h^3)
            for sign in (1, -1):
                t = sign * k * h
                r = [d[0][c3] + t * (d[1][c3] + t * (d[2][c3] / 2 + t * d[3][c3] / 6))
                     for c3 in range(3)]
                acc = _pair_acc(r, mm, e2)
                out = [o + sign * c * f for o, f in zip(out, acc, strict=True)]
        return [o / (240 * h**3) for o in out]


def test_fd_stencil() -> None:
    """The difference formula itself, on a function with a known third derivative (exp)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        h = Decimal("1e-6")
        coef = {1: Decimal(-488), 2: Decimal(338), 3: Decimal(-72), 4: Decimal(7)}
        x0 = Decimal("0.3")
        f = lambda t: (x0 + t).exp()  # noqa: E731
        val = sum(c * (f(k * h) - f(-k * h)) for k, c in coef.items())
        assert abs(val / (240 * h**3) - x0.exp()) < Decimal("1e-20")


@pytest.mark.parametrize("eps2", [0.0, 1e-2])
def test_reference_crackle_against_finite_differences(eps2: float) -> None:
    rng = np.random.default_rng(11)
    ni, nj = 3, 4
    xi, xj = rng.normal(size=(ni, 3)), rng.normal(size=(nj, 3))
    vi, vj = rng.normal(size=(ni, 3)), rng.normal(size=(nj, 3))
    ai, aj = rng.normal(size=(ni, 3)), rng.normal(size=(nj, 3))
    ji, jj = rng.normal(size=(ni, 3)), rng.normal(size=(nj, 3))
    mj = rng.uniform(0.5, 2.0, nj)
    idi, idj = np.arange(ni), np.arange(nj) + 1  # i-particles 1, 2 exclude j-particles 0, 1
    r = ref.forces(xi, vi, idi, xj, vj, mj, idj, eps2, order=8, ai=ai, aj=aj, ji=ji, jj=jj)
    for i in range(ni):
        want = np.zeros(3)
        for j in range(nj):
            if idj[j] == idi[i]:
                continue
            rel = np.array([xj[j] - xi[i], vj[j] - vi[i], aj[j] - ai[i], jj[j] - ji[i]])
            want += np.array([float(c) for c in _fd_crackle(rel, mj[j], eps2)])
        np.testing.assert_allclose(r.crackle[i], want, rtol=1e-12,
                                   atol=1e-12 * r.crackle_abs[i])
    # the lower orders are unchanged by order 8
    r6 = ref.forces(xi, vi, idi, xj, vj, mj, idj, eps2, order=6, ai=ai, aj=aj)
    np.testing.assert_array_equal(r.snap, r6.snap)
    assert r6.crackle is None


def test_reference_order8_needs_jerks() -> None:
    x, v, m = ref.plummer(4, seed=1)
    with pytest.raises(InputError, match="ji is required"):
        ref.forces(x, v, np.arange(4), x, v, m, np.arange(4), 0.0, order=8, ai=x, aj=x)


# --------------------------------------------------------------------------------------------
# the library


def system(n: int, seed: int, shift: float = 0.0, kind: str = "plummer"):
    """A j-set with every derivative the predictor takes (a from the forces, the others
    random at the scale of a Plummer sphere)."""
    x, v, m = (ref.plummer if kind == "plummer" else ref.uniform_cube)(n, seed=seed)
    x = x + shift
    rng = np.random.default_rng(seed + 1)
    ids = rng.permutation(n) * 2 + 3
    a = ref.forces(x, v, ids, x, v, m, ids, EPS2, order=2).acc
    jerk, snap, crackle = (rng.normal(scale=s, size=(n, 3)) for s in (0.3, 1.0, 3.0))
    return x, v, m, ids, a, jerk, snap, crackle


def predicted(dt: float, *derivs):
    """x, v, a and jerk predicted by dt: the Taylor series of x through the highest
    derivative given (x, v, a, jerk, snap, crackle[, pop, d5]), summed term by term."""
    out = []
    for k in range(4):
        terms = [d * dt**n / math.factorial(n) for n, d in enumerate(derivs[k:])]
        out.append(sum(terms[1:], terms[0]))
    return tuple(out)


def check(res, r, precision: str, label: str = "") -> None:
    tol = TOL[precision]
    for name in ("acc", "jerk", "snap", "crackle"):
        err = ref.relative_vector_error(getattr(res, name), getattr(r, name),
                                        getattr(r, f"{name}_abs"))
        assert err.max() <= tol, f"{label} {name} error {err.max():.2e} > {tol}"
    perr = np.abs(res.pot - r.pot) / r.pot_abs
    assert perr.max() <= tol, f"{label} pot error {perr.max():.2e}"
    if precision == "double":
        np.testing.assert_array_equal(res.nn_index, r.nn_index)


def shapes(backend: str, precision: str) -> list[tuple[str, LaunchTable]]:
    """Launch shapes to try: the defaults and a few others the backend has."""
    caps = capabilities("cuda" if backend.startswith("cuda") else backend)
    cfgs = {
        "lanes-16": LaunchConfig(li=8, lj=16, w=1, jt=128, use_local=True, groups_per_cu=2),
        "lanes-3": LaunchConfig(li=4, lj=3, w=1, jt=24, use_local=True, groups_per_cu=2),
        "global": LaunchConfig(li=16, lj=1, w=1, jt=32, use_local=False, groups_per_cu=2),
        "w4": LaunchConfig(li=4, lj=1, w=4, jt=64, use_local=False, groups_per_cu=2),
    }
    if caps.jv:
        cfgs["jv"] = LaunchConfig(li=1, lj=1, w=8, jt=64, use_local=False, groups_per_cu=2,
                                  jv=True)
    return [(name, LaunchTable([(1 << 20, cfg)])) for name, cfg in cfgs.items()
            if cfg.w in caps.widths]


@pytest.fixture(scope="module")
def libs():
    cache: dict = {}
    yield cache
    for lib in cache.values():
        lib.close()


@pytest.fixture
def lib8(libs, backend):
    def get(precision: str) -> sapporo.Library:
        key = (backend, precision)
        if key not in libs:
            libs[key] = sapporo.Library(order=8, precision=precision, backend=backend)
        libs[key].reset()
        libs[key].set_time(0.0)
        return libs[key]

    return get


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("n_active", [1, 2, 37, 300])
def test_predicted_plummer_against_reference(lib8, precision, n_active) -> None:
    """j-particles given with a, jerk, snap, crackle, pop and d5 at t = 0, forces at t = 1/64:
    the device predicts x, v, a and jerk through d5; nearest neighbours and lists as at the
    other orders."""
    lib = lib8(precision)
    n, dt = 300, 1.0 / 64
    x, v, m, ids, a, jerk, snap, crackle = system(n, seed=3)
    rng = np.random.default_rng(4)
    pop, d5 = rng.normal(scale=10.0, size=(n, 3)), rng.normal(scale=30.0, size=(n, 3))
    addr = np.random.default_rng(2).permutation(n)
    lib.set_j_particles(addr, ids[addr], 0.0, m[addr], x[addr], v[addr], a=a[addr],
                        jerk=jerk[addr], snap=snap[addr], crackle=crackle[addr],
                        pop=pop[addr], d5=d5[addr])
    lib.set_time(dt)
    xp, vp, ap, jp = predicted(dt, x, v, a, jerk, snap, crackle, pop, d5)
    sel = np.sort(np.random.default_rng(n_active).choice(n, n_active, replace=False))
    # a few neighbours each: four times the nearest neighbour's r^2
    # (at most four times the median: outliers far out would list everything)
    nn_r2 = ref.forces(xp, vp, ids, xp, vp, m, ids, 0.0, order=2).nn_r2
    h2 = np.minimum(4.0 * nn_r2[sel], 4.0 * np.median(nn_r2))
    res = lib.compute(xp[sel], vp[sel], ids[sel], EPS2, h2=h2, a=ap[sel], jerk=jp[sel])
    r = ref.forces(xp[sel], vp[sel], ids[sel], xp, vp, m, ids, EPS2, order=8, ai=ap[sel],
                   aj=ap, ji=jp[sel], jj=jp, h2=h2)
    check(res, r, precision, f"{n_active} active")
    for k in range(res.ni):
        got, want = res.neighbours(k), r.neighbours[k]
        if precision == "double":
            np.testing.assert_array_equal(got, want)
        else:  # only pairs within float rounding of the radius may differ
            r2 = dict(zip(ids.tolist(), ((xp - xp[sel[k]]) ** 2).sum(axis=1).tolist(),
                          strict=True))
            assert all(abs(r2[j] - h2[k]) <= 1e-5 * h2[k] for j in np.setxor1d(got, want))
    assert (res.neighbour_counts[nn_r2[sel] < h2] > 0).all()
    assert res.neighbour_counts.sum() > 0


@pytest.mark.parametrize("precision", PRECISIONS)
def test_far_from_origin_eps2_zero(lib8, precision) -> None:
    """Shifted by 1e4 with eps2 = 0: self-exclusion by id, no 0/0, double-single keeps its
    bound; one, two and many active particles."""
    lib = lib8(precision)
    n = 200
    x, v, m, ids, a, jerk, _, _ = system(n, seed=5, shift=1e4, kind="cube")
    lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v, a=a, jerk=jerk)
    lib.set_time(0.0)
    for sel in (np.array([7]), np.array([7, 99]), np.arange(0, n, 2)):
        res = lib.compute(x[sel], v[sel], ids[sel], 0.0, a=a[sel], jerk=jerk[sel])
        r = ref.forces(x[sel], v[sel], ids[sel], x, v, m, ids, 0.0, order=8, ai=a[sel], aj=a,
                       ji=jerk[sel], jj=jerk)
        assert np.isfinite(res.crackle).all()
        check(res, r, precision, f"{sel.size} active")
        assert (res.nn_index != ids[sel]).all()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_launch_shapes(lib8, backend, precision) -> None:
    """Lanes over j through local memory, tiles from global memory, several i-particles per
    work-item, and (OpenCL) the lanes over j-particles: the same forces."""
    lib = lib8(precision)
    n = 157
    x, v, m, ids, a, jerk, snap, crackle = system(n, seed=9)
    lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v, a=a, jerk=jerk, snap=snap,
                        crackle=crackle)
    lib.set_time(0.01)
    xp, vp, ap, jp = predicted(0.01, x, v, a, jerk, snap, crackle)
    old = lib.launch_tables()[0]
    try:
        for name, table in shapes(backend, precision):
            lib.set_launch_table(table)
            for sel in (np.array([4]), np.arange(0, n, 3)):
                res = lib.compute(xp[sel], vp[sel], ids[sel], EPS2, a=ap[sel], jerk=jp[sel])
                r = ref.forces(xp[sel], vp[sel], ids[sel], xp, vp, m, ids, EPS2, order=8,
                               ai=ap[sel], aj=ap, ji=jp[sel], jj=jp)
                check(res, r, precision, f"{name}, {sel.size} active")
    finally:
        lib.set_launch_table(old)


def test_neighbour_overflow(backend) -> None:
    """More neighbours than the capacity: exact counts, overflow flagged, lists truncated to
    genuine neighbours; the forces are unaffected."""
    n = 120
    x, v, m, ids, a, jerk, _, _ = system(n, seed=13)
    with sapporo.Library(order=8, precision="double", backend=backend, nb_capacity=4) as lib:
        lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v, a=a, jerk=jerk)
        sel = np.arange(0, n, 5)
        res = lib.compute(x[sel], v[sel], ids[sel], EPS2, h2=1.0, a=a[sel], jerk=jerk[sel])
        r = ref.forces(x[sel], v[sel], ids[sel], x, v, m, ids, EPS2, order=8, ai=a[sel],
                       aj=a, ji=jerk[sel], jj=jerk, h2=1.0)
        check(res, r, "double")
        assert res.overflow
        np.testing.assert_array_equal(res.neighbour_counts, [w.size for w in r.neighbours])
        for k in range(res.ni):
            got = res.neighbours(k)
            assert got.size == min(4, r.neighbours[k].size)
            assert set(got.tolist()) <= set(r.neighbours[k].tolist())


def test_pop_and_d5_only_at_order_8(backend) -> None:
    x, v, m = ref.plummer(4, seed=2)
    with sapporo.Library(order=6, precision="double", backend=backend) as lib:
        with pytest.raises(InputError, match="pop: the 4th and 5th derivatives"):
            lib.set_j_particles(np.arange(4), np.arange(4), 0.0, m, x, v, pop=x)


def test_prediction_through_d5_is_used(lib8) -> None:
    """The device's prediction depends on pop and d5 as the 8th-order predictor says:
    the force on a probe from one j-particle, predicted with and without them."""
    lib = lib8("double")
    x, v = np.array([[1.0, 0.0, 0.0]]), np.array([[0.0, 0.5, 0.0]])
    probe = np.zeros((1, 3))
    z = np.zeros((1, 3))
    got = []
    for pop, d5 in ((z, z), (np.array([[3.0, 1.0, 0.0]]), np.array([[0.0, 0.0, 7.0]]))):
        lib.set_j_particles([0], [1], 0.0, [1.0], x, v, pop=pop, d5=d5)
        lib.set_time(0.25)
        res = lib.compute(probe, z, [2], 0.0, a=z, jerk=z)
        xp = predicted(0.25, x, v, z, z, z, z, pop, d5)[0]
        want = xp / np.linalg.norm(xp) ** 3
        np.testing.assert_allclose(res.acc, want, rtol=1e-14)
        got.append(res.acc)
    assert np.abs(got[1] - got[0]).max() > 1e-7  # 1e7 times the tolerance above


def test_order8_needs_the_i_jerks(lib8) -> None:
    lib = lib8("double")
    x, v, m = ref.plummer(8, seed=2)
    lib.set_j_particles(np.arange(8), np.arange(8), 0.0, m, x, v)
    with pytest.raises(InputError, match="jerk: order 8 needs"):
        lib.compute(x, v, np.arange(8), EPS2, a=np.zeros((8, 3)))
    with pytest.raises(InputError, match="a: order 8 needs"):
        lib.compute(x, v, np.arange(8), EPS2, jerk=np.zeros((8, 3)))
    with pytest.raises(InputError, match="jerk"):
        lib.compute(x, v, np.arange(8), EPS2, a=np.zeros((8, 3)), jerk=np.zeros((7, 3)))
    with pytest.raises(InputError, match="jerk"):
        lib.compute(x, v, np.arange(8), EPS2, a=np.zeros((8, 3)),
                    jerk=np.full((8, 3), np.nan))


def test_lower_orders_have_no_crackle(backend) -> None:
    x, v, m = ref.plummer(16, seed=4)
    with sapporo.Library(order=6, precision="double", backend=backend) as lib:
        lib.set_j_particles(np.arange(16), np.arange(16), 0.0, m, x, v)
        res = lib.compute(x, v, np.arange(16), EPS2, a=np.zeros((16, 3)),
                          jerk=np.zeros((16, 3)))  # a jerk below order 8 is ignored
        assert res.crackle is None and res.snap is not None


def test_bench_counts_144_flops_at_order_8(backend) -> None:
    """sapporo bench runs order 8 (with i-jerks) and counts 144 flops per interaction."""
    from sapporo.perf import bench

    s = bench.BenchSettings.tiny(orders=(8,), precisions=("double",), n_list=(256,),
                                 sweep_n=256, n_active=(1,), peers=("numpy-reference",),
                                 backend=backend)
    report = bench.run_bench(s)
    rows = report.select("nxn", "sapporo") + report.select("nxn", "numpy-reference")
    assert len(rows) == 2
    for row in rows:
        assert row.order == 8
        assert row.gflops == pytest.approx(row.interactions_per_s * 144 / 1e9)
    assert bench.FLOPS[8] == 144


_TWO_DEVICES = """
import json, sys
import numpy as np
import sapporo
from sapporo import reference as ref

n = 601
x, v, m = ref.plummer(n, seed=8)
rng = np.random.default_rng(8)
ids = np.arange(n) + 3
d = [rng.normal(0, s, (n, 3)) for s in (1.0, 1.0, 3.0, 10.0, 30.0, 100.0)]
dt = 1.0 / 128
terms = [x, v, *d]
xp, vp, ap, jp = (sum(terms[k + q] * dt**q / np.prod(range(1, q + 1)) for q in range(8 - k))
                  for k in range(4))
with sapporo.Library(order=8, precision="double", backend="opencl", devices="all") as lib:
    addr = rng.permutation(n)
    lib.set_j_particles(addr, ids[addr], 0.0, m[addr], x[addr], v[addr], *(q[addr] for q in d))
    lib.set_time(dt)
    sel = np.arange(0, n, 4)
    f = lib.compute(xp[sel], vp[sel], ids[sel], 1e-4, h2=0.02, a=ap[sel], jerk=jp[sel])
    r = ref.forces(xp[sel], vp[sel], ids[sel], xp, vp, m, ids, 1e-4, order=8, ai=ap[sel],
                   aj=ap, ji=jp[sel], jj=jp, h2=0.02)
    out = {"ndev": lib.ndev, "nn": bool((f.nn_index == r.nn_index).all()),
           "lists": bool(all(np.array_equal(f.neighbours(k), r.neighbours[k])
                             for k in range(len(sel))))}
    for q in ("acc", "jerk", "snap", "crackle"):
        out[q] = float(ref.relative_vector_error(getattr(f, q), getattr(r, q),
                                                 getattr(r, q + "_abs")).max())
json.dump(out, sys.stdout)
"""


def test_two_pocl_devices_order8(two_pocl_devices: None) -> None:
    """Order 8 over two PoCL devices (addresses round-robin, parts combined on the host):
    the reference's bounds, exact neighbours (as tests/core/test_multidevice.py for the others)."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, POCL_DEVICES="pthread pthread", SAPPORO_BACKEND="opencl")
    env.pop("SAPPORO_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", _TWO_DEVICES], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert res["ndev"] == 2
    assert res["nn"] and res["lists"]
    for q in ("acc", "jerk", "snap", "crackle"):
        assert res[q] <= 1e-12, (q, res)
