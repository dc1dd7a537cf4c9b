"""Does a PoCL platform compute sapporo's forces correctly on this machine?

PoCL's wheel (LLVM 14) fails on CPUs newer than its LLVM in several ways (no kernel builds;
a program with no kernel in it; an abort at exit), so the OpenCL backend checks each PoCL
platform once per machine in a child process, by running the library on its first CPU
device against the float64 reference::

    python -m sapporo.backend.pocl_probe PLATFORM_VERSION DEVICE_NAME DRIVER_VERSION

The first line of the output is ``checking``, the last ``ok`` or ``error: <why>``.
"""

from __future__ import annotations

import sys

#: accepted relative error of the accelerations (double-single gives ~1e-7)
PROBE_TOLERANCE = 1e-5
PROBE_N = 256


def check(platform_version: str, device_name: str, driver_version: str) -> str:
    """Run the library on the matching device; "" when it is right, else why not."""
    from sapporo.backend import get_backend
    from sapporo.backend import opencl as ocl

    was, ocl._IN_PROBE = ocl._IN_PROBE, True  # the device under test is not probed again
    try:
        index = next((k for k, (_, dev) in enumerate(get_backend("opencl")._scan())
                      if (dev.platform.version, dev.name, dev.driver_version)
                      == (platform_version, device_name, driver_version)), None)
        if index is None:
            return "the device is not listed in the child process"
        return _check(index)
    finally:
        ocl._IN_PROBE = was


def _check(index: int) -> str:
    import numpy as np

    from sapporo import reference
    from sapporo.core.library import Library

    x, v, m = reference.plummer(PROBE_N, seed=1)
    ids = np.arange(PROBE_N)
    eps2 = 1e-4
    ref = reference.forces(x, v, ids, x, v, m, ids, eps2, order=4)
    lib = Library(order=4, precision="double-single", backend="opencl", devices=[index])
    try:
        lib.set_j_particles(ids, ids, 0.0, m, x, v)
        # every i-particle (the threaded device), then one (the companion, where there is one)
        for sel in (slice(None), slice(0, 1)):
            got = lib.compute(x[sel], v[sel], ids[sel], eps2)
            scale = np.linalg.norm(ref.acc[sel], axis=1)
            err = float(np.max(np.linalg.norm(got.acc - ref.acc[sel], axis=1) / scale))
            if not err <= PROBE_TOLERANCE:
                return (f"the forces of {got.acc.shape[0]} particle(s) are wrong (relative "
                        f"error {err:.3g})")
    finally:
        lib.close()
    return ""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        sys.stderr.write("usage: python -m sapporo.backend.pocl_probe PLATFORM_VERSION "
                         "DEVICE_NAME DRIVER_VERSION\n")
        return 2
    sys.stdout.write("checking\n")  # got this far: sapporo imports here
    sys.stdout.flush()
    try:
        why = check(*args)
    except Exception as exc:  # any failure is the answer, not a crash
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
    sys.stdout.write(("error: " + why if why else "ok") + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
