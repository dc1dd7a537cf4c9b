"""``sapporo accuracy``: kernel errors against the float64 reference, as a Markdown table."""

from __future__ import annotations

import argparse
import sys

from .errors import InputError


def run(args: argparse.Namespace) -> int:
    """Measure and print the table."""
    from .accuracy import markdown, measure

    if args.n < 2:
        raise InputError(f"--n must be >= 2 (errors need at least one other particle), "
                         f"got {args.n}")
    if args.n_active < 1:
        raise InputError(f"--n-active must be >= 1, got {args.n_active}")
    if args.seed < 0:
        raise InputError(f"--seed must be a non-negative integer, got {args.seed}")
    sys.stderr.write(f"measuring N={args.n}, {args.n_active} active particles ...\n")
    rows = measure(n=args.n, n_active=args.n_active, orders=args.orders,
                   precisions=args.precisions, seed=args.seed, backend=args.backend)
    sys.stdout.write(markdown(rows) + "\n")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo accuracy``."""
    p = sub.add_parser("accuracy", help="kernel errors against the float64 reference")
    p.add_argument("--n", type=int, default=4096, help="particles (default 4096)")
    p.add_argument("--n-active", type=int, default=512, help="i-particles (default 512)")
    p.add_argument("--orders", type=int, nargs="+", default=[2, 4, 6], choices=[2, 4, 6])
    p.add_argument("--precisions", nargs="+", default=["double-single", "double"],
                   choices=["double-single", "double"])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--backend", default=None)
    p.set_defaults(func=run)
