"""The backend interface: devices, buffers, programs and kernels.

Kept deliberately small: only what the force library uses. Two implementations exist,
:mod:`sapporo.backend.opencl` (PyOpenCL) and :mod:`sapporo.backend.cuda` (PyCUDA).
Global and local sizes are given OpenCL-style (total work-items per dimension and work-group
size); the CUDA backend converts them to grid and block dimensions.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from sapporo.errors import BackendError


@dataclass(frozen=True)
class DeviceInfo:
    """What the library needs to know about one compute device."""

    backend: str
    index: int
    name: str
    vendor: str
    platform: str
    device_type: str  # "cpu", "gpu" or "accelerator"
    compute_units: int
    max_work_group_size: int
    local_mem_size: int
    global_mem_size: int
    double_support: bool
    driver_version: str
    companion: str = ""  # device that takes small launches (PoCL's single-threaded one)
    twin: str = ""  # a second one, which takes half of a small launch (Context.twin)
    #: 64-bit integer atomics (OpenCL's cl_khr_int64_base_atomics; every CUDA device), which
    #: the particle-mesh solver's mass assignment needs
    int64_atomics: bool = True
    #: the largest single buffer the device allocates (OpenCL's CL_DEVICE_MAX_MEM_ALLOC_SIZE,
    #: often a quarter of its memory; 0: no limit but the memory itself, as on CUDA)
    max_alloc_size: int = 0
    #: floats per vector register of the code the device's compiler makes (OpenCL's preferred
    #: float vector width: 16 where PoCL targets AVX-512, 8 with AVX2; 1 on GPUs)
    float_lanes: int = 1

    @property
    def key(self) -> str:
        """A stable key for tuning profiles: backend and device name."""
        return f"{self.backend}:{self.name.strip()}"

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dictionary."""
        return dict(self.__dict__)


class Event(ABC):
    """Completion of an asynchronous operation."""

    @abstractmethod
    def wait(self) -> None:
        """Block until the operation has finished."""

    @property
    @abstractmethod
    def elapsed(self) -> float | None:
        """Device time of the operation in seconds, when profiling was asked for."""


class Buffer(ABC):
    """A block of device memory."""

    nbytes: int

    @abstractmethod
    def upload(self, host: np.ndarray, offset: int = 0, wait: bool = True) -> Event:
        """Copy a contiguous host array to the buffer at byte ``offset``."""

    @abstractmethod
    def download(self, host: np.ndarray, offset: int = 0, wait: bool = True) -> Event:
        """Copy ``host.nbytes`` bytes from byte ``offset`` of the buffer into ``host``."""

    @abstractmethod
    def fill(self, value: int = 0) -> Event:
        """Set every 32-bit word of the buffer to ``value``."""

    @abstractmethod
    def free(self) -> None:
        """Release the memory (idempotent)."""

    def native(self) -> int | None:
        """The runtime's handle of the memory, for C code that queues copies itself (see
        :meth:`Context.native_entry_points`), or None where the backend has none."""
        return None

    def check_transfer(self, host: np.ndarray, offset: int) -> None:
        """Raise :class:`BackendError` unless ``host`` is contiguous and fits at ``offset``."""
        if not host.flags.c_contiguous:
            raise BackendError("host array must be C-contiguous")
        if offset < 0 or offset + host.nbytes > self.nbytes:
            raise BackendError(f"transfer of {host.nbytes} bytes at offset {offset} exceeds "
                               f"buffer of {self.nbytes} bytes")


class Kernel(ABC):
    """A compiled kernel, launched as ``kernel(global_size, local_size, *args)``."""

    name: str

    @abstractmethod
    def __call__(self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
                 *args: Any, wait: bool = False) -> Event:
        """Launch over a 1-D or 2-D range; ``args`` are :class:`Buffer` or numpy scalars."""

    def prepare(
        self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None, *args: Any
    ) -> Launch:
        """A launch of this kernel with these sizes and arguments, for the native engine to
        queue (:meth:`Launch.native`): backends check the sizes and pack the arguments
        here."""
        return Launch(self, global_size, local_size, args)


@dataclass(frozen=True)
class NativeLaunch:
    """A prepared launch as C code can queue it itself (the C API's direct path): the
    runtime's handles and every argument as (size in bytes, value): the value is the 64-bit
    word whose first ``size`` bytes in memory are the argument (a buffer handle, a scalar);
    an empty ``local_size`` lets the runtime choose."""

    queue: int
    kernel: int
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]
    args: tuple[tuple[int, int], ...]


class Launch:
    """A prepared kernel launch, which the native engine queues (:meth:`native`)."""

    def __init__(self, kernel: Kernel, global_size: tuple[int, ...],
                 local_size: tuple[int, ...] | None, args: tuple[Any, ...]):
        self.kernel = kernel
        self.global_size, self.local_size = global_size, local_size
        self.args = list(args)

    def native(self) -> NativeLaunch | None:
        """This launch for C callers, or None where the backend has no such form. A C
        caller sets the kernel's arguments itself (a kernel called from Python sets them
        all again)."""
        return None


class Program(ABC):
    """A compiled kernel source."""

    @abstractmethod
    def kernel(self, name: str) -> Kernel:
        """The kernel called ``name``."""


class HostBuffer:
    """A host array paired with device memory, for data that crosses every call.

    Where the device works on host memory (CPU devices), the pair is one block of memory
    and :meth:`to_device` / :meth:`from_device` do nothing: no copy command is queued.
    Elsewhere they queue asynchronous copies. Either way the host array may be read only
    after the queue has finished, and written only while no queued command uses it.
    """

    def __init__(self, buffer: Buffer, array: np.ndarray, zero_copy: bool):
        self.buffer = buffer
        self.array = array  # uint8, nbytes long
        self.zero_copy = zero_copy
        self.nbytes = buffer.nbytes

    def view(self, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """The leading bytes of the host array as an array of ``dtype`` and ``shape``."""
        n = math.prod(shape) * np.dtype(dtype).itemsize
        return self.array[:n].view(dtype).reshape(shape)

    def to_device(self, nbytes: int | None = None) -> None:
        """Make the first ``nbytes`` (default all) visible to the device."""
        if not self.zero_copy:
            self.buffer.upload(self.array[: self.nbytes if nbytes is None else nbytes],
                               wait=False)

    def from_device(self, nbytes: int | None = None) -> None:
        """Bring the first ``nbytes`` (default all) back once the queue finishes."""
        if not self.zero_copy:
            self.buffer.download(self.array[: self.nbytes if nbytes is None else nbytes],
                                 wait=False)

    def free(self) -> None:
        """Release the device side."""
        self.buffer.free()


class Context(ABC):
    """One open device with its queue/stream.

    ``small_pairs``: launches with at most this many i x j pairs may go to a companion device
    sharing this device's memory (programs built with ``small=True``); 0 where there is none.
    """

    small_pairs: int = 0
    #: the companion has a twin: a second device on the same memory on which the native
    #: engine runs half of a small launch's j-range from a thread of its own (programs built
    #: with ``twin=True``; their kernels are the engine's alone: never called from Python)
    twin: bool = False
    #: a compiled kernel of this runtime must not run at once from two contexts of one
    #: process: PoCL's CPU drivers (3.1 to at least 5.0) abort
    #: (``pocl_release_dlhandle_cache: Assertion `found->ref_count > 0'``) when two threads
    #: first run one kernel at once, as the GRAPE-5 calls of a threaded tree code do on a
    #: fresh kernel cache. Contexts opened as different instances (:meth:`Backend.open`)
    #: have kernels of their own and may run at once.
    one_kernel_at_a_time: bool = False
    #: runtime commands queued so far (kernel launches, copies, fills): the latency budget
    #: counts them per block step
    commands: int = 0

    info: DeviceInfo

    @abstractmethod
    def alloc(self, nbytes: int) -> Buffer:
        """Allocate ``nbytes`` bytes (at least 1) of device memory."""

    def alloc_host(self, nbytes: int) -> HostBuffer:
        """A :class:`HostBuffer` of ``nbytes`` bytes (copying version; backends override)."""
        return HostBuffer(self.alloc(nbytes), np.empty(max(int(nbytes), 4), np.uint8), False)

    @abstractmethod
    def build(self, source_name: str, defines: dict[str, Any] | None = None,
              small: bool = False, twin: bool = False) -> Program:
        """Build a kernel file of this backend's kernel tree with compile-time definitions.

        ``small=True``: for the companion device of small launches (see ``small_pairs``);
        only meaningful where ``small_pairs > 0``. ``twin=True``: for the companion's twin
        (see ``twin``); only meaningful where it is True."""

    @abstractmethod
    def finish(self) -> None:
        """Wait for all queued work."""

    def native_entry_points(self) -> dict[str, int] | None:
        """Addresses of the runtime functions a C caller needs to queue
        :meth:`Launch.native` launches and copies itself (``set_arg``, ``enqueue``,
        ``flush``, ``finish``, ``event_info``, ``release``, ``write``, ``read``), or None
        where the backend has none."""
        return None

    def native_queue(self) -> int | None:
        """The runtime's handle of the main queue (see :meth:`native_entry_points`)."""
        return None

    def native_context(self) -> int | None:
        """The runtime's handle of the context a C caller makes current around its calls,
        where the runtime has such a thing (CUDA), else None."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Release the device (idempotent)."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend's kernel tree offers, declared by the backend itself."""

    kernel_ext: str  #: file extension of its kernel files (``force.<ext>``)
    widths: tuple[int, ...]  #: i-particles per work-item (``W``) of its force kernel
    jv: bool  #: whether its force kernel has the j-vector variant (lanes over j)


class Backend(ABC):
    """A compute API (OpenCL or CUDA); ``capabilities`` says what its kernels offer."""

    name: str
    capabilities: Capabilities

    @abstractmethod
    def devices(self) -> list[DeviceInfo]:
        """Every device this backend sees (empty when none)."""

    @abstractmethod
    def open(self, index: int, profiling: bool = False, instance: int = 0,
             twin: bool = True) -> Context:
        """Open device ``index`` of :meth:`devices`. ``instance``: contexts of different
        instances never share a compiled kernel, so that they can compute at the same time
        from several threads where the runtime needs that
        (:attr:`Context.one_kernel_at_a_time`). ``twin``: the companion's twin where there
        is one (:attr:`Context.twin`)."""


# ---------------------------------------------------------------------------------------------
# Helpers shared by the implementations


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS says it, else all)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def kernel_dir(language: str) -> Path:
    """Folder of the kernel tree for ``language`` (``"opencl"`` or ``"cuda"``)."""
    with contextlib.suppress(ModuleNotFoundError):
        path = Path(str(resources.files(f"sapporo.kernels_{language}")))
        if path.is_dir():
            return path
    # Running from a source checkout without installation.
    path = Path(__file__).resolve().parents[2] / f"kernels_{language}"
    if not path.is_dir():
        raise BackendError(f"kernel folder kernels_{language}/ not found (looked in {path})")
    return path


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)


def shared_include_dir() -> Path:
    """Folder of the headers both kernel trees include (``layout.h``: the host/kernel data
    layout, which :mod:`sapporo.core.layout` reads too; ``pm_window.h``: the particle-mesh
    kernels' variants and assignment window)."""
    return Path(__file__).resolve().parents[1]


def load_source(language: str, name: str) -> str:
    """Read a kernel file with its local ``#include "..."`` files inlined (once each).

    An include is looked up in the language's kernel tree, then among the shared headers
    (:func:`shared_include_dir`). Inlining makes the source self-contained, so driver-side
    caches that key on the source text (PoCL, NVIDIA) never reuse a binary built from a
    stale header.
    """
    root = kernel_dir(language)
    shared = shared_include_dir()
    seen: set[str] = set()

    def expand(fname: str) -> str:
        path = root / fname
        if not path.is_file() and (shared / fname).is_file():
            path = shared / fname
        if not path.is_file():
            raise BackendError(f"kernel source {fname!r} not found in {root} or {shared}")
        text = path.read_text()

        def repl(m: re.Match[str]) -> str:
            inc = m.group(1)
            if inc in seen:
                return f"/* {inc} already included */"
            seen.add(inc)
            return f"/* begin {inc} */\n{expand(inc)}\n/* end {inc} */"

        return _INCLUDE.sub(repl, text)

    return expand(name)


def format_defines(defines: dict[str, Any] | None) -> list[str]:
    """Turn ``{"ORDER": 4, "NGB": True}`` into ``["-DORDER=4", "-DNGB=1"]`` (sorted)."""
    out = []
    for key, value in sorted((defines or {}).items()):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise BackendError(f"invalid macro name {key!r}")
        if isinstance(value, bool):
            value = int(value)
        out.append(f"-D{key}={value}")
    return out


def save_failed_source(source: str, suffix: str) -> str | None:
    """Save a source that failed to build, for the error message; returns the path."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    try:
        fd, path = tempfile.mkstemp(prefix=f"sapporo-failed-{digest}-", suffix=suffix)
        with os.fdopen(fd, "w") as fh:
            fh.write(source)
        return path
    except OSError:
        return None
