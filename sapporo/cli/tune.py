"""``sapporo tune``: sweep launch parameters per order and precision and write profiles.

One line per configuration tried (with its time) goes to stdout while tuning, then a summary
per order and precision: the chosen configuration per range of active particles, its time,
and the time of the built-in default (``--quiet``: neither). Profiles go to the user profile folder
(``SAPPORO_PROFILE_DIR`` overrides) or ``--out``; the library then loads them automatically.
"""

from __future__ import annotations

import argparse
import sys

from sapporo import config
from sapporo.cli import (
    add_device_options,
    add_output_options,
    add_variant_options,
    ensure_writable_dir,
    int_list,
    one_device,
    order_list,
    plain,
    precision_list,
    progress_writer,
)
from sapporo.errors import InputError


def run(args: argparse.Namespace) -> int:
    """Tune every requested order and precision; exit code 0 on success."""
    from sapporo.perf import tuning

    w = sys.stdout.write
    progress = progress_writer(args.quiet)
    orders = order_list(args.orders, "--orders")
    precisions = precision_list(args.precisions, "--precisions")
    device = one_device(args.devices, "--devices")
    points = int_list(args.n_active, "--n-active") if args.n_active else None
    configs = ([tuning.parse_config(c) for c in args.configs.split(";") if c.strip()]
               if args.configs else None)
    dims = {k: getattr(args, k) for k in ("li", "lj", "w", "jt", "local", "gpc")}
    if any(v is not None for v in dims.values()):
        if configs is not None:
            raise InputError("--configs and the grid options (--w, --jt, ...) exclude each other")
        full = {"li": [1], "lj": [1], "w": [4, 8, 16], "jt": [64, 256, 1024], "local": [0],
                "gpc": [1, 2, 4, 8]}
        for k, v in dims.items():
            if v is not None:
                full[k] = int_list(v, f"--{k}") if k != "local" else [
                    int(x) for x in v.split(",") if x.strip()]
        configs = tuning.grid(li=full["li"], lj=full["lj"], w=full["w"], jt=full["jt"],
                              use_local=[bool(x) for x in full["local"]],
                              groups_per_cu=full["gpc"])
        if not configs:
            raise InputError("the grid options give no valid launch configuration")
    backend = config.parse_backend(args.backend, "--backend")
    if args.out is not None and not args.dry_run:
        ensure_writable_dir(args.out, "--out")  # before the sweep, not after it
    results = []
    for precision in precisions:
        for order in orders:
            res = tuning.tune(
                order, precision, backend=backend, device=device, n=args.n,
                points=points, configs=configs, quick=args.quick, repeats=args.repeats,
                metric=args.metric, margin=args.margin, confirm=args.confirm,
                verify=not args.no_verify,
                write=not args.dry_run, out_dir=args.out, progress=progress,
            )
            results.append((order, precision, res))
    if args.quiet:
        return 0
    w("\nsummary (time per force call; 'default' is the built-in launch configuration)\n")
    for order, precision, res in results:
        meta = res.table.meta
        w(f"\norder {order} {precision} on {meta['device']} ({meta['backend']}), "
          f"N = {meta['n']}, {meta['created']}\n")
        w(f"  {'N_active':>8}  {'chosen':<42} {'time':>11} {'default':>11} {'speedup':>8}\n")
        for p, (cfg, t) in sorted(res.best.items()):
            d = res.default_seconds.get(p)
            ds, sp = (f"{d * 1e3:9.3f}ms", f"{d / t:7.2f}x") if d else (f"{'-':>11}", f"{'-':>8}")
            w(f"  {p:>8}  {tuning.describe(cfg):<42} {t * 1e3:9.3f}ms {ds} {sp}\n")
        w(f"  profile: {res.path if res.path else '(not written: --dry-run)'}\n")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo tune``."""
    p = sub.add_parser(
        "tune", help="sweep the force kernels' launch parameters and write a tuning profile",
        description=plain(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    add_variant_options(p)
    add_device_options(p, one=True)
    p.add_argument("--n", type=int, default=None,
                   help="reference j-count (default 131072 on a GPU, 16384 on a CPU; "
                        "4096 with --quick)")
    p.add_argument("--n-active", default=None,
                   help="comma-separated active-particle counts (default 1,2,4,...,1024,N)")
    p.add_argument("--quick", action="store_true", help="a fast, reduced sweep")
    p.add_argument("--repeats", type=int, default=2, help="timed calls per point (default 2)")
    p.add_argument("--metric", choices=("kernel", "wall", "cpu"), default="kernel",
                   help="time to minimise: device kernel time (default), wall time, or the "
                        "process's CPU time (robust to other load, blind to idle cores)")
    grid = p.add_argument_group(
        "candidate grid (instead of the device's default sweep; unset dimensions take the CPU "
        "sweep's values: li 1, lj 1, w 4,8,16, jt 64,256,1024, local 0, gpc 1,2,4,8)")
    for name, what in (("li", "work-items over i per group"), ("lj", "j-lanes per group"),
                       ("w", "i-particles per work-item (vector width)"),
                       ("jt", "j-particles per tile"), ("local", "tiles in local memory: 0/1"),
                       ("gpc", "work-groups per compute unit")):
        grid.add_argument(f"--{name}", default=None, help=f"comma-separated: {what}")
    p.add_argument("--margin", type=float, default=0.05,
                   help="keep the built-in default unless a candidate is faster by more than "
                        "this fraction (default 0.05)")
    p.add_argument("--confirm", type=int, default=7,
                   help="paired calls in which a candidate beating the default must keep its "
                        "lead, in the median (default 7; 0: no confirmation)")
    p.add_argument("--configs", default=None,
                   help="explicit candidates, ';'-separated, e.g. 'w=8,jt=64,gpc=4;w=4,jt=256'")
    p.add_argument("--out", default=None,
                   help="folder for the profiles (default: the user profile folder)")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the check of the chosen configurations against the reference")
    p.add_argument("--dry-run", action="store_true", help="do not write profiles")
    add_output_options(p, plots=False)
    p.set_defaults(func=run)
