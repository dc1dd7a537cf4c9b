"""PNG plots of ``sapporo run`` (energy error, Lagrangian radii, active-block sizes),
``sapporo bench`` (:func:`plot_bench`) and ``sapporo pm``, with matplotlib (imported lazily,
Agg backend, its warnings kept out of the output; :func:`available` says whether it is
installed).

``python -m sapporo.perf.plots compare OUT.png RUN_DIR [RUN_DIR ...]`` overlays the energy
error of several runs, ``... sweep OUT.png RUN_DIR ...`` plots the final energy error against
eta (the figures of ``docs/reproductions.md``).
"""

from __future__ import annotations

import csv
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sapporo.errors import SapporoError
from sapporo.nbody.fileio import replacing
from sapporo.summary import read_summary

if TYPE_CHECKING:  # pragma: no cover
    from sapporo.perf.report import BenchReport

#: The figures of :func:`plot_bench`.
PLOT_NAMES = ("bench-nactive.png", "bench-nxn.png", "bench-orders.png")

__all__ = ["available", "compare_runs", "plot_density", "plot_energy_error",
           "plot_lagrangian_radii", "plot_bench", "plot_n_active", "plot_run", "read_diagnostics",
           "sweep_plot"]


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
        raise SapporoError("plots need matplotlib: pip install matplotlib") from exc
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


def _save(fig: Any, path: str | Path, dpi: int = 110) -> Path:
    """Lay out, write (under a temporary name, then renamed) and close ``fig``, without
    passing matplotlib's warnings on; a failed write leaves no partial file and raises
    :class:`OSError` naming ``path``."""
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        with replacing(path) as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fig.tight_layout()
            fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    return path


def _has_data(values: np.ndarray) -> bool:
    return bool(np.any(np.isfinite(np.asarray(values, dtype=np.float64))))


def plot_energy_error(times: np.ndarray, errors: np.ndarray, path: str | Path,
                      title: str = "") -> Path:
    """``|E(t) - E0| / |E0|`` against time, logarithmic, to a PNG."""
    fig, ax = _pyplot().subplots(figsize=(6, 4))
    err = np.where(np.asarray(errors) > 0, errors, np.nan)
    ax.plot(times, err, "o-", ms=3)
    _time_axes(ax, "|E - E0| / |E0|", title or "relative energy error", _has_data(err))
    return _save(fig, path)


def plot_lagrangian_radii(times: np.ndarray, radii: dict[str, np.ndarray], path: str | Path,
                          title: str = "") -> Path:
    """Lagrangian radii (one curve per label, e.g. ``"10 % of mass"``) against time, to a PNG."""
    fig, ax = _pyplot().subplots(figsize=(6, 4))
    for label, r in radii.items():
        ax.plot(times, r, "-", label=label)
    _time_axes(ax, "radius [N-body units]", title or "Lagrangian radii",
               any(_has_data(np.where(np.asarray(r) > 0, r, np.nan)) for r in radii.values()))
    if radii:
        ax.legend(title="radius enclosing")
    return _save(fig, path)


def _time_axes(ax: Any, ylabel: str, title: str, log: bool) -> None:
    """Labels, title and grid of a plot against time; a log y axis when ``log`` (one with
    nothing positive on it only warns)."""
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("time [N-body units]")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def plot_density(density: np.ndarray, box: float, path: str | Path) -> Path:
    """A mesh density (G, G, G) of a box of side ``box`` projected along z, logarithmic, to
    a PNG (``sapporo pm``)."""
    fig, ax = _pyplot().subplots(figsize=(5, 4.4))
    proj = density.sum(axis=2).T
    floor = proj[proj > 0].min() if (proj > 0).any() else 1.0
    im = ax.imshow(np.log10(np.maximum(proj, floor)), origin="lower", cmap="magma",
                   extent=(-box / 2, box / 2, -box / 2, box / 2))
    fig.colorbar(im, ax=ax, label="log10 projected mesh density")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title("density projected along z (final)")
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
    """The three standard plots of a run into directory ``out``; returns their paths.
    ``title`` names the run; each plot puts what it shows above it."""
    out = Path(out)
    t = diagnostics["time"]
    radii = {k.replace("r_lagr_", "") + " % of mass": v for k, v in diagnostics.items()
             if k.startswith("r_lagr_")}
    return [plot_energy_error(t, diagnostics["energy_error"], out / "energy_error.png",
                              _titled("relative energy error", title)),
            plot_lagrangian_radii(t, radii, out / "lagrangian_radii.png",
                                  _titled("Lagrangian radii", title)),
            plot_n_active(n_active_counts, out / "n_active.png",
                          _titled("active block sizes", title))]


def _titled(what: str, run: str) -> str:
    return f"{what}\n{run}" if run else what


def run_labels(runs: Sequence[str | Path]) -> list[str]:
    """Distinct legend labels for run folders: what tells them apart in their summaries.

    The fields that differ between the runs (N, order, precision, criterion, eta, eps, seed,
    backend, device) are named; runs that agree on all of them are told apart by folder.
    """
    keys = ("n", "order", "precision", "criterion", "eta", "eps", "seed", "backend", "device")
    names = {"n": "N", "eta": "eta", "eps": "eps", "seed": "seed", "order": "order"}
    summaries = []
    for run in runs:
        try:
            summaries.append(read_summary(run))
        except SapporoError:
            summaries.append({})
    differ = [k for k in keys if len({json.dumps(s.get(k)) for s in summaries}) > 1]
    if not differ:
        differ = [k for k in ("n", "order", "precision") if summaries[0].get(k) is not None]
    labels = []
    for s in summaries:
        parts = []
        for k in differ:
            v = s.get(k)
            if v is None:
                continue
            text = f"{v:g}" if isinstance(v, float) else str(v)
            parts.append(f"{names[k]} {text}" if k in names else text)
        labels.append(", ".join(parts))
    if len(set(labels)) < len(labels):
        labels = [f"{Path(r).name}: {lab}" if lab else Path(r).name
                  for r, lab in zip(runs, labels, strict=True)]
    return labels


def compare_runs(png: str | Path, runs: Sequence[str | Path], labels: Sequence[str] | None = None,
                 title: str = "") -> Path:
    """Overlay the energy error against time of several run directories, to a PNG."""
    fig, ax = _pyplot().subplots(figsize=(6, 4))
    labels = list(labels) if labels is not None else run_labels(runs)
    if len(labels) != len(runs):
        raise SapporoError(f"{len(labels)} labels for {len(runs)} runs")
    positive = False
    for run, label in zip(runs, labels, strict=True):
        d = read_diagnostics(Path(run) / "diagnostics.csv")
        err = np.where(d["energy_error"] > 0, d["energy_error"], np.nan)
        positive = positive or _has_data(err)
        ax.plot(d["time"], err, "o-", ms=3, label=label)
    _time_axes(ax, "|E - E0| / |E0|", title or "relative energy error", positive)
    ax.legend()
    return _save(fig, png)


def sweep_plot(png: str | Path, runs: Sequence[str | Path], x_key: str = "eta",
               y_key: str = "energy_error", title: str = "") -> Path:
    """``summary.json[y_key]`` against ``summary.json[x_key]`` of several runs, one curve per
    (precision, order), log-log, to a PNG."""
    plt = _pyplot()
    groups: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        s = read_summary(run)
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


_COLORS = {2: "tab:green", 4: "tab:blue", 6: "tab:red"}
_STYLES = {"double-single": "-", "double": "--"}
_MARKERS = {"double-single": "o", "double": "s"}


def plot_bench(report: BenchReport, out_dir: str | Path) -> list[Path]:
    """The PNG figures of ``sapporo bench`` (Sapporo2-paper style) into ``out_dir``.

    Returns
    -------
    list of Path
        Empty, with a note in the report, when matplotlib is not installed.
    """
    if not available():
        report.notes.append("plots skipped: matplotlib is not installed")
        return []
    plt = _pyplot()
    out = Path(out_dir)
    title = f"{report.device} ({report.backend}), {report.date}"
    variants = [(o, p) for p in report.settings.precisions for o in report.settings.orders]
    written = []

    def curves(plot: Any, rows: list[Any], x: Any, y: Any, prefix: str = "") -> None:
        """One curve ``y`` against ``x`` of the rows of each order and precision."""
        for o, p in variants:
            rs = [r for r in rows if r.order == o and r.precision == p]
            if rs:
                plot([x(r) for r in rs], [y(r) for r in rs], _STYLES[p], marker=_MARKERS[p],
                     color=_COLORS[o], label=f"{prefix}order {o}, {p}")

    def full(r: Any) -> float:  # the time of a whole N x N evaluation
        return r.seconds * r.n / r.n_active

    # 1. time per call against N_active at fixed N
    sweep = report.select("n_active")
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    curves(ax.loglog, sweep, lambda r: r.n_active, lambda r: r.seconds)
    if sweep:
        ax.set_title(f"force call at N = {sweep[0].n}\n{title}", fontsize=9)
    ax.set_xlabel("N_active (i-particles per call)")
    ax.set_ylabel("wall time per call [s]")
    written.append(_save_bench(fig, [ax], out / PLOT_NAMES[0], legend=8))

    # 2. time of a full N x N evaluation against N, with an N^2 line
    nxn = report.select("nxn")
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    curves(ax.loglog, nxn, lambda r: r.n, full, "sapporo ")
    peer_marks = {"numpy-reference": "^", "pytreegrav": "v", "pytreegrav-target": "<",
                  "cupy": "D", "torch": "D"}
    for peer in report.peers():
        for o in [None, *report.settings.orders]:
            rs = [r for r in report.select("nxn", peer) if r.order == o]
            if rs:
                ax.loglog([r.n for r in rs], [full(r) for r in rs], ":",
                          marker=peer_marks.get(peer, "x"), color=_COLORS.get(o, "k"),
                          label=f"{peer}" + (f" order {o}" if o else ""))
    if nxn:
        ns = sorted({r.n for r in nxn})
        ref = min(nxn, key=lambda r: r.n)
        ax.loglog(ns, [full(ref) * (n / ref.n) ** 2 for n in ns], color="0.6", lw=1,
                  label="∝ N²")
    ax.set_title(f"N x N force evaluation (i-subsets scaled to N)\n{title}", fontsize=9)
    ax.set_xlabel("N")
    ax.set_ylabel("wall time [s]")
    written.append(_save_bench(fig, [ax], out / PLOT_NAMES[1], legend=7))

    # 3. 4th vs 6th order, double-single vs double: throughput against N
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
    curves(axes[0].semilogx, nxn, lambda r: r.n, lambda r: r.interactions_per_s / 1e9)
    curves(axes[1].semilogx, nxn, lambda r: r.n, lambda r: r.gflops)
    axes[0].set_ylabel("10⁹ interactions / s")
    axes[1].set_ylabel("GFLOP/s (38 / 60 / 97 flops per interaction)")
    for ax in axes:
        ax.set_xlabel("N")
        ax.set_ylim(bottom=0)
    fig.suptitle(f"orders and precisions, N x N\n{title}", fontsize=9)
    written.append(_save_bench(fig, axes, out / PLOT_NAMES[2], legend=8))
    return written


def _save_bench(fig: Any, axes: Any, path: Path, legend: int) -> Path:
    """Grid and legend on every axis, then the figure to ``path`` (120 dpi), closed."""
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=legend)
    return _save(fig, path, dpi=120)


_USAGE = ("usage: python -m sapporo.perf.plots compare OUT.png RUN_DIR [RUN_DIR ...]\n"
          "       python -m sapporo.perf.plots sweep OUT.png RUN_DIR [RUN_DIR ...]\n")


def plot_block_step(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """The latency budget of block steps (``sapporo bench --block-step``): per N, where the
    time of a step goes (device, argument checks, storing, the rest of the host's work) as
    shares of the step against N_active, with the step's time written above each bar."""
    plt = _pyplot()
    ns = sorted({int(r["n"]) for r in rows})
    fig, axes = plt.subplots(1, len(ns), figsize=(4.2 * len(ns), 3.8), sharey=True,
                             squeeze=False)
    colours = {"device": "#4c72b0", "argument checks": "#dd8452", "store": "#937860",
               "other host work": "#c44e52"}
    for ax, n in zip(axes[0], ns, strict=True):
        sel = sorted((r for r in rows if int(r["n"]) == n), key=lambda r: r["n_active"])
        xs = np.arange(len(sel))
        wall, device, checks, store = (np.array([r[k] for r in sel]) for k in
                                       ("wall_us", "device_us", "checks_us", "store_us"))
        device = np.minimum(device, wall)
        other = np.maximum(wall - device - checks - store, 0)
        total = device + checks + store + other
        bottom = np.zeros(len(sel))
        for label, vals in (("device", device), ("argument checks", checks), ("store", store),
                            ("other host work", other)):
            share = 100 * vals / total
            ax.bar(xs, share, bottom=bottom, color=colours[label], label=label, width=0.7)
            bottom += share
        capi = all("capi_us" in r for r in sel)
        for x, w, r in zip(xs, wall, sel, strict=True):
            label = f"{w:.0f}\nC {r['capi_us']:.0f}" if capi else f"{w:.0f}"
            ax.text(x, 101, label, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(xs, [str(r["n_active"]) for r in sel])
        ax.set_xlabel("N_active")
        ax.set_ylim(0, 122 if capi else 112)
        ax.set_title(f"N = {n}", fontsize=9)
    axes[0][0].set_ylabel("share of a block step [%]")
    handles, labels = axes[0][0].get_legend_handles_labels()
    # beside the last panel (a figure legend below would sit on the x labels)
    axes[0][-1].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                       fontsize=8, frameon=False)
    first = rows[0] if rows else {}
    capi = bool(rows) and all("capi_us" in r for r in rows)
    fig.suptitle(f"block step, order {first.get('order', '')} {first.get('precision', '')}, "
                 f"{first.get('device', '')}: us per step above the bars (Python API"
                 + ("; C: through the C API)" if capi else ")"), fontsize=9)
    return _save(fig, path)


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
