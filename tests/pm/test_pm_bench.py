"""The NumPy baseline of the benchmark computes the same forces; bench() runs (no speed is
asserted)."""

from __future__ import annotations

import numpy as np
import pytest

from sapporo.pm.bench import NumpyPM, bench, markdown_table


def test_numpy_baseline_matches_device(backend, meshes) -> None:
    """Periodic CIC with the 2-point gradient and the continuous Green's function in both:
    the same arithmetic in another order, 1e-11 of the largest value."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-0.5, 0.5, (3000, 3))
    m = rng.uniform(0.5, 1.0, 3000)
    pm = meshes(backend, 16, 1.0, boundary="periodic", window="cic", stencil=2)
    r = pm.forces(x, m)
    acc, pot = NumpyPM(16, 1.0).forces(x, m)
    assert np.abs(acc - r.acc).max() < 1e-11 * np.abs(r.acc).max()
    assert np.abs(pot - r.pot).max() < 1e-11 * np.abs(r.pot).max()


@pytest.mark.parametrize("sort", [False, True])
def test_bench_runs(backend, sort) -> None:
    res = bench([8], steps=1, backend=backend, sort=sort)
    assert res["sorted"] is sort
    (row,) = res["rows"]
    assert row["grid"] == 8 and row["n"] == 512
    assert set(row["device"]) == set(row["numpy"]) == {
        "assignment", "poisson", "gradient", "interpolation", "update"}
    assert all(t > 0 for t in row["device"].values())
    table = markdown_table(res)
    assert table.count("| 8^3 |") == 2


def test_assignment_timing_runs(backend) -> None:
    from sapporo.pm.bench import assignment_timing

    (row,) = assignment_timing([8], repeats=1, backend=backend)
    assert row["grid"] == 8 and row["fixed"] > 0 and row["float"] > 0
