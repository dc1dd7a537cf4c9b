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
from sapporo.cli import add_device_options, ensure_writable_dir, os_error_message
from sapporo.errors import ConfigError, InputError
from sapporo.nbody import icfile
from sapporo.nbody.fileio import write_text_atomic
from sapporo.nbody.hermite import CRITERIA, DT_MAX, DT_MIN, HermiteIntegrator, default_eta
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


# --------------------------------------------------------------------------- arguments


def _power_of_two(text: str) -> float:
    """Parse ``0.125``, ``2^-3`` or ``2**-3``."""
    t = text.strip().replace("**", "^")
    if t.startswith("2^"):
        return 2.0 ** float(t[2:])
    return float(t)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo run``."""
    p = sub.add_parser(
        "run",
        help="integrate a star cluster (block-step Hermite) and report energy conservation",
        description=(
            "Integrate a Plummer or King star cluster (optionally two-component, optionally "
            "with a central black hole), or the particles of a file (--ic), with the 4th-, "
            "6th- or 8th-order block-time-step Hermite "
            "integrator on the sapporo library; write summary.json, diagnostics.csv, "
            "snapshots and plots into --out. Ctrl-C or SIGTERM stops after the current block "
            "step and still writes the final snapshot and summary. Exit codes: 0 done, 1 a "
            "file not written or a device failure, 2 bad options, 130 interrupted."
        ),
    )
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
                   help="equal-mass Plummer or King model: analytic scaling to N-body units "
                        "(energy -1/4 up to the sampling noise) or exact rescaling to E = -1/4 "
                        f"(default {DEFAULT_IC_SCALING}; clusters with a black hole or two "
                        "components are always exact)")
    g = p.add_argument_group("initial conditions from a file (instead of a model)")
    g.add_argument("--ic", default=None, metavar="FILE",
                   help="start a new run at t = 0 from the particles of FILE: text columns, "
                        "Phantom-GRAPE banana or phiGRAPE input, a sapporo snapshot or an "
                        "AMUSE HDF5 particle set (see --ic-format)")
    g.add_argument("--ic-format", default=None, choices=icfile.FORMATS,
                   help="the format of FILE (default auto: told apart by the content)")
    g.add_argument("--ic-columns", default=None, metavar="LIST",
                   help="the columns of a text file, comma-separated from "
                        f"{','.join(icfile.COLUMN_NAMES)} (skip: ignore that column); "
                        "default: 7 columns m,x,y,z,vx,vy,vz or 8 id,m,x,y,z,vx,vy,vz")
    g.add_argument("--ic-scale", default=None, choices=icfile.SCALES,
                   help="none: take the values as N-body units (G = 1; the default); nbody: "
                        "change to Henon units (M = 1, E = -1/4, centre of mass at rest), "
                        "keeping the virial ratio (needed for AMUSE files in S.I. units)")
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
                   help="under mpiexec: how the ranks share the forces, j-particles over ranks "
                        "(j), a rows x columns grid (2d) or chosen by the rank count (auto, "
                        "the default; SAPPORO_DECOMPOSITION); see docs/parallel.md")
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
                   help="diagnostics (energy, radii) every DT time units (default dt_max/4, "
                        "or that of the resumed run; the steps of the slowest particles are "
                        "capped at these times, multiples of dt_max change nothing)")
    g.add_argument("--quiet", action="store_true", help="no progress and no summary table")
    g.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    p.set_defaults(func=run)


# --------------------------------------------------------------------------- helpers


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
        args.precision = config.parse_precision(args.precision, "--precision")
    for name in ("t_end", "eta", "eta4", "snapshot_every", "log_every", "dt_min", "dt_max"):
        v = getattr(args, name)
        if v is not None and not (math.isfinite(v) and v > 0):
            raise InputError(f"--{name.replace('_', '-')} must be finite and > 0, got {v}")
    for name in ("dt_min", "dt_max"):
        v = getattr(args, name)
        if v is not None and math.frexp(v)[0] != 0.5:
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
    for name, every in (("--log-every", args.log_every), ("--snapshot-every",
                                                          args.snapshot_every)):
        if every is None:
            if name == "--snapshot-every":
                continue
            every = log_every
        elif every < dt_min:
            raise InputError(f"{name} {every:g} is below the smallest step dt_min {dt_min:g}")
        count = (t_end - t_start) / every
        if count > MAX_OUTPUT_TIMES:
            raise InputError(
                f"{name} {every:g} from t = {t_start:g} to {t_end:g} gives {count:.3g} output "
                f"times, more than {MAX_OUTPUT_TIMES}; use a larger {name}"
                + (" or a smaller --t-end" if name == "--log-every" else "")
            )
    if args.snapshot_every is not None and not _is_multiple(args.snapshot_every, log_every):
        raise InputError(
            f"--snapshot-every {args.snapshot_every:g} is not a multiple of the diagnostic "
            f"interval {log_every:g} (--log-every): snapshots are written at diagnostic times"
        )


def _check_resume_conflicts(args: argparse.Namespace, snap: Snapshot) -> None:
    """Options given with --resume must agree with the snapshot (exact continuation)."""
    p, meta = snap.params, snap.meta
    current = {
        "order": p.get("order"), "eta": p.get("eta"), "eta4": p.get("eta4"),
        "criterion": p.get("criterion"), "eps": math.sqrt(p.get("eps2", 0.0)),
        "dt_min": p.get("dt_min"), "dt_max": p.get("dt_max"), "n": snap.n,
        "seed": meta.get("seed"), "bh_mass": meta.get("bh_mass"),
        "heavy_fraction": meta.get("heavy_fraction"), "mass_ratio": meta.get("mass_ratio"),
        "ic_scaling": meta.get("ic_scaling"), "model": meta.get("model"),
        "w0": meta.get("w0"),
    }
    for name in (*_TRAJECTORY_OPTIONS, *_IC_OPTIONS):
        given = getattr(args, name)
        have = current.get(name)
        if given is None or have is None:
            continue
        same = given == have if isinstance(given, str) else math.isclose(
            float(given), float(have), rel_tol=1e-12, abs_tol=0.0)
        if not same:
            raise InputError(
                f"--{name.replace('_', '-')} {given} conflicts with the snapshot ({have}); "
                "omit it when resuming"
            )


class _Progress:
    """A one-line progress display: rewritten with \\r on a TTY, periodic lines otherwise."""

    def __init__(self, stream: TextIO, t_start: float, t_end: float, enabled: bool) -> None:
        self.stream = stream
        self.t_start = t_start
        self.t_end = t_end
        self.enabled = enabled
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.interval = 0.25 if self.tty else 10.0
        self.start = time.monotonic()
        self.last = self.start
        self.last_blocks = 0
        self.energy_error = float("nan")
        self.width = 0

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
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        elapsed = now - self.start
        rate = (integrator.block_steps - self.last_blocks) / max(now - self.last, 1e-9)
        self.last, self.last_blocks = now, integrator.block_steps
        frac = min(1.0, integrator.time / self.t_end) if self.t_end > 0 else 1.0
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        line = (
            f"[{bar}] t = {integrator.time:.4f}/{self.t_end:g}  "
            f"{rate:7.0f} blocks/s  dE/E = {self.energy_error:.2e}  {elapsed:6.1f} s  "
            f"{self.eta(integrator.time, elapsed)}{parallel.progress_note(integrator.lib)}"
        )
        if self.tty:
            pad = max(0, self.width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()


class _Abort(KeyboardInterrupt):
    """A third signal: stop at once, without the final snapshot (the state may be mid-step)."""


class _Signals:
    """SIGINT and SIGTERM during a run.

    The first one asks the integrator to stop after the current block step; the run then
    writes its final snapshot, diagnostics and summary with these signals blocked, so a
    second one cannot cut them short (it only prints a note). A third one before the final
    writes aborts at once (:class:`_Abort`), keeping what is already on disk.
    """

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

    @property
    def stopping(self) -> bool:
        """Whether a signal asked the run to stop."""
        return self.count > 0

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
    """``diagnostics.csv``, one flushed row per diagnostic time as the run goes.

    A failed write is reported once (naming the file); the rows stay in memory and
    :meth:`finish` writes the whole file again at the end.
    """

    def __init__(self, path: Path, fields: list[str], err: TextIO) -> None:
        self.path = path
        self.fields = fields
        self.err = err
        self.fh: TextIO | None = None
        self.writer: Any = None
        self.error: str | None = None

    def _line(self, row: dict[str, float]) -> dict[str, str]:
        return {k: repr(float(row[k])) for k in self.fields}

    def start(self, rows: list[dict[str, float]]) -> None:
        """Create the file with the header and ``rows`` (kept from earlier in the run)."""
        try:
            self.fh = open(self.path, "w", newline="")  # noqa: SIM115  (closed in finish)
            self.writer = csv.DictWriter(self.fh, fieldnames=self.fields)
            self.writer.writeheader()
            for r in rows:
                self.writer.writerow(self._line(r))
            self.fh.flush()
        except OSError as exc:
            self._fail(exc)

    def append(self, row: dict[str, float]) -> None:
        if self.fh is None:
            return
        try:
            self.writer.writerow(self._line(row))
            self.fh.flush()
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        reason = exc.strerror or str(exc) or type(exc).__name__
        self.error = f"{reason}: {self.path}"
        self.err.write(f"sapporo run: warning: cannot write {self.path} ({reason}); the "
                       "diagnostics are kept and written again at the end\n")
        self.err.flush()
        self._close()

    def _close(self) -> None:
        fh, self.fh = self.fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()

    def finish(self, rows: list[dict[str, float]]) -> str | None:
        """Close the file; rewrite it whole if a write failed. Returns an error or None."""
        if self.fh is not None:
            try:
                self.fh.flush()
                self.fh.close()
            except OSError as exc:
                self._fail(exc)
            self.fh = None
        if self.error is None:
            return None
        try:
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=self.fields)
            writer.writeheader()
            for r in rows:
                writer.writerow(self._line(r))
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
    per_snapshot = n * 8 * (len(_SNAPSHOT_VECTORS) * 3 + 5) + 8 * (n + 1) + 16384
    count = 2  # the final snapshot, and its temporary copy while it is replaced
    if snap_every:
        count += int((t_end - t_start) / snap_every) + 1
    rows = int((t_end - t_start) / log_every) + 2
    return count * per_snapshot + rows * 400 + (2 << 20 if plots else 0) + 65536


_SNAPSHOT_VECTORS = ("x", "v", "a", "jerk", "snap", "crackle")
RUN_FILE = "run.json"


def _folder_run_id(out: Path) -> str | None:
    """The run id recorded in ``out/run.json`` (None when absent or unreadable)."""
    try:
        data = json.loads((out / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    rid = data.get("run_id") if isinstance(data, dict) else None
    return rid if isinstance(rid, str) else None


def _check_resume_folder(out: Path, snap: Snapshot, path: str) -> None:
    """Refuse to resume into a folder whose diagnostics belong to another run."""
    if not ((out / "diagnostics.csv").exists() or (out / RUN_FILE).exists()):
        return
    theirs = _folder_run_id(out)
    ours = snap.meta.get("run_id")
    if theirs is not None and theirs == ours:
        return
    raise InputError(
        f"--out {out} holds the diagnostics of another run (run {theirs or 'unknown'}) and "
        f"the snapshot {path} is from run {ours or 'unknown'}; resume into the snapshot's "
        "own folder or a new one, so that the two runs' diagnostics do not mix"
    )


# --------------------------------------------------------------------------- the command


def run(args: argparse.Namespace) -> int:
    """Run the simulation; 0 on success, 1 when an output file could not be written, 2 for bad
    parameters, 130 after Ctrl-C or SIGTERM."""
    if parallel.under_mpi():  # one of several ranks of mpiexec: rank 0 writes and talks
        return parallel.run_cli(args, _run, "sapporo run")
    err = sys.stderr
    try:
        return _run(args)
    except (InputError, ConfigError) as exc:
        err.write(f"sapporo run: error: {exc}\n")
        return 2


def _run(args: argparse.Namespace) -> int:
    out_stream = sys.stdout
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
    if snap is not None:
        if args.precision is not None:
            lib_opts["precision"] = args.precision
        _building(args, err)
        startup0 = time.perf_counter()
        integ = HermiteIntegrator.from_snapshot(snap, lib_opts)
        if args.precision is not None and args.precision != snap.params.get("precision"):
            err.write(f"note: the snapshot was run in {snap.params.get('precision')}, "
                      f"continuing in {args.precision}\n")
        meta.setdefault("run_id", uuid.uuid4().hex)
    else:
        order = int(_value(args, "order", DEFAULT_ORDER))
        criterion = args.criterion or ("aarseth" if order == 4 else "generalised")
        eps = float(_value(args, "eps", DEFAULT_EPS))
        if ics is not None:
            x, v, m, ids = ics.x, ics.v, ics.m, ics.ids
            meta = {"initial_conditions": ics.source}
        else:
            x, v, m, meta = _model(args, n)
            ids = None
        lib_opts["precision"] = _value(args, "precision", DEFAULT_PRECISION)
        _building(args, err)
        startup0 = time.perf_counter()
        integ = HermiteIntegrator(
            lib_opts, x, v, m, ids=ids, order=order, criterion=criterion,
            eta=_value(args, "eta", default_eta(criterion, order)),
            eta4=_value(args, "eta4", 0.01), eps2=eps * eps,
            dt_min=_value(args, "dt_min", DT_MIN), dt_max=_value(args, "dt_max", DT_MAX),
        )
        meta["run_id"] = uuid.uuid4().hex
    meta["log_every"] = log_every
    startup = time.perf_counter() - startup0  # device, kernels, initial forces, first steps
    with integ:
        return _evolve(args, integ, meta, t_start, t_end, log_every, out, out_stream, err,
                       startup)


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
    if model != "king":
        w0 = None
    meta: dict[str, Any] = {"seed": seed, "bh_mass": bh, "heavy_fraction": heavy,
                            "mass_ratio": ratio, "ic_scaling": scaling, "model": model,
                            "w0": w0}
    meta["initial_conditions"] = {"model": model, "n": n, **{k: meta[k] for k in (
        "w0", "seed", "bh_mass", "heavy_fraction", "mass_ratio", "ic_scaling")
        if meta[k] is not None}}
    return x, v, m, meta


def _building(args: argparse.Namespace, err: TextIO) -> None:
    """Say what happens during the silent start (device, kernel build)."""
    if not args.quiet:
        err.write("sapporo run: opening the device and building the force kernels (the "
                  "first build of a variant can take a minute) ...\n")
        err.flush()


def _evolve(args: argparse.Namespace, integ: HermiteIntegrator, meta: dict[str, Any],
            t_start: float, t_end: float, every: float, out: Path, out_stream: TextIO,
            err: TextIO, startup: float) -> int:
    quiet = bool(args.quiet)
    p = integ.params
    eps = math.sqrt(integ.eps2)
    if not quiet:
        out_stream.write(
            f"sapporo run: {integ.n} particles, order {integ.order}, {integ.precision}, "
            f"criterion {integ.criterion} (eta {integ.eta:g}"
            + (f", eta4 {integ.eta4:g}" if integ.criterion == "average" else "")
            + f"), eps {eps:g}, t = {t_start:g} -> {t_end:g}\n"
            f"device: {integ.device_name} ({getattr(integ.lib, 'backend_name', '?')})\n"
        )
        out_stream.flush()

    wall0 = time.perf_counter()
    k0, w0 = integ.energy_terms()
    if "energy0" not in meta:
        meta["energy0"] = k0 + w0
        meta["angular_momentum0"] = [float(c) for c in integ.angular_momentum()]
        meta["max_energy_error"] = 0.0
    e0 = float(meta["energy0"])
    l0 = np.asarray(meta["angular_momentum0"], dtype=np.float64)
    integ.meta = meta
    c0 = integ.counters
    c0.update(parallel.run_report(integ.lib))  # MPI: communication before the run

    snap_every = float(args.snapshot_every) if args.snapshot_every else None
    ext = ".h5" if args.snapshot_format == "hdf5" else ".npz"
    fields = ["time", "energy", "energy_error", "angular_momentum_error",
              *[f"r_lagr_{int(100 * f)}" for f in LAGRANGE_FRACTIONS],
              "block_steps", "steps", "wall_seconds"]
    rows: list[dict[str, float]] = []
    csv_path = out / "diagnostics.csv"
    if args.resume is not None and csv_path.is_file():
        # The folder is this run's (checked before the work): keep its earlier rows.
        with open(csv_path, newline="") as fh:
            rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)
                    if float(r["time"]) < t_start - 0.5 * integ.dt_min]
    write_text_atomic(out / RUN_FILE, json.dumps(
        {"run_id": meta["run_id"], "n": integ.n, "order": integ.order,
         "precision": integ.precision, "seed": meta.get("seed")}, indent=2) + "\n")
    diag_file = _DiagnosticsFile(csv_path, fields, err)
    diag_file.start(rows)

    def diagnose(energy_terms: tuple[float, float] | None = None) -> dict[str, float]:
        k, w = energy_terms if energy_terms is not None else integ.energy_terms()
        e = k + w
        x, v, _ = integ.predicted()
        ang = integ.angular_momentum()
        lscale = float(np.sum(integ.m * np.linalg.norm(np.cross(x, v), axis=1)))
        row = {
            "time": integ.time, "energy": e, "energy_error": _relative(e, e0),
            "angular_momentum_error": float(np.linalg.norm(ang - l0)) / max(lscale, 1e-300),
            **{f"r_lagr_{int(100 * f)}": float(r) for f, r in
               zip(LAGRANGE_FRACTIONS, lagrangian_radii(x, integ.m, LAGRANGE_FRACTIONS),
                   strict=True)},
            "block_steps": integ.block_steps, "steps": integ.steps,
            "wall_seconds": time.perf_counter() - wall0,
        }
        meta["max_energy_error"] = max(float(meta.get("max_energy_error", 0.0)),
                                       row["energy_error"])
        rows.append(row)
        diag_file.append(row)
        return row

    progress = _Progress(err, t_start, t_end, enabled=not quiet)
    interrupted = False
    snapshots: list[str] = []
    write_errors: list[str] = []
    try:
        with _Signals(err) as signals:
            signals.integ = integ
            last = diagnose((k0, w0))
            progress.energy_error = last["energy_error"]
            try:
                for t_k in _diagnostic_times(t_start, t_end, every, integ.dt_min):
                    if signals.stopping:
                        raise KeyboardInterrupt
                    integ.evolve(t_k, callback=progress)
                    last = diagnose()
                    progress.energy_error = last["energy_error"]
                    progress(integ, force=True)
                    if snap_every and t_k < t_end and _is_multiple(t_k, snap_every):
                        target = out / f"snapshot_t{t_k:010.5f}{ext}"
                        try:
                            snapshots.append(str(save_snapshot(target, integ.state())))
                        except OSError as exc:
                            msg = os_error_message(exc)
                            write_errors.append(msg)
                            err.write(f"sapporo run: warning: periodic snapshot not written "
                                      f"({msg}); the run continues\n")
            except _Abort:
                raise
            except KeyboardInterrupt:
                interrupted = True
            with signals.blocked():
                progress.done()
                if interrupted:
                    by = f" by {signals.name}" if signals.name else ""
                    err.write(f"sapporo run: interrupted at t = {integ.time:.6g}{by}; writing "
                              "the final snapshot and summary\n")
                    if integ.time > last["time"]:
                        last = diagnose()
                wall = time.perf_counter() - wall0
                final = _finish(args, integ, meta, rows, last, c0, t_start, t_end, wall, eps,
                                p, out, ext, snapshots, write_errors, interrupted, diag_file,
                                err, startup)
    except _Abort:
        progress.done()
        diag_file.finish(rows)
        err.write("sapporo run: aborted; the final snapshot and summary were not written "
                  f"(diagnostics.csv and the periodic snapshots in {out} are kept)\n")
        return 130
    except BaseException:  # a device or input failure: the rows so far stay on disk
        diag_file.finish(rows)
        raise
    summary, summary_ok = final

    plots: list[str] = []
    if not args.no_plots:
        from sapporo.perf import plots as _plots

        if _plots.available():
            diag = {k: np.array([r[k] for r in rows]) for k in fields}
            title = _plot_title(integ, meta)
            try:
                plots = [str(q) for q in _plots.plot_run(out, diag, integ.n_active_counts,
                                                         title)]
            except OSError as exc:
                write_errors.append(os_error_message(exc))
                err.write(f"sapporo run: error: plots not written ({write_errors[-1]})\n")
        else:
            err.write("sapporo run: matplotlib is not installed, skipping plots "
                      "(pip install matplotlib)\n")
    if not quiet and summary_ok:
        _print_summary(out_stream, summary, out, plots)
    if write_errors:
        return 1
    return 130 if interrupted else 0


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


def _plot_title(integ: HermiteIntegrator, meta: dict[str, Any]) -> str:
    seed = meta.get("seed")
    return (f"N = {integ.n}, order {integ.order}, {integ.precision}, eta {integ.eta:g}, "
            f"eps {math.sqrt(integ.eps2):g}" + (f", seed {seed}" if seed is not None else ""))


def _finish(args: argparse.Namespace, integ: HermiteIntegrator, meta: dict[str, Any],
            rows: list[dict[str, float]], last: dict[str, float], c0: dict[str, Any],
            t_start: float, t_end: float, wall: float, eps: float, p: dict[str, Any],
            out: Path, ext: str, snapshots: list[str], write_errors: list[str],
            interrupted: bool, diag_file: _DiagnosticsFile, err: TextIO, startup: float
            ) -> tuple[dict[str, Any], bool]:
    """Write the final snapshot, the diagnostics and the summary; each failure is reported,
    naming its file, and the others are still written."""
    final: str | None = None
    try:
        final = str(save_snapshot(out / f"snapshot_final{ext}", integ.state()))
    except OSError as exc:
        write_errors.append(os_error_message(exc))
        err.write(f"sapporo run: error: final snapshot not written ({write_errors[-1]})\n")
    problem = diag_file.finish(rows)
    if problem is not None:
        write_errors.append(problem)
        err.write(f"sapporo run: error: diagnostics not written ({problem})\n")

    c1 = integ.counters
    steps = c1["steps"] - c0["steps"]
    blocks = c1["block_steps"] - c0["block_steps"]
    inter = c1["interactions"] - c0["interactions"]
    summary: dict[str, Any] = {
        "n": integ.n, "order": integ.order, "precision": integ.precision,
        "device": integ.device_name, "backend": getattr(integ.lib, "backend_name", None),
        "t_start": t_start, "t_end": integ.time, "t_end_requested": t_end,
        "energy_error": last["energy_error"],
        "max_energy_error": float(meta["max_energy_error"]),
        "angular_momentum_error": last["angular_momentum_error"],
        "steps": steps, "block_steps": blocks,
        "mean_n_active": steps / blocks if blocks else 0.0,
        "wall_seconds": wall,
        "interactions": inter,
        "interactions_per_second": inter / wall if wall > 0 else 0.0,
        "library_seconds": c1["library_seconds"] - c0["library_seconds"],
        "integrator_seconds": c1["integrator_seconds"] - c0["integrator_seconds"],
        "startup_seconds": startup,
        "block_steps_per_second": blocks / wall if wall > 0 else 0.0,
        "criterion": integ.criterion, "eta": integ.eta, "eta4": integ.eta4, "eps": eps,
        "dt_min": p["dt_min"], "dt_max": p["dt_max"], "log_every": meta.get("log_every"),
        "energy_initial": meta["energy0"], "energy_final": last["energy"],
        "seed": meta.get("seed"), "bh_mass": meta.get("bh_mass"),
        "heavy_fraction": meta.get("heavy_fraction"), "mass_ratio": meta.get("mass_ratio"),
        "ic_scaling": meta.get("ic_scaling"), "model": meta.get("model"),
        "w0": meta.get("w0"), "initial_conditions": meta.get("initial_conditions"),
        "run_id": meta.get("run_id"),
        "resumed_from": args.resume, "interrupted": interrupted,
        "total_steps": c1["steps"], "total_block_steps": c1["block_steps"],
        "snapshot": final, "snapshots": snapshots, "write_errors": list(write_errors),
        **_after(parallel.run_report(integ.lib), c0, ("communication_seconds", "collectives")),
    }
    try:
        write_summary(out, "run", summary)
    except OSError as exc:
        write_errors.append(os_error_message(exc))
        err.write(f"sapporo run: error: summary not written ({write_errors[-1]})\n")
        return summary, False
    return summary, True


def _after(report: dict[str, Any], before: dict[str, Any], keys: tuple[str, ...]
           ) -> dict[str, Any]:
    """``report`` with the counters ``keys`` counted from ``before`` on (this run's share)."""
    return {k: v - before[k] if k in keys and k in before else v for k, v in report.items()}


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
    w.write("\n")
    for k, v in rows:
        w.write(f"  {k:<{width}}  {v}\n")
    files = ["summary.json", "diagnostics.csv"]
    if s["snapshot"]:
        files.append(Path(s["snapshot"]).name)
    w.write(f"\nwritten to {out}/: " + ", ".join(files + [Path(q).name for q in plots]) + "\n")
    for problem in s["write_errors"]:
        w.write(f"  NOT written: {problem}\n")
    w.flush()
