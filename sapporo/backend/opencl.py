"""PyOpenCL implementation of the backend interface."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from typing import Any

import numpy as np

from .. import config
from ..errors import BackendError, BuildError
from . import quirks
from .base import (
    Backend,
    Buffer,
    Context,
    DeviceInfo,
    Event,
    HostBuffer,
    Kernel,
    Program,
    format_defines,
    load_source,
    save_failed_source,
)

log = logging.getLogger(__name__)

#: default of SAPPORO_SPIN_US: how long a wait polls the last command before it sleeps
DEFAULT_SPIN_US = 300
_yield = getattr(os, "sched_yield", lambda: None)

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


class CLEvent(Event):
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


class CLBuffer(Buffer):
    """A ``pyopencl.Buffer`` bound to its queue."""

    def __init__(self, ctx: CLContext, nbytes: int, host: np.ndarray | None = None):
        self._ctx = ctx
        self.nbytes = int(nbytes)
        try:
            if host is None:
                self.buf = cl.Buffer(ctx.cl_context, cl.mem_flags.READ_WRITE,
                                     size=max(self.nbytes, 4))
            else:  # the device works on this host memory itself
                self.buf = cl.Buffer(ctx.cl_context,
                                     cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR,
                                     hostbuf=host)
        except cl.Error as exc:
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
            return CLEvent(None, False)
        ev = cl.enqueue_copy(self._ctx.queue, self.buf, host, dst_offset=offset, is_blocking=wait)
        return CLEvent(ev, self._ctx.profiling)

    def download(self, host: np.ndarray, offset: int = 0, wait: bool = True) -> Event:
        self._check(host, offset)
        if host.nbytes == 0:
            return CLEvent(None, False)
        ev = cl.enqueue_copy(self._ctx.queue, host, self.buf, src_offset=offset, is_blocking=wait)
        return CLEvent(ev, self._ctx.profiling)

    def fill(self, value: int = 0) -> Event:
        size = self.nbytes // 4 * 4
        if size == 0:
            return CLEvent(None, False)
        ev = cl.enqueue_fill_buffer(self._ctx.queue, self.buf, np.int32(value), 0, size)
        return CLEvent(ev, self._ctx.profiling)

    def free(self) -> None:
        buf = getattr(self, "buf", None)
        if buf is not None:
            buf.release()
            self.buf = None


class CLKernel(Kernel):
    def __init__(self, ctx: CLContext, kernel: Any, name: str):
        self._ctx = ctx
        self._kernel = kernel
        self.name = name
        self._scalar_types: tuple | None = None

    def __call__(self, global_size, local_size, *args, wait=False) -> Event:
        # Declaring the scalar argument types once lets PyOpenCL pack them directly
        # (about 1 us for a dozen arguments instead of about 50 us of type discovery).
        types = tuple(type(a) if isinstance(a, np.generic) else None for a in args)
        if types != self._scalar_types:
            self._kernel.set_scalar_arg_dtypes(list(types))
            self._scalar_types = types
        self._kernel.set_args(*[a.buf if isinstance(a, CLBuffer) else a for a in args])
        ev = cl.enqueue_nd_range_kernel(
            self._ctx.queue,
            self._kernel,
            tuple(int(g) for g in global_size),
            None if local_size is None else tuple(int(s) for s in local_size),
        )
        self._ctx._last = ev
        if wait:
            ev.wait()
        return CLEvent(ev, self._ctx.profiling)


class CLProgram(Program):
    def __init__(self, ctx: CLContext, program: Any):
        self._ctx = ctx
        self._program = program
        self._kernels: dict[str, CLKernel] = {}

    def kernel(self, name: str) -> Kernel:
        if name not in self._kernels:
            try:
                k = cl.Kernel(self._program, name)
            except cl.Error as exc:
                raise BackendError(f"kernel {name!r} not found in program: {exc}") from exc
            self._kernels[name] = CLKernel(self._ctx, k, name)
        return self._kernels[name]


class CLContext(Context):
    """One OpenCL device with an in-order command queue."""

    def __init__(self, info: DeviceInfo, device: Any, profiling: bool):
        self.info = info
        self.profiling = profiling
        self.cl_context = cl.Context([device])
        props = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
        self.queue = cl.CommandQueue(self.cl_context, device, properties=props)
        self._device = device
        self._programs: dict[str, CLProgram] = {}
        self._zero_copy: bool | None = None
        self._last: Any = None  # the last kernel enqueued
        spin = config.from_environment().spin_us
        self.spin_seconds = (DEFAULT_SPIN_US if spin is None else spin) * 1e-6

    def alloc(self, nbytes: int) -> Buffer:
        return CLBuffer(self, nbytes)

    def alloc_host(self, nbytes: int) -> HostBuffer:
        if not self._zero_copy_works():
            return super().alloc_host(nbytes)
        array = _aligned_empty(max(int(nbytes), 4))
        return HostBuffer(CLBuffer(self, nbytes, host=array), array, True)

    def _zero_copy_works(self) -> bool:
        """Whether this device computes on host memory given with USE_HOST_PTR (checked once).

        Only devices that share the host's memory qualify (``quirks.shares_host_memory``);
        a kernel writes into such a buffer and the host array must show it without a copy.
        """
        if self._zero_copy is None:
            self._zero_copy = False
            if quirks.shares_host_memory(self.info):
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

    def build(self, source_name: str, defines: dict[str, Any] | None = None) -> Program:
        options = format_defines(defines) + quirks.opencl_build_options(self.info)
        fast_key = source_name + "\0" + " ".join(options)
        if fast_key in self._programs:  # hot path: no file access
            return self._programs[fast_key]
        source = load_source("opencl", source_name)
        key = hashlib.sha256((source + "\0" + " ".join(options)).encode()).hexdigest()
        if key in self._programs:
            self._programs[fast_key] = self._programs[key]
            return self._programs[key]
        log.debug("building %s with %s on %s", source_name, options, self.info.name)
        try:
            program = cl.Program(self.cl_context, source).build(options=options)
        except cl.Error as exc:
            build_log = str(exc)
            path = save_failed_source(source, ".cl")
            raise BuildError(
                f"OpenCL build of {source_name} failed on {self.info.name}\n"
                f"options: {' '.join(options)}\nsource saved to: {path}\n{build_log}",
                options,
                build_log,
                path,
            ) from None
        prog = CLProgram(self, program)
        self._programs[key] = self._programs[fast_key] = prog
        return prog

    def finish(self) -> None:
        """Wait for the queue. The last kernel is polled for up to ``spin_seconds`` first:
        a sleeping wait costs a thread wake-up (50-100 us on PoCL's CPU driver), which is
        more than a small force call takes."""
        ev, self._last = self._last, None
        if ev is not None and self.spin_seconds > 0:
            self.queue.flush()
            deadline = time.perf_counter() + self.spin_seconds
            while ev.command_execution_status > 0 and time.perf_counter() < deadline:
                _yield()  # leave the core to the device's worker threads (CPU devices)
        self.queue.finish()

    def close(self) -> None:
        if getattr(self, "queue", None) is not None:
            self.queue.finish()
            self.queue = None
            self._programs.clear()


class OpenCLBackend(Backend):
    """Every OpenCL device of every platform, numbered in platform order."""

    name = "opencl"

    def __init__(self) -> None:
        if cl is None:
            raise BackendError(f"PyOpenCL is not importable: {_IMPORT_ERROR}")
        self._devices: list[tuple[DeviceInfo, Any]] | None = None
        self.reason = ""

    def _scan(self) -> list[tuple[DeviceInfo, Any]]:
        if self._devices is not None:
            return self._devices
        found: list[tuple[DeviceInfo, Any]] = []
        try:
            platforms = cl.get_platforms()
        except cl.Error as exc:
            self.reason = f"no OpenCL platform ({exc})"
            platforms = []
        for platform in platforms:
            try:
                devices = platform.get_devices()
            except cl.Error as exc:
                log.debug("platform %s: %s", platform.name, exc)
                continue
            for dev in devices:
                dtype = dev.type
                if dtype & cl.device_type.GPU:
                    kind = "gpu"
                elif dtype & cl.device_type.CPU:
                    kind = "cpu"
                else:
                    kind = "accelerator"
                info = DeviceInfo(
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
                    driver_version=str(dev.driver_version),
                )
                found.append((info, dev))
        if not found and not self.reason:
            self.reason = "OpenCL platforms exist but expose no device"
        self._devices = found
        return found

    def devices(self) -> list[DeviceInfo]:
        return [info for info, _ in self._scan()]

    def open(self, index: int, profiling: bool = False) -> Context:
        devs = self._scan()
        if not 0 <= index < len(devs):
            raise BackendError(
                f"OpenCL device index {index} out of range: {len(devs)} device(s) found"
            )
        info, dev = devs[index]
        return CLContext(info, dev, profiling)
