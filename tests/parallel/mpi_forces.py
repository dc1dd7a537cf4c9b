"""Run under mpiexec by test_parallel.py: ParallelLibrary against one process and the float64
reference, for several grids, orders, precisions and call patterns.

usage: mpiexec -n P python mpi_forces.py OUT.json

Rank 0 writes, per case, the largest errors (against the one-process Library and the
reference, relative to the reference's error scale), whether every rank got bitwise the
same result, and whether the neighbour data equals one process's.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from sapporo import Library
from sapporo.parallel import ParallelLibrary
from sapporo.reference import forces, plummer, relative_vector_error

WORLD = MPI.COMM_WORLD


def same_everywhere(f) -> bool:
    """Whether every rank holds bitwise the same result ``f``."""
    parts = [f.acc, f.pot, f.nn_index, f.nn_r2]
    parts += [q for q in (f.jerk, f.snap, f.crackle, f.neighbour_counts) if q is not None]
    blob = b"".join(np.ascontiguousarray(p).tobytes() for p in parts)
    if f.neighbour_counts is not None:
        blob += b"".join(f.neighbours(k).tobytes() for k in range(f.ni))
    every = WORLD.allgather(blob)
    return all(b == every[0] for b in every)


def case(name: str, rows: int | None, dec: str, order: int, precision: str, n: int, ni: int,
         h2: float | None = None, nb_capacity: int = 256, nj: int | None = None,
         shuffle: bool = False, twice: bool = False) -> dict:
    x, v, m = plummer(n, seed=3)
    rng = np.random.default_rng(5)
    acc = rng.normal(size=(n, 3))
    jrk = rng.normal(size=(n, 3))
    ids = np.arange(n) * 3 + 7  # ids unrelated to addresses
    addr = np.arange(n)
    order_addr = rng.permutation(n) if shuffle else addr
    sel = rng.choice(n, size=ni, replace=False) if ni < n else np.arange(n)
    kw = {"order": order, "precision": precision, "nb_capacity": nb_capacity}
    a_i = acc[sel] if order >= 6 else None
    j_i = jrk[sel] if order == 8 else None
    eps2 = 1e-4

    def run(lib) -> object:
        # stored in pieces, out of order when shuffled (the library must not care)
        for chunk in np.array_split(order_addr, 3):
            lib.set_j_particles(addr[chunk], ids[chunk], 0.0, m[chunk], x[chunk], v[chunk],
                                a=acc[chunk], jerk=jrk[chunk])
        lib.set_time(0.0)
        extra = {} if j_i is None else {"jerk": j_i}
        f = lib.compute(x[sel], v[sel], ids[sel], eps2, h2=h2, a=a_i, nj=nj, **extra)
        if twice:  # again through start_compute, after re-sending some particles
            lib.set_j_particles(addr[:5], ids[:5], 0.0, m[:5], x[:5], v[:5], a=acc[:5],
                                jerk=jrk[:5])
            f = lib.start_compute(x[sel], v[sel], ids[sel], eps2, h2=h2, a=a_i, nj=nj,
                                  **extra).result()
        return f

    with ParallelLibrary(decomposition=dec, rows=rows, **kw) as pl:
        f = run(pl)
        grid = [pl.rows, pl.cols]
        comm = pl.comm_seconds
        # the other way of combining a row (allgather of everything, or by slices), every
        # rank's partials sent as messages (none in the first exchange), on every rank
        pl.scatter_min_bytes = 0 if pl.scatter_min_bytes > 0 else 1 << 62
        pl._room = 0
        pl.reset()
        f_other = run(pl)
    out = {"name": name, "grid": grid, "identical": same_everywhere(f), "ni": f.ni,
           "comm_seconds": comm, "paths_same": bool(
               np.array_equal(f.acc, f_other.acc) and np.array_equal(f.pot, f_other.pot)
               and np.array_equal(f.nn_index, f_other.nn_index)
               and np.array_equal(f.nn_r2, f_other.nn_r2)
               and (f.jerk is None or np.array_equal(f.jerk, f_other.jerk))
               and (f.snap is None or np.array_equal(f.snap, f_other.snap))
               and (f.crackle is None or np.array_equal(f.crackle, f_other.crackle)))}
    if WORLD.rank != 0:
        return out
    with Library(**kw) as lib:
        g = run(lib)
    k = n if nj is None else nj
    ref = forces(x[sel], v[sel], ids[sel], x[:k], v[:k], m[:k], ids[:k], eps2, order=order,
                 ai=a_i, aj=acc[:k], h2=h2, ji=j_i, jj=jrk[:k] if order == 8 else None)
    err_one = {"acc": relative_vector_error(f.acc, g.acc, ref.acc_abs).max(),
               "pot": relative_vector_error(f.pot, g.pot, ref.pot_abs).max()}
    err_ref = {"acc": relative_vector_error(f.acc, ref.acc, ref.acc_abs).max(),
               "pot": relative_vector_error(f.pot, ref.pot, ref.pot_abs).max()}
    if order >= 4:
        err_one["jerk"] = relative_vector_error(f.jerk, g.jerk, ref.jerk_abs).max()
        err_ref["jerk"] = relative_vector_error(f.jerk, ref.jerk, ref.jerk_abs).max()
    if order >= 6:
        err_one["snap"] = relative_vector_error(f.snap, g.snap, ref.snap_abs).max()
        err_ref["snap"] = relative_vector_error(f.snap, ref.snap, ref.snap_abs).max()
    if order >= 8:
        err_one["crackle"] = relative_vector_error(f.crackle, g.crackle,
                                                   ref.crackle_abs).max()
        err_ref["crackle"] = relative_vector_error(f.crackle, ref.crackle,
                                                   ref.crackle_abs).max()
    out.update(err_one={q: float(e) for q, e in err_one.items()},
               err_ref={q: float(e) for q, e in err_ref.items()})
    out["nn_same"] = bool((f.nn_index == g.nn_index).all() and (f.nn_r2 == g.nn_r2).all())
    out["nn_ref"] = bool((f.nn_index == ref.nn_index).all())
    if h2 is not None:
        counts_ref = np.array([len(q) for q in ref.neighbours])
        out["counts_same"] = bool((f.neighbour_counts == g.neighbour_counts).all()
                                  and (f.neighbour_counts == counts_ref).all())
        out["overflow"] = [f.overflow, g.overflow]
        lists_ok = True
        for i in range(f.ni):
            mine = f.neighbours(i)
            if f.neighbour_counts[i] <= nb_capacity:  # complete: equal to the reference
                lists_ok &= np.array_equal(mine, ref.neighbours[i])
                lists_ok &= np.array_equal(mine, g.neighbours(i))
            else:  # overflow: capacity ids, ascending, all true neighbours
                lists_ok &= (mine.size == nb_capacity and bool(np.all(np.diff(mine) > 0))
                             and bool(np.isin(mine, ref.neighbours[i]).all()))
        out["lists_ok"] = bool(lists_ok)
        out["overflowing"] = int((f.neighbour_counts > nb_capacity).sum())
    return out


def main() -> None:
    size = WORLD.size
    results = []
    cases = [
        ("j double order 4 all", None, "j", 4, "double", 512, 512, 0.02),
        ("2d double order 4 all", None, "2d", 4, "double", 512, 512, 0.02),
        (f"{size}x1 double order 6 block", size, "j", 6, "double", 300, 37, None),
        ("j double order 6 nj", None, "j", 6, "double", 300, 40, 0.05, 256, 250, True, True),
        ("2d double order 8", None, "2d", 8, "double", 300, 50, 0.05),
        (f"{size}x1 one particle", size, "j", 4, "double", 200, 1, None),
        (f"{size}x1 three particles", size, "j", 4, "double", 200, 3, 0.05),
        ("auto order 2", None, "auto", 2, "double", 256, 64, 0.05),
        ("j overflow", None, "j", 4, "double", 256, 40, 0.5, 8),
        ("2d overflow", None, "2d", 4, "double", 256, 40, 0.5, 8),
        ("j double-single", None, "j", 4, "double-single", 512, 128, 0.02),
        ("2d double-single", None, "2d", 4, "double-single", 512, 128, None),
    ]
    for c in cases:
        results.append(case(*c))
    if WORLD.rank == 0:
        with open(sys.argv[1], "w") as fh:
            json.dump({"size": size, "cases": results}, fh, indent=1)


if __name__ == "__main__":
    main()
