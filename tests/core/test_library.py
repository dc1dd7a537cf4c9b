"""The force library against the float64 reference model.

Tolerances (the issue's accuracy contract), per i-particle:
- vector quantities: |Delta| / sum_j |term_j| <= 1e-12 (double), <= 1e-5 (double-single);
- potential: |Delta| / |pot| with the same bounds;
- nearest neighbour and neighbour lists: exactly the reference in double; in double-single,
  a differing choice must be a near-tie (r^2 within 1e-5 relative) and list differences must
  lie within 1e-5 relative of the radius.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import sapporo
import sapporo.core.device
import sapporo.core.layout
from sapporo import config
from sapporo import reference as ref
from sapporo.core import library as L

TOL = {"double": 1e-12, "double-single": 1e-5}
EPS2 = 1e-4
VARIANTS = [(o, p) for p in ("double", "double-single") for o in (2, 4, 6)]


@pytest.fixture(scope="module")
def libs(request):
    """One open library per (backend, order, precision), shared by the tests of this module."""
    cache: dict = {}
    yield cache
    for lib in cache.values():
        lib.close()


@pytest.fixture
def make_lib(libs, backend):
    def get(order: int, precision: str, fresh: bool = False, **kw) -> sapporo.Library:
        key = (backend, order, precision)
        if fresh or kw:
            return sapporo.Library(order=order, precision=precision, backend=backend, **kw)
        if key not in libs:
            libs[key] = sapporo.Library(order=order, precision=precision, backend=backend)
        libs[key].reset()
        libs[key].set_time(0.0)
        return libs[key]

    return get


def system(n: int, seed: int, kind: str = "plummer", shift: float = 0.0):
    x, v, m = (ref.plummer if kind == "plummer" else ref.uniform_cube)(n, seed=seed)
    x = x + shift
    rng = np.random.default_rng(seed + 100)
    ids = rng.permutation(n) * 3 + 5  # ids unrelated to addresses
    a = ref.forces(x, v, ids, x, v, m, ids, EPS2, order=2).acc
    jerk = rng.normal(scale=0.1, size=(n, 3))
    return x, v, m, ids, a, jerk


def check(res, r, order, precision, label=""):
    tol = TOL[precision]
    err = ref.relative_vector_error(res.acc, r.acc, r.acc_abs)
    assert err.max() <= tol, f"{label} acc error {err.max():.2e} > {tol}"
    perr = np.abs(res.pot - r.pot) / np.abs(r.pot)
    assert perr.max() <= tol, f"{label} pot error {perr.max():.2e} > {tol}"
    if order >= 4:
        err = ref.relative_vector_error(res.jerk, r.jerk, r.jerk_abs)
        assert err.max() <= tol, f"{label} jerk error {err.max():.2e} > {tol}"
    else:
        assert res.jerk is None
    if order >= 6:
        err = ref.relative_vector_error(res.snap, r.snap, r.snap_abs)
        assert err.max() <= tol, f"{label} snap error {err.max():.2e} > {tol}"
    else:
        assert res.snap is None


def check_nn(res, r, precision, xi, xj_by_id):
    if precision == "double":
        np.testing.assert_array_equal(res.nn_index, r.nn_index)
        np.testing.assert_array_equal(res.nn_r2, r.nn_r2)
        return
    diff = np.flatnonzero(res.nn_index != r.nn_index)
    for k in diff:
        got = xj_by_id[int(res.nn_index[k])]
        r2 = float(((got - xi[k]) ** 2).sum())
        assert abs(r2 - r.nn_r2[k]) <= 1e-5 * r.nn_r2[k], f"nn of {k} is not a near-tie"
    ok = np.isfinite(r.nn_r2)
    np.testing.assert_allclose(res.nn_r2[ok], r.nn_r2[ok], rtol=1e-5)


def check_lists(res, r, precision, h2):
    h2 = np.broadcast_to(h2, res.pot.shape)
    np.testing.assert_array_equal(res.neighbour_counts >= 0, True)
    for k in range(res.ni):
        got = res.neighbours(k)
        assert np.all(np.diff(got) > 0), "lists must be ascending"
        want = r.neighbours[k]
        if precision == "double":
            np.testing.assert_array_equal(got, want)
            assert res.neighbour_counts[k] == want.size
        else:
            sym = np.setxor1d(got, want)
            if sym.size:
                r2_by_id = dict(zip(want.tolist(), r.neighbour_r2[k].tolist(), strict=True))
                for idj in sym:
                    if idj in r2_by_id:
                        assert abs(r2_by_id[idj] - h2[k]) <= 1e-5 * h2[k]
            assert abs(res.neighbour_counts[k] - want.size) <= sym.size


def load(lib, x, v, m, ids, a=None, jerk=None, t=0.0, order_addresses=None):
    n = len(m)
    addr = np.arange(n) if order_addresses is None else order_addresses
    lib.set_j_particles(addr, ids[addr], t, m[addr], x[addr], v[addr],
                        a=None if a is None else a[addr], jerk=None if jerk is None else jerk[addr])


@pytest.mark.parametrize("order,precision", VARIANTS)
@pytest.mark.parametrize("n_active", [1, 7, 257, 1031])
def test_plummer_against_reference(make_lib, order, precision, n_active):
    lib = make_lib(order, precision)
    n = 1031  # not a multiple of any work-group size
    x, v, m, ids, a, _ = system(n, seed=3)
    # addresses sent in shuffled order
    load(lib, x, v, m, ids, a=a, order_addresses=np.random.default_rng(1).permutation(n))
    lib.set_time(0.0)
    sel = np.sort(np.random.default_rng(n_active).choice(n, n_active, replace=False))
    h2 = 0.02
    res = lib.compute(x[sel], v[sel], ids[sel], EPS2, a=a[sel], h2=h2)
    r = ref.forces(x[sel], v[sel], ids[sel], x, v, m, ids, EPS2, order=order, ai=a[sel], aj=a,
                   h2=h2)
    check(res, r, order, precision, f"N_active={n_active}")
    check_nn(res, r, precision, x[sel], dict(zip(ids.tolist(), x, strict=True)))
    check_lists(res, r, precision, h2)
    assert not res.overflow


@pytest.mark.parametrize("order,precision", VARIANTS)
def test_eps2_zero_self_exclusion_cube(make_lib, order, precision):
    lib = make_lib(order, precision)
    n = 333
    x, v, m, ids, a, _ = system(n, seed=5, kind="cube")
    load(lib, x, v, m, ids, a=a)
    lib.set_time(0.0)
    res = lib.compute(x, v, ids, 0.0, a=a)
    r = ref.forces(x, v, ids, x, v, m, ids, 0.0, order=order, ai=a, aj=a)
    assert np.isfinite(res.acc).all()
    check(res, r, order, precision)
    check_nn(res, r, precision, x, dict(zip(ids.tolist(), x, strict=True)))
    assert not np.isin(res.nn_index, -1).any()
    assert (res.nn_index != ids).all(), "a particle is never its own nearest neighbour"


@pytest.mark.parametrize("order,precision", VARIANTS)
def test_far_from_origin(make_lib, order, precision):
    """Shift by 1e4 in every coordinate: double-single keeps 1e-5 (plain float would not),
    nearest neighbours and lists too; with 1 and 2 active particles as well (on CPUs the
    j-vector kernels, which split the positions into hi/lo floats on their own path)."""
    lib = make_lib(order, precision)
    n = 300
    x, v, m, ids, a, _ = system(n, seed=7, shift=1e4)
    load(lib, x, v, m, ids, a=a)
    lib.set_time(0.0)
    by_id = dict(zip(ids.tolist(), x, strict=True))
    for sel in (np.arange(0, n, 3), np.array([5]), np.array([5, 77])):
        res = lib.compute(x[sel], v[sel], ids[sel], EPS2, a=a[sel], h2=0.3)
        r = ref.forces(x[sel], v[sel], ids[sel], x, v, m, ids, EPS2, order=order, ai=a[sel],
                       aj=a, h2=0.3)
        check(res, r, order, precision, f"shifted by 1e4, {sel.size} active")
        check_nn(res, r, precision, x[sel], by_id)
        check_lists(res, r, precision, 0.3)
        assert res.neighbour_counts.sum() > 0  # the lists are not trivially empty


@pytest.mark.parametrize("order,precision", VARIANTS)
def test_zero_masses_and_nj(make_lib, order, precision):
    lib = make_lib(order, precision)
    n = 500
    x, v, m, ids, a, _ = system(n, seed=11)
    m = m.copy()
    m[::4] = 0.0
    load(lib, x, v, m, ids, a=a)
    lib.set_time(0.0)
    nj = 321
    sel = np.arange(0, n, 5)
    res = lib.compute(x[sel], v[sel], ids[sel], EPS2, a=a[sel], nj=nj, h2=0.05)
    r = ref.forces(x[sel], v[sel], ids[sel], x[:nj], v[:nj], m[:nj], ids[:nj], EPS2,
                   order=order, ai=a[sel], aj=a[:nj], h2=0.05)
    check(res, r, order, precision, "nj < stored")
    check_lists(res, r, precision, 0.05)
    # zero-mass particles are still neighbours
    zero_ids = set(ids[:nj][m[:nj] == 0].tolist())
    assert any(zero_ids & set(res.neighbours(k).tolist()) for k in range(res.ni))


@pytest.mark.parametrize("order,precision", VARIANTS)
def test_prediction_and_updates(make_lib, order, precision):
    """j-particles at different times are predicted on the device; a few addresses change."""
    lib = make_lib(order, precision)
    n = 400
    rng = np.random.default_rng(13)
    x, v, m, ids, a, jerk = system(n, seed=13)
    snap = rng.normal(scale=0.05, size=(n, 3))
    crackle = rng.normal(scale=0.05, size=(n, 3))
    tj = rng.choice([0.0, 0.125, 0.25], size=n)
    lib.set_j_particles(np.arange(n), ids, tj, m, x, v, a=a, jerk=jerk, snap=snap,
                        crackle=crackle)
    t = 0.3125
    lib.set_time(t)
    xp, vp, ap = ref.predict(t, tj, x, v, a, jerk, snap, crackle)
    sel = rng.choice(n, 50, replace=False)
    res = lib.compute(xp[sel], vp[sel], ids[sel], EPS2, a=ap[sel])
    r = ref.forces(xp[sel], vp[sel], ids[sel], xp, vp, m, ids, EPS2, order=order, ai=ap[sel],
                   aj=ap)
    check(res, r, order, precision, "predicted")
    # update five addresses (in reverse order) and compute again at the same time
    upd = np.array([399, 17, 3, 250, 100])
    x2 = x.copy()
    x2[upd] += 0.01
    m2 = m.copy()
    m2[upd] *= 2
    lib.set_j_particles(upd, ids[upd], tj[upd], m2[upd], x2[upd], v[upd], a=a[upd],
                        jerk=jerk[upd], snap=snap[upd], crackle=crackle[upd])
    xp2, vp2, ap2 = ref.predict(t, tj, x2, v, a, jerk, snap, crackle)
    res = lib.compute(xp2[sel], vp2[sel], ids[sel], EPS2, a=ap2[sel])
    r = ref.forces(xp2[sel], vp2[sel], ids[sel], xp2, vp2, m2, ids, EPS2, order=order,
                   ai=ap2[sel], aj=ap2)
    check(res, r, order, precision, "after update")


@pytest.mark.parametrize("order", [4, 6])
def test_predictor_reads_only_the_derivatives_given(make_lib, order):
    """The predictor skips derivative records that are zero everywhere (a third of its
    memory traffic with acceleration and jerk only), with the same bits as reading them;
    the first non-zero snap or crackle switches to reading them."""
    n = 300
    rng = np.random.default_rng(29)
    x, v, m, ids, a, jerk = system(n, seed=29)
    tj = rng.choice([0.0, 0.125], size=n)
    t = 0.25
    zeros = np.zeros((n, 3))

    def predicted_forces(lib: sapporo.Library, crackle: np.ndarray, label: str):
        """Forces on 40 particles at time t against the reference's prediction."""
        xp, vp, ap = ref.predict(t, tj, x, v, a, jerk, zeros, crackle)
        res = lib.compute(xp[:40], vp[:40], ids[:40], EPS2, a=ap[:40])
        r = ref.forces(xp[:40], vp[:40], ids[:40], xp, vp, m, ids, EPS2, order=order,
                       ai=ap[:40], aj=ap)
        check(res, r, order, "double", label)
        return res

    results = []
    for forced in (None, 4):
        lib = make_lib(order, "double", fresh=True)
        lib.set_j_particles(np.arange(n), ids, tj, m, x, v, a=a, jerk=jerk, snap=zeros)
        assert lib._pred_terms == 2  # an all-zero snap does not count
        if forced is not None:
            lib._pred_terms = forced
        lib.set_time(t)
        results.append(predicted_forces(lib, zeros, f"predictor terms {lib._pred_terms}"))
    assert np.array_equal(results[0].acc, results[1].acc)
    assert np.array_equal(results[0].jerk, results[1].jerk)
    assert np.array_equal(results[0].pot, results[1].pot)
    # a crackle on one particle: from now on all four records are read
    lib = make_lib(order, "double", fresh=True)
    lib.set_j_particles(np.arange(n), ids, tj, m, x, v, a=a, jerk=jerk)
    lib.set_time(t)
    lib.compute(x[:4], v[:4], ids[:4], EPS2, a=a[:4])
    crackle = zeros.copy()
    crackle[7] = [3.0, -2.0, 1.0]
    lib.set_j_particles([7], ids[7], tj[7], m[7], x[7:8], v[7:8], a=a[7:8], jerk=jerk[7:8],
                        crackle=crackle[7:8])
    assert lib._pred_terms == 4
    predicted_forces(lib, crackle, "after a crackle")


@pytest.mark.parametrize("precision", ["double", "double-single"])
def test_bitwise_reproducible(make_lib, precision):
    lib = make_lib(4, precision)
    n = 700
    x, v, m, ids, a, _ = system(n, seed=17)
    load(lib, x, v, m, ids)
    lib.set_time(0.0)
    outs = [lib.compute(x[:5], v[:5], ids[:5], EPS2) for _ in range(3)]
    outs.append(lib.compute(x, v, ids, EPS2))
    outs.append(lib.compute(x, v, ids, EPS2))
    for q in ("acc", "jerk", "pot"):
        assert np.array_equal(getattr(outs[0], q), getattr(outs[1], q))
        assert np.array_equal(getattr(outs[0], q), getattr(outs[2], q))
        assert np.array_equal(getattr(outs[3], q), getattr(outs[4], q))


def test_instances_compute_the_same_bits(make_lib, backend):
    """A library of another instance (kernels built apart, on PoCL) gives the same forces,
    bit for bit; the instance must be a non-negative integer."""
    x, v, m, ids, _, _ = system(300, seed=19)
    out = []
    for instance in (0, 1):
        with make_lib(2, "double-single", instance=instance) as lib:
            load(lib, x, v, m, ids)
            lib.set_time(0.0)
            out.append(lib.compute(x[:40], v[:40], ids[:40], EPS2))
    assert np.array_equal(out[0].acc, out[1].acc) and np.array_equal(out[0].pot, out[1].pot)
    with pytest.raises(sapporo.InputError, match="instance"):
        sapporo.Library(order=2, backend=backend, instance=-1)


def test_start_compute_result(make_lib):
    lib = make_lib(4, "double")
    n = 200
    x, v, m, ids, _, _ = system(n, seed=19)
    load(lib, x, v, m, ids)
    lib.set_time(0.0)
    pending = lib.start_compute(x, v, ids, EPS2)
    assert not pending.done()
    res = pending.result()
    assert pending.done()
    assert pending.result() is res
    r = ref.forces(x, v, ids, x, v, m, ids, EPS2, order=4)
    check(res, r, 4, "double")


def test_neighbour_overflow(backend):
    n = 200
    x, v, m, ids, _, _ = system(n, seed=23)
    with sapporo.Library(order=2, precision="double", backend=backend, nb_capacity=4) as lib:
        load(lib, x, v, m, ids)
        h2 = np.full(n, 0.05)
        h2[0] = 0.0  # no neighbours at all
        res = lib.compute(x, v, ids, EPS2, h2=h2)
    r = ref.forces(x, v, ids, x, v, m, ids, EPS2, order=2, h2=h2)
    counts = np.array([len(nb) for nb in r.neighbours])
    np.testing.assert_array_equal(res.neighbour_counts, counts)  # exact even on overflow
    assert counts.max() > 4 and res.overflow
    assert res.neighbours(0).size == 0
    for k in range(n):
        got = res.neighbours(k)
        assert got.size == min(4, counts[k])
        assert set(got.tolist()) <= set(r.neighbours[k].tolist())


def test_many_i_particles_are_chunked(make_lib):
    """ni above one launch's chunk (8192) and a j-set too small to split."""
    from sapporo.core.launch import NI_CHUNK

    lib = make_lib(4, "double")
    nj = 40
    xj, vj, mj, idj, _, _ = system(nj, seed=29)
    load(lib, xj, vj, mj, idj)
    lib.set_time(0.0)
    ni = NI_CHUNK + 37
    rng = np.random.default_rng(29)
    xi = rng.normal(size=(ni, 3))
    vi = rng.normal(size=(ni, 3))
    idi = np.arange(ni) + 10**6
    launches = lib._engine.launches if lib._engine is not None else 0
    res = lib.compute(xi, vi, idi, EPS2, nj=nj, h2=1.0)
    if lib._engine is not None:  # the engine computed both chunks
        assert lib._engine.launches >= launches + 2
    r = ref.forces(xi, vi, idi, xj, vj, mj, idj, EPS2, order=4, h2=1.0)
    check(res, r, 4, "double", "chunked")
    np.testing.assert_array_equal(res.nn_index, r.nn_index)
    # the lists of both chunks, each from its own chunk
    np.testing.assert_array_equal(res.neighbour_counts, [w.size for w in r.neighbours])
    for k in (0, 1, NI_CHUNK - 1, NI_CHUNK, NI_CHUNK + 1, ni - 1):
        np.testing.assert_array_equal(res.neighbours(k), r.neighbours[k])


def test_sparse_addresses_and_growth(make_lib):
    """Unused addresses are invisible; memory grows with the highest address."""
    lib = make_lib(4, "double", fresh=True)
    try:
        x, v, m, ids, _, _ = system(50, seed=31)
        addr = np.arange(50) * 97  # gaps, highest address 4753 > initial capacity
        lib.set_j_particles(addr, ids, 0.0, m, x, v)
        assert lib.n_stored == 49 * 97 + 1
        res = lib.compute(x, v, ids, EPS2, h2=10.0)
        r = ref.forces(x, v, ids, x, v, m, ids, EPS2, order=4, h2=10.0)
        check(res, r, 4, "double")
        np.testing.assert_array_equal(res.nn_index, r.nn_index)
        assert all(np.array_equal(res.neighbours(k), r.neighbours[k]) for k in range(50))
    finally:
        lib.close()

def test_capacity_is_what_one_buffer_holds(make_lib, monkeypatch):
    """A device whose largest buffer holds fewer j-records than its memory: the capacity the
    library reports is the buffer's; the last address computes right, the next is refused at
    the store; a growth the device cannot allocate fails the store that asked for it (the
    device and the bytes named) and leaves the library computing with what it held."""
    lib = make_lib(4, "double", fresh=True)
    try:
        dev = lib._devs[0]
        if lib.ndev != 1:
            pytest.skip("one device")
        per = dev.raw_n * 32  # bytes of one address's raw records, the largest buffer
        dev.info = dataclasses.replace(dev.info, max_alloc_size=per * 20000)
        assert dev.max_j == 20000 and lib.max_address == 19999
        x, v, m, ids, _, _ = system(40, seed=83)
        lib.set_j_particles(np.arange(39), ids[:39], 0.0, m[:39], x[:39], v[:39])
        lib.set_j_particles([19999], ids[39:], 0.0, m[39:], x[39:], v[39:])
        with pytest.raises(sapporo.InputError, match=r"holds addresses 0 \.\. 19999 .*GiB"):
            lib.set_j_particles([20000], [7], 0.0, [1.0], [[5.0, 0, 0]], [[0.0, 0, 0]])
        assert lib.n_stored == 20000 and dev.cap == 20000

        res = lib.compute(x[:5], v[:5], ids[:5], EPS2)  # the 40, the last at 19999
        r = ref.forces(x[:5], v[:5], ids[:5], x, v, m, ids, EPS2, order=4)
        np.testing.assert_allclose(res.acc, r.acc, rtol=1e-10, atol=1e-14)
    finally:
        lib.close()
    # a growth that fails: the store is refused and nothing of it kept
    lib = make_lib(4, "double", fresh=True)
    try:
        dev = lib._devs[0]
        lib.set_j_particles(np.arange(39), ids[:39], 0.0, m[:39], x[:39], v[:39])
        lib.compute(x[:5], v[:5], ids[:5], EPS2)
        small = dev.cap
        real_host, real = dev.ctx.alloc_host, dev.ctx.alloc

        def refuse(alloc):
            def limited(nbytes):
                if nbytes > small * per:
                    raise sapporo.BackendError(f"cannot allocate {nbytes} bytes (test)")
                return alloc(nbytes)
            return limited

        monkeypatch.setattr(dev.ctx, "alloc_host", refuse(real_host))
        monkeypatch.setattr(dev.ctx, "alloc", refuse(real))
        name = dev.info.name
        with pytest.raises(sapporo.BackendError, match=rf"{name}: j-memory for {small + 5} "
                           r"addresses \(\d+ bytes"):
            lib.set_j_particles([small + 4], [99], 0.0, [1.0], [[3.0, 0, 0]], [[0.0, 0, 0]])
        assert lib.n_stored == 39 and dev.cap == small
        res = lib.compute(x[:5], v[:5], ids[:5], EPS2)  # as before, on what it held
        r = ref.forces(x[:5], v[:5], ids[:5], x[:39], v[:39], m[:39], ids[:39], EPS2, order=4)
        np.testing.assert_allclose(res.acc, r.acc, rtol=1e-10, atol=1e-14)
        monkeypatch.undo()
        lib.set_j_particles([small + 4], [99], 0.0, [1.0], [[3.0, 0, 0]], [[0.0, 0, 0]])
        assert lib.n_stored == small + 5 and dev.cap > small
    finally:
        lib.close()


def test_addresses_up_to_the_device_memory(make_lib, monkeypatch):
    """Memory doubles as addresses grow, but never past what the devices hold: every address
    up to ``max_address`` is accepted, the next one refused with the limit in the message."""
    lib = make_lib(4, "double", fresh=True)
    try:
        mem = min(d.info.global_mem_size for d in lib._devs)
        one = min(d.max_j for d in lib._devs) * lib.ndev  # the largest buffer's limit
        assert lib.max_address == min(
            L.MAX_ADDRESS, int(0.8 * mem * lib.ndev) // sapporo.core.device.j_bytes(4) - 1,
            one - 1)
        # A device that holds 3000 j-particles (as if its memory were that small).
        monkeypatch.setattr(L.Library, "_j_capacity", lambda self: 3000)
        assert lib.max_address == 2999
        x, v, m, ids, _, _ = system(3, seed=5)
        lib.set_j_particles([0, 1500, 2100], ids, 0.0, m, x, v)  # capacity 1024 -> 3000
        lib.set_j_particles([2999], [9], 0.0, [1.0], [[9.0, 0, 0]], [[0.0, 0, 0]])
        assert lib.n_stored == 3000
        with pytest.raises(sapporo.InputError, match=r"holds addresses 0 \.\. 2999"):
            lib.set_j_particles([3000], [10], 0.0, [1.0], [[0.0, 9, 0]], [[0.0, 0, 0]])
        assert lib.n_stored == 3000  # the refused call stored nothing
        res = lib.compute(x, v, ids, EPS2)
        xj = np.vstack([x, [[9.0, 0, 0]]])
        r = ref.forces(x, v, ids, xj, np.zeros_like(xj), np.append(m, 1.0),
                       np.append(ids, 9), EPS2, order=4)
        np.testing.assert_allclose(res.acc, r.acc, rtol=1e-12)
    finally:
        lib.close()



def test_reset_then_sparse_addresses(make_lib):
    """After reset() the old particles are gone, also at addresses below the new highest."""
    lib = make_lib(4, "double", fresh=True)
    try:
        x, v, m, ids, _, _ = system(200, seed=53)
        load(lib, x, v, m, ids)
        lib.compute(x[:3], v[:3], ids[:3], EPS2)
        lib.reset()
        assert lib.n_stored == 0
        keep = np.array([0, 150])
        lib.set_j_particles(keep, ids[keep], 0.0, m[keep], x[keep], v[keep])
        assert lib.n_stored == 151
        res = lib.compute(x[:10], v[:10], ids[:10], EPS2, h2=10.0)
        r = ref.forces(x[:10], v[:10], ids[:10], x[keep], v[keep], m[keep], ids[keep], EPS2,
                       order=4, h2=10.0)
        check(res, r, 4, "double", "after reset")
        np.testing.assert_array_equal(res.nn_index, r.nn_index)
        for k in range(10):
            np.testing.assert_array_equal(res.neighbours(k), r.neighbours[k])
    finally:
        lib.close()


def test_stores_travel_once_by_the_engine(make_lib, monkeypatch):
    """The engine writes each j-particle into the mirror and the device's records as it is
    stored, also while a call is pending: the library's planner uploads nothing but what a
    device lost when its buffers were made again."""
    sent: list[int] = []
    planner = L.Library._engine_planner

    def counted(self, lists, top, terms):
        words = planner(self, lists, top, terms)
        if not isinstance(words, (int, tuple)):  # the engine uploads the plan's list
            sent.append(int(self._uploaded.size))
        return words

    monkeypatch.setattr(L.Library, "_engine_planner", counted)
    lib = make_lib(4, "double", fresh=True)
    try:
        x, v, m, ids, _, _ = system(3000, seed=59)
        load(lib, x, v, m, ids)
        lib.compute(x[:2], v[:2], ids[:2], EPS2)
        assert sum(sent) < 3000  # (records re-sent only where memory grew under them)
        sent.clear()
        changed = np.array([7, 1000, 1001, 2999, 7])  # 7 twice: the last value holds
        x2 = x.copy()
        x2[changed] += 0.01 * np.arange(1, 6)[:, None]
        lib.start_compute(x[:1], v[:1], ids[:1], EPS2)  # pending while they are stored
        lib.set_j_particles(changed, ids[changed], 0.0, m[changed], x2[changed], v[changed])
        res = lib.compute(x[:50], v[:50], ids[:50], EPS2)
        assert sum(sent) == 0, sent
        x2[7] = x[7] + 0.05  # the second write of address 7
        r = ref.forces(x[:50], v[:50], ids[:50], x2, v, m, ids, EPS2, order=4)
        check(res, r, 4, "double", "after an update of 4 addresses")
    finally:
        lib.close()


@pytest.mark.parametrize("precision", ["double", "double-single"])
def test_nearest_neighbour_ties_across_parts(backend, monkeypatch, precision):
    """Equidistant j-particles in different parts of the j-range: the lower id wins when the
    parts are merged, on the host and by the reduce kernel, whichever part holds it."""
    import sapporo.core.device
    import sapporo.core.layout
    from sapporo.core.launch import NI_CHUNK, LaunchTable

    n = 700
    rng = np.random.default_rng(61)
    xj = rng.normal(size=(n, 3))
    xj *= (20.0 + rng.random(n))[:, None] / np.linalg.norm(xj, axis=1)[:, None]  # r > 20
    ids = np.arange(n) + 100
    xj[3], xj[690] = [1.0, 0, 0], [0, 1.0, 0]  # both at r^2 = 1 from the origin
    for low_first in (True, False):
        ids[3], ids[690] = (10, 20) if low_first else (20, 10)
        # the threaded device (the companion of small launches keeps one part)
        monkeypatch.setenv("SAPPORO_SMALL_PAIRS", "0")
        for limit in (1 << 16, 0):  # host merge, then always the reduce kernel
            monkeypatch.setattr(sapporo.core.device, "HOST_REDUCE_MAX", limit)
            monkeypatch.setattr(sapporo.core.device, "GPU_HOST_REDUCE_MAX", limit)
            with sapporo.Library(order=2, precision=precision, backend=backend) as lib:
                lib.set_j_particles(np.arange(n), ids, 0.0, np.ones(n), xj, np.zeros((n, 3)))
                cfg = lib.launch_tables()[0].for_ni(1)
                lib.set_launch_table(LaunchTable([(NI_CHUNK, dataclasses.replace(
                    cfg, groups_per_cu=512, min_jchunk=8))], source="test: many parts"))
                res = lib.compute([[0.0, 0, 0]], [[0.0, 0, 0]], [1], 0.0)
                (shape,) = lib._engine.shape(n, 1, False)
                assert shape["parts"] > 2 and shape["reduce"] == (limit == 0)
                assert res.nn_index[0] == 10 and res.nn_r2[0] == 1.0, (low_first, limit)


def test_empty_j_set(make_lib):
    lib = make_lib(4, "double", fresh=True)
    try:
        lib.set_j_particles([0], [1], 0.0, [1.0], [[1.0, 0, 0]], [[0, 0, 0]])
        res = lib.compute([[0.0, 0, 0]], [[0.0, 0, 0]], [7], 0.0, nj=0)
        assert np.all(res.acc == 0) and res.pot[0] == 0
        assert res.nn_index[0] == -1 and np.isinf(res.nn_r2[0])
        only_self = lib.compute([[1.0, 0, 0]], [[0.0, 0, 0]], [1], 0.0)
        assert only_self.nn_index[0] == -1 and np.all(only_self.acc == 0)
    finally:
        lib.close()


def test_two_body_exact(make_lib):
    lib = make_lib(4, "double")
    lib.set_j_particles([0, 1], [0, 1], 0.0, [2.0, 3.0], [[0, 0, 0], [2.0, 0, 0]],
                        [[0, 0, 0], [0, 0.5, 0]])
    lib.set_time(0.0)
    res = lib.compute([[0, 0, 0], [2.0, 0, 0]], [[0, 0, 0], [0, 0.5, 0]], [0, 1], 0.0, nj=2)
    np.testing.assert_allclose(res.acc[0], [3.0 / 4.0, 0, 0], rtol=1e-15)
    np.testing.assert_allclose(res.acc[1], [-2.0 / 4.0, 0, 0], rtol=1e-15)
    np.testing.assert_allclose(res.pot, [-1.5, -1.0], rtol=1e-15)
    # jerk of i=0: m v / r^3 (v perpendicular to r)
    np.testing.assert_allclose(res.jerk[0], [0, 3.0 * 0.5 / 8.0, 0], rtol=1e-15, atol=1e-16)
    np.testing.assert_array_equal(res.nn_index, [1, 0])
    np.testing.assert_array_equal(res.nn_r2, [4.0, 4.0])


@pytest.mark.parametrize("precision", ["double", "double-single"])
def test_nearest_neighbour_ties_to_lower_id(make_lib, precision):
    """Exact ties in r^2 go to the lower id, whatever the order of the addresses (the
    double-single CUDA kernel compares (r^2, id) as one 64-bit key)."""
    from sapporo.core.launch import NI_CHUNK, LaunchConfig, LaunchTable

    lib = make_lib(2, precision, fresh=True)
    if lib.device_infos[0].device_type != "cpu":  # one lane over j: the ties meet in a thread
        lib.set_launch_table(LaunchTable([(NI_CHUNK, LaunchConfig(
            li=32, lj=1, w=1, jt=64, use_local=True))], source="test: lj = 1"))
    pos = [[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, 0, 5.0], [0, 0, -1.0]]
    for ids in ([9, 4, 6, 1, 5], [4, 9, 6, 1, 5], [9, 6, 5, 1, 4]):
        lib.set_j_particles([0, 1, 2, 3, 4], ids, 0.0, [1.0] * 5, pos, [[0, 0, 0]] * 5)
        res = lib.compute([[0.0, 0, 0], [0.0, 0, 0.5]], [[0.0, 0, 0]] * 2, [100, 101], 1e-2,
                          nj=5)
        assert res.nn_index[0] == 4 and res.nn_r2[0] == 1.0, ids
        assert res.nn_index[1] == min(ids[:3]) and res.nn_r2[1] == 1.25, ids
    lib.close()


def test_double_single_overflow_is_named(make_lib):
    """Pair terms beyond float's range in double-single: an error that says so."""
    lib = make_lib(4, "double-single", fresh=True)
    try:
        x, v, m, ids, _, _ = system(64, seed=3)
        lib.set_j_particles(np.arange(64), ids, 0.0, m * 1e40, x, v)
        with pytest.raises(sapporo.NonFiniteError, match="single precision's range"):
            lib.compute(x, v, ids, 0.0)
    finally:
        lib.close()


def test_non_finite_result_names_particle(make_lib):
    lib = make_lib(2, "double")
    lib.set_j_particles([0, 1], [0, 1], 0.0, [1.0, 1.0], [[0, 0, 0], [1.0, 0, 0]],
                        [[0, 0, 0]] * 2)
    with pytest.raises(sapporo.NonFiniteError, match="i-particle 1 \\(id 5\\)"):
        lib.compute([[3.0, 0, 0], [1.0, 0, 0]], [[0, 0, 0]] * 2, [4, 5], 0.0, nj=2)


BAD_CALLS = [
    (dict(x=np.zeros((3, 2))), "x"),
    (dict(x=np.zeros((0, 3)), v=np.zeros((0, 3)), index=np.zeros(0, int)), "x"),
    (dict(v=np.zeros((2, 3))), "v"),
    (dict(index=[1, 2]), "index"),
    (dict(index=[1.5, 2, 3]), "index"),
    (dict(index=[-1, 2, 3]), "index"),
    (dict(x=[[np.nan, 0, 0], [0, 0, 0], [1, 1, 1]]), "x"),
    (dict(v=[[np.inf, 0, 0], [0, 0, 0], [1, 1, 1]]), "v"),
    (dict(eps2=-1.0), "eps2"),
    (dict(eps2=np.nan), "eps2"),
    (dict(h2=[1.0, 2.0]), "h2"),
    (dict(h2=np.nan), "h2"),
    (dict(nj=10**6), "nj"),
    (dict(nj=-1), "nj"),
    (dict(nj=float("inf")), "nj"),
    (dict(nj=2.5), "nj"),
    (dict(nj=True), "nj"),
    (dict(a=np.zeros((2, 3))), "a"),
    (dict(x=np.eye(3) * (2 + 1j)), "x"),  # numpy would drop the imaginary part
    (dict(x=(np.eye(3) * 2).astype(str)), "x"),  # ... or parse the text
    (dict(v=np.zeros((3, 3), dtype=bool)), "v"),
    (dict(h2=np.ones(3, dtype=complex)), "h2"),
    (dict(eps2=0.01 + 0j), "eps2"),
]


@pytest.mark.parametrize("bad,name", BAD_CALLS)
def test_bad_compute_input(make_lib, bad, name):
    lib = make_lib(4, "double")
    lib.set_j_particles(np.arange(3), np.arange(3), 0.0, np.ones(3), np.eye(3), np.zeros((3, 3)))
    kw = dict(x=np.eye(3) * 2, v=np.zeros((3, 3)), index=[0, 1, 2], eps2=0.01)
    kw.update(bad)
    with pytest.raises(sapporo.InputError, match=f"^{name}:"):
        lib.compute(**kw)


def test_finiteness_checks_small_and_large_arrays(make_lib):
    """Inputs are checked by one sum (Python floats up to 48 values, numpy above); a sum
    that is not finite looks at the elements: an overflowing sum of finite values passes,
    opposite infinities (a NaN sum) do not."""
    from sapporo.core.validate import all_finite as _all_finite

    for n in (1, 16, 17, 1000):
        arr = np.ones((n, 3))
        assert _all_finite(arr)
        arr[-1, 1] = 1e308
        arr[0, 0] = 1e308 if n > 1 else 1.0
        assert _all_finite(arr)  # the sum overflows, the values are finite
        for bad in (np.inf, -np.inf, np.nan):
            arr[-1, 2] = bad
            assert not _all_finite(arr), (n, bad)
        arr[0, 2] = np.inf
        arr[-1, 2] = -np.inf
        assert not _all_finite(arr)
    lib = make_lib(4, "double")
    big = np.full((20, 3), 1e308)  # velocities may be huge (positions may not: r^2 overflows)
    lib.set_j_particles(np.arange(20), np.arange(20), 0.0, np.ones(20), np.zeros((20, 3)), big)
    big[13, 1] = np.nan
    with pytest.raises(sapporo.InputError, match="^v: non-finite value in row 13"):
        lib.set_j_particles(np.arange(20), np.arange(20), 0.0, np.ones(20), np.zeros((20, 3)),
                            big)
    ids = np.arange(100)
    ids[57] = 2**31
    with pytest.raises(sapporo.InputError, match="^index: value 2147483648 outside"):
        lib.set_j_particles(np.arange(100), ids, 0.0, np.ones(100), np.zeros((100, 3)),
                            np.zeros((100, 3)))


@pytest.mark.parametrize("order", [2, 4, 6])
def test_device_prediction_is_the_host_horner_form(make_lib, backend, order):
    """In double precision the device predicts the j-particles with the Horner form of the
    host integrator (``hermite.predict_taylor``) and no contraction into FMAs: the same
    bits on PoCL and on the CUDA emulation, for particles far from the origin, steps of
    either sign and every derivative. (nvcc contracts on a GPU: there within rounding.)"""
    from sapporo.nbody.hermite import predict_taylor

    lib = make_lib(order, "double", fresh=True)
    rng = np.random.default_rng(order)
    n = 1001  # not a multiple of any block; enough pairs that a changed rounding shows
    x, v, a, jerk, snap, crackle = (rng.normal(size=(n, 3)) * 10.0 ** rng.uniform(-2, 2, (n, 1))
                                    for _ in range(6))
    x[: n // 2] += 1e4  # far from the origin; the others near it, where every term shows
    tj = rng.uniform(-1.0, 0.25, n)  # steps of either sign, up to ~1 (every term counts)
    addr = rng.permutation(n)
    lib.set_j_particles(addr, np.arange(n), tj, np.ones(n), x, v, a=a, jerk=jerk, snap=snap,
                        crackle=crackle)
    t = 0.125
    lib.set_time(t)
    lib.compute(x[:1], v[:1], [n], 1e-4, a=a[:1])  # predicts every address to t
    dev = lib._devs[0]
    got = {}
    for name in ("pos", "vel", "acc") if order >= 6 else ("pos", "vel"):
        host = np.empty((dev.j[name].nbytes // 32, 4))
        dev.j[name].download(host)
        got[name] = host[addr, :3]
    want = predict_taylor(t - tj, x, v, a, jerk, snap, crackle)
    # exact on OpenCL and on the emulation (whose fake driver keeps a state); a GPU may not
    exact = backend != "cuda" or getattr(getattr(dev.ctx, "drv", None), "state", None) is not None
    for name, w in zip(("pos", "vel", "acc"), want, strict=False):
        if name not in got:
            continue
        if exact:
            np.testing.assert_array_equal(got[name], w, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], w, rtol=1e-14, err_msg=name)
    lib.close()


def test_order6_needs_a(make_lib):
    lib = make_lib(6, "double")
    lib.set_j_particles([0], [0], 0.0, [1.0], [[1.0, 0, 0]], [[0, 0, 0]])
    with pytest.raises(sapporo.InputError, match="^a:"):
        lib.compute([[0.0, 0, 0]], [[0.0, 0, 0]], [1], 0.01)


BAD_J = [
    (dict(address=[-1]), "address"),
    (dict(address=[0.5]), "address"),
    (dict(index=[2**31]), "index"),
    (dict(mass=[np.nan]), "mass"),
    (dict(x=[[0, 0]]), "x"),
    (dict(v=[[0, np.inf, 0]]), "v"),
    (dict(t=[np.nan]), "t"),
    (dict(jerk=[[0, 0, np.nan]]), "jerk"),
    (dict(mass=[1.0, 2.0]), "mass"),
    (dict(mass=[1.0 + 1j]), "mass"),
    (dict(x=[["0", "0", "0"]]), "x"),
]


@pytest.mark.parametrize("bad,name", BAD_J)
def test_bad_j_input(make_lib, bad, name):
    lib = make_lib(4, "double")
    kw = dict(address=[0], index=[0], t=0.0, mass=[1.0], x=[[0, 0, 0]], v=[[0, 0, 0]])
    kw.update(bad)
    with pytest.raises(sapporo.InputError, match=f"^{name}:"):
        lib.set_j_particles(**kw)


def test_compute_before_any_j_particle(make_lib):
    """No j-particle stored yet: zero forces and no neighbour (as after reset)."""
    for order in (2, 4, 6):
        lib = make_lib(order, "double-single", fresh=True)
        try:
            res = lib.compute([[0.0, 0, 0], [1.0, 0, 0]], np.zeros((2, 3)), [0, 1], 0.0,
                              h2=1.0, a=np.zeros((2, 3)))
            assert not res.acc.any() and not res.pot.any()
            assert res.nn_index.tolist() == [-1, -1] and np.isinf(res.nn_r2).all()
            assert res.neighbour_counts.tolist() == [0, 0]
        finally:
            lib.close()


def test_bad_capacity_and_neighbour_index(backend):
    for bad in ("abc", 2.5, 0, L.MAX_NB_CAPACITY + 1, True):
        with pytest.raises(sapporo.InputError, match="^nb_capacity:"):
            sapporo.Library(backend=backend, nb_capacity=bad)
    with sapporo.Library(order=4, precision="double", backend=backend) as lib:
        lib.set_j_particles([0, 1], [0, 1], 0.0, [1.0, 1.0], np.eye(3)[:2], np.zeros((2, 3)))
        res = lib.compute(np.eye(3)[:2], np.zeros((2, 3)), [0, 1], 0.0, h2=4.0)
        assert res.neighbours(1.0).tolist() == [0] and res.neighbours(-2).tolist() == [1]
        for bad in (1.5, "a", 2, -3, None):
            with pytest.raises(sapporo.InputError, match="^neighbours: k"):
                res.neighbours(bad)


def test_calls_from_several_threads_are_serialised(make_lib, monkeypatch):
    """A Library shared by threads: one call at a time (seen from inside the j-sync, which
    every force call passes), and each thread gets its own particles' forces."""
    import threading
    import time

    lib = make_lib(4, "double", fresh=True)
    inside, overlaps = [0], [0]
    sync = L.Library._sync_j

    def watched(self, *args, **kwargs):
        inside[0] += 1
        overlaps[0] += inside[0] > 1
        time.sleep(0.002)  # a window for another thread to enter
        try:
            return sync(self, *args, **kwargs)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(L.Library, "_sync_j", watched)
    try:
        x, v, m, ids, _, _ = system(200, seed=41)
        lib.set_j_particles(np.arange(200), ids, 0.0, m, x, v)
        r = ref.forces(x, v, ids, x, v, m, ids, EPS2, order=4)
        errors: list[str] = []

        def work(k: int) -> None:
            sl = slice(50 * k, 50 * k + 50)
            for _ in range(10):
                res = lib.compute(x[sl], v[sl], ids[sl], EPS2)
                if not np.allclose(res.acc, r.acc[sl], rtol=1e-12, atol=0):
                    errors.append(f"thread {k}: wrong forces")

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert overlaps[0] == 0 and not errors, (overlaps, errors)
    finally:
        lib.close()


def test_closed_libraries_are_freed():
    """Nothing keeps a closed Library alive (an unusable backend's error, raised at every
    automatic selection, once held the frames of every constructor it passed through)."""
    import gc
    import weakref

    refs = []
    for _ in range(3):
        lib = sapporo.Library(order=4, precision="double")  # automatic backend selection
        lib.set_j_particles([0], [0], 0.0, [1.0], [[0.0, 0, 0]], [[0.0, 0, 0]])
        lib.close()
        refs.append(weakref.ref(lib))
        del lib
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_bad_library_arguments(backend):
    with pytest.raises(sapporo.InputError, match="order"):
        sapporo.Library(order=3, backend=backend)
    with pytest.raises(sapporo.InputError, match="precision"):
        sapporo.Library(precision="single", backend=backend)
    with pytest.raises(sapporo.InputError, match="devices"):
        sapporo.Library(devices=[99], backend=backend)
    with pytest.raises(sapporo.InputError, match="nb_capacity"):
        sapporo.Library(nb_capacity=0, backend=backend)
    with pytest.raises(sapporo.SapporoError, match="unknown backend"):
        sapporo.Library(backend="vulkan")


def test_closed_library(backend):
    lib = sapporo.Library(order=2, backend=backend)
    lib.close()
    lib.close()  # idempotent
    with pytest.raises(sapporo.SapporoError, match="closed"):
        lib.set_time(1.0)
    with pytest.raises(sapporo.SapporoError, match="closed"):
        lib.compute([[0.0, 0, 0]], [[0.0, 0, 0]], [0], 0.0)


def test_result_accessors(make_lib):
    lib = make_lib(2, "double")
    lib.set_j_particles([0, 1], [0, 1], 0.0, [1.0, 1.0], [[0, 0, 0], [1.0, 0, 0]],
                        [[0, 0, 0]] * 2)
    res = lib.compute([[0.5, 0, 0]], [[0, 0, 0]], [7], 0.0, nj=2)
    with pytest.raises(sapporo.InputError, match="no neighbour lists"):
        res.neighbours(0)
    res = lib.compute([[0.5, 0, 0]], [[0, 0, 0]], [7], 0.0, nj=2, h2=1.0)
    np.testing.assert_array_equal(res.neighbours(0), [0, 1])
    np.testing.assert_array_equal(res.neighbours(-1), [0, 1])
    with pytest.raises(sapporo.InputError, match="out of range"):
        res.neighbours(1)


def test_copying_host_buffers_give_identical_results(backend, monkeypatch):
    """Zero-copy host memory (CPU devices: i-data, results and the j-records live in host
    arrays the kernels read) and explicit copies with the scatter kernel (GPUs) give the same
    bits, through scattered and contiguous updates, prediction and a reset."""
    n = 300
    x, v, m, ids, a, jerk = system(n, seed=37)
    rng = np.random.default_rng(38)
    scattered = np.sort(rng.choice(n, 40, replace=False))
    x2 = x + rng.normal(scale=1e-3, size=x.shape)
    out = []
    for zero_copy in (True, False):
        if not zero_copy:
            from sapporo.backend.base import Context
            from sapporo.backend.opencl import CLContext

            monkeypatch.setattr(CLContext, "alloc_host", Context.alloc_host)
        with sapporo.Library(order=4, precision="double", backend=backend) as lib:
            dev = lib._devs[0]
            load(lib, x, v, m, ids, a=a, jerk=jerk)
            res = [lib.compute(x[:50], v[:50], ids[:50], EPS2, h2=0.05)]
            if dev.info.device_type == "cpu":  # host memory unless SAPPORO_NATIVE_MEMORY=device
                host = zero_copy and config.from_environment().native_memory == "auto"
                assert all(h.zero_copy == host for h in dev.hosts.values())
                assert (dev.h_raw is not None) == host
            # scattered addresses (scatter kernel when copying), then a contiguous block
            lib.set_j_particles(scattered, ids[scattered], 0.0, m[scattered], x2[scattered],
                                v[scattered], a=a[scattered], jerk=jerk[scattered])
            lib.set_j_particles(np.arange(100, 160), ids[100:160], 0.0, m[100:160],
                                x2[100:160], v[100:160], a=a[100:160], jerk=jerk[100:160])
            lib.set_time(0.01)
            res.append(lib.compute(x[:50], v[:50], ids[:50], EPS2, h2=0.05))
            xp = x.copy()
            xp[scattered], xp[100:160] = x2[scattered], x2[100:160]
            xp = xp + 0.01 * v + 0.5 * 0.01**2 * a + 0.01**3 / 6 * jerk
            r = ref.forces(x[:50], v[:50], ids[:50], xp, v + 0.01 * a + 0.5e-4 * jerk, m, ids,
                           EPS2, order=4)
            assert ref.relative_vector_error(res[-1].acc, r.acc, r.acc_abs).max() <= 1e-12
            lib.reset()
            load(lib, x[:120], v[:120], m[:120], ids[:120])
            res.append(lib.compute(x[:50], v[:50], ids[:50], EPS2, h2=0.05))
            out.append(res)
    for a_res, b_res in zip(*out, strict=True):
        assert np.array_equal(a_res.acc, b_res.acc) and np.array_equal(a_res.jerk, b_res.jerk)
        assert np.array_equal(a_res.nn_index, b_res.nn_index)
        assert np.array_equal(a_res.neighbour_counts, b_res.neighbour_counts)
        assert all(np.array_equal(a_res.neighbours(k), b_res.neighbours(k)) for k in range(50))


def lane_tree_sum(values: list[float]) -> float:
    """The documented order of the part sums, one number at a time: lane l of 32 sums
    values l, l + 32, ... in order; lane l + s is added into lane l for s = 16 .. 1 where
    that lane holds values."""
    lanes = [values[l::32] for l in range(min(32, len(values)))]
    acc = []
    for seq in lanes:
        total = seq[0]
        for v in seq[1:]:
            total = total + v
        acc.append(total)
    s = 16
    while s >= 1:
        for lane in range(s):
            if lane + s < len(acc):
                acc[lane] = acc[lane] + acc[lane + s]
        s //= 2
    return acc[0]


def _combine_parts(parts: np.ndarray) -> np.ndarray:
    """The engine's combine of (nparts, nrows, n) partial results."""
    from sapporo.core import engine

    out = np.empty(parts.shape[1:])
    engine.load().combine(parts, out)
    return out


@pytest.mark.parametrize(("nparts", "n"), [(7, 40), (7, 1), (2, 3), (32, 5), (33, 2),
                                           (100, 3), (512, 1), (64, 1)])
def test_combine_matches_the_lane_tree_order(nparts, n):
    """The engine's merge of partial results (devices, MPI ranks): sums in the reduce
    kernel's lane-and-tree order (bitwise as a scalar loop), nearest neighbour by minimum
    r^2 with ties to the lower id, -1 when no part has one; and within float64 rounding of
    an exact sum."""
    from fractions import Fraction

    from sapporo.core.layout import NCO, OC_NNID, OC_NNR2

    rng = np.random.default_rng(5 + n + nparts)
    parts = rng.normal(size=(nparts, NCO, n)) * 10.0 ** rng.integers(-3, 4, size=(nparts, 1, 1))
    r2 = rng.integers(1, 4, size=(nparts, n)).astype(float)  # many exact ties
    ids = rng.integers(-1, 6, size=(nparts, n)).astype(float)  # -1: no neighbour in part
    if n > 1:
        ids[:, 0] = -1.0  # no neighbour anywhere
    r2[ids < 0] = np.inf
    parts[:, OC_NNR2], parts[:, OC_NNID] = r2, ids
    out = _combine_parts(parts.copy())
    rows = [c for c in range(NCO) if c not in (OC_NNR2, OC_NNID)]
    for c in rows:
        for k in range(n):
            column = parts[:, c, k].tolist()
            assert out[c, k] == lane_tree_sum(column), (c, k)
            exact = float(sum(Fraction(v) for v in column))
            assert abs(out[c, k] - exact) <= 1e-15 * nparts * np.abs(parts[:, c, k]).sum()
    for k in range(n):
        cand = [(r2[p, k], ids[p, k]) for p in range(nparts) if ids[p, k] >= 0]
        want = min(cand) if cand else (np.inf, -1.0)
        assert (out[OC_NNR2, k], out[OC_NNID, k]) == want, k


def test_combine_single_particle_without_neighbour():
    from sapporo.core.layout import NCO, OC_NNID, OC_NNR2

    parts = np.zeros((3, NCO, 1))
    parts[:, OC_NNR2], parts[:, OC_NNID] = np.inf, -1.0
    out = _combine_parts(parts)
    assert out[OC_NNR2, 0] == np.inf and out[OC_NNID, 0] == -1.0
    from sapporo.core import engine

    with pytest.raises(TypeError, match="combine"):  # too few rows for layout.h's
        engine.load().combine(parts[:, :OC_NNID].copy(), np.empty((OC_NNID, 1)))
    with pytest.raises(TypeError, match="combine"):  # out of another shape
        engine.load().combine(parts, np.empty((NCO, 2)))


@pytest.mark.parametrize("order", [2, 4, 6])
def test_single_particle_results(make_lib, order):
    """One i-particle takes a shorter assembly path: same shapes, inf/-1 without a
    neighbour, and a non-finite force is still an error naming the particle."""
    lib = make_lib(order, "double")
    lib.set_j_particles([0, 1], [0, 1], 0.0, [1.0, 2.0], [[0, 0, 0], [1.0, 0, 0]],
                        [[0, 0, 0]] * 2, a=[[0, 0, 0]] * 2)
    res = lib.compute([[0.0, 0, 0]], [[0.0, 0, 0]], [0], 0.0, a=[[0.0, 0, 0]], nj=2)
    assert res.acc.shape == (1, 3) and res.pot.shape == (1,) and res.nn_index.dtype == np.int64
    np.testing.assert_allclose(res.acc[0], [2.0, 0, 0], rtol=1e-15)
    assert (res.jerk is None) == (order < 4) and (res.snap is None) == (order < 6)
    assert res.nn_index[0] == 1 and res.nn_r2[0] == 1.0
    alone = lib.compute([[0.0, 0, 0]], [[0.0, 0, 0]], [0], 0.0, a=[[0.0, 0, 0]], nj=1)
    assert alone.nn_index[0] == -1 and alone.nn_r2[0] == np.inf and alone.pot[0] == 0.0
    with pytest.raises(sapporo.NonFiniteError, match="i-particle 0 \\(id 7\\)"):
        lib.compute([[1.0, 0, 0]], [[0.0, 0, 0]], [7], 0.0, a=[[0.0, 0, 0]], nj=2)


@pytest.mark.parametrize("many", [False, True], ids=["default-parts", "many-parts"])
def test_device_reduce_matches_host_merge(backend, monkeypatch, many):
    """Parts combined by the device's reduce kernel (large launches) and on the host (small
    ones) follow the same rule in the same order: the same bits, nearest neighbours too.
    "many-parts": a launch table that cuts the j-range into more parts than the reduce
    kernel has lanes (each lane sums several parts before the tree)."""
    import sapporo.core.device
    import sapporo.core.layout
    from sapporo.core.launch import NI_CHUNK, LaunchTable

    n = 700
    x, v, m, ids, _, _ = system(n, seed=47)
    out = []
    # the threaded device (the companion of small launches keeps one part)
    monkeypatch.setenv("SAPPORO_SMALL_PAIRS", "0")
    for limit in (1 << 16, 0):  # 0: always the reduce kernel
        monkeypatch.setattr(sapporo.core.device, "HOST_REDUCE_MAX", limit)
        monkeypatch.setattr(sapporo.core.device, "GPU_HOST_REDUCE_MAX", limit)
        with sapporo.Library(order=4, precision="double", backend=backend) as lib:
            load(lib, x, v, m, ids)
            if many:
                cfg = lib.launch_tables()[0].for_ni(20)
                lib.set_launch_table(LaunchTable([(NI_CHUNK, dataclasses.replace(
                    cfg, groups_per_cu=512, min_jchunk=8))], source="test: many parts"))
            res = lib.compute(x[:20], v[:20], ids[:20], 0.0)
            (shape,) = lib._engine.shape(n, 20, False)
            assert shape["reduce"] == (limit == 0)
            assert shape["parts"] > (sapporo.core.layout.REDUCE_LANES if many else 1), shape
            out.append(res)
    a, b = out
    assert np.array_equal(a.acc, b.acc) and np.array_equal(a.jerk, b.jerk)
    assert np.array_equal(a.pot, b.pot) and np.array_equal(a.nn_index, b.nn_index)
    assert np.array_equal(a.nn_r2, b.nn_r2)
    r = ref.forces(x[:20], v[:20], ids[:20], x, v, m, ids, 0.0, order=4)
    assert ref.relative_vector_error(a.acc, r.acc, r.acc_abs).max() < 1e-13
    assert ref.relative_vector_error(a.jerk, r.jerk, r.jerk_abs).max() < 1e-13


def test_address_array_reused_by_the_caller(make_lib):
    """The library keeps the addresses to upload: an array the caller changes afterwards
    must not change what is uploaded (it did, when an int64 array was kept as given)."""
    lib = make_lib(4, "double", fresh=True)
    try:
        n = 64
        x, v, m, ids, _, _ = system(n, seed=61)
        load(lib, x, v, m, ids)
        lib.compute(x[:1], v[:1], ids[:1], EPS2)
        # stored while a call is pending: the library keeps the addresses to upload them
        # with the next plan (the native engine stores a batch at once otherwise)
        lib.start_compute(x[:1], v[:1], ids[:1], EPS2)
        addr = np.array([40, 41, 42])
        moved = x[40:43] + 0.25
        lib.set_j_particles(addr, ids[40:43], 0.0, m[40:43], moved, v[40:43])
        addr[:] = [0, 1, 2]  # the caller reuses its array
        lib.set_j_particles(addr, ids[:3], 0.0, m[:3], x[:3], v[:3])
        res = lib.compute(x[10:12], v[10:12], ids[10:12], EPS2)
        xj = x.copy()
        xj[40:43] = moved
        r = ref.forces(x[10:12], v[10:12], ids[10:12], xj, v, m, ids, EPS2, order=4)
        check(res, r, 4, "double", "after the caller reused its address array")
    finally:
        lib.close()
