"""Launch-parameter tuning: sweep the force kernels' launch shapes and write a profile.

For one device, order and precision, :func:`tune` times every candidate
:class:`~sapporo.core.launch.LaunchConfig` for a ladder of active i-particle counts, keeps
the fastest per range of active particles, checks each kept one against the float64
reference, and writes the :class:`~sapporo.core.launch.LaunchTable` as a JSON profile that
:class:`~sapporo.Library` then loads. Candidates that fail to build or launch are skipped;
the rest are timed in interleaved rounds (so that changes in load hit all alike), and the
built-in default stays unless a candidate beats it by more than ``margin``.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sapporo import config
from sapporo.backend import DeviceInfo
from sapporo.core.launch import (
    NI_CHUNK,
    LaunchConfig,
    LaunchTable,
    check_table,
    default_table,
    profile_name,
    split_j,
    user_profile_dir,
)
from sapporo.errors import InputError, SapporoError
from sapporo.nbody.fileio import write_text_atomic
from sapporo.perf.report import EPS2, Progress, bench_system, force_call, load_average

log = logging.getLogger(__name__)

#: Verification tolerances on |Delta| / sum_j |term_j| (the library's accuracy contract).
TOLERANCE = {"double": 1e-12, "double-single": 1e-5}
#: Default reference j-count by device type.
DEFAULT_N = {"gpu": 131072, "cpu": 16384}
#: What :func:`tune` can minimise.
METRICS = ("kernel", "wall", "cpu")
#: A candidate within this fraction of the fastest keeps the neighbouring point's choice,
#: so that timing noise does not cut the table into many ranges.
STICKY = 0.03
#: The built-in default stays unless a candidate is faster by more than this fraction.
MARGIN = 0.05


@dataclass
class Trial:
    """One timing of candidate ``cfg`` at ``n_active`` active i-particles.

    Attributes
    ----------
    seconds : float or None
        Best time over the repeats (None when the candidate failed).
    note : str
        Why it failed, or that it shared the timing of an equivalent launch.
    """

    cfg: LaunchConfig
    n_active: int
    seconds: float | None
    note: str = ""


@dataclass
class TuneResult:
    """What :func:`tune` found: the tuned ``table`` (its ``meta`` the profile's metadata),
    every timing taken (``trials``) and where the profile was written (``path``, None when
    not).

    Attributes
    ----------
    best, default_seconds : dict
        Per active-particle count: the chosen configuration and its time, and the time of
        the built-in default.
    """

    table: LaunchTable
    trials: list[Trial]
    path: Path | None
    best: dict[int, tuple[LaunchConfig, float]]
    default_seconds: dict[int, float | None] = field(default_factory=dict)


def describe(cfg: LaunchConfig) -> str:
    """A short one-line description of a launch configuration."""
    return (f"li={cfg.li} lj={cfg.lj} w={cfg.w} jt={cfg.jt} local={int(cfg.use_local)} "
            f"gpc={cfg.groups_per_cu}" + (" jv=1" if cfg.jv else ""))


def grid(li: Sequence[int] = (1,), lj: Sequence[int] = (1,), w: Sequence[int] = (8,),
         jt: Sequence[int] = (64,), use_local: Sequence[bool] = (False,),
         groups_per_cu: Sequence[int] = (4,)) -> list[LaunchConfig]:
    """Every valid combination of the given parameter values (invalid ones are left out)."""
    out = []
    for a, b, c, d, e, g in itertools.product(li, lj, w, jt, use_local, groups_per_cu):
        try:
            out.append(LaunchConfig(li=a, lj=b, w=c, jt=d, use_local=bool(e), groups_per_cu=g))
        except SapporoError:
            continue
    return out


def cpu_candidates(precision: str, quick: bool = False) -> list[LaunchConfig]:
    """Candidate launch shapes for CPU devices (vectors over i, tiles from global memory,
    and lanes over j-particles); ``quick``: fewer tile sizes and groups per compute unit.
    Both precisions sweep the same shapes."""
    del precision
    lanes_over_i = grid(w=(4, 8, 16), jt=(64,) if quick else (64, 256, 1024),
                        groups_per_cu=(2, 8) if quick else (1, 2, 4, 8))
    lanes_over_j = [LaunchConfig(li=1, lj=1, w=w, jt=64, use_local=False, groups_per_cu=g,
                                 jv=True)
                    for w in (4, 8) for g in ((2,) if quick else (1, 2, 4))]
    return lanes_over_i + lanes_over_j


def gpu_candidates(info: DeviceInfo, quick: bool = False) -> list[LaunchConfig]:
    """Candidate launch shapes for GPUs (tiles in local memory): work-groups of ``li``
    i-lanes times ``lj`` j-lanes of 64 to 256 work-items, tiles of one or two work-groups'
    worth of j, and 2 or 4 i-particles per work-item (``quick``: fewer of each)."""
    out = []
    sizes = (128, 256) if quick else (64, 128, 256)
    for size in sizes:
        if size > info.max_work_group_size:
            continue
        li = 1
        while li <= size:
            out += [LaunchConfig(li=li, lj=size // li, w=1, jt=size * mult, use_local=True,
                                 groups_per_cu=g)
                    for mult in ((1,) if quick else (1, 2)) for g in ((4,) if quick else (2, 4, 8))]
            li *= 2 if quick else 4
        if li // (2 if quick else 4) != size:  # always include one i-lane per work-item
            out.append(LaunchConfig(li=size, lj=1, w=1, jt=size, use_local=True,
                                    groups_per_cu=4))
        # two or four i-particles per work-item share each j-particle read
        out += [LaunchConfig(li=size // w, lj=1, w=w, jt=size, use_local=True, groups_per_cu=4)
                for w in ((2,) if quick else (2, 4))]
    return out


def candidates(info: DeviceInfo, order: int, precision: str,
               quick: bool = False) -> list[LaunchConfig]:
    """Candidates for a device by type; the built-in defaults are always among them."""
    cands = (cpu_candidates(precision, quick) if info.device_type == "cpu"
             else gpu_candidates(info, quick))
    for _, cfg in default_table(info, order, precision).entries:
        if cfg not in cands:
            cands.append(cfg)
    return cands


def n_active_points(n: int, top: int = 1024) -> list[int]:
    """Active-particle counts to time: powers of two up to ``min(top, n)``, and ``n``."""
    pts = [1 << e for e in range(max(0, min(top, n)).bit_length())]
    return pts if n in pts else [*pts, n]


def parse_config(text: str) -> LaunchConfig:
    """Parse ``"w=8,jt=64,gpc=4"`` (keys li, lj, w, jt, local/use_local, gpc/groups_per_cu,
    min_jchunk, jv; missing keys take the :class:`LaunchConfig` defaults)."""
    alias = {"gpc": "groups_per_cu", "local": "use_local"}
    kw: dict[str, Any] = {}
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = alias.get(key, key)
        if not sep or key not in LaunchConfig.__dataclass_fields__:
            raise InputError(f"launch configuration: cannot parse {part!r} in {text!r}")
        try:
            kw[key] = (value.lower() in ("1", "true", "yes") if key in ("use_local", "jv")
                       else int(value))
        except ValueError:
            raise InputError(f"launch configuration: {key} must be an integer, got {value!r}") \
                from None
    try:
        return LaunchConfig(**kw)
    except SapporoError as exc:
        raise InputError(str(exc)) from None


def _launch_key(cfg: LaunchConfig, info: DeviceInfo, ni: int, nj: int) -> tuple:
    """Configurations with the same key launch identically for this ``ni``/``nj``."""
    ni_pad = -(-min(ni, NI_CHUNK) // cfg.i_per_group) * cfg.i_per_group
    return (cfg.li, cfg.lj, cfg.w, cfg.jt, cfg.use_local, cfg.jv,
            split_j(cfg, info, ni_pad, nj))


def _call(lib: Any, cfg: LaunchConfig, sysd: dict[str, np.ndarray], ni: int,
          nj: int | None = None) -> dict[str, float]:
    """One force call on the first ``ni`` particles with ``cfg``: wall, kernel and process CPU
    seconds."""
    lib.set_launch_table(LaunchTable([(NI_CHUNK, cfg)], source="tuning"))
    return force_call(lib, sysd, ni, nj)


def _paired_speedup(lib: Any, cand: LaunchConfig, dflt: LaunchConfig,
                    sysd: dict[str, np.ndarray], ni: int, metric: str, pairs: int) -> float:
    """Median over ``pairs`` back-to-back calls of time(default) / time(candidate)."""
    ratios = []
    for k in range(pairs):
        first, second = (cand, dflt) if k % 2 == 0 else (dflt, cand)
        t = {first: _call(lib, first, sysd, ni)[metric]}
        t[second] = _call(lib, second, sysd, ni)[metric]
        ratios.append(t[dflt] / t[cand])
    return float(np.median(ratios))


def verify_config(lib: Any, cfg: LaunchConfig, n_active: Sequence[int], nj: int = 2048,
                  seed: int = 5) -> float:
    """Largest relative error of ``cfg`` against the float64 reference model.

    The error of each quantity (acc, pot, jerk, snap as the order has them) is
    ``|Delta| / sum_j |term_j|`` per i-particle; the maximum over quantities, particles and
    the given active-particle counts is returned. The library's j-memory is replaced.
    """
    from sapporo.reference import forces, relative_vector_error

    nj = max(nj, 2 * cfg.jt)
    s = bench_system(nj, seed, lib.order)
    lib.reset()
    lib.set_time(0.0)
    lib.set_j_particles(np.arange(nj), s["id"], 0.0, s["m"], s["x"], s["v"], a=s["a"],
                        jerk=s["jerk"])
    lib.set_launch_table(LaunchTable([(NI_CHUNK, cfg)], source="verification"))
    worst = 0.0
    for ni in sorted({max(1, min(k, nj)) for k in n_active}):
        sel = np.linspace(0, nj - 1, ni).astype(np.int64)
        a = None if s["a"] is None else s["a"][sel]
        jerk = None if s["jerk"] is None else s["jerk"][sel]
        got = lib.compute(s["x"][sel], s["v"][sel], s["id"][sel], EPS2, a=a, jerk=jerk)
        ref = forces(s["x"][sel], s["v"][sel], s["id"][sel], s["x"], s["v"], s["m"], s["id"],
                     EPS2, order=lib.order, ai=a, aj=s["a"], ji=jerk, jj=s["jerk"])
        # acc and pot, then one derivative more every two orders: jerk, snap, crackle
        for q in ("acc", "pot", "jerk", "snap", "crackle")[:lib.order // 2 + 1]:
            err = relative_vector_error(getattr(got, q), getattr(ref, q), getattr(ref, q + "_abs"))
            worst = max(worst, float(np.max(err)))
    return worst


def _choose(points: list[int], times: dict[int, dict[LaunchConfig, float]], sticky: float,
            default_for: Callable[[int], LaunchConfig] | None = None,
            margin: float = 0.0) -> dict[int, LaunchConfig]:
    """Fastest configuration per point, from the largest point down.

    The built-in default (``default_for(point)``) is kept unless the fastest candidate beats
    it by more than ``margin``; otherwise the choice of the next larger point is kept when
    within ``sticky`` of the fastest (fewer ranges, less noise), else the fastest is taken.
    """
    chosen: dict[int, LaunchConfig] = {}
    prev: LaunchConfig | None = None
    for p in sorted(points, reverse=True):
        ok = {c: t for c, t in times[p].items() if t is not None and np.isfinite(t)}
        if not ok:
            continue
        best = min(ok, key=lambda c: ok[c])
        dflt = default_for(p) if default_for is not None else None
        if dflt is not None and dflt in ok and ok[dflt] <= ok[best] * (1 + margin):
            best = dflt
        elif prev is not None and prev in ok and ok[prev] <= ok[best] * (1 + sticky):
            best = prev
        chosen[p] = best
        prev = best
    return chosen


def _entries(chosen: dict[int, LaunchConfig]) -> list[tuple[int, LaunchConfig]]:
    """Table entries from per-point choices: point p covers (previous point, p]; the largest
    point covers everything above; neighbouring equal choices merge."""
    pts = sorted(chosen)
    entries: list[tuple[int, LaunchConfig]] = []
    for k, p in enumerate(pts):
        ni_max = NI_CHUNK if k == len(pts) - 1 else p
        if entries and entries[-1][1] == chosen[p]:
            entries[-1] = (ni_max, chosen[p])
        else:
            entries.append((ni_max, chosen[p]))
    return entries


def tune(order: int, precision: str, backend: str | None = None, device: int = 0,
         n: int | None = None, points: Sequence[int] | None = None,
         configs: Iterable[LaunchConfig] | None = None, quick: bool = False, repeats: int = 2,
         metric: str = "kernel", margin: float = MARGIN, confirm: int = 7, verify: bool = True,
         write: bool = True, out_dir: str | Path | None = None,
         progress: Progress | None = None) -> TuneResult:
    """Sweep launch configurations for one order and precision and write a profile.

    Parameters
    ----------
    order : {2, 4, 6}
    precision : {"double", "double-single"}
    backend : str, optional
        ``"opencl"``, ``"cuda"`` or None (automatic).
    device : int
        Device index of the backend.
    n : int, optional
        Reference j-count (default 131072 on GPUs, 16384 on CPUs; 4096 with ``quick``).
    points : sequence of int, optional
        Active-particle counts to time (default 1, 2, 4, ..., 1024 and ``n``).
    configs : iterable of LaunchConfig, optional
        Candidates (default :func:`candidates` for the device).
    quick : bool
        Reduced candidate set and smaller default ``n``.
    repeats : int
        Timed calls per candidate and point (the minimum counts).
    metric : {"kernel", "wall", "cpu"}
        Device kernel time, wall time, or the process's CPU time per call (insensitive to
        other processes' load, blind to idle cores).
    margin : float
        The built-in default stays unless a candidate is faster by more than this fraction.
    confirm : int
        Paired calls (candidate and default back to back) that a candidate beating the
        default must win by more than ``margin`` in the median; 0: no confirmation.
    verify : bool
        Check each kept configuration against the reference model (failing ones are
        dropped).
    write : bool
        Write the profile (to ``out_dir``, default :func:`user_profile_dir`).
    progress : callable, optional
        Called with one line of text per configuration tried.

    Raises
    ------
    InputError
        On bad arguments, or when no candidate works at some point.
    """
    from sapporo import __version__
    from sapporo.core.library import Library

    try:
        order = config.parse_order(order, "order")
        precision = config.parse_precision(precision, "precision")
    except SapporoError as exc:
        raise InputError(str(exc)) from None
    if metric not in METRICS:
        raise InputError(f"metric: expected one of {', '.join(METRICS)}, got {metric!r}")
    if repeats < 1:
        raise InputError(f"repeats: must be >= 1, got {repeats}")
    if isinstance(margin, bool) or not (isinstance(margin, (int, float))
                                        and math.isfinite(margin) and 0.0 <= margin < 1.0):
        raise InputError(f"margin: must be a fraction in [0, 1), got {margin!r}")
    if isinstance(confirm, bool) or not isinstance(confirm, int) or confirm < 0:
        raise InputError(f"confirm: must be an integer >= 0, got {confirm!r}")
    say = progress or (lambda line: log.info("%s", line))
    tag = f"[order {order} {precision}]"

    with Library(order=order, precision=precision, backend=backend, devices=[device],
                 profiling=True) as lib:
        info = lib.device_infos[0]
        if n is None:
            n = 4096 if quick else DEFAULT_N.get(info.device_type, DEFAULT_N["gpu"])
        n = int(n)
        if n < 1:
            raise InputError(f"n: must be >= 1, got {n}")
        pts = sorted({int(p) for p in (points or n_active_points(n)) if 1 <= int(p) <= n})
        if not pts:
            raise InputError(f"points: no active-particle count in [1, {n}]")
        cands = list(dict.fromkeys(configs if configs is not None
                                   else candidates(info, order, precision, quick)))
        if not cands:
            raise InputError("configs: no candidate configurations")
        default_cfg = default_table(info, order, precision)
        say(f"{tag} tuning on {info.name} ({info.backend}), N = {n}, "
            f"{len(cands)} candidates x {len(pts)} active-particle counts, "
            f"{repeats} repeat(s), metric {metric}")
        sysd = bench_system(n, 11, order)
        lib.set_j_particles(np.arange(n), sysd["id"], 0.0, sysd["m"], sysd["x"], sysd["v"],
                            a=sysd["a"])

        trials: list[Trial] = []
        confirmations: dict[str, dict[str, Any]] = {}
        failed: dict[LaunchConfig, str] = {}
        times: dict[int, dict[LaunchConfig, float]] = {}
        t_start = time.perf_counter()
        for p in sorted(pts, reverse=True):
            # one timing per distinct launch (groups_per_cu often changes nothing)
            first: dict[tuple, LaunchConfig] = {}
            same: dict[LaunchConfig, LaunchConfig] = {}
            for cfg in cands:
                if cfg not in failed:
                    same[cfg] = first.setdefault(_launch_key(cfg, info, p, n), cfg)
            todo = []
            for cfg in dict.fromkeys(same.values()):
                try:
                    check_table(LaunchTable([(NI_CHUNK, cfg)]), info, order, precision)
                    _call(lib, cfg, sysd, p, nj=min(n, 256))  # build, warm caches
                    todo.append(cfg)
                except (KeyboardInterrupt, MemoryError):
                    raise
                except Exception as exc:  # build or launch failure: skip the candidate
                    text = str(exc).strip()
                    reason = text.splitlines()[0] if text else repr(exc)
                    failed[cfg] = reason
                    trials.append(Trial(cfg, p, None, reason))
                    say(f"{tag} N_active={p:>6}  {describe(cfg):<40} skipped: {reason}")
            best = {cfg: float("inf") for cfg in todo}
            for r in range(repeats):  # rounds over the candidates: load changes hit all alike
                for cfg in todo[r % max(len(todo), 1):] + todo[: r % max(len(todo), 1)]:
                    best[cfg] = min(best[cfg], _call(lib, cfg, sysd, p)[metric])
            fastest = min(best.values(), default=float("inf"))
            times[p] = {}
            for cfg, rep in same.items():
                if rep not in best:
                    continue
                t = best[rep]
                times[p][cfg] = t
                if rep is not cfg:
                    trials.append(Trial(cfg, p, t, f"same launch as {describe(rep)}"))
                    continue
                trials.append(Trial(cfg, p, t))
                mark = "  <- fastest" if t == fastest else ""
                say(f"{tag} N_active={p:>6}  {describe(cfg):<40} {t * 1e3:10.3f} ms "
                    f"{p * n / t / 1e9:8.3f} Gint/s{mark}")
            # a winner other than the default must confirm its lead in paired calls
            dflt_cfg = default_cfg.for_ni(p)
            t_dflt = times[p].get(dflt_cfg)
            if confirm and t_dflt is not None and todo:
                win = min(todo, key=lambda c: best[c])
                if same.get(dflt_cfg) != win and best[win] * (1 + margin) < t_dflt:
                    ratio = _paired_speedup(lib, win, same[dflt_cfg], sysd, p, metric, confirm)
                    ok = ratio > 1 + margin
                    confirmations[str(p)] = {"config": describe(win), "speedup": round(ratio, 3),
                                             "accepted": ok}
                    say(f"{tag} N_active={p:>6}  confirm {describe(win)} against the default: "
                        f"paired speedup {ratio:.3f} ({'accepted' if ok else 'rejected'})")
                    if not ok:  # not a real lead: ties with the default at most
                        times[p] = {c: max(t, t_dflt) for c, t in times[p].items()}
        sweep_seconds = time.perf_counter() - t_start

        # choose, then verify the chosen ones; drop failures and choose again
        rejected: dict[LaunchConfig, str] = {}
        verified: dict[LaunchConfig, float] = {}
        while True:
            chosen = _choose(pts, times, STICKY, default_cfg.for_ni, margin)
            missing = [p for p in pts if p not in chosen]
            if missing:
                raise InputError(f"{tag} no working launch configuration at N_active = {missing}; "
                                 "failures: "
                                 f"{sorted(set(failed.values()) | set(rejected.values()))}")
            entries = _entries(chosen)
            bad = False
            for ni_max, cfg in entries:
                if not verify or cfg in verified:
                    continue
                lo = max([p for p in pts if p <= ni_max] or [1])
                err = verify_config(lib, cfg, (1, min(lo, 512)))
                tol = TOLERANCE[precision]
                ok = err <= tol
                say(f"{tag} verify {describe(cfg):<40} max error {err:.2e} "
                    f"({'ok' if ok else 'FAILS'} <= {tol:g})")
                if ok:
                    verified[cfg] = err
                else:
                    rejected[cfg] = f"verification error {err:.2e} > {tol:g}"
                    for p in pts:
                        times[p].pop(cfg, None)
                    bad = True
            if not bad:
                break

        best = {p: (chosen[p], times[p][chosen[p]]) for p in pts}
        dflt = {p: times[p].get(default_cfg.for_ni(p)) for p in pts}
        load = load_average()
        meta = {
            "format": 1, "sapporo_version": __version__, "backend": info.backend,
            "device": info.name, "device_key": info.key, "device_type": info.device_type,
            "compute_units": info.compute_units, "driver_version": info.driver_version,
            "order": order, "precision": precision, "n": n,
            "load_average": None if load is None else [round(x, 2) for x in load],
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "sweep": {
                "candidates": len(cands), "n_active": pts, "repeats": repeats,
                "metric": metric, "margin": margin, "quick": bool(quick),
                "seconds": round(sweep_seconds, 1),
                "skipped": {describe(c): r for c, r in {**failed, **rejected}.items()},
            },
            "confirmations": confirmations,
            "best_seconds": {str(p): best[p][1] for p in pts},
            "default_seconds": {str(p): dflt[p] for p in pts},
            "verified_max_error": {describe(c): e for c, e in verified.items()},
        }
        table = LaunchTable(entries, source="tuned", meta=meta)

    path = None
    if write:
        folder = Path(out_dir) if out_dir is not None else user_profile_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / profile_name(info, order, precision)
        write_text_atomic(path, json.dumps(table.to_json(), indent=2) + "\n")
        table.source = str(path)
        say(f"{tag} wrote {path}")
    for ni_max, cfg in entries:
        say(f"{tag} N_active <= {ni_max:>6}: {describe(cfg)}")
    return TuneResult(table=table, trials=trials, path=path, best=best, default_seconds=dflt)
