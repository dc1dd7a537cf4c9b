"""The particle-mesh gravity solver (:class:`ParticleMesh`).

Per force call, on the device except the FFT (:mod:`.fft`): mass assignment (64-bit
fixed-point integer atomics: the sums do not depend on the order of the work-items), the
Poisson solve (FFT, periodic or isolated by zero padding, or multigrid), the gradient by 2-
or 4-point differences, and interpolation to the particles. G = 1; the box ``[-box/2,
box/2)^3`` is centred on the origin, mesh point ``i`` at ``-box/2 + (i + 1/2) h``.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sapporo.backend import Context, get_backend
from sapporo.errors import BackendError, ConfigError, InputError, NonFiniteError
from sapporo.pm.fft import SPLIT_SHAPES, HostFFTSolver
from sapporo.pm.multigrid import MultigridSolver, _gsize, level_sizes, multipole_faces

BOUNDARIES = ("isolated", "periodic")
WINDOWS = ("ngp", "cic", "tsc")
SOLVERS = ("fft", "multigrid")
PRECISIONS = ("double", "single")
GREENS = ("continuous", "discrete")
STAGES = ("assignment", "poisson", "gradient", "interpolation")

#: the fixed-point unit of mass assignment: the total mass is 2**FIX_BITS units
FIX_BITS = 62

#: default multigrid target, relative residual of the fourth-order equation: the force then
#: differs from the converged one by less than 1e-6 (measured, docs/pm.md), a thousandth of
#: the discretisation error, and single precision reaches it (its floor is about 1e-5)
MG_TOL = 1e-4


@dataclass
class PMResult:
    """Forces of one :meth:`ParticleMesh.forces` call.

    Attributes
    ----------
    acc : ndarray (n, 3)
        Accelerations (G = 1).
    pot : ndarray (n,)
        Potentials (negative; they include each particle's own mesh self-potential).
    timings : dict
        Seconds per stage: assignment, poisson, gradient, interpolation.
    info : dict
        Solver details (multigrid: V-cycles and final residual).
    """

    acc: np.ndarray
    pot: np.ndarray
    timings: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


def _choice(value: Any, allowed: tuple[str, ...], what: str) -> str:
    if not isinstance(value, str) or value.lower() not in allowed:
        raise InputError(f"{what}: expected one of {', '.join(allowed)}, got {value!r}")
    return value.lower()


class ParticleMesh:
    """Particle-mesh gravity on one device of the sapporo backend layer.

    Parameters
    ----------
    grid : int
        Mesh points per dimension (at least 2; multigrid: 2^k times 1 to 8).
    box : float
        Side of the cubic box ``[-box/2, box/2)^3``.
    boundary : {"isolated", "periodic"}
        Isolated: the potential of the particles alone (FFT with zero padding to 2G, or
        multigrid). Periodic: of the periodic continuation minus the mean density.
    window : {"ngp", "cic", "tsc"}
        Assignment and interpolation window (default TSC, the most accurate: docs/pm.md).
    solver : {"fft", "multigrid"}
        Multigrid needs isolated boundaries.
    precision : {"double", "single"}
        Arithmetic of the mesh and particle arrays on the device.
    backend : str or None
        ``"opencl"`` or ``"cuda"``; None: ``SAPPORO_BACKEND`` or automatic.
    devices : None, int or list of one int
        Device index of the backend (default 0). One device only.
    stencil : {2, 4}
        Points of the finite-difference gradient (default 4).
    green : {"continuous", "discrete"}
        Periodic FFT only: Green's function of the continuous Laplacian (-4 pi / k^2) or of
        the 7-point one.
    deconvolve : bool
        Periodic FFT (or isolated with ``split``): divide by the window's transfer function
        squared.
    mg_tol, mg_cycles : float, int
        Multigrid: target of the residual relative to the right-hand side (of the
        fourth-order equation, see :mod:`.multigrid`; default :data:`MG_TOL`, 1e-4) and the
        most V-cycles per solve.
    assignment : {"fixed", "float"}
        Mass assignment by 64-bit fixed-point integer atomics (deterministic, the default)
        or by floating-point atomics (order-dependent last bits; for comparison).
    split : float or None
        FFT only: keep the long-range part of gravity, split length ``split`` (in box
        units), for P^3M (:class:`~sapporo.pm.p3m.P3M` adds the short-range part).
    split_shape : {"gauss", "s2"}
        The split: Gaussian (``split`` is r_s; :class:`~sapporo.pm.p3m.P3M`'s), or S2
        clouds of diameter ``split`` (Phantom-GRAPE's PG5/table, whose short-range part the
        GRAPE-5 cutoff calls and ``Library(order=2, cutoff=split, cutoff_shape="s2")``
        compute).

    Notes
    -----
    Particles must lie in the box, with isolated boundaries in the box less :attr:`margin`
    cells on each side (the reach of the window and the gradient stencil); particles
    outside (as the device sees them) raise :class:`~sapporo.errors.InputError`.
    """

    def __init__(self, grid: int, box: float, boundary: str = "isolated", window: str = "tsc",
                 solver: str = "fft", precision: str = "double", backend: str | None = None,
                 devices: Any = None, *, stencil: int = 4, green: str = "continuous",
                 deconvolve: bool = False, mg_tol: float = MG_TOL, mg_cycles: int = 50,
                 assignment: str = "fixed", split: float | None = None,
                 split_shape: str = "gauss"):
        if (isinstance(grid, bool) or not isinstance(grid, (int, np.integer))
                or not 2 <= grid <= 1024):
            raise InputError(f"grid: expected 2 to 1024 points per dimension, got {grid!r}")
        if not (isinstance(box, (int, float, np.number)) and math.isfinite(box) and box > 0):
            raise InputError(f"box: expected a positive finite number, got {box!r}")
        box = float(box)
        self.grid, self.box = int(grid), box
        self.h = box / self.grid
        self.boundary = _choice(boundary, BOUNDARIES, "boundary")
        self.window = _choice(window, WINDOWS, "window")
        self.solver = _choice(solver, SOLVERS, "solver")
        self.precision = _choice(precision, PRECISIONS, "precision")
        self.green = _choice(green, GREENS, "green")
        if isinstance(stencil, bool) or stencil not in (2, 4):
            raise InputError(f"stencil: expected 2 or 4, got {stencil!r}")
        self.stencil = int(stencil)
        self.deconvolve = bool(deconvolve)
        self.assignment = _choice(assignment, ("fixed", "float"), "assignment")
        if split is not None and self.solver != "fft":
            raise ConfigError("split (P^3M long-range part) needs solver 'fft'")
        if split is not None and not (isinstance(split, (int, float)) and math.isfinite(split)
                                      and split > 0):
            raise InputError(f"split: expected a positive length, got {split!r}")
        self.split = None if split is None else float(split)
        self.split_shape = _choice(split_shape, SPLIT_SHAPES, "split_shape")
        if self.solver == "multigrid":
            if self.boundary != "isolated":
                raise ConfigError("solver 'multigrid' needs boundary 'isolated'")
            level_sizes(self.grid)  # raises for unsuitable sizes
        if self.deconvolve and (self.solver != "fft" or (self.boundary != "periodic"
                                                         and split is None)):
            raise ConfigError("deconvolve needs solver 'fft' and boundary 'periodic' (or a "
                              "split, P^3M)")
        self.dtype = np.dtype(np.float64 if self.precision == "double" else np.float32)
        if not (isinstance(mg_tol, (int, float)) and 0 < mg_tol < 1):
            raise InputError(f"mg_tol: expected a number in (0, 1), got {mg_tol!r}")
        if isinstance(mg_cycles, bool) or not isinstance(mg_cycles, int) or mg_cycles < 1:
            raise InputError(f"mg_cycles: expected a positive integer, got {mg_cycles!r}")
        # margin (cells) that isolated meshes keep between particles and the box faces
        reach = {"ngp": 0.0, "cic": 0.5, "tsc": 1.0}[self.window]
        self.margin = 0.0 if self.boundary == "periodic" else reach + self.stencil // 2
        lo = -box / 2 + self.margin * self.h
        if lo >= -lo:
            raise InputError(
                f"grid {grid}: too small for {self.window} with a {self.stencil}-point gradient "
                f"on an isolated mesh (margin {self.margin} cells on each side)")

        self._ctx: Context | None = self._open(backend, devices)
        info = self._ctx.info
        lacks = None
        if self.precision == "double" and not info.double_support:
            lacks = "precision 'double' needs fp64"
        elif not info.int64_atomics:
            lacks = ("the mass assignment needs 64-bit integer atomics "
                     "(cl_khr_int64_base_atomics)")
        if lacks is not None:
            self.close()
            raise ConfigError(f"{lacks}, which device {info.name} lacks; choose another "
                              "device (`sapporo info` lists them)")
        ext = "cl" if self._ctx.info.backend == "opencl" else "cu"
        defines = {"PRECISION": 2 if self.precision == "double" else 1,
                   "WINDOW": WINDOWS.index(self.window),
                   "PERIODIC": int(self.boundary == "periodic"),
                   "STENCIL": self.stencil, "NG": self.grid,
                   "SPLIT": {"s2": 1, "gauss": 2}[self.split_shape]}  # (pm_window.h)
        self._prog = self._ctx.build(f"pm.{ext}", defines)
        self._k = {name: self._prog.kernel(name) for name in
                   ("assign", "assign_float", "to_density", "gradient", "interpolate",
                    "kick", "drift")}
        ng3 = self.grid**3
        it = self.dtype.itemsize
        self._q = self._ctx.alloc(ng3 * 8)
        self._rho = self._ctx.alloc_host(ng3 * it)
        self._phi = self._ctx.alloc_host(ng3 * it)
        self._g = self._ctx.alloc(3 * ng3 * it)
        self._phi_fresh = True
        self._n = self._cap = 0
        self._x = self._m = self._acc = self._pot = None
        self._fft: HostFFTSolver | None = None
        self._mg: MultigridSolver | None = None
        if self.solver == "fft":
            self._fft = HostFFTSolver(self.grid, box, self.boundary, self.dtype, self.green,
                                      self.window if self.deconvolve else None,
                                      self.split, self.split_shape)
        else:
            self._mg = MultigridSolver(self._ctx, self._prog, self.grid, box, self.dtype,
                                       float(mg_tol), mg_cycles)
        # multigrid keeps 4 pi rho in the density buffer (its right-hand side)
        self._rho_factor = 4 * math.pi if self.solver == "multigrid" else 1.0
        self._scale = 1.0
        self._mass = 0.0
        self.last_info: dict[str, Any] = {}

    # -- device --------------------------------------------------------------------------

    @staticmethod
    def _open(backend: str | None, devices: Any) -> Context:
        be = get_backend(backend)
        if devices is None:
            index = 0
        elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
            index = int(devices)
        elif isinstance(devices, (list, tuple)) and len(devices) == 1:
            index = devices[0]
        else:
            raise InputError(f"devices: the particle-mesh solver uses one device; give one "
                             f"index, got {devices!r}")
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) \
                or not 0 <= index < len(be.devices()):
            raise InputError(f"devices: {index!r} is not a device index of backend {be.name} "
                             f"({len(be.devices())} device(s))")
        return be.open(int(index))

    @property
    def device_name(self) -> str:
        """Name of the device in use."""
        return self._ctx.info.name

    @property
    def zero_copy(self) -> bool:
        """Whether the mesh buffers are host memory the device works on (CPU devices)."""
        return self._rho.zero_copy

    def close(self) -> None:
        """Release the device (idempotent; safe on a half-built solver)."""
        ctx = getattr(self, "_ctx", None)
        if ctx is None:
            return
        self._ctx = None
        try:
            ctx.finish()
            mg = getattr(self, "_mg", None)
            if mg is not None:
                mg.free()
            for name in ("_q", "_g", "_rho", "_phi", "_x", "_m", "_acc", "_pot"):
                b = getattr(self, name, None)
                if b is not None:
                    b.free()
        finally:
            ctx.close()

    def __enter__(self) -> ParticleMesh:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - depends on the collector
        with contextlib.suppress(Exception):
            self.close()

    def _require_open(self) -> Context:
        if self._ctx is None:
            raise BackendError("the particle-mesh solver has been closed")
        return self._ctx

    # -- validation ----------------------------------------------------------------------

    def usable_region(self) -> tuple[float, float]:
        """The interval ``[lo, hi)`` of each coordinate that particles must lie in."""
        half = self.box / 2
        return -half + self.margin * self.h, half - self.margin * self.h

    def check_positions(self, x: np.ndarray) -> None:
        """Raise :class:`InputError` when a position is not finite or outside the usable
        region (naming how many and the first one)."""
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"x: {int(bad.sum())} particle(s) with non-finite coordinates "
                             f"(first: index {i}, {x[i].tolist()})")
        lo, hi = self.usable_region()
        xd = x.astype(self.dtype).astype(np.float64)  # as the device sees them
        out = ((xd < lo) | (xd >= hi)).any(axis=1)
        if out.any():
            i = int(np.flatnonzero(out)[0])
            where = ("the box" if self.boundary == "periodic" else
                     f"the usable region of the isolated mesh (the box less {self.margin} "
                     f"cells of window and gradient stencil on each side)")
            raise InputError(
                f"x: {int(out.sum())} particle(s) outside {where}, [{lo:.6g}, {hi:.6g}) in "
                f"each coordinate (first: index {i}, {x[i].tolist()})")

    def _validate(self, x: Any, m: Any) -> tuple[np.ndarray, np.ndarray]:
        try:
            x = np.asarray(x, dtype=np.float64)
            m = np.asarray(m, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"x, m: expected numeric arrays ({exc})") from None
        if x.ndim != 2 or x.shape[1] != 3:
            raise InputError(f"x: expected shape (n, 3), got {x.shape}")
        if m.ndim == 0:
            m = np.full(x.shape[0], float(m))
        if m.shape != (x.shape[0],):
            raise InputError(f"m: expected shape ({x.shape[0]},), got {m.shape}")
        if x.shape[0] == 0:
            raise InputError("x: no particles")
        if x.shape[0] >= 2**31 // 3:
            raise InputError(f"x: at most {2**31 // 3 - 1} particles, got {x.shape[0]}")
        badm = ~np.isfinite(m) | (m < 0)
        if badm.any():
            i = int(np.flatnonzero(badm)[0])
            raise InputError(f"m: {int(badm.sum())} mass(es) negative or not finite "
                             f"(first: index {i}, {m[i]!r})")
        self.check_positions(x)
        return x, m

    # -- stages --------------------------------------------------------------------------

    def _load(self, x: np.ndarray, m: np.ndarray) -> None:
        """Put positions and masses on the device (the queue must be idle)."""
        n, it = x.shape[0], self.dtype.itemsize
        if n > self._cap:  # larger particle arrays
            for b in (self._x, self._m, self._acc, self._pot):
                if b is not None:
                    b.free()
            ctx = self._require_open()
            self._x = ctx.alloc_host(3 * n * it)
            self._m = ctx.alloc_host(n * it)
            self._acc = ctx.alloc_host(3 * n * it)
            self._pot = ctx.alloc_host(n * it)
            self._cap = n
        self._n = n
        self._x.view(self.dtype, (n, 3))[...] = x
        self._m.view(self.dtype, (n,))[...] = m
        self._x.to_device(3 * n * it)
        self._m.to_device(n * it)
        self._mass = float(np.sum(m, dtype=np.float64))
        self._scale = 2.0**FIX_BITS / self._mass if self._mass > 0 else 1.0

    def _read(self, buffer: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A float64 copy of a host buffer's device data (brought down where needed)."""
        buffer.from_device(math.prod(shape) * self.dtype.itemsize)
        self._require_open().finish()
        return buffer.view(self.dtype, shape).astype(np.float64)

    def _host_positions(self) -> np.ndarray:
        """The device's positions (the host buffer holds them too afterwards)."""
        return self._read(self._x, (self._n, 3))

    def _assign(self) -> None:
        """Fixed-point sums of the masses in ``_q``, then made the density; or float atomics
        straight into the density."""
        ctx = self._require_open()
        fixed = self.assignment == "fixed"
        out = self._q if fixed else self._rho.buffer
        out.fill(0)
        weight = self._scale if fixed else self._rho_factor / self.h**3
        self._k["assign" if fixed else "assign_float"](
            _gsize(self._n), None, np.int32(self._n), np.float64(-self.box / 2),
            np.float64(1.0 / self.h), np.float64(weight), self._x.buffer, self._m.buffer, out)
        if fixed:
            factor = self._rho_factor / (self._scale * self.h**3)
            self._k["to_density"](_gsize(self.grid**3), None, np.float64(factor), self._q,
                                  self._rho.buffer)
        ctx.finish()

    def _poisson(self) -> None:
        ctx = self._require_open()
        g = self.grid
        if self._fft is not None:
            self._rho.from_device()
            ctx.finish()
            self._fft.solve(self._rho.view(self.dtype, (g, g, g)),
                            self._phi.view(self.dtype, (g, g, g)))
            self._phi.to_device()
            ctx.finish()
            self.last_info = {"solver": "fft"}
            return
        assert self._mg is not None
        if self._phi_fresh:
            self._phi.buffer.fill(0)
            self._phi_fresh = False
        rho = self._read(self._rho, (g**3,))
        faces = multipole_faces(self._host_positions(),
                                self._m.view(self.dtype, (self._n,)).astype(np.float64),
                                g, self.box)
        norm = float(np.sqrt(rho @ rho))
        self._mg.solve(faces, self._rho.buffer, norm, self._phi.buffer)
        ctx.finish()
        self.last_info = {"solver": "multigrid", "cycles": self._mg.cycles,
                          "residual": self._mg.residual,
                          "relative_residual": self._mg.residual / max(norm, 1e-300)}

    def _gradient(self) -> None:
        self._k["gradient"](_gsize(self.grid**3), None, np.float64(1.0 / self.h),
                            self._phi.buffer, self._g)
        self._require_open().finish()

    def _interpolate(self) -> None:
        self._k["interpolate"](_gsize(self._n), None, np.int32(self._n),
                               np.float64(-self.box / 2), np.float64(1.0 / self.h),
                               self._x.buffer, self._phi.buffer, self._g, self._acc.buffer,
                               self._pot.buffer)
        self._require_open().finish()

    def _compute(self) -> dict[str, float]:
        """Run the four stages on the device's particles; returns seconds per stage."""
        times = {}
        for name, stage in zip(STAGES, (self._assign, self._poisson, self._gradient,
                                        self._interpolate), strict=True):
            t0 = time.perf_counter()
            stage()
            times[name] = time.perf_counter() - t0
        return times

    def _results(self) -> tuple[np.ndarray, np.ndarray]:
        acc, pot = self._read(self._acc, (self._n, 3)), self._read(self._pot, (self._n,))
        if not (np.isfinite(acc).all() and np.isfinite(pot).all()):
            raise NonFiniteError("particle-mesh forces are not finite")
        return acc, pot

    # -- public --------------------------------------------------------------------------

    def forces(self, x: Any, m: Any) -> PMResult:
        """Accelerations and potentials of the particles ``x`` (n, 3) with masses ``m``.

        Raises
        ------
        InputError
            Wrong shapes, non-finite values, negative masses, or particles outside the
            usable region (see the class notes).
        NonFiniteError
            When a result is not finite.
        """
        self._require_open()
        x, m = self._validate(x, m)
        self._load(x, m)
        times = self._compute()
        acc, pot = self._results()
        return PMResult(acc, pot, times, dict(self.last_info))

    def solve_mesh(self, rho: Any, faces: Any = None) -> np.ndarray:
        """The mesh potential (G, G, G) of a mesh density ``rho`` (G, G, G), by this solver.

        ``faces`` (multigrid only): potential on the six box faces, shape (6, G, G) as in
        :func:`~sapporo.pm.multigrid.multipole_faces`; default: the multipole expansion of
        the mesh cells themselves. The next multigrid solve starts from zero.
        """
        ctx = self._require_open()
        g = self.grid
        rho = np.asarray(rho, dtype=np.float64)
        if rho.shape != (g, g, g) or not np.isfinite(rho).all():
            raise InputError(f"rho: expected finite values of shape {(g, g, g)}, got "
                             f"{rho.shape}")
        self._rho.view(self.dtype, (g, g, g))[...] = rho * self._rho_factor
        self._rho.to_device()
        if self._fft is not None:
            ctx.finish()
            self._fft.solve(self._rho.view(self.dtype, (g, g, g)),
                            self._phi.view(self.dtype, (g, g, g)))
            return self._phi.view(self.dtype, (g, g, g)).astype(np.float64)
        assert self._mg is not None
        if faces is None:
            c = -self.box / 2 + (np.arange(g) + 0.5) * self.h
            cells = np.stack(np.meshgrid(c, c, c, indexing="ij"), axis=-1).reshape(-1, 3)
            faces = multipole_faces(cells, rho.reshape(-1) * self.h**3, g, self.box)
        faces = np.asarray(faces, dtype=np.float64)
        if faces.shape != (6, g, g) or not np.isfinite(faces).all():
            raise InputError(f"faces: expected finite values of shape {(6, g, g)}")
        self._phi.buffer.fill(0)
        self._phi_fresh = True
        rhs = 4 * np.pi * rho.reshape(-1)
        self._mg.solve(faces, self._rho.buffer, float(np.sqrt(rhs @ rhs)), self._phi.buffer)
        self.last_info = {"solver": "multigrid", "cycles": self._mg.cycles,
                          "residual": self._mg.residual}
        return self.potential_mesh()

    def density(self) -> np.ndarray:
        """The mesh density (G, G, G) of the last force call (a copy)."""
        return self._read(self._rho, (self.grid,) * 3) / self._rho_factor

    def potential_mesh(self) -> np.ndarray:
        """The mesh potential (G, G, G) of the last force call (a copy)."""
        return self._read(self._phi, (self.grid,) * 3)
