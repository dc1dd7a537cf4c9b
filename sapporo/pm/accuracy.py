"""The point-mass accuracy check of the particle-mesh solver, and the table of docs/pm.md.

:func:`point_mass_errors` puts a unit point mass near the centre of an isolated mesh and
massless probes around it, and returns the largest radial (``|a_r - 1/r^2| r^2``) and
tangential (``|a_t| r^2``) errors over the probes and the mass's :data:`OFFSETS`.
``python -m sapporo.pm.accuracy`` prints the table of docs/pm.md.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import multigrid
from .mesh import ParticleMesh

log = logging.getLogger(__name__)

#: offsets of the point mass from the box centre, in cells (seed 1, uniform in [-1/2, 1/2)^3)
OFFSETS = np.random.default_rng(1).uniform(-0.5, 0.5, (4, 3))


def point_mass_errors(pm: ParticleMesh, r_min: float = 6.0, r_max: float = 12.0,
                      n_probes: int = 600, offsets: np.ndarray = OFFSETS,
                      seed: int = 0) -> dict[str, float]:
    """Force errors of a unit point mass on the isolated mesh ``pm`` (see the module notes):
    ``n_probes`` massless probes (radii in ``[r_min, r_max)`` cells, random directions from
    ``seed``) for the mass at each of ``offsets`` (cells from the box centre; the largest
    radius plus offset and margin must fit in half a box).

    Returns
    -------
    dict
        ``radial``, ``tangential``: the largest relative errors; ``radial_rms``,
        ``tangential_rms``: their rms over the probes and offsets.
    """
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(n_probes, 3))
    d /= np.linalg.norm(d, axis=1)[:, None]
    rc = rng.uniform(r_min, r_max, n_probes)
    radial, tangential = [], []
    for off in np.asarray(offsets, dtype=np.float64):
        c = off * pm.h
        res = pm.forces(np.vstack([c, c + (rc * pm.h)[:, None] * d]),
                        np.r_[1.0, np.zeros(n_probes)])
        a = res.acc[1:]
        exact = 1.0 / (rc * pm.h) ** 2
        ar = -(a * d).sum(axis=1)
        radial.append(np.abs(ar / exact - 1.0))
        tangential.append(np.linalg.norm(a + ar[:, None] * d, axis=1) / exact)
    er, et = np.concatenate(radial), np.concatenate(tangential)
    return {"radial": float(er.max()), "tangential": float(et.max()),
            "radial_rms": float(np.sqrt(np.mean(er**2))),
            "tangential_rms": float(np.sqrt(np.mean(et**2)))}


#: the settings of the docs/pm.md table: (solver, window, stencil, multigrid order, mg_tol)
SETTINGS: list[tuple[str, str, int, int, float]] = [
    ("fft", "cic", 2, 0, 0.0), ("fft", "cic", 4, 0, 0.0),
    ("fft", "tsc", 2, 0, 0.0), ("fft", "tsc", 4, 0, 0.0),
    ("multigrid", "cic", 2, 2, 1e-7), ("multigrid", "cic", 4, 2, 1e-7),
    ("multigrid", "tsc", 4, 2, 1e-7),
    ("multigrid", "cic", 4, 4, 1e-4), ("multigrid", "tsc", 2, 4, 1e-4),
    ("multigrid", "tsc", 4, 4, 1e-4), ("multigrid", "tsc", 4, 4, 1e-3),
    ("multigrid", "tsc", 4, 4, 1e-7),
]


def _timed_forces(pm: ParticleMesh, x: np.ndarray, m: np.ndarray,
                  cold: bool) -> tuple[float, float, int]:
    """Seconds of one force call and of its Poisson stage, and the V-cycles."""
    if cold:
        pm._phi_fresh = True  # multigrid starts from zero
    t0 = time.perf_counter()
    res = pm.forces(x, m)
    return time.perf_counter() - t0, res.timings["poisson"], int(res.info.get("cycles", 0))


def table(grid: int = 64, settings: Sequence[tuple[str, str, int, int, float]] = SETTINGS,
          n: int = 262144, repeats: int = 3, backend: str | None = None) -> list[dict[str, Any]]:
    """Accuracy and cost of each setting on an isolated ``grid``^3 mesh of box 1.

    Cost: a Plummer sphere of ``n`` bodies (:func:`sapporo.reference.plummer` scaled by
    1/20, scale radius 0.03 of the box, truncated at 0.4), seconds per
    force call and per Poisson solve, from zero ("cold") and from the previous potential
    after a small move ("warm", as in a leapfrog step), the best of ``repeats``, the
    settings interleaved in each round.
    """
    from .. import reference

    x, _, m = reference.plummer(n, seed=3)
    x = x[np.linalg.norm(x, axis=1) < 8.0] / 20.0
    m = m[: len(x)]
    saved = multigrid.ORDER
    rows: list[dict[str, Any]] = []
    meshes = []
    try:
        for solver, window, stencil, order, tol in settings:
            kw: dict[str, Any] = {"mg_tol": tol} if solver == "multigrid" else {}
            pm = ParticleMesh(grid, 1.0, window=window, solver=solver, stencil=stencil,
                              backend=backend, **kw)
            meshes.append(pm)
            multigrid.ORDER = order or saved
            err = point_mass_errors(pm)
            rows.append({"solver": solver, "window": window, "stencil": stencil,
                         "order": order, "mg_tol": tol, **err,
                         "cold": np.inf, "cold_poisson": np.inf, "warm": np.inf,
                         "warm_poisson": np.inf})
        for _ in range(repeats):
            for row, pm in zip(rows, meshes, strict=True):
                multigrid.ORDER = row["order"] or saved
                pm.forces(x + 2e-4, m)  # untimed: brings this mesh's buffers back to cache
                for kind, xs in (("cold", x), ("warm", x + 1e-4)):
                    t, tp, cyc = _timed_forces(pm, xs, m, kind == "cold")
                    row[kind] = min(row[kind], t)
                    row[kind + "_poisson"] = min(row[kind + "_poisson"], tp)
                    row[kind + "_cycles"] = cyc
    finally:
        multigrid.ORDER = saved
        for pm in meshes:
            pm.close()
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`table` as a Markdown table."""
    out = ["| solver | window | gradient | Laplacian, mg_tol | radial max / rms | "
           "tangential max / rms | force call, cold / warm (ms) | Poisson, cold / warm (ms) "
           "| V-cycles, cold / warm |", "|---" * 9 + "|"]
    for r in rows:
        mg = (f"{ {2: '2nd', 4: '4th'}[r['order']]}-order, {r['mg_tol']:g}"
              if r["solver"] == "multigrid" else "exact 1/r")
        cyc = (f"{r['cold_cycles']} / {r['warm_cycles']}" if r["solver"] == "multigrid"
               else "")
        out.append(
            f"| {r['solver']} | {r['window'].upper()} | {r['stencil']}-point | {mg} | "
            f"{100 * r['radial']:.2f}% / {100 * r['radial_rms']:.2f}% | "
            f"{100 * r['tangential']:.2f}% / {100 * r['tangential_rms']:.2f}% | "
            f"{1e3 * r['cold']:.0f} / {1e3 * r['warm']:.0f} | "
            f"{1e3 * r['cold_poisson']:.1f} / {1e3 * r['warm_poisson']:.1f} | {cyc} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m sapporo.pm.accuracy [--grid G] [--n N] [--backend B]``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--grid", type=int, default=64)
    p.add_argument("--n", type=int, default=262144)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--backend", default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = table(args.grid, n=args.n, repeats=args.repeats, backend=args.backend)
    log.info("%s", markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
