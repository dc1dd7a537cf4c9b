"""Run ``kernels_cuda/`` on the CPU: an emulation of the CUDA execution model for the tests.

No GPU is needed. A ``.cu`` source (with its includes inlined, as the backend passes it to
PyCUDA) is compiled by the host C++ compiler with ``cuda_emu.h`` force-included: CUDA
threads become fibers, ``__syncthreads`` and warp shuffles become checked barriers, and
``__shared__`` memory is poisoned before every block (see the header for the rules it
checks). Each ``extern "C" __global__`` function gets a launcher that takes its arguments
as pointers to their values, like ``cuLaunchKernel``'s ``kernelParams``, and a signature
in PyCUDA's struct letters (``P`` pointer, ``i`` int, ``d`` double, ...).

:func:`fake_pycuda.make_fake_pycuda` (``execute=True``) puts these modules behind a stand-in
for PyCUDA, so that ``sapporo/backend/cuda.py`` and the library run the CUDA kernels end to
end. What this cannot show: the GPU's own arithmetic (``rsqrtf`` is exact here, the GPU's
is approximate), memory ordering between blocks, speed, and PyCUDA itself.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

HEADER = Path(__file__).resolve().parent / "cuda_emu.h"
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
CXXFLAGS = ["-std=c++17", "-O1", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math",
            "-Wall", "-Wno-unknown-pragmas", "-Wno-unused-function"]

# Schedules of the fibers of a block (cuda_emu.h): each round runs them in this order.
FORWARD, REVERSE, SHUFFLED = 0, 1, 2

_KERNEL = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')


class EmulatorError(RuntimeError):
    """A build or launch that the emulation refused, with the reason."""

    def __init__(self, msg: str, log: str = ""):
        super().__init__(msg)
        self.log = log


def available() -> tuple[bool, str]:
    """Whether kernels can be emulated here, and why not."""
    if CXX is None:
        return False, "no C++ compiler (g++) to build the CUDA emulation"
    return True, ""


def _cache_dir() -> Path:
    path = Path(os.environ.get("SAPPORO_CUEMU_CACHE")
                or Path(tempfile.gettempdir()) / f"sapporo-cuemu-{os.getuid()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _strip_comments(source: str) -> str:
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", source, flags=re.S)


def kernel_names(source: str) -> list[str]:
    """The ``extern "C" __global__`` functions of a source, in order."""
    return _KERNEL.findall(_strip_comments(source))


def _launchers(names: Sequence[str]) -> str:
    out = ["\n/* ---- emulator launchers (generated) ---- */", 'extern "C" {']
    for n in names:
        out.append(
            f'__attribute__((visibility("default"))) int cuemu_launch_{n}('
            f"const unsigned *grid, const unsigned *block, void **args)"
            f" {{ return cuemu::launch_kernel({n}, grid, block, args); }}")
        out.append(f'__attribute__((visibility("default"))) const char *cuemu_sig_{n}()'
                   f" {{ return cuemu::signature({n}); }}")
    out.append("}")
    return "\n".join(out) + "\n"


def _compiler_options(options: Sequence[str], include_dirs: Sequence[str]) -> list[str]:
    """The preprocessor options of an nvcc command line (the others mean nothing here)."""
    keep = []
    for opt in options:
        if opt.startswith(("-D", "-U", "-I")) and len(opt) > 2:
            keep.append(opt)
    return keep + [f"-I{d}" for d in include_dirs]


class Kernel:
    """One emulated ``__global__`` function."""

    def __init__(self, lib: ctypes.CDLL, name: str):
        self.name = name
        self._launch = getattr(lib, f"cuemu_launch_{name}")
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = [ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                                 ctypes.POINTER(ctypes.c_void_p)]
        sig = getattr(lib, f"cuemu_sig_{name}")
        sig.restype = ctypes.c_char_p
        self.signature: str = sig().decode()
        self._error = lib.cuemu_last_error
        self._error.restype = ctypes.c_char_p

    _CTYPE = {"P": ctypes.c_void_p, "i": ctypes.c_int32, "I": ctypes.c_uint32,
              "d": ctypes.c_double, "f": ctypes.c_float}

    def __call__(self, grid: Sequence[int], block: Sequence[int], fmt: str,
                 values: Sequence[object]) -> None:
        """Run the kernel on ``values`` packed as ``fmt`` (PyCUDA's letters)."""
        if fmt != self.signature:
            raise EmulatorError(
                f"kernel {self.name}: arguments packed as {fmt!r}, but the kernel takes "
                f"{self.signature!r} (P pointer, i int, I unsigned, d double, f float)")
        if len(values) != len(fmt):
            raise EmulatorError(f"kernel {self.name}: {len(values)} values for format {fmt!r}")
        held = [self._CTYPE[c](int(v) if c in "PiI" else float(v))  # type: ignore[arg-type]
                for c, v in zip(fmt, values, strict=True)]
        ptrs = (ctypes.c_void_p * max(1, len(held)))(
            *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in held])
        g = (ctypes.c_uint * 3)(*(list(grid) + [1, 1])[:3])
        b = (ctypes.c_uint * 3)(*(list(block) + [1, 1])[:3])
        if self._launch(g, b, ptrs) != 0:
            raise EmulatorError(f"kernel {self.name}: {self._error().decode()}")


_LOADED: list[Module] = []  #: every module loaded (see fake_pycuda.scheduled)


class Module:
    """A compiled source: its kernels by name, and the fiber schedule of its launches."""

    def __init__(self, path: Path, names: Sequence[str]):
        self.path = path
        self._lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        self._lib.cuemu_set_schedule.argtypes = [ctypes.c_int, ctypes.c_uint]
        self.kernels = {n: Kernel(self._lib, n) for n in names}
        _LOADED.append(self)

    def set_schedule(self, mode: int, seed: int = 1) -> None:
        """Fiber order of later launches: FORWARD, REVERSE or SHUFFLED (with ``seed``)."""
        self._lib.cuemu_set_schedule(int(mode), int(seed))


@cache
def _compiler_id() -> str:
    if CXX is None:
        return ""
    out = subprocess.run([CXX, "--version"], capture_output=True, text=True, check=False)
    return out.stdout


def _build(compiler_args: Sequence[str], lib: Path, what: str) -> None:
    """Run a compiler whose arguments end with ``-o`` (the output is appended: a temporary
    file beside ``lib``, which then replaces ``lib`` at once, so that processes building
    the same library at the same time never load half of one)."""
    tmp = lib.with_name(f"{lib.name}.{os.getpid()}.tmp")
    cmd = [*compiler_args, str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise EmulatorError(f"{what} build failed: {' '.join(cmd)}", proc.stdout + proc.stderr)
    os.replace(tmp, lib)


def compile_module(source: str, options: Sequence[str] = (),
                   include_dirs: Sequence[str] = ()) -> Module:
    """Compile a CUDA source for the emulation (cached on disk by content and options)."""
    ok, why = available()
    if not ok:
        raise EmulatorError(why)
    names = kernel_names(source)
    if not names:
        raise EmulatorError('no extern "C" __global__ function in the source')
    flags = CXXFLAGS + _compiler_options(options, include_dirs)
    header = HEADER.read_text()
    key = hashlib.sha256("\0".join([header, source, *flags, _compiler_id()]).encode())
    digest = key.hexdigest()[:24]
    cache_dir = _cache_dir()
    lib = cache_dir / f"{digest}.so"
    if not lib.exists():
        src = cache_dir / f"{digest}.cu"
        src.write_text(source + _launchers(names))
        _build([str(CXX), *flags, "-include", str(HEADER), "-x", "c++", str(src), "-o"], lib,
               "emulator")
    return Module(lib, names)


DRIVER_SOURCE = Path(__file__).resolve().parent / "fake_libcuda.c"


@cache
def driver_library() -> ctypes.CDLL | None:
    """The emulation's CUDA driver library (``fake_libcuda.c``: the entry points the native
    engine calls), built once and loaded into the process under the soname
    ``libcuda.so.1``, where the CUDA backend looks for the driver; None without a C
    compiler. A real driver loaded before it keeps that name (the backend then finds the
    real one, and the emulated contexts get no native engine)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    source = DRIVER_SOURCE.read_text()
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    folder = _cache_dir() / f"driver-{digest}"
    lib = folder / "libcuda.so.1"
    if not lib.exists():
        folder.mkdir(parents=True, exist_ok=True)
        _build([cc, "-std=gnu11", "-O1", "-fPIC", "-shared", "-Wall", "-Wl,-soname,libcuda.so.1",
                str(DRIVER_SOURCE), "-ldl", "-o"], lib, "emulated driver")
    driver = ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    driver.cuemu_driver_calls.restype = ctypes.c_long
    driver.cuemu_driver_calls.argtypes = [ctypes.c_int]
    driver.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
    driver.cuCtxPopCurrent_v2.argtypes = [ctypes.c_void_p]
    return driver
