"""Per-stage timing table of the particle-mesh solver against single-core NumPy.

    python -m tune.pm_bench [--grids 32,64,128] [--steps 3] [--backend opencl] [--json F]

Prints the machine load (measure only on a quiet machine: load average below 0.5), the
device, the date and a Markdown table for docs/pm.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

from sapporo.pm.bench import assignment_timing, bench, markdown_table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grids", default="32,64,128")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--backend", default=None)
    p.add_argument("--device", type=int, default=None)
    p.add_argument("--json", default=None, help="also write the raw result here")
    p.add_argument("--sorted", action="store_true",
                   help="particles ordered by mesh cell for both implementations")
    args = p.parse_args(argv)
    grids = [int(g) for g in args.grids.split(",") if g]
    load = os.getloadavg()[0]
    print(f"load average before: {load:.2f}" + ("  (NOT QUIET: figures unreliable)"
                                               if load >= 0.5 else ""))
    res = bench(grids, steps=args.steps, backend=args.backend, device=args.device,
                progress=lambda line: print(line, file=sys.stderr), sort=args.sorted)
    res["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    res["load_before"] = load
    res["load_after"] = os.getloadavg()[0]
    print(f"device: {res['device']}; {res['date']}; load {load:.2f} -> {res['load_after']:.2f}")
    print(f"particles {'sorted by cell' if args.sorted else 'in random order'}")
    print(markdown_table(res))
    rows = assignment_timing(grids, backend=args.backend, device=args.device)
    res["assignment"] = rows
    print("| G^3 = N | fixed-point atomics (ms) | float atomics (ms) |\n|---|---|---|")
    for r in rows:
        print(f"| {r['grid']}^3 | {r['fixed'] * 1e3:.1f} | {r['float'] * 1e3:.1f} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
