"""Kick-drift-kick leapfrog on the device with particle-mesh forces.

Positions, velocities and accelerations stay in device buffers between steps
(``v += a dt / 2;  x += v dt;  a = PM(x);  v += a dt / 2``); the drift raises a flag when a
particle leaves the mesh's usable region. The energy is ``sum m v^2 / 2 + sum m phi / 2``
with the mesh potential at the particles, which includes each particle's own mesh
self-energy (docs/pm.md).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from sapporo.errors import InputError
from sapporo.pm.mesh import STAGES, ParticleMesh, _gsize
from sapporo.pm.p3m import P3M

#: timed parts of a step: the four force stages and the kick/drift update
STEP_STAGES = (*STAGES, "update")


class Leapfrog:
    """Kick-drift-kick integration of particles under a :class:`ParticleMesh`.

    Parameters
    ----------
    mesh : ParticleMesh or P3M
        The force solver (its device runs the updates too); with :class:`P3M` the
        short-range part is added on the host after each mesh solve (stage ``short_range``).
    x, v, m : array (n, 3), (n, 3), (n,)
        Initial positions (inside the mesh's usable region), velocities and masses.
    dt : float
        Time step.
    sort_every : int
        Reorder the particles by mesh cell at the start and every this many steps (0:
        never), for faster assignment and interpolation (docs/pm.md); the trajectory does
        not depend on the order, and :meth:`state` returns the particles in the order given.
    """

    def __init__(self, mesh: ParticleMesh | P3M, x: Any, v: Any, m: Any, dt: float,
                 sort_every: int = 20):
        self.p3m: P3M | None = None
        if isinstance(mesh, P3M):
            self.p3m, mesh = mesh, mesh.mesh
        try:
            dt = float(dt)
        except (TypeError, ValueError):
            raise InputError(f"dt: expected a positive number, got {dt!r}") from None
        if not math.isfinite(dt) or dt <= 0:
            raise InputError(f"dt: expected a positive finite number, got {dt!r}")
        x, m = mesh._validate(x, m)
        v = np.asarray(v, dtype=np.float64)
        if v.shape != x.shape or not np.isfinite(v).all():
            raise InputError(f"v: expected finite values of shape {x.shape}")
        if isinstance(sort_every, bool) or not isinstance(sort_every, int) or sort_every < 0:
            raise InputError(f"sort_every: expected an integer >= 0, got {sort_every!r}")
        self.mesh, self.dt, self.n = mesh, dt, x.shape[0]
        self.sort_every = sort_every
        self.order = np.arange(self.n)  # original index of the particle at each position
        if sort_every:
            perm = self._cell_order(x)
            x, v, m, self.order = x[perm], v[perm], m[perm], perm
        self.m = m.copy()
        self.t = 0.0
        self.steps = 0
        mesh._load(x, m)
        ctx = mesh._require_open()
        self._v = ctx.alloc_host(3 * self.n * mesh.dtype.itemsize)
        self._v.view(mesh.dtype, (self.n, 3))[...] = v
        self._v.to_device()
        self._flag = ctx.alloc_host(4)
        self._region = mesh.usable_region()
        self.totals = dict.fromkeys(STEP_STAGES, 0.0)
        self.force_calls = 0
        self._forces()

    def _cell_order(self, x: np.ndarray) -> np.ndarray:
        """The permutation that sorts positions by mesh cell (stable)."""
        mesh = self.mesh
        u = np.floor((x + mesh.box / 2) * (1.0 / mesh.h)).astype(np.int64)
        np.clip(u, 0, mesh.grid - 1, out=u)
        cell = (u[:, 0] * mesh.grid + u[:, 1]) * mesh.grid + u[:, 2]
        return np.argsort(cell, kind="stable")

    def _resort(self) -> None:
        """Reorder the device's particle arrays by cell (the queue must be idle)."""
        mesh, n = self.mesh, self.n
        ctx = mesh._require_open()
        it = mesh.dtype.itemsize
        perm = self._cell_order(mesh._host_positions())
        if np.array_equal(perm, np.arange(n)):
            return
        arrays = [(mesh._x, 3), (self._v, 3), (mesh._acc, 3), (mesh._m, 1), (mesh._pot, 1)]
        for hb, width in arrays[1:]:
            hb.from_device(width * n * it)
        ctx.finish()
        for hb, width in arrays:
            view = hb.view(mesh.dtype, (n, width))
            view[...] = view[perm]
            hb.to_device(width * n * it)
        ctx.finish()
        self.m = self.m[perm]
        self.order = self.order[perm]

    def _forces(self) -> None:
        times = self.mesh._compute()
        if self.p3m is not None:
            times["short_range"] = self._short_range()
        for k, s in times.items():
            self.totals[k] = self.totals.get(k, 0.0) + s
        self.force_calls += 1

    def _short_range(self) -> float:
        """P^3M: add the short-range part to the mesh's accelerations and potentials."""
        assert self.p3m is not None
        t0 = time.perf_counter()
        mesh, n = self.mesh, self.n
        it = mesh.dtype.itemsize
        acc_s, pot_s = self.p3m.short_range(mesh._host_positions(), self.m)
        mesh._acc.view(mesh.dtype, (n, 3))[...] = mesh._read(mesh._acc, (n, 3)) + acc_s
        mesh._pot.view(mesh.dtype, (n,))[...] = mesh._read(mesh._pot, (n,)) + (
            pot_s + self.m / (self.p3m.rs * math.sqrt(math.pi)))
        mesh._acc.to_device(3 * n * it)
        mesh._pot.to_device(n * it)
        mesh._require_open().finish()
        return time.perf_counter() - t0

    def _kick(self, dt: float) -> None:
        self.mesh._k["kick"](_gsize(3 * self.n), None, np.int32(self.n), np.float64(dt),
                             self.mesh._acc.buffer, self._v.buffer)

    def step(self, count: int = 1) -> None:
        """Advance ``count`` steps.

        Raises
        ------
        InputError
            When a particle leaves the mesh's usable region (isolated boundaries); the state
            is then that after the drift that took it out.
        """
        mesh = self.mesh
        ctx = mesh._require_open()
        for _ in range(int(count)):
            t0 = time.perf_counter()
            self._kick(0.5 * self.dt)
            self._flag.buffer.fill(0)
            mesh._k["drift"](_gsize(3 * self.n), None, np.int32(self.n), np.float64(self.dt),
                             np.float64(-mesh.box / 2), np.float64(mesh.box),
                             np.float64(self._region[0]), np.float64(self._region[1]),
                             mesh._x.buffer, self._v.buffer, self._flag.buffer)
            self._flag.from_device()
            ctx.finish()
            self.t += self.dt
            if self._flag.view(np.int32, (1,))[0]:
                try:
                    mesh.check_positions(mesh._host_positions())
                except InputError as exc:
                    raise InputError(
                        f"at t = {self.t:.6g} (step {self.steps + 1}): {exc}") from None
            self.totals["update"] += time.perf_counter() - t0
            self._forces()
            t0 = time.perf_counter()
            self._kick(0.5 * self.dt)
            ctx.finish()
            self.steps += 1
            if self.sort_every and self.steps % self.sort_every == 0:
                self._resort()
            self.totals["update"] += time.perf_counter() - t0

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the positions and velocities (float64), in the order given."""
        xs = self.mesh._host_positions()
        vs = self.mesh._read(self._v, (self.n, 3))
        x, v = np.empty_like(xs), np.empty_like(vs)
        x[self.order] = xs
        v[self.order] = vs
        return x, v

    def energies(self) -> tuple[float, float]:
        """Kinetic and potential energy now."""
        v = self.mesh._read(self._v, (self.n, 3))  # internal order
        _, pot = self.mesh._results()
        kin = 0.5 * float(np.sum(self.m * np.sum(v * v, axis=1)))
        return kin, 0.5 * float(np.sum(self.m * pot))

    def mean_step_times(self) -> dict[str, float]:
        """Seconds per step by stage (force stages per force call; update per step,
        including the reordering by cell every ``sort_every`` steps)."""
        out = {k: self.totals[k] / max(self.force_calls, 1) for k in self.totals
               if k != "update"}
        out["update"] = self.totals["update"] / max(self.steps, 1)
        return out

    def close(self) -> None:
        """Release the velocity buffer (the mesh stays open)."""
        self._v.free()
        self._flag.free()
