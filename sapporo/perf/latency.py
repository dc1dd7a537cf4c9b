"""Where the time of a block step goes: the latency budget of small force calls.

A block step of a Hermite integrator stores the particles it has just corrected, moves the
time on and computes the forces on the next block. With a few active particles what a step
costs is fixed: argument checks, storing, the runtime commands, waiting for the device,
combining the partial results. :func:`block_step_budget` runs such steps on a Plummer
sphere and reports, per step: ``wall_us`` (median wall time of store + set_time +
compute), ``device_us`` (kernel time, from a second, profiled library doing the same
steps), ``host_us`` (wall minus device), the phases timed inside the library (``checks``:
Python's argument checks; ``store``: j-particles stored by the native engine; ``step``: the
force call in C, which holds device time too on PoCL's single-threaded companion device)
and ``commands`` (runtime commands queued per step).
"""

from __future__ import annotations

import csv
import logging
import os
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from sapporo.errors import InputError, SapporoError
from sapporo.perf.report import EPS2, FLOPS

log = logging.getLogger(__name__)

__all__ = ["PHASES", "block_step_budget", "budget_table", "capi_steps", "run_sweep",
           "write_sweep"]

#: the phases timed inside the library, in call order
PHASES = ("checks", "store", "step")


def _steps(lib: Any, s: dict[str, np.ndarray], n_active: int, steps: int, seed: int,
           times: list[float] | None = None,
           per_phase: dict[str, list[float]] | None = None) -> None:
    """Run ``steps`` block steps of ``n_active`` particles of the system ``s`` (a fresh
    random block each); ``times`` gets each step's wall time, ``per_phase`` each step's
    time per phase (from the library's accumulators, ``lib._phases``)."""
    acc = lib._phases if per_phase is not None else None
    last = dict.fromkeys(PHASES, 0.0)
    rng = np.random.default_rng(seed)
    # the blocks' arrays are made before the clock runs: an integrator has them at hand
    blocks = []
    for _ in range(min(steps, 64)):
        sel = np.sort(rng.choice(len(s["m"]), n_active, replace=False))
        a_b, jerk_b = s["a"][sel], s["jerk"][sel]
        blocks.append((sel, s["id"][sel], s["m"][sel], s["x"][sel], s["v"][sel], a_b, jerk_b,
                       a_b if lib.order >= 6 else None,
                       {"jerk": jerk_b} if lib.order >= 8 else {}))
    dt = 2.0**-20
    clock = time.perf_counter
    for k in range(steps):
        sel, ids_b, m_b, x_b, v_b, a_b, jerk_b, ai, extra = blocks[k % len(blocks)]
        t0 = clock()
        lib.set_j_particles(sel, ids_b, k * dt, m_b, x_b, v_b, a=a_b, jerk=jerk_b)
        lib.set_time((k + 1) * dt)
        lib.compute(x_b, v_b, ids_b, EPS2, a=ai, **extra)
        if times is not None:
            times.append(clock() - t0)
        if acc is not None and per_phase is not None:
            for name in PHASES:
                per_phase[name].append(acc.get(name, 0.0) - last[name])
                last[name] = acc.get(name, 0.0)


def block_step_budget(n: int, n_active: int, order: int = 4, precision: str = "double-single",
                      backend: str | None = None, devices: Any = None, steps: int = 300,
                      warmup: int = 30, seed: int = 1) -> dict[str, Any]:
    """Measure the latency budget of block steps of ``n_active`` particles among ``n``.

    Returns a dict with the keys described in the module docstring, plus ``n``,
    ``n_active``, ``order``, ``precision``, ``device``, ``steps``, ``interactions_per_s``
    (n_active * n / wall) and ``gflops``.
    """
    from sapporo.core.library import Library
    from sapporo.reference import plummer

    if not (isinstance(n, int) and isinstance(n_active, int) and 1 <= n_active <= n):
        raise InputError(f"n_active: expected 1 <= n_active <= n, got {n_active} and n = {n}")
    if steps < 1 or warmup < 0:
        raise InputError(f"steps: expected >= 1 (and warmup >= 0), got {steps}, {warmup}")
    x, v, m = plummer(n, seed=seed)
    rng = np.random.default_rng(seed + 1)
    s = {"x": x, "v": v, "m": m, "id": np.arange(n), "a": rng.normal(scale=0.5, size=(n, 3)),
         "jerk": rng.normal(scale=0.5, size=(n, 3))}
    out: dict[str, Any] = {"n": n, "n_active": n_active, "order": order,
                           "precision": precision, "steps": steps}
    opts = {"order": order, "precision": precision, "backend": backend, "devices": devices}
    with Library(**opts) as lib:
        out["device"] = lib.device_name
        lib.set_j_particles(s["id"], s["id"], 0.0, m, x, v, a=s["a"], jerk=s["jerk"])
        _steps(lib, s, n_active, warmup, seed)
        lib._phases = defaultdict(float)  # time per phase, summed by the library
        ctxs = [d.ctx for d in lib._devs]

        def queued() -> int:  # the runtime commands of the library and of its engine
            eng = lib._engine
            return sum(c.commands for c in ctxs) + (eng.launches if eng is not None else 0)

        commands0 = queued()
        times: list[float] = []
        per_phase: dict[str, list[float]] = defaultdict(list)
        _steps(lib, s, n_active, steps, seed, times, per_phase)
        commands = queued() - commands0
        lib._phases = None
    with Library(**opts, profiling=True) as prof:
        prof.set_j_particles(s["id"], s["id"], 0.0, m, x, v, a=s["a"], jerk=s["jerk"])
        _steps(prof, s, n_active, warmup, seed)
        k0 = prof.kernel_seconds
        _steps(prof, s, n_active, steps, seed)
        device = (prof.kernel_seconds - k0) / steps
    wall = statistics.median(times)
    pairs = n_active * n
    out.update(wall_us=1e6 * wall, wall_min_us=1e6 * min(times), device_us=1e6 * device,
               host_us=1e6 * max(wall - device, 0.0), commands=commands / steps,
               # the phases' medians over the steps, as the wall time's
               **{f"{name}_us": 1e6 * statistics.median(per_phase[name]) for name in PHASES},
               interactions_per_s=pairs / wall, gflops=pairs * FLOPS[order] / wall / 1e9)
    log.info("block step N=%d N_active=%d: %.0f us (device %.0f us)", n, n_active,
             out["wall_us"], out["device_us"])
    return out


def budget_table(rows: Sequence[dict[str, Any]]) -> str:
    """The budget as a Markdown table (microseconds per block step); with the columns of
    the C API (:func:`capi_steps`) when the rows have them."""
    capi = bool(rows) and all("capi_us" in r for r in rows)
    lines = ["| N | N_active | wall | device | host | " + " | ".join(PHASES)
             + " | commands | interactions/s |" + (" C API |" if capi else ""),
             "|" + "---|" * (7 + len(PHASES) + (1 if capi else 0))]
    lines += [f"| {r['n']} | {r['n_active']} | {r['wall_us']:.0f} | "
              f"{r['device_us']:.0f} | {r['host_us']:.0f} | "
              + " | ".join(f"{r[p + '_us']:.1f}" for p in PHASES)
              + f" | {r['commands']:.1f} | {r['interactions_per_s']:.3g} |"
              + (f" {r['capi_us']:.0f} |" if capi else "") for r in rows]
    return "\n".join(lines)


#: the sweep of ``sapporo bench --block-step``
SWEEP_N = (1024, 4096, 16384)
SWEEP_N_ACTIVE = (1, 4, 16, 64, 128, 256)
COLUMNS = ("n", "n_active", "order", "precision", "device", "steps", "wall_us",
           "wall_min_us", "device_us", "host_us", *(f"{p}_us" for p in PHASES), "commands",
           "interactions_per_s", "gflops", "capi_us")


def run_sweep(n_list: Sequence[int] = SWEEP_N, n_active: Sequence[int] = SWEEP_N_ACTIVE,
              order: int = 4, precision: str = "double-single", backend: str | None = None,
              devices: Any = None, steps: int = 300,
              progress: Any = None) -> list[dict[str, Any]]:
    """:func:`block_step_budget` for every N and N_active <= N (``progress``: a callable
    given one line per measurement)."""
    rows = []
    todo = [(n, na) for n in n_list for na in n_active if na <= n]
    for k, (n, na) in enumerate(todo, start=1):
        if progress is not None:
            progress(f"block step {k}/{len(todo)}: N = {n}, N_active = {na}")
        rows.append(block_step_budget(n, na, order=order, precision=precision,
                                      backend=backend, devices=devices, steps=steps))
    return rows


#: the C driver of :func:`capi_steps` (shipped with the package data of sapporo.tune)
CAPI_DRIVER = "capi_block_step.c"


def capi_steps(rows: Sequence[dict[str, Any]], steps: int = 300, backend: str | None = None,
               devices: Any = None, progress: Any = None) -> dict[str, float]:
    """Time the same block steps through the C API, in place: each row of :func:`run_sweep`
    gets ``capi_us``, the median step of ``tune/capi_block_step.c`` (built with ``$CC``, the
    C library first when needed). Returns the start-up: ``open_ms``, the median
    ``g6_open``, which starts the embedded Python.

    Raises
    ------
    SapporoError
        When the library or the driver cannot be built, or the driver fails.
    """
    from sapporo.capi import build as capi_build

    if not rows:
        return {}
    say = progress or (lambda line: None)
    inst = capi_build.installation()
    if not inst.is_current():
        say("building the C library (sapporo capi build) ...")
        capi_build.build()
    source = Path(str(resources.files("sapporo.tune"))) / CAPI_DRIVER
    cc = shlex.split(os.environ.get("CC", "cc"))
    work = Path(tempfile.mkdtemp(prefix="sapporo-capi-bench-"))
    try:
        exe = work / "capi_block_step"
        cmd = [*cc, "-O2", str(source), "-o", str(exe),
               *shlex.split(capi_build.flags(inst)), "-lm"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            raise SapporoError(f"cannot run the C compiler {cc[0]!r}: {exc} (set CC)") from None
        if proc.returncode != 0:
            raise SapporoError(f"compiling {source.name} failed:\n{shlex.join(cmd)}\n"
                               f"{proc.stderr.strip()}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAPPORO_")}
        if backend is not None:
            env["SAPPORO_BACKEND"] = backend
        if devices is not None:
            env["SAPPORO_DEVICES"] = (devices if isinstance(devices, str)
                                      else ",".join(map(str, devices)))
        for k, r in enumerate(rows, start=1):
            say(f"C API block step {k}/{len(rows)}: N = {r['n']}, N_active = {r['n_active']}")
            run_env = {**env, "SAPPORO_ORDER": str(r["order"]),
                       "SAPPORO_PRECISION": str(r["precision"]),
                       "SAPPORO_NPIPES": str(max(int(r["n_active"]), 128))}
            r["capi_us"] = _driver(exe, (r["n"], r["n_active"], steps), run_env, "step_us")
        say("C API start-up: g6_open ...")
        # g6_open starts the embedded Python and opens the library: median of 3 processes
        env.update(SAPPORO_ORDER=str(rows[0]["order"]),
                   SAPPORO_PRECISION=str(rows[0]["precision"]))
        return {"open_ms": statistics.median(_driver(exe, (1024, 1, 20), env, "open_ms")
                                             for _ in range(3))}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _driver(exe: Path, args: tuple[int, ...], env: dict[str, str], key: str) -> float:
    """Run the C driver of :func:`capi_steps` on ``N N_active steps``: the value it prints
    after ``key``."""
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)
    fields = proc.stdout.split()
    if proc.returncode != 0 or key not in fields:
        raise SapporoError(f"{CAPI_DRIVER} {args[0]} {args[1]} failed (status "
                           f"{proc.returncode}): {(proc.stderr or proc.stdout).strip()[-500:]}")
    return float(fields[fields.index(key) + 1])


def startup_note(times: dict[str, float]) -> str:
    """One line on the C API's start-up, from :func:`capi_steps`'s answer."""
    return (f"C API start-up (g6_open, N = 1024): {times['open_ms']:.0f} ms, starting the "
            "embedded Python and opening the library")


def write_sweep(rows: Sequence[dict[str, Any]], out: Any, plots: bool = True,
                notes: Sequence[str] = ()) -> list[Any]:
    """Write ``block-step.csv``, ``block-step.md`` (the table, then ``notes``) and
    ``block-step.png`` (when matplotlib is there) into the folder ``out``; returns the
    paths written."""
    from sapporo.perf import plots as plots_module

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path, md = folder / "block-step.csv", folder / "block-step.md"
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    first = rows[0] if rows else {}
    md.write_text(f"Block step, order {first.get('order', '')}, {first.get('precision', '')}, "
                  f"{first.get('device', '')} (microseconds per step)\n\n{budget_table(rows)}\n"
                  + "".join(f"\n{n}\n" for n in notes))
    paths = [csv_path, md]
    if plots and rows and plots_module.available():
        paths.append(plots_module.plot_block_step(rows, folder / "block-step.png"))
    return paths
