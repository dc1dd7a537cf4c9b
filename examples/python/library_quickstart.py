"""Forces on a Plummer sphere with the sapporo library, checked against the float64 reference.

Run from anywhere once sapporo is installed (``pip install -e .`` in the repository):

    python examples/python/library_quickstart.py            # N = 4096, 256 i-particles
    python examples/python/library_quickstart.py --n 1024 --precision double

The j-particles (all N) are stored once; the forces on the first ``--n-active`` particles
are computed on the device and compared with ``sapporo.reference.forces``, an independent
float64 NumPy model of the same sum. The largest relative errors are printed.
"""

# ruff: noqa: T201  (an example prints its results)

from __future__ import annotations

import argparse

import numpy as np

import sapporo
from sapporo import reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096, help="particles (default 4096)")
    parser.add_argument("--n-active", type=int, default=256,
                        help="i-particles whose force is computed (default 256)")
    parser.add_argument("--precision", default="double-single",
                        help="double-single (default) or double")
    args = parser.parse_args()

    x, v, m = reference.plummer(args.n, seed=1)  # N-body units: G = 1, M = 1, E ~ -1/4
    ids = np.arange(args.n)
    ni = min(args.n_active, args.n)
    eps2, h2 = 1e-4, 0.01  # softening squared; neighbour radius squared

    with sapporo.Library(order=4, precision=args.precision) as lib:
        print(f"device: {lib.device_name}")
        lib.set_j_particles(ids, ids, 0.0, m, x, v)  # addresses, ids, times, masses, x, v
        lib.set_time(0.0)                             # predict the j-particles to t = 0
        f = lib.compute(x[:ni], v[:ni], ids[:ni], eps2=eps2, h2=h2)

    ref = reference.forces(x[:ni], v[:ni], ids[:ni], x, v, m, ids, eps2, order=4, h2=h2)
    acc_err = (np.abs(f.acc - ref.acc).max(axis=1) / ref.acc_abs).max()
    jerk_err = (np.abs(f.jerk - ref.jerk).max(axis=1) / ref.jerk_abs).max()
    pot_err = (np.abs(f.pot - ref.pot) / np.abs(ref.pot)).max()
    same_nn = np.mean(f.nn_index == ref.nn_index)
    print(f"{ni} i-particles against {args.n} j-particles, {args.precision}")
    print(f"particle 0: acc {f.acc[0]}, pot {f.pot[0]:.6f}, nearest neighbour "
          f"{f.nn_index[0]}, {f.neighbour_counts[0]} neighbours within sqrt(h2)")
    print(f"max relative error: acc {acc_err:.2e}, jerk {jerk_err:.2e}, pot {pot_err:.2e}; "
          f"same nearest neighbour for {100 * same_nn:.1f} % of particles")


if __name__ == "__main__":
    main()
