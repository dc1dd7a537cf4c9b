"""What a benchmark is and what it found: the settings, the rows, the report, the test
systems, the rates (interactions/s, GFLOP/s with :data:`FLOPS`) and the CSV file and text
table they are written to. Measured by :mod:`sapporo.perf.bench` and
:mod:`sapporo.perf.peers`, drawn by :mod:`sapporo.perf.plots`.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from sapporo.errors import InputError
from sapporo.nbody.fileio import write_text_atomic

#: Floating-point operations counted per interaction, by order (Sapporo2 conventions).
FLOPS = {2: 38, 4: 60, 6: 97, 8: 144}
#: Softening used by every benchmark.
EPS2 = 1e-4
#: File names written into the output folder.
CSV_NAME = "bench-results.csv"
TABLE_NAME = "bench-table.txt"
#: Peers known to :func:`run_bench`.
PEERS = ("numpy-reference", "pytreegrav", "pytreegrav-target", "cupy", "torch")

Progress = Callable[[str], None]


@dataclass
class Row:
    """One measurement (a CSV line): ``kind`` ``"nxn"``, ``"n_active"`` or ``"overhead"``;
    ``code`` ``"sapporo"`` or a peer's name. Times in seconds, the best over the repeats
    (``seconds_median`` the median); ``cpu_seconds``: the process's CPU time (insensitive to
    other processes' load); ``kernel_seconds``: device time (from a profiling library, the
    wall times from one without); ``overhead_us``: wall minus kernel time per call, median
    (``_min`` the smallest); ``step_us``: a block step of one particle (its j-record
    updated, a new time, the force on it)."""

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
    n_list, sweep_n, n_active : sequence of int, int, sequence of int
        N of the N x N measurements; N and active-particle counts of the N_active sweep
        (and of the host overhead, timed with ``overhead_calls`` calls).
    repeats, budget : int, float
        Timed repeats of each N x N measurement (the best counts), and the seconds they may
        take together (beyond them a subset of the i-particles is computed, and a peer is
        skipped).
    sweep_seconds : float
        Time spent per point of the N_active sweep (3 to 30 calls).
    peers, numpy_max_n : sequence of str, int
        Among :data:`PEERS` (unavailable ones are skipped with a note); the largest N of
        the NumPy reference.
    backend, devices, launch, seed
        As for :class:`sapporo.Library`; ``launch="defaults"``: the built-in launch
        parameters instead of a tuning profile; the seed of the Plummer spheres.
    peak_gflops : dict
        Device peak in GFLOP/s by precision, for the fraction of peak (empty: unknown).
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
        return cls(**{**dict(n_list=(1024, 4096), sweep_n=4096, overhead_calls=50, repeats=2,
                             budget=4.0, sweep_seconds=0.05, numpy_max_n=1024), **kw})

    @classmethod
    def tiny(cls, **kw: Any) -> BenchSettings:
        """A few seconds: for tests of the machinery, not for numbers."""
        return cls(**{**dict(n_list=(256, 512), sweep_n=512, n_active=(1, 4, 16),
                             overhead_calls=5, repeats=1, budget=2.0, sweep_seconds=0.0,
                             numpy_max_n=256), **kw})


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


def bench_system(n: int, seed: int, order: int) -> dict[str, Any]:
    """A Plummer sphere with velocities, (random, orders 6, 8) accelerations and (order 8)
    jerks, and ids."""
    from sapporo.reference import plummer

    x, v, m = plummer(n, seed=seed)
    rng = np.random.default_rng(seed + 1)
    a = rng.normal(scale=0.3, size=(n, 3)) if order >= 6 else None
    jerk = rng.normal(scale=0.3, size=(n, 3)) if order >= 8 else None
    return {"x": x, "v": v, "m": m, "a": a, "jerk": jerk, "id": np.arange(n, dtype=np.int64)}


def force_call(lib: Any, sysd: dict[str, Any], ni: int, nj: int | None = None
               ) -> dict[str, float]:
    """One force call of ``lib`` on the first ``ni`` particles of ``sysd``
    (:func:`bench_system`): its ``wall``, ``kernel`` and process ``cpu`` seconds."""
    a = None if sysd["a"] is None else sysd["a"][:ni]
    jerk = None if sysd["jerk"] is None else sysd["jerk"][:ni]
    k0 = lib.kernel_seconds
    c0 = time.process_time()
    t0 = time.perf_counter()
    lib.compute(sysd["x"][:ni], sysd["v"][:ni], sysd["id"][:ni], EPS2, a=a, nj=nj, jerk=jerk)
    return {"wall": time.perf_counter() - t0, "kernel": lib.kernel_seconds - k0,
            "cpu": time.process_time() - c0}


def load_average() -> tuple[float, float, float] | None:
    """The system's load average (None where there is none)."""
    try:
        return os.getloadavg()
    except OSError:
        return None


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
    lines += [f"launch table, {tag}: {src}" for tag, src in report.launch_sources.items()]
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
        lines += ["", "peers (same particles, same process)",
                  f"{'code':<18} {'order':>5} {'N':>7} {'i':>7} {'time [s]':>10} "
                  f"{'Gint/s':>8} {'Gint/cpu-s':>10}  note"]
        lines += [f"{r.code:<18} {r.order or '-':>5} {r.n:>7} {r.n_active:>7} "
                  f"{r.seconds:10.4f} {r.interactions_per_s / 1e9:8.4f} "
                  f"{_giga(r.interactions_per_cpu_s, 4):>10}  {r.note}"
                  for p in peers for r in report.select("nxn", p)]
    sweep = report.select("n_active")
    if sweep:
        lines += ["", f"N_active sweep at N = {sweep[0].n} (best wall time per call)",
                  f"{'order':>5} {'precision':<13} {'N_active':>8} {'time [us]':>11} "
                  f"{'kernel [us]':>11} {'Gint/s':>8} {'GFLOP/s':>8}"]
        lines += [f"{r.order:>5} {r.precision:<13} {r.n_active:>8} "
                  f"{r.seconds * 1e6:11.1f} {r.kernel_seconds * 1e6:11.1f} "
                  f"{r.interactions_per_s / 1e9:8.4f} {r.gflops:8.3f}" for r in sweep]
    over = report.select("overhead")
    if over:
        lines += ["", f"host overhead per call at N_active = 1, N = {over[0].n} "
                      "(wall minus kernel time)",
                  f"{'order':>5} {'precision':<13} {'median [us]':>11} {'min [us]':>9} "
                  f"{'wall [us]':>10} {'kernel [us]':>11} {'calls':>6} "
                  f"{'block step [us]':>15} {'min [us]':>9}"]
        lines += [f"{r.order:>5} {r.precision:<13} {r.overhead_us:11.1f} "
                  f"{r.overhead_us_min:9.1f} {r.seconds * 1e6:10.1f} "
                  f"{r.kernel_seconds * 1e6:11.1f} {r.repeats:>6} "
                  f"{_num(r.step_us):>15} {_num(r.step_us_min):>9}" for r in over]
        lines.append("(wall: median call without profiling; kernel: median kernel time; block "
                     "step: one j-particle updated, a new time, the force on one particle)")
    lines += [f"note: {note}" for note in report.notes]
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


def parse_peak(text: str | None) -> dict[str, float]:
    """``"150"`` (both precisions) or ``"double-single=150,double=75"`` to a dictionary."""
    from sapporo import config

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
