"""Several devices: PoCL shows two CPU devices with POCL_DEVICES="pthread pthread".

The variable must be set before PoCL initialises, so the check runs in a subprocess.
Addresses are spread round-robin over the devices and the partial results combined on the
host; the combined forces must meet the same tolerances as one device, and nearest
neighbours and neighbour lists must be exact in double precision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import sapporo
    from sapporo import reference as ref

    out = {}
    x, v, m = ref.plummer(1001, seed=2)
    ids = np.arange(1001) + 7
    a = ref.forces(x, v, ids, x, v, m, ids, 1e-4, order=2).acc
    for order, prec in [(4, "double"), (6, "double"), (4, "double-single")]:
        with sapporo.Library(order=order, precision=prec, backend="opencl",
                             devices="all") as lib:
            addr = np.random.default_rng(1).permutation(1001)
            lib.set_j_particles(addr, ids[addr], 0.0, m[addr], x[addr], v[addr], a=a[addr])
            sel = np.arange(0, 1001, 3)
            f = lib.compute(x[sel], v[sel], ids[sel], 1e-4, h2=0.02, a=a[sel], nj=1000)
            r = ref.forces(x[sel], v[sel], ids[sel], x[addr[addr < 1000]],
                           v[addr[addr < 1000]], m[addr[addr < 1000]],
                           ids[addr[addr < 1000]], 1e-4, order=order, ai=a[sel],
                           aj=a[addr[addr < 1000]], h2=0.02)
            # nj=1000 drops address 1000, whichever particle lives there
            def r2(k, idj):  # unsoftened r^2 of i-particle k (of sel) and j-particle idj
                return float(((x[idj - 7] - x[sel[k]]) ** 2).sum())

            wrong_nn = np.flatnonzero(f.nn_index != r.nn_index)
            odd = [(k, j) for k in range(len(sel))
                   for j in np.setxor1d(f.neighbours(k), r.neighbours[k])]
            out[f"{order}-{prec}"] = {
                # double-single may differ only at near-ties (1e-5 in r^2)
                "nn_near": bool(all(abs(r2(k, f.nn_index[k]) - r.nn_r2[k])
                                    <= 1e-5 * r.nn_r2[k] for k in wrong_nn)),
                "lists_near": bool(all(abs(r2(k, j) - 0.02) <= 1e-5 * 0.02 for k, j in odd)),
                "ndev": lib.ndev,
                "acc": float(ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max()),
                "jerk": float(ref.relative_vector_error(f.jerk, r.jerk, r.jerk_abs).max()),
                "pot": float((abs(f.pot - r.pot) / abs(r.pot)).max()),
                "nn": bool((f.nn_index == r.nn_index).all()),
                "lists": bool(all(np.array_equal(f.neighbours(k), r.neighbours[k])
                                  for k in range(len(sel)))),
                "counts": bool((f.neighbour_counts
                                == [len(n) for n in r.neighbours]).all()),
            }
    json.dump(out, sys.stdout)
    """
)


def test_two_pocl_devices():
    from sapporo.backend import get_backend
    from sapporo.errors import BackendError

    try:
        names = [d.name for d in get_backend("opencl").devices()]
    except BackendError as exc:
        pytest.skip(f"no OpenCL: {exc}")
    if not any(n.startswith("pthread") for n in names):
        pytest.skip(f"not PoCL's CPU driver ({names}): POCL_DEVICES cannot make two devices")
    env = dict(os.environ, POCL_DEVICES="pthread pthread", SAPPORO_BACKEND="opencl")
    env.pop("SAPPORO_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        if "PoCL" in proc.stderr and "pthread" in proc.stderr:  # pragma: no cover
            pytest.skip(f"PoCL did not create two devices: {proc.stderr[-300:]}")
        raise AssertionError(proc.stderr)
    res = json.loads(proc.stdout)
    for key, r in res.items():
        assert r["ndev"] == 2, key
        tol = 1e-12 if "double-single" not in key else 1e-5
        assert r["acc"] <= tol and r["jerk"] <= tol and r["pot"] <= tol, (key, r)
        assert r["counts"], key
        if "double-single" not in key:
            assert r["nn"] and r["lists"], key
        assert r["nn_near"] and r["lists_near"], key
