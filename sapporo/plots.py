"""PNG plots of a ``sapporo run``: energy error, Lagrangian radii, active-block sizes.

Matplotlib (the ``plot`` extra) is imported lazily with the Agg backend; :func:`available`
tells whether it is installed. The diagnostics come from ``OUT/diagnostics.csv`` as
written by ``sapporo run`` (see :func:`read_diagnostics`).

``python -m sapporo.plots compare OUT.png RUN_DIR [RUN_DIR ...]`` overlays the energy
error of several runs, ``python -m sapporo.plots sweep OUT.png RUN_DIR ...`` plots the final
energy error against eta (the figures of ``docs/reproductions.md``).
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SapporoError

__all__ = [
    "available",
    "compare_runs",
    "plot_energy_error",
    "plot_lagrangian_radii",
    "plot_n_active",
    "plot_run",
    "read_diagnostics",
    "sweep_plot",
]

log = logging.getLogger(__name__)


def available() -> bool:
    """Whether matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise SapporoError("plots need matplotlib: pip install 'sapporo-nbody[plot]'") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def read_diagnostics(path: str | Path) -> dict[str, np.ndarray]:
    """Read a ``diagnostics.csv`` into a dict of float arrays, one per column."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return {}
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def plot_energy_error(times: np.ndarray, errors: np.ndarray, path: str | Path,
                      title: str = "") -> Path:
    """``|E(t) - E0| / |E0|`` against time, logarithmic, to a PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    err = np.where(np.asarray(errors) > 0, errors, np.nan)
    ax.semilogy(times, err, "o-", ms=3)
    ax.set_xlabel("time [N-body units]")
    ax.set_ylabel("|E - E0| / |E0|")
    ax.set_title(title or "relative energy error")
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def plot_lagrangian_radii(times: np.ndarray, radii: dict[str, np.ndarray], path: str | Path,
                          title: str = "") -> Path:
    """Lagrangian radii (one curve per mass fraction label) against time, to a PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, r in radii.items():
        ax.semilogy(times, r, "-", label=label)
    ax.set_xlabel("time [N-body units]")
    ax.set_ylabel("radius [N-body units]")
    ax.set_title(title or "Lagrangian radii")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def plot_n_active(n_active_counts: np.ndarray, path: str | Path, title: str = "") -> Path:
    """Histogram of the number of active particles per block step (log2 bins), to a PNG."""
    plt = _pyplot()
    counts = np.asarray(n_active_counts, dtype=np.int64)
    sizes = np.flatnonzero(counts)
    fig, ax = plt.subplots(figsize=(6, 4))
    if sizes.size:
        top = int(np.ceil(np.log2(sizes.max() + 1)))
        edges = 2.0 ** np.arange(0, top + 1)
        if edges[-1] <= sizes.max():
            edges = np.append(edges, edges[-1] * 2)
        ax.hist(sizes, bins=edges, weights=counts[sizes], edgecolor="black")
        ax.set_xscale("log", base=2)
    ax.set_xlabel("active particles per block step")
    ax.set_ylabel("block steps")
    ax.set_title(title or "active block sizes")
    return _save(fig, path)


def plot_run(out: str | Path, diagnostics: dict[str, np.ndarray],
             n_active_counts: np.ndarray, title: str = "") -> list[Path]:
    """The three standard plots of a run into directory ``out``; returns their paths."""
    out = Path(out)
    t = diagnostics["time"]
    paths = [plot_energy_error(t, diagnostics["energy_error"], out / "energy_error.png", title)]
    radii = {k.replace("r_lagr_", "") + " %": v for k, v in diagnostics.items()
             if k.startswith("r_lagr_")}
    paths.append(plot_lagrangian_radii(t, radii, out / "lagrangian_radii.png", title))
    paths.append(plot_n_active(n_active_counts, out / "n_active.png", title))
    return paths


def compare_runs(png: str | Path, runs: Sequence[str | Path], labels: Sequence[str] | None = None,
                 title: str = "") -> Path:
    """Overlay the energy error against time of several run directories, to a PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, run in enumerate(runs):
        run = Path(run)
        d = read_diagnostics(run / "diagnostics.csv")
        if labels is not None:
            label = labels[k]
        else:
            s = json.loads((run / "summary.json").read_text())
            label = f"N = {s['n']}, {s['precision']}, order {s['order']}"
        err = np.where(d["energy_error"] > 0, d["energy_error"], np.nan)
        ax.semilogy(d["time"], err, "o-", ms=3, label=label)
    ax.set_xlabel("time [N-body units]")
    ax.set_ylabel("|E - E0| / |E0|")
    ax.set_title(title or "relative energy error")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, png)


def sweep_plot(png: str | Path, runs: Sequence[str | Path], x_key: str = "eta",
               y_key: str = "energy_error", title: str = "") -> Path:
    """``summary.json[y_key]`` against ``summary.json[x_key]`` of several runs, one curve per
    (precision, order), log-log, to a PNG."""
    plt = _pyplot()
    groups: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        s = json.loads((Path(run) / "summary.json").read_text())
        key = f"N = {s['n']}, {s['precision']}, order {s['order']}"
        groups.setdefault(key, []).append((float(s[x_key]), float(s[y_key])))
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, pts in sorted(groups.items()):
        pts.sort()
        ax.loglog([p[0] for p in pts], [p[1] for p in pts], "o-", label=key)
    labels = {"energy_error": "|E - E0| / |E0| at the end", "eta": "eta",
              "max_energy_error": "max |E - E0| / |E0|"}
    ax.set_xlabel(labels.get(x_key, x_key))
    ax.set_ylabel(labels.get(y_key, y_key.replace("_", " ")))
    ax.set_title(title or f"{y_key.replace('_', ' ')} against {x_key}")
    ax.legend(loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, png)


_USAGE = (
    "usage: python -m sapporo.plots compare OUT.png RUN_DIR [RUN_DIR ...]\n"
    "       python -m sapporo.plots sweep OUT.png RUN_DIR [RUN_DIR ...]\n"
)


def _main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("compare", "sweep"):
        sys.stderr.write(_USAGE)
        return 2
    if argv[0] == "compare":
        compare_runs(argv[1], argv[2:])
    else:
        sweep_plot(argv[1], argv[2:])
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main(sys.argv[1:]))
