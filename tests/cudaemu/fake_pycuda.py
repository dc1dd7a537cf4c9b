"""A stand-in for PyCUDA (``pycuda``, ``pycuda.driver``, ``pycuda.compiler``) for the tests.

Put into ``sys.modules``, it lets ``sapporo/backend/cuda.py`` run without PyCUDA or a GPU.
It can fail ``cuInit``, report no device, fail builds, or report one device "Fake GPU"
(sm_90, 132 multiprocessors, 48 KiB shared memory per block) whose device memory is host
memory. With ``execute=False`` builds and launches are only recorded (``state["builds"]``,
``state["launches"]``); with ``execute=True`` ``compile`` compiles the source for the
CPU emulation (:mod:`cudaemu`) and every launch runs the kernel there.

It follows PyCUDA's API as sapporo uses it, and checks what PyCUDA or the driver would
refuse or what would be undefined on a GPU: operations without a current context, pops
without pushes, timing on events created without timing, argument letters that do not
match the kernel's parameters (PyCUDA would pack them silently, wrongly), and writes
outside an allocation (each allocation sits between 256-byte guard zones, checked after
every launch). New allocations are filled with 0xff bytes (NaN, -1), as ``cudaMalloc``
gives no zeros either.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any

import numpy as np

GUARD = 256
_GUARD_BYTE = 0xA5
_LAUNCH_LOCK = threading.Lock()


class FakeCompileError(Exception):
    """Shaped like ``pycuda.driver.CompileError``: message, command line, stdout, stderr."""

    def __init__(self, msg: str, command_line: list[str], stdout: str = "", stderr: str = ""):
        super().__init__(msg)
        self.command_line, self.stdout, self.stderr = command_line, stdout, stderr


def make_fake_pycuda(
    *,
    init_error: str | None = None,
    count: int = 1,
    compile_error: str | None = None,
    execute: bool = False,
    poison: bool = True,
) -> dict[str, types.ModuleType]:
    """The three modules of the stand-in, to be put into ``sys.modules``.

    ``poison=False``: new allocations are zeros instead of 0xff bytes (for measuring the
    host-side cost of calls with ``execute=False``, whose results must then be finite).
    ``state["calls"]`` counts the driver operations by name (push, pop, record, sync,
    htod, dtoh, memset, launch, pinned).
    """
    drv = types.ModuleType("pycuda.driver")
    calls: Counter[str] = Counter()
    state: dict[str, Any] = {"depth": 0, "memory": {}, "launches": deque(maxlen=1000),
                             "builds": deque(maxlen=1000), "detached": 0,
                             "schedule": (0, 1), "calls": calls}
    drv.state = state

    class Error(Exception):
        pass

    class LogicError(Error):
        pass

    class LaunchError(Error):
        pass

    drv.Error, drv.LogicError, drv.LaunchError = Error, LogicError, LaunchError
    drv.CompileError = FakeCompileError

    def current() -> None:
        if state["depth"] <= 0:
            raise LogicError("no current context")

    def init(flags: int = 0) -> None:
        if init_error:
            raise Error(init_error)

    drv.init = init
    drv.get_version = lambda: (13, 0, 0)
    drv.get_driver_version = lambda: 13000
    drv.device_attribute = types.SimpleNamespace(
        MULTIPROCESSOR_COUNT="sm", MAX_THREADS_PER_BLOCK="tpb", MAX_SHARED_MEMORY_PER_BLOCK="smem"
    )
    drv.event_flags = types.SimpleNamespace(DISABLE_TIMING=2)

    # execute=True: the emulated driver library (fake_libcuda.c) holds the contexts made
    # current, as libcuda does under PyCUDA, for C code that calls the driver itself
    driver = None
    if execute:
        from . import driver_library

        driver = driver_library()

    class Ctx:
        @property
        def handle(self) -> int:
            return id(self)

        def push(self) -> None:
            calls["push"] += 1
            state["depth"] += 1
            if driver is not None:
                driver.cuCtxPushCurrent_v2(self.handle)

        @staticmethod
        def pop() -> None:
            calls["pop"] += 1
            if state["depth"] <= 0:
                raise LogicError("context pop without push")
            state["depth"] -= 1
            if driver is not None:
                driver.cuCtxPopCurrent_v2(None)

        def detach(self) -> None:
            state["detached"] += 1

    class Device:
        def __init__(self, index: int):
            if not 0 <= index < count:
                raise LogicError("invalid device ordinal")
            self.index = index

        @staticmethod
        def count() -> int:
            return count

        def name(self) -> str:
            return "Fake GPU"

        def compute_capability(self) -> tuple[int, int]:
            return (9, 0)

        def total_memory(self) -> int:
            return 80 << 30

        def get_attribute(self, attr: str) -> int:
            return {"sm": 132, "tpb": 1024, "smem": 49152}[attr]

        def make_context(self, flags: int = 0) -> Ctx:
            ctx = Ctx()
            state["depth"] += 1
            if driver is not None:
                driver.cuCtxPushCurrent_v2(ctx.handle)
            return ctx

    drv.Device, drv.Context = Device, Ctx

    class Stream:
        @property
        def handle(self) -> int:
            return id(self)

        def synchronize(self) -> None:
            calls["sync"] += 1

    class Event:
        def __init__(self, flags: int = 0):
            self.flags = flags

        def record(self, stream: Any = None) -> Event:
            current()
            calls["record"] += 1
            return self

        def synchronize(self) -> Event:
            calls["sync"] += 1
            return self

        def query(self) -> bool:
            return True

        def time_since(self, other: Event) -> float:
            if self.flags or other.flags:
                raise LogicError("cuEventElapsedTime: event created without timing")
            return 1.5  # milliseconds

    drv.Stream, drv.Event = Stream, Event

    class Alloc:
        """Host memory between two guard zones; ``int()`` is the address of the first byte."""

        def __init__(self, nbytes: int):
            self.nbytes = nbytes
            self.block = np.full(nbytes + 2 * GUARD, 0xFF if poison else 0, np.uint8)
            self.block[:GUARD] = _GUARD_BYTE
            self.block[GUARD + nbytes:] = _GUARD_BYTE
            self.addr = self.block.ctypes.data + GUARD
            state["memory"][self.addr] = self

        def __int__(self) -> int:
            return self.addr

        def view(self) -> np.ndarray:
            return self.block[GUARD:GUARD + self.nbytes]

        def guards_intact(self) -> bool:
            return bool((self.block[:GUARD] == _GUARD_BYTE).all()
                        and (self.block[GUARD + self.nbytes:] == _GUARD_BYTE).all())

        def free(self) -> None:
            if state["memory"].pop(self.addr, None) is None:
                raise LogicError("cuMemFree: memory freed twice")

    def locate(ptr: int, n: int) -> np.ndarray:
        for base, mem in state["memory"].items():
            if base <= ptr and ptr + n <= base + mem.nbytes:
                return mem.view()[ptr - base:ptr - base + n]
        raise LogicError(f"invalid device pointer {ptr:#x} (+{n} bytes)")

    def mem_alloc(nbytes: int) -> Alloc:
        current()
        return Alloc(nbytes)

    def host_bytes(a: np.ndarray) -> np.ndarray:
        if not a.flags.c_contiguous:
            raise LogicError("host array is not contiguous")
        return a.reshape(-1).view(np.uint8)

    def memcpy_htod_async(dest: Any, src: np.ndarray, stream: Any = None) -> None:
        current()
        calls["htod"] += 1
        locate(int(dest), src.nbytes)[:] = host_bytes(src)

    def memcpy_dtoh_async(dest: np.ndarray, src: Any, stream: Any = None) -> None:
        current()
        calls["dtoh"] += 1
        host_bytes(dest)[:] = locate(int(src), dest.nbytes)

    def memset_d32_async(dest: Any, value: int, words: int, stream: Any = None) -> None:
        current()
        calls["memset"] += 1
        locate(int(dest), 4 * words).view(np.uint32)[:] = value

    def pagelocked_empty(shape: Any, dtype: Any) -> np.ndarray:
        current()
        calls["pinned"] += 1
        return np.empty(shape, dtype)

    drv.mem_alloc, drv.pagelocked_empty = mem_alloc, pagelocked_empty
    drv.memcpy_htod_async, drv.memcpy_dtoh_async = memcpy_htod_async, memcpy_dtoh_async
    drv.memset_d32_async = memset_d32_async

    class Function:
        def __init__(self, name: str, kernel: Any = None, module: Any = None):
            self.name, self.arg_format = name, None
            self._kernel, self._module = kernel, module

        def prepare(self, arg_types: str) -> Function:
            self.arg_format = "".join(arg_types)
            return self

        def prepared_async_call(self, grid: tuple, block: tuple, stream: Any, *args: Any) -> None:
            current()
            assert isinstance(block, tuple) and isinstance(grid, tuple) and stream is not None
            if self.arg_format is None or len(args) != len(self.arg_format):
                raise LogicError(f"{self.name}: prepared for {self.arg_format!r}, "
                                 f"called with {len(args)} arguments")
            calls["launch"] += 1
            state["launches"].append((self.name, self.arg_format, args, block, grid))
            if self._kernel is None:
                return
            from . import EmulatorError

            for c, a in zip(self.arg_format, args, strict=True):
                if c == "P" and int(a) != 0:
                    locate(int(a), 1)  # a pointer into some allocation
            try:
                with _LAUNCH_LOCK:  # this launch's schedule with it (the module runs one
                    # launch at a time itself: its shared memory is the library's)
                    self._module.set_schedule(*state["schedule"])
                    self._kernel(grid, block, self.arg_format, args)
            except EmulatorError as exc:
                raise LaunchError(f"cuLaunchKernel ({self.name}): {exc}") from None
            for mem in state["memory"].values():
                if not mem.guards_intact():
                    raise LaunchError(f"kernel {self.name} wrote outside an allocation of "
                                      f"{mem.nbytes} bytes (an illegal address on a GPU)")

    modules: dict[bytes, Any] = {}  # the "cubins" compile() made: the emulation's modules

    def compile(source: str, nvcc: str = "nvcc", options: list[str] | None = None,
                keep: bool = False, no_extern_c: bool = False, arch: str | None = None,
                code: str | None = None, cache_dir: Any = None,
                include_dirs: list[str] | None = None, target: str = "cubin") -> bytes:
        """PyCUDA's compile: the "cubin" is the text cuemu:<path of the emulation's module>
        (which the emulated driver loads), or cuemu:none without execution."""
        state["builds"].append((source, list(options or []), arch, no_extern_c))
        if compile_error:
            raise FakeCompileError("nvcc compilation of kernel.cu failed",
                                   ["nvcc", "--cubin"], stderr=compile_error)
        module = None
        if execute:
            from . import EmulatorError, compile_module

            try:
                module = compile_module(source, options or [], include_dirs or [])
            except EmulatorError as exc:
                raise FakeCompileError(str(exc), ["c++"], stderr=exc.log) from None
        image = b"cuemu:" + (str(module.path).encode() if module is not None else b"none") + b"\0"
        modules[image] = module
        return image

    class Module:
        def __init__(self, module: Any):
            self._module = module

        def get_function(self, name: str) -> Function:
            known = (self._module.kernels if self._module is not None
                     else ("scatter_j", "predict", "force", "reduce"))
            if name not in known:
                raise LogicError(f"cuModuleGetFunction failed: named symbol not found ({name})")
            if self._module is None:
                return Function(name)
            return Function(name, self._module.kernels[name], self._module)

    def module_from_buffer(image: bytes, options: Any = None, message_handler: Any = None
                           ) -> Module:
        current()
        if image not in modules:
            raise LogicError("cuModuleLoadData failed: device kernel image is invalid")
        return Module(modules[image])

    drv.module_from_buffer = module_from_buffer
    compiler = types.ModuleType("pycuda.compiler")
    compiler.compile = compile
    pkg = types.ModuleType("pycuda")
    pkg.__path__ = []  # a package, so that "import pycuda.driver" is allowed
    pkg.driver, pkg.compiler = drv, compiler
    return {"pycuda": pkg, "pycuda.driver": drv, "pycuda.compiler": compiler}


_EMULATED: dict[str, Any] = {}  # one emulated PyCUDA (and its backend) per process


@contextlib.contextmanager
def emulated_cuda() -> Iterator[types.ModuleType]:
    """Within the block, backend ``cuda`` is the fake PyCUDA running the CPU emulation.

    There is one such PyCUDA per process, as there is one real one: contexts and libraries
    made in one block keep working in the next. Entering puts it into ``sys.modules`` and
    its backend into the backend cache; leaving restores both and ``SAPPORO_BACKEND``.
    Yields the fake ``pycuda.driver`` (``state`` records builds and launches;
    ``state["schedule"] = (mode, seed)`` sets the fiber schedule of later launches).
    """
    import pytest

    import sapporo.backend as backend_mod

    from . import available

    ok, why = available()
    if not ok:
        pytest.skip(why)
    if "modules" not in _EMULATED:
        _EMULATED["modules"] = make_fake_pycuda(execute=True)
    modules = _EMULATED["modules"]
    with pytest.MonkeyPatch.context() as mp:
        saved = dict(backend_mod._cache)
        backend_mod._cache.clear()
        if "backend" in _EMULATED:
            backend_mod._cache["cuda"] = _EMULATED["backend"]
        mp.delenv("SAPPORO_BACKEND", raising=False)
        for name, module in modules.items():
            mp.setitem(sys.modules, name, module)
        try:
            yield modules["pycuda.driver"]
        finally:
            made = backend_mod._cache.get("cuda")
            if made is not None and not isinstance(made, str):
                _EMULATED["backend"] = made
            backend_mod._cache.clear()
            backend_mod._cache.update(saved)


@contextlib.contextmanager
def scheduled(mode: int, seed: int = 1) -> Iterator[None]:
    """Within ``emulated_cuda()``: every launch of the block runs its threads and blocks in
    schedule ``mode`` (FORWARD, REVERSE, or SHUFFLED with ``seed``), the fake PyCUDA's and
    those the native engine makes through the emulated driver (which runs the same
    modules); forward again after."""
    from . import _LOADED, FORWARD

    state = _EMULATED["modules"]["pycuda.driver"].state

    def apply(m: int, s: int) -> None:
        state["schedule"] = (m, s)
        for module in _LOADED:
            module.set_schedule(m, s)

    apply(mode, seed)
    try:
        yield
    finally:
        apply(FORWARD, 1)
