"""Device quirks in one place: what PoCL, NVIDIA and AMD need differently.

The rest of the code asks this module; it never tests vendor strings itself.
"""

from __future__ import annotations

import platform

from sapporo.backend.base import DeviceInfo


def is_pocl(info: DeviceInfo) -> bool:
    """True for the Portable Computing Language runtime (our CPU default)."""
    return "portable computing language" in info.platform.lower() or "pocl" in info.platform.lower()


def is_cpu(info: DeviceInfo) -> bool:
    """True for a CPU device (vectorises over work-items, gains nothing from local memory)."""
    return info.device_type == "cpu"


def shares_host_memory(info: DeviceInfo) -> bool:
    """True when the device computes on host memory (CPU devices): buffers made from host
    arrays need no copies. The OpenCL backend confirms it with a test kernel once."""
    return is_cpu(info)


def is_pocl_threaded_cpu(name: str) -> bool:
    """PoCL's multi-threaded CPU device, by its name ("pthread-..." before PoCL 4, "cpu-...")."""
    return name.startswith("pthread-") or (name.startswith("cpu-")
                                           and not name.startswith("cpu-minimal-"))


def is_pocl_single_threaded_cpu(name: str) -> bool:
    """PoCL's single-threaded CPU device, which runs kernels in the calling thread
    ("basic-..." before PoCL 4, "cpu-minimal-...")."""
    return name.startswith("basic-") or name.startswith("cpu-minimal-")


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def cpu_flags() -> set[str]:
    """The host CPU's feature flags (Linux's /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def narrow_vectors(info: DeviceInfo) -> str | None:
    """Why an OpenCL CPU device wastes half of each vector register, with the command that
    fixes it; None when it does not. A runtime whose compiler does not know the CPU (PoCL's
    pip wheel carries LLVM 14, older than AVX-512 CPUs such as AMD Zen 4) compiles for an
    older target: 8 float lanes where the CPU has 16, and the force kernels run 1.2-1.5
    times slower (docs/performance.md, N x N at 8 against 16 lanes)."""
    if info.backend != "opencl" or not is_cpu(info) or info.float_lanes >= 16 \
            or "avx512f" not in cpu_flags():
        return None
    return (f"{info.name} compiles for {info.float_lanes} float lanes, but this CPU has "
            "AVX-512 (16): the force kernels run 1.2-1.5 times slower. Install your "
            "system's PoCL, which sapporo prefers to the pip wheel's: sudo apt install "
            "pocl-opencl-icd (Debian, Ubuntu; dnf install pocl on Fedora)")


def opencl_build_options(info: DeviceInfo) -> list[str]:
    """Extra OpenCL compiler options for a device.

    No fast-math flags anywhere: the double-precision path must be IEEE-exact, and the
    double-single path chooses its fast single-precision reciprocal square root in the
    kernel source itself.
    """
    opts: list[str] = []
    if is_pocl(info):
        # PoCL's clang warns about 8-wide double vectors changing the AVX ABI: harmless
        # inside a kernel, and noise for users (PyOpenCL turns it into Python warnings).
        opts.append("-w")
        if is_cpu(info) and _is_x86():
            # the force kernels may then call x86 vector instructions directly (PoCL calls
            # its own vector math out of line, which spills every register in the loop)
            opts.append("-DSAPPORO_X86_BUILTINS=1")
    if info.vendor.lower().startswith("nvidia"):
        # Keep NVIDIA's OpenCL from contracting the r^2 sums differently from the reference.
        opts.append("-cl-nv-opt-level=3")
    return opts


def cuda_arch_option(compute_capability: tuple[int, int]) -> str:
    """nvcc's ``-arch`` for a device of compute capability ``(major, minor)``, e.g.
    ``"sm_90"`` (an architecture nvcc no longer knows fails the build with a
    :class:`~sapporo.errors.BuildError` that names it)."""
    major, minor = compute_capability
    return f"sm_{major}{minor}"


def cuda_build_options(info: DeviceInfo | None = None) -> list[str]:
    """nvcc options for a CUDA device (the architecture is passed separately): none.

    No fast-math flags: the double-precision path must be IEEE-exact, and the double-single
    path uses the fast single-precision ``rsqrtf`` by name in the kernel source. Fused
    multiply-adds stay on; r^2, which decides nearest neighbours and neighbour lists, is
    written with intrinsics that never fuse (``__fmul_rn``, ``__dadd_rn``, ...), so it
    rounds exactly as the reference computes it.
    """
    return []
