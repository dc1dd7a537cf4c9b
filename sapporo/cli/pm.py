"""``sapporo pm``: integrate a Plummer sphere, an exponential disk or a uniform cube with the
particle-mesh solver (kick-drift-kick leapfrog on the device).

Writes into ``--out``: ``summary.json`` (the shared keys of :mod:`sapporo.summary`, and
seconds per step by stage), ``snapshots/snap_NNNN.npz`` (t, x, v, m) and, when matplotlib is
installed and ``--no-plots`` is not given, ``density.png`` (the final density projected along
z) and ``energy.png`` (relative energy error). ``--quiet``: no progress lines.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from pathlib import Path

import numpy as np

from sapporo.cli import (
    add_device_options,
    add_output_options,
    ensure_writable_dir,
    one_device,
    progress_writer,
)
from sapporo.errors import InputError
from sapporo.summary import write_summary

log = logging.getLogger(__name__)

DEFAULT_BOX = {"plummer": 12.0, "disk": 12.0, "uniform": 4.0}
PROGRESS_SECONDS = 10.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo pm``."""
    p = sub.add_parser(
        "pm", help="integrate a system with the particle-mesh solver (leapfrog on the device)",
        description="Integrate a Plummer sphere, an exponential disk or a uniform random cube "
        "with particle-mesh gravity (G = 1, total mass 1) and a kick-drift-kick leapfrog on "
        "the device; write summary.json, snapshots and plots into --out.")
    p.add_argument("--ic", choices=("plummer", "disk", "uniform"), default="plummer",
                   help="initial conditions (default plummer)")
    p.add_argument("--n", type=int, default=32768, help="particles (default 32768)")
    p.add_argument("--grid", type=int, default=32, help="mesh points per side (default 32)")
    p.add_argument("--box", type=float, default=None,
                   help="box side (default 12 for plummer and disk, 4 for uniform)")
    p.add_argument("--boundary", choices=("auto", "isolated", "periodic"), default="auto",
                   help="auto: periodic for uniform, isolated otherwise")
    p.add_argument("--solver", choices=("fft", "multigrid"), default="fft",
                   help="Poisson solver: fft or multigrid (V-cycles; isolated only; default fft)")
    p.add_argument("--p3m", action="store_true",
                   help="P^3M: split mesh force plus a direct short-range sum (FFT solver)")
    p.add_argument("--p3m-split", choices=("gauss", "s2"), default="gauss",
                   help="P^3M's split: gauss (r_s 1.25 cells, cut at 4.5 r_s) or s2 (S2 "
                        "clouds of 3 cells, the GRAPE-5 cutoff force's; default gauss)")
    p.add_argument("--window", choices=("ngp", "cic", "tsc"), default="tsc",
                   help="mass assignment and interpolation: ngp, cic or tsc (default tsc)")
    p.add_argument("--stencil", type=int, choices=(2, 4), default=4,
                   help="finite-difference points of the gradient (default 4)")
    p.add_argument("--precision", choices=("double", "single"), default="double",
                   help="mesh arithmetic: double or single (default double)")
    p.add_argument("--t-end", type=float, default=1.0, help="end time (default 1)")
    p.add_argument("--dt", type=float, default=0.01, help="time step (default 0.01)")
    p.add_argument("--snapshots", type=int, default=5,
                   help="snapshots written, evenly spaced, first and last included "
                        "(default 5; 0: none)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    add_device_options(p, one=True)
    p.add_argument("--out", default="pm-out", help="output folder (default pm-out)")
    add_output_options(p)
    p.set_defaults(func=run)


def _usage(args: argparse.Namespace) -> tuple[float, str, int]:
    """Box, boundary and steps; InputError for values argparse cannot check."""
    if args.n < 1:
        raise InputError(f"--n: expected a positive integer, got {args.n}")
    if args.grid < 2:
        raise InputError(f"--grid: expected at least 2, got {args.grid}")
    box = DEFAULT_BOX[args.ic] if args.box is None else args.box
    for name, value, what in (("--box", box, "number"), ("--t-end", args.t_end, "time"),
                              ("--dt", args.dt, "time step")):
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"{name}: expected a positive {what}, got {value}")
    if args.snapshots < 0:
        raise InputError(f"--snapshots: expected 0 or more, got {args.snapshots}")
    boundary = args.boundary
    if boundary == "auto":
        boundary = "periodic" if args.ic == "uniform" else "isolated"
    if args.solver == "multigrid" and boundary != "isolated":
        raise InputError("--solver multigrid needs --boundary isolated")
    if args.p3m and args.solver != "fft":
        raise InputError("--p3m needs --solver fft")
    return box, boundary, max(1, int(round(args.t_end / args.dt)))


def _plots(out: Path, density: np.ndarray, box: float, times: list[float],
           errors: list[float]) -> list[str]:
    from sapporo.perf import plots

    if not plots.available():
        log.warning("matplotlib is not installed: no plots (pip install matplotlib)")
        return []
    return [plots.plot_density(density, box, out / "density.png").name,
            plots.plot_energy_error(times, errors, out / "energy.png", "energy error").name]


def run(args: argparse.Namespace) -> int:
    """Run ``sapporo pm``; returns the exit code (2 for usage errors)."""
    from sapporo import config
    from sapporo.pm import P3M, ParticleMesh
    from sapporo.pm import ic as pm_ic
    from sapporo.pm.integrator import Leapfrog

    box, boundary, steps = _usage(args)
    backend = config.parse_backend(args.backend, "--backend")
    device = one_device(args.devices)
    out = ensure_writable_dir(args.out, "--out")
    dt = args.t_end / steps
    progress = progress_writer(args.quiet)
    x, v, m = pm_ic.make(args.ic, args.n, box, args.seed)
    solver: ParticleMesh | P3M
    if args.p3m:
        solver = P3M(args.grid, box, boundary, args.window, args.precision, backend, device,
                     stencil=args.stencil, split_shape=args.p3m_split)
        mesh = solver.mesh
    else:
        solver = mesh = ParticleMesh(args.grid, box, boundary=boundary, window=args.window,
                                     solver=args.solver, precision=args.precision,
                                     backend=backend, devices=device, stencil=args.stencil)
    snap_dir = out / "snapshots"
    snaps: list[str] = []
    snap_steps = (sorted({round(k * steps / (args.snapshots - 1)) for k in
                          range(args.snapshots)}) if args.snapshots > 1 else
                  [steps] if args.snapshots == 1 else [])
    wall0 = time.perf_counter()
    with solver:
        # particles the model puts outside the usable region are an error of the settings
        try:
            sim = Leapfrog(solver, x, v, m, dt)
        except InputError as exc:
            raise InputError(f"{exc} (enlarge --box)") from None
        progress(f"sapporo pm: {args.ic}, n = {args.n}, grid {args.grid}^3, box {box:g}, "
                 f"{boundary}, {'p3m' if args.p3m else args.solver}, {args.window}, "
                 f"{steps} steps of dt = {dt:.4g} "
                 f"on {mesh.device_name}")
        kin, pot = sim.energies()
        e0 = kin + pot
        times, errors = [0.0], [0.0]

        def snapshot(k: int) -> None:
            if k in snap_steps:
                snap_dir.mkdir(exist_ok=True)
                xs, vs = sim.state()
                name = f"snap_{len(snaps):04d}.npz"
                np.savez(snap_dir / name, t=sim.t, x=xs, v=vs, m=m)
                snaps.append(f"snapshots/{name}")

        snapshot(0)
        last = time.perf_counter()
        status = "completed"
        try:
            for k in range(1, steps + 1):
                sim.step()
                kin, pot = sim.energies()
                times.append(sim.t)
                errors.append(abs(kin + pot - e0) / abs(e0) if e0 != 0 else 0.0)
                snapshot(k)
                now = time.perf_counter()
                if now - last >= PROGRESS_SECONDS or k == steps or k == 1:
                    last = now
                    progress(f"step {k}/{steps}  t = {sim.t:.4g}  dE/E = {errors[-1]:.3e}  "
                             f"({now - wall0:.1f} s)")
        except InputError as exc:
            status = f"stopped: {exc}"
            progress(f"sapporo pm: {status}")
        except KeyboardInterrupt:
            status = "interrupted"
            progress("sapporo pm: interrupted; writing the summary")
        per_step = sim.mean_step_times()
        density = mesh.density()
        summary = {
            "ic": args.ic, "n": args.n, "grid": args.grid, "box": box, "boundary": boundary,
            "solver": "p3m" if args.p3m else args.solver, "window": args.window,
            **({"p3m_split": args.p3m_split} if args.p3m else {}),
            "stencil": args.stencil,
            "precision": args.precision, "device": mesh.device_name,
            "backend": mesh._ctx.info.backend, "seed": args.seed, "dt": dt,
            "t_end": sim.t, "steps": sim.steps, "status": status,
            "energy_error": errors[-1], "max_energy_error": float(max(errors)),
            "energy_initial": e0, "energy_final": kin + pot,
            "seconds_per_step": per_step,
            "seconds_per_step_total": float(sum(per_step.values())),
            "wall_seconds": time.perf_counter() - wall0,
            "snapshots": snaps,
        }
        sim.close()
    summary["plots"] = [] if args.no_plots else _plots(out, density, box, times, errors)
    write_summary(out, "pm", summary)
    progress(f"energy error {errors[-1]:.3e} (max {summary['max_energy_error']:.3e}); "
             f"{summary['seconds_per_step_total'] * 1e3:.1f} ms per step; wrote {out}")
    return 0 if status == "completed" else 1
