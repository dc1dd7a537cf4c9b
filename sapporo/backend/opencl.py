"""PyOpenCL implementation of the backend interface."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sapporo import config
from sapporo.backend import base, quirks
from sapporo.errors import BackendError, BuildError

log = logging.getLogger(__name__)

#: default of SAPPORO_SPIN_US: how long a wait polls the last command before it sleeps
DEFAULT_SPIN_US = 300
_yield = getattr(os, "sched_yield", lambda: None)
#: default of SAPPORO_SMALL_PAIRS: force launches up to this many pairs use the companion
#: (measured crossover on 2 cores: 8 active particles at N = 16k, 128 at N = 2k) ...
DEFAULT_SMALL_PAIRS = 131072
#: ... and with its twin, this many on 2 cores (64 active particles at N = 16k, 1024 at
#: N = 1k), fewer where the threaded device has more cores (in proportion)
DEFAULT_SMALL_PAIRS_TWIN_2_CORES = 1 << 20
#: the devices whose narrow vectors (quirks.narrow_vectors) this process has warned about
_ADVISED: set[str] = set()
#: PoCL's CPU drivers (PoCL 3: basic, pthread; PoCL 4 and later: cpu-minimal, cpu)
_POCL_CPU_DRIVERS = {"basic", "pthread", "cpu", "cpu-minimal"}


def _system_pocl_libraries() -> list[str]:
    """The libraries named by OpenCL vendor files outside PyOpenCL's wheel that are PoCL."""
    out = []
    for place in (os.environ.get("OCL_ICD_VENDORS", ""), "/etc/OpenCL/vendors"):
        with contextlib.suppress(OSError):  # (an unset OCL_ICD_VENDORS names no .icd file)
            files = ([os.path.join(place, f) for f in os.listdir(place)]
                     if os.path.isdir(place) else [place])
            for f in files:
                if f.endswith(".icd"):
                    with open(f) as fh:
                        text = fh.read().strip()
                    if "pocl" in text.lower():
                        out.append(text)
    return out


def _system_pocl_installed() -> bool:
    """True when an OpenCL vendor file outside PyOpenCL's wheel names PoCL."""
    return bool(_system_pocl_libraries())


#: where a system PoCL named without its folder keeps its drivers (``pocl/`` below one)
_LIBRARY_ROOTS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                  "/usr/lib", "/usr/local/lib", "/usr/local/lib64")


def _system_pocl_cpu_only() -> bool:
    """True when every system PoCL has CPU drivers only (so ``POCL_DEVICES`` hides none of
    its devices); False when a driver folder cannot be found or lists any other driver."""
    for library in _system_pocl_libraries():
        drivers: set[str] = set()
        roots = [os.path.dirname(library)] if os.path.isabs(library) else _LIBRARY_ROOTS
        for folder in (os.path.join(root, "pocl") for root in roots):
            with contextlib.suppress(OSError):
                for f in os.listdir(folder):
                    if f.startswith("libpocl-devices-") and ".so" in f:
                        drivers.add(f[len("libpocl-devices-"):].split(".so")[0])
        if not drivers or not drivers <= _POCL_CPU_DRIVERS:
            return False
    return True


def _request_pocl_affinity() -> None:
    """Ask PoCL to pin its worker threads to cores (``POCL_AFFINITY=1``, read once when
    PoCL starts), unless the user set it, several MPI ranks share the node (they would pin
    to the same cores), or the process may not run on every core. Unpinned, force calls of
    16-64 active particles at N = 16k took about twice their kernel time (2 Zen 5 cores)."""
    if "POCL_AFFINITY" in os.environ:
        return
    from sapporo.parallel.launcher import launcher_size

    if launcher_size() > 1:
        return
    try:  # a process held to some of the cores (taskset, a batch system): PoCL pins
        # its workers to the first cores, which may not be this process's
        if len(os.sched_getaffinity(0)) != os.cpu_count():
            return
    except (AttributeError, OSError):
        return
    os.environ["POCL_AFFINITY"] = "1"
    log.debug("POCL_AFFINITY set to 1 (PoCL's worker threads pinned to cores)")


def _request_pocl_companion() -> None:
    """Ask PoCL for its single-threaded ``basic`` device beside ``pthread``: the threaded
    device hands every command to worker threads (50-100 us), ``basic`` runs kernels in the
    calling thread, so small force launches go there (:class:`CLContext`). With two cores
    or more, a second ``basic`` device is the companion's twin: the engine runs half of a
    small launch's j-range there from a thread of its own. ``POCL_DEVICES`` is set only
    when unset, not disabled (``SAPPORO_SMALL_PAIRS=0``), and every PoCL installed has CPU
    drivers only, so that it hides no other PoCL device."""
    if "POCL_DEVICES" in os.environ:
        return
    small = config.from_environment().small_pairs
    if small == 0 or (_system_pocl_installed() and not _system_pocl_cpu_only()):
        return
    twin = base.usable_cores() >= 2
    os.environ["POCL_DEVICES"] = "pthread basic basic" if twin else "pthread basic"
    log.debug("POCL_DEVICES set to %r (companion devices for small launches)",
              os.environ["POCL_DEVICES"])


#: Free space PoCL's kernel cache needs before PoCL starts (below it a temporary cache is
#: used) and before a build: LLVM writes its output there and aborts the whole process
#: ("LLVM ERROR: IO failure on output stream", exit 134) when the disk is full.
POCL_CACHE_MIN_BYTES = 64 << 20
POCL_BUILD_MIN_BYTES = 8 << 20


def _pocl_cache_dir() -> Path:
    """PoCL's kernel cache folder: ``POCL_CACHE_DIR``, else ``$XDG_CACHE_HOME/pocl/kcache``."""
    env = os.environ.get("POCL_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pocl" / "kcache"


def _existing(folder: Path) -> Path:
    """``folder``, or its nearest parent that exists."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _free_bytes(folder: Path) -> int | None:
    """Free bytes on the file system of ``folder`` (of its nearest existing parent)."""
    try:
        return shutil.disk_usage(_existing(folder)).free
    except OSError:
        return None


def _cache_problem(folder: Path, need: int) -> str | None:
    """Why PoCL could not write its cache in ``folder`` (None: it can, as far as we see)."""
    p = _existing(folder)
    if p.exists() and not os.access(p, os.W_OK | os.X_OK):
        return f"{p} is not writable"
    free = _free_bytes(folder)
    if free is not None and free < need:
        return f"only {free / 2**20:.1f} MiB free (a kernel build needs {need / 2**20:.0f} MiB)"
    return None


def _ensure_pocl_cache() -> None:
    """Before PoCL starts: give it a kernel cache folder with room. When the folder PoCL
    would use has too little space (or cannot be written), a temporary folder is used
    instead (``POCL_CACHE_DIR`` set, a warning logged, the folder removed at exit); a
    :class:`BackendError` when that has no room either."""
    folder = _pocl_cache_dir()
    problem = _cache_problem(folder, POCL_CACHE_MIN_BYTES)
    if problem is None or not _pocl_present():
        return
    try:
        tmp = tempfile.mkdtemp(prefix="sapporo-pocl-cache-")
    except OSError as exc:
        tmp_problem = f"cannot create a temporary folder ({exc.strerror or exc})"
    else:
        tmp_problem = _cache_problem(Path(tmp), POCL_CACHE_MIN_BYTES)
        if tmp_problem is None:
            os.environ["POCL_CACHE_DIR"] = tmp
            atexit.register(shutil.rmtree, tmp, True)
            log.warning("PoCL's kernel cache %s: %s; using the temporary cache %s for this "
                        "process", folder, problem, tmp)
            return
        shutil.rmtree(tmp, ignore_errors=True)
    raise BackendError(f"PoCL's kernel cache {folder}: {problem}, and the temporary folder "
                       f"({tempfile.gettempdir()}) has no room either: {tmp_problem}. Free some "
                       "space or set POCL_CACHE_DIR to a folder with room")


def _pocl_present() -> bool:
    """Whether a PoCL can be loaded: a system one, or the ``pocl-binary-distribution`` wheel."""
    return (_system_pocl_installed()
            or importlib.util.find_spec("pocl_binary_distribution") is not None)


try:  # imported lazily by sapporo.backend; failing here only disables this backend
    import pyopencl as cl
except ImportError as _exc:  # pragma: no cover - depends on the machine
    cl = None
    _IMPORT_ERROR: Exception | None = _exc
else:
    _IMPORT_ERROR = None


def _aligned_empty(nbytes: int, align: int = 4096) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose data starts on an ``align``-byte boundary."""
    raw = np.empty(nbytes + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + nbytes]


class CLEvent(base.Event):
    """Wraps a ``pyopencl.Event``."""

    def __init__(self, event: Any, profiling: bool):
        self._event = event
        self._profiling = profiling

    def wait(self) -> None:
        if self._event is not None:
            self._event.wait()

    @property
    def elapsed(self) -> float | None:
        if self._event is None or not self._profiling:
            return None
        self._event.wait()
        return (self._event.profile.end - self._event.profile.start) * 1e-9


class CLBuffer(base.Buffer):
    """A ``pyopencl.Buffer`` bound to its queue."""

    def __init__(self, ctx: CLContext, nbytes: int, host: np.ndarray | None = None):
        self._ctx = ctx
        self.nbytes = int(nbytes)
        rw = cl.mem_flags.READ_WRITE
        try:  # with ``host``, the device works on this host memory itself
            self.buf = (cl.Buffer(ctx.cl_context, rw, size=max(self.nbytes, 4)) if host is None
                        else cl.Buffer(ctx.cl_context, rw | cl.mem_flags.USE_HOST_PTR,
                                       hostbuf=host))
        except cl.Error as exc:
            raise BackendError(f"cannot allocate {self.nbytes} bytes on {ctx.info.name}: "
                               f"{exc}") from exc

    def native(self) -> int | None:
        return int(self.buf.int_ptr)

    def upload(self, host: np.ndarray, offset: int = 0, wait: bool = True) -> base.Event:
        self.check_transfer(host, offset)
        return self._queue(host.nbytes, cl.enqueue_copy, self.buf, host, dst_offset=offset,
                           is_blocking=wait)

    def download(self, host: np.ndarray, offset: int = 0, wait: bool = True) -> base.Event:
        self.check_transfer(host, offset)
        return self._queue(host.nbytes, cl.enqueue_copy, host, self.buf, src_offset=offset,
                           is_blocking=wait)

    def fill(self, value: int = 0) -> base.Event:
        size = self.nbytes // 4 * 4
        return self._queue(size, cl.enqueue_fill_buffer, self.buf, np.int32(value), 0, size)

    def _queue(self, nbytes: int, enqueue: Any, *args: Any, **kwargs: Any) -> base.Event:
        """Queue ``enqueue(queue, *args, **kwargs)`` on the main queue (nothing for 0 bytes)."""
        if nbytes == 0:
            return CLEvent(None, False)
        return CLEvent(self._ctx._enqueue(False, enqueue, *args, **kwargs), self._ctx.profiling)

    def free(self) -> None:
        buf = getattr(self, "buf", None)
        if buf is not None:
            buf.release()
            self.buf = None


class CLKernel(base.Kernel):
    def __init__(self, ctx: CLContext, kernel: Any, name: str, small: bool = False,
                 twin: bool = False):
        self._ctx = ctx
        self._kernel = kernel
        self.name = name
        self._small = small
        self._twin = twin
        self._arg_types: tuple | None = None

    def __call__(self, global_size, local_size, *args, wait=False) -> base.Event:
        if self._twin:
            raise BackendError(f"kernel {self.name!r} is the twin's: the engine launches it")
        # declaring the scalar types once lets PyOpenCL pack them directly: about 0.5 us
        # for a dozen arguments, where type discovery costs about 50
        types = tuple(type(a) if isinstance(a, np.generic) else None for a in args)
        if types != self._arg_types:
            self._kernel.set_scalar_arg_dtypes(list(types))
            self._arg_types = types
        self._kernel.set_args(*[_raw_arg(a) for a in args])
        ev = self._ctx._enqueue(self._small, cl.enqueue_nd_range_kernel, self._kernel,
                                tuple(map(int, global_size)),
                                None if local_size is None else tuple(map(int, local_size)))
        if wait:
            ev.wait()
        return CLEvent(ev, self._ctx.profiling)

    def prepare(self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                *args: Any) -> base.Launch:
        return CLLaunch(self, global_size, local_size, args)


def _raw_arg(a: Any) -> Any:
    """What PyOpenCL takes for an argument: the cl.Buffer of a CLBuffer, else the value."""
    return a.buf if isinstance(a, CLBuffer) else a


class CLLaunch(base.Launch):
    """A prepared launch: sizes converted and arguments packed once."""

    def __init__(self, kernel: CLKernel, global_size: tuple[int, ...],
                 local_size: tuple[int, ...] | None, args: tuple[Any, ...]):
        super().__init__(kernel, global_size, local_size, args)
        self._gs = tuple(map(int, global_size))
        self._ls = None if local_size is None else tuple(map(int, local_size))
        self._raw = [_raw_arg(a) for a in args]

    def native(self) -> base.NativeLaunch | None:
        k: CLKernel = self.kernel  # type: ignore[assignment]
        queue = (k._ctx.twin_queue if k._twin else
                 k._ctx.small_queue if k._small else k._ctx.queue)
        args = []
        for a in self._raw:
            if a is None:
                args.append((8, 0))  # a NULL buffer
            elif isinstance(a, cl.MemoryObjectHolder):
                args.append((8, int(a.int_ptr)))
            elif isinstance(a, np.generic) and a.nbytes <= 8:
                # the value's bytes first, as the host stores them in a 64-bit word
                args.append((a.nbytes, int.from_bytes(a.tobytes().ljust(8, b"\0"),
                                                      sys.byteorder)))
            else:
                return None
        return base.NativeLaunch(int(queue.int_ptr), int(k._kernel.int_ptr), self._gs,
                                 self._ls if self._ls is not None else (), tuple(args))


class CLProgram(base.Program):
    def __init__(self, ctx: CLContext, program: Any, small: bool = False, twin: bool = False):
        self._ctx = ctx
        self._program = program
        self._small = small
        self._twin = twin
        self._kernels: dict[str, CLKernel] = {}

    def kernel(self, name: str) -> base.Kernel:
        if name not in self._kernels:
            try:
                k = cl.Kernel(self._program, name)
            except cl.Error as exc:
                raise BackendError(f"kernel {name!r} not found in program: {exc}") from exc
            self._kernels[name] = CLKernel(self._ctx, k, name, self._small, self._twin)
        return self._kernels[name]


class CLContext(base.Context):
    """One OpenCL device with an in-order command queue."""

    def __init__(self, info: base.DeviceInfo, device: Any, profiling: bool,
                 companion: Any = None, instance: int = 0, twin: Any = None):
        self.info = info
        self.profiling = profiling
        if info.name not in _ADVISED and (advice := quirks.narrow_vectors(info)) is not None:
            _ADVISED.add(info.name)  # (once per device and process)
            log.warning("sapporo: %s", advice)
        env = config.from_environment()
        if env.small_pairs == 0 or companion is None:
            companion = twin = None
        if env.small_pairs is not None:
            small = env.small_pairs
        elif twin is not None:
            small = max(DEFAULT_SMALL_PAIRS,
                        DEFAULT_SMALL_PAIRS_TWIN_2_CORES * 2 // max(2, info.compute_units))
        else:
            small = DEFAULT_SMALL_PAIRS
        self.cl_context = cl.Context([d for d in (device, companion, twin) if d is not None])
        props = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
        self.queue = cl.CommandQueue(self.cl_context, device, properties=props)
        # small launches go to the companion (PoCL's single-threaded device on the same
        # memory): no hand-off to worker threads
        self.small_queue = (None if companion is None
                            else cl.CommandQueue(self.cl_context, companion, properties=props))
        self.small_pairs = 0 if companion is None else small
        # the companion's twin, a second single-threaded device (see base.Context.twin)
        self.twin_queue = (None if twin is None
                           else cl.CommandQueue(self.cl_context, twin, properties=props))
        self.twin = twin is not None
        self.one_kernel_at_a_time = quirks.is_pocl(info)
        # PoCL shares a loaded kernel between contexts with the same program: a define of
        # their own gives other instances programs of their own
        self._instance = ([f"-DSAPPORO_INSTANCE={instance}"]
                          if instance and self.one_kernel_at_a_time else [])
        self._companion = companion
        self._twin = twin
        self._last_small: Any = None
        self._device = device
        self._programs: dict[str, CLProgram] = {}
        self._zero_copy: bool | None = None
        self._last: Any = None  # the last command enqueued (main queue)
        self.spin_seconds = (DEFAULT_SPIN_US if env.spin_us is None else env.spin_us) * 1e-6

    def alloc(self, nbytes: int) -> base.Buffer:
        return CLBuffer(self, nbytes)

    def alloc_host(self, nbytes: int) -> base.HostBuffer:
        if not self._zero_copy_works():
            return super().alloc_host(nbytes)
        array = _aligned_empty(max(int(nbytes), 4))
        return base.HostBuffer(CLBuffer(self, nbytes, host=array), array, True)

    def _zero_copy_works(self) -> bool:
        """Whether this device computes on host memory given with USE_HOST_PTR (checked once,
        on devices that share the host's memory: a kernel's writes must show in the host
        array without a copy)."""
        if self._zero_copy is None:
            self._zero_copy = False
            if config.from_environment().native_memory == "device":
                log.debug("device buffers on %s (SAPPORO_NATIVE_MEMORY=device)", self.info.name)
            elif quirks.shares_host_memory(self.info):
                try:
                    x = _aligned_empty(64 * 8).view(np.float64)
                    x[:] = 1.0
                    bx = CLBuffer(self, x.nbytes, host=x.view(np.uint8))
                    prog = self.build("selftest.cl", {"SCALE": 3})
                    prog.kernel("axpb")((64,), None, np.int32(64), np.float64(0.5), bx, bx,
                                        wait=True)
                    self.queue.finish()
                    self._zero_copy = bool(np.all(x == 3.5))
                    bx.free()
                except Exception as exc:  # a driver that refuses: fall back to copies
                    log.debug("zero-copy check failed on %s: %s", self.info.name, exc)
            log.debug("zero-copy host buffers on %s: %s", self.info.name, self._zero_copy)
        return self._zero_copy

    def build(self, source_name: str, defines: dict[str, Any] | None = None,
              small: bool = False, twin: bool = False) -> base.Program:
        twin = twin and self.twin
        small = (small or twin) and self.small_queue is not None
        options = (base.format_defines(defines) + quirks.opencl_build_options(self.info)
                   + self._instance)
        where = "\0twin" if twin else "\0small" if small else ""
        fast_key = source_name + "\0" + " ".join(options) + where
        if fast_key in self._programs:  # hot path: no file access
            return self._programs[fast_key]
        source = base.load_source("opencl", source_name)
        key = hashlib.sha256((source + "\0" + " ".join(options)).encode()).hexdigest()
        key += "-twin" if twin else "-small" if small else ""
        if key in self._programs:
            self._programs[fast_key] = self._programs[key]
            return self._programs[key]
        log.debug("building %s with %s on %s", source_name, options, self.info.name)
        if quirks.is_pocl(self.info):  # refuse rather than let LLVM abort the process
            problem = _cache_problem(_pocl_cache_dir(), POCL_BUILD_MIN_BYTES)
            if problem is not None:
                raise BackendError(f"cannot build {source_name} on {self.info.name}: PoCL's "
                                   f"kernel cache {_pocl_cache_dir()}: {problem}")
        device = self._twin if twin else self._companion if small else self._device
        cache_file = _binary_cache_file(self.info, device, source, options)
        program = _load_binary(self.cl_context, device, cache_file, options)
        if program is None:
            program = self._build_source(source_name, source, options, device)
            _save_binary(program, cache_file)
        prog = CLProgram(self, program, small, twin)
        self._programs[key] = self._programs[fast_key] = prog
        return prog

    def _build_source(self, source_name: str, source: str, options: list[str],
                      device: Any) -> Any:
        """Build from source; the program must hold kernels."""
        try:
            program = cl.Program(self.cl_context, source).build(options=options,
                                                                devices=[device])
        except cl.Error as exc:
            path = base.save_failed_source(source, ".cl")
            raise BuildError(
                f"OpenCL build of {source_name} failed on {self.info.name}\n"
                f"options: {' '.join(options)}\nsource saved to: {path}\n{exc}",
                options, str(exc), path) from None
        if not _kernel_names(program):
            # seen with PoCL's wheel (LLVM 14) on AMD Zen 4: no error, and no kernel
            path = base.save_failed_source(source, ".cl")
            raise BuildError(
                f"OpenCL build of {source_name} on {self.info.name} gave a program with no "
                f"kernel in it (options: {' '.join(options)}; source saved to {path}): the "
                "runtime cannot compile for this device. With PoCL's wheel on a CPU newer "
                "than its LLVM, use another PoCL (Debian/Ubuntu: apt install "
                "pocl-opencl-icd) or another device (SAPPORO_DEVICES; `sapporo info` lists "
                "them)", options, "", path)
        return program

    def _enqueue(self, small: bool, enqueue: Any, *args: Any, **kwargs: Any) -> Any:
        """Queue one command, ``enqueue(queue, *args, **kwargs)``, on the main or the small
        queue and remember it; the other queue is finished first when it has work (no event
        crosses: PoCL 3.0 can deadlock when a command of one device waits for the other's)."""
        self.commands += 1
        if small:
            if self._last is not None:
                self.queue.finish()
                self._last = None
            self._last_small = enqueue(self.small_queue, *args, **kwargs)
            return self._last_small
        if self._last_small is not None:
            self.small_queue.finish()
            self._last_small = None
        self._last = enqueue(self.queue, *args, **kwargs)
        return self._last

    def finish(self) -> None:
        """Wait for the queues. The last kernel is polled for up to ``spin_seconds`` first:
        a sleeping wait costs a thread wake-up (50-100 us on PoCL's CPU driver), which is
        more than a small force call takes."""
        for queue in (self.queue, self.small_queue):
            if queue is not None:
                queue.flush()
        for queue, name in ((self.small_queue, "_last_small"), (self.queue, "_last")):
            if queue is None:
                continue
            ev = getattr(self, name)
            setattr(self, name, None)
            if ev is not None and self.spin_seconds > 0:
                deadline = time.perf_counter() + self.spin_seconds
                while ev.command_execution_status > 0 and time.perf_counter() < deadline:
                    _yield()  # leave the core to the device's worker threads (CPU devices)
            queue.finish()

    def native_entry_points(self) -> dict[str, int] | None:
        return dict(_native_entry_points()) or None

    def native_queue(self) -> int | None:
        return None if self.queue is None else int(self.queue.int_ptr)

    def close(self) -> None:
        if getattr(self, "queue", None) is not None:
            self.finish()
            self.queue = None
            self.small_queue = None
            self.twin_queue = None
            self._programs.clear()


_ENTRY_NAMES = {"set_arg": "clSetKernelArg", "enqueue": "clEnqueueNDRangeKernel",
                "flush": "clFlush", "finish": "clFinish", "event_info": "clGetEventInfo",
                "release": "clReleaseEvent", "write": "clEnqueueWriteBuffer",
                "read": "clEnqueueReadBuffer", "profiling_info": "clGetEventProfilingInfo"}


@functools.cache
def _native_entry_points() -> dict[str, int]:
    """The OpenCL functions of the ICD loader PyOpenCL uses (as this process's memory map
    names it), by the names of :meth:`Context.native_entry_points`; empty when not found."""
    try:
        with open("/proc/self/maps") as fh:
            paths = [ln.split()[-1] for ln in fh if "libOpenCL" in ln and "/" in ln]
        lib = ctypes.CDLL(paths[0])
        found = {key: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
                 for key, name in _ENTRY_NAMES.items()}
    except (OSError, AttributeError, IndexError) as exc:
        log.debug("OpenCL entry points not found: %s", exc)
        return {}
    return found if all(found.values()) else {}


#: what the cache keys and the host CPU's identification read of /proc/cpuinfo
_CPUINFO_KEYS = ("vendor_id", "cpu family", "model", "model name", "flags")


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's entries of ``/proc/cpuinfo`` (empty where there is none)."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            key = key.strip()
            if key in _CPUINFO_KEYS and key not in found:
                found[key] = value.strip()
            if not line.strip() and found:
                break
    return found


@functools.cache
def _host_cpu_id() -> str:
    """This machine's processor (vendor, family, model, name, flags), for the cache keys: a
    home folder shared by machines of different CPU generations must not hand one the
    binaries, or the probe answers, of another (their OpenCL device names can be equal)."""
    import platform

    found = _cpuinfo()
    return "|".join([platform.machine(), *(found.get(k, "") for k in _CPUINFO_KEYS)])


def _is_host_cpu(device: Any) -> bool:
    """True for an OpenCL CPU device that is this machine's processor: its name holds the
    model name of ``/proc/cpuinfo`` (PoCL: ``pthread-skylake-avx512-<model name>``; Intel's
    and AMD's runtimes: the model name), or that name is unknown (then every CPU device)."""
    if not device.type & cl.device_type.CPU:
        return False
    model = " ".join(_cpuinfo().get("model name", "").split()).lower()
    return not model or model in " ".join(device.name.split()).lower()


def _platform_library(platform: Any) -> str:
    """The file of the OpenCL driver behind ``platform`` ("" when unknown). An ICD
    platform handle points to its driver's dispatch table (cl_khr_icd), which lies in the
    driver's library: this process's memory map names the file."""
    try:
        with open("/proc/self/maps") as fh:
            maps = fh.readlines()
        table = ctypes.c_void_p.from_address(int(platform.int_ptr)).value
    except (OSError, AttributeError, TypeError, ValueError):
        return ""
    if not table:
        return ""
    for line in maps:
        parts = line.split()
        low, _, high = parts[0].partition("-") if parts else ("", "", "")
        with contextlib.suppress(ValueError):
            if int(low, 16) <= table < int(high, 16):
                return parts[5] if len(parts) > 5 and parts[5].startswith("/") else ""
    return ""


def _cpu_preference(platform: Any) -> int:
    """Which platform serves this machine's CPU when several do (lowest first): a PoCL of
    the system (e.g. Debian's ``pocl-opencl-icd``, newer than the wheel's LLVM), then the
    PoCL bundled with PyOpenCL (``pocl-binary-distribution``), then any other runtime."""
    if "portable computing language" not in platform.name.lower():
        return 2
    library = _platform_library(platform)
    bundled = bool(library) and Path(library).resolve().is_relative_to(
        Path(cl.__file__).resolve().parent)
    return 1 if bundled else 0


def _platform_label(platform: Any) -> str:
    """A platform as messages name it: its name and version, up to the first comma (two
    PoCLs share the name: "Portable Computing Language (OpenCL 3.0 PoCL 3.1+debian Linux)")."""
    return f"{platform.name.strip()} ({' '.join(platform.version.split(',')[0].split())})"


def _skipped_platforms(listed: list[tuple[Any, list[Any]]]) -> dict[int, tuple[str, bool]]:
    """Which platforms of ``listed`` ((platform, devices) in platform order) are left out,
    and why: {index: (why, whole platform)}. A PoCL that cannot compute right here is left
    out whole; this machine's CPU is served by one platform (the first by
    :func:`_cpu_preference` that passes the check), the others lose their CPU devices
    (not their GPUs). In the check's child process every platform is listed."""
    host = [not _IN_PROBE and any(_is_host_cpu(d) for d in devs) for _, devs in listed]
    order = sorted(range(len(listed)),
                   key=lambda k: (_cpu_preference(listed[k][0]) if host[k] else 3, k))
    used = None
    out: dict[int, tuple[str, bool]] = {}
    for k in order:
        platform, devices = listed[k]
        if host[k] and used is not None:
            out[k] = (f"OpenCL platform {_platform_label(platform)}: same CPU as platform "
                      f"{_platform_label(listed[used][0])}, which is used", False)
            continue
        broken = _pocl_cannot_build(platform, devices)
        if broken:
            out[k] = (f"OpenCL platform {_platform_label(platform)} cannot build kernels "
                      f"here: {broken}", True)
        elif host[k]:
            used = k
    return out


def _cache_file(parts: Callable[[], list[str]], prefix: str = "", digits: int = 64,
                suffix: str = "") -> Path | None:
    """A file of the kernel cache folder named by the hash of ``parts()`` and this
    machine's processor (:func:`_host_cpu_id`); None without a cache folder, or when the
    driver does not answer ``parts()``."""
    folder = config.kernel_cache_dir()
    if folder is None:
        return None
    try:
        ident = "\0".join([*parts(), _host_cpu_id()])
    except cl.Error:  # a driver that does not answer: no cache
        return None
    return folder / f"{prefix}{hashlib.sha256(ident.encode()).hexdigest()[:digits]}{suffix}"


def _binary_cache_file(info: base.DeviceInfo, device: Any, source: str,
                       options: list[str]) -> Path | None:
    """The cache file of one program: keyed by everything the binary depends on (source
    with its headers inlined, options, device, driver, platform and PyOpenCL versions)."""
    return _cache_file(lambda: [source, " ".join(options), device.name, device.driver_version,
                                device.platform.version, info.platform, str(cl.VERSION)],
                       suffix=".bin")


def _kernel_names(program: Any) -> list[str]:
    """The kernels a built program holds (none when the query fails)."""
    try:
        names = program.get_info(cl.program_info.KERNEL_NAMES)
    except cl.Error:
        return []
    return [n for n in names.split(";") if n]


def _load_binary(ctx: Any, device: Any, path: Path | None, options: list[str]) -> Any:
    """The program rebuilt from a cached binary, or None (no file, or a binary the driver
    refuses: then it is built from source and the file replaced)."""
    if path is None:
        return None
    try:
        binary = path.read_bytes()
    except OSError:
        return None
    try:
        program = cl.Program(ctx, [device], [binary]).build(options=options, devices=[device])
    except (cl.Error, ValueError, RuntimeError) as exc:
        log.debug("cached kernel binary %s refused (%s); building from source", path, exc)
        return None
    if not _kernel_names(program):
        log.warning("cached kernel binary %s holds no kernels; building from source", path)
        return None
    log.debug("kernel binary from %s", path)
    return program


def _save_binary(program: Any, path: Path | None) -> None:
    """Keep a built program's binary for the next process (best effort: a folder that
    cannot be written, or a full disk, costs only the next start-up's build)."""
    with contextlib.suppress(cl.Error):
        binaries = program.get_info(cl.program_info.BINARIES)
        if path is not None and binaries and binaries[0]:
            _keep(path, bytes(binaries[0]))


def _keep(path: Path, data: bytes) -> None:
    """Write ``data`` to the cache file ``path`` through a temporary file of this process
    (best effort)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("%s not written: %s", path, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()


_POCL_HINT = ("PoCL's wheel (pocl-binary-distribution 3.0, LLVM 14) does not know CPUs newer than "
              "its LLVM (e.g. AMD Zen 4 and Zen 5): install a newer PoCL, such as your "
              "distribution's (Debian/Ubuntu: apt install pocl-opencl-icd), and sapporo uses it")
#: what the probe runs (part of its cache key: a new probe re-checks every platform)
_PROBE_KIND = "library-order4-ds-v2"
#: the probe's child process may take this long (a cold build of the force kernel: seconds)
_PROBE_TIMEOUT_S = 300
_IN_PROBE = False  # set in the probe's child process: the device under test is not probed


def _python_for_probe() -> str | None:
    """A Python interpreter to run the probe in (the embedding program of the C API is
    not one: there ``sys.executable`` may be the client itself)."""
    candidates = [sys.executable, os.path.join(sys.prefix, "bin", "python3"),
                  os.path.join(sys.prefix, "bin", "python")]
    for exe in candidates:
        if (exe and os.path.basename(exe).startswith("python") and os.path.isfile(exe)
                and os.access(exe, os.X_OK)):
            return exe
    return None


def _run_probe(platform: Any, device: Any) -> tuple[str, bool]:
    """Run :mod:`sapporo.backend.pocl_probe` on ``device`` in a child process. Returns ("",
    True) when the library computes right there, (why not, True) when it does not, and
    ("", False) when the check itself could not run (no interpreter, sapporo not importable
    in the child): the device is then assumed to work, and the answer is not kept."""
    exe = _python_for_probe()
    if exe is None:
        log.debug("no Python interpreter to probe %s with; assumed to work", device.name)
        return "", False
    cmd = [exe, "-m", "sapporo.backend.pocl_probe", platform.version, device.name,
           device.driver_version]
    # the child imports this very sapporo, wherever it was found
    here = str(Path(__file__).resolve().parents[2])
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH"))
                                         if p)}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        return f"the check did not finish in {_PROBE_TIMEOUT_S} s", True
    except OSError as exc:
        log.debug("could not run the probe (%s); %s assumed to work", exc, device.name)
        return "", False
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if last == "ok":
        return "", True
    if last.startswith("error: "):
        return last[len("error: "):], True
    tail = " ".join(proc.stderr.strip().splitlines()[-1:])
    if "checking" not in lines:  # it never got to the device
        log.warning("could not check %s in a child process (status %d: %s); assumed to "
                    "work", device.name.strip(), proc.returncode, tail[:300])
        return "", False
    return f"the check process ended with status {proc.returncode} ({tail[:300]})", True


def _pocl_cannot_build(platform: Any, devices: list[Any]) -> str:
    """For a PoCL platform with CPU devices: why sapporo's library cannot compute right on
    the first of them (an LLVM too old for this CPU: no build, a program without kernels,
    wrong forces, a crash), else "". The check runs once per machine and PoCL, in a child
    process (:mod:`sapporo.backend.pocl_probe`); its answer is cached with the kernel
    binaries. Other platforms are not checked."""
    if _IN_PROBE or "portable computing language" not in platform.name.lower():
        return ""
    cpus = [d for d in devices if d.type & cl.device_type.CPU]
    if not cpus:
        return ""
    # the threaded device first: the single-threaded one serves it, and is not listed alone
    cpus.sort(key=lambda d: quirks.is_pocl_single_threaded_cpu(d.name.strip()))
    note = _cache_file(lambda: [platform.version, cpus[0].name, cpus[0].driver_version,
                                str(cl.VERSION), _PROBE_KIND], prefix="probe-", digits=32)
    if note is not None:
        with contextlib.suppress(OSError):
            text = note.read_text()
            if text.startswith("ok") or text.startswith("error:"):
                return "" if text.startswith("ok") else text[len("error:"):]
    log.info("checking %s (%s) once on this machine ...", cpus[0].name.strip(),
             platform.version.strip())
    answer, keep = _run_probe(platform, cpus[0])
    if note is not None and keep:
        _keep(note, ("error:" + answer if answer else "ok").encode())
    return answer


class OpenCLBackend(base.Backend):
    """Every OpenCL device of every platform, numbered in platform order; this machine's
    CPU through one platform only (:func:`_skipped_platforms`)."""

    name = "opencl"
    #: force.cl: vectors of 1 to 16 i-particles per work-item, and the j-vector variant
    capabilities = base.Capabilities(kernel_ext="cl", widths=(1, 2, 4, 8, 16), jv=True)

    def __init__(self) -> None:
        if cl is None:
            raise BackendError(f"PyOpenCL is not importable: {_IMPORT_ERROR}")
        self._devices: list[tuple[base.DeviceInfo, Any]] | None = None
        self.reason = ""
        #: platforms left out, and why (e.g. a PoCL that cannot build for this CPU)
        self.skipped: list[str] = []

    def _scan(self) -> list[tuple[base.DeviceInfo, Any]]:
        if self._devices is not None:
            return self._devices
        found: list[tuple[base.DeviceInfo, Any]] = []
        self._companions: dict[int, Any] = {}
        _request_pocl_companion()
        _request_pocl_affinity()
        try:
            _ensure_pocl_cache()
        except BackendError as exc:
            self.reason = str(exc)
            self._devices = []
            return self._devices
        try:
            platforms = cl.get_platforms()
        except cl.Error as exc:
            self.reason = f"no OpenCL platform ({exc})"
            platforms = []
        listed = []
        for platform in platforms:
            try:
                listed.append((platform, platform.get_devices()))
            except cl.Error as exc:
                log.debug("platform %s: %s", platform.name, exc)
        skipped = _skipped_platforms(listed)
        for k, (platform, devices) in enumerate(listed):
            why, whole = skipped.get(k, ("", False))
            if whole:
                log.info("%s; its devices are skipped. %s", why, _POCL_HINT)
                self.reason = f"{why}. {_POCL_HINT}"
                self.skipped.append(why)
                continue
            if why:
                log.debug("%s; its CPU devices are skipped", why)
                self.skipped.append(why)
                devices = [d for d in devices if not _is_host_cpu(d)]
            names = [dev.name.strip() for dev in devices]
            # the threaded CPU device's companion and the companion's twin (PoCL's first
            # two single-threaded devices), not listed on their own
            singles = ([d for d, n in zip(devices, names, strict=True)
                        if quirks.is_pocl_single_threaded_cpu(n)]
                       if any(quirks.is_pocl_threaded_cpu(n) for n in names) else [])
            companion = singles[0] if singles else None
            twin = singles[1] if len(singles) > 1 else None
            for dev in devices:
                if any(dev is d for d in singles):
                    continue
                kind = ("gpu" if dev.type & cl.device_type.GPU else
                        "cpu" if dev.type & cl.device_type.CPU else "accelerator")
                info = base.DeviceInfo(
                    backend="opencl",
                    index=len(found),
                    name=dev.name.strip(),
                    vendor=dev.vendor.strip(),
                    platform=platform.name.strip(),
                    device_type=kind,
                    compute_units=int(dev.max_compute_units),
                    max_work_group_size=int(dev.max_work_group_size),
                    local_mem_size=int(dev.local_mem_size),
                    global_mem_size=int(dev.global_mem_size),
                    double_support=bool(dev.double_fp_config) or "cl_khr_fp64" in dev.extensions,
                    int64_atomics="cl_khr_int64_base_atomics" in dev.extensions,
                    max_alloc_size=int(dev.max_mem_alloc_size),
                    float_lanes=int(dev.preferred_vector_width_float),
                    driver_version=str(dev.driver_version),
                )
                if companion is not None and quirks.is_pocl_threaded_cpu(info.name):
                    self._companions[len(found)] = (companion, twin)
                    info = dataclasses.replace(info, companion=companion.name.strip(),
                                               twin="" if twin is None else twin.name.strip())
                found.append((info, dev))
        if not found and not self.reason:
            self.reason = "OpenCL platforms exist but expose no device"
        self._devices = found
        return found

    def devices(self) -> list[base.DeviceInfo]:
        return [info for info, _ in self._scan()]

    def open(self, index: int, profiling: bool = False, instance: int = 0,
             twin: bool = True) -> base.Context:
        devs = self._scan()
        if not 0 <= index < len(devs):
            raise BackendError(f"OpenCL device index {index} out of range: {len(devs)} device(s) "
                               "found")
        info, dev = devs[index]
        companion, second = self._companions.get(index, (None, None))
        return CLContext(info, dev, profiling, companion, instance, second if twin else None)
