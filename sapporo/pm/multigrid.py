"""Multigrid V-cycles (red-black Gauss-Seidel) for isolated boundaries, on the device.

The mesh is cell-centred (a level of n points coarsens to n / 2 covering the same box);
the 7-point Laplacian is solved with Dirichlet values on the box faces, from a multipole
expansion of the particles on the finest level and zero on the coarser ones' error
equations; restriction averages 8 cells, prolongation is trilinear. The finest level
solves the fourth-order equation (13-point Laplacian) by defect correction (the
``mg_defect`` kernel), whose residual the tolerance refers to (docs/pm.md).
"""

from __future__ import annotations

import logging

import numpy as np

from sapporo.errors import ConfigError

log = logging.getLogger(__name__)

#: red-black sweeps before and after the coarse-level correction, and on the coarsest level
PRE_SWEEPS = 2
POST_SWEEPS = 2
COARSE_SWEEPS = 40
#: the coarsest level has at most this many points per side
MAX_COARSE = 8
#: order of the finest level's Laplacian: 4 (defect correction, the default) or 2 (the plain
#: 7-point one; kept for measurements and tests of the V-cycles)
ORDER = 4


def _gsize(n: int) -> tuple[int]:
    """A 1-D launch size covering ``n`` work-items, a multiple of 64 (kernels check bounds)."""
    return (max(64, -(-int(n) // 64) * 64),)


def level_sizes(grid: int) -> list[int]:
    """Points per side of each level, finest first.

    Raises
    ------
    ConfigError
        When halving ``grid`` does not reach a level of at most ``MAX_COARSE`` points.
    """
    sizes = [grid]
    while sizes[-1] > 4 and sizes[-1] % 2 == 0:
        sizes.append(sizes[-1] // 2)
    if sizes[-1] > MAX_COARSE:
        raise ConfigError(
            f"grid {grid}: multigrid needs a grid that halves down to at most {MAX_COARSE} "
            f"points (2^k times 1 to {MAX_COARSE}, e.g. 32, 48, 64, 96, 128), got {grid}")
    return sizes


def multipole_faces(x: np.ndarray, m: np.ndarray, grid: int, box: float) -> np.ndarray:
    """Potential on the six box faces from the particles' monopole and quadrupole.

    Returns an array (6, G, G): face ``2 * axis + side`` (side 0 at -box/2, 1 at +box/2),
    indexed by the two other axes in order, at the face points' cell-centred coordinates.
    """
    h = box / grid
    mass = float(m.sum())
    out = np.zeros((6, grid, grid))
    if mass == 0.0:
        return out
    com = (m[:, None] * x).sum(axis=0) / mass
    d = x - com
    r2 = (d * d).sum(axis=1)
    q = 3.0 * np.einsum("n,ni,nj->ij", m, d, d) - np.eye(3) * float((m * r2).sum())
    c = -box / 2 + (np.arange(grid) + 0.5) * h
    for axis in range(3):
        others = [a for a in range(3) if a != axis]
        for side in range(2):
            pts = np.zeros((grid, grid, 3))
            pts[..., axis] = box / 2 if side else -box / 2
            pts[..., others[0]] = c[:, None]
            pts[..., others[1]] = c[None, :]
            r = pts - com
            rr = np.sqrt((r * r).sum(axis=-1))
            quad = np.einsum("abi,ij,abj->ab", r, q, r)
            out[2 * axis + side] = -(mass / rr + 0.5 * quad / rr**5)
    return out


class MultigridSolver:
    """V-cycles on the device (``ctx``; ``program``: the built ``pm`` program, in the
    precision ``dtype``) for the isolated Poisson problem ``L phi = 4 pi rho`` on the mesh
    ``grid``, ``box``: at most ``max_cycles`` per solve, until the residual's 2-norm is below
    ``tol`` times the right-hand side's."""

    def __init__(self, ctx, program, grid: int, box: float, dtype: np.dtype, tol: float,
                 max_cycles: int):
        self.ctx, self.grid, self.box = ctx, grid, box
        self.dtype = np.dtype(dtype)
        self.tol, self.max_cycles = tol, max_cycles
        self.sizes = level_sizes(grid)
        it = self.dtype.itemsize
        self._k = {name: program.kernel(f"mg_{name}")
                   for name in ("smooth", "residual", "restrict", "prolong", "defect")}
        # level 0 phi and rhs are the mesh's buffers (given to solve); coarse levels own theirs
        self.phi = [None] + [ctx.alloc(n**3 * it) for n in self.sizes[1:]]
        self.rhs = [None] + [ctx.alloc(n**3 * it) for n in self.sizes[1:]]
        self.res = [ctx.alloc_host(n**3 * it) for n in self.sizes]
        self.bnd = ctx.alloc_host(6 * grid * grid * it)
        self.rhs4 = ctx.alloc(grid**3 * it)  # the finest level's defect-corrected rhs
        self.rhs_given = None
        self.cycles = 0
        self.residual = float("nan")

    def free(self) -> None:
        """Release the level buffers."""
        for b in [*self.phi[1:], *self.rhs[1:], self.rhs4, *self.res, self.bnd]:
            b.free()

    def _h(self, level: int) -> float:
        return self.box / self.sizes[level]

    def _smooth(self, level: int, phi, rhs, sweeps: int) -> None:
        n = self.sizes[level]
        h2 = np.float64(self._h(level) ** 2)
        use = np.int32(level == 0)
        for _ in range(sweeps):
            for color in (0, 1):
                self._k["smooth"](_gsize(n**3), None, np.int32(n), h2, np.int32(color), use,
                                  phi, rhs, self.bnd.buffer)

    def _residual(self, level: int, phi, rhs) -> None:
        n = self.sizes[level]
        self._k["residual"](_gsize(n**3), None, np.int32(n),
                            np.float64(1.0 / self._h(level) ** 2), np.int32(level == 0), phi,
                            rhs, self.bnd.buffer, self.res[level].buffer)

    def _vcycle(self, level: int) -> None:
        phi, rhs = self.phi[level], self.rhs[level]
        if level == len(self.sizes) - 1:
            self._smooth(level, phi, rhs, COARSE_SWEEPS)
            return
        self._smooth(level, phi, rhs, PRE_SWEEPS)
        self._residual(level, phi, rhs)
        nc = self.sizes[level + 1]
        self._k["restrict"](_gsize(nc**3), None, np.int32(nc), self.res[level].buffer,
                            self.rhs[level + 1])
        self.phi[level + 1].fill(0)
        self._vcycle(level + 1)
        self._k["prolong"](_gsize((2 * nc) ** 3), None, np.int32(nc), self.phi[level + 1],
                           phi)
        self._smooth(level, phi, rhs, POST_SWEEPS)

    def _residual_norm(self) -> float:
        """The 2-norm of the finest level's residual (fourth-order equation: after
        refreshing the defect-corrected right-hand side, which the next V-cycle uses)."""
        if ORDER == 4:
            n = self.grid
            self._k["defect"](_gsize(n**3), None, np.int32(n),
                              np.float64(1.0 / (12.0 * self._h(0) ** 2)), self.phi[0],
                              self.rhs_given, self.rhs4)
            self.rhs[0] = self.rhs4
        else:
            self.rhs[0] = self.rhs_given
        self._residual(0, self.phi[0], self.rhs[0])
        self.res[0].from_device()
        self.ctx.finish()
        r = self.res[0].view(self.dtype, (self.grid**3,))
        return float(np.sqrt(np.dot(r.astype(np.float64), r.astype(np.float64))))

    def solve(self, faces: np.ndarray, rhs, rhs_norm: float, phi) -> None:
        """Relax ``phi`` (device buffer, the initial guess) towards the solution.

        ``faces`` (6, G, G) are the face values, ``rhs`` the device buffer of 4 pi rho and
        ``rhs_norm`` its 2-norm.
        """
        self.bnd.view(self.dtype, faces.shape)[...] = faces
        self.bnd.to_device()
        self.phi[0], self.rhs_given = phi, rhs
        target = self.tol * max(rhs_norm, np.finfo(np.float64).tiny)
        self.cycles = 0
        self.residual = self._residual_norm()
        while self.residual > target and self.cycles < self.max_cycles:
            self._vcycle(0)
            self.cycles += 1
            self.residual = self._residual_norm()
        if self.residual > target:
            log.warning("multigrid: residual %.3g after %d V-cycles (target %.3g)",
                        self.residual, self.cycles, target)
        log.debug("multigrid: %d V-cycles, residual %.3g", self.cycles, self.residual)
