"""The device leapfrog against a host leapfrog on the same forces, and its invariants."""

from __future__ import annotations

import numpy as np
import pytest

from sapporo.errors import InputError
from sapporo.pm import ic
from sapporo.pm.integrator import STEP_STAGES, Leapfrog


def test_device_leapfrog_matches_host_leapfrog(backend, meshes) -> None:
    """Kick-drift-kick on the device against the same scheme on the host with
    ParticleMesh.forces: the same arithmetic in double, so the trajectories agree to
    round-off after 5 steps (1e-12 of the box; the positions only feed back through the
    smooth mesh force)."""
    pm = meshes(backend, 16, 12.0, window="cic")
    x, v, m = ic.plummer(500, r_max=4.0, seed=2)
    dt = 0.02
    sim = Leapfrog(pm, x, v, m, dt)
    sim.step(5)
    xd, vd = sim.state()
    sim.close()
    xh, vh = x.copy(), v.copy()
    a = pm.forces(xh, m).acc
    for _ in range(5):
        vh += 0.5 * dt * a
        xh += dt * vh
        a = pm.forces(xh, m).acc
        vh += 0.5 * dt * a
    assert np.abs(xd - xh).max() < 1e-12 * 12.0
    assert np.abs(vd - vh).max() < 1e-10 * np.abs(vh).max()
    assert sim.t == pytest.approx(5 * dt) and sim.steps == 5
    assert set(sim.mean_step_times()) == set(STEP_STAGES)


def test_sorting_by_cell_changes_nothing(backend, meshes) -> None:
    """Reordering the particles by cell (every step here) gives the same bits as never
    reordering: the fixed-point assignment makes the forces independent of the order."""
    pm = meshes(backend, 16, 12.0, window="tsc")
    x, v, m = ic.plummer(800, r_max=4.0, seed=3)
    m = m * np.linspace(0.5, 1.5, 800)  # unequal masses: a mixed-up order would show
    runs = []
    for every in (0, 1, 3):
        sim = Leapfrog(pm, x, v, m, 0.02, sort_every=every)
        sim.step(6)
        runs.append((*sim.state(), sum(sim.energies())))
        sim.close()
    for other in runs[1:]:
        assert np.array_equal(runs[0][0], other[0]) and np.array_equal(runs[0][1], other[1])
        assert runs[0][2] == pytest.approx(other[2], rel=1e-14, abs=0)
    with pytest.raises(InputError, match="sort_every"):
        Leapfrog(pm, x, v, m, 0.02, sort_every=-1)


def test_energy_and_momentum(backend, meshes) -> None:
    """A Plummer sphere on a 32^3 mesh (TSC, 4-point gradient) for 20 steps of 0.02: the
    mesh force is not exactly the gradient of the interpolated potential, so the energy
    drifts; measured 1.8e-3 over this run, bound 5e-3 (the paper's PM runs: about 1e-3).
    Momentum is conserved to round-off (the mesh force is antisymmetric)."""
    pm = meshes(backend, 32, 12.0, window="tsc", stencil=4)
    x, v, m = ic.plummer(4000, r_max=4.8, seed=1)
    sim = Leapfrog(pm, x, v, m, 0.02)
    e0 = sum(sim.energies())
    p0 = (m[:, None] * v).sum(axis=0)
    sim.step(20)
    e1 = sum(sim.energies())
    _, v1 = sim.state()
    sim.close()
    assert abs(e1 - e0) < 5e-3 * abs(e0)
    assert np.abs((m[:, None] * v1).sum(axis=0) - p0).max() < 1e-12


def test_periodic_drift_wraps(backend, meshes) -> None:
    """A lone particle crossing the periodic box comes back on the other side."""
    pm = meshes(backend, 8, 2.0, boundary="periodic")
    x = np.array([[0.95, -0.99, 0.0], [0.0, 0.0, 0.0]])
    v = np.array([[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    sim = Leapfrog(pm, x, v, np.array([0.0, 0.0]), 0.1)
    sim.step(1)
    xs, _ = sim.state()
    sim.close()
    assert xs[0] == pytest.approx([-0.95, 0.91, 0.0], abs=1e-12)


def test_leaving_the_isolated_mesh_is_an_error(backend, meshes) -> None:
    pm = meshes(backend, 8, 2.0, window="cic", stencil=2)  # margin 1.5 cells
    x = np.array([[0.3, 0.0, 0.0]])
    sim = Leapfrog(pm, x, np.array([[10.0, 0.0, 0.0]]), np.array([1.0]), 0.1)
    with pytest.raises(InputError, match=r"at t = 0\.1 \(step 1\).*outside"):
        sim.step(3)
    sim.close()
    with pytest.raises(InputError, match="dt"):
        Leapfrog(pm, x, np.zeros((1, 3)), np.array([1.0]), -0.1)
    with pytest.raises(InputError, match="v"):
        Leapfrog(pm, x, np.zeros((2, 3)), np.array([1.0]), 0.1)


@pytest.mark.parametrize("model", ic.MODELS)
def test_initial_conditions(model) -> None:
    x, v, m = ic.make(model, 1000, 10.0, seed=3)
    assert x.shape == v.shape == (1000, 3) and m.shape == (1000,)
    assert m.sum() == pytest.approx(1.0)
    if model == "uniform":
        assert (x >= -5).all() and (x < 5).all() and not v.any()
    else:
        assert (np.linalg.norm(x, axis=1) < 4.0 + 0.2).all()  # 0.4 box, plus the recentring
        assert np.abs(x.mean(axis=0)).max() < 1e-12 and np.abs(v.mean(axis=0)).max() < 1e-12
    if model == "disk":
        assert np.abs(x[:, 2]).max() < 0.31  # three scale heights (0.1)
        lz = x[:, 0] * v[:, 1] - x[:, 1] * v[:, 0]
        assert (lz > 0).mean() > 0.95  # rotating
    with pytest.raises(InputError):
        ic.make(model, 0, 10.0)


def test_p3m_leapfrog_matches_host_leapfrog(backend) -> None:
    """The leapfrog with P^3M forces against the same scheme on the host with
    P3M.forces: round-off only (1e-12 of the box after 3 steps)."""
    from sapporo.pm import P3M

    x, v, m = ic.plummer(400, r_max=1.0, seed=4)
    dt = 0.01
    with P3M(16, 4.0, backend=backend) as p3m:
        sim = Leapfrog(p3m, x, v, m, dt)
        sim.step(3)
        xd, _ = sim.state()
        assert "short_range" in sim.mean_step_times()
        e = sum(sim.energies())
        sim.close()
        xh, vh = x.copy(), v.copy()
        r = p3m.forces(xh, m)
        for _ in range(3):
            vh += 0.5 * dt * r.acc
            xh += dt * vh
            r = p3m.forces(xh, m)
            vh += 0.5 * dt * r.acc
    assert np.abs(xd - xh).max() < 1e-12 * 4.0
    eh = 0.5 * float(np.sum(m * np.sum(vh * vh, axis=1))) + 0.5 * float(np.sum(m * r.pot))
    assert e == pytest.approx(eh, rel=1e-10)
