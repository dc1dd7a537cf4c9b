"""Time per step by stage of the particle-mesh solver against a single-core NumPy one.

:func:`bench` runs, for each mesh size G, as many particles as cells (a uniform random
cube, periodic, CIC, 2-point gradient: the setting of Aubert, Amini & David's timing
table) through the device solver and through :class:`NumpyPM`, a straightforward
vectorised NumPy implementation of the same algorithm on one core (NumPy's FFT is
single-threaded), in the same process, and returns seconds per stage for both.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sapporo.pm.fft import HostFFTSolver
from sapporo.pm.integrator import STEP_STAGES, Leapfrog
from sapporo.pm.mesh import ParticleMesh


class NumpyPM:
    """Periodic CIC particle-mesh step on the host with NumPy (the CPU baseline).

    ``forces`` and ``step`` mirror the device pipeline stage by stage (assignment by
    ``bincount``, the same real FFT, gradient by ``roll``, interpolation by gathers) and
    record seconds per stage in :attr:`times`.
    """

    def __init__(self, grid: int, box: float):
        self.grid, self.box, self.h = grid, box, box / grid
        self.fft = HostFFTSolver(grid, box, "periodic", np.dtype(np.float64))
        self.times = dict.fromkeys(STEP_STAGES, 0.0)

    def forces(self, x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Accelerations and potentials (periodic, CIC, 2-point gradient)."""
        g = self.grid
        t0 = time.perf_counter()
        u = (x + self.box / 2) / self.h - 0.5
        i0 = np.floor(u).astype(np.int64)
        idx = [i0 % g, (i0 + 1) % g]  # the two CIC cells along each axis ...
        w = [1.0 - (u - i0), u - i0]  # ... and their weights
        corners = list(itertools.product(range(2), repeat=3))
        cells = [(idx[a][:, 0] * g + idx[b][:, 1]) * g + idx[c][:, 2] for a, b, c in corners]
        weights = [w[a][:, 0] * w[b][:, 1] * w[c][:, 2] for a, b, c in corners]
        rho = np.bincount(np.concatenate(cells), np.concatenate(weights) * np.tile(m, 8),
                          minlength=g**3)
        rho = rho.reshape(g, g, g) / self.h**3
        t1 = time.perf_counter()
        phi = np.empty_like(rho)
        self.fft.solve(rho, phi)
        t2 = time.perf_counter()
        acc_mesh = [-(np.roll(phi, -1, axis=d) - np.roll(phi, 1, axis=d)) / (2 * self.h)
                    for d in range(3)]
        t3 = time.perf_counter()
        flat_phi = phi.reshape(-1)
        flat_acc = [a.reshape(-1) for a in acc_mesh]
        pot = np.zeros(len(x))
        acc = np.zeros((len(x), 3))
        for cell, wt in zip(cells, weights, strict=True):
            pot += wt * flat_phi[cell]
            for d in range(3):
                acc[:, d] += wt * flat_acc[d][cell]
        t4 = time.perf_counter()
        for key, dt in zip(("assignment", "poisson", "gradient", "interpolation"),
                           (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            self.times[key] += dt
        return acc, pot

    def step(self, x: np.ndarray, v: np.ndarray, m: np.ndarray, acc: np.ndarray,
             dt: float) -> np.ndarray:
        """One kick-drift-kick step in place; returns the new accelerations."""
        t0 = time.perf_counter()
        v += 0.5 * dt * acc
        x += dt * v
        x -= self.box * np.floor((x + self.box / 2) / self.box)
        t1 = time.perf_counter()
        acc, _ = self.forces(x, m)
        t2 = time.perf_counter()
        v += 0.5 * dt * acc
        self.times["update"] += (t1 - t0) + (time.perf_counter() - t2)
        return acc


def bench(grids: Sequence[int] = (32, 64, 128), steps: int = 3, backend: str | None = None,
          device: int | None = None, seed: int = 0,
          progress: Callable[[str], None] | None = None, sort: bool = False
          ) -> dict[str, Any]:
    """Seconds per step by stage on the device and with NumPy on one core.

    For each G: G^3 particles uniformly at random in a periodic box of side 1 with small
    random velocities, one warm-up step (kernel specialisation, FFT plans), then ``steps``
    timed steps of each implementation. ``sort=False``: random particle order, and the
    device leapfrog does not reorder; ``sort=True``: both get the particles ordered by
    mesh cell (the leapfrog's default reordering then finds them sorted).

    Returns
    -------
    dict
        ``{"device": name, "rows": [{"grid", "n", "device": {stage: s}, "numpy": {...},
        "speedup": total numpy / total device}, ...]}``
    """
    rows = []
    name = ""
    for g in grids:
        rng = np.random.default_rng(seed)
        n = g**3
        x = rng.uniform(-0.5, 0.5, (n, 3))
        v = rng.normal(0.0, 0.01, (n, 3))
        m = np.full(n, 1.0 / n)
        dt = 1e-3
        if sort:  # both implementations get the particles ordered by mesh cell
            u = np.minimum(np.floor((x + 0.5) * g).astype(np.int64), g - 1)
            perm = np.argsort((u[:, 0] * g + u[:, 1]) * g + u[:, 2], kind="stable")
            x, v = x[perm], v[perm]
        with ParticleMesh(g, 1.0, boundary="periodic", window="cic", backend=backend,
                          devices=device, stencil=2) as pm:
            name = pm.device_name
            sim = Leapfrog(pm, x, v, m, dt, sort_every=20 if sort else 0)
            sim.step(1)
            sim.totals = dict.fromkeys(STEP_STAGES, 0.0)
            sim.force_calls = sim.steps = 0
            sim.step(steps)
            dev = sim.mean_step_times()
            sim.close()
        ref = NumpyPM(g, 1.0)
        xh, vh = x.copy(), v.copy()
        acc, _ = ref.forces(xh, m)
        acc = ref.step(xh, vh, m, acc, dt)  # warm-up
        ref.times = dict.fromkeys(STEP_STAGES, 0.0)
        for _ in range(steps):
            acc = ref.step(xh, vh, m, acc, dt)
        host = {k: s / steps for k, s in ref.times.items()}
        row = {"grid": g, "n": n, "device": dev, "numpy": host,
               "speedup": sum(host.values()) / max(sum(dev.values()), 1e-12)}
        rows.append(row)
        if progress is not None:
            progress(f"G = {g}: device {sum(dev.values()) * 1e3:.1f} ms/step, numpy "
                     f"{sum(host.values()) * 1e3:.1f} ms/step")
    return {"device": name, "rows": rows, "sorted": sort}


def markdown_table(result: dict[str, Any]) -> str:
    """The :func:`bench` result as a Markdown table (milliseconds per step)."""
    head = ("| G^3 = N | impl. | assignment | Poisson | gradient | interpolation | update "
            "| total | speedup |\n|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in result["rows"]:
        for impl in ("device", "numpy"):
            t = r[impl]
            cells = " | ".join(f"{t[k] * 1e3:.1f}" for k in STEP_STAGES)
            total = sum(t.values()) * 1e3
            sp = f"{r['speedup']:.2f}" if impl == "device" else ""
            lines.append(f"| {r['grid']}^3 | {impl} | {cells} | {total:.1f} | {sp} |")
    return head + "\n".join(lines) + "\n"


def assignment_timing(grids: Sequence[int] = (32, 64, 128), repeats: int = 5,
                      backend: str | None = None, device: int | None = None,
                      seed: int = 0) -> list[dict[str, Any]]:
    """Seconds of the assignment stage with fixed-point (deterministic) and with float
    atomics, G^3 uniform random particles on a periodic G^3 CIC mesh, best of
    ``repeats`` after a warm-up."""
    rows = []
    for g in grids:
        rng = np.random.default_rng(seed)
        x = rng.uniform(-0.5, 0.5, (g**3, 3))
        m = np.full(g**3, 1.0 / g**3)
        row: dict[str, Any] = {"grid": g, "n": g**3}
        for kind in ("fixed", "float"):
            with ParticleMesh(g, 1.0, boundary="periodic", window="cic", backend=backend,
                              devices=device, assignment=kind) as pm:
                pm._load(x, m)
                pm._assign()
                best = float("inf")
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    pm._assign()
                    best = min(best, time.perf_counter() - t0)
            row[kind] = best
        rows.append(row)
    return rows
