"""Compute and communication time of ParallelLibrary per block step, and a scaling model.

usage:
    python tune/mpi_bench.py measure [--n 65536] [--ranks 1,2,4] [--out tune/mpi_bench.json]
    python tune/mpi_bench.py blocks [--n 1024,4096] [--t-end 0.25] [--out tune/mpi_blocks.json]
    python tune/mpi_bench.py model [--data tune/mpi_bench.json] [--figure FILE.png]

``measure`` launches ``mpiexec -n P`` (loopback, one node) for each P, in two settings: one
thread of the OpenCL CPU device per rank (strong scaling: P ranks on P cores) and the
machine's cores shared by the ranks (the same total cores for every P). Each run times, on
every rank, an N x N force evaluation and block steps of 1 to 4096 active particles (upload
of the block, set_time, compute), split into the time inside the library's collectives
("communication", which includes waiting for the slowest rank) and the rest, and an
MPI_Allgather sweep over message sizes. Rank 0 writes everything to a JSON file.

``blocks`` records the block-size histograms of short ``sapporo run`` integrations of Plummer
spheres (one process; counts, not timings).

``model`` fits, from those runs: the device's interaction rate R and per-call overhead t0
(P = 1), the library's software cost per collective and the loopback allgather latency and
bandwidth (P = 2, 4); with published interconnect figures it projects the parallel
efficiency over a run at P = 8..256 for N = 64k, 1M and 8M, with the measured block sizes
scaled to those N (see docs/parallel.md for the model and its assumptions), and draws the
figure. Do not measure while the machine is busy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BLOCKS = (1, 16, 256, 4096)
DEFAULT_DATA = HERE / "mpi_bench.json"
DEFAULT_BLOCKS = HERE / "mpi_blocks.json"

#: Published interconnect figures used for projections (per link, MPI level):
#: InfiniBand HDR (200 Gb/s = 25 GB/s line rate; NVIDIA ConnectX-6 data sheet: sub-600 ns
#: MPI latency, here rounded up to 1 us) and the Cray XD1 RapidArray of Nitadori, Makino &
#: Abe (2006) (about 2 GB/s and 1.7 us MPI latency, Cray XD1 data sheet).
INTERCONNECTS = {
    "InfiniBand HDR": {"latency": 1.0e-6, "bandwidth": 25e9},
    "Cray XD1": {"latency": 1.7e-6, "bandwidth": 2e9},
}
#: A GPU rank for the projections: NOT measured here (no GPU on this machine). The rate is
#: half the static ceiling of the order-4 double-single CUDA kernel on an H100
#: (docs/performance.md: 0.59e12 interactions/s) and the overhead per force call an
#: assumption of 20 us (launches, PCIe copies, host work).
GPU = {"rate": 0.3e12, "overhead": 20e-6}
#: bytes per i-particle the ranks exchange (13 doubles at order 4: acc, pot, nn r^2 and id,
#: jerk, neighbour count)
BYTES_PER_I = 13 * 8
#: collectives per block step besides the result exchange: none (the error flags ride on
#: the gather of the forces); SAPPORO_MPI_CHECK=1, a debug setting, adds 3 (set_j_particles,
#: set_time and start_compute each check for errors and argument agreement). The runs of
#: tune/mpi_bench.json up to 2026-11-23 had those 3 checks in every step: `fit` takes the
#: software cost per collective from the counted collectives, whatever their number
CHECKS_PER_STEP = 0


# ----------------------------------------------------------------------------- measuring


def _worker(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    from sapporo.parallel import ParallelLibrary
    from sapporo.reference import plummer

    world = MPI.COMM_WORLD
    n = args.n
    x, v, m = plummer(n, seed=1)
    ids = np.arange(n)
    eps2 = 1e-4
    out: dict = {"ranks": world.size, "threads": args.threads, "n": n, "blocks": []}
    with ParallelLibrary(decomposition=args.decomposition, order=4,
                         precision="double-single") as lib:
        out["grid"] = [lib.rows, lib.cols]
        lib.set_j_particles(ids, ids, 0.0, m, x, v)
        lib.set_time(0.0)
        for ni in BLOCKS:  # build and warm every shape first
            lib.compute(x[:ni], v[:ni], ids[:ni], eps2)

        def timed(fn) -> tuple[float, float, int]:
            world.Barrier()
            c0, k0, t0 = lib.comm_seconds, lib.collectives, time.perf_counter()
            fn()
            return time.perf_counter() - t0, lib.comm_seconds - c0, lib.collectives - k0

        if not args.skip_nxn:
            wall, comm, _ = timed(lambda: lib.compute(x, v, ids, eps2))
            out["nxn"] = {"wall": wall, "comm": comm}
        rng = np.random.default_rng(2)
        t = 0.0
        for ni in BLOCKS:
            rows = []
            for _ in range(args.repeats):
                sel = np.sort(rng.choice(n, size=ni, replace=False))
                t += 2.0**-20

                def step(sel=sel, t=t) -> None:
                    lib.set_j_particles(sel, ids[sel], t, m[sel], x[sel], v[sel])
                    lib.set_time(t)
                    lib.compute(x[sel], v[sel], ids[sel], eps2)

                rows.append(timed(step))
            wall, comm, coll = (float(np.median([r[k] for r in rows])) for k in range(3))
            out["blocks"].append({"ni": ni, "wall": wall, "comm": comm, "collectives": coll})
    sweep = []
    for nbytes in (8, 64, 512, 4096, 32768, 262144, 2097152):
        send = np.zeros(nbytes // 8)
        recv = np.empty(world.size * send.size)
        reps = 200 if nbytes <= 4096 else 20
        world.Barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            world.Allgather(send, recv)
        sweep.append({"bytes": nbytes, "seconds": (time.perf_counter() - t0) / reps})
    out["allgather"] = sweep
    if world.rank == 0:
        Path(args.out).write_text(json.dumps(out, indent=1))


def _measure(args: argparse.Namespace) -> None:
    from sapporo.parallel import square_rows

    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    if not os.access(mpiexec, os.X_OK):
        mpiexec = "mpiexec"
    cores = os.cpu_count() or 1
    results = []
    plan = [(1, 1)] if cores > 1 else []  # P = 1 on one core, then P ranks on all cores
    plan += [(p, max(1, cores // p)) for p in (int(q) for q in args.ranks.split(","))]
    for p, threads in plan:
        setting = f"{p} x {threads} thread(s) on {cores} cores"
        tmp = Path(args.out).with_suffix(f".p{p}t{threads}.json")
        env = dict(os.environ, POCL_MAX_PTHREAD_COUNT=str(threads),
                   POCL_CPU_MAX_CU_COUNT=str(threads))
        env.pop("SAPPORO_DEVICES", None)
        dec = "j" if square_rows(p) == 1 else args.decomposition
        cmd = [mpiexec, "-n", str(p), sys.executable, __file__, "worker", "--n",
               str(args.n), "--out", str(tmp), "--threads", str(threads),
               "--repeats", str(args.repeats), "--decomposition", dec]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
        data = json.loads(tmp.read_text())
        tmp.unlink()
        data["setting"] = setting
        results.append(data)
        nxn = data.get("nxn", {})
        print(f"P = {p} ({setting}): N x N "
              f"{nxn.get('wall', float('nan')):.3f} s (comm {nxn.get('comm', 0):.4f} s); "
              + ", ".join(f"ni={b['ni']}: {1e3 * b['wall']:.2f} ms "
                          f"(comm {1e3 * b['comm']:.2f})" for b in data["blocks"])
              + f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
    loads = os.getloadavg()
    Path(args.out).write_text(json.dumps({"n": args.n, "cores": cores, "runs": results,
                                          "loadavg_after": loads,
                                          "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                time.gmtime())}, indent=1))
    print(f"written {args.out} (load average after: {loads[0]:.2f})")


def _blocks(args: argparse.Namespace) -> None:
    """Block-size histograms of short ``sapporo run`` integrations (one process)."""
    import tempfile

    hist = {}
    for n in (int(q) for q in args.n.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "sapporo.cli", "run", "--n", str(n), "--t-end",
                   str(args.t_end), "--quiet", "--no-plots", "--out", tmp]
            subprocess.run(cmd, check=True, timeout=3600)
            counts = np.load(Path(tmp) / "snapshot_final.npz")["n_active_counts"]
        nz = np.flatnonzero(counts)
        hist[str(n)] = [[int(k), int(counts[k])] for k in nz]
        mean = float((nz * counts[nz]).sum() / counts.sum())
        print(f"N = {n}: {int(counts.sum())} block steps, mean block {mean:.1f}")
    Path(args.out).write_text(json.dumps({"t_end": args.t_end, "hist": hist}, indent=0))
    print(f"written {args.out}")


def block_sizes(blocks: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Block sizes and their counts for ``n`` particles: the histogram of the largest
    measured N, sizes scaled by (n / N)^a with a from the mean blocks of the measured N."""
    hist = {int(k): np.array(v, dtype=float) for k, v in blocks["hist"].items()}
    ns = sorted(hist)
    means = [float((hist[q][:, 0] * hist[q][:, 1]).sum() / hist[q][:, 1].sum()) for q in ns]
    a = math.log(means[-1] / means[0]) / math.log(ns[-1] / ns[0]) if len(ns) > 1 else 2 / 3
    ref = hist[ns[-1]]
    sizes = np.clip(np.round(ref[:, 0] * (n / ns[-1]) ** a), 1, n)
    return sizes, ref[:, 1]


def run_efficiency(blocks: dict, n: int, p: int, rows: int, **kw: float) -> float:
    """Efficiency over a run: the total modelled time of its block steps."""
    sizes, counts = block_sizes(blocks, n)
    t1 = sum(c * step_time(s, n, 1, 1, **kw) for s, c in zip(sizes, counts, strict=True))
    tp = sum(c * step_time(s, n, p, rows, **kw) for s, c in zip(sizes, counts, strict=True))
    return t1 / (p * tp)


# ----------------------------------------------------------------------------- the model


def fit(data: dict) -> dict:
    """Model parameters from the measurements (see docs/parallel.md)."""
    runs = data["runs"]
    n = data["n"]
    one = next(r for r in runs if r["ranks"] == 1 and r["threads"] == 1)
    rate = n * n / (one["nxn"]["wall"] - one["nxn"]["comm"])
    b1 = {b["ni"]: b for b in one["blocks"]}
    overhead = max(0.0, b1[1]["wall"] - b1[1]["comm"] - n / rate)
    # loopback allgather: t = alpha * ceil(log2 P) + (P - 1) * bytes / beta, fitted on the
    # runs whose ranks have a core each
    rows, rhs = [], []
    for r in runs:  # ranks with a core each (oversubscribed ranks wait for the scheduler)
        p = r["ranks"]
        if 1 < p <= data["cores"]:
            for s in r["allgather"]:
                # relative residuals: small messages count as much as large ones
                rows.append([math.ceil(math.log2(p)) / s["seconds"],
                             (p - 1) * s["bytes"] / s["seconds"]])
                rhs.append(1.0)
    (alpha, inv_beta), *_ = np.linalg.lstsq(np.array(rows, float), np.array(rhs), rcond=None)
    # the library's software cost per collective: communication time of a one-particle
    # block step beyond the loopback allgather's latency, per collective (it includes the
    # ranks' waiting for one another)
    soft = []
    for r in runs:  # ranks with a core each (oversubscribed ranks wait for the scheduler)
        if 1 < r["ranks"] <= data["cores"]:
            b = {q["ni"]: q for q in r["blocks"]}[1]
            lat = alpha * math.ceil(math.log2(r["ranks"]))
            soft.append(max(0.0, b["comm"] / max(1, b["collectives"]) - lat))
    return {"rate": rate, "overhead": overhead, "loop_alpha": max(alpha, 1e-7),
            "loop_beta": 1.0 / max(inv_beta, 1e-12), "soft": float(np.median(soft)),
            "n": n}


def step_time(ni: float, n: float, p: int, rows: int, rate: float, overhead: float,
              alpha: float, beta: float, soft: float) -> float:
    """Modelled time of one block step of ``ni`` active particles on ``p`` ranks in a
    ``rows x p/rows`` grid."""
    cols = p // rows
    ni_row = math.ceil(ni / rows)
    compute = ni_row * math.ceil(n / cols) / rate + overhead
    if p == 1:
        return compute
    lat = lambda q: alpha * math.ceil(math.log2(q)) if q > 1 else 0.0  # noqa: E731
    comm = CHECKS_PER_STEP * (lat(p) + soft)  # argument checks on all ranks, if any
    # along the row: an allgather of every partial, or (large blocks) an all-to-all of
    # slices and an allgather of the combined slices; the library takes the second from
    # SCATTER_MIN_BYTES on, which the minimum stands for
    gather = lat(cols) + soft + (cols - 1) * ni_row * BYTES_PER_I / beta
    scatter = 2 * (lat(cols) + soft + (cols - 1) / cols * ni_row * BYTES_PER_I / beta)
    comm += min(gather, scatter) if cols > 1 else 0.0
    if rows > 1:  # gathering the rows along the column
        comm += lat(rows) + soft + (rows - 1) * ni_row * BYTES_PER_I / beta
    return compute + comm


def efficiency(ni: float, n: float, p: int, rows: int, **kw: float) -> float:
    return step_time(ni, n, 1, 1, **kw) / (p * step_time(ni, n, p, rows, **kw))


def _model(args: argparse.Namespace) -> None:
    from sapporo.parallel import square_rows

    data = json.loads(Path(args.data).read_text())
    prm = fit(data)
    print(f"measured: device {prm['rate']:.3e} interactions/s, {1e6 * prm['overhead']:.0f} us "
          f"per force call; loopback allgather {1e6 * prm['loop_alpha']:.2f} us + "
          f"bytes / {prm['loop_beta'] / 1e9:.2f} GB/s; {1e6 * prm['soft']:.1f} us of "
          "software per collective")
    # measured speed-ups of the N x N evaluation on loopback
    runs = [r for r in data["runs"] if "nxn" in r]
    for base in (r for r in runs if r["ranks"] == 1):
        for r in runs:
            if r["ranks"] > 1:
                print(f"  N x N: {r['setting']} against {base['setting']}: "
                      f"{base['nxn']['wall'] / r['nxn']['wall']:.2f}x")
    ib = INTERCONNECTS["InfiniBand HDR"]
    devices = {
        "GPU ranks (assumed rate)": dict(rate=GPU["rate"], overhead=GPU["overhead"]),
        "ranks like this machine's device (measured)": dict(rate=prm["rate"],
                                                            overhead=prm["overhead"]),
    }
    blocks = json.loads(Path(args.blocks).read_text())
    for n in (65536, 1 << 20, 1 << 23):
        sizes, counts = block_sizes(blocks, n)
        print(f"  N = {n}: mean block {(sizes * counts).sum() / counts.sum():.0f}, "
              f"work-weighted {(sizes ** 2 * counts).sum() / (sizes * counts).sum():.0f}")
    ps = [8, 16, 32, 64, 128, 256]
    table = []
    for dname, dev in devices.items():
        for n in (65536, 1 << 20, 1 << 23):
            for dec in ("j", "2d"):
                effs = [run_efficiency(blocks, n, p, 1 if dec == "j" else square_rows(p),
                                       alpha=ib["latency"], beta=ib["bandwidth"],
                                       soft=prm["soft"], **dev) for p in ps]
                table.append((dname, n, dec, effs))
    print("\nprojected efficiency over a run, InfiniBand HDR, measured block sizes scaled:")
    print(f"{'ranks':<45} {'N':>8} {'dec':>4} " + " ".join(f"{p:>6}" for p in ps))
    for dname, n, dec, effs in table:
        print(f"{dname:<45} {n:>8} {dec:>4} " + " ".join(f"{e:6.2f}" for e in effs))
    if args.figure:
        _figure(args.figure, ps, table, data, prm)


def _figure(path: str, ps: list[int], table: list, data: dict, prm: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    colours = {65536: "C0", 1 << 20: "C1", 1 << 23: "C2"}
    names = {65536: "64k", 1 << 20: "1M", 1 << 23: "8M"}
    for ax, dname in zip(axes, ("GPU ranks (assumed rate)",
                                "ranks like this machine's device (measured)"), strict=True):
        for name, n, dec, effs in table:
            if name != dname:
                continue
            ax.plot(ps, effs, "-" if dec == "2d" else "--", color=colours[n], marker="o",
                    ms=3, label=f"N = {names[n]}, {dec}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks P")
        ax.set_title(dname, fontsize=10)
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1.05)
    ax = axes[0]
    # published: Nitadori, Makino & Abe (2006), N = 64k on 400 dual-core Opterons of a Cray
    # XD1: 2.03 Tflops, 57.7% of the theoretical peak (a fraction of peak, not a parallel
    # efficiency); HiGPUs (Capuzzo-Dolcetta, Spera & Punzo 2013): N = 8M on 256 GPUs
    axes[1].plot([400], [0.577], "k*", ms=10, label="NMA 2006: 64k, 400 CPUs\n(57.7% of peak)")
    axes[1].set_xlim(6, 512)
    ax.axvline(256, color="0.5", ls=":")
    ax.text(250, 0.05, "HiGPUs: N = 8M\non 256 GPUs", ha="right", fontsize=8, color="0.3")
    ax.set_ylabel("parallel efficiency (model)")
    for a in axes:
        a.legend(fontsize=7, loc="lower left")
    fig.suptitle("ParallelLibrary model: InfiniBand HDR, block sizes of Plummer runs; "
                 f"calibrated on {data['date']} (device {prm['rate']:.2e} int/s)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"written {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time P = 1, 2, 4 on this machine")
    m.add_argument("--n", type=int, default=65536)
    m.add_argument("--ranks", default="1,2,4")
    m.add_argument("--repeats", type=int, default=7)
    m.add_argument("--decomposition", default="2d")
    m.add_argument("--out", default=str(DEFAULT_DATA))
    w = sub.add_parser("worker", help="(internal) one mpiexec run")
    w.add_argument("--n", type=int, required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--threads", type=int, default=1)
    w.add_argument("--repeats", type=int, default=7)
    w.add_argument("--decomposition", default="j")
    w.add_argument("--skip-nxn", action="store_true")
    b = sub.add_parser("blocks", help="block-size histograms of short runs (one process)")
    b.add_argument("--n", default="1024,4096")
    b.add_argument("--t-end", type=float, default=0.25)
    b.add_argument("--out", default=str(DEFAULT_BLOCKS))
    d = sub.add_parser("model", help="fit the model and project")
    d.add_argument("--data", default=str(DEFAULT_DATA))
    d.add_argument("--blocks", default=str(DEFAULT_BLOCKS))
    d.add_argument("--figure", default=None)
    args = ap.parse_args()
    {"measure": _measure, "worker": _worker, "model": _model, "blocks": _blocks}[args.cmd](args)


if __name__ == "__main__":
    main()
