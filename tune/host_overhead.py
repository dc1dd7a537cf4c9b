"""Host-side cost of a small force call on the CUDA backend, measured without a GPU.

The CUDA backend runs against the test suite's stand-in for PyCUDA (``tests/cudaemu``),
with kernel execution off: what is timed is sapporo's own Python (input checks, launch
plans, the host-side combination of the parts) plus the stand-in's bookkeeping, and the
driver operations each call makes are counted. On a GPU the driver's own latencies come
on top (a launch, two copies, a stream synchronization). Usage::

    python tune/host_overhead.py [--n 131072] [--order 4] [--precision double-single]

Output: per kind of call (a force call with the time unchanged; a block step that updates
one j-particle, moves the time on and computes the force on one particle), the driver
operations and the best time per call over several repeats.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=131072, help="j-particles stored")
    parser.add_argument("--order", type=int, default=4, choices=(2, 4, 6))
    parser.add_argument("--precision", default="double-single",
                        choices=("double-single", "double"))
    parser.add_argument("--calls", type=int, default=500, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT / "tests"))
    from cudaemu.fake_pycuda import make_fake_pycuda

    modules = make_fake_pycuda(execute=False, poison=False)
    sys.modules.update(modules)
    import sapporo

    drv = modules["pycuda.driver"]
    n = args.n
    rng = np.random.default_rng(1)
    x, v = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    lib = sapporo.Library(order=args.order, precision=args.precision, backend="cuda")
    lib.set_j_particles(np.arange(n), np.arange(n), 0.0, np.full(n, 1.0 / n), x, v, a=0 * x)
    acc = np.zeros((1, 3))
    lib.compute(x[:1], v[:1], [0], 1e-4, a=acc)
    step = [0]

    def force() -> None:
        lib.compute(x[:1], v[:1], [0], 1e-4, a=acc)

    def block_step() -> None:
        step[0] += 1
        t = step[0] * 1e-6
        lib.set_j_particles([5], [5], t, 1.0 / n, x[5:6], v[5:6], a=acc)
        lib.set_time(t)
        lib.compute(x[:1], v[:1], [0], 1e-4, a=acc)

    plan = next(iter(lib._devs[0]._plans.values()))
    print(f"sapporo {sapporo.__version__}, CUDA backend on the PyCUDA stand-in (no kernels "
          f"run); N = {n}, order {args.order}, {args.precision}; one active particle: "
          f"{plan.nparts} parts, combined on the "
          f"{'host' if plan.reduce is None else 'device'}")
    for name, call in (("force call", force), ("block step", block_step)):
        drv.state["calls"].clear()
        call()
        ops = ", ".join(f"{k} {v}" for k, v in sorted(drv.state["calls"].items()))
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                call()
            best = min(best, (time.perf_counter() - t0) / args.calls)
        print(f"{name:>11}: {best * 1e6:7.1f} us per call   driver operations: {ops}")
    lib.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
