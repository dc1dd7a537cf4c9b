"""Benchmarks of the force library, with peers measured in the same process.

Three measurements per order and precision (:func:`run_bench`): **N x N**, every particle
against all N for a list of N (only a subset of the i-particles, ``n_active < n``, when the
time budget would be exceeded); the **N_active sweep**, the time per force call for 1, 2,
4, ..., 1024 active particles at a fixed N; and the **host overhead**, wall minus kernel time
per call at N_active = 1. Peers (:mod:`sapporo.perf.peers`) run on the same particles;
GFLOP/s use the customary counts per interaction (:data:`FLOPS`). Results go to a CSV file,
a text table and PNG plots (:func:`sapporo.perf.plots.plot_bench`).
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from sapporo.errors import InputError
from sapporo.nbody.fileio import write_text_atomic
from sapporo.perf import peers
from sapporo.perf.plots import PLOT_NAMES, plot_bench
from sapporo.perf.report import (
    COLUMNS,
    CSV_NAME,
    EPS2,
    FLOPS,
    PEERS,
    TABLE_NAME,
    BenchReport,
    BenchSettings,
    Progress,
    Row,
    bench_system,
    force_call,
    format_table,
    load_average,
    parse_peak,
    with_rates,
    write_csv,
)

__all__ = ["COLUMNS", "CSV_NAME", "EPS2", "FLOPS", "PEERS", "PLOT_NAMES", "TABLE_NAME",
           "BenchReport", "BenchSettings", "Progress", "Row", "bench_system", "format_table",
           "parse_peak", "run_bench", "with_rates", "write_csv", "write_outputs"]

log = logging.getLogger(__name__)

def _bench_library(s: BenchSettings, order: int, precision: str, common: dict[str, Any],
                   say: Progress, sources: dict[str, str]) -> list[Row]:
    from sapporo.core.launch import default_table
    from sapporo.core.library import Library

    rows: list[Row] = []
    tag = f"order {order} {precision}"
    # two libraries on the same device: one times the kernels (events), the other the calls
    # as users make them (profiling off: on CUDA no events are recorded at all)
    opts = {"order": order, "precision": precision, "backend": s.backend, "devices": s.devices}
    with Library(**opts, profiling=True) as lib, Library(**opts, profiling=False) as plain:
        if s.launch == "defaults":
            for each in (lib, plain):
                each.set_launch_table(default_table(each.device_infos[0], order, precision))
        source = lib.launch_tables()[0].source
        sources[tag] = source
        launch = Path(source).name if source.endswith(".json") else source
        ours = {**common, "code": "sapporo", "order": order, "precision": precision,
                "launch": launch}  # the fields of every row of this library

        def load(n: int, libs: tuple[Library, ...] = (lib,)) -> dict[str, Any]:
            sysd = bench_system(n, s.seed, order)
            for each in libs:
                each.reset()
                each.set_time(0.0)
                each.set_j_particles(np.arange(n), sysd["id"], 0.0, sysd["m"], sysd["x"],
                                     sysd["v"], a=sysd["a"], jerk=sysd["jerk"])
            return sysd

        def call(sysd: dict[str, Any], ni: int, nj: int | None = None,
                 on: Library = lib) -> dict[str, float]:
            return force_call(on, sysd, ni, nj)

        def row(kind: str, n: int, ni: int, times: list[dict[str, float]],
                kernel: float | None = None, note: str = "") -> Row:
            walls = [t["wall"] for t in times]
            if kernel is None:
                kernel = min(t["kernel"] for t in times)
            return with_rates(Row(**ours, kind=kind, n=n, n_active=ni, repeats=len(times),
                                  seconds=min(walls), seconds_median=statistics.median(walls),
                                  cpu_seconds=min(t["cpu"] for t in times),
                                  kernel_seconds=kernel, note=note), s.peak_gflops)

        # N x N
        for n in s.n_list:
            sysd = load(n)
            probe = min(n, 1024)
            call(sysd, n, nj=min(n, 256))  # builds every configuration this size uses
            call(sysd, probe)
            per_i = call(sysd, probe)["wall"] / probe
            ni, note = n, ""
            if per_i * n * s.repeats > s.budget:
                ni = min(max(probe, int(s.budget / s.repeats / per_i) // 1024 * 1024), n)
                if ni < n:
                    note = f"i-subset: {ni} of {n} i-particles (time budget {s.budget:g} s)"
            rows.append(row("nxn", n, ni, [call(sysd, ni) for _ in range(s.repeats)],
                            note=note))
            say(f"{tag}: N x N  N={n:>7} i={ni:>7}  {rows[-1].seconds:9.4f} s  "
                f"{rows[-1].interactions_per_s / 1e9:7.3f} Gint/s  "
                f"{rows[-1].gflops:7.2f} GFLOP/s" + (f"  ({note})" if note else ""))

        # N_active sweep, host overhead and block step at sweep_n
        n = s.sweep_n
        sysd = load(n, (lib, plain))
        for ni in s.n_active:
            if ni > n:
                continue
            for each in (lib, plain):
                call(sysd, ni, nj=min(n, 256), on=each)  # builds this launch shape
            w1 = call(sysd, ni, on=plain)["wall"]
            reps = 1 if s.sweep_seconds <= 0 else int(
                min(30, max(3, math.ceil(s.sweep_seconds / max(w1, 1e-6)))))
            times = [call(sysd, ni, on=plain) for _ in range(reps)]
            call(sysd, ni)  # the other library's memory back into the caches (CPUs)
            kern = min(call(sysd, ni)["kernel"] for _ in range(reps))
            rows.append(row("n_active", n, ni, times, kern))
            say(f"{tag}: N_active={ni:>5} at N={n}  {rows[-1].seconds * 1e6:10.1f} us  "
                f"(kernel {kern * 1e6:9.1f} us)  {rows[-1].interactions_per_s / 1e9:7.3f} Gint/s")
        calls = max(1, s.overhead_calls)
        for each in (lib, plain):
            call(sysd, 1, nj=min(n, 256), on=each)
        walls = [call(sysd, 1, on=plain)["wall"] for _ in range(calls)]
        call(sysd, 1)
        kern = statistics.median(call(sysd, 1)["kernel"] for _ in range(min(calls, 50)))
        over = [(w - kern) * 1e6 for w in walls]
        steps = _block_steps(plain, sysd, calls)
        r = with_rates(Row(**ours, kind="overhead", n=n, n_active=1, repeats=len(walls),
                           seconds=statistics.median(walls),
                           seconds_median=statistics.median(walls), kernel_seconds=kern,
                           overhead_us=statistics.median(over), overhead_us_min=min(over),
                           step_us=statistics.median(steps) * 1e6,
                           step_us_min=min(steps) * 1e6), s.peak_gflops)
        rows.append(r)
        say(f"{tag}: host overhead at N_active=1, N={n}: median {r.overhead_us:8.1f} us, "
            f"min {r.overhead_us_min:8.1f} us (wall {r.seconds * 1e6:.1f} us, kernel "
            f"{kern * 1e6:.1f} us); block step {r.step_us:.1f} us")
    return rows


def _block_steps(lib: Any, sysd: dict[str, Any], calls: int) -> list[float]:
    """Wall times of block steps of one particle, as a Hermite integrator makes them: its
    j-record is replaced, the time moves on (every j-particle is predicted), and the force
    on it is computed. The particle's data does not change, so nothing drifts."""
    a = None if sysd["a"] is None else sysd["a"][:1]
    jerk = None if sysd.get("jerk") is None else sysd["jerk"][:1]
    x, v, ids, m = sysd["x"][:1], sysd["v"][:1], sysd["id"][:1], sysd["m"][:1]
    walls = []
    for k in range(calls + 1):
        t = (k + 1) * 1e-9  # tiny steps: predicted positions stay where they were
        t0 = time.perf_counter()
        lib.set_j_particles([0], ids, t, m, x, v, a=a, jerk=jerk)
        lib.set_time(t)
        lib.compute(x, v, ids, EPS2, a=a, jerk=jerk)
        walls.append(time.perf_counter() - t0)
    return walls[1:]


def run_bench(settings: BenchSettings, progress: Progress | None = None) -> BenchReport:
    """Measure every variant and peer of ``settings``; ``progress`` is called with one line
    of text per measurement."""
    from sapporo import config
    from sapporo.backend import get_backend

    say = progress or (lambda line: log.info("%s", line))
    s = settings
    try:
        orders = [config.parse_order(o, "orders") for o in s.orders]
        precisions = [config.parse_precision(p, "precisions") for p in s.precisions]
    except Exception as exc:
        raise InputError(str(exc)) from None
    for name, vals in (("n", s.n_list), ("n_active", s.n_active)):
        if not vals or min(int(v) for v in vals) < 1:
            raise InputError(f"{name}: expected positive integers, got {list(vals)}")
    if isinstance(s.repeats, bool) or not isinstance(s.repeats, int) or s.repeats < 1:
        raise InputError(f"repeats: must be an integer >= 1, got {s.repeats!r}")
    if not (isinstance(s.budget, (int, float)) and math.isfinite(s.budget) and s.budget > 0):
        raise InputError(f"budget: must be finite and > 0, got {s.budget!r}")
    unknown = [p for p in s.peers if p not in PEERS]
    if unknown:
        raise InputError(f"peers: unknown {unknown}; known: {', '.join(PEERS)}")
    s.orders, s.precisions = orders, precisions

    be = get_backend(s.backend)
    devs = be.devices()
    first = 0 if s.devices in (None, "all") else (
        s.devices if isinstance(s.devices, int) else list(s.devices)[0])
    if not 0 <= int(first) < len(devs):
        raise InputError(f"devices: no device {first} in backend {be.name}")
    info = devs[int(first)]
    ndev = len(devs) if s.devices == "all" else (
        1 if s.devices is None or isinstance(s.devices, int) else len(list(s.devices)))
    device = info.name if ndev == 1 else f"{ndev} x {info.name}"
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    common = {"device": device, "backend": be.name, "date": date}
    report = BenchReport(**common, device_type=info.device_type, rows=[], launch_sources={},
                         settings=s, load_average=load_average())
    say(f"sapporo bench on {device} ({be.name}, {info.device_type}), {date}")

    for precision in precisions:
        for order in orders:
            report.rows += _bench_library(s, order, precision, common, say,
                                          report.launch_sources)

    for peer in s.peers:
        report.rows += peers.measure_peer(peer, s, common, say, info.device_type,
                                           report.notes)
    _fill_ratios(report)
    return report


def _fill_ratios(report: BenchReport) -> None:
    """Throughput ratio of each sapporo N x N row to each peer at the same N (and order, for
    the NumPy reference), by wall time and by process CPU time."""
    peer_rows = [r for r in report.rows if r.kind == "nxn" and r.code != "sapporo"]
    for row in report.select("nxn"):
        for p in peer_rows:
            if p.n != row.n or (p.order is not None and p.order != row.order):
                continue
            if p.interactions_per_s and row.interactions_per_s:
                row.ratios[p.code] = row.interactions_per_s / p.interactions_per_s
            if p.cpu_seconds and row.cpu_seconds:
                row.cpu_ratios[p.code] = ((p.cpu_seconds / (p.n * p.n_active))
                                          / (row.cpu_seconds / (row.n * row.n_active)))


def write_outputs(report: BenchReport, out_dir: str | Path, plots: bool = True) -> list[Path]:
    """CSV, text table and (optionally) plots into ``out_dir``; returns the paths.

    Each file is written whole or not at all (:mod:`sapporo.nbody.fileio`); a failure raises an
    :class:`OSError` naming the file.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [write_csv(report, out / CSV_NAME)]
    if plots:
        paths += plot_bench(report, out)
    write_text_atomic(out / TABLE_NAME, format_table(report))
    return [*paths, out / TABLE_NAME]

