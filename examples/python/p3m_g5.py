"""A P^3M step with Phantom-GRAPE's split: the mesh's long range, the GRAPE-5 calls' short range.

Run from anywhere once sapporo is installed (``pip install -e .`` in the repository), with a
C compiler for the C API (``sapporo capi build`` runs on first use):

    python examples/python/p3m_g5.py                 # N = 4096, 32^3 mesh, a = 4 cells
    python examples/python/p3m_g5.py --n 2000 --cells 3

Gravity is split with S2 clouds of diameter ``a`` (as Phantom-GRAPE's PG5/table splits it
for TreePM and P^3M codes). The long-range part comes from ``sapporo.pm.ParticleMesh``
(``split_shape="s2"``), the short-range part from the GRAPE-5 calls a PG5/table program
makes (``g5_set_cutoff_scale``, ``g5_set_xmj``, ``g5_calculate_force_on_x``, here through
``ctypes`` from the library ``sapporo capi build`` made; the potential comes back
positive, as PG5's). Their sum is compared with the float64 direct sum, and one
kick-drift-kick leapfrog step shows that the total momentum stays zero to the forces'
rounding (both parts are pair forces).
"""

# ruff: noqa: T201  (an example prints its results)

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
from pathlib import Path

import numpy as np

from sapporo import reference
from sapporo.pm import ParticleMesh

BOX = 8.0


def grape5() -> ctypes.CDLL:
    """The GRAPE-5 library of ``sapporo capi flags`` (built on first use), its calls typed."""
    flags = subprocess.run([sys.executable, "-m", "sapporo.cli", "capi", "flags"],
                           capture_output=True, text=True, check=True).stdout.split()
    lib = ctypes.CDLL(str(Path(next(f[2:] for f in flags if f.startswith("-L"))) / "libg5.so"))
    vec = np.ctypeslib.ndpointer(dtype=np.float64, flags="C_CONTIGUOUS")
    lib.g5_set_cutoff_scale.argtypes = [ctypes.c_double]
    lib.g5_set_eps_to_all.argtypes = [ctypes.c_double]
    lib.g5_set_xmj.argtypes = [ctypes.c_int, ctypes.c_int, vec, vec]
    lib.g5_set_n.argtypes = [ctypes.c_int]
    lib.g5_calculate_force_on_x.argtypes = [vec, vec, vec, ctypes.c_int]
    return lib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="particles (default 4096)")
    parser.add_argument("--grid", type=int, default=32, help="mesh cells per side (32)")
    parser.add_argument("--cells", type=float, default=4.0,
                        help="the split diameter a in mesh cells (default 4)")
    args = parser.parse_args()

    x, v, m = reference.plummer(args.n, seed=5)  # N-body units, in a box of 8
    inside = np.linalg.norm(x, axis=1) < 3.0
    x, v, m = (np.ascontiguousarray(q[inside]) for q in (x, v, m))
    v -= (m[:, None] * v).sum(axis=0) / m.sum()  # at rest again after the cut
    n, a, dt = len(x), args.cells * BOX / args.grid, 1.0 / 256

    g5 = grape5()
    if g5.g5_set_cutoff_scale(a) != 0 or g5.g5_open() != 0:
        sys.exit("the GRAPE-5 library could not be opened (see its message above)")
    g5.g5_set_eps_to_all(0.0)
    with ParticleMesh(args.grid, BOX, split=a, split_shape="s2", deconvolve=True) as mesh:

        def forces(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            near, p = np.zeros((n, 3)), np.zeros(n)
            g5.g5_set_xmj(0, n, pos, m)  # every particle is a j-particle ...
            g5.g5_set_n(n)
            if g5.g5_calculate_force_on_x(pos, near, p, n) != 0:  # ... and an i-particle
                sys.exit("the GRAPE-5 force call failed (see its message above)")
            far = mesh.forces(pos, m)
            return far.acc + near, far.pot - p  # PG5's potential is positive

        acc, pot = forces(x)
        ref = reference.forces(x, None, np.arange(n), x, None, m, np.arange(n), 0.0, order=2)
        err = np.linalg.norm(acc - ref.acc, axis=1) / np.linalg.norm(ref.acc, axis=1)
        perr = np.abs(pot - ref.pot) / np.abs(ref.pot)
        print(f"{n} bodies, {args.grid}^3 mesh, a = {args.cells:g} cells = {a:.4g}")
        print(f"force against the direct sum: median {np.median(err):.2e}, largest "
              f"{err.max():.2e}; potential median {np.median(perr):.2e}")
        # one kick-drift-kick step
        v = v + 0.5 * dt * acc
        x = np.ascontiguousarray(x + dt * v)
        acc, _ = forces(x)
        v = v + 0.5 * dt * acc
    g5.g5_close()
    momentum = np.abs((m[:, None] * v).sum(axis=0)).max()
    print(f"after one step of {dt:g}: total momentum {momentum:.1e} "
          f"(of sum m |v| = {(m * np.linalg.norm(v, axis=1)).sum():.3g})")


if __name__ == "__main__":
    main()
