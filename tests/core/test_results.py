"""ForceResult and PendingForce: results outlive the call, and a close in between loses
nothing."""

from __future__ import annotations

import numpy as np
import pytest

import sapporo
from sapporo import reference as ref


def test_result_collected_after_close_is_complete(backend) -> None:
    """A force started before close() is collected by close(): afterwards .result() gives
    the same forces and neighbour lists as without the close; the closed library refuses
    further calls and its memory queries."""
    x, v, m = ref.plummer(64, seed=4)
    ids = np.arange(64)
    results = []
    for close_first in (False, True):
        lib = sapporo.Library(order=4, precision="double", backend=backend)
        lib.set_j_particles(ids, ids, 0.0, m, x, v)
        pending = lib.start_compute(x[:5], v[:5], ids[:5], 1e-4, h2=0.3)
        if close_first:
            lib.close()
            assert pending.done()
        res = pending.result()
        lib.close()
        results.append(res)
        with pytest.raises(sapporo.SapporoError, match="closed"):
            _ = lib.max_address
        with pytest.raises(sapporo.SapporoError, match="closed"):
            lib.compute(x[:1], v[:1], ids[:1], 1e-4)
        assert lib.n_stored == 0
    a, b = results
    np.testing.assert_array_equal(a.acc, b.acc)
    np.testing.assert_array_equal(a.neighbour_counts, b.neighbour_counts)
    assert b.neighbour_counts.sum() > 0
    for k in range(5):
        np.testing.assert_array_equal(a.neighbours(k), b.neighbours(k))
    r = ref.forces(x[:5], v[:5], ids[:5], x, v, m, ids, 1e-4, order=4, h2=0.3)
    for k in range(5):
        assert b.neighbours(k).tolist() == sorted(r.neighbours[k])

