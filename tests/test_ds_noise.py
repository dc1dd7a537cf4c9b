"""Call-to-call noise of double-single force differences (AMUSE ph4 at small eta).

Hermite integrators with the Aarseth step (AMUSE's ph4) difference the acceleration of a
particle between its steps; noise in a(t1) - a(t0) shortens their steps. Along a Plummer
orbit the double-single acceleration differences must agree with double ones to within
the bound below; the kernels before the compensated tile sums gave a median of 5.9e-8
(docs/accuracy.md), the compensated ones 3.7e-8.
"""

from __future__ import annotations

import numpy as np

import sapporo
from sapporo import reference

#: Bound on the median of |delta(a(t1) - a(t0))| / |a(t0)| over all particles.
ACC_DIFF_BOUND = 4.5e-8


def _forces(lib: sapporo.Library, x, v, m, a, j, ids, eps2, times):
    n = len(m)
    lib.set_j_particles(np.arange(n), ids, np.zeros(n), m, x, v, a, j)
    acc, jerk = [], []
    for t in times:
        lib.set_time(float(t))
        xi, vi, _ = reference.predict(float(t), 0.0, x, v, a, j)
        res = lib.compute(xi, vi, ids, eps2)
        acc.append(res.acc)
        jerk.append(res.jerk)
    return np.array(acc), np.array(jerk)


def test_acceleration_differences_along_orbits(backend):
    x, v, m = reference.plummer(1024, seed=1)
    ids = np.arange(1024)
    eps2 = (1.0 / 64) ** 2
    r = reference.forces(x, v, ids, x, v, m, ids, eps2, order=4)
    t0 = np.array([0.003, 0.011, 0.019, 0.027])
    dt = 2.0**-10
    times = np.concatenate([t0, t0 + dt])
    with sapporo.Library(4, "double-single", backend=backend) as ds, \
            sapporo.Library(4, "double", backend=backend) as d:
        a_ds, j_ds = _forces(ds, x, v, m, r.acc, r.jerk, ids, eps2, times)
        a_d, j_d = _forces(d, x, v, m, r.acc, r.jerk, ids, eps2, times)
    k = len(t0)
    noise = (a_ds[k:] - a_ds[:k]) - (a_d[k:] - a_d[:k])
    rel = np.linalg.norm(noise, axis=-1) / np.linalg.norm(a_d[:k], axis=-1)
    assert np.median(rel) < ACC_DIFF_BOUND, np.median(rel)
    # the jerk differences stay at the level of single-precision pair terms
    jnoise = (j_ds[k:] - j_ds[:k]) - (j_d[k:] - j_d[:k])
    jrel = np.linalg.norm(jnoise, axis=-1) / np.linalg.norm(j_d[:k], axis=-1)
    assert np.median(jrel) < 5e-7, np.median(jrel)
