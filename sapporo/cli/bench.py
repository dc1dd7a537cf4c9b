"""``sapporo bench``: N x N throughput, N_active sweep and host overhead, with peers.

Writes ``bench-results.csv``, ``bench-table.txt`` and PNG plots (``bench-nactive.png``,
``bench-nxn.png``, ``bench-orders.png``; needs matplotlib) into ``--out`` and prints the
table on stdout, once. Progress goes to stderr while measuring (one line rewritten in
place on a terminal). ``--quiet``: neither progress nor table, only the files.
``--quick`` takes about a minute on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import math
import sys

from sapporo import config
from sapporo.cli import (
    StatusLine,
    add_device_options,
    add_output_options,
    add_variant_options,
    ensure_writable_dir,
    int_list,
    order_list,
    plain,
    precision_list,
)
from sapporo.errors import InputError


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table, write the files."""
    from sapporo.perf import bench

    progress = StatusLine(sys.stderr, quiet=args.quiet)
    kw: dict = {}
    if args.capi and not args.block_step:
        raise InputError("--capi times the block steps of --block-step through the C API: "
                         "give both")
    if args.orders:
        kw["orders"] = order_list(args.orders, "--orders")
    if args.precisions:
        kw["precisions"] = precision_list(args.precisions, "--precisions")
    if args.n:
        kw["n_list"] = int_list(args.n, "--n")
    if args.sweep_n:
        kw["sweep_n"] = int_list(str(args.sweep_n), "--sweep-n")[0]
    if args.n_active:
        kw["n_active"] = int_list(args.n_active, "--n-active")
    if args.repeats is not None:
        if args.repeats < 1:  # before the work, not after it
            raise InputError(f"--repeats must be >= 1, got {args.repeats}")
        kw["repeats"] = args.repeats
    if args.budget is not None:
        if not (math.isfinite(args.budget) and args.budget > 0):
            raise InputError(f"--budget must be finite and > 0, got {args.budget}")
        kw["budget"] = args.budget
    if args.peers is not None:
        kw["peers"] = [] if args.peers.strip().lower() in ("", "none") else [
            p.strip() for p in args.peers.split(",") if p.strip()]
    kw["backend"] = config.parse_backend(args.backend, "--backend")
    if args.devices:
        kw["devices"] = config.parse_devices(args.devices, "--devices")
    kw["peak_gflops"] = bench.parse_peak(args.peak_gflops)
    kw["launch"] = args.launch
    ensure_writable_dir(args.out, "--out")
    if args.block_step:
        return _block_step(args, kw, progress)
    make = (bench.BenchSettings.tiny if args.tiny else bench.BenchSettings.quick if args.quick
            else bench.BenchSettings)
    try:
        report = bench.run_bench(make(**kw), progress=progress)
    finally:
        progress.done()
    paths = bench.write_outputs(report, args.out, plots=not args.no_plots)
    if not args.quiet:
        sys.stdout.write("\n" + bench.format_table(report) + "\nwrote: "
                         + ", ".join(str(p) for p in paths) + "\n")
    return 0


def _block_step(args: argparse.Namespace, kw: dict, progress: StatusLine) -> int:
    """``sapporo bench --block-step``: the latency budget of block steps."""
    from sapporo.perf import latency

    orders = kw.get("orders", [4])
    precisions = kw.get("precisions", ["double-single"])
    n_list = kw.get("n_list", [256] if args.tiny else [1024, 4096] if args.quick
                    else latency.SWEEP_N)
    na_list = kw.get("n_active", [1, 16] if args.tiny else latency.SWEEP_N_ACTIVE)
    steps = 40 if args.tiny else 150 if args.quick else 300
    rows = []
    notes = []
    try:
        for order in orders:
            for precision in precisions:
                rows += latency.run_sweep(n_list, na_list, order=order, precision=precision,
                                          backend=kw["backend"], devices=kw.get("devices"),
                                          steps=steps, progress=progress)
        if args.capi:
            times = latency.capi_steps(rows, steps=steps, backend=kw["backend"],
                                       devices=kw.get("devices"), progress=progress)
            if times:
                notes.append(latency.startup_note(times))
    finally:
        progress.done()
    paths = latency.write_sweep(rows, args.out, plots=not args.no_plots, notes=notes)
    if args.quiet:
        return 0
    sys.stdout.write("\n" + latency.budget_table(rows) + "\n")
    for note in notes:
        sys.stdout.write("\n" + note + "\n")
    sys.stdout.write("\nwrote: " + ", ".join(str(p) for p in paths) + "\n")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo bench``."""
    p = sub.add_parser(
        "bench", help="benchmark the force kernels (N x N, N_active sweep, host overhead)",
        description=plain(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, about a minute")
    p.add_argument("--tiny", action="store_true",
                   help="the smallest sizes, seconds (for tests; ignores --quick)")
    p.add_argument("--out", default="sapporo-bench", help="output folder (default sapporo-bench)")
    add_variant_options(p, defaults=False)
    p.add_argument("--n", default=None,
                   help="N of the N x N runs, e.g. 4k,16k,64k (default 1k,4k,16k,64k)")
    p.add_argument("--sweep-n", default=None,
                   help="N of the N_active sweep and overhead (default 16k; 4k with --quick)")
    p.add_argument("--n-active", default=None, help="N_active values (default 1,2,4,...,1024)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed repeats of N x N runs (default 3; 2 with --quick)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds per N x N measurement before an i-subset is used "
                        "(default 30; 4 with --quick)")
    p.add_argument("--peers", default=None,
                   help="comma-separated: numpy-reference, pytreegrav, pytreegrav-target, cupy, "
                        "torch, or none (default numpy-reference,pytreegrav)")
    add_device_options(p)
    p.add_argument("--peak-gflops", default=None,
                   help="device peak for the fraction of peak: one number, or "
                        "'double-single=X,double=Y'")
    p.add_argument("--launch", choices=("auto", "defaults"), default="auto",
                   help="auto: tuning profile when present; defaults: built-in parameters")
    p.add_argument("--block-step", action="store_true",
                   help="the latency budget of block steps instead (N 1k,4k,16k x N_active "
                        "1,4,...,256 by default; writes block-step.csv, .md, .png)")
    p.add_argument("--capi", action="store_true",
                   help="with --block-step: also time the same steps through the C API (builds "
                        "the C library and a small C driver; needs a C compiler)")
    add_output_options(p)
    p.set_defaults(func=run)
