"""PyCUDA implementation of the backend interface.

Imported only when asked for (or during automatic selection); PyCUDA itself is imported
when :class:`CUDABackend` is constructed. Kernels (``kernels_cuda/*.cu``) are compiled at
run time by PyCUDA's ``compile`` (nvcc) for the device's architecture, with PyCUDA's own
on-disk cache (``PYCUDA_CACHE_DIR``). The native engine (``sapporo/core/_engine.c``) runs
block steps through the driver API itself: the ``libcuda`` PyCUDA loaded
(:func:`_driver_library`), PyCUDA's context and stream handles, the allocations' device
pointers, and ``CUfunction`` handles from loading the same cubin once more.

Mapping of the OpenCL-style interface:

* A context is a PyCUDA context with one stream; every operation pushes the context for
  its duration (nothing stays current between calls), or nothing within
  ``Context.active()``.
* Events are recorded only for kernel timing when profiling; otherwise waiting for an
  operation waits for the (in-order) stream.
* Launch sizes: block = ``local_size``, grid = ``global_size / local_size``.
* Transfers are stream-ordered. A download into a pageable array returns once it is
  filled; host buffers (``alloc_host``) are page-locked and copied by asynchronous DMA.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import threading
import weakref
from pathlib import PurePath
from typing import Any

import numpy as np

from sapporo.backend import base, quirks
from sapporo.errors import BackendError, BuildError

log = logging.getLogger(__name__)

_INSTALL = ("install it with: pip install pycuda (the 'cuda' extra: pip install -e \".[cuda]\" "
            "from a source checkout; needs the NVIDIA driver and the CUDA toolkit's nvcc on PATH)")


def _import_driver() -> Any:
    """Import ``pycuda.driver``; raise :class:`BackendError` saying why it failed."""
    try:
        import pycuda.driver as drv
    except Exception as exc:  # ImportError, or a driver library that fails to load
        if "libcuda" in str(exc):  # PyCUDA is there, the NVIDIA driver's library is not
            raise BackendError("PyCUDA cannot load the NVIDIA driver library "
                               f"({type(exc).__name__}: {exc}); is the NVIDIA driver installed, "
                               "and is this a machine with a GPU?") from None
        raise BackendError(f"PyCUDA is not importable ({type(exc).__name__}: {exc}); "
                           f"{_INSTALL}") from None
    return drv


#: the driver's entry points the native engine calls, by the names of its plan (plan.h)
_ENGINE_ENTRY_POINTS = {
    "cu_launch": "cuLaunchKernel", "cu_htod": "cuMemcpyHtoDAsync_v2",
    "cu_dtoh": "cuMemcpyDtoHAsync_v2", "cu_sync": "cuStreamSynchronize",
    "cu_query": "cuStreamQuery", "cu_push": "cuCtxPushCurrent_v2",
    "cu_pop": "cuCtxPopCurrent_v2", "cu_event_create": "cuEventCreate",
    "cu_event_record": "cuEventRecord", "cu_event_elapsed": "cuEventElapsedTime",
    "cu_event_destroy": "cuEventDestroy_v2",
}


def _driver_library() -> ctypes.CDLL | None:
    """The CUDA driver library already in this process (PyCUDA loaded it), or None."""
    try:
        return ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return None


_TLS = threading.local()  # .stack: the CUContexts made current by _Activation, per thread


class _Activation:
    """``with``: make a :class:`CUContext` current on this thread for the block; nothing is
    pushed when it is already current (an enclosing block), so a whole library call costs
    one push and one pop."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: CUContext):
        self.ctx = ctx

    def __enter__(self) -> None:
        try:
            stack = _TLS.stack
        except AttributeError:
            stack = _TLS.stack = []
        ctx = self.ctx
        if not stack or stack[-1] is not ctx:
            if ctx._ctx is None:
                raise BackendError(f"CUDA context of {ctx.info.name} is closed")
            ctx._ctx.push()
        stack.append(ctx)

    def __exit__(self, *exc: object) -> None:
        stack = _TLS.stack
        ctx = stack.pop()
        if not stack or stack[-1] is not ctx:  # this block pushed it
            ctx.drv.Context.pop()


class CUEvent(base.Event):
    """Completion of stream work: a recorded ``pycuda.driver.Event`` ``end``, else the whole
    (in-order) stream; no context: already done."""

    def __init__(self, ctx: CUContext | None, end: Any = None, start: Any = None):
        self._ctx, self._end, self._start = ctx, end, start

    def wait(self) -> None:
        if self._ctx is not None:
            self._ctx.synchronize(self._end)

    @property
    def elapsed(self) -> float | None:
        if self._start is None or self._end is None or self._ctx is None:
            return None
        self.wait()
        with self._ctx.active():
            return self._end.time_since(self._start) * 1e-3


class CUBuffer(base.Buffer):
    """Device memory from ``mem_alloc``."""

    def __init__(self, ctx: CUContext, nbytes: int):
        self._ctx = ctx
        self.nbytes = int(nbytes)
        self.mem: Any = None
        drv = ctx.drv
        with ctx.active():
            try:
                self.mem = drv.mem_alloc(max(self.nbytes, 4))
            except drv.Error as exc:
                raise BackendError(f"cannot allocate {self.nbytes} bytes on "
                                   f"{ctx.info.name}: {exc}") from exc

    def check_transfer(self, host: np.ndarray, offset: int) -> None:
        if self.mem is None:
            raise BackendError("buffer was freed")
        super().check_transfer(host, offset)

    def native(self) -> int | None:
        return None if self.mem is None else int(self.mem)

    def upload(self, host: np.ndarray, offset: int = 0, wait: bool = True) -> base.Event:
        self.check_transfer(host, offset)
        if host.nbytes == 0:
            return CUEvent(None)
        ctx = self._ctx
        ctx.enqueue(ctx.drv.memcpy_htod_async, int(self.mem) + offset, host)
        if wait:
            ctx.synchronize()
        return CUEvent(None if wait else ctx)

    def download(self, host: np.ndarray, offset: int = 0, wait: bool = True) -> base.Event:
        self.check_transfer(host, offset)
        if host.nbytes == 0:
            return CUEvent(None)
        ctx = self._ctx  # (into pageable memory: complete on return, wait or not)
        ctx.enqueue(ctx.drv.memcpy_dtoh_async, host, int(self.mem) + offset)
        ctx.synchronize()
        return CUEvent(None)

    def fill(self, value: int = 0) -> base.Event:
        if self.mem is None:
            raise BackendError("buffer was freed")
        words = self.nbytes // 4
        if words == 0:
            return CUEvent(None)
        ctx = self._ctx
        ctx.enqueue(ctx.drv.memset_d32_async, self.mem, int(value) & 0xFFFFFFFF, words)
        return CUEvent(ctx)

    def free(self) -> None:
        mem, self.mem = self.mem, None
        if mem is not None:
            with self._ctx.active():
                mem.free()


class CUHostBuffer(base.HostBuffer):
    """Page-locked host memory paired with device memory of the same size: copies both ways
    are asynchronous DMA on the stream, with no staging copy."""

    def __init__(self, ctx: CUContext, nbytes: int):
        buffer = CUBuffer(ctx, nbytes)
        drv = ctx.drv
        try:
            with ctx.active():
                array = drv.pagelocked_empty(max(int(nbytes), 4), np.uint8)
        except drv.Error as exc:
            buffer.free()
            raise BackendError(f"cannot allocate {nbytes} bytes of page-locked memory: "
                               f"{exc}") from exc
        super().__init__(buffer, array, zero_copy=False)
        self._ctx = ctx

    def _mem(self) -> Any:
        mem = self.buffer.mem
        if mem is None or self.array is None:
            raise BackendError("host buffer was freed")
        return mem

    def to_device(self, nbytes: int | None = None) -> None:
        n = self.nbytes if nbytes is None else int(nbytes)
        if n > 0:
            self._ctx.enqueue(self._ctx.drv.memcpy_htod_async, self._mem(), self.array[:n])

    def from_device(self, nbytes: int | None = None) -> None:
        n = self.nbytes if nbytes is None else int(nbytes)
        if n > 0:
            self._ctx.enqueue(self._ctx.drv.memcpy_dtoh_async, self.array[:n], self._mem())

    def free(self) -> None:
        self.buffer.free()
        array, self.array = self.array, None
        owner = getattr(array, "base", None)
        if hasattr(owner, "free") and self._ctx._ctx is not None:
            with self._ctx.active():
                owner.free()


class CUKernel(base.Kernel):
    """A ``pycuda.driver.Function``, launched OpenCL-style. Arguments are packed by
    ``Function.prepare`` / ``prepared_async_call`` with a format derived from the arguments
    themselves (``P`` device pointer, ``i``, ``I``, ``f``, ``d``), which skips PyCUDA's
    per-call argument inspection; :meth:`prepare` checks and packs once."""

    _FORMAT = {np.int32: "i", np.uint32: "I", np.float32: "f", np.float64: "d"}

    def __init__(self, ctx: CUContext, func: Any, name: str, program: CUProgram):
        self._ctx, self._func, self.name = ctx, func, name
        self._program = program
        self._format: str | None = None

    def _arg(self, pos: int, a: Any) -> tuple[str, Any]:
        """Format letter and value of argument ``pos``."""
        if isinstance(a, CUBuffer):
            if a.mem is None:
                raise BackendError(f"kernel {self.name}: argument {pos} is a freed buffer")
            return "P", int(a.mem)
        letter = self._FORMAT.get(type(a))
        if letter is not None:
            return letter, a
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, float)):
            raise BackendError(f"kernel {self.name}: argument {pos} has unsupported type "
                               f"{type(a).__name__} (give a Buffer, numpy.int32 or numpy.float64)")
        if isinstance(a, int):
            if not -(2**31) <= a < 2**31:
                raise BackendError(f"kernel {self.name}: argument {pos} overflows an int")
            return "i", a
        return "d", float(a)

    def _args(self, args: tuple[Any, ...]) -> tuple[str, list[Any]]:
        packed = [self._arg(pos, a) for pos, a in enumerate(args)]
        return "".join(f for f, _ in packed), [v for _, v in packed]

    def _shape(
        self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None
    ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """Checked (grid, block) of an OpenCL-style launch size."""
        gs = tuple(int(g) for g in global_size)
        if not 1 <= len(gs) <= 3 or any(g < 1 for g in gs):
            raise BackendError(f"kernel {self.name}: invalid global size {gs}")
        if local_size is None:
            ls = tuple(math.gcd(g, 256) for g in gs)  # a divisor of each dimension
        else:
            ls = tuple(int(s) for s in local_size)
        if len(ls) != len(gs) or any(s < 1 for s in ls):
            raise BackendError(f"kernel {self.name}: invalid local size {ls} for global {gs}")
        if any(g % s for g, s in zip(gs, ls, strict=True)):
            raise BackendError(f"kernel {self.name}: global size {gs} is not a multiple of local "
                               f"size {ls}")
        threads = math.prod(ls)
        if threads > self._ctx.info.max_work_group_size:
            raise BackendError(f"kernel {self.name}: block of {threads} threads exceeds the device "
                               f"limit {self._ctx.info.max_work_group_size}")
        pad = (1,) * (3 - len(gs))
        grid = tuple(g // s for g, s in zip(gs, ls, strict=True)) + pad
        return grid, ls + pad  # type: ignore[return-value]

    def _launch(self, grid: tuple[int, ...], block: tuple[int, ...], fmt: str,
                values: list[Any], wait: bool) -> base.Event:
        ctx = self._ctx
        start = end = None
        with ctx.active():
            if fmt != self._format:
                self._func.prepare(fmt)
                self._format = fmt
            if ctx.profiling:
                start = ctx.record()
            try:
                ctx.commands += 1
                self._func.prepared_async_call(grid, block, ctx.stream, *values)
            except ctx.drv.Error as exc:
                raise BackendError(f"launch of kernel {self.name} (grid {grid}, block {block}) "
                                   f"failed on {ctx.info.name}: {exc}") from exc
            if ctx.profiling:
                end = ctx.record()
        if wait:
            ctx.synchronize(end)
        return CUEvent(ctx, end, start)

    def __call__(self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                 *args: Any, wait: bool = False) -> base.Event:
        grid, block = self._shape(global_size, local_size)
        fmt, values = self._args(args)
        return self._launch(grid, block, fmt, values, wait)

    def prepare(
        self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None, *args: Any
    ) -> base.Launch:
        return CULaunch(self, global_size, local_size, args)


class CULaunch(base.Launch):
    """A checked, packed launch of a :class:`CUKernel`."""

    kernel: CUKernel

    def __init__(self, kernel: CUKernel, global_size: tuple[int, ...],
                 local_size: tuple[int, ...] | None, args: tuple[Any, ...]):
        super().__init__(kernel, global_size, local_size, args)
        self._grid, self._block = kernel._shape(global_size, local_size)
        self._fmt, self._values = kernel._args(tuple(args))

    _NATIVE = {"P": ("<Q", 8), "i": ("<i", 4), "I": ("<I", 4), "d": ("<d", 8), "f": ("<f", 4)}

    def native(self) -> base.NativeLaunch | None:
        kernel = self.kernel
        ctx = kernel._ctx
        handle = kernel._program.native_function(kernel.name)
        if handle is None or ctx.stream is None:
            return None
        args = []
        for letter, value in zip(self._fmt, self._values, strict=True):
            code, size = self._NATIVE[letter]
            word = np.frombuffer(np.array(value, dtype=code).tobytes().ljust(8, b"\0"), "<u8")
            args.append((size, int(word[0])))
        dims = len(self.global_size)
        return base.NativeLaunch(int(ctx.stream.handle), handle, tuple(self.global_size),
                                 tuple(self._block[:dims]), tuple(args))


class CUProgram(base.Program):
    """A compiled cubin, loaded by PyCUDA (and, for the native engine, once more by the
    driver itself: :meth:`native_function`)."""

    def __init__(self, ctx: CUContext, module: Any, source_name: str, image: bytes):
        self._ctx, self._module, self._source_name = ctx, module, source_name
        self._image = image
        self._kernels: dict[str, CUKernel] = {}
        self._native: ctypes.c_void_p | None = None  # the driver's own CUmodule
        self._functions: dict[str, int | None] = {}

    def native_function(self, name: str) -> int | None:
        """The ``CUfunction`` of kernel ``name`` in this program's cubin as the driver
        loaded it for C callers, or None where the engine cannot use the driver."""
        if name in self._functions:
            return self._functions[name]
        ctx = self._ctx
        driver = ctx.native_driver()
        handle = None
        if driver is not None:
            with ctx.active():
                if self._native is None:
                    module = ctypes.c_void_p()
                    rc = driver.cuModuleLoadData(ctypes.byref(module),
                                                 ctypes.c_char_p(self._image))
                    if rc == 0:
                        self._native = module
                    else:
                        log.info("native engine off on %s: cuModuleLoadData gave %d",
                                 ctx.info.name, rc)
                if self._native is not None:
                    func = ctypes.c_void_p()
                    if driver.cuModuleGetFunction(ctypes.byref(func), self._native,
                                                  name.encode()) == 0:
                        handle = func.value
        self._functions[name] = handle
        return handle

    def release_native(self) -> None:
        """Unload the driver's own copy of the module (call with the context current)."""
        driver = self._ctx.native_driver()
        if self._native is not None and driver is not None:
            driver.cuModuleUnload(self._native)
        self._native = None
        self._functions.clear()

    def kernel(self, name: str) -> base.Kernel:
        if name not in self._kernels:
            with self._ctx.active():
                try:
                    func = self._module.get_function(name)
                except self._ctx.drv.Error as exc:
                    raise BackendError(f"kernel {name!r} not found in "
                                       f"{self._source_name}: {exc}") from exc
            self._kernels[name] = CUKernel(self._ctx, func, name, self)
        return self._kernels[name]


def _cuda_source_name(source_name: str) -> str:
    """``force``, ``force.cl`` or ``force.cu`` -> ``force.cu``."""
    path = PurePath(source_name)
    if path.suffix in (".cl", ".cu", ""):
        return str(path.with_suffix(".cu"))
    return source_name


def _compile_log(exc: BaseException) -> str:
    """The compiler output carried by a PyCUDA ``CompileError`` (else the message)."""
    parts = [getattr(exc, "stdout", None), getattr(exc, "stderr", None)]
    text = "\n".join(p if isinstance(p, str) else p.decode("utf-8", "replace")
                     for p in parts if p)
    return text or f"{type(exc).__name__}: {exc}"


class CUContext(base.Context):
    """One CUDA device: a PyCUDA context and a stream."""

    def __init__(self, drv: Any, info: base.DeviceInfo, profiling: bool):
        self.drv = drv
        self.info = info
        self.profiling = profiling
        self._programs: dict[str, CUProgram] = {}
        self._buffers: weakref.WeakSet[CUBuffer] = weakref.WeakSet()
        self._hosts: weakref.WeakSet[CUHostBuffer] = weakref.WeakSet()
        self._activation = _Activation(self)
        self._ctx: Any = None
        self._driver: ctypes.CDLL | None = None  # native_driver()
        self._driver_checked = False
        self._device = drv.Device(info.index)
        try:
            self._ctx = self._device.make_context()
        except drv.Error as exc:
            raise BackendError(f"cannot open CUDA device {info.index} ({info.name}): "
                               f"{exc}") from exc
        try:
            self.stream = drv.Stream()
        except drv.Error as exc:
            drv.Context.pop()
            self._ctx.detach()
            self._ctx = None
            raise BackendError(f"cannot create a stream on {info.name}: {exc}") from exc
        drv.Context.pop()

    def active(self) -> _Activation:
        """``with ctx.active():`` this context is current on this thread within the block."""
        return self._activation

    def enqueue(self, copy: Any, *args: Any) -> None:
        """Queue the copy or fill ``copy(*args, stream)`` on the stream."""
        with self.active():
            self.commands += 1
            copy(*args, self.stream)

    def record(self) -> Any:
        """Record a timing event on the stream (call with the context active)."""
        ev = self.drv.Event()
        ev.record(self.stream)
        return ev

    def alloc(self, nbytes: int) -> base.Buffer:
        buf = CUBuffer(self, nbytes)
        self._buffers.add(buf)
        return buf

    def alloc_host(self, nbytes: int) -> base.HostBuffer:
        """A page-locked :class:`CUHostBuffer` (asynchronous copies both ways)."""
        host = CUHostBuffer(self, nbytes)
        self._hosts.add(host)
        return host

    def build(self, source_name: str, defines: dict[str, Any] | None = None,
              small: bool = False, twin: bool = False) -> base.Program:
        """Compile ``kernels_cuda/<name>.cu`` (a ``.cl`` name maps to its CUDA counterpart);
        CUDA has no companion device, ``small`` and ``twin`` are ignored."""
        name = _cuda_source_name(source_name)
        source = base.load_source("cuda", name)
        arch = quirks.cuda_arch_option(self.compute_capability())
        options = base.format_defines(defines) + quirks.cuda_build_options(self.info)
        key = hashlib.sha256("\0".join([source, " ".join(options), arch]).encode()).hexdigest()
        if key in self._programs:
            return self._programs[key]
        log.debug("building %s with %s -arch=%s on %s", name, options, arch, self.info.name)
        try:
            from pycuda.compiler import compile as compile_cubin
        except Exception as exc:
            raise BackendError(f"pycuda.compiler is not importable: {exc}; {_INSTALL}") from None
        with self.active():
            try:
                image = compile_cubin(source, options=options, arch=arch, no_extern_c=True,
                                      include_dirs=[str(base.kernel_dir("cuda")),
                                                    str(base.shared_include_dir())])
                module = self.drv.module_from_buffer(image)
            except Exception as exc:  # CompileError, nvcc missing, module load failures
                build_log = _compile_log(exc)
                if isinstance(exc, OSError) or "not found" in build_log.lower():
                    build_log += "\n(is the CUDA toolkit's nvcc on PATH?)"
                path = base.save_failed_source(source, ".cu")
                raise BuildError(
                    f"CUDA build of {name} failed on {self.info.name}\n"
                    f"options: {' '.join(options)} -arch={arch}\nsource saved to: {path}\n"
                    f"{build_log}", options + [f"-arch={arch}"], build_log, path) from None
        prog = CUProgram(self, module, name, image)
        self._programs[key] = prog
        return prog

    def native_driver(self) -> ctypes.CDLL | None:
        """The CUDA driver library as the native engine calls it, or None: no driver
        library in the process, or one that does not hold this context (checked once: the
        context PyCUDA makes current is the driver's current context)."""
        if self._driver_checked:
            return self._driver
        self._driver_checked = True
        driver = _driver_library()
        if driver is None or self._ctx is None:
            return None
        try:
            for name in (*_ENGINE_ENTRY_POINTS.values(), "cuModuleLoadData",
                         "cuModuleGetFunction", "cuModuleUnload", "cuCtxGetCurrent"):
                getattr(driver, name)
        except AttributeError as exc:
            log.info("native engine off on %s: the driver lacks %s", self.info.name, exc)
            return None
        current = ctypes.c_void_p()
        with self.active():
            rc = driver.cuCtxGetCurrent(ctypes.byref(current))
        if rc != 0 or current.value != int(self._ctx.handle):
            log.info("native engine off on %s: the driver library found does not hold "
                     "PyCUDA's context", self.info.name)
            return None
        self._driver = driver
        return driver

    def native_entry_points(self) -> dict[str, int] | None:
        driver = self.native_driver()
        if driver is None:
            return None
        return {key: int(ctypes.cast(getattr(driver, name), ctypes.c_void_p).value or 0)
                for key, name in _ENGINE_ENTRY_POINTS.items()}

    def native_queue(self) -> int | None:
        return None if self.stream is None else int(self.stream.handle)

    def native_context(self) -> int | None:
        return None if self._ctx is None else int(self._ctx.handle)

    def compute_capability(self) -> tuple[int, int]:
        """The device's compute capability (major, minor)."""
        major, minor = self._device.compute_capability()
        return int(major), int(minor)

    def synchronize(self, event: Any = None) -> None:
        """Wait for ``event`` (default: the whole stream); device errors (of asynchronous
        work too, an out-of-range access in a kernel, say) become BackendError."""
        with self.active():
            try:
                (self.stream if event is None else event).synchronize()
            except self.drv.Error as exc:
                raise BackendError(f"CUDA error on {self.info.name}: {exc}") from exc

    def finish(self) -> None:
        self.synchronize()

    def close(self) -> None:
        if getattr(self, "_ctx", None) is None:
            return
        try:
            self.finish()
            for host in list(self._hosts):
                host.free()
            for buf in list(self._buffers):
                buf.free()
            with self.active():
                for prog in self._programs.values():
                    prog.release_native()
            self._programs.clear()
            self.stream = None
        finally:
            ctx, self._ctx = self._ctx, None
            ctx.detach()


class CUDABackend(base.Backend):
    """Every CUDA device, numbered as the driver numbers them. Construction imports PyCUDA
    (:class:`BackendError` when it cannot) and asks the driver for its devices; when that
    fails, the backend has no device and ``reason`` says why."""

    name = "cuda"
    #: force.cu: 1, 2 or 4 i-particles per thread; no j-vector variant
    capabilities = base.Capabilities(kernel_ext="cu", widths=(1, 2, 4), jv=False)

    def __init__(self) -> None:
        self.drv = drv = _import_driver()
        self.reason = ""
        self._infos: list[base.DeviceInfo] = []
        try:
            drv.init()
        except Exception as exc:
            self.reason = f"CUDA driver initialisation failed: {exc}"
            return
        try:
            self._infos = [self._describe(i) for i in range(int(drv.Device.count()))]
        except Exception as exc:
            self.reason = f"cannot query the CUDA devices: {exc}"
            return
        if not self._infos:
            self.reason = "the CUDA driver reports no device"

    def _describe(self, index: int) -> base.DeviceInfo:
        drv = self.drv
        attr = drv.device_attribute
        dev = drv.Device(index)
        major, minor = dev.compute_capability()
        version = ".".join(str(v) for v in drv.get_version())
        return base.DeviceInfo(
            backend="cuda",
            index=index,
            name=str(dev.name()).strip(),
            vendor="NVIDIA Corporation",
            platform=f"CUDA {version}",
            device_type="gpu",
            compute_units=int(dev.get_attribute(attr.MULTIPROCESSOR_COUNT)),
            max_work_group_size=int(dev.get_attribute(attr.MAX_THREADS_PER_BLOCK)),
            # Static __shared__ arrays (all the kernels use) are limited to this per block.
            local_mem_size=int(dev.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK)),
            global_mem_size=int(dev.total_memory()),
            double_support=True,
            driver_version=f"{drv.get_driver_version()} (sm_{major}{minor})",
        )

    def devices(self) -> list[base.DeviceInfo]:
        return list(self._infos)

    def open(self, index: int, profiling: bool = False, instance: int = 0,
             twin: bool = True) -> base.Context:
        if not 0 <= index < len(self._infos):
            why = f" ({self.reason})" if self.reason else ""
            raise BackendError(f"CUDA device index {index} out of range: {len(self._infos)} "
                               f"device(s) found{why}")
        return CUContext(self.drv, self._infos[index], profiling)
