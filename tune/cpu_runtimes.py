"""Compare CPU OpenCL runtimes for sapporo, interleaved: per-command latency, a block step,
and N x N throughput.

Each runtime is measured in its own process (an OpenCL runtime is chosen when PyOpenCL
starts), alternating between runtimes for ``--rounds`` rounds, and the best of the rounds is
reported. Runtimes are named by an OpenCL vendor folder (``OCL_ICD_VENDORS``) and extra
library paths, e.g. Debian's PoCL (``/etc/OpenCL/vendors``) and Intel's CPU runtime from
the package index (``pip install intel-opencl-rt intel-cmplr-lib-rt`` into a virtual
environment, a folder with an ``intel.icd`` naming its ``libintelocl.so``)::

    python tune/cpu_runtimes.py --runtime pocl=/etc/OpenCL/vendors \\
        --runtime intel=/tmp/intelicd:/path/to/venv/lib

Output: one line per runtime with the device name, the median time of a trivial kernel and
its wait, the block-step wall and device time at N = 4096 with 1 and 16 active particles,
and the N x N interactions per second at N = 16384 (4th order, double-single).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, time, numpy as np
import pyopencl as cl
import sapporo
from sapporo.perf.latency import block_step_budget
from sapporo.reference import plummer

out = {}
lib = sapporo.Library(order=4, precision="double-single", backend="opencl")
out["device"] = lib.device_name
ctx = lib._devs[0].ctx
prog = ctx.build("selftest.cl", {"SCALE": 2})
x = ctx.alloc(64 * 8)
k = prog.kernel("axpb")
ts = []
for i in range(400):
    t0 = time.perf_counter()
    k((64,), (64,), np.int32(64), np.float64(1.0), x, x)
    ctx.finish()
    ts.append(time.perf_counter() - t0)
out["trivial_us"] = 1e6 * float(np.median(ts[50:]))
for na in (1, 16):
    r = block_step_budget(4096, na, steps=200)
    out[f"step{na}_us"] = r["wall_us"]
    out[f"step{na}_device_us"] = r["device_us"]
n = 16384
xs, vs, ms = plummer(n, seed=1)
ids = np.arange(n)
lib.set_j_particles(ids, ids, 0.0, ms, xs, vs)
lib.set_time(0.0)
lib.compute(xs[:2048], vs[:2048], ids[:2048], 1e-4)
best = 1e9
for _ in range(2):
    t0 = time.perf_counter()
    lib.compute(xs, vs, ids, 1e-4)
    best = min(best, time.perf_counter() - t0)
out["nxn_per_s"] = n * n / best
lib.close()
print("RESULT " + json.dumps(out))
"""


def measure(vendors: str, libpath: str) -> dict:
    env = dict(os.environ, OCL_ICD_VENDORS=vendors)
    if libpath:
        env["LD_LIBRARY_PATH"] = libpath + ":" + env.get("LD_LIBRARY_PATH", "")
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(proc.stderr[-2000:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", action="append", required=True,
                        help="NAME=VENDOR_FOLDER[:LIBRARY_PATH], repeatable")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    args = parser.parse_args(argv)
    runtimes = []
    for spec in args.runtime:
        name, _, rest = spec.partition("=")
        vendors, _, libpath = rest.partition(":")
        runtimes.append((name, vendors, libpath))
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, vendors, libpath in runtimes:
            r = measure(vendors, libpath)
            b = best.setdefault(name, r)
            for key, value in r.items():
                if key == "device":
                    continue
                better = max if key == "nxn_per_s" else min
                b[key] = better(b[key], value)
    for name, r in best.items():
        print(f"{name:8s} {r['device']:40s} trivial {r['trivial_us']:6.1f} us  "
              f"step(1) {r['step1_us']:6.0f} us (device {r['step1_device_us']:4.0f})  "
              f"step(16) {r['step16_us']:6.0f} us (device {r['step16_device_us']:4.0f})  "
              f"N x N {r['nxn_per_s'] / 1e9:.2f} G/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
