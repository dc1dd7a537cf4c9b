"""Double-single far from the origin: the right forces or the documented refusal (issue 42).

Double-single computes every pair term in float. The kernels used to form them as the factor
m/R^3 times d (and dv, da, dj), a factor that leaves float's range long before the terms do:
with 64 particles of mass 1/64 in a cube of half-side 1e13 it was a denormal (accelerations
off by 1e-5 of their scale), from about 1e15 it was zero (accelerations 0), and the calls
succeeded. Where r^2 overflowed float (separations above about 1.8e19) the reciprocal square
root gave 0 and the pair vanished, again with success, on CUDA (and on OpenCL where the
Newton step did not happen to make a NaN of it). Now every term is m/R^2 times a vector with
R's scale taken out, and a softened r^2 beyond float's range makes the result non-finite, so
that the library refuses the call with its NonFiniteError naming the particle (the C API's
-5) on both backends.

Each case here is checked against the float64 reference (:mod:`sapporo.reference`): where
every pair's r^2 and acceleration term are inside float's normal range, the forces must be
within the double-single bound of docs/accuracy.md (1e-5 of sum_j |term_j| per particle,
the potential within 1e-5); where some pair's r^2 is far beyond it, the call must be refused.
Never success with wrong forces. The sets: a cube of half-side L centred at the origin, and a
small cube (half-side 1e-3 or 1e-6 of its distance D) at distance D, for L and D from 1e13
to 1e30; velocities, accelerations and jerks at the scale of the set's size over unit time
(so that the jerk, snap and crackle terms are of the size of the acceleration terms and
representable as well). On OpenCL and the CUDA emulation (tests/cudaemu), at every order,
with and without neighbour lists, and for orders 2 and 4 in other launch shapes (one
i-particle per work-item through local memory, 2 and 4 per work-item, and OpenCL's lanes
over j-particles), which take the other reciprocal square roots of the kernels.
"""

from __future__ import annotations

import contextlib
import os
import re
from functools import cache

import numpy as np
import pytest

import sapporo
from sapporo import reference as ref
from sapporo.backend import capabilities, probe_backends
from sapporo.core.launch import LaunchConfig, LaunchTable

TOL = 1e-5  # docs/accuracy.md: the double-single bound of every quantity
FLT_MAX = float(np.finfo(np.float32).max)
FLT_MIN = float(np.finfo(np.float32).tiny)
N = 64
SCALES = [1e13, 1e15, 1e16, 1e17, 1e19, 1e25, 1e30]
ORDERS = [2, 4, 6, 8]
REFUSED = r"non-finite force on i-particle \d+ \(id \d+\)"


@cache
def _usable() -> dict[str, str]:
    """Reasons the real backends are unusable ('' where usable)."""
    return {s.name: "" if s.devices else s.reason for s in probe_backends()}


@pytest.fixture(scope="module", params=["opencl", "cuda", "cuda-emulated"])
def backend_name(request: pytest.FixtureRequest) -> str:
    """The backends to test: OpenCL, a real CUDA GPU, or else CUDA's CPU emulation."""
    name = request.param
    wanted = os.environ.get("SAPPORO_TEST_BACKENDS")
    if wanted and name not in {w.strip() for w in wanted.split(",")}:
        pytest.skip(f"SAPPORO_TEST_BACKENDS={wanted}")
    if name == "cuda-emulated":
        if os.environ.get("SAPPORO_TEST_CUDA_EMULATION", "").strip().lower() in ("0", "off", "no"):
            pytest.skip("SAPPORO_TEST_CUDA_EMULATION turns the emulation off")
        if not _usable().get("cuda", "no cuda backend"):
            pytest.skip("a CUDA GPU is usable: the real one is tested instead")
        pytest.importorskip("cudaemu")
    elif _usable().get(name, "not probed"):
        pytest.skip(f"backend {name} unusable here: {_usable()[name]}")
    return name


@pytest.fixture(scope="module")
def libs(backend_name: str):
    """One library per order on this backend (closed at the end of the module)."""
    cache_: dict[int, sapporo.Library] = {}
    yield cache_
    for lib in cache_.values():
        lib.close()


@pytest.fixture
def lib_for(backend_name: str, libs):
    """``lib_for(order)``: the backend's library of that order, reset, at t = 0."""
    with contextlib.ExitStack() as stack:
        if backend_name == "cuda-emulated":
            from cudaemu.fake_pycuda import emulated_cuda

            stack.enter_context(emulated_cuda())

        def get(order: int) -> sapporo.Library:
            if order not in libs:
                backend = "cuda" if backend_name == "cuda-emulated" else backend_name
                libs[order] = sapporo.Library(order=order, precision="double-single",
                                              backend=backend)
            lib = libs[order]
            lib.reset()
            lib.set_time(0.0)
            return lib

        yield get


def shapes(backend_name: str) -> list[tuple[str, LaunchTable]]:
    """Launch shapes besides the default one, as the backend has them."""
    caps = capabilities("opencl" if backend_name == "opencl" else "cuda")
    cfgs = {
        "lanes": LaunchConfig(li=8, lj=16, w=1, jt=128, use_local=True, groups_per_cu=2),
        "w2": LaunchConfig(li=8, lj=1, w=2, jt=64, use_local=False, groups_per_cu=2),
        "w4": LaunchConfig(li=4, lj=1, w=4, jt=64, use_local=False, groups_per_cu=2),
        # AVX2's and AVX-512's register widths (whichever is not the default here)
        "w8": LaunchConfig(li=1, lj=1, w=8, jt=64, use_local=False, groups_per_cu=2),
        "w16": LaunchConfig(li=1, lj=1, w=16, jt=64, use_local=False, groups_per_cu=2),
    }
    if caps.jv:
        cfgs["jv"] = LaunchConfig(li=1, lj=1, w=8, jt=64, use_local=False, groups_per_cu=2,
                                  jv=True)
    return [(name, LaunchTable([(1 << 20, cfg)])) for name, cfg in cfgs.items()
            if cfg.w in caps.widths]


def cluster(size: float, centre: float, seed: int) -> dict[str, np.ndarray]:
    """N particles of mass 1/N in a cube of half-side ``size`` around (1, -1/2, 1/4) *
    ``centre``; velocities, accelerations and jerks of the size's scale over unit time."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-size, size, (N, 3)) + centre * np.array([1.0, -0.5, 0.25])
    v, a, jerk = (rng.uniform(-size, size, (N, 3)) for _ in range(3))
    ids = rng.permutation(N) * 2 + 1
    return {"x": x, "v": v, "a": a, "jerk": jerk, "m": np.full(N, 1.0 / N), "ids": ids}


def expected(s: dict[str, np.ndarray], eps2: float) -> str | None:
    """'compute' where every pair's softened r^2 and acceleration term m/R^2 are inside
    float's normal range (with a margin), 'refuse' where some r^2 is far beyond it, None
    in between (either is right)."""
    x, m = s["x"], s["m"]
    d = x[None, :, :] - x[:, None, :]
    pair = ~np.eye(N, dtype=bool)
    r2 = (d * d).sum(axis=-1)[pair] + eps2
    if r2.max() > 2 * FLT_MAX:
        return "refuse"
    if r2.max() < FLT_MAX / 2 and (np.broadcast_to(m, (N, N))[pair] / r2).min() > 2 * FLT_MIN:
        return "compute"
    return None


def check(lib: sapporo.Library, s: dict[str, np.ndarray], eps2: float, label: str,
          h2: float | None = None) -> str:
    """One call on every particle; 'computed' (checked against the reference) or
    'refused'."""
    order = lib.order
    x, v, a, jerk, m, ids = (s[k] for k in ("x", "v", "a", "jerk", "m", "ids"))
    want = expected(s, eps2)
    try:
        res = lib.compute(x, v, ids, eps2, h2=h2, a=a if order >= 6 else None,
                          jerk=jerk if order >= 8 else None)
    except sapporo.NonFiniteError as exc:
        assert want != "compute", f"{label}: refused inside float's range: {exc}"
        assert re.search(REFUSED, str(exc)), str(exc)
        return "refused"
    assert want != "refuse", f"{label}: r^2 beyond float's range, but the call succeeded"
    a6, j8 = (a if order >= 6 else None), (jerk if order >= 8 else None)
    r = ref.forces(x, v, ids, x, v, m, ids, eps2, order=order, ai=a6, aj=a6, ji=j8, jj=j8,
                   h2=h2)
    names = ["acc", "jerk", "snap", "crackle"][: order // 2]
    for name in names:
        err = ref.relative_vector_error(getattr(res, name), getattr(r, name),
                                        getattr(r, f"{name}_abs"))
        assert err.max() <= TOL, f"{label}: {name} error {err.max():.2e} > {TOL}"
    perr = np.abs(res.pot - r.pot) / r.pot_abs
    assert perr.max() <= TOL, f"{label}: pot error {perr.max():.2e} > {TOL}"
    # nearest-neighbour distances to float rounding (a differing choice is a near-tie)
    np.testing.assert_allclose(res.nn_r2, r.nn_r2, rtol=TOL, err_msg=label)
    if h2 is not None:
        r2 = ((x[None, :, :] - x[:, None, :]) ** 2).sum(axis=-1)
        pos = {int(i): k for k, i in enumerate(ids)}
        for k in range(N):
            for j in np.setxor1d(res.neighbours(k), r.neighbours[k]):
                assert abs(r2[k, pos[int(j)]] - h2) <= TOL * h2, f"{label}: list of {k}"
        assert res.neighbour_counts.sum() > 0
    return "computed"


def run_cases(lib: sapporo.Library, s: dict[str, np.ndarray], size: float, label: str,
              backend_name: str) -> set[str]:
    """eps2 = 0 and eps2 = (size / 100)^2, with and without lists, and the other launch
    shapes at orders 2 and 4; the outcomes seen."""
    order = lib.order
    lib.set_j_particles(np.arange(N), s["ids"], 0.0, s["m"], s["x"], s["v"],
                        a=s["a"] if order >= 6 else None, jerk=s["jerk"] if order >= 8 else None)
    seen = set()
    for eps2 in (0.0, (size / 100) ** 2):
        seen.add(check(lib, s, eps2, f"{label}, eps2 {eps2:g}"))
    seen.add(check(lib, s, 0.0, f"{label}, lists", h2=(size / 2) ** 2))
    if order <= 4:
        old = lib.launch_tables()[0]
        try:
            for name, table in shapes(backend_name):
                lib.set_launch_table(table)
                seen.add(check(lib, s, 0.0, f"{label}, {name}"))
        finally:
            lib.set_launch_table(old)
    return seen


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("half_side", SCALES)
def test_cube_around_the_origin(lib_for, backend_name: str, order: int,
                                half_side: float) -> None:
    """A cube of half-side L centred at the origin: computed up to L = 1e17 (acceleration
    terms down to 1e-37), refused from 1e19 (r^2 up to 1e39)."""
    s = cluster(half_side, 0.0, seed=int(np.log10(half_side)))
    seen = run_cases(lib_for(order), s, half_side, f"cube of half-side {half_side:g}",
                     backend_name)
    assert seen == ({"computed"} if half_side <= 1e17 else {"refused"})


@pytest.mark.parametrize("relative", [1e-3, 1e-6])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("distance", SCALES)
def test_small_cube_far_away(lib_for, backend_name: str, order: int, distance: float,
                             relative: float) -> None:
    """A cube of half-side ``relative`` * D at distance D: the j - i differences of the
    hi/lo floats keep 1e-5 at these relative sizes (docs/accuracy.md), and the range is
    that of the separations, not of the coordinates."""
    size = relative * distance
    s = cluster(size, distance, seed=int(np.log10(distance)) + 40)
    seen = run_cases(lib_for(order), s, size, f"cube of half-side {size:g} at {distance:g}",
                     backend_name)
    assert seen == ({"computed"} if size <= 1e17 else {"refused"})
