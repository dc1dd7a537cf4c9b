"""Several devices: PoCL shows two CPU devices with POCL_DEVICES="pthread pthread".

The variable must be set before PoCL initialises, so the checks run in subprocesses.
Addresses are spread round-robin over the devices and the partial results combined on the
host; the combined forces must meet the same tolerances as one device, and nearest
neighbours and neighbour lists must be exact in double precision. Block steps run in the
native engine on both devices at once, with the bits of the library's own way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.usefixtures("two_pocl_devices")

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


def _two_devices(script: str, **env_extra: str) -> dict:
    """Run ``script`` with PoCL's two CPU devices; its JSON output (the module's tests skip
    without PoCL: the ``two_pocl_devices`` fixture)."""
    env = dict(os.environ, POCL_DEVICES="pthread pthread", SAPPORO_BACKEND="opencl",
               **env_extra)
    env.pop("SAPPORO_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        if "PoCL" in proc.stderr and "pthread" in proc.stderr:  # pragma: no cover
            pytest.skip(f"PoCL did not create two devices: {proc.stderr[-300:]}")
        raise AssertionError(proc.stderr)
    return json.loads(proc.stdout)


def test_two_pocl_devices():
    res = _two_devices(SCRIPT)
    for key, r in res.items():
        assert r["ndev"] == 2, key
        tol = 1e-12 if "double-single" not in key else 1e-5
        assert r["acc"] <= tol and r["jerk"] <= tol and r["pot"] <= tol, (key, r)
        assert r["counts"], key
        if "double-single" not in key:
            assert r["nn"] and r["lists"], key
        assert r["nn_near"] and r["lists_near"], key


ENGINE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import sapporo
    from sapporo import reference as ref

    EPS2 = 1e-4
    n = 701  # odd: the devices hold 351 and 350 addresses
    x, v, m = ref.plummer(n, seed=5)
    rng = np.random.default_rng(5)
    ids = rng.permutation(n) * 2 + 1
    a = rng.normal(scale=0.5, size=(n, 3))
    jerk = rng.normal(scale=0.5, size=(n, 3))
    names = ("acc", "jerk", "snap", "crackle", "pot", "nn_index", "nn_r2", "neighbour_counts")
    out = {}

    def same(r1, r2, tol):
        # the sums to their precision's rounding (another order); the rest exact
        for name in names:
            p, q = getattr(r1, name), getattr(r2, name)
            if (p is None) != (q is None):
                return name
            if p is None:
                continue
            if p.dtype != q.dtype or p.shape != q.shape:
                return name
            if name in ("nn_index", "nn_r2", "neighbour_counts"):
                if not np.array_equal(p, q):
                    return name
            elif np.abs(p - q).max() > tol * max(np.abs(q).max(), 1e-300):
                return name
        if r1.overflow != r2.overflow:
            return "overflow"
        # every list that fits (which ids an overflowing one keeps is not defined)
        if r1.neighbour_counts is not None and not all(
                np.array_equal(r1.neighbours(i), r2.neighbours(i)) for i in range(r1.ni)
                if r1.neighbour_counts[i] <= 8):
            return "neighbours"
        return None

    for order in (2, 4, 6, 8):
        for prec in ("double-single", "double"):
            # the library on two devices, and one on the first device alone
            fast, slow = (sapporo.Library(order=order, precision=prec, devices=d,
                                          nb_capacity=8) for d in ("all", [0]))
            tol = 1e-6 if prec == "double-single" else 1e-12
            addr = rng.permutation(n)  # particle addr[k] at address k
            tj = np.zeros(n)
            for lib in (fast, slow):
                lib.set_j_particles(np.arange(n), ids[addr], 0.0, m[addr], x[addr], v[addr],
                                    a=a[addr], jerk=jerk[addr])
            # a plan per device: its own records and force on its local addresses, the
            # library's mirror, addresses and block sizes
            plans = fast._plans(False)
            by_dev = [[p for p in plans if p["dev"] == d] for d in (0, 1)]
            plans_ok = (len(by_dev[0]) == len(by_dev[1]) >= 1
                        and by_dev[0][0]["dev_raw"] != by_dev[1][0]["dev_raw"]
                        and by_dev[0][0]["mirror_raw"] == by_dev[1][0]["mirror_raw"]
                        and by_dev[0][0]["launches"][1] is not by_dev[1][0]["launches"][1]
                        and all(p["n_stored_at"] == fast._stored.ctypes.data for p in plans))
            mismatch, ran, overflow, predicted = [], 0, False, 0
            # (ni, lists, part of the j-range): the largest block first (the buffers
            # grow), then shapes again, whose plans the engine has (it predicts itself)
            steps = [(130, 0, 0), (1, 0, 0), (2, 0, 0), (1, 0, 0), (5, 1, 0), (1, 0, 0),
                     (16, 0, 1), (1, 0, 0), (5, 1, 0), (16, 0, 1), (2, 0, 0), (1, 0, 0),
                     (3, 1, 1)]
            for k, (ni, lists, part) in enumerate(steps):
                sel = np.sort(rng.choice(n, ni, replace=False))  # addresses
                t = 1e-3 * (k + 1)
                tj[sel] = t - 1e-3
                kw = {"a": a[addr[sel]] if order >= 6 else None,
                      "jerk": jerk[addr[sel]] if order >= 8 else None}
                if lists:
                    kw["h2"] = np.full(ni, 0.06)
                if part:
                    kw["nj"] = 600
                before = fast._engine.launches if fast._engine is not None else 0
                res = []
                for lib in (fast, slow):
                    # the block's j-particles stored again, moved on in time
                    lib.set_j_particles(sel, ids[addr[sel]], t - 1e-3, m[addr[sel]],
                                        x[addr[sel]], v[addr[sel]], a=a[addr[sel]],
                                        jerk=jerk[addr[sel]])
                    if lib is fast and fast._engine is not None:
                        fast._engine.ran = False
                    lib.set_time(t)
                    xi, vi, ii = x[addr[sel]], v[addr[sel]], ids[addr[sel]]
                    if k % 3 == 2:
                        res.append(lib.start_compute(xi, vi, ii, EPS2, **kw).result())
                    else:
                        res.append(lib.compute(xi, vi, ii, EPS2, **kw))
                ran += bool(fast._engine is not None and fast._engine.ran)
                # a prediction and a force per device (host memory: nothing else)
                predicted += fast._engine.launches - before >= 4
                overflow |= bool(res[0].overflow)
                if (bad := same(*res, tol)) is not None:
                    mismatch.append((k, bad))
            # the last step against the float64 reference (every address, no lists)
            sel = np.sort(rng.choice(n, 9, replace=False))
            fast.set_time(0.02)
            kw = {"a": a[addr[sel]] if order >= 6 else None,
                  "jerk": jerk[addr[sel]] if order >= 8 else None}
            fast._engine.ran = False
            f = fast.compute(x[addr[sel]], v[addr[sel]], ids[addr[sel]], EPS2, **kw)
            last_ran = bool(fast._engine.ran)
            xp, vp, ap = ref.predict(0.02, tj, x[addr], v[addr], a[addr], jerk[addr])
            r = ref.forces(x[addr[sel]], v[addr[sel]], ids[addr[sel]], xp, vp, m[addr],
                           ids[addr], EPS2, order=order, ai=kw["a"],
                           aj=ap if order >= 6 else None, ji=kw["jerk"],
                           jj=jerk[addr] if order >= 8 else None)
            err = max(float(np.abs(p - q).max() / np.abs(q).max())
                      for p, q in [(f.acc, r.acc), (f.pot, r.pot)]
                      + ([(f.jerk, r.jerk)] if order >= 4 else []))
            out[f"{order}-{prec}"] = {
                "ndev": fast.ndev, "plans": plans_ok, "mismatch": mismatch,
                "steps": len(steps), "ran": ran, "predicted": predicted,
                "overflow": overflow,
                "last_ran": last_ran, "err": err, "nn": bool((f.nn_index == r.nn_index).all()),
            }
            fast.close()
            slow.close()
    json.dump(out, sys.stdout)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("memory", ["auto", "device"])
def test_block_steps_on_two_devices_run_in_the_engine(memory):
    """Block steps on two devices (orders 2 to 8, both precisions; neighbour lists, part
    of the j-range, the asynchronous pair, j-particles stored between steps), on host
    memory and on device memory (``SAPPORO_NATIVE_MEMORY=device``): run by the native
    engine, every result that of one device (the sums to their precision's rounding, the
    nearest neighbours and the lists exact), and the last step within the float64
    reference's tolerance (``auto``: host memory on a CPU)."""
    res = _two_devices(ENGINE_SCRIPT, SAPPORO_NATIVE_MEMORY=memory)
    for key, r in res.items():
        assert r["ndev"] == 2 and r["plans"], key
        assert r["mismatch"] == [], (key, r["mismatch"])
        # every step in C, and on shapes planned before the devices' predictions too
        assert r["ran"] == r["steps"] and r["last_ran"], (key, r)
        assert r["predicted"] >= 3, (key, r)
        assert r["overflow"], key  # capacity 8: the merged counts went past it
        assert r["err"] <= (1e-4 if "double-single" in key else 1e-10), (key, r["err"])
        if "double-single" not in key:
            assert r["nn"], key


PROFILING_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import sapporo
    from sapporo import reference as ref

    x, v, m = ref.plummer(2000, seed=3)
    ids = np.arange(2000)
    out = {}
    for profiling in (True, False):
        with sapporo.Library(order=4, precision="double", backend="opencl", devices="all",
                             profiling=profiling) as lib:
            lib.set_j_particles(ids, ids, 0.0, m, x, v)
            lib.compute(x[:3], v[:3], ids[:3], 1e-4)
            ran = 0
            for k in range(5):
                lib.set_j_particles(ids[k:k + 3], ids[k:k + 3], 0.0, m[k:k + 3],
                                    x[k:k + 3] * 1.001, v[k:k + 3])
                lib.set_time(1e-3 * (k + 1))
                lib._engine.ran = False
                r = lib.compute(x[:40], v[:40], ids[:40], 1e-4, h2=np.full(40, 0.01))
                ran += lib._engine.ran
            out[str(profiling)] = {"ndev": lib.ndev, "ran": ran, "seconds": lib.kernel_seconds,
                                   "acc": r.acc.tolist(), "counts": r.neighbour_counts.tolist()}
    json.dump(out, sys.stdout)
    """
)


def test_two_devices_profiled_in_the_engine():
    """A library on two devices that profiles: its steps run in the engine, which times
    both devices' launches (kernel_seconds > 0), with the bits of one that does not."""
    res = _two_devices(PROFILING_SCRIPT)
    timed, plain = res["True"], res["False"]
    assert timed["ndev"] == plain["ndev"] == 2
    assert timed["ran"] == plain["ran"] == 5
    assert timed["seconds"] > 0.0 and plain["seconds"] == 0.0
    assert timed["acc"] == plain["acc"] and timed["counts"] == plain["counts"]


TINY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import sapporo
    from sapporo import reference as ref

    out = []
    x, v, m = ref.plummer(8, seed=1)
    xi, vi, idi = np.array([[0.3, 0.1, -0.2]]), np.zeros((1, 3)), np.array([99])
    for n in (1, 2, 3):
        with sapporo.Library(order=4, precision="double", devices="all") as lib:
            lib.set_j_particles(np.arange(n), np.arange(n), 0.0, m[:n], x[:n], v[:n])
            for nj in range(1, n + 1):
                r = lib.compute(xi, vi, idi, 1e-4, nj=nj, h2=np.array([10.0]))
                want = ref.forces(xi, vi, idi, x[:nj], v[:nj], m[:nj], np.arange(nj), 1e-4,
                                  order=4, h2=10.0)
                out.append({"n": n, "nj": nj, "ndev": lib.ndev, "ran": lib._engine.ran,
                            "err": float(np.abs(r.acc - want.acc).max()
                                         / np.abs(want.acc).max()),
                            "list": r.neighbours(0).tolist(),
                            "count": int(r.neighbour_counts[0])})
    json.dump(out, sys.stdout)
    """
)


@pytest.mark.parametrize("memory", ["auto", "device"])
def test_fewer_addresses_than_devices(memory):
    """One, two or three j-particles on two devices, all of them or fewer (nj): a device
    without an address adds nothing; the engine computes every call, as the reference."""
    for r in _two_devices(TINY_SCRIPT, SAPPORO_NATIVE_MEMORY=memory):
        assert r["ndev"] == 2 and r["ran"], r
        assert r["err"] <= 1e-12, r
        assert r["count"] == r["nj"] and r["list"] == list(range(r["nj"])), r
