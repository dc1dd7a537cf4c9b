"""Energy error against force evaluations for the 4th-, 6th- and 8th-order Hermite schemes.

Two problems, both in double precision on the sapporo library:

* ``kepler``: an equal-mass binary on an e = 0.9 orbit (semi-major axis 1, G M = 1) for two
  orbital periods, with a shared fixed step dt = 2^-k (``dt_min = dt_max``); force
  evaluations = particle steps.
* ``cluster``: a softened Plummer sphere of N = 64 (eps = 1e-2, seed 3) for 1/2 N-body time
  unit in block steps, sweeping the step parameter eta (Aarseth's criterion for 4th order,
  the generalised one for 6th and 8th); force evaluations = particle steps.

Writes ``docs/figures/order8_energy.png`` and ``order8_energy.csv`` beside it::

    python tune/order8_energy.py [--backend opencl] [--out docs/figures]
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import numpy as np

from sapporo.nbody.hermite import HermiteIntegrator
from sapporo.reference import plummer

KEPLER_E = 0.9
KEPLER_STEPS = {4: range(6, 14), 6: range(5, 12), 8: range(5, 12)}  # dt = 2^-k
CLUSTER_ETA = {
    4: [0.003, 0.01, 0.03, 0.1],
    6: [0.05, 0.1, 0.2, 0.4, 0.8],
    8: [0.2, 0.3, 0.4, 0.8, 1.2],
}


def kepler(backend: str, order: int, k: int) -> tuple[int, float]:
    """(force evaluations, |dE/E|) of two periods of the binary with dt = 2^-k."""
    e = KEPLER_E
    vp = math.sqrt((1.0 + e) / (1.0 - e))
    x = np.array([[-(1.0 - e) / 2, 0.0, 0.0], [(1.0 - e) / 2, 0.0, 0.0]])
    v = np.array([[0.0, -vp / 2, 0.0], [0.0, vp / 2, 0.0]])
    dt = 2.0**-k
    with HermiteIntegrator({"backend": backend, "precision": "double"}, x, v, [0.5, 0.5],
                           order=order, dt_min=dt, dt_max=dt, force_noise=0.0) as it:
        e0 = it.energy()
        it.evolve(round(4 * math.pi / dt) * dt)
        return it.steps, abs(it.energy() - e0) / abs(e0)


def cluster(backend: str, order: int, eta: float) -> tuple[int, float]:
    """(force evaluations, |dE/E|) of the Plummer sphere to t = 1/2."""
    x, v, m = plummer(64, seed=3)
    crit = "aarseth" if order == 4 else "generalised"
    with HermiteIntegrator({"backend": backend, "precision": "double"}, x, v, m, order=order,
                           eta=eta, eps2=1e-4, criterion=crit) as it:
        e0 = it.energy()
        it.evolve(0.5)
        return it.steps, abs(it.energy() - e0) / abs(e0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None)
    ap.add_argument("--out", default="docs/figures")
    args = ap.parse_args()
    out = Path(args.out)
    rows = []
    for order in (4, 6, 8):
        for k in KEPLER_STEPS[order]:
            evals, err = kepler(args.backend, order, k)
            rows.append(("kepler", order, f"dt=2^-{k}", evals, err))
            print(rows[-1])
        for eta in CLUSTER_ETA[order]:
            evals, err = cluster(args.backend, order, eta)
            rows.append(("cluster", order, f"eta={eta}", evals, err))
            print(rows[-1])
    with open(out / "order8_energy.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["problem", "order", "parameter", "force_evaluations", "energy_error"])
        for r in rows:
            w.writerow([*r[:4], f"{r[4]:.3e}"])

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    titles = {"kepler": "binary, e = 0.9, two periods (shared steps)",
              "cluster": "Plummer N = 64, t = 1/2 (block steps)"}
    for ax, problem in zip(axes, ("kepler", "cluster"), strict=True):
        for order, style in ((4, "o-"), (6, "s-"), (8, "^-")):
            pts = [(r[3], max(r[4], 1e-17)) for r in rows if r[0] == problem and r[1] == order]
            ax.loglog(*zip(*pts, strict=True), style, label=f"order {order}")
        ax.set_xlabel("force evaluations (particle steps)")
        ax.set_ylabel("|dE / E|")
        ax.set_title(titles[problem], fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "order8_energy.png", dpi=110)
    print("wrote", out / "order8_energy.png")


if __name__ == "__main__":
    main()
