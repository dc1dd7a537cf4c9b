"""Call-to-call noise of double-single forces along Hermite-like trajectories.

A Hermite integrator with the Aarseth step criterion (AMUSE's ph4, for example) takes the
second and third derivatives of the acceleration from the differences a(t1) - a(t0) and
j(t1) - j(t0) between two successive steps of a particle. Rounding errors that are small
in every single call can still dominate those differences when the step is short. This
script measures that noise: a Plummer sphere (N = 1024, eps = 1/64 by default), all
j-particles predicted by the library to t0 and to t1 = t0 + dt, a few i-particles advanced
along the same Taylor polynomials, forces from ``precision="double-single"`` against
``precision="double"`` (the latter agrees with float64 to ~1e-15).

For each dt it reports, over all particles and a few starting times t0,

- ``acc``: the median of |delta(a1 - a0)| / |a0|, the error of the acceleration
  difference relative to the acceleration;
- ``jerk``: the median of |delta(j1 - j0)| / |j0|, likewise for the jerk;
- ``halved``: the fraction of particles whose Aarseth step (ph4's form, eta = 0.02 or
  ``--eta``, from the snap and crackle of the Hermite interpolation of a0, j0, a1, j1 over
  dt) falls below dt with double-single data but not with double data: the spurious step
  halvings that an integrator like ph4 makes, each of which shortens the next step and so
  raises the noise.

``--kernel LABEL=FILE`` measures another force.cl as well (OpenCL backend), e.g. the
Kahan-compensated tile sums that were tried and not adopted (commit a223884)::

    git show a223884:kernels_opencl/force.cl > /tmp/force_kahan.cl
    python -m tune.ds_noise --plot docs/figures/ds_noise.png \
        --kernel "Kahan-compensated (not adopted)=/tmp/force_kahan.cl"

writes the figure of docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

import sapporo
from sapporo import reference

log = logging.getLogger("sapporo.tune.ds_noise")

#: Default steps: from far below ph4's shortest steps at eta = 0.02 to its longest.
DEFAULT_DTS = tuple(float(x) for x in 2.0 ** -np.arange(4, 22, 2))


@dataclass
class Setup:
    """A Plummer sphere with accelerations and jerks at t = 0, and the i-particles."""

    x: np.ndarray
    v: np.ndarray
    m: np.ndarray
    a: np.ndarray
    j: np.ndarray
    ids: np.ndarray
    active: np.ndarray
    eps2: float


def make_setup(n: int = 1024, eps: float = 1.0 / 64, n_active: int | None = None,
               seed: int = 1) -> Setup:
    """Plummer sphere of ``n`` bodies with float64 a and jerk; ``n_active`` i-particles.

    Parameters
    ----------
    n : int
        Number of particles.
    eps : float
        Plummer softening length.
    n_active : int or None
        i-particles followed, the innermost ones (None: all).
    seed : int
        Seed of the initial conditions.

    Returns
    -------
    Setup
    """
    x, v, m = reference.plummer(n, seed=seed)
    ids = np.arange(n)
    eps2 = eps * eps
    r = reference.forces(x, v, ids, x, v, m, ids, eps2, order=4)
    order = np.argsort(np.sum(x * x, axis=1))
    active = np.sort(order[:n_active]) if n_active is not None else ids
    return Setup(x, v, m, r.acc, r.jerk, ids, active, eps2)


def forces_along(lib: sapporo.Library, s: Setup, times: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Acceleration and jerk of the i-particles at each time.

    The j-particles are stored once at t = 0 with their a and jerk and predicted by the
    library; the i-particles are predicted on the host with the same polynomial, as a
    Hermite integrator would send them.

    Returns
    -------
    acc, jerk : ndarray, shape (len(times), n_active, 3)
    """
    n = len(s.m)
    lib.set_j_particles(np.arange(n), s.ids, np.zeros(n), s.m, s.x, s.v, s.a, s.j)
    acc = np.empty((len(times), len(s.active), 3))
    jerk = np.empty_like(acc)
    k = s.active
    for q, t in enumerate(times):
        lib.set_time(float(t))
        xi, vi, _ = reference.predict(float(t), 0.0, s.x[k], s.v[k], s.a[k], s.j[k])
        res = lib.compute(xi, vi, s.ids[k], s.eps2)
        acc[q] = res.acc
        jerk[q] = res.jerk
    return acc, jerk


def aarseth_step(a: np.ndarray, j: np.ndarray, a2: np.ndarray, a3: np.ndarray,
                 eta: float) -> np.ndarray:
    """Aarseth's step eta sqrt((|a||a2| + |j|^2) / (|j||a3| + |a2|^2)) per row.

    ``eta`` multiplies the square root, as in ph4 (whose default is 0.14); with ``eta``
    inside the root the same steps need its square.
    """
    n = np.linalg.norm
    num = n(a, axis=-1) * n(a2, axis=-1) + n(j, axis=-1) ** 2
    den = n(j, axis=-1) * n(a3, axis=-1) + n(a2, axis=-1) ** 2
    return eta * np.sqrt(num / den)


def hermite_derivatives(a0: np.ndarray, j0: np.ndarray, a1: np.ndarray, j1: np.ndarray,
                        dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Snap at t1 and crackle from the Hermite interpolation over one step."""
    a2_0 = (-6 * (a0 - a1) - dt * (4 * j0 + 2 * j1)) / dt**2
    a3 = (12 * (a0 - a1) + 6 * dt * (j0 + j1)) / dt**3
    return a2_0 + a3 * dt, a3


@dataclass
class Noise:
    """Noise measures per step (see the module docstring)."""

    dts: np.ndarray
    acc: np.ndarray
    jerk: np.ndarray
    halved: np.ndarray


def start_times(n_starts: int, seed: int = 2) -> np.ndarray:
    """Starting times t0, spread irregularly over [0, 1/32)."""
    return np.sort(np.random.default_rng(seed).uniform(0.0, 1.0 / 32, n_starts))


def measure(lib_ds: sapporo.Library, lib_d: sapporo.Library, s: Setup,
            dts: tuple[float, ...] = DEFAULT_DTS, n_starts: int = 4,
            eta: float = 0.02) -> Noise:
    """Noise of the force differences of ``lib_ds`` against ``lib_d`` for each step."""
    t0 = start_times(n_starts)
    times = np.concatenate([t0] + [t0 + dt for dt in dts])
    a_ds, j_ds = forces_along(lib_ds, s, times)
    a_d, j_d = forces_along(lib_d, s, times)
    norm = np.linalg.norm
    out: dict[str, list[float]] = {k: [] for k in ("acc", "jerk", "halved")}
    for q, dt in enumerate(dts):
        s0, s1 = slice(0, n_starts), slice((q + 1) * n_starts, (q + 2) * n_starts)
        da = (a_ds[s1] - a_ds[s0]) - (a_d[s1] - a_d[s0])
        dj = (j_ds[s1] - j_ds[s0]) - (j_d[s1] - j_d[s0])
        out["acc"].append(float(np.median(norm(da, axis=-1) / norm(a_d[s0], axis=-1))))
        out["jerk"].append(float(np.median(norm(dj, axis=-1) / norm(j_d[s0], axis=-1))))
        snap_d, crackle_d = hermite_derivatives(a_d[s0], j_d[s0], a_d[s1], j_d[s1], dt)
        snap_ds, crackle_ds = hermite_derivatives(a_ds[s0], j_ds[s0], a_ds[s1], j_ds[s1], dt)
        h_d = aarseth_step(a_d[s1], j_d[s1], snap_d, crackle_d, eta)
        h_ds = aarseth_step(a_ds[s1], j_ds[s1], snap_ds, crackle_ds, eta)
        out["halved"].append(float(np.mean((h_ds < dt) & (h_d >= dt))))
    return Noise(np.array(dts), *(np.array(out[k]) for k in ("acc", "jerk", "halved")))


@contextmanager
def kernel_source(path: str | None) -> Iterator[None]:
    """Make the OpenCL backend build ``force.cl`` from ``path`` (None: the package's)."""
    if path is None:
        yield
        return
    from sapporo.backend import opencl

    with open(path) as f:
        text = f.read()
    original = opencl.load_source

    def load(kind: str, name: str) -> str:
        if name != "force.cl":
            return original(kind, name)
        return text.replace('#include "common.h"', original(kind, "common.h"))

    opencl.load_source = load
    try:
        yield
    finally:
        opencl.load_source = original


def run(kernel: str | None = None, backend: str = "opencl", **kw) -> Noise:
    """Measure with the package's kernel, or the force.cl at ``kernel``."""
    s = make_setup()
    with kernel_source(kernel):
        with sapporo.Library(4, "double-single", backend=backend) as ds, \
                sapporo.Library(4, "double", backend=backend) as d:
            return measure(ds, d, s, **kw)


def table(label: str, nz: Noise) -> str:
    """Rows of dt and the noise measures."""
    rows = [f"{label}\n{'dt':>10} {'acc':>9} {'jerk':>9} {'halved':>7}"]
    for q, dt in enumerate(nz.dts):
        rows.append(f"{dt:10.3g} {nz.acc[q]:9.2e} {nz.jerk[q]:9.2e} {nz.halved[q]:7.4f}")
    return "\n".join(rows)


def plot(results: dict[str, Noise], path: str, eta: float = 0.02) -> None:
    """Noise of a(t1) - a(t0), j(t1) - j(t0) and the Aarseth step ratio against dt."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 4))
    for label, nz in results.items():
        ax[0].loglog(nz.dts, nz.acc, "o-", label=label)
        ax[1].loglog(nz.dts, nz.jerk, "o-", label=label)
        ax[2].semilogx(nz.dts, 100 * nz.halved, "o-", label=label)
    ax[0].set_title("error of a(t+dt) - a(t), / |a| (median)")
    ax[1].set_title("error of j(t+dt) - j(t), / |j| (median)")
    ax[2].set_title(f"spurious Aarseth step halvings, eta = {eta:g} (%)")
    for a in ax:
        a.set_xlabel("dt")
        a.grid(True, which="both", alpha=0.3)
    ax[2].legend(fontsize=8)
    fig.suptitle("Double-single call-to-call noise, Plummer N = 1024, eps = 1/64, "
                 "all particles (PoCL CPU)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    log.info("wrote %s", path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernel", action="append", default=[],
                   help="LABEL=PATH of another force.cl to measure too (repeatable)")
    p.add_argument("--label", default="float tile sums (current)",
                   help="label of the package's own kernel in the table and figure")
    p.add_argument("--plot", help="write the figure here (PNG)")
    p.add_argument("--backend", default="opencl")
    p.add_argument("--eta", type=float, default=0.02,
                   help="Aarseth eta of the halved column, in front of the root (ph4's form)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    results = {args.label: run(None, args.backend, eta=args.eta)}
    for spec in args.kernel:
        label, _, path = spec.partition("=")
        results[label] = run(path, args.backend, eta=args.eta)
    for label, nz in results.items():
        log.info("%s", table(label, nz))
    if args.plot:
        plot(results, args.plot, args.eta)


if __name__ == "__main__":
    main()
