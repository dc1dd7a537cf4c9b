"""The cutoff (short-range) force of order 2: ``Library(order=2, cutoff=...)``.

The kernels (OpenCL, and CUDA on the emulation of tests/cudaemu; both precisions, both
splits) against the float64 reference (:func:`sapporo.reference.cutoff_factors`), at
separations across the cutoff; the reference's factors against their closed forms and
their defining relations; and the Gaussian split's short-range force plus the particle-mesh
long-range force of :mod:`sapporo.pm` against the direct Newtonian sum.

Tolerances (docs/accuracy.md, "The cutoff force"): per i-particle, the acceleration error
over the sum of the Newtonian pair magnitudes ``sum_j m_j |r| / R^3``, and the potential
error over ``sum_j m_j / R``: 1e-12 in double, 2e-6 in double-single (measured on PoCL and
the emulated CUDA: 1e-14, the reference's own rounding near the S2 cutoff, and 5e-7).
"""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest

import sapporo
from sapporo import reference as ref
from sapporo.backend.base import load_source
from sapporo.errors import InputError

TOL = {"double": 1e-12, "double-single": 2e-6}
PRECISIONS = ("double", "double-single")
SHAPES = ("s2", "gauss")
SCALE = 0.4


def run(lib: sapporo.Library, x: np.ndarray, m: np.ndarray, xi: np.ndarray, eps2: float,
        ids_i: np.ndarray | None = None):
    """Forces on ``xi`` from the j-particles ``x, m`` (ids 0 .. n-1; the i-particles' ids
    ``ids_i``, default n, n+1, ...: no pair excluded)."""
    n = len(m)
    lib.reset()
    lib.set_j_particles(np.arange(n), np.arange(n), 0.0, m, x, np.zeros((n, 3)))
    ids = np.arange(len(xi)) + n if ids_i is None else ids_i
    return lib.compute(xi, np.zeros_like(xi), ids, eps2)


def check(res, r, precision: str, label: str = "") -> None:
    tol = TOL[precision]
    err = ref.relative_vector_error(res.acc, r.acc, r.acc_abs)
    assert err.max() <= tol, f"{label} acc error {err.max():.2e} > {tol}"
    perr = np.abs(res.pot - r.pot) / r.pot_abs
    assert perr.max() <= tol, f"{label} pot error {perr.max():.2e} > {tol}"


def cluster(n: int = 300, seed: int = 7):
    """Bodies in a cube of side 1.2: pair separations from 0 to 2 cutoff scales and more."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.6, 0.6, (n, 3))
    m = rng.uniform(0.5, 1.5, n) / n
    return x, m


def probes(scale: float) -> np.ndarray:
    """Separations in units of ``scale``: far inside, around the S2 break (x = 2R/a = 1) and
    its support (R = a), and beyond."""
    return np.array([1e-3, 0.05, 0.3, 0.49, 0.5, 0.51, 0.8, 0.95, 0.99, 0.999, 1.0, 1.001,
                     1.2, 2.0, 5.0]) * scale


def check_kernel(backend: str, precision: str, shape: str) -> None:
    x, m = cluster()
    n = len(m)
    with sapporo.Library(order=2, precision=precision, backend=backend, cutoff=SCALE,
                         cutoff_shape=shape) as lib:
        assert lib.cutoff == SCALE and lib.cutoff_shape == shape
        # all pairs of the cluster, self pairs excluded by id, softened
        res = run(lib, x, m, x, 1e-4, ids_i=np.arange(n))
        r = ref.forces(x, None, np.arange(n), x, None, m, np.arange(n), 1e-4, order=2,
                       cutoff=SCALE, cutoff_shape=shape)
        check(res, r, precision, f"{precision} {shape} cluster")
        # one unit mass, probes at separations across the cutoff along a skew direction,
        # unsoftened
        d = np.array([0.48, -0.6, 0.64])
        xi = probes(SCALE)[:, None] * d + 0.1
        one = np.array([[0.1, 0.1, 0.1]])
        res = run(lib, one, np.ones(1), xi, 0.0)
        r = ref.forces(xi, None, np.arange(len(xi)) + 1, one, None, np.ones(1), [0], 0.0,
                       order=2, cutoff=SCALE, cutoff_shape=shape)
        check(res, r, precision, f"{precision} {shape} probes")
        # two at a time: where the kernels' vector lanes run over j (PoCL's JV shapes)
        for k in range(0, len(xi), 2):
            pair = run(lib, one, np.ones(1), xi[k:k + 2], 0.0)
            rows = slice(k, k + 2)
            err = ref.relative_vector_error(pair.acc, r.acc[rows], r.acc_abs[rows])
            perr = np.abs(pair.pot - r.pot[rows]) / r.pot_abs[rows]
            assert err.max() <= TOL[precision] and perr.max() <= TOL[precision], k
        if shape == "s2":  # no force nor potential from R >= a on
            beyond = probes(SCALE) > SCALE * (1 + 1e-6)
            assert np.all(res.acc[beyond] == 0) and np.all(res.pot[beyond] == 0)
            assert np.all(res.acc[probes(SCALE) < SCALE * (1 - 1e-6)] != 0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_kernel_against_reference(backend: str, precision: str, shape: str) -> None:
    check_kernel(backend, precision, shape)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_emulated_cuda_kernel_against_reference(precision: str, shape: str) -> None:
    """kernels_cuda/force.cu's cutoff on the CPU emulation of CUDA (a few seconds each)."""
    cudaemu = pytest.importorskip("cudaemu")
    ok, why = cudaemu.available()
    if not ok:
        pytest.skip(why)
    from cudaemu.fake_pycuda import emulated_cuda

    with emulated_cuda():
        check_kernel("cuda", precision, shape)


def test_coincident_pairs_are_left_out(backend: str) -> None:
    """Two bodies at one place with eps2 = 0 (different ids): no force and no potential
    between them (PG5/table and sapporo.pm do the same), not a non-finite error."""
    x = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.1, 0.0, 0.0]])
    m = np.array([1.0, 2.0, 3.0])
    with sapporo.Library(order=2, precision="double", backend=backend, cutoff=SCALE) as lib:
        res = run(lib, x, m, x[:1], 0.0)
    r = ref.forces(x[:1], None, [9], x, None, m, [0, 1, 2], 0.0, order=2, cutoff=SCALE)
    assert np.isfinite(res.acc).all() and np.isfinite(res.pot).all()
    check(res, r, "double")
    g, h = ref.cutoff_factors(np.array([0.1]), SCALE)
    assert res.acc[0, 0] == pytest.approx(3.0 * g[0] / 0.01, rel=1e-12)
    assert res.pot[0] == pytest.approx(-3.0 * h[0] / 0.1, rel=1e-12)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"order": 4, "cutoff": 0.1}, "order 2"),
    ({"order": 2, "cutoff": -1.0}, "split length"),
    ({"order": 2, "cutoff": float("nan")}, "split length"),
    ({"order": 2, "cutoff": 1e-40}, "split length"),
    ({"order": 2, "cutoff": True}, "split length"),
    ({"order": 2, "cutoff": "0.1"}, "split length"),
    ({"order": 2, "cutoff": 0.1, "cutoff_shape": "plummer"}, "cutoff_shape"),
])
def test_bad_cutoff_is_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        sapporo.Library(backend="opencl", **kwargs)


@pytest.mark.skipif(shutil.which("cpp") is None, reason="no C preprocessor (cpp)")
@pytest.mark.parametrize(("language", "name"), [("opencl", "force.cl"), ("cuda", "force.cu")])
def test_newtonian_kernels_have_no_cutoff_code(language: str, name: str) -> None:
    """Without CUTOFF (the library defines nothing then) the force kernels preprocess to the
    same text as with CUTOFF=0 and hold none of the cutoff's code: the Newtonian kernels are
    those built before the cutoff existed."""
    from sapporo.core.device import Variant

    assert Variant(2, "double", 256).force_defines() == {}
    src = load_source(language, name)
    texts = []
    for extra in ([], ["-DCUTOFF=0"]):
        for order in (2, 4):
            out = subprocess.run(["cpp", "-P", "-undef", f"-DORDER={order}", *extra],
                                 input=src, capture_output=True, text=True, check=True).stdout
            assert "cut_g" not in out and "erfc" not in out
            texts.append(out)
    assert texts[:2] == texts[2:]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) is not installed")
@pytest.mark.parametrize("cutoff", [1, 2])
def test_cuda_cutoff_kernels_compile_to_ptx(cutoff: int) -> None:
    """force.cu with CUTOFF, both precisions, one i-particle per thread and two: PTX for
    sm_90 with the backend's options and warnings as errors (as tests/kernels compiles the
    Newtonian variants), and CUTOFF at order 4 stops the build."""
    import tempfile
    from pathlib import Path

    from sapporo.backend import quirks
    from sapporo.backend.base import kernel_dir, shared_include_dir

    src = kernel_dir("cuda") / "force.cu"
    with tempfile.TemporaryDirectory(prefix="sapporo-nvcc-") as tmp:
        for defines in ([f"-DPRECISION={p}", *shape] for p in (1, 2)
                        for shape in ([], ["-DW=2", "-DLI=64", "-DJT=128"], ["-DORDER=4"])):
            cmd = ["nvcc", "--ptx", "-arch=sm_90", "--Werror", "all-warnings",
                   *quirks.cuda_build_options(), f"-I{shared_include_dir()}", "-DORDER=2",
                   f"-DCUTOFF={cutoff}", "-DCUTOFF_R=0.046875", *defines,
                   "-o", str(Path(tmp) / "out.ptx"), str(src)]
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=src.parent,
                                 timeout=300)
            if "-DORDER=4" in defines:
                assert res.returncode != 0 and "CUTOFF needs ORDER 2" in res.stderr
            else:
                assert res.returncode == 0, res.stdout + res.stderr
                assert ".entry force" in (Path(tmp) / "out.ptx").read_text()


# ------------------------------------------------------------------------------ reference


def test_s2_factors_closed_forms_and_relations() -> None:
    """The reference's g (from Hockney & Eastwood's S2 force) and h (by quadrature) against
    the kernels' closed forms (sapporo/variants.h); d/dR (h / R) = -g / R^2; g = h = 1 at 0,
    continuous at the break x = 1, zero from R = a on."""
    a = 0.3
    R = np.linspace(0.0, 1.25 * a, 5001)
    g, h = ref.cutoff_factors(R, a)
    x = 2 * R / a
    t = np.maximum(2 - x, 0)
    g_closed = np.where(x < 1, 140 - x**3 * (224 - 224 * x**2 + 70 * x**3 + 48 * x**4
                                             - 21 * x**5),
                        t**5 * (168 - 182 * t + 64 * t**2 - 7 * t**3)) / 140
    h_closed = np.where(x < 1, 140 - 208 * x + 112 * x**3 - 56 * x**5 + 14 * x**6 + 8 * x**7
                        - 3 * x**8, t**6 * (14 - 8 * t + t**2)) / 140
    assert np.abs(g - g_closed).max() < 1e-13 and np.abs(h - h_closed).max() < 1e-13
    assert g[0] == 1 and h[0] == 1 and np.all(g[R >= a] == 0) and np.all(h[R >= a] == 0)
    # the derivative relation by central differences of h / R (error (dR / R)^2 < 1e-6
    # from R = 0.25 a on)
    q = h[1:] / R[1:]
    deriv = (q[2:] - q[:-2]) / (2 * (R[1] - R[0]))
    k = R[2:-1] >= 0.25 * a
    assert np.allclose(deriv[k] * R[2:-1][k] ** 2, -g[2:-1][k], rtol=0, atol=1e-5)
    # the short-range part falls as the S2 clouds' long-range force grows to Newton's (near
    # a the reference's 1 - R^2 F_S2 is rounding noise of 1e-16)
    assert np.all(np.diff(g[R < 0.8 * a]) < 0)


def test_s2_long_range_part_is_the_s2_mesh_potential() -> None:
    """What a TreePM code's mesh computes with the S2 Green's function -4 pi S(k)^2 / k^2,
    S(k) = 12 (2 - 2 cos u - u sin u) / u^4 with u = k a / 2 (docs/capi.md), is the
    long-range potential -(1 - h(R)) / R of the reference: the inverse transform
    -(2/pi) int S(k)^2 sin(kR) / (kR) dk, by the trapezoidal rule, agrees to 1e-6."""
    a = 1.0
    k = np.linspace(0.0, 800.0, 800_001)
    u = k * a / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        S = np.where(u < 1e-2, 1 - u * u / 15 + u**4 / 560,
                     12 * (2 - 2 * np.cos(u) - u * np.sin(u)) / u**4)
    R = np.array([0.02, 0.3, 0.5, 0.7, 0.99, 1.5])
    _, h = ref.cutoff_factors(R, a)
    for r, hr in zip(R, h, strict=True):
        f = S * S * np.sinc(k * r / np.pi)  # sin(kr) / (kr)
        mesh = -(2 / np.pi) * np.sum((f[1:] + f[:-1]) / 2) * (k[1] - k[0])
        assert mesh == pytest.approx(-(1 - hr) / r, abs=1e-6), r


def test_gauss_factors_are_the_p3m_split() -> None:
    """The Gaussian split is sapporo.pm's: short-range force m (erfc(u) + 2u exp(-u^2) /
    sqrt(pi)) / r^2 and potential -m erfc(u) / r with u = r / (2 r_s)."""
    rs = 0.05
    R = np.array([1e-4, 0.01, 0.1, 0.2, 0.5])
    g, h = ref.cutoff_factors(R, rs, "gauss")
    for r, gi, hi in zip(R, g, h, strict=True):
        u = r / (2 * rs)
        assert gi == pytest.approx(math.erfc(u) + 2 * u * math.exp(-u * u) / math.sqrt(math.pi),
                                   rel=1e-14, abs=1e-300)
        assert hi == pytest.approx(math.erfc(u), rel=1e-14, abs=1e-300)


def test_reference_refuses_cutoff_beyond_order_2() -> None:
    x = np.zeros((1, 3))
    with pytest.raises(InputError, match="order 2"):
        ref.forces(x, x, [0], x, x, [1.0], [1], 0.1, order=4, cutoff=0.1)
    with pytest.raises(InputError, match="cutoff_shape"):
        ref.cutoff_factors(np.ones(2), 0.1, "cubic")


# ------------------------------------------------------------------------- with the mesh


def test_mesh_long_range_plus_short_range_is_newton(backend: str) -> None:
    """The Gaussian split: sapporo.pm's long-range mesh force (ParticleMesh with split=r_s,
    as P3M builds it: isolated 32^3 box of side 8, TSC, 4-point gradient, deconvolution)
    plus ``Library(order=2, cutoff=r_s, cutoff_shape="gauss")`` over all pairs, against the
    direct Newtonian sum of a Plummer sphere (about 1900 bodies). The potential adds the
    long-range self-term back, m / (r_s sqrt(pi)), as P3M.forces does. Measured: median
    relative force error 0.14%, largest 0.54%; potential median 8e-5 (the mesh alone:
    median 52%). Bounds as for P3M (tests/pm/test_p3m.py): 0.4%, 2%, 5e-4."""
    from sapporo.pm import ParticleMesh

    x, _, m = ref.plummer(2000, seed=5)
    keep = np.linalg.norm(x, axis=1) < 3.0
    x, m = x[keep], m[keep]
    n = len(x)
    newton = ref.forces(x, None, np.arange(n), x, None, m, np.arange(n), 0.0, order=2)
    box, grid = 8.0, 32
    rs = 1.25 * box / grid
    with ParticleMesh(grid, box, backend=backend, split=rs, deconvolve=True) as mesh:
        long = mesh.forces(x, m)
    with sapporo.Library(order=2, precision="double", backend=backend, cutoff=rs,
                         cutoff_shape="gauss") as lib:
        short = run(lib, x, m, x, 0.0, ids_i=np.arange(n))
    acc = long.acc + short.acc
    pot = long.pot + short.pot + m / (rs * math.sqrt(math.pi))
    err = np.linalg.norm(acc - newton.acc, axis=1) / np.linalg.norm(newton.acc, axis=1)
    assert np.median(err) < 0.004 and err.max() < 0.02, (np.median(err), err.max())
    perr = np.abs(pot - newton.pot) / np.abs(newton.pot)
    assert np.median(perr) < 5e-4, np.median(perr)
    # the split is real: the mesh alone misses the core's force by far more
    err_long = np.linalg.norm(long.acc - newton.acc, axis=1) / np.linalg.norm(newton.acc,
                                                                               axis=1)
    assert np.median(err_long) > 10 * np.median(err)
