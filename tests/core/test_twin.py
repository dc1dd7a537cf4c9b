"""The companion's twin (sapporo/core/twin.c): small force calls on PoCL's CPU companion split
their j-range in two, the second half on a second single-threaded device run by a thread of
the engine. Checked against the float64 reference, against the same calls without a twin,
and with the twin's thread asleep (its job then run by the caller)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sapporo
from sapporo import reference as ref
from sapporo.backend import get_backend
from sapporo.core import device as core_device

EPS2 = 1e-4


def _twin_or_skip() -> None:
    try:
        infos = get_backend("opencl").devices()
    except sapporo.SapporoError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    if not infos or not infos[0].companion:
        pytest.skip("no companion device (not PoCL, or POCL_DEVICES set by the user)")
    with sapporo.Library(order=2, backend="opencl") as lib:
        if not lib._devs[0].ctx.twin:
            pytest.skip("no twin (one core, or POCL_DEVICES set by the user)")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize(("order", "precision"),
                         [(2, "double-single"), (4, "double-single"), (4, "double"),
                          (6, "double-single"), (8, "double")])
def test_split_calls_match_the_reference(order, precision):
    """Block sizes on both sides of TWIN_NI and TWIN_PAIRS, at a new time each (moving
    j-particles): the small ones run on the companion alone (one part), the others in two
    parts, one on the twin, which also predicts the records of its part; every result
    within the precision's tolerance of the float64 reference, the nearest neighbours
    exact."""
    _twin_or_skip()
    n = 1500
    x, v, m = ref.plummer(n, seed=21)
    rng = np.random.default_rng(21)
    ids = rng.permutation(n) * 3 + 2
    a = rng.normal(scale=0.5, size=(n, 3))
    jerk = rng.normal(scale=0.5, size=(n, 3))
    tol = 1e-6 if precision == "double-single" else 1e-12
    with sapporo.Library(order=order, precision=precision, backend="opencl") as lib:
        lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v, a=a, jerk=jerk)
        seen = set()
        for k, ni in enumerate((1, 3, 5, 17, 43, 100, 301)):
            t = 1e-3 * k
            lib.set_time(t)
            # the j-particles predicted as the library does, from the derivatives given
            d = (a, jerk)
            xp = x + t * (v + t * (d[0] / 2 + t * d[1] / 6))
            vp = v + t * (d[0] + t * d[1] / 2)
            ap = d[0] + t * d[1]
            sel = np.sort(rng.choice(n, ni, replace=False))
            extra = {"a": a[sel] if order >= 6 else None,
                     "jerk": jerk[sel] if order >= 8 else None}
            f = lib.compute(xp[sel], vp[sel], ids[sel], EPS2, **extra)
            (shape,) = lib._engine.shape(n, ni, False)
            if shape["small"]:
                twin = (shape["ni_pad"] >= core_device.TWIN_NI
                        and shape["ni_pad"] * n >= core_device.TWIN_PAIRS)
                assert shape["twin"] == twin and shape["parts"] == 1 + twin, (ni, shape)
                assert shape["twin_predicts"] == twin, shape
                seen.add(twin)
            r = ref.forces(xp[sel], vp[sel], ids[sel], xp, vp, m, ids, EPS2, order=order,
                           ai=extra["a"], aj=ap, ji=extra["jerk"], jj=d[1])
            assert ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max() <= tol, ni
            if order >= 4:
                assert ref.relative_vector_error(f.jerk, r.jerk, r.jerk_abs).max() <= 10 * tol
            np.testing.assert_allclose(f.pot, r.pot, rtol=tol, atol=0)
            np.testing.assert_array_equal(f.nn_index, r.nn_index)
        assert seen == {False, True}, "both kinds of small call were not made"


def test_a_sleeping_twin_gives_the_same_bits(monkeypatch):
    """With no polling (SAPPORO_SPIN_US=0) the twin's thread sleeps between calls and the
    caller runs the job it has not taken yet: the same bits as a polling twin, call after
    call; the thread ends with its library."""
    _twin_or_skip()
    n = 2000
    x, v, m = ref.plummer(n, seed=5)
    ids = np.arange(n)
    sel = np.arange(0, n, 31)
    out = []
    before = _threads()
    for spin in ("300", "0"):
        monkeypatch.setenv("SAPPORO_SPIN_US", spin)
        with sapporo.Library(order=4, backend="opencl") as lib:
            lib.set_j_particles(ids, ids, 0.0, m, x, v)
            assert lib._engine.shape(n, len(sel), False)[0]["twin"]
            runs = []
            for k in range(40):
                lib.set_time(1e-3 * (k % 3))
                runs.append(lib.compute(x[sel], v[sel], ids[sel], EPS2))
            assert _threads() == before + 1  # the twin's thread
        out.append(runs)
    assert _threads() == before
    for f, g in zip(*out, strict=True):
        for name in ("acc", "jerk", "pot", "nn_index", "nn_r2"):
            np.testing.assert_array_equal(getattr(f, name), getattr(g, name), err_msg=name)


def test_twin_false_keeps_small_calls_on_one_core():
    """Library(twin=False): no twin, one part per small call; twin must be a bool."""
    _twin_or_skip()
    n = 1000
    x, v, m = ref.plummer(n, seed=6)
    ids = np.arange(n)
    with sapporo.Library(order=4, backend="opencl", twin=False) as lib:
        assert not lib._devs[0].ctx.twin
        lib.set_j_particles(ids, ids, 0.0, m, x, v)
        f = lib.compute(x[:40], v[:40], ids[:40], EPS2)
        (shape,) = lib._engine.shape(n, 40, False)
        assert shape["small"] and not shape["twin"] and shape["parts"] == 1
        r = ref.forces(x[:40], v[:40], ids[:40], x, v, m, ids, EPS2, order=4)
        assert ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max() <= 1e-6
    with pytest.raises(sapporo.InputError, match="twin"):
        sapporo.Library(order=4, backend="opencl", twin="no")


def test_without_a_twin_the_same_forces(tmp_path):
    """The same calls in a process whose PoCL has one single-threaded device (POCL_DEVICES
    'pthread basic'): no twin, one part per small call, forces equal to rounding."""
    _twin_or_skip()
    script = textwrap.dedent("""
        import sys, numpy as np, sapporo
        from sapporo import reference as ref
        n = 1200
        x, v, m = ref.plummer(n, seed=8)
        ids = np.arange(n)
        with sapporo.Library(order=4, backend="opencl") as lib:
            lib.set_j_particles(ids, ids, 0.0, m, x, v)
            f = lib.compute(x[::9], v[::9], ids[::9], 1e-4)
            (shape,) = lib._engine.shape(n, len(ids[::9]), False)
            twin = lib._devs[0].ctx.twin
        np.savez(sys.argv[1], acc=f.acc, jerk=f.jerk, pot=f.pot, nn=f.nn_index,
                 how=[float(twin), float(shape["parts"])])
    """)
    out = {}
    for name, devices in (("twin", None), ("alone", "pthread basic")):
        env = dict(os.environ)
        env.pop("POCL_DEVICES", None)
        if devices:
            env["POCL_DEVICES"] = devices
        path = tmp_path / f"{name}.npz"
        subprocess.run([sys.executable, "-c", script, str(path)], env=env, check=True,
                       timeout=600)
        out[name] = dict(np.load(path))
    assert out["twin"]["how"].tolist() == [1.0, 2.0]
    assert out["alone"]["how"].tolist() == [0.0, 1.0]
    for name in ("acc", "jerk", "pot"):  # double-single: to its rounding, 1e-7 of the scale
        a, b = out["twin"][name], out["alone"][name]
        assert np.abs(a - b).max() <= 1e-6 * np.abs(b).max(), name
    np.testing.assert_array_equal(out["twin"]["nn"], out["alone"]["nn"])
