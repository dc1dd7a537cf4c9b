"""Benchmarks of the force library, with peers measured in the same process.

Three measurements per order and precision (:func:`run_bench`):

* **N x N**: every particle of an N-body system as i-particle against all N as j-particles,
  for a list of N. When a full evaluation would exceed the time budget, only a subset of
  the i-particles is computed (the row says so: ``n_active < n``); throughput is then
  ``n_active * n`` interactions over the time.
* **N_active sweep**: time per force call for 1, 2, 4, ..., 1024 active i-particles at a
  fixed N (what a block time-step integrator sees).
* **Host overhead**: wall time minus device kernel time per call at N_active = 1
  (``Library(profiling=True)``).

Peers, each on the same particles, are measured by :mod:`sapporo.bench_peers` (the float64
NumPy reference, pytreegrav, and on GPUs CuPy or PyTorch). GFLOP/s use the customary operation
counts per interaction (:data:`FLOPS`). Results go to a CSV file and a text table (here) and
PNG plots (:func:`sapporo.plots.plot_bench`, with matplotlib).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError
from .fileio import write_text_atomic

log = logging.getLogger(__name__)

#: Floating-point operations counted per interaction, by order (Sapporo2 conventions).
FLOPS = {2: 38, 4: 60, 6: 97, 8: 144}
#: Softening used by every benchmark.
EPS2 = 1e-4
#: File names written into the output folder.
CSV_NAME = "bench-results.csv"
TABLE_NAME = "bench-table.txt"
PLOT_NAMES = ("bench-nactive.png", "bench-nxn.png", "bench-orders.png")
#: Peers known to :func:`run_bench`.
PEERS = ("numpy-reference", "pytreegrav", "pytreegrav-target", "cupy", "torch")

Progress = Callable[[str], None]


@dataclass
class Row:
    """One measurement (a CSV line).

    ``kind`` is ``"nxn"``, ``"n_active"`` or ``"overhead"``; ``code`` is ``"sapporo"`` or a
    peer's name. Times are in seconds (best over repeats; ``seconds_median`` the median);
    ``cpu_seconds`` is the smallest CPU time of this process over the repeats (all threads:
    insensitive to other processes' load, unlike wall time), and ``interactions_per_cpu_s``
    the throughput per CPU-second (per core); ``kernel_seconds`` is device
    kernel time (sapporo only); ``overhead_us`` wall minus kernel time per call in
    microseconds (median; ``overhead_us_min`` the smallest). ``step_us`` (overhead rows):
    wall time of a block step of one particle (its j-record updated, a new time so that
    every j-particle is predicted, the force on it) in microseconds, median
    (``step_us_min`` the smallest). Wall times of the N_active sweep, the overhead and the
    block step come from a library without profiling (no timing events), kernel times from
    one with.
    """

    device: str
    backend: str
    date: str
    kind: str
    code: str
    order: int | None
    precision: str
    n: int
    n_active: int
    repeats: int
    seconds: float
    seconds_median: float | None = None
    cpu_seconds: float | None = None
    kernel_seconds: float | None = None
    overhead_us: float | None = None
    overhead_us_min: float | None = None
    step_us: float | None = None
    step_us_min: float | None = None
    interactions_per_s: float | None = None
    interactions_per_cpu_s: float | None = None
    gflops: float | None = None
    peak_fraction: float | None = None
    launch: str = ""
    note: str = ""
    ratios: dict[str, float] = field(default_factory=dict)
    cpu_ratios: dict[str, float] = field(default_factory=dict)


#: The fixed CSV columns; ``ratio_<peer>`` (throughput ratio by wall time) and
#: ``ratio_cpu_<peer>`` (by process CPU time) follow for each peer measured.
COLUMNS = [f.name for f in fields(Row) if f.name not in ("ratios", "cpu_ratios")]


@dataclass
class BenchSettings:
    """What :func:`run_bench` measures.

    Attributes
    ----------
    orders, precisions : sequences
        Variants of the library to measure.
    n_list : sequence of int
        N of the N x N measurements.
    sweep_n : int
        N of the N_active sweep and of the host-overhead measurement.
    n_active : sequence of int
        Active-particle counts of the sweep.
    overhead_calls : int
        Calls timed for the host overhead.
    repeats : int
        Timed repeats of each N x N measurement (the best counts).
    budget : float
        Seconds allowed per N x N measurement (all repeats); beyond it a subset of the
        i-particles is computed, and a peer is skipped.
    sweep_seconds : float
        Time spent per point of the N_active sweep (3 to 30 calls).
    peers : sequence of str
        Among :data:`PEERS`; unavailable ones are skipped with a note.
    numpy_max_n : int
        Largest N for the NumPy reference.
    backend, devices
        As for :class:`sapporo.Library`.
    peak_gflops : dict
        Device peak in GFLOP/s by precision, for the fraction of peak (empty: unknown).
    launch : {"auto", "defaults"}
        ``"auto"``: the library's table (tuning profile when present); ``"defaults"``: the
        built-in launch parameters.
    seed : int
        Seed of the Plummer spheres.
    """

    orders: Sequence[int] = (2, 4, 6)
    precisions: Sequence[str] = ("double-single", "double")
    n_list: Sequence[int] = (1024, 4096, 16384, 65536)
    sweep_n: int = 16384
    n_active: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
    overhead_calls: int = 200
    repeats: int = 3
    budget: float = 30.0
    sweep_seconds: float = 0.3
    peers: Sequence[str] = ("numpy-reference", "pytreegrav")
    numpy_max_n: int = 2048
    backend: str | None = None
    devices: Any = None
    peak_gflops: dict[str, float] = field(default_factory=dict)
    launch: str = "auto"
    seed: int = 3

    @classmethod
    def quick(cls, **kw: Any) -> BenchSettings:
        """A run of about a minute on a 2-core CPU."""
        base = dict(n_list=(1024, 4096), sweep_n=4096, overhead_calls=50, repeats=2,
                    budget=4.0, sweep_seconds=0.05, numpy_max_n=1024)
        base.update(kw)
        return cls(**base)

    @classmethod
    def tiny(cls, **kw: Any) -> BenchSettings:
        """A few seconds: for tests of the machinery, not for numbers."""
        base = dict(n_list=(256, 512), sweep_n=512, n_active=(1, 4, 16), overhead_calls=5,
                    repeats=1, budget=2.0, sweep_seconds=0.0, numpy_max_n=256)
        base.update(kw)
        return cls(**base)


@dataclass
class BenchReport:
    """Everything :func:`run_bench` measured."""

    device: str
    backend: str
    device_type: str
    date: str
    rows: list[Row]
    launch_sources: dict[str, str]
    settings: BenchSettings
    load_average: tuple[float, float, float] | None = None
    notes: list[str] = field(default_factory=list)

    def peers(self) -> list[str]:
        """Peers with at least one measurement, in :data:`PEERS` order."""
        have = {r.code for r in self.rows if r.code != "sapporo"}
        return [p for p in PEERS if p in have]

    def select(self, kind: str, code: str = "sapporo") -> list[Row]:
        """Rows of one kind and code."""
        return [r for r in self.rows if r.kind == kind and r.code == code]


# ---------------------------------------------------------------------------------------------
# systems


def bench_system(n: int, seed: int, order: int) -> dict[str, Any]:
    from .reference import plummer

    x, v, m = plummer(n, seed=seed)
    rng = np.random.default_rng(seed + 1)
    a = rng.normal(scale=0.3, size=(n, 3)) if order >= 6 else None
    jerk = rng.normal(scale=0.3, size=(n, 3)) if order >= 8 else None
    return {"x": x, "v": v, "m": m, "a": a, "jerk": jerk, "id": np.arange(n, dtype=np.int64)}


def with_rates(row: Row, peak: dict[str, float]) -> Row:
    """Fill interactions/s, GFLOP/s and fraction of peak from the time."""
    inter = row.n_active * row.n
    if row.cpu_seconds:
        row.interactions_per_cpu_s = inter / row.cpu_seconds
    if row.seconds > 0:
        row.interactions_per_s = inter / row.seconds
        if row.order in FLOPS and row.code in ("sapporo", "numpy-reference"):
            row.gflops = row.interactions_per_s * FLOPS[row.order] / 1e9
            if row.code == "sapporo" and peak.get(row.precision):
                row.peak_fraction = row.gflops / peak[row.precision]
    return row


# ---------------------------------------------------------------------------------------------
# sapporo


def _bench_library(s: BenchSettings, order: int, precision: str, common: dict[str, Any],
                   say: Progress, sources: dict[str, str]) -> list[Row]:
    from .launch import default_table
    from .library import Library

    rows: list[Row] = []
    tag = f"order {order} {precision}"
    # two libraries on the same device: one times the kernels (events), the other the calls
    # as users make them (profiling off: on CUDA no events are recorded at all)
    with Library(order=order, precision=precision, backend=s.backend, devices=s.devices,
                 profiling=True) as lib, \
            Library(order=order, precision=precision, backend=s.backend, devices=s.devices,
                    profiling=False) as plain:
        if s.launch == "defaults":
            for each in (lib, plain):
                each.set_launch_table(default_table(each.device_infos[0], order, precision))
        source = lib.launch_tables()[0].source
        sources[tag] = source
        launch = Path(source).name if source.endswith(".json") else source

        def load(n: int, libs: tuple[Library, ...] = (lib,)) -> dict[str, Any]:
            sysd = bench_system(n, s.seed, order)
            for each in libs:
                each.reset()
                each.set_time(0.0)
                each.set_j_particles(np.arange(n), sysd["id"], 0.0, sysd["m"], sysd["x"],
                                     sysd["v"], a=sysd["a"], jerk=sysd["jerk"])
            return sysd

        def call(sysd: dict[str, Any], ni: int, nj: int | None = None,
                 cpu: list[float] | None = None, on: Library = lib) -> tuple[float, float]:
            a = None if sysd["a"] is None else sysd["a"][:ni]
            jerk = None if sysd["jerk"] is None else sysd["jerk"][:ni]
            k0 = on.kernel_seconds
            c0 = time.process_time()
            t0 = time.perf_counter()
            on.compute(sysd["x"][:ni], sysd["v"][:ni], sysd["id"][:ni], EPS2, a=a, nj=nj,
                       jerk=jerk)
            wall = time.perf_counter() - t0
            if cpu is not None:
                cpu.append(time.process_time() - c0)
            return wall, on.kernel_seconds - k0

        # N x N
        for n in s.n_list:
            sysd = load(n)
            probe = min(n, 1024)
            call(sysd, n, nj=min(n, 256))  # builds every configuration this size uses
            call(sysd, probe)
            t_probe, _ = call(sysd, probe)
            per_i = t_probe / probe
            ni, note = n, ""
            if per_i * n * s.repeats > s.budget:
                ni = max(probe, int(s.budget / s.repeats / per_i) // 1024 * 1024)
                ni = min(ni, n)
                if ni < n:
                    note = f"i-subset: {ni} of {n} i-particles (time budget {s.budget:g} s)"
            walls, kerns, cpus = [], [], []
            for _ in range(s.repeats):
                w, k = call(sysd, ni, cpu=cpus)
                walls.append(w)
                kerns.append(k)
            row = with_rates(Row(**common, kind="nxn", code="sapporo", order=order,
                            precision=precision, n=n, n_active=ni, repeats=s.repeats,
                            seconds=min(walls), seconds_median=statistics.median(walls),
                            cpu_seconds=min(cpus), kernel_seconds=min(kerns), launch=launch,
                            note=note),
                        s.peak_gflops)
            rows.append(row)
            say(f"{tag}: N x N  N={n:>7} i={ni:>7}  {row.seconds:9.4f} s  "
                f"{row.interactions_per_s / 1e9:7.3f} Gint/s  {row.gflops:7.2f} GFLOP/s"
                + (f"  ({note})" if note else ""))

        # N_active sweep, host overhead and block step at sweep_n
        n = s.sweep_n
        sysd = load(n, (lib, plain))
        for ni in s.n_active:
            if ni > n:
                continue
            for each in (lib, plain):
                call(sysd, ni, nj=min(n, 256), on=each)  # builds this launch shape
            w1, _ = call(sysd, ni, on=plain)
            reps = int(min(30, max(3, math.ceil(s.sweep_seconds / max(w1, 1e-6)))))
            if s.sweep_seconds <= 0:
                reps = 1
            walls, cpus = [], []
            for _ in range(reps):
                walls.append(call(sysd, ni, cpu=cpus, on=plain)[0])
            call(sysd, ni)  # the other library's memory back into the caches (CPUs)
            kern = min(call(sysd, ni)[1] for _ in range(reps))
            row = with_rates(Row(**common, kind="n_active", code="sapporo", order=order,
                            precision=precision, n=n, n_active=ni, repeats=reps,
                            seconds=min(walls), seconds_median=statistics.median(walls),
                            cpu_seconds=min(cpus), kernel_seconds=kern, launch=launch),
                        s.peak_gflops)
            rows.append(row)
            say(f"{tag}: N_active={ni:>5} at N={n}  {row.seconds * 1e6:10.1f} us  "
                f"(kernel {row.kernel_seconds * 1e6:9.1f} us)  "
                f"{row.interactions_per_s / 1e9:7.3f} Gint/s")
        calls = max(1, s.overhead_calls)
        for each in (lib, plain):
            call(sysd, 1, nj=min(n, 256), on=each)
        walls = [call(sysd, 1, on=plain)[0] for _ in range(calls)]
        call(sysd, 1)
        kerns = [call(sysd, 1)[1] for _ in range(min(calls, 50))]
        kern = statistics.median(kerns)
        over = [(w - kern) * 1e6 for w in walls]
        steps = _block_steps(plain, sysd, calls)
        row = with_rates(Row(**common, kind="overhead", code="sapporo", order=order,
                        precision=precision, n=n, n_active=1, repeats=len(walls),
                        seconds=statistics.median(walls), seconds_median=statistics.median(walls),
                        kernel_seconds=kern, overhead_us=statistics.median(over),
                        overhead_us_min=min(over), step_us=statistics.median(steps) * 1e6,
                        step_us_min=min(steps) * 1e6, launch=launch), s.peak_gflops)
        rows.append(row)
        say(f"{tag}: host overhead at N_active=1, N={n}: median {row.overhead_us:8.1f} us, "
            f"min {row.overhead_us_min:8.1f} us (wall {row.seconds * 1e6:.1f} us, kernel "
            f"{row.kernel_seconds * 1e6:.1f} us); block step {row.step_us:.1f} us")
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


# ---------------------------------------------------------------------------------------------
# driver


def run_bench(settings: BenchSettings, progress: Progress | None = None) -> BenchReport:
    """Measure every requested variant and peer.

    Parameters
    ----------
    settings : BenchSettings
    progress : callable, optional
        Called with one line of text per measurement.

    Returns
    -------
    BenchReport
    """
    from . import config
    from .backend import get_backend

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
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    report = BenchReport(device=device, backend=be.name, device_type=info.device_type,
                         date=date, rows=[], launch_sources={}, settings=s, load_average=load)
    say(f"sapporo bench on {device} ({be.name}, {info.device_type}), {date}")

    for precision in precisions:
        for order in orders:
            report.rows += _bench_library(s, order, precision, common, say,
                                          report.launch_sources)

    from .bench_peers import measure_peer

    for peer in s.peers:
        report.rows += measure_peer(peer, s, common, say, info.device_type, report.notes)
    _fill_ratios(report)
    return report


def _fill_ratios(report: BenchReport) -> None:
    """Throughput ratio of each sapporo N x N row to each peer at the same N (and order, for
    the NumPy reference), by wall time and by process CPU time."""
    peers = [r for r in report.rows if r.kind == "nxn" and r.code != "sapporo"]
    for row in report.select("nxn"):
        for p in peers:
            if p.n != row.n or (p.order is not None and p.order != row.order):
                continue
            if p.interactions_per_s and row.interactions_per_s:
                row.ratios[p.code] = row.interactions_per_s / p.interactions_per_s
            if p.cpu_seconds and row.cpu_seconds:
                row.cpu_ratios[p.code] = ((p.cpu_seconds / (p.n * p.n_active))
                                          / (row.cpu_seconds / (row.n * row.n_active)))


# ---------------------------------------------------------------------------------------------
# output


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_csv(report: BenchReport, path: str | Path) -> Path:
    """Write every row; ``ratio_<peer>`` columns follow the fixed :data:`COLUMNS`."""
    path = Path(path)
    peers = report.peers()
    buf = io.StringIO()
    out = csv.writer(buf)
    out.writerow(COLUMNS + [f"ratio_{p.replace('-', '_')}" for p in peers]
                 + [f"ratio_cpu_{p.replace('-', '_')}" for p in peers])
    for r in report.rows:
        d = asdict(r)
        out.writerow([_cell(d[c]) for c in COLUMNS] + [_cell(r.ratios.get(p)) for p in peers]
                     + [_cell(r.cpu_ratios.get(p)) for p in peers])
    write_text_atomic(path, buf.getvalue())
    return path


def format_table(report: BenchReport) -> str:
    """The results as a plain-text table."""
    s = report.settings
    lines = [f"sapporo bench: {report.device} ({report.backend}, {report.device_type}), "
             f"{report.date}"]
    if report.load_average:
        lines.append("load average at start: " + " ".join(f"{x:.2f}" for x in
                                                         report.load_average))
    for tag, src in report.launch_sources.items():
        lines.append(f"launch table, {tag}: {src}")
    peak = ", ".join(f"{k} {v:g}" for k, v in s.peak_gflops.items())
    lines.append(f"flops per interaction: order 2: {FLOPS[2]}, 4: {FLOPS[4]}, 6: {FLOPS[6]}, "
                 f"8: {FLOPS[8]}"
                 + (f"; peak GFLOP/s: {peak}" if peak else ""))
    peers = report.peers()
    lines += ["", "N x N (wall time per evaluation; i < N: subset of i-particles timed; "
              "Gint/cpu-s: per CPU-second of this process, i.e. per core, insensitive to other "
              "load; 'x peer': throughput ratio by wall time, in brackets by CPU time)"]
    head = (f"{'order':>5} {'precision':<13} {'N':>7} {'i':>7} {'time [s]':>10} "
            f"{'Gint/s':>8} {'GFLOP/s':>8} {'%peak':>6} {'Gint/cpu-s':>10}")
    head += "".join(f" {'x ' + p:>19}" for p in peers)
    lines.append(head)
    for r in report.select("nxn"):
        pk = f"{100 * r.peak_fraction:6.1f}" if r.peak_fraction else f"{'-':>6}"
        line = (f"{r.order:>5} {r.precision:<13} {r.n:>7} {r.n_active:>7} {r.seconds:10.4f} "
                f"{r.interactions_per_s / 1e9:8.3f} {r.gflops:8.2f} {pk} "
                f"{_giga(r.interactions_per_cpu_s):>10}")
        line += "".join(f" {_ratio(r, p):>19}" for p in peers)
        lines.append(line)
    if peers:
        lines += ["", "peers (same particles, same process)"]
        lines.append(f"{'code':<18} {'order':>5} {'N':>7} {'i':>7} {'time [s]':>10} "
                     f"{'Gint/s':>8} {'Gint/cpu-s':>10}  note")
        for p in peers:
            for r in report.select("nxn", p):
                lines.append(f"{r.code:<18} {r.order or '-':>5} {r.n:>7} {r.n_active:>7} "
                             f"{r.seconds:10.4f} {r.interactions_per_s / 1e9:8.4f} "
                             f"{_giga(r.interactions_per_cpu_s, 4):>10}  {r.note}")
    sweep = report.select("n_active")
    if sweep:
        lines += ["", f"N_active sweep at N = {sweep[0].n} (best wall time per call)"]
        lines.append(f"{'order':>5} {'precision':<13} {'N_active':>8} {'time [us]':>11} "
                     f"{'kernel [us]':>11} {'Gint/s':>8} {'GFLOP/s':>8}")
        for r in sweep:
            lines.append(f"{r.order:>5} {r.precision:<13} {r.n_active:>8} "
                         f"{r.seconds * 1e6:11.1f} {r.kernel_seconds * 1e6:11.1f} "
                         f"{r.interactions_per_s / 1e9:8.4f} {r.gflops:8.3f}")
    over = report.select("overhead")
    if over:
        lines += ["", f"host overhead per call at N_active = 1, N = {over[0].n} "
                      "(wall minus kernel time)"]
        lines.append(f"{'order':>5} {'precision':<13} {'median [us]':>11} {'min [us]':>9} "
                     f"{'wall [us]':>10} {'kernel [us]':>11} {'calls':>6} "
                     f"{'block step [us]':>15} {'min [us]':>9}")
        for r in over:
            lines.append(f"{r.order:>5} {r.precision:<13} {r.overhead_us:11.1f} "
                         f"{r.overhead_us_min:9.1f} {r.seconds * 1e6:10.1f} "
                         f"{r.kernel_seconds * 1e6:11.1f} {r.repeats:>6} "
                         f"{_num(r.step_us):>15} {_num(r.step_us_min):>9}")
        lines.append("(wall: median call without profiling; kernel: median kernel time; block "
                     "step: one j-particle updated, a new time, the force on one particle)")
    for note in report.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _giga(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value / 1e9:.{digits}f}"


def _ratio(row: Row, peer: str) -> str:
    if peer not in row.ratios:
        return "-"
    text = f"{row.ratios[peer]:.2f}"
    if peer in row.cpu_ratios:
        text += f" ({row.cpu_ratios[peer]:.2f})"
    return text


def write_outputs(report: BenchReport, out_dir: str | Path, plots: bool = True) -> list[Path]:
    """CSV, text table and (optionally) plots into ``out_dir``; returns the paths.

    Each file is written whole or not at all (:mod:`sapporo.fileio`); a failure raises an
    :class:`OSError` naming the file.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [write_csv(report, out / CSV_NAME)]
    if plots:
        from .plots import plot_bench

        paths += plot_bench(report, out)
    table = out / TABLE_NAME
    write_text_atomic(table, format_table(report))
    paths.append(table)
    return paths


def parse_peak(text: str | None) -> dict[str, float]:
    """``"150"`` (both precisions) or ``"double-single=150,double=75"`` to a dictionary."""
    from . import config

    if not text:
        return {}
    out: dict[str, float] = {}
    try:
        for part in text.replace(" ", "").split(","):
            if not part:
                continue
            if "=" in part:
                k, v = part.split("=", 1)
                out[config.parse_precision(k, "peak")] = float(v)
            else:
                out["double-single"] = out["double"] = float(part)
    except Exception:
        raise InputError(f"--peak-gflops: expected a number or 'double-single=X,double=Y', "
                         f"got {text!r}") from None
    return out
