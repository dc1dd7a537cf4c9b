"""P^3M: particle-mesh long-range force plus a direct short-range sum.

Gravity is split with a length: the mesh solves for the long-range part and the
``short_range`` kernel adds the rest for pairs closer than ``r_cut`` directly. The Gaussian
split (length r_s) has the long-range Green's function ``-erf(r / 2 r_s) / r`` (or ``-4 pi
exp(-k^2 r_s^2) / k^2`` when periodic) and the short-range potential ``-erfc(r / 2 r_s) /
r``, cut at ``r_cut``; the S2 split (Hockney & Eastwood's S2 clouds of diameter a, that of
Phantom-GRAPE's PG5/table and of the GRAPE-5 cutoff force) has a short-range part that is
exactly zero from ``r = a`` on, so ``r_cut = a`` loses nothing. Particles are sorted by
cell of a chaining mesh on the host (``argsort``); the kernel runs one work-item per
particle over the 27 cells around it.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from sapporo.errors import ConfigError, NonFiniteError
from sapporo.pm.fft import SPLIT_SHAPES, s2_long_potential
from sapporo.pm.mesh import ParticleMesh, PMResult, _choice, _gsize

#: default split length in mesh cells: r_s of the Gaussian split, a of the S2 split
DEFAULT_SPLIT = {"gauss": 1.25, "s2": 3.0}
#: default cut of the Gaussian split, in units of r_s
DEFAULT_CUT = 4.5


class P3M:
    """Particle-particle particle-mesh gravity on one device.

    Parameters
    ----------
    grid, box, boundary, window, precision, backend, devices, stencil :
        As for :class:`~sapporo.pm.ParticleMesh` (FFT solver); here the defaults are TSC
        and the 4-point gradient.
    split : float
        The split length in mesh cells: r_s of the Gaussian split (default 1.25), the
        clouds' diameter a of the S2 split (default 3, PG5/table's).
    cut : float
        Gaussian split only: r_cut in units of r_s (default 4.5: the short-range force at
        the cut is 1.8% of Newton's, erfc(x) + 2x exp(-x^2)/sqrt(pi) at x = r_cut / 2 r_s,
        and the pairs beyond it lose that much at most). The S2 split's short-range force
        ends at a itself (r_cut = a).
    deconvolve : bool
        Divide the long-range Green's function by the window's transfer function squared.
    split_shape : {"gauss", "s2"}
        The split (:class:`~sapporo.pm.ParticleMesh`'s ``split_shape``).
    """

    def __init__(self, grid: int, box: float, boundary: str = "isolated", window: str = "tsc",
                 precision: str = "double", backend: str | None = None, devices: Any = None,
                 *, stencil: int = 4, split: float | None = None, cut: float | None = None,
                 deconvolve: bool = True, split_shape: str = "gauss"):
        shape = _choice(split_shape, SPLIT_SHAPES, "split_shape")
        split = DEFAULT_SPLIT[shape] if split is None else split
        if not (isinstance(split, (int, float)) and math.isfinite(split) and split > 0):
            raise ConfigError(f"split: expected a positive number of cells, got {split!r}")
        if cut is not None and shape == "s2":
            raise ConfigError("cut: the S2 split's short-range force ends at its diameter "
                              "(r_cut = split); give cut for the Gaussian split only")
        cut = DEFAULT_CUT if cut is None else cut
        if not (isinstance(cut, (int, float)) and math.isfinite(cut) and cut > 0):
            raise ConfigError(f"cut: expected a positive multiple of split, got {cut!r}")
        h = float(box) / grid if isinstance(grid, int) and grid > 0 else 1.0
        self.mesh = ParticleMesh(grid, box, boundary, window, "fft", precision, backend,
                                 devices, stencil=stencil, split=split * h,
                                 deconvolve=deconvolve, split_shape=shape)
        self.split_shape = shape
        self.rs = split * self.mesh.h  # (S2: the diameter a)
        self.rcut = self.rs if shape == "s2" else cut * self.rs
        self.nc = max(1, int(self.mesh.box // self.rcut))
        if self.mesh.boundary == "periodic" and self.nc < 3:
            self.mesh.close()
            raise ConfigError(
                f"periodic P^3M needs a box of at least 3 cut radii ({3 * self.rcut:.4g}); "
                f"use a larger grid or a smaller split")
        self._kernel = self.mesh._prog.kernel("short_range")
        self._cap = 0
        self._bufs: dict[str, Any] = {}

    def close(self) -> None:
        """Release the device (idempotent)."""
        for b in self._bufs.values():
            b.free()
        self._bufs = {}
        self.mesh.close()

    def __enter__(self) -> P3M:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def short_range(self, x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The short-range accelerations and potentials alone (validated input)."""
        n, nc, dt = x.shape[0], self.nc, self.mesh.dtype
        box = self.mesh.box
        if n > self._cap:  # larger buffers
            for b in self._bufs.values():
                b.free()
            ctx, it, cells = self.mesh._require_open(), dt.itemsize, nc**3
            self._bufs = {"x": ctx.alloc_host(3 * n * it), "m": ctx.alloc_host(n * it),
                          "start": ctx.alloc_host(cells * 4), "end": ctx.alloc_host(cells * 4),
                          "acc": ctx.alloc_host(3 * n * it), "pot": ctx.alloc_host(n * it)}
            self._cap = n
        c = np.clip(np.floor((x + box / 2) * (nc / box)).astype(np.int64), 0, nc - 1)
        cid = (c[:, 0] * nc + c[:, 1]) * nc + c[:, 2]
        order = np.argsort(cid, kind="stable")
        sorted_cid = cid[order]
        b = self._bufs
        b["x"].view(dt, (n, 3))[...] = x[order]
        b["m"].view(dt, (n,))[...] = m[order]
        b["start"].view(np.int32, (nc**3,))[...] = np.searchsorted(
            sorted_cid, np.arange(nc**3), side="left")
        b["end"].view(np.int32, (nc**3,))[...] = np.searchsorted(
            sorted_cid, np.arange(nc**3), side="right")
        for k in ("x", "m", "start", "end"):
            b[k].to_device()
        self._kernel(_gsize(n), None, np.int32(n), np.float64(self.rs),
                     np.float64(self.rcut**2), np.float64(-box / 2), np.float64(box),
                     np.float64(nc / box), np.int32(nc), b["x"].buffer, b["m"].buffer,
                     b["start"].buffer, b["end"].buffer, b["acc"].buffer, b["pot"].buffer)
        acc = np.empty((n, 3))
        pot = np.empty(n)
        acc[order] = self.mesh._read(b["acc"], (n, 3))
        pot[order] = self.mesh._read(b["pot"], (n,))
        return acc, pot

    def _self_potential(self) -> float:
        """A unit mass's long-range potential at its own position (r = 0)."""
        if self.split_shape == "s2":
            return float(s2_long_potential(np.zeros(1), self.rs)[0])
        return -1.0 / (self.rs * math.sqrt(math.pi))

    def forces(self, x: Any, m: Any) -> PMResult:
        """Accelerations and potentials (mesh long-range plus direct short-range).

        The potential excludes each particle's own long-range self-term (up to the mesh's
        smoothing of it): ``-m / (r_s sqrt(pi))`` with the Gaussian split, ``-208 m / (70
        a)`` with the S2 split.
        """
        t0 = time.perf_counter()
        long = self.mesh.forces(x, m)
        x, m = self.mesh._validate(x, m)
        t1 = time.perf_counter()
        acc_s, pot_s = self.short_range(x, m)
        t2 = time.perf_counter()
        acc = long.acc + acc_s
        pot = long.pot + pot_s - m * self._self_potential()
        if not (np.isfinite(acc).all() and np.isfinite(pot).all()):
            raise NonFiniteError("P^3M forces are not finite")
        info = dict(long.info, mesh_seconds=t1 - t0, rs=self.rs, rcut=self.rcut, cells=self.nc)
        return PMResult(acc, pot, {**long.timings, "short_range": t2 - t1}, info)
