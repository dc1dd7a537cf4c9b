"""Multigrid V-cycles: the discrete problem solved exactly, and agreement with the FFT."""

from __future__ import annotations

import numpy as np
import pytest

from sapporo import reference
from sapporo.errors import ConfigError
from sapporo.pm import multigrid
from sapporo.pm.multigrid import level_sizes, multipole_faces


def test_level_sizes() -> None:
    assert level_sizes(32) == [32, 16, 8, 4]
    assert level_sizes(48) == [48, 24, 12, 6, 3]
    assert level_sizes(6) == [6, 3]
    assert level_sizes(7) == [7]
    with pytest.raises(ConfigError):
        level_sizes(36)  # 36, 18, 9: the coarsest is too large for plain relaxation


def test_multipole_faces_match_direct_sum() -> None:
    """A compact cluster (about 0.1 of the box across, off centre): monopole + quadrupole
    about the centre of mass leave the octupole and higher, of order (0.1 / 0.5)^3 ~ 1e-2
    of the monopole at most; measured 3.3e-4 of the largest face potential, bound 1e-3."""
    rng = np.random.default_rng(1)
    x = rng.normal(0.05, 0.05, (300, 3)) * [1.0, 0.5, 0.8]
    m = rng.uniform(0.5, 1.5, 300)
    grid, box = 8, 1.0
    faces = multipole_faces(x, m, grid, box)
    c = -box / 2 + (np.arange(grid) + 0.5) * box / grid
    for axis in range(3):
        others = [a for a in range(3) if a != axis]
        for side in range(2):
            pts = np.zeros((grid, grid, 3))
            pts[..., axis] = box / 2 if side else -box / 2
            pts[..., others[0]] = c[:, None]
            pts[..., others[1]] = c[None, :]
            d = np.linalg.norm(pts[:, :, None, :] - x[None, None], axis=-1)
            exact = -(m / d).sum(axis=-1)
            assert np.abs(faces[2 * axis + side] - exact).max() < 1e-3 * np.abs(exact).max()


def _manufactured(grid: int, box: float):
    """A smooth phi at the mesh points, its face values, its 7-point Laplacian (ghosts from
    the face values, as the solver's) and sum_d delta_d^4 phi / 12 h^2 where an axis's 5
    points lie on the mesh (as the mg_defect kernel)."""
    h = box / grid

    def f(x, y, z):
        return np.exp(-(x**2 + 2 * y**2 + 1.5 * z**2)) * (1 + 0.3 * x) + 0.2 * y * z

    c = -box / 2 + (np.arange(grid) + 0.5) * h
    ext = np.r_[-box / 2 - h / 2, c, box / 2 + h / 2]  # one ghost point each side
    X, Y, Z = np.meshgrid(ext, ext, ext, indexing="ij")
    phi_e = f(X, Y, Z)
    # ghosts such that the face value (the mean of ghost and outer point) is f on the face
    inner = phi_e[1:-1, 1:-1, 1:-1]
    faces = np.zeros((6, grid, grid))
    P, Q = np.meshgrid(c, c, indexing="ij")
    faces[0], faces[1] = f(-box / 2, P, Q), f(box / 2, P, Q)
    faces[2], faces[3] = f(P, -box / 2, Q), f(P, box / 2, Q)
    faces[4], faces[5] = f(P, Q, -box / 2), f(P, Q, box / 2)
    g = phi_e.copy()
    g[0, 1:-1, 1:-1] = 2 * faces[0] - inner[0]
    g[-1, 1:-1, 1:-1] = 2 * faces[1] - inner[-1]
    g[1:-1, 0, 1:-1] = 2 * faces[2] - inner[:, 0]
    g[1:-1, -1, 1:-1] = 2 * faces[3] - inner[:, -1]
    g[1:-1, 1:-1, 0] = 2 * faces[4] - inner[:, :, 0]
    g[1:-1, 1:-1, -1] = 2 * faces[5] - inner[:, :, -1]
    lap = (g[2:, 1:-1, 1:-1] + g[:-2, 1:-1, 1:-1] + g[1:-1, 2:, 1:-1] + g[1:-1, :-2, 1:-1]
           + g[1:-1, 1:-1, 2:] + g[1:-1, 1:-1, :-2] - 6 * inner) / h**2
    d4 = np.zeros_like(inner)
    for axis in range(3):
        p = np.moveaxis(inner, axis, 0)
        q = np.moveaxis(d4, axis, 0)  # a view: writes go to d4
        q[2:-2] += p[:-4] - 4 * p[1:-3] + 6 * p[2:-2] - 4 * p[3:-1] + p[4:]
    return inner, faces, lap, d4 / (12 * h**2)


def test_manufactured_solution_7_point(backend, meshes, monkeypatch) -> None:
    """The V-cycles alone (multigrid.ORDER = 2): rho = (7-point Laplacian of phi) / 4 pi on
    the mesh, with phi on the box faces as the Dirichlet values: the V-cycles must return
    phi itself, to the solver tolerance (1e-11 residual; the discrete solution error is
    then ~1e-9 of phi), at about a digit per V-cycle."""
    monkeypatch.setattr(multigrid, "ORDER", 2)
    pm = meshes(backend, 32, 2.0, solver="multigrid", mg_tol=1e-11)
    inner, faces, lap, _ = _manufactured(32, 2.0)
    phi = pm.solve_mesh(lap / (4 * np.pi), faces)
    assert pm.last_info["cycles"] <= 15
    assert np.abs(phi - inner).max() < 1e-8 * np.abs(inner).max()


def test_manufactured_solution_fourth_order(backend, meshes) -> None:
    """The default, fourth-order solve: rho = (L7 phi - sum_d delta_d^4 phi / 12 h^2) / 4 pi
    (the 13-point Laplacian, 7-point within 2 cells of the faces) gives phi back to the
    tolerance; the defect correction converges by about 3x per V-cycle (measured 22
    cycles for 1e-11)."""
    pm = meshes(backend, 32, 2.0, solver="multigrid", mg_tol=1e-11)
    inner, faces, lap, d4 = _manufactured(32, 2.0)
    phi = pm.solve_mesh((lap - d4) / (4 * np.pi), faces)
    assert pm.last_info["cycles"] <= 30
    assert np.abs(phi - inner).max() < 1e-8 * np.abs(inner).max()
    # and the 7-point right-hand side no longer gives phi: the two operators differ
    phi7 = pm.solve_mesh(lap / (4 * np.pi), faces)
    assert np.abs(phi7 - inner).max() > 1e-5 * np.abs(inner).max()


@pytest.fixture(scope="module")
def plummer_sample():
    x, _, m = reference.plummer(3000, seed=4)
    keep = np.linalg.norm(x, axis=1) < 2.5
    return x[keep], m[keep]


def test_multigrid_against_fft(backend, meshes, plummer_sample) -> None:
    """Isolated Plummer sphere, box 8: the two solvers differ by the discretisation (the
    fourth-order Laplacian against the free-space Green's function, which differ most in
    the dense centre) and by the multipole boundary values. Measured median force
    differences 1.8% at 32^3 and 0.48% at 64^3 (4.2% and 1.1% with the 7-point Laplacian);
    bounds 6% and 1.6% (kept from then), and the difference must shrink by at least 2.5x
    from 32^3 to 64^3."""
    x, m = plummer_sample
    medians = []
    for grid in (32, 64):
        fft = meshes(backend, grid, 8.0, window="tsc")
        mg = meshes(backend, grid, 8.0, window="tsc", solver="multigrid", mg_tol=1e-8)
        rf, rm = fft.forces(x, m), mg.forces(x, m)
        assert rm.info["relative_residual"] < 1e-8
        err = np.linalg.norm(rm.acc - rf.acc, axis=1) / np.linalg.norm(rf.acc, axis=1)
        medians.append(np.median(err))
        perr = np.abs(rm.pot - rf.pot) / np.abs(rf.pot)
        assert np.median(perr) < (0.02 if grid == 32 else 0.006)
    assert medians[0] < 0.06 and medians[1] < 0.016
    assert medians[1] < medians[0] / 2.5


def test_warm_start_needs_fewer_cycles(backend, meshes, plummer_sample) -> None:
    """The previous potential is the next initial guess (as in an integration)."""
    x, m = plummer_sample
    mg = meshes(backend, 32, 8.0, solver="multigrid", mg_tol=1e-7)
    first = mg.forces(x, m).info["cycles"]
    again = mg.forces(x + 1e-3, m).info["cycles"]
    assert again < first
