"""Kick-drift-kick leapfrog on the device with particle-mesh forces.

Positions, velocities and accelerations stay in device buffers between steps; the drift
raises a flag when a particle leaves the mesh's usable region (the host then names it),
and the host reads the buffers for diagnostics (on CPU devices they are host memory, so
that costs no copy). One step:

    v += a dt / 2;  x += v dt;  a = PM(x);  v += a dt / 2

The energy is ``sum m v^2 / 2 + sum m phi / 2`` with the mesh potential at the particles,
which includes each particle's own mesh self-energy (a share of order (box / h) / N of the
total, see docs/pm.md).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ..errors import InputError
from .mesh import STAGES, ParticleMesh, _gsize

#: timed parts of a step: the four force stages and the kick/drift update
STEP_STAGES = (*STAGES, "update")


class Leapfrog:
    """Kick-drift-kick integration of particles under a :class:`ParticleMesh`.

    Parameters
    ----------
    mesh : ParticleMesh
        The force solver (its device runs the updates too).
    x, v : array (n, 3)
        Initial positions (inside the mesh's usable region) and velocities.
    m : array (n,)
        Masses.
    dt : float
        Time step.
    """

    def __init__(self, mesh: ParticleMesh, x: Any, v: Any, m: Any, dt: float):
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
        self.mesh, self.dt, self.n = mesh, dt, x.shape[0]
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

    def _forces(self) -> None:
        times = self.mesh._compute()
        for k, s in times.items():
            self.totals[k] += s
        self.force_calls += 1

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
            self.totals["update"] += time.perf_counter() - t0
            self.steps += 1

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the positions and velocities (float64)."""
        x = self.mesh._host_positions().astype(np.float64)
        self._v.from_device()
        self.mesh._require_open().finish()
        return x, self._v.view(self.mesh.dtype, (self.n, 3)).astype(np.float64)

    def energies(self) -> tuple[float, float]:
        """Kinetic and potential energy now."""
        _, v = self.state()
        _, pot = self.mesh._results()
        kin = 0.5 * float(np.sum(self.m * np.sum(v * v, axis=1)))
        return kin, 0.5 * float(np.sum(self.m * pot))

    def mean_step_times(self) -> dict[str, float]:
        """Seconds per step by stage (force stages per force call, update per step)."""
        out = {k: self.totals[k] / max(self.force_calls, 1) for k in STAGES}
        out["update"] = self.totals["update"] / max(self.steps, 1)
        return out

    def close(self) -> None:
        """Release the velocity buffer (the mesh stays open)."""
        self._v.free()
        self._flag.free()
