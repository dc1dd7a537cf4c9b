"""``sapporo run``: integrate a star cluster with the block-time-step Hermite integrator.

The cluster is a Plummer or King model (``--model``, :mod:`sapporo.nbody.ic`) or the
particles of a file (``--ic FILE``, :mod:`sapporo.nbody.icfile`).

Writes into ``--out``: ``summary.json``, ``diagnostics.csv`` (time, energy, energy error,
angular-momentum error, Lagrangian radii, counters at every diagnostic time),
``snapshot_final.npz`` (resumable with ``--resume``), optional periodic snapshots and, when
matplotlib is installed, ``energy_error.png``, ``lagrangian_radii.png`` and ``n_active.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from sapporo import config
from sapporo.cli import (
    StatusLine,
    add_device_options,
    add_output_options,
    command_precision,
    ensure_writable_dir,
    os_error_message,
)
from sapporo.errors import InputError
from sapporo.nbody import icfile
from sapporo.nbody.fileio import write_text_atomic
from sapporo.nbody.hermite import CRITERIA, DT_MAX, DT_MIN, HermiteIntegrator
from sapporo.nbody.ic import KING_W0_RANGE, MODELS, lagrangian_radii, star_cluster
from sapporo.nbody.snapshot import Snapshot, h5py_available
from sapporo.nbody.snapshot import load as load_snapshot
from sapporo.nbody.snapshot import save as save_snapshot
from sapporo.parallel import library as parallel
from sapporo.summary import write_summary

#: Defaults of the bare ``sapporo run`` (about a minute on a 2-core CPU through PoCL).
DEFAULT_N = 2048
DEFAULT_ORDER = 4
DEFAULT_PRECISION = "double-single"
DEFAULT_T_END = 1.0
DEFAULT_EPS = 1e-3
DEFAULT_MASS_RATIO = 10.0
#: Diagnostics every dt_max / 4 by default (the energy error sampled finely enough to plot).
DEFAULT_LOG_FRACTION = 0.25
#: How the equal-mass Plummer sphere is scaled (see :func:`sapporo.nbody.ic.plummer`).
DEFAULT_IC_SCALING = "analytic"
DEFAULT_MODEL = "plummer"
#: King's central potential when --model king is given without --w0.
DEFAULT_W0 = 6.0
LAGRANGE_FRACTIONS = (0.1, 0.5, 0.9)
#: Most diagnostic (and snapshot) times one run may ask for.
MAX_OUTPUT_TIMES = 10**6

#: Options that fix the trajectory; with --resume they come from the snapshot.
_TRAJECTORY_OPTIONS = ("order", "eta", "eta4", "criterion", "eps", "dt_min", "dt_max")
_IC_OPTIONS = ("n", "seed", "bh_mass", "heavy_fraction", "mass_ratio", "ic_scaling", "model",
               "w0")
#: Options that say how a file given with --ic is read.
_IC_FILE_OPTIONS = ("ic_format", "ic_columns", "ic_scale")


def _power_of_two(text: str) -> float:
    """Parse ``0.125``, ``2^-3`` or ``2**-3``."""
    t = text.strip().replace("**", "^")
    if t.startswith("2^"):
        return 2.0 ** float(t[2:])
    return float(t)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo run``."""
    p = sub.add_parser(
        "run", help="integrate a star cluster (block-step Hermite) and report energy conservation",
        description="Integrate a Plummer or King star cluster (optionally two-component, "
        "optionally with a central black hole), or the particles of a file (--ic), with the "
        "4th-, 6th- or 8th-order block-time-step Hermite integrator on the sapporo library; "
        "write summary.json, diagnostics.csv, snapshots and plots into --out. Ctrl-C or SIGTERM "
        "stops after the current block step and still writes the final snapshot and summary. "
        "Exit codes: 0 done, 1 a file not written or a device failure, 2 bad options, 130 "
        "interrupted.")
    g = p.add_argument_group("model")
    g.add_argument("--model", default=None, choices=MODELS,
                   help=f"the cluster model (default {DEFAULT_MODEL})")
    g.add_argument("--w0", type=float, default=None,
                   help=f"King model: central potential W0, {KING_W0_RANGE[0]:g} to "
                        f"{KING_W0_RANGE[1]:g} (default {DEFAULT_W0:g})")
    g.add_argument("--n", type=int, default=None, help=f"particles (default {DEFAULT_N})")
    g.add_argument("--seed", type=int, default=None, help="random seed (default 0)")
    g.add_argument("--eps", type=float, default=None,
                   help=f"Plummer softening length (default {DEFAULT_EPS:g})")
    g.add_argument("--bh-mass", type=float, default=None,
                   help="central black hole, fraction of the total mass (default 0: none)")
    g.add_argument("--heavy-fraction", type=float, default=None,
                   help="fraction of the stellar mass in heavy stars (default 0)")
    g.add_argument("--mass-ratio", type=float, default=None,
                   help=f"heavy/light star mass ratio (default {DEFAULT_MASS_RATIO:g})")
    g.add_argument("--ic-scaling", default=None, choices=("analytic", "exact"),
                   help="equal-mass models: analytic scaling to N-body units or exact "
                        f"rescaling to E = -1/4 (default {DEFAULT_IC_SCALING}; with a black hole "
                        "or two components: exact)")
    g = p.add_argument_group("initial conditions from a file (instead of a model)")
    g.add_argument("--ic", default=None, metavar="FILE",
                   help="start a new run at t = 0 from the particles of FILE (text columns, "
                        "banana, phiGRAPE, a snapshot or AMUSE HDF5; see --ic-format)")
    g.add_argument("--ic-format", default=None, choices=icfile.FORMATS,
                   help="the format of FILE (default auto: told apart by the content)")
    g.add_argument("--ic-columns", default=None, metavar="LIST",
                   help="the columns of a text file, comma-separated from "
                        f"{','.join(icfile.COLUMN_NAMES)} (skip: ignore that column); "
                        "default: 7 columns m,x,y,z,vx,vy,vz or 8 id,m,x,y,z,vx,vy,vz")
    g.add_argument("--ic-scale", default=None, choices=icfile.SCALES,
                   help="none: the values are N-body units (G = 1; the default); nbody: "
                        "change to Henon units keeping the virial ratio (AMUSE files in S.I.)")
    g = p.add_argument_group("integrator")
    g.add_argument("--order", type=int, default=None, help=f"4, 6 or 8 (default {DEFAULT_ORDER})")
    g.add_argument("--t-end", type=float, default=None,
                   help=f"end time in N-body units (default {DEFAULT_T_END:g})")
    g.add_argument("--eta", type=float, default=None,
                   help="accuracy parameter (default 0.01 for aarseth, 0.1 otherwise)")
    g.add_argument("--eta4", type=float, default=None,
                   help="Aarseth part of the average criterion (default 0.01)")
    g.add_argument("--criterion", default=None, choices=CRITERIA,
                   help="time-step criterion (default aarseth for order 4, generalised for 6, 8)")
    g.add_argument("--dt-min", type=_power_of_two, default=None,
                   help="smallest step, a power of two (default 2^-25)")
    g.add_argument("--dt-max", type=_power_of_two, default=None,
                   help="largest step, a power of two (default 2^-3)")
    g = p.add_argument_group("device")
    g.add_argument("--precision", default=None,
                   help=f"force precision: double or double-single (default {DEFAULT_PRECISION})")
    add_device_options(g)
    g.add_argument("--decomposition", default=None, choices=("j", "2d", "auto"),
                   help="under mpiexec: j-particles over ranks (j), a rows x columns grid (2d) "
                        "or by the rank count (auto, the default; SAPPORO_DECOMPOSITION)")
    g = p.add_argument_group("output")
    g.add_argument("--out", default="sapporo-run", help="output directory (default sapporo-run)")
    g.add_argument("--resume", default=None, metavar="SNAPSHOT",
                   help="continue from a snapshot (.npz or .h5) written by a previous run")
    g.add_argument("--snapshot-every", type=float, default=None, metavar="DT",
                   help="also write a snapshot every DT time units; a multiple of the "
                        "diagnostic interval (--log-every)")
    g.add_argument("--snapshot-format", default="npz", choices=("npz", "hdf5"),
                   help="snapshot file format (hdf5 needs h5py)")
    g.add_argument("--log-every", type=float, default=None, metavar="DT",
                   help="diagnostics (energy, radii) every DT time units (default dt_max/4, or "
                        "that of the resumed run; steps are capped at these times)")
    add_output_options(g)
    p.set_defaults(func=run)


def _value(args: argparse.Namespace, name: str, default: Any) -> Any:
    v = getattr(args, name)
    return default if v is None else v


def _check_args(args: argparse.Namespace) -> None:
    """Range checks of the options that do not depend on a snapshot."""
    if args.n is not None and args.n < 1:
        raise InputError(f"--n must be >= 1, got {args.n}")
    if args.seed is not None and args.seed < 0:
        raise InputError(f"--seed must be a non-negative integer, got {args.seed}")
    if args.order is not None and args.order not in (4, 6, 8):
        raise InputError(f"--order must be 4, 6 or 8, got {args.order}")
    if args.precision is not None:
        args.precision = command_precision(args.precision, "--precision")
    for name in ("t_end", "eta", "eta4", "snapshot_every", "log_every", "dt_min", "dt_max"):
        v = getattr(args, name)
        if v is not None and not (math.isfinite(v) and v > 0):
            raise InputError(f"--{name.replace('_', '-')} must be finite and > 0, got {v}")
        if v is not None and name.startswith("dt_") and math.frexp(v)[0] != 0.5:
            raise InputError(f"--{name.replace('_', '-')} must be a power of two such as 2^-3, "
                             f"got {v:g}")
    if args.dt_min is not None and args.dt_max is not None and args.dt_min > args.dt_max:
        raise InputError(f"--dt-min {args.dt_min:g} must be <= --dt-max {args.dt_max:g} "
                         "(dt_min <= dt_max)")
    if args.eps is not None and not (math.isfinite(args.eps) and args.eps >= 0):
        raise InputError(f"--eps must be finite and >= 0, got {args.eps}")
    for name in ("bh_mass", "heavy_fraction"):
        v = getattr(args, name)
        if v is not None and not (0.0 <= v < 1.0):
            raise InputError(f"--{name.replace('_', '-')} must be in [0, 1), got {v}")
    if args.mass_ratio is not None and not (math.isfinite(args.mass_ratio)
                                            and args.mass_ratio >= 1.0):
        raise InputError(f"--mass-ratio must be >= 1, got {args.mass_ratio}")
    if args.snapshot_format == "hdf5" and not h5py_available():
        raise InputError("--snapshot-format hdf5 needs h5py (pip install h5py)")
    _check_ic_args(args)


def _check_ic_args(args: argparse.Namespace) -> None:
    """Where the particles come from: a model (``--model`` and its options), a file
    (``--ic`` and its options) or a snapshot being continued (``--resume``), one only."""
    if args.ic is not None:
        if args.resume is not None:
            raise InputError("--ic and --resume exclude each other: --ic starts a new run "
                             "from a file, --resume continues a run from its snapshot")
        for name in _IC_OPTIONS:
            if getattr(args, name) is not None:
                hint = "; a file is scaled with --ic-scale" if name == "ic_scaling" else ""
                raise InputError(f"--{name.replace('_', '-')} cannot be combined with --ic "
                                 f"(the file gives the particles{hint})")
        if args.ic_columns is not None:
            if args.ic_format not in (None, "auto", "columns"):
                raise InputError(f"--ic-columns is for text columns, not --ic-format "
                                 f"{args.ic_format}")
            args.ic_columns = icfile.parse_columns(args.ic_columns)
        return
    for name in _IC_FILE_OPTIONS:
        if getattr(args, name) is not None:
            raise InputError(f"--{name.replace('_', '-')} needs --ic FILE")
    if args.w0 is not None:
        lo, hi = KING_W0_RANGE
        if not (math.isfinite(args.w0) and lo <= args.w0 <= hi):
            raise InputError(f"--w0 must be from {lo:g} to {hi:g}, got {args.w0}")
        if args.resume is None and args.model != "king":
            raise InputError("--w0 is the King model's W0; give --model king")


def _check_resume_meta(meta: dict[str, Any], path: str) -> None:
    """The run metadata of a snapshot that ``sapporo run`` uses must be finite numbers."""

    def number(value: Any) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))

    for name in ("energy0", "max_energy_error", "seed", "bh_mass", "heavy_fraction",
                 "mass_ratio", "w0"):
        value = meta.get(name)
        if value is not None and not number(value):
            raise InputError(f"snapshot {path}: meta.{name} must be a finite number, "
                             f"got {value!r}")
    if meta.get("seed") is not None and (meta["seed"] < 0 or meta["seed"] != int(meta["seed"])):
        raise InputError(f"snapshot {path}: meta.seed must be a non-negative integer, "
                         f"got {meta['seed']!r}")
    if "energy0" in meta:
        ang = meta.get("angular_momentum0")
        if not (isinstance(ang, list) and len(ang) == 3
                and all(number(c) for c in ang)):
            raise InputError(f"snapshot {path}: meta.angular_momentum0 must be 3 finite "
                             f"numbers, got {ang!r}")


def _check_output_times(t_start: float, t_end: float, dt_min: float, log_every: float,
                        args: argparse.Namespace) -> None:
    """Bound the end time and the number of diagnostic and snapshot times.

    Snapshots are written at diagnostic times, so ``--snapshot-every`` must be a multiple of
    the diagnostic interval: every snapshot then has its diagnostics row, and no extra stop
    times change the block steps.
    """
    limit = dt_min * 2.0**52  # block times k * dt_min are exact in float64 below this
    if t_end > limit:
        raise InputError(f"--t-end {t_end:g} is too large: block times on the dt_min grid "
                         f"({dt_min:g}) are exact only up to {limit:g}")
    for name, given, every in (("--log-every", args.log_every, log_every),
                               ("--snapshot-every", args.snapshot_every, args.snapshot_every)):
        if given is not None and given < dt_min:
            raise InputError(f"{name} {given:g} is below the smallest step dt_min {dt_min:g}")
        count = (t_end - t_start) / every if every else 0
        if count > MAX_OUTPUT_TIMES:
            raise InputError(
                f"{name} {every:g} from t = {t_start:g} to {t_end:g} gives {count:.3g} output "
                f"times, more than {MAX_OUTPUT_TIMES}; use a larger {name}"
                + (" or a smaller --t-end" if name == "--log-every" else "")
            )
    if args.snapshot_every is not None and not _is_multiple(args.snapshot_every, log_every):
        raise InputError(f"--snapshot-every {args.snapshot_every:g} is not a multiple of the "
                         f"diagnostic interval {log_every:g} (--log-every): snapshots are written "
                         "at diagnostic times")


def _check_resume_conflicts(args: argparse.Namespace, snap: Snapshot) -> None:
    """Options given with --resume must agree with the snapshot (exact continuation)."""
    current = {**{k: snap.params.get(k) for k in _TRAJECTORY_OPTIONS},
               **{k: snap.meta.get(k) for k in _IC_OPTIONS},
               "eps": math.sqrt(snap.params.get("eps2", 0.0)), "n": snap.n}
    for name in (*_TRAJECTORY_OPTIONS, *_IC_OPTIONS):
        given = getattr(args, name)
        have = current.get(name)
        if given is None or have is None:
            continue
        same = given == have if isinstance(given, str) else math.isclose(
            float(given), float(have), rel_tol=1e-12, abs_tol=0.0)
        if not same:
            raise InputError(f"--{name.replace('_', '-')} {given} conflicts with the snapshot "
                             f"({have}); omit it when resuming")


class _Progress:
    """The progress line of a run: rewritten on a TTY, a line every 10 s otherwise."""

    def __init__(self, stream: TextIO, t_start: float, t_end: float, enabled: bool) -> None:
        self.line = StatusLine(stream, quiet=not enabled)
        self.t_start, self.t_end = t_start, t_end
        self.interval = 0.25 if self.line.tty else 10.0
        self.start = self.last = time.monotonic()
        self.last_blocks = 0
        self.energy_error = float("nan")

    def eta(self, t: float, elapsed: float) -> str:
        """Time left, extrapolated from the simulated time covered so far."""
        done = t - self.t_start
        if done <= 0.0 or elapsed <= 0.0:
            return "ETA   ?"
        left = elapsed * max(self.t_end - t, 0.0) / done
        if left < 100.0:
            return f"ETA {left:4.0f} s"
        if left < 6000.0:
            return f"ETA {left / 60:4.1f} min"
        return f"ETA {left / 3600:4.1f} h"

    def __call__(self, integrator: HermiteIntegrator, force: bool = False) -> None:
        now = time.monotonic()
        if self.line.quiet or (not force and now - self.last < self.interval):
            return
        elapsed = now - self.start
        rate = (integrator.block_steps - self.last_blocks) / max(now - self.last, 1e-9)
        self.last, self.last_blocks = now, integrator.block_steps
        frac = min(1.0, integrator.time / self.t_end) if self.t_end > 0 else 1.0
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        self.line(f"[{bar}] t = {integrator.time:.4f}/{self.t_end:g}  "
                  f"{rate:7.0f} blocks/s  dE/E = {self.energy_error:.2e}  {elapsed:6.1f} s  "
                  f"{self.eta(integrator.time, elapsed)}{parallel.progress_note(integrator.lib)}")

    def done(self) -> None:
        self.line.done(keep=True)


class _Abort(KeyboardInterrupt):
    """A third signal: stop at once, without the final snapshot (the state may be mid-step)."""


class _Signals:
    """SIGINT and SIGTERM during a run: the first asks the integrator to stop after the
    current block step, and the final files are written with these signals blocked (a
    second one only prints a note); a third before the final writes aborts at once
    (:class:`_Abort`), keeping what is already on disk."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.count = 0
        self.name = ""
        self.integ: HermiteIntegrator | None = None
        self.finishing = False
        self._previous: dict[int, Any] = {}
        self._main = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> _Signals:
        if self._main:
            for sig in self.SIGNALS:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handler(self, signum: int, frame: Any) -> None:
        self.count += 1
        self.name = self.name or signal.Signals(signum).name
        if self.integ is not None:
            self.integ.request_stop()
        if self.finishing:
            return
        if self.count == 2:
            self.err.write("\nsapporo run: stopping after the current block step, then writing "
                           "the final snapshot and summary (a third signal aborts without "
                           "them)\n")
            self.err.flush()
        elif self.count >= 3:
            raise _Abort

    @contextmanager
    def blocked(self) -> Iterator[None]:
        """SIGINT and SIGTERM held back (delivered afterwards) while the final files are written."""
        self.finishing = True
        if not (self._main and hasattr(signal, "pthread_sigmask")):
            yield
            return
        old = signal.pthread_sigmask(signal.SIG_BLOCK, set(self.SIGNALS))
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _DiagnosticsFile:
    """``diagnostics.csv``, one flushed row per diagnostic time as the run goes. A failed
    write is reported once (naming the file); the rows stay in memory and :meth:`finish`
    writes the whole file again at the end."""

    def __init__(self, path: Path, fields: list[str], err: TextIO) -> None:
        self.path, self.fields, self.err = path, fields, err
        self.fh: TextIO | None = None
        self.error: str | None = None

    def _line(self, row: dict[str, float]) -> dict[str, str]:
        return {k: repr(float(row[k])) for k in self.fields}

    def _write(self, fh: TextIO, rows: list[dict[str, float]], header: bool = False) -> None:
        writer = csv.DictWriter(fh, fieldnames=self.fields)
        if header:
            writer.writeheader()
        writer.writerows(self._line(r) for r in rows)
        fh.flush()

    def start(self, rows: list[dict[str, float]]) -> None:
        """Create the file with the header and ``rows`` (kept from earlier in the run)."""
        try:
            self.fh = open(self.path, "w", newline="")  # noqa: SIM115  (closed in finish)
            self._write(self.fh, rows, header=True)
        except OSError as exc:
            self._fail(exc)

    def append(self, row: dict[str, float]) -> None:
        if self.fh is not None:
            try:
                self._write(self.fh, [row])
            except OSError as exc:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        reason = exc.strerror or str(exc) or type(exc).__name__
        self.error = f"{reason}: {self.path}"
        self.err.write(f"sapporo run: warning: cannot write {self.path} ({reason}); the "
                       "diagnostics are kept and written again at the end\n")
        self.err.flush()
        fh, self.fh = self.fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()

    def finish(self, rows: list[dict[str, float]]) -> str | None:
        """Close the file; rewrite it whole if a write failed. Returns an error or None."""
        if self.fh is not None:
            try:
                self.fh.close()
            except OSError as exc:
                self._fail(exc)
            self.fh = None
        if self.error is None:
            return None
        try:
            buf = io.StringIO()
            self._write(buf, rows, header=True)
            write_text_atomic(self.path, buf.getvalue())
        except OSError as exc:
            if exc.filename is None:
                exc.filename = str(self.path)
            return os_error_message(exc)
        self.error = None
        return None


def _diagnostic_times(t_start: float, t_end: float, every: float, grid: float) -> list[float]:
    """Multiples of ``every`` strictly after ``t_start`` up to ``t_end`` (which is last)."""
    times = []
    k = math.floor(t_start / every + 1e-9) + 1
    while k * every < t_end - 0.5 * grid:
        times.append(round(k * every / grid) * grid)
        k += 1
    times.append(round(t_end / grid) * grid)
    return times


def _relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b != 0.0 else abs(a - b)


def _output_bytes(n: int, t_start: float, t_end: float, log_every: float,
                  snap_every: float | None, plots: bool) -> int:
    """A generous estimate of what a run writes into ``--out`` (for the free-space check)."""
    per_snapshot = n * 8 * (6 * 3 + 5) + 8 * (n + 1) + 16384  # 6 vectors, 5 scalars
    count = 2  # the final snapshot, and its temporary copy while it is replaced
    if snap_every:
        count += int((t_end - t_start) / snap_every) + 1
    rows = int((t_end - t_start) / log_every) + 2
    return count * per_snapshot + rows * 400 + (2 << 20 if plots else 0) + 65536


RUN_FILE = "run.json"


def _check_resume_folder(out: Path, snap: Snapshot, path: str) -> None:
    """Refuse to resume into a folder whose diagnostics belong to another run (by the run
    id recorded in ``out/run.json``)."""
    if not ((out / "diagnostics.csv").exists() or (out / RUN_FILE).exists()):
        return
    try:
        data = json.loads((out / RUN_FILE).read_text())
    except (OSError, ValueError):
        data = None
    theirs = data.get("run_id") if isinstance(data, dict) else None
    theirs = theirs if isinstance(theirs, str) else None
    ours = snap.meta.get("run_id")
    if theirs is not None and theirs == ours:
        return
    raise InputError(f"--out {out} holds the diagnostics of another run (run "
                     f"{theirs or 'unknown'}) and the snapshot {path} is from run "
                     f"{ours or 'unknown'}; resume into the snapshot's own folder or a new one, so "
                     "that the two runs' diagnostics do not mix")


def run(args: argparse.Namespace) -> int:
    """Run the simulation; 0 on success, 1 when an output file could not be written, 2 for bad
    parameters, 130 after Ctrl-C or SIGTERM."""
    if parallel.under_mpi():  # one of several ranks of mpiexec: rank 0 writes and talks
        return parallel.run_cli(args, _run, "sapporo run")
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    err = sys.stderr
    _check_args(args)
    backend = config.parse_backend(args.backend, "--backend")
    devices = config.parse_devices(args.devices, "--devices")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a directory")

    snap: Snapshot | None = None
    ics: icfile.InitialConditions | None = None
    if args.resume is not None:
        snap = load_snapshot(args.resume)
        _check_resume_meta(snap.meta, args.resume)
        _check_resume_conflicts(args, snap)
        t_start = float(snap.time)
        meta = dict(snap.meta)
        dt_min = float(snap.params.get("dt_min", DT_MIN))
        dt_max = float(snap.params.get("dt_max", DT_MAX))
        n = snap.n
        # The diagnostic times cap the steps: keep those of the run being continued.
        default_log = float(meta.get("log_every", dt_max))
    else:
        t_start = 0.0
        meta = {}
        dt_min = float(_value(args, "dt_min", DT_MIN))
        dt_max = float(_value(args, "dt_max", DT_MAX))
        if args.ic is not None:
            ics = _read_initial_conditions(args)
            n = ics.n
        else:
            n = int(_value(args, "n", DEFAULT_N))
        default_log = dt_max * DEFAULT_LOG_FRACTION
    t_end = float(_value(args, "t_end", DEFAULT_T_END))
    if t_end <= t_start:
        raise InputError(f"--t-end {t_end:g} must be after the start time {t_start:g}")
    log_every = float(args.log_every) if args.log_every else default_log
    _check_output_times(t_start, t_end, dt_min, log_every, args)
    if snap is not None:
        _check_resume_folder(out, snap, args.resume)
    need = _output_bytes(n, t_start, t_end, log_every, args.snapshot_every, not args.no_plots)
    ensure_writable_dir(out, "--out", need_bytes=need)  # before the work, not after it

    lib_opts: dict[str, Any] = {"backend": backend, "devices": devices,
                                **parallel.library_options(args)}
    if snap is None:
        order = int(_value(args, "order", DEFAULT_ORDER))
        eps = float(_value(args, "eps", DEFAULT_EPS))
        if ics is not None:
            x, v, m, ids = ics.x, ics.v, ics.m, ics.ids
            meta = {"initial_conditions": ics.source}
        else:
            x, v, m, meta = _model(args, n)
            ids = None
    if snap is None or args.precision is not None:  # a resumed run: the snapshot's by default
        lib_opts["precision"] = _value(args, "precision", DEFAULT_PRECISION)
    if not args.quiet:  # what happens during the silent start
        err.write("sapporo run: opening the device and building the force kernels (the "
                  "first build of a variant can take a minute) ...\n")
        err.flush()
    startup0 = time.perf_counter()
    if snap is None:
        integ = HermiteIntegrator(  # criterion and eta: the integrator's defaults when None
            lib_opts, x, v, m, ids=ids, order=order, criterion=args.criterion, eta=args.eta,
            eta4=_value(args, "eta4", 0.01), eps2=eps * eps, dt_min=dt_min, dt_max=dt_max)
    else:
        integ = HermiteIntegrator.from_snapshot(snap, lib_opts)
        if args.precision is not None and args.precision != snap.params.get("precision"):
            err.write(f"note: the snapshot was run in {snap.params.get('precision')}, "
                      f"continuing in {args.precision}\n")
    meta.setdefault("run_id", uuid.uuid4().hex)
    meta["log_every"] = log_every
    startup = time.perf_counter() - startup0  # device, kernels, initial forces, first steps
    with integ:
        return _Run(args, integ, meta, t_start, t_end, log_every, out, startup).evolve()


def _read_initial_conditions(args: argparse.Namespace) -> icfile.InitialConditions:
    """The particles of ``--ic FILE``; a bad file is one InputError naming it."""
    try:
        return icfile.read(args.ic, format=args.ic_format or "auto", columns=args.ic_columns,
                           scale=args.ic_scale or "none")
    except InputError as exc:
        raise InputError(f"--ic {exc}") from None


def _model(args: argparse.Namespace, n: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """The model cluster of the options, and the run metadata that describes it."""
    model = _value(args, "model", DEFAULT_MODEL)
    seed = int(_value(args, "seed", 0))
    bh = float(_value(args, "bh_mass", 0.0))
    heavy = float(_value(args, "heavy_fraction", 0.0))
    ratio = float(_value(args, "mass_ratio", DEFAULT_MASS_RATIO))
    scaling = _value(args, "ic_scaling", DEFAULT_IC_SCALING)
    w0 = float(_value(args, "w0", DEFAULT_W0))
    x, v, m = star_cluster(n, seed, heavy_fraction=heavy, mass_ratio=ratio, bh_mass=bh,
                           exact=scaling == "exact", model=model, w0=w0)
    meta: dict[str, Any] = {"seed": seed, "bh_mass": bh, "heavy_fraction": heavy,
                            "mass_ratio": ratio, "ic_scaling": scaling, "model": model,
                            "w0": w0 if model == "king" else None}
    meta["initial_conditions"] = {"model": model, "n": n, **{k: meta[k] for k in (
        "w0", "seed", "bh_mass", "heavy_fraction", "mass_ratio", "ic_scaling")
        if meta[k] is not None}}
    return x, v, m, meta


class _Run:
    """One integration: the diagnostics as it goes, then the final snapshot, diagnostics,
    summary and plots. A file that cannot be written is reported, naming it, and the others
    are still written (exit code 1)."""

    def __init__(self, args: argparse.Namespace, integ: HermiteIntegrator,
                 meta: dict[str, Any], t_start: float, t_end: float, every: float, out: Path,
                 startup: float) -> None:
        self.args, self.integ, self.meta, self.out = args, integ, meta, out
        self.t_start, self.t_end, self.every, self.startup = t_start, t_end, every, startup
        self.ext = ".h5" if args.snapshot_format == "hdf5" else ".npz"
        self.fields = ["time", "energy", "energy_error", "angular_momentum_error",
                       *[f"r_lagr_{int(100 * f)}" for f in LAGRANGE_FRACTIONS],
                       "block_steps", "steps", "wall_seconds"]
        self.rows: list[dict[str, float]] = []
        self.snapshots: list[str] = []
        self.write_errors: list[str] = []
        self.progress = _Progress(sys.stderr, t_start, t_end, enabled=not args.quiet)
        self.diag_file = _DiagnosticsFile(out / "diagnostics.csv", self.fields, sys.stderr)

    def failed(self, what: str, problem: str) -> None:
        self.write_errors.append(problem)
        sys.stderr.write(f"sapporo run: error: {what} not written ({problem})\n")

    def diagnose(self, energy_terms: tuple[float, float] | None = None) -> dict[str, float]:
        """A row of diagnostics.csv, now."""
        integ = self.integ
        k, w = energy_terms if energy_terms is not None else integ.energy_terms()
        e = k + w
        x, v, _ = integ.predicted()
        ang = integ.angular_momentum()
        lscale = float(np.sum(integ.m * np.linalg.norm(np.cross(x, v), axis=1)))
        row = {
            "time": integ.time, "energy": e, "energy_error": _relative(e, self.e0),
            "angular_momentum_error": float(np.linalg.norm(ang - self.l0)) / max(lscale, 1e-300),
            **{f"r_lagr_{int(100 * f)}": float(r) for f, r in
               zip(LAGRANGE_FRACTIONS, lagrangian_radii(x, integ.m, LAGRANGE_FRACTIONS),
                   strict=True)},
            "block_steps": integ.block_steps, "steps": integ.steps,
            "wall_seconds": time.perf_counter() - self.wall0,
        }
        self.meta["max_energy_error"] = max(float(self.meta.get("max_energy_error", 0.0)),
                                            row["energy_error"])
        self.rows.append(row)
        self.diag_file.append(row)
        self.progress.energy_error = row["energy_error"]
        return row

    def evolve(self) -> int:
        args, integ, meta, out, err = self.args, self.integ, self.meta, self.out, sys.stderr
        if not args.quiet:
            sys.stdout.write(
                f"sapporo run: {integ.n} particles, order {integ.order}, {integ.precision}, "
                f"criterion {integ.criterion} (eta {integ.eta:g}"
                + (f", eta4 {integ.eta4:g}" if integ.criterion == "average" else "")
                + f"), eps {math.sqrt(integ.eps2):g}, t = {self.t_start:g} -> {self.t_end:g}\n"
                f"device: {integ.device_name} ({getattr(integ.lib, 'backend_name', '?')})\n")
            sys.stdout.flush()
        self.wall0 = time.perf_counter()
        k0, w0 = integ.energy_terms()
        if "energy0" not in meta:
            meta["energy0"] = k0 + w0
            meta["angular_momentum0"] = [float(c) for c in integ.angular_momentum()]
            meta["max_energy_error"] = 0.0
        self.e0 = float(meta["energy0"])
        self.l0 = np.asarray(meta["angular_momentum0"], dtype=np.float64)
        integ.meta = meta
        self.c0 = integ.counters
        self.c0.update(parallel.run_report(integ.lib))  # MPI: communication before the run
        if args.resume is not None and self.diag_file.path.is_file():
            # The folder is this run's (checked before the work): keep its earlier rows.
            with open(self.diag_file.path, newline="") as fh:
                self.rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)
                             if float(r["time"]) < self.t_start - 0.5 * integ.dt_min]
        write_text_atomic(out / RUN_FILE, json.dumps(
            {"run_id": meta["run_id"], "n": integ.n, "order": integ.order,
             "precision": integ.precision, "seed": meta.get("seed")}, indent=2) + "\n")
        self.diag_file.start(self.rows)
        snap_every = float(args.snapshot_every) if args.snapshot_every else None
        interrupted = False
        try:
            with _Signals(err) as signals:
                signals.integ = integ
                last = self.diagnose((k0, w0))
                try:
                    for t_k in _diagnostic_times(self.t_start, self.t_end, self.every,
                                                 integ.dt_min):
                        if signals.count:  # a signal asked the run to stop
                            raise KeyboardInterrupt
                        integ.evolve(t_k, callback=self.progress)
                        last = self.diagnose()
                        self.progress(integ, force=True)
                        if snap_every and t_k < self.t_end and _is_multiple(t_k, snap_every):
                            self.periodic_snapshot(out / f"snapshot_t{t_k:010.5f}{self.ext}")
                except _Abort:
                    raise
                except KeyboardInterrupt:
                    interrupted = True
                with signals.blocked():
                    self.progress.done()
                    if interrupted:
                        by = f" by {signals.name}" if signals.name else ""
                        err.write(f"sapporo run: interrupted at t = {integ.time:.6g}{by}; "
                                  "writing the final snapshot and summary\n")
                        if integ.time > last["time"]:
                            last = self.diagnose()
                    summary = self.finish(last, interrupted)
        except _Abort:
            self.progress.done()
            self.diag_file.finish(self.rows)
            err.write("sapporo run: aborted; the final snapshot and summary were not written "
                      f"(diagnostics.csv and the periodic snapshots in {out} are kept)\n")
            return 130
        except BaseException:  # a device or input failure: the rows so far stay on disk
            self.diag_file.finish(self.rows)
            raise
        plots = [] if args.no_plots else self.plots()
        if not args.quiet and summary is not None:
            _print_summary(sys.stdout, summary, out, plots)
        if self.write_errors:
            return 1
        return 130 if interrupted else 0

    def periodic_snapshot(self, target: Path) -> None:
        try:
            self.snapshots.append(str(save_snapshot(target, self.integ.state())))
        except OSError as exc:
            msg = os_error_message(exc)
            self.write_errors.append(msg)
            sys.stderr.write(f"sapporo run: warning: periodic snapshot not written ({msg}); "
                             "the run continues\n")

    def finish(self, last: dict[str, float], interrupted: bool) -> dict[str, Any] | None:
        """Write the final snapshot, the diagnostics and the summary; the summary, None
        when it could not be written."""
        wall = time.perf_counter() - self.wall0
        final: str | None = None
        try:
            final = str(save_snapshot(self.out / f"snapshot_final{self.ext}",
                                      self.integ.state()))
        except OSError as exc:
            self.failed("final snapshot", os_error_message(exc))
        problem = self.diag_file.finish(self.rows)
        if problem is not None:
            self.failed("diagnostics", problem)
        summary = self.summary(last, interrupted, final, wall)
        try:
            write_summary(self.out, "run", summary)
        except OSError as exc:
            self.failed("summary", os_error_message(exc))
            return None
        return summary

    def summary(self, last: dict[str, float], interrupted: bool, final: str | None,
                wall: float) -> dict[str, Any]:
        integ, meta, c0, c1 = self.integ, self.meta, self.c0, self.integ.counters
        steps, blocks, inter = (c1[k] - c0[k] for k in ("steps", "block_steps", "interactions"))
        return {
            "n": integ.n, "order": integ.order, "precision": integ.precision,
            "device": integ.device_name, "backend": getattr(integ.lib, "backend_name", None),
            "t_start": self.t_start, "t_end": integ.time, "t_end_requested": self.t_end,
            "energy_error": last["energy_error"],
            "max_energy_error": float(meta["max_energy_error"]),
            "angular_momentum_error": last["angular_momentum_error"],
            "steps": steps, "block_steps": blocks,
            "mean_n_active": steps / blocks if blocks else 0.0,
            "wall_seconds": wall, "interactions": inter,
            "interactions_per_second": inter / wall if wall > 0 else 0.0,
            **{k: c1[k] - c0[k] for k in ("library_seconds", "integrator_seconds")},
            "startup_seconds": self.startup,
            "block_steps_per_second": blocks / wall if wall > 0 else 0.0,
            "criterion": integ.criterion, "eta": integ.eta, "eta4": integ.eta4,
            "eps": math.sqrt(integ.eps2), "dt_min": integ.dt_min, "dt_max": integ.dt_max,
            "log_every": meta.get("log_every"),
            "energy_initial": meta["energy0"], "energy_final": last["energy"],
            **{k: meta.get(k) for k in ("seed", "bh_mass", "heavy_fraction", "mass_ratio",
                                        "ic_scaling", "model", "w0", "initial_conditions",
                                        "run_id")},
            "resumed_from": self.args.resume, "interrupted": interrupted,
            "total_steps": c1["steps"], "total_block_steps": c1["block_steps"],
            "snapshot": final, "snapshots": self.snapshots,
            "write_errors": list(self.write_errors),
            **{k: v - c0[k] if k in ("communication_seconds", "collectives") and k in c0 else v
               for k, v in parallel.run_report(integ.lib).items()},  # this run's share
        }

    def plots(self) -> list[str]:
        from sapporo.perf import plots

        if not plots.available():
            sys.stderr.write("sapporo run: matplotlib is not installed, skipping plots "
                             "(pip install matplotlib)\n")
            return []
        integ, seed = self.integ, self.meta.get("seed")
        title = (f"N = {integ.n}, order {integ.order}, {integ.precision}, eta {integ.eta:g}, "
                 f"eps {math.sqrt(integ.eps2):g}" + (f", seed {seed}" if seed is not None else ""))
        diag = {k: np.array([r[k] for r in self.rows]) for k in self.fields}
        try:
            return [str(q) for q in plots.plot_run(self.out, diag, integ.n_active_counts, title)]
        except OSError as exc:
            self.failed("plots", os_error_message(exc))
            return []


def _describe_ic(source: dict[str, Any] | None) -> str:
    """``King model (W0 = 6), seed 0`` or ``cluster.txt (banana)``, for the summary table."""
    if not source:
        return "unknown (a snapshot of an older sapporo)"
    if "file" in source:
        return f"{Path(source['file']).name} ({source['format']}" + (
            ", scaled to N-body units)" if source.get("scale") == "nbody" else ")")
    model = "King model" if source.get("model") == "king" else "Plummer model"
    if source.get("w0") is not None:
        model += f" (W0 = {source['w0']:g})"
    return f"{model}, seed {source.get('seed')}"


def _is_multiple(t: float, every: float) -> bool:
    q = t / every
    return abs(q - round(q)) < 1e-9


def _print_summary(w: TextIO, s: dict[str, Any], out: Path, plots: list[str]) -> None:
    rows = [
        ("particles", f"{s['n']}"),
        ("initial conditions", _describe_ic(s.get("initial_conditions"))),
        ("order / precision", f"{s['order']} / {s['precision']}"),
        ("device", s["device"]),
        ("criterion (eta)", f"{s['criterion']} ({s['eta']:g})"),
        ("time", f"{s['t_start']:g} -> {s['t_end']:g}"
         + ("  (interrupted)" if s["interrupted"] else "")),
        ("energy error (final)", f"{s['energy_error']:.3e}"),
        ("energy error (max)", f"{s['max_energy_error']:.3e}"),
        ("angular momentum error", f"{s['angular_momentum_error']:.3e}"),
        ("block steps", f"{s['block_steps']}"),
        ("particle steps", f"{s['steps']}"),
        ("mean active particles", f"{s['mean_n_active']:.1f}"),
        ("wall time", f"{s['wall_seconds']:.1f} s (library {s['library_seconds']:.1f} s, "
         f"integrator {s['integrator_seconds']:.1f} s; start-up "
         f"{s['startup_seconds']:.1f} s before it)"),
        ("block steps / s", f"{s['block_steps_per_second']:.0f}"),
        ("interactions / s", f"{s['interactions_per_second']:.3e}"),
    ]
    width = max(len(k) for k, _ in rows)
    w.write("\n" + "".join(f"  {k:<{width}}  {v}\n" for k, v in rows))
    files = ["summary.json", "diagnostics.csv"]
    if s["snapshot"]:
        files.append(Path(s["snapshot"]).name)
    w.write(f"\nwritten to {out}/: " + ", ".join(files + [Path(q).name for q in plots]) + "\n")
    w.writelines(f"  NOT written: {problem}\n" for problem in s["write_errors"])
    w.flush()
