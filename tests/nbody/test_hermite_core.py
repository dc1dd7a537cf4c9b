"""The native block step (``sapporo.nbody._hermite``) on the real library.

Each block step is checked against a brute-force choice of the block and against a float64
Hermite step on the float64 reference forces (``sapporo.reference``) written here; the
engine's way and the library's Python way give the same bits; the first steps are ones the
criterion accepts; the callback comes as asked. Tolerances (double precision, Plummer N = 48,
eps2 = 1e-4): corrected positions and velocities within 1e-12 of the float64 step (measured
on PoCL: below 1e-14), forces within 1e-11 relative (measured: about 1e-14).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sapporo import reference
from sapporo.nbody.hermite import HermiteIntegrator, predict_taylor, predict_taylor8
from sapporo.nbody.ic import plummer


class PythonWay:
    """A pass-through stand-in for a library: the core calls it the library's (Python) way."""

    def __init__(self, lib) -> None:
        self.lib = lib
        self.order, self.precision, self.device_name = lib.order, lib.precision, lib.device_name
        self.calls = 0

    def set_j_particles(self, *args, **kw):
        return self.lib.set_j_particles(*args, **kw)

    def set_time(self, t):
        return self.lib.set_time(t)

    def compute(self, *args, **kw):
        self.calls += 1
        return self.lib.compute(*args, **kw)


def record_steps(it: HermiteIntegrator, t_end: float, limit: int = 10**9) -> list:
    """The state before every block step and after the last one (callback_steps=1)."""
    states = [it.state()]

    def keep(integ: HermiteIntegrator) -> None:
        if len(states) <= limit:
            states.append(integ.state())

    it.evolve(t_end, callback=keep, callback_steps=1)
    return states


def test_block_is_the_brute_force_choice(backend):
    """Every block is exactly the particles with the smallest t + dt (a scan of all N),
    and the invariants of block steps hold after each."""
    x, v, m = plummer(64, seed=11)
    with HermiteIntegrator({"backend": backend, "precision": "double"}, x, v, m, order=4,
                           eps2=1e-4, dt_max=2.0**-4) as it:
        states = record_steps(it, 0.125)
    assert len(states) - 1 == states[-1].counters["block_steps"] > 20
    for before, after in zip(states, states[1:], strict=False):
        t_next = before.t + before.dt
        want = np.flatnonzero(t_next == t_next.min())
        moved = np.flatnonzero(after.t != before.t)
        np.testing.assert_array_equal(moved, want)
        assert after.time == t_next.min()
        assert np.all(np.frexp(after.dt)[0] == 0.5)
        assert np.all(np.fmod(after.t, after.dt) == 0.0)
        assert np.all((after.t <= after.time) & (after.t + after.dt > after.time))
        assert np.all(after.dt[moved] <= 2 * before.dt[moved])


def reference_step(before, order: int, eps2: float):
    """One block step of ``before`` in float64 numpy on the reference forces: the active
    particles, their corrected x, v and the forces at the end of the step."""
    t_next = before.t + before.dt
    tb = float(t_next.min())
    act = np.flatnonzero(t_next == tb)
    h = tb - before.t
    if order == 8:
        pop = np.asarray(before.meta["hermite8_pop"])
        d5 = np.asarray(before.meta["hermite8_d5"])
        xp, vp, ap, jp = predict_taylor8(h, before.x, before.v, before.a, before.jerk,
                                         before.snap, before.crackle, pop, d5)
    elif order == 6:
        xp, vp, ap = predict_taylor(h, before.x, before.v, before.a, before.jerk, before.snap,
                                    before.crackle)
        jp = None
    else:
        xp, vp, ap = predict_taylor(h, before.x, before.v, before.a, before.jerk)
        jp = None
    f = reference.forces(xp[act], vp[act], before.ids[act], xp, vp, before.m, before.ids, eps2,
                         order=order, ai=ap[act] if order >= 6 else None,
                         aj=ap if order >= 6 else None,
                         ji=jp[act] if order == 8 else None, jj=jp if order == 8 else None)
    hc = h[act][:, None]
    x0, v0, a0, j0 = before.x[act], before.v[act], before.a[act], before.jerk[act]
    a1, j1 = f.acc, f.jerk
    if order == 4:
        v1 = v0 + hc * (a1 + a0) / 2 + hc**2 * (j0 - j1) / 12
        x1 = x0 + hc * (v1 + v0) / 2 + hc**2 * (a0 - a1) / 12
    elif order == 6:
        s0, s1 = before.snap[act], f.snap
        v1 = v0 + hc * (a1 + a0) / 2 - hc**2 * (j1 - j0) / 10 + hc**3 * (s1 + s0) / 120
        x1 = x0 + hc * (v1 + v0) / 2 - hc**2 * (a1 - a0) / 10 + hc**3 * (j1 + j0) / 120
    else:
        s0, s1, c0, c1 = before.snap[act], f.snap, before.crackle[act], f.crackle
        v1 = (v0 + hc * (a0 + a1) / 2 + 3 * hc**2 * (j0 - j1) / 28 + hc**3 * (s0 + s1) / 84
              + hc**4 * (c0 - c1) / 1680)
        x1 = (x0 + hc * (v0 + v1) / 2 + 3 * hc**2 * (a0 - a1) / 28 + hc**3 * (j0 + j1) / 84
              + hc**4 * (s0 - s1) / 1680)
    return act, x1, v1, f


@pytest.mark.parametrize("order", [4, 6, 8])
def test_block_steps_against_the_float64_reference(backend, order):
    """The first block steps of a cluster: the native core's corrector on the library's
    forces equals a float64 Hermite step on the reference forces."""
    x, v, m = plummer(48, seed=3)
    eps2 = 1e-4
    with HermiteIntegrator({"backend": backend, "precision": "double"}, x, v, m, order=order,
                           eps2=eps2) as it:
        states = record_steps(it, 0.0625, limit=12)
    assert len(states) > 10
    for before, after in zip(states[:12], states[1:12], strict=False):
        act, x1, v1, f = reference_step(before, order, eps2)
        np.testing.assert_array_equal(np.flatnonzero(after.t != before.t), act)
        np.testing.assert_allclose(after.x[act], x1, rtol=0, atol=1e-12)
        np.testing.assert_allclose(after.v[act], v1, rtol=0, atol=1e-12)
        scale = np.abs(f.acc).max()
        np.testing.assert_allclose(after.a[act], f.acc, rtol=0, atol=1e-11 * scale)
        np.testing.assert_allclose(after.pot[act], f.pot, rtol=1e-11)
        if order >= 6:
            np.testing.assert_allclose(after.snap[act], f.snap, rtol=0,
                                       atol=1e-10 * np.abs(f.snap).max())


@pytest.mark.parametrize("order, precision", [(4, "double-single"), (6, "double"),
                                              (8, "double")])
def test_engine_and_the_python_way_agree(order, precision):
    """The core on the library's native engine and on the library's Python way (a stand-in
    that forwards every call) steps bit for bit the same."""
    import sapporo

    x, v, m = plummer(40, seed=6)
    kw = {"order": order, "eps2": 1e-4}
    got = []
    for wrap in (False, True):
        with sapporo.Library(order=order, precision=precision) as lib:
            use = PythonWay(lib) if wrap else lib
            with HermiteIntegrator(use, x, v, m, **kw) as it:
                it.evolve(0.125)
                got.append(it.state())
                if wrap:
                    assert use.calls > it.block_steps  # every force call came through Python
                else:
                    assert it._make_core().native is not None  # the engine was used
    a, b = got
    for name in ("x", "v", "a", "jerk", "snap", "crackle", "t", "dt", "pot"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.counters["block_steps"] == b.counters["block_steps"]


def test_first_step_is_one_the_criterion_accepts():
    """Two bodies at rest have zero jerk: the first guess |a| / |j| is infinite, but a step
    tried over dt_max shows the snap, and the first step comes down to one the criterion
    accepts."""
    x = np.array([[0.05, 0.0, 0.0], [-0.05, 0.0, 0.0]])
    v = np.zeros((2, 3))
    with HermiteIntegrator({"precision": "double"}, x, v, [0.5, 0.5], order=4) as it:
        first = it.dt.copy()
        # radial infall from rest: |a| = 50, |s| = 2 |a| G M / r^3 = 1e5 at r = 0.1
        want = math.sqrt(0.01 * 50 / 1e5)  # Aarseth with j = 0: sqrt(eta |a| / |s|)
        assert np.all(first < it.dt_max)
        # (the trial over dt_max passes through the collision, and its criterion jumps
        # lower than needed; the steps grow back by doubling)
        assert np.all(first <= want) and np.all(first > want / 16), (first, want)
        e0 = it.energy()
        it.evolve(2.0**-6)
        assert abs(it.energy() / e0 - 1) < 1e-6  # a first step of dt_max: past collision


def test_callbacks_come_as_asked():
    """callback_steps: after every k block steps and after the last; by default after the
    last block step at least; never with a bad count."""
    from sapporo import InputError

    x, v, m = plummer(32, seed=2)
    with HermiteIntegrator({"precision": "double"}, x, v, m, eps2=1e-4) as it:
        blocks: list[int] = []
        it.evolve(0.0625, callback=lambda integ: blocks.append(integ.block_steps),
                  callback_steps=5)
        n = it.block_steps
        assert blocks == list(range(5, n + 1, 5)) + ([n] if n % 5 else [])
        times: list[float] = []
        it.evolve(0.125, callback=lambda integ: times.append(integ.time))
        assert times and times[-1] == 0.125
        for bad in (0, -1, 1.5, True):
            with pytest.raises(InputError, match="callback_steps"):
                it.evolve(0.25, callback=print, callback_steps=bad)
        c = it.counters
        assert c["library_seconds"] > 0 and c["integrator_seconds"] >= 0


def test_ctrl_c_inside_the_core_finishes_the_block():
    """SIGINT while the core runs (no callback, so no return to Python between block steps):
    the core finishes the block, evolve raises KeyboardInterrupt with a consistent state, and
    the run continues from there to the uninterrupted result."""
    import os
    import signal
    import threading

    x, v, m = plummer(512, seed=8)
    kw = {"order": 4, "eps2": 1e-4}
    with HermiteIntegrator({"precision": "double"}, x, v, m, **kw) as it:
        timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                it.evolve(1024.0)  # far beyond what 0.05 s of any machine reaches
        finally:
            timer.cancel()
        assert it.interrupted and 0 < it.time < 1024.0
        assert np.all((it.t <= it.time) & (it.t + it.dt > it.time))
        assert it.block_steps == it.n_active_counts.sum()
        it.evolve(0.125 * math.ceil(it.time / 0.125))
        got = it.state()
    with HermiteIntegrator({"precision": "double"}, x, v, m, **kw) as ref:
        ref.evolve(got.time)
        want = ref.state()
    # the interruption adds no stop time: the same trajectory
    np.testing.assert_array_equal(got.x, want.x)
    assert got.counters["block_steps"] == want.counters["block_steps"]


def test_extra_j_particles_of_a_shared_library_are_felt():
    """A library the caller opened may hold j-particles beyond the integrator's (a fixed
    perturber at a higher address): every force call reads them, on the engine's way as on
    the Python way."""
    import sapporo

    x, v, m = plummer(24, seed=4)
    got = []
    for wrap in (False, True):
        with sapporo.Library(order=4, precision="double") as lib:
            lib.set_j_particles([30], [1000], 0.0, 5.0, [[3.0, 0.0, 0.0]], [[0.0, 0.0, 0.0]])
            use = PythonWay(lib) if wrap else lib
            with HermiteIntegrator(use, x, v, m, eps2=1e-4) as it:
                it.evolve(0.0625)
                got.append(it.state())
    with sapporo.Library(order=4, precision="double") as lib:
        with HermiteIntegrator(lib, x, v, m, eps2=1e-4) as alone:
            alone.evolve(0.0625)
            without = alone.state()
    np.testing.assert_array_equal(got[0].x, got[1].x)
    assert np.abs(got[0].a - without.a).max() > 1e-3  # the perturber pulls
