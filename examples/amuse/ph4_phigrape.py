"""AMUSE's ph4 and phiGRAPE from the package index, on their own CPU code and on sapporo.

Run it with the Python environment that has sapporo installed::

    python examples/amuse/ph4_phigrape.py [--workdir DIR] [--n 1024] [--t-end 0.5]
        [--eps 0.01] [--eta ETA] [--codes ph4,phigrape] [--precisions double-single,double]
        [--patch-ph4]

It makes a scratch virtual environment in ``DIR/venv``, installs ``amuse-framework`` and
``mpi4py`` there from the package index, then builds ``amuse-ph4`` and ``amuse-phigrape``
(the same version) with their GPU workers linked to sapporo's C library, through ``sapporo
capi amuse --install`` (the library goes to ``DIR/sapporo``). Nothing but registry packages
is installed. It then integrates one Plummer sphere (N bodies, N-body units, softening
``--eps``) to ``--t-end`` with each code of ``--codes``, each run in a fresh worker over
AMUSE's sockets channel: ph4 on its CPU force loop (``mode="cpu"``), phiGRAPE on AMUSE's
GRAPE-6 emulation (``mode="g6lib"``), and both on sapporo (``mode="gpu"``) once for each
precision of ``--precisions`` (set by ``SAPPORO_PRECISION`` in the environment, which the
worker inherits). It prints a table: the code's timestep parameter, relative energy errors
(from the code's energies, and recomputed in AMUSE from the final particles), block steps
and particle steps where the code counts them, the largest distance of a final position
from the same code's CPU run, and wall times. ``--eta`` sets ph4's ``timestep_parameter``
(eta in front of the square root of Aarseth's criterion, default 0.14); phiGRAPE keeps its
own (eta under the root, default 0.02). The workers' output is kept in
``DIR/<code>-<mode>[-<precision>].out``.

``--patch-ph4`` also builds ph4 from its source with the first accelerations and jerks sent
to the library (``sapporo capi amuse --install --patch-ph4-initial-upload``, in a second
environment, ``DIR/venv-ph4-patched``) and runs its GPU mode there too, for each precision:
ph4 2024.6.0's GPU mode sends a = jerk = 0 for every particle until its first step, which
costs energy accuracy on any GRAPE-6 library (docs/accuracy.md).

The ``--measure`` form is the part that runs inside the AMUSE environment (one code, one
mode, one JSON line); the script calls it itself.
"""

# ruff: noqa: T201  (an example prints its results)

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Each code's CPU mode, and its label in the table.
CPU_MODES = {"ph4": ("cpu", "CPU (ph4's own)"), "phigrape": ("g6lib", "CPU (AMUSE's g6lib)")}
PRECISIONS = ("double-single", "double")


def measure(code_name: str, mode: str, n: int, t_end: float, eps: float, seed: int,
            out_file: str, eta: float | None = None) -> dict[str, object]:
    """One run in the AMUSE environment; its energies, steps and times.

    Parameters
    ----------
    code_name : {"ph4", "phigrape"}
        The AMUSE code.
    mode : str
        Its ``mode`` argument (``"cpu"``, ``"g6lib"`` or ``"gpu"``).
    n, t_end, eps, seed : int, float, float, int
        Bodies, end time and softening length in N-body units, and the random seed.
    out_file : str
        Where the worker's stdout and stderr go.
    eta : float, optional
        ph4's ``timestep_parameter`` (None: the code's default; not used for phiGRAPE).

    Returns
    -------
    dict
        ``eta`` (the code's timestep parameter), ``dE_code``, ``dE_particles``,
        ``block_steps`` and ``steps`` (None where not counted), ``start_s``, ``evolve_s``
        and ``positions`` (the final positions, N-body units).
    """
    import numpy as np
    from amuse.community.ph4.interface import ph4
    from amuse.community.phigrape.interface import PhiGRAPE
    from amuse.ic.plummer import new_plummer_model
    from amuse.units import nbody_system

    np.random.seed(seed)
    bodies = new_plummer_model(n)
    eps2 = eps**2 | nbody_system.length**2
    cls = ph4 if code_name == "ph4" else PhiGRAPE
    t0 = time.perf_counter()
    code = cls(mode=mode, channel_type="sockets", redirection="file", redirect_file=out_file)
    code.parameters.epsilon_squared = eps2
    if eta is not None and code_name == "ph4":
        code.parameters.timestep_parameter = eta
    code.particles.add_particles(bodies)
    code.commit_particles()
    e0 = code.kinetic_energy + code.potential_energy
    t1 = time.perf_counter()
    code.evolve_model(t_end | nbody_system.time)
    t2 = time.perf_counter()
    e1 = code.kinetic_energy + code.potential_energy
    blocks = code.parameters.block_steps if code_name == "ph4" else None
    steps = code.parameters.total_steps if code_name == "ph4" else None
    used_eta = float(code.parameters.timestep_parameter)  # (ph4 reads 0 before the commit)
    final = code.particles.copy()
    code.stop()
    g = nbody_system.G

    def energy(p: object) -> object:
        return p.kinetic_energy() + p.potential_energy(smoothing_length_squared=eps2, G=g)

    e_start, e_end = energy(bodies), energy(final)
    return {"eta": used_eta, "dE_code": float(abs((e1 - e0) / e0)),
            "dE_particles": float(abs((e_end - e_start) / e_start)),
            "E0_code": e0.value_in(nbody_system.energy),
            "block_steps": int(blocks) if blocks is not None else None,
            "steps": int(steps) if steps is not None else None,
            "start_s": t1 - t0, "evolve_s": t2 - t1,
            "positions": final.position.value_in(nbody_system.length).tolist()}


def run(cmd: list[str], log: Path) -> None:
    """Run ``cmd`` (under ``nice``), its output appended to ``log``; stop when it fails.

    It runs in this script's folder: ``python -m sapporo.cli`` in the work folder would
    import the library's install folder ``DIR/sapporo`` as the package.
    """
    print(f"$ {' '.join(cmd)}  (output: {log})", flush=True)
    with log.open("a") as f:
        proc = subprocess.run(["nice", "-n", "19", *cmd], stdout=f, stderr=subprocess.STDOUT,
                              cwd=Path(__file__).resolve().parent)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}); see {log}")


def main(argv: list[str] | None = None) -> int:
    """Set up the AMUSE environment, run the integrations, print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", default=None,
                   help="scratch folder (default: a new one under the temporary folder); an "
                        "existing AMUSE environment in it is reused")
    p.add_argument("--n", type=int, default=1024, help="bodies (default 1024)")
    p.add_argument("--t-end", type=float, default=0.5, help="end time, N-body units")
    p.add_argument("--eps", type=float, default=0.01, help="softening length (0.01)")
    p.add_argument("--eta", type=float, default=None,
                   help="ph4's timestep_parameter (default: ph4's, 0.14)")
    p.add_argument("--codes", default="ph4,phigrape",
                   help="comma-separated codes to run: ph4, phigrape (default both)")
    p.add_argument("--precisions", default="double-single",
                   help="comma-separated sapporo precisions, one run each: double-single, "
                        "double (default double-single)")
    p.add_argument("--seed", type=int, default=1, help="random seed of the Plummer sphere")
    p.add_argument("--patch-ph4", action="store_true",
                   help="also run ph4's GPU mode built with its first accelerations and "
                        "jerks sent to the library (a second AMUSE environment)")
    p.add_argument("--amuse-version", default=None,
                   help="amuse-framework version to install (default: the newest the "
                        "index serves for this Python)")
    p.add_argument("--measure", nargs=3, metavar=("CODE", "MODE", "OUTFILE"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        code, mode, out = args.measure
        result = measure(code, mode, args.n, args.t_end, args.eps, args.seed, out, args.eta)
        print("RESULT " + json.dumps(result), flush=True)
        return 0

    codes, precisions = args.codes.split(","), args.precisions.split(",")
    for given, known in ((codes, CPU_MODES), (precisions, PRECISIONS)):
        if not set(given) <= set(known):
            p.error(f"expected some of {', '.join(known)}, got {','.join(given)}")
    patch = args.patch_ph4 and "ph4" in codes
    runs = [(code, mode, label, precision, patched) for code in codes
            for mode, label, precision, patched in (
                (*CPU_MODES[code], None, False),
                *(("gpu", f"sapporo ({pr})", pr, False) for pr in precisions),
                *(("gpu", f"sapporo ({pr}), ph4 patched", pr, True) for pr in precisions
                  if patch and code == "ph4"))]

    started = time.perf_counter()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="sapporo-amuse-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    venv, log = work / "venv", work / "install.log"
    python = venv / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)], log)
    framework = "amuse-framework" + (f"=={args.amuse_version}" if args.amuse_version else "")
    run([str(python), "-m", "pip", "install", framework, "mpi4py"], log)
    run([sys.executable, "-m", "sapporo.cli", "capi", "amuse", "--prefix", str(work / "sapporo"),
         "--python", str(python), "--install"], log)
    installed = time.perf_counter()
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('amuse-framework'))"],
        capture_output=True, text=True, check=True).stdout.strip()
    patched_venv = work / "venv-ph4-patched"
    if patch:
        patched_python = patched_venv / "bin" / "python"
        if not patched_python.exists():
            run([sys.executable, "-m", "venv", str(patched_venv)], log)
        run([str(patched_python), "-m", "pip", "install", f"amuse-framework=={version}",
             "mpi4py"], log)
        run([sys.executable, "-m", "sapporo.cli", "capi", "amuse", "--prefix",
             str(work / "sapporo"), "--python", str(patched_python), "--install",
             "--patch-ph4-initial-upload"], log)
        installed = time.perf_counter()

    rows = []
    for code, mode, label, precision, patched in runs:
        env_dir = patched_venv if patched else venv
        env = {**os.environ,
               "PATH": f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
        out = work / (f"{code}-{mode}" + (f"-{precision}" if precision else "")
                      + ("-patched" if patched else "") + ".out")
        out.unlink(missing_ok=True)
        cmd = ["nice", "-n", "19", str(env_dir / "bin" / "python"),
               str(Path(__file__).resolve()), "--n",
               str(args.n), "--t-end", str(args.t_end), "--eps", str(args.eps), "--seed",
               str(args.seed), "--measure", code, mode, str(out)]
        if args.eta is not None:
            cmd += ["--eta", str(args.eta)]
        run_env = {**env, "SAPPORO_PRECISION": precision} if precision else env
        print(f"$ {code} mode={mode}" + (f" SAPPORO_PRECISION={precision}" if precision else ""),
              flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env, cwd=work)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            sys.exit(f"{code} mode={mode} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
        r = json.loads(line[7:])
        text = out.read_text(errors="replace") if out.exists() else ""
        r["sapporo_lines"] = sum(ln.startswith("sapporo:") for ln in text.splitlines())
        rows.append((code, label, r))
    done = time.perf_counter()
    cpu_positions = {code: r["positions"] for code, label, r in rows
                     if label == CPU_MODES[code][1]}

    cpu = platform.processor() or platform.machine()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        cpu = next(ln.split(":", 1)[1].strip() for ln in lscpu.splitlines()
                   if ln.startswith("Model name"))
    except (OSError, StopIteration):
        pass
    print(f"\nAMUSE {version}; N = {args.n} Plummer, eps = {args.eps}, t = 0 -> {args.t_end} "
          f"(N-body units), seed {args.seed}; {cpu}, {os.cpu_count()} CPUs; "
          f"{time.strftime('%Y-%m-%d')}")
    print("| code | forces | eta | dE/E (code) | dE/E (particles) | block steps / steps "
          "| max \\|x - x_CPU\\| | start s | evolve s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for code, label, r in rows:
        steps = (f"{r['block_steps']:,} / {r['steps']:,}" if r["block_steps"] is not None
                 else "not exposed")
        ref = cpu_positions.get(code)
        dx = (max(math.dist(a, b) for a, b in zip(r["positions"], ref, strict=True))
              if ref is not None else float("nan"))
        print(f"| {code} | {label} | {r['eta']:g} | {r['dE_code']:.2e} "
              f"| {r['dE_particles']:.2e} | {steps} | {dx:.1e} | {r['start_s']:.1f} "
              f"| {r['evolve_s']:.1f} |")
    warned = [f"{code} {label}" for code, label, r in rows if r["sapporo_lines"]]
    if warned:
        print(f"sapporo printed messages in: {', '.join(warned)} (see {work}/*.out)")
    print(f"install {installed - started:.0f} s, runs {done - installed:.0f} s, total "
          f"{done - started:.0f} s; files in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
