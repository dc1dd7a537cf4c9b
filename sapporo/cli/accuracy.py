"""``sapporo accuracy``: kernel errors against the float64 reference, as a Markdown table.

The table on stdout is the result; ``--quiet`` drops the progress line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from sapporo import config
from sapporo.cli import (
    add_device_options,
    add_output_options,
    add_variant_options,
    order_list,
    precision_list,
)
from sapporo.errors import InputError


def run(args: argparse.Namespace) -> int:
    """Measure and print the table."""
    from sapporo.perf.accuracy import markdown, measure

    if args.n < 2:
        raise InputError(f"--n must be >= 2 (errors need at least one other particle), "
                         f"got {args.n}")
    if args.n_active < 1:
        raise InputError(f"--n-active must be >= 1, got {args.n_active}")
    if args.n_active > args.n:
        raise InputError(f"--n-active {args.n_active} is larger than --n {args.n}: the "
                         "active particles are a subset of the N")
    if args.seed < 0:
        raise InputError(f"--seed must be a non-negative integer, got {args.seed}")
    orders = order_list(args.orders, "--orders")
    precisions = precision_list(args.precisions, "--precisions")
    backend = config.parse_backend(args.backend, "--backend")
    devices = config.parse_devices(args.devices, "--devices")
    if not args.quiet:
        sys.stderr.write(f"measuring N={args.n}, {args.n_active} active particles ...\n")
    rows = measure(n=args.n, n_active=args.n_active, orders=orders, precisions=precisions,
                   seed=args.seed, backend=backend, devices=devices)
    sys.stdout.write(markdown(rows) + "\n")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo accuracy``."""
    p = sub.add_parser(
        "accuracy", help="kernel errors against the float64 reference",
        description="Measure the force kernels' errors against the float64 reference on a "
        "Plummer sphere (also shifted by 1e4, and unsoftened) and print a Markdown table.")
    p.add_argument("--n", type=int, default=4096, help="particles (default 4096)")
    p.add_argument("--n-active", type=int, default=512,
                   help="i-particles, at most --n (default 512)")
    add_variant_options(p)
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    add_device_options(p)
    add_output_options(p, plots=False)
    p.set_defaults(func=run)
