"""PyCUDA implementation of the backend interface.

Imported only when asked for (or during automatic selection): a machine without PyCUDA never
imports it. Kernels are compiled at run time by PyCUDA for the detected architecture, with
PyCUDA's own on-disk cache (no second cache is added here).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from typing import Any

import numpy as np

from ..errors import BackendError, BuildError
from . import quirks
from .base import (
    Backend,
    Buffer,
    Context,
    DeviceInfo,
    Event,
    Kernel,
    Program,
    format_defines,
    kernel_dir,
    load_source,
    save_failed_source,
)

log = logging.getLogger(__name__)

try:
    import pycuda.driver as cuda
except Exception as _exc:  # ImportError, or a driver library that fails to load
    cuda = None
    _IMPORT_ERROR: Exception | None = _exc
else:
    _IMPORT_ERROR = None


class CUEvent(Event):
    def __init__(self, start: Any, end: Any, ctx: CUContext | None):
        self._start, self._end, self._ctx = start, end, ctx

    def wait(self) -> None:
        if self._end is not None:
            with self._ctx.active():
                self._end.synchronize()

    @property
    def elapsed(self) -> float | None:
        if self._start is None or self._end is None:
            return None
        with self._ctx.active():
            self._end.synchronize()
            return self._end.time_since(self._start) * 1e-3


class CUBuffer(Buffer):
    def __init__(self, ctx: CUContext, nbytes: int):
        self._ctx = ctx
        self.nbytes = int(nbytes)
        with ctx.active():
            try:
                self.mem = cuda.mem_alloc(max(self.nbytes, 4))
            except cuda.Error as exc:
                raise BackendError(
                    f"cannot allocate {self.nbytes} bytes on {ctx.info.name}: {exc}"
                ) from exc

    def _check(self, host: np.ndarray, offset: int) -> None:
        if not host.flags.c_contiguous:
            raise BackendError("host array must be C-contiguous")
        if offset < 0 or offset + host.nbytes > self.nbytes:
            raise BackendError(
                f"transfer of {host.nbytes} bytes at offset {offset} exceeds buffer of "
                f"{self.nbytes} bytes"
            )

    def upload(self, host: np.ndarray, offset: int = 0, wait: bool = True) -> Event:
        self._check(host, offset)
        if host.nbytes == 0:
            return CUEvent(None, None, None)
        with self._ctx.active():
            cuda.memcpy_htod_async(int(self.mem) + offset, host, self._ctx.stream)
            end = self._ctx.record()
            if wait:
                end.synchronize()
        return CUEvent(None, end, self._ctx)

    def download(self, host: np.ndarray, offset: int = 0, wait: bool = True) -> Event:
        self._check(host, offset)
        if host.nbytes == 0:
            return CUEvent(None, None, None)
        with self._ctx.active():
            cuda.memcpy_dtoh_async(host, int(self.mem) + offset, self._ctx.stream)
            end = self._ctx.record()
            if wait:
                end.synchronize()
        return CUEvent(None, end, self._ctx)

    def fill(self, value: int = 0) -> Event:
        with self._ctx.active():
            cuda.memset_d32_async(self.mem, int(value) & 0xFFFFFFFF, self.nbytes // 4,
                                  self._ctx.stream)
            end = self._ctx.record()
        return CUEvent(None, end, self._ctx)

    def free(self) -> None:
        mem = getattr(self, "mem", None)
        if mem is not None:
            with self._ctx.active():
                mem.free()
            self.mem = None


class CUKernel(Kernel):
    def __init__(self, ctx: CUContext, func: Any, name: str):
        self._ctx, self._func, self.name = ctx, func, name

    def __call__(self, global_size, local_size, *args, wait=False) -> Event:
        gs = tuple(int(g) for g in global_size) + (1,) * (3 - len(global_size))
        ls = tuple(int(s) for s in (local_size or (1,) * len(global_size)))
        ls = ls + (1,) * (3 - len(ls))
        if any(g % s for g, s in zip(gs, ls, strict=True)):
            raise BackendError(f"global size {gs} is not a multiple of local size {ls}")
        grid = tuple(g // s for g, s in zip(gs, ls, strict=True))
        cargs = [a.mem if isinstance(a, CUBuffer) else a for a in args]
        with self._ctx.active():
            start = self._ctx.record() if self._ctx.profiling else None
            self._func(*cargs, block=ls, grid=grid[:2], stream=self._ctx.stream)
            end = self._ctx.record()
            if wait:
                end.synchronize()
        return CUEvent(start, end, self._ctx)


class CUProgram(Program):
    def __init__(self, ctx: CUContext, module: Any):
        self._ctx, self._module = ctx, module
        self._kernels: dict[str, CUKernel] = {}

    def kernel(self, name: str) -> Kernel:
        if name not in self._kernels:
            with self._ctx.active():
                try:
                    func = self._module.get_function(name)
                except cuda.LogicError as exc:
                    raise BackendError(f"kernel {name!r} not found in module: {exc}") from exc
            self._kernels[name] = CUKernel(self._ctx, func, name)
        return self._kernels[name]


class CUContext(Context):
    def __init__(self, info: DeviceInfo, device: Any, profiling: bool):
        self.info = info
        self.profiling = profiling
        self._device = device
        self._ctx = device.make_context()
        try:
            self.stream = cuda.Stream()
        finally:
            self._ctx.pop()
        self._programs: dict[str, CUProgram] = {}

    @contextlib.contextmanager
    def active(self):
        """Make this context current for the duration of the block."""
        self._ctx.push()
        try:
            yield
        finally:
            cuda.Context.pop()

    def record(self) -> Any:
        ev = cuda.Event()
        ev.record(self.stream)
        return ev

    def alloc(self, nbytes: int) -> Buffer:
        return CUBuffer(self, nbytes)

    def build(self, source_name: str, defines: dict[str, Any] | None = None) -> Program:
        from pycuda.compiler import SourceModule

        source = load_source("cuda", source_name)
        arch = quirks.cuda_arch_option(self._device.compute_capability())
        options = format_defines(defines) + ["-std=c++14"]
        key = hashlib.sha256((source + "\0" + " ".join(options) + arch).encode()).hexdigest()
        if key in self._programs:
            return self._programs[key]
        with self.active():
            try:
                module = SourceModule(
                    source,
                    options=options,
                    arch=arch,
                    no_extern_c=True,
                    include_dirs=[str(kernel_dir("cuda"))],
                )
            except Exception as exc:  # pycuda.driver.CompileError and driver errors
                build_log = getattr(exc, "stderr", "") or str(exc)
                path = save_failed_source(source, ".cu")
                raise BuildError(
                    f"CUDA build of {source_name} failed on {self.info.name}\n"
                    f"options: {' '.join(options)} -arch={arch}\nsource saved to: {path}\n"
                    f"{build_log}",
                    options,
                    build_log,
                    path,
                ) from None
        prog = CUProgram(self, module)
        self._programs[key] = prog
        return prog

    def finish(self) -> None:
        with self.active():
            self.stream.synchronize()

    def close(self) -> None:
        if getattr(self, "_ctx", None) is not None:
            self.finish()
            self._programs.clear()
            self._ctx.detach()
            self._ctx = None


class CUDABackend(Backend):
    """Every CUDA device, numbered as the driver numbers them."""

    name = "cuda"

    def __init__(self) -> None:
        if cuda is None:
            raise BackendError(f"PyCUDA is not importable: {_IMPORT_ERROR}")
        self.reason = ""
        try:
            cuda.init()
            self._count = cuda.Device.count()
        except Exception as exc:
            self._count = 0
            self.reason = f"CUDA driver initialisation failed: {exc}"
        if self._count == 0 and not self.reason:
            self.reason = "the CUDA driver reports no device"

    def devices(self) -> list[DeviceInfo]:
        out = []
        attr = cuda.device_attribute
        for i in range(self._count):
            dev = cuda.Device(i)
            major, minor = dev.compute_capability()
            out.append(
                DeviceInfo(
                    backend="cuda",
                    index=i,
                    name=dev.name(),
                    vendor="NVIDIA Corporation",
                    platform=f"CUDA {'.'.join(map(str, cuda.get_version()))}",
                    device_type="gpu",
                    compute_units=dev.get_attribute(attr.MULTIPROCESSOR_COUNT),
                    max_work_group_size=dev.get_attribute(attr.MAX_THREADS_PER_BLOCK),
                    local_mem_size=dev.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK),
                    global_mem_size=dev.total_memory(),
                    double_support=True,
                    driver_version=f"{cuda.get_driver_version()} (sm_{major}{minor})",
                )
            )
        return out

    def open(self, index: int, profiling: bool = False) -> Context:
        infos = self.devices()
        if not 0 <= index < len(infos):
            raise BackendError(
                f"CUDA device index {index} out of range: {len(infos)} device(s) found"
            )
        return CUContext(infos[index], cuda.Device(index), profiling)
