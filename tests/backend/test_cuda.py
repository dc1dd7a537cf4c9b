"""The PyCUDA backend: selection and error paths, and the CUDA kernels against the reference.

Without a GPU a fake ``pycuda`` package (``tests/cudaemu/fake_pycuda.py``, placed in
``sys.modules``) stands in for PyCUDA: it raises on ``init``, reports no device, or reports
one device whose memory is host memory, so that selection, error messages, transfers,
staging, launch-size conversion and build failures are all exercised.

The kernel tests run ``kernels_cuda/`` through the backend and compare with
:func:`sapporo.reference.forces`, twice: on a real GPU (marked ``gpu``; they skip with a
reason when no CUDA GPU and PyCUDA are usable) and on the CPU emulation of CUDA
(``tests/cudaemu``: fibers for threads, checked barriers and shuffles, poisoned shared and
device memory), which runs wherever a C++ compiler is. On the emulation the results must
also be bitwise the same under other thread schedules. Tolerances: the error metric
``|result - reference| / sum_j |term_j|`` below 1e-12 (double) and 1e-5 (double-single).
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import cudaemu
import numpy as np
import pytest
from cudaemu.fake_pycuda import emulated_cuda, make_fake_pycuda

import sapporo.backend as backend_mod
from sapporo import reference
from sapporo.core import layout
from sapporo.core.layout import LAYOUT
from sapporo.errors import BackendError, BuildError


@pytest.fixture
def clean_selection(monkeypatch: pytest.MonkeyPatch):
    """An empty backend cache and no SAPPORO_BACKEND; the cache is restored afterwards."""
    saved = dict(backend_mod._cache)
    backend_mod._cache.clear()
    monkeypatch.delenv("SAPPORO_BACKEND", raising=False)
    yield monkeypatch
    backend_mod._cache.clear()
    backend_mod._cache.update(saved)


def install_fake(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> types.ModuleType:
    """Put a fake PyCUDA into ``sys.modules``; returns its driver module."""
    modules = make_fake_pycuda(**kwargs)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return modules["pycuda.driver"]


def hide_pycuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import pycuda`` fail as on a machine without it."""
    for name in ("pycuda", "pycuda.driver", "pycuda.compiler"):
        monkeypatch.setitem(sys.modules, name, None)


def opencl_usable() -> bool:
    try:
        return bool(backend_mod._load("opencl").devices())
    except BackendError:
        return False


# --------------------------------------------------------------------------- selection


def test_backend_package_never_imports_pycuda() -> None:
    code = (
        "import sys, sapporo, sapporo.backend\n"
        "from sapporo.backend import base, quirks\n"
        "assert 'pycuda' not in sys.modules, 'pycuda imported'\n"
        "assert 'sapporo.backend.cuda' not in sys.modules, 'cuda backend imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_pycuda_missing_explicit(clean_selection: pytest.MonkeyPatch) -> None:
    hide_pycuda(clean_selection)
    with pytest.raises(BackendError) as err:
        backend_mod.get_backend("cuda")
    msg = str(err.value)
    assert "backend 'cuda' is unusable" in msg
    assert "PyCUDA is not importable" in msg
    assert "pip install pycuda" in msg and ".[cuda]" in msg


def test_pycuda_missing_environment(clean_selection: pytest.MonkeyPatch) -> None:
    hide_pycuda(clean_selection)
    clean_selection.setenv("SAPPORO_BACKEND", "cuda")
    with pytest.raises(BackendError, match="PyCUDA is not importable"):
        backend_mod.get_backend()


def test_driver_library_missing_is_said(clean_selection: pytest.MonkeyPatch) -> None:
    """PyCUDA installed on a machine without the NVIDIA driver: its import fails on
    libcuda.so.1 (the real message); the reason names the driver, not an install hint."""

    class NoDriver:
        def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
            if name == "pycuda.driver":
                raise ImportError("libcuda.so.1: cannot open shared object file: No such "
                                  "file or directory")

    pkg = types.ModuleType("pycuda")
    pkg.__path__ = []
    clean_selection.setitem(sys.modules, "pycuda", pkg)
    clean_selection.delitem(sys.modules, "pycuda.driver", raising=False)
    clean_selection.setattr(sys, "meta_path", [NoDriver(), *sys.meta_path])
    with pytest.raises(BackendError) as err:
        backend_mod.get_backend("cuda")
    msg = str(err.value)
    assert "cannot load the NVIDIA driver library" in msg and "libcuda.so.1" in msg
    assert "PyCUDA is not importable" not in msg


def test_pycuda_missing_reason_recorded(clean_selection: pytest.MonkeyPatch) -> None:
    hide_pycuda(clean_selection)
    status = {s.name: s for s in backend_mod.probe_backends()}
    assert status["cuda"].backend is None and not status["cuda"].devices
    assert "PyCUDA is not importable" in status["cuda"].reason


def test_init_failure_falls_back_to_opencl(clean_selection: pytest.MonkeyPatch) -> None:
    install_fake(clean_selection, init_error="cuInit failed: no CUDA-capable device is detected")
    status = {s.name: s for s in backend_mod.probe_backends()}
    assert status["cuda"].devices == []
    assert "CUDA driver initialisation failed" in status["cuda"].reason
    assert "no CUDA-capable device" in status["cuda"].reason
    if not opencl_usable():
        pytest.skip("no OpenCL device here to fall back to")
    assert backend_mod.get_backend().name == "opencl"


def test_no_device(clean_selection: pytest.MonkeyPatch) -> None:
    install_fake(clean_selection, count=0)
    with pytest.raises(BackendError) as err:
        backend_mod.get_backend("cuda")
    msg = str(err.value)
    assert "backend 'cuda' has no usable device" in msg
    assert "the CUDA driver reports no device" in msg
    assert "pip install" in msg
    if opencl_usable():
        assert backend_mod.get_backend().name == "opencl"


def test_nothing_usable_lists_what_was_tried(clean_selection: pytest.MonkeyPatch) -> None:
    install_fake(clean_selection, count=0)
    backend_mod._cache["opencl"] = "PyOpenCL is not importable: test"
    with pytest.raises(BackendError) as err:
        backend_mod.get_backend()
    msg = str(err.value)
    assert "cuda: the CUDA driver reports no device" in msg
    assert "opencl: PyOpenCL is not importable" in msg
    assert "pocl" in msg.lower()


def test_automatic_selection_prefers_cuda(clean_selection: pytest.MonkeyPatch) -> None:
    install_fake(clean_selection)
    chosen = backend_mod.get_backend()
    assert chosen.name == "cuda"
    (info,) = chosen.devices()
    assert info.backend == "cuda" and info.index == 0 and info.device_type == "gpu"
    assert info.name == "Fake GPU" and info.compute_units == 132
    assert info.max_work_group_size == 1024 and info.local_mem_size == 49152
    assert info.driver_version.endswith("(sm_90)") and info.platform == "CUDA 13.0.0"
    assert info.key == "cuda:Fake GPU"


def test_environment_selects_cuda(clean_selection: pytest.MonkeyPatch) -> None:
    install_fake(clean_selection)
    clean_selection.setenv("SAPPORO_BACKEND", "cuda")
    assert backend_mod.get_backend().name == "cuda"


def test_environment_selects_opencl_over_cuda(clean_selection: pytest.MonkeyPatch) -> None:
    install_fake(clean_selection)
    clean_selection.setenv("SAPPORO_BACKEND", "opencl")
    if not opencl_usable():
        pytest.skip("no OpenCL device here")
    assert backend_mod.get_backend().name == "opencl"


def test_device_index_out_of_range(clean_selection: pytest.MonkeyPatch) -> None:
    install_fake(clean_selection)
    cuda = backend_mod.get_backend("cuda")
    with pytest.raises(BackendError, match=r"CUDA device index 3 out of range: 1 device\(s\)"):
        cuda.open(3)


def test_context_creation_failure(clean_selection: pytest.MonkeyPatch) -> None:
    drv = install_fake(clean_selection)

    def busy(self: Any, flags: int = 0) -> Any:
        raise drv.Error("cuCtxCreate failed: all CUDA-capable devices are busy")

    clean_selection.setattr(drv.Device, "make_context", busy)
    with pytest.raises(BackendError, match="cannot open CUDA device 0 .*busy"):
        backend_mod.get_backend("cuda").open(0)


# --------------------------------------------------------------------------- fake device


@pytest.fixture
def fake_ctx(clean_selection: pytest.MonkeyPatch):
    drv = install_fake(clean_selection)
    ctx = backend_mod.get_backend("cuda").open(0, profiling=True)
    assert drv.state["depth"] == 0, "the context must not stay current"
    yield ctx, drv
    ctx.close()
    assert drv.state["depth"] == 0


def test_transfers_and_fill(fake_ctx: tuple[Any, Any]) -> None:
    ctx, drv = fake_ctx
    buf = ctx.alloc(64)
    data = np.arange(8, dtype=np.float64)
    buf.upload(data)
    out = np.zeros(4)
    buf.download(out, offset=16)
    np.testing.assert_array_equal(out, data[2:6])
    buf.fill(-1)
    words = np.zeros(16, np.int32)
    buf.download(words)
    assert (words == -1).all()
    with pytest.raises(BackendError, match="exceeds buffer"):
        buf.upload(np.zeros(9))
    with pytest.raises(BackendError, match="C-contiguous"):
        buf.download(np.zeros((4, 4))[:, 0])
    buf.free()
    buf.free()  # idempotent
    with pytest.raises(BackendError, match="freed"):
        buf.upload(data)
    assert drv.state["depth"] == 0


def test_download_is_complete_on_return(fake_ctx: tuple[Any, Any]) -> None:
    """A download into the caller's array is filled when it returns, wait=False too (a
    copy into pageable memory waits for the stream anyway)."""
    ctx, drv = fake_ctx
    buf = ctx.alloc(80)
    buf.upload(np.arange(10, dtype=np.float64))
    first, second = np.zeros(10), np.zeros((2, 2))
    buf.download(first, wait=False)
    np.testing.assert_array_equal(first, np.arange(10.0))
    buf.download(second, offset=8, wait=False).wait()
    np.testing.assert_array_equal(second, [[1.0, 2.0], [3.0, 4.0]])


def test_launch_sizes_and_arguments(fake_ctx: tuple[Any, Any]) -> None:
    ctx, drv = fake_ctx
    prog = ctx.build("force.cl", {"ORDER": 4, "PRECISION": 2, "LI": 8, "LJ": 4})
    source, options, arch, no_extern_c = drv.state["builds"][-1]
    assert '#include "' not in source and 'extern "C" __global__' in source
    assert arch == "sm_90" and no_extern_c
    assert "-DLI=8" in options and "-fmad=false" not in options
    assert ctx.build("force", {"ORDER": 4, "PRECISION": 2, "LI": 8, "LJ": 4}) is prog
    force = prog.kernel("force")
    buf = ctx.alloc(16)
    ev = force((64, 12), (8, 4), np.int32(5), 7, 0.5, np.float64(1e-4), buf)
    name, fmt, args, block, grid = drv.state["launches"][-1]
    assert name == "force" and block == (8, 4, 1) and grid == (8, 3, 1)
    assert fmt == "iiddP" and args[4] == int(buf.mem)
    assert ev.elapsed == pytest.approx(1.5e-3)
    prog.kernel("reduce")((100,), None, np.int32(1))
    assert drv.state["launches"][-1][1:] == ("i", (1,), (4, 1, 1), (25, 1, 1))
    with pytest.raises(BackendError, match="not a multiple"):
        force((65, 12), (8, 4))
    with pytest.raises(BackendError, match="exceeds the device limit"):
        force((2048,), (2048,))
    with pytest.raises(BackendError, match="unsupported type"):
        force((8,), (8,), np.int64(3))
    with pytest.raises(BackendError, match="not found"):
        prog.kernel("missing")
    assert drv.state["depth"] == 0


def test_prepared_launch(fake_ctx: tuple[Any, Any]) -> None:
    """A prepared launch is checked and packed once, for the native engine (its native form
    is tested on the emulated CUDA: tests/core/test_engine.py): a grid that is no multiple
    of the block is refused."""
    ctx, drv = fake_ctx
    force = ctx.build("force.cl", {"ORDER": 4, "PRECISION": 2, "LI": 8, "LJ": 4}).kernel("force")
    buf = ctx.alloc(16)
    launch = force.prepare((64, 12), (8, 4), np.int32(5), np.float64(0.5), buf)
    assert launch._fmt == "idP" and launch._grid == (8, 3, 1) and launch._block == (8, 4, 1)
    assert list(launch._values) == [5, 0.5, int(buf.mem)]
    with pytest.raises(BackendError, match="not a multiple"):
        force.prepare((65, 12), (8, 4), np.int32(5))
    assert drv.state["depth"] == 0


def test_active_makes_the_context_current_once(clean_selection: pytest.MonkeyPatch) -> None:
    """Within active() operations push nothing; another device's operations inside it push
    their own context and leave the held one current again."""
    drv = install_fake(clean_selection, count=2)
    be = backend_mod.get_backend("cuda")
    a, b = be.open(0), be.open(1)
    try:
        buf_a, buf_b = a.alloc(64), b.alloc(64)
        calls = drv.state["calls"]
        calls.clear()
        with a.active():
            buf_a.upload(np.zeros(8), wait=False)
            buf_b.upload(np.zeros(8), wait=False)  # device b: its own push and pop
            buf_a.fill(0)
            with a.active():  # nested: nothing more
                buf_a.upload(np.ones(8), wait=False)
            assert drv.state["depth"] == 1
        assert calls["push"] == 2 and calls["pop"] == 2 and drv.state["depth"] == 0
        assert calls["record"] == 0, "no events unless waited on or timed"
        out = np.zeros(8)
        buf_a.download(out)
        assert (out == 1.0).all()
    finally:
        a.close()
        b.close()
    assert drv.state["depth"] == 0


def test_host_buffers_are_page_locked(fake_ctx: tuple[Any, Any]) -> None:
    ctx, drv = fake_ctx
    pinned = drv.state["calls"]["pinned"]
    host = ctx.alloc_host(40)
    assert drv.state["calls"]["pinned"] == pinned + 1 and not host.zero_copy
    host.view(np.float64, (5,))[:] = np.arange(5.0)
    host.to_device()
    host.view(np.float64, (5,))[:] = 0.0
    host.from_device(24)
    ctx.finish()
    np.testing.assert_array_equal(host.view(np.float64, (5,)), [0.0, 1.0, 2.0, 0.0, 0.0])
    host.free()
    host.free()  # idempotent
    with pytest.raises(BackendError, match="freed"):
        host.to_device()


@pytest.mark.parametrize("update", [False, True], ids=["force", "step"])
def test_library_call_driver_operations(update: bool) -> None:
    """A force call on one active particle makes the fewest driver calls that do the job
    (what a call at N_active = 1 costs on a GPU is mostly these), counted by the emulated
    driver the engine calls: the i-particle upload, the force and reduce launches, one
    download of the combined result, one stream synchronization, no event. A block step
    (one j-particle updated, a new time) adds its record's and id's copies and the
    prediction."""
    import sapporo

    with emulated_cuda():
        drv = cudaemu.driver_library()
        if drv is None:
            pytest.skip("no C compiler for the emulated CUDA driver")
        n = 3000
        x, v, m = reference.plummer(n, seed=3)
        with sapporo.Library(order=4, backend="cuda") as lib:
            if lib._devs[0].ctx.native_entry_points() is None:
                pytest.skip("a real CUDA driver is loaded: the emulated contexts are not its")
            lib.set_j_particles(np.arange(n), np.arange(n), 0.0, m, x, v)
            lib.compute(x[:1], v[:1], np.array([0]), 1e-4)
            before = [drv.cuemu_driver_calls(k) for k in range(5)]
            if update:
                lib.set_j_particles(np.array([5]), np.array([5]), 0.01, m[5:6], x[5:6],
                                    v[5:6])
                lib.set_time(0.01)
            res = lib.compute(x[:1], v[:1], np.array([0]), 1e-4)
            assert res.acc.shape == (1, 3)
            launches, htod, dtoh, syncs, events = (drv.cuemu_driver_calls(k) - before[k]
                                                   for k in range(5))
            # 3000 j-particles on the emulated GPU: several parts, combined by the device
            assert launches == (3 if update else 2)  # (prediction,) force, reduce
            assert (htod, dtoh, syncs, events) == (3 if update else 1, 1, 1, 0)


def test_asynchronous_errors_become_backend_errors(fake_ctx: tuple[Any, Any]) -> None:
    ctx, drv = fake_ctx

    def fail(self: Any) -> None:
        raise drv.Error("cuStreamSynchronize failed: an illegal memory access was encountered")

    real = drv.Stream.synchronize
    drv.Stream.synchronize = fail
    try:
        with pytest.raises(BackendError, match="CUDA error on Fake GPU: .*illegal memory"):
            ctx.finish()
    finally:
        drv.Stream.synchronize = real
    assert drv.state["depth"] == 0


def test_build_failure_is_build_error(clean_selection: pytest.MonkeyPatch) -> None:
    install_fake(clean_selection, compile_error="force.cu(1): error: identifier undefined")
    ctx = backend_mod.get_backend("cuda").open(0)
    with pytest.raises(BuildError) as err:
        ctx.build("force.cu", {"ORDER": 4})
    exc = err.value
    assert "-DORDER=4" in exc.options and "-arch=sm_90" in exc.options
    assert "identifier undefined" in exc.log
    assert exc.source_path and open(exc.source_path).read().count("extern \"C\"") >= 2
    assert "source saved to" in str(exc) and "CUDA build of force.cu failed" in str(exc)
    ctx.close()
    ctx.close()  # idempotent
    with pytest.raises(BackendError, match="closed"):
        ctx.alloc(4)


# --------------------------------------------------------------------------- kernels
# On a real GPU (marked gpu) and on the CPU emulation (always, where a C++ compiler is).

@contextlib.contextmanager
def opened(backend: str, unusable: str, profiling: bool = False) -> Iterator[Any]:
    """Device 0 of ``backend``, closed afterwards; skip saying ``unusable`` when there is none."""
    try:
        be = backend_mod.get_backend(backend)
    except BackendError as exc:
        pytest.skip(f"{unusable}: {exc}")
    ctx = be.open(0, profiling=profiling)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture(scope="module", params=[pytest.param("gpu", marks=pytest.mark.gpu), "emulated"])
def cuda_context(request: pytest.FixtureRequest):
    """A CUDA context: on a real GPU, or on the CPU emulation of the kernels (cudaemu)."""
    with contextlib.ExitStack() as stack:
        if request.param == "emulated":
            stack.enter_context(emulated_cuda())
        yield stack.enter_context(opened("cuda", "no CUDA GPU/PyCUDA"))



def test_cuda_device_basics(cuda_context: Any) -> None:
    """Transfers, fill, 1-D and 2-D launches and build errors with kernels_cuda/selftest.cu."""
    ctx = cuda_context
    buf = ctx.alloc(80)
    data = np.arange(10, dtype=np.float64)
    buf.upload(data)
    part = np.zeros(3)
    buf.download(part, offset=16)
    np.testing.assert_array_equal(part, data[2:5])
    buf.fill(7)
    words = np.zeros(20, np.int32)
    buf.download(words)
    assert (words == 7).all()

    n = 1000  # not a multiple of the block: the kernel guards
    x = np.random.default_rng(0).normal(size=n)
    bx, by = ctx.alloc(x.nbytes), ctx.alloc(x.nbytes)
    bx.upload(x)
    for scale in (2, 5):
        prog = ctx.build("selftest.cu", {"SCALE": scale})
        prog.kernel("axpb")((1024,), (64,), np.int32(n), np.float64(0.5), bx, by, wait=True)
        y = np.empty(n)
        by.download(y, wait=False).wait()
        np.testing.assert_allclose(y, scale * x + 0.5, rtol=1e-15, atol=1e-15)
    assert ctx.build("selftest", {"SCALE": 5}) is prog

    nrows, ncols = 5, 7
    grid = ctx.alloc(nrows * ncols * 4)
    ctx.build("selftest.cu").kernel("grid2d")((8, 6), (4, 2), np.int32(nrows), np.int32(ncols),
                                             grid)
    out = np.zeros((nrows, ncols), dtype=np.int32)
    grid.download(out, wait=False)
    ctx.finish()
    r, c = np.mgrid[0:nrows, 0:ncols]
    np.testing.assert_array_equal(out, r * 1000 + c + 8 * 1000000)

    with pytest.raises(BuildError) as err:
        ctx.build("selftest.cu", {"BROKEN": 1})
    assert "selftest.cu" in str(err.value) and "-DBROKEN=1" in str(err.value)
    assert "error" in err.value.log.lower()
    assert open(err.value.source_path).read().count("this line is not CUDA C++")
    with pytest.raises(BackendError, match="nope"):
        ctx.build("selftest.cu").kernel("nope")
    for b in (buf, bx, by, grid):
        b.free()


@pytest.mark.gpu
def test_cuda_profiling_events() -> None:
    with opened("cuda", "no CUDA GPU/PyCUDA", profiling=True) as ctx:
        x, y = ctx.alloc(8 * 256), ctx.alloc(8 * 256)
        ev = ctx.build("selftest.cu").kernel("axpb")((256,), (128,), np.int32(256),
                                                     np.float64(1.0), x, y)
        assert ev.elapsed is not None and ev.elapsed >= 0


# the host/kernel data layout (sapporo/layout.h)
# (orders 2 to 6: six j-records and twelve result rows; order 8 has more)
RAW_N, NCO, REDUCE_LANES, REDUCE_ROWS = (LAYOUT[k] for k in ("RAW_N_LOW", "NCO_LOW",
                                                             "REDUCE_LANES", "REDUCE_ROWS"))
IC = {k: LAYOUT[f"IC_{k.upper()}"] for k in ("x", "y", "z", "h2", "vx", "vy", "vz", "id", "ax")}
OC_NNR2, OC_NNID = LAYOUT["OC_NNR2"], LAYOUT["OC_NNID"]

# (order, precision, ngb, LI, LJ, JT, USE_LOCAL[, W])


def variant_id(v: tuple[int, ...]) -> str:
    return "o{}p{}n{}-{}x{}-jt{}-l{}".format(*v[:7]) + (f"-w{v[7]}" if len(v) > 7 else "")
GPU_VARIANTS = [
    (2, 2, 0, 16, 1, 64, 1),
    (4, 2, 1, 8, 4, 64, 1),  # shuffle lanes
    (6, 2, 0, 2, 64, 128, 1),  # shuffles, then warps through shared memory
    (4, 1, 0, 32, 1, 64, 1),
    (6, 1, 1, 4, 3, 24, 1),  # lanes through shared memory only
    (4, 1, 1, 16, 2, 32, 0),  # tiles read from global memory
    (4, 2, 0, 5, 4, 40, 1),  # shuffles in a block of 20 threads: a partial warp
    (4, 1, 1, 16, 1, 64, 1, 2),  # two i-particles per thread (W = 2)
    (6, 2, 0, 8, 1, 32, 0, 4),  # four per thread, tiles from global memory
    (8, 2, 1, 8, 4, 64, 1),  # order 8: crackle, predicted jerks, pop and d5
    (8, 1, 0, 4, 3, 24, 1),  # order 8, double-single, lanes through shared memory
    (8, 1, 1, 16, 1, 64, 0, 2),  # order 8, two per thread, tiles from global memory
]


def check_prediction(bufs: dict[str, Any], n: int, order: int, precision: int,
                     want: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compare the predicted j-particles with the reference; return them as float64.

    In double precision the device's own predicted values are returned, so that the force
    reference sees exactly the positions the kernel used (nearest-neighbour r^2 can then be
    compared bitwise); in double-single the reference prediction is returned.
    """
    dtype = np.float32 if precision == 1 else np.float64
    got = {}
    for name in ("pos", "pos_lo", "vel", "acc", "jerk"):
        if ((name == "pos_lo" and precision == 2) or (name == "acc" and order < 6)
                or (name == "jerk" and order < 8)):
            continue
        host = np.empty((n, 4), np.float32 if name == "pos_lo" else dtype)
        bufs[name].download(host)
        got[name] = host.astype(np.float64)
    xs, vs, acc = want[:3]
    if order >= 8:  # predicted jerks: compared here, returned by run_forces' caller
        tol = (1e-6, 1e-7) if precision == 1 else (1e-13, 1e-14)
        np.testing.assert_allclose(got["jerk"][:, :3], want[3], rtol=tol[0], atol=tol[1])
    if precision == 1:
        pos = got["pos"][:, :3] + got["pos_lo"][:, :3]
        np.testing.assert_allclose(pos, xs, rtol=0, atol=1e-12 * np.abs(xs).max())
        np.testing.assert_allclose(got["vel"][:, :3], vs, rtol=1e-6, atol=1e-7)
        if order >= 6:
            np.testing.assert_allclose(got["acc"][:, :3], acc, rtol=1e-6, atol=1e-7)
        return xs, vs, acc
    np.testing.assert_allclose(got["pos"][:, :3], xs, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(got["vel"][:, :3], vs, rtol=1e-14, atol=1e-15)
    ap = acc
    if order >= 6:
        np.testing.assert_allclose(got["acc"][:, :3], acc, rtol=1e-14, atol=1e-15)
        ap = got["acc"][:, :3]
    return got["pos"][:, :3].copy(), got["vel"][:, :3].copy(), ap.copy()


def run_forces(ctx: Any, ext: str, variant: tuple[int, ...], n: int = 700, ni: int = 203,
               nparts: int = 3, seed: int = 5) -> dict[str, Any]:
    """Scatter, predict and force a Plummer set through a backend context."""
    order, precision, ngb, li, lj, jt, use_local = variant[:7]
    w = variant[7] if len(variant) > 7 else 1
    rng = np.random.default_rng(seed)
    x, v, m = reference.plummer(n, seed=seed)
    a = rng.normal(0, 1e-1, (n, 3))
    jerk = rng.normal(0, 1e-1, (n, 3))
    snap = rng.normal(0, 1e-1, (n, 3))
    tj, t = 0.0, 1.0 / 64
    ids = rng.permutation(np.arange(10, 10 + n))
    raw = np.zeros((n, layout.raw_n(order), 4))
    raw[:, 0, :3], raw[:, 0, 3] = x, m
    raw[:, 1, :3], raw[:, 1, 3] = v, tj
    raw[:, 2, :3], raw[:, 3, :3], raw[:, 4, :3] = a, jerk, snap
    if order >= 8:  # crackle, pop and d5, which the 8th-order predictor takes
        raw[:, 5:8, :3] = rng.normal(0, 1e-1, (n, 3, 3))
    addr = rng.permutation(n).astype(np.int32)  # scatter to shuffled addresses
    jids = np.empty(n, np.int64)
    jids[addr] = ids
    mj = np.empty(n)
    mj[addr] = m
    if order >= 8:  # x, v, a, jerk through d5, term by term (reference.predict stops at c)
        d = [x, v] + [raw[:, q, :3] for q in range(2, 8)]
        h = t - tj
        preds = [sum(d[k + q] * h**q / math.factorial(q) for q in range(8 - k))
                 for k in range(4)]
    else:
        preds = list(reference.predict(t, tj, x, v, a, jerk, snap))
    want = [np.empty((n, 3)) for _ in preds]
    for arr, pred_ref in zip(want, preds, strict=True):
        arr[addr] = pred_ref

    base = {"ORDER": order, "PRECISION": precision}
    shape = {"LI": li, "LJ": lj, "JT": jt, "USE_LOCAL": use_local, "W": w, "NGB": ngb,
             "NB_CAP": 64}
    pred = ctx.build(f"predict.{ext}", base)
    force_prog = ctx.build(f"force.{ext}", {**base, **shape})
    rs = 4 if precision == 1 else 8
    # the scatter's batch: per record its raw double4, then its address and id
    batch = np.zeros((n, raw.shape[1] + 1, 4))
    batch[:, :-1] = raw
    batch[:, -1, 0], batch[:, -1, 1] = addr, ids
    bufs = {name: ctx.alloc(size) for name, size in [
        ("packed", batch.nbytes), ("raw", raw.nbytes),
        ("jid", n * 4), ("pos", n * 4 * rs), ("pos_lo", n * 16), ("vel", n * 4 * rs),
        ("acc", n * 4 * rs), ("jerk", n * 4 * rs)]}
    bufs["packed"].upload(batch)
    n64 = -(-n // 64) * 64
    pred.kernel("scatter_j")((n64,), (64,), np.int32(n), bufs["packed"], bufs["raw"],
                             bufs["jid"])
    args: list[Any] = [np.int32(n), np.float64(t), bufs["raw"], bufs["pos"]]
    if precision == 1:
        args.append(bufs["pos_lo"])
    args.append(bufs["vel"])
    if order >= 6:
        args.append(bufs["acc"])
    if order >= 8:
        args.append(bufs["jerk"])
    pred.kernel("predict")((n64,), (64,), *args)
    xp, vp, ap = check_prediction(bufs, n, order, precision, want)
    jp = want[3] if order >= 8 else np.zeros((n, 3))
    if order >= 8 and precision == 2:  # as check_prediction: the device's own values
        jp = np.empty((n, 4))
        bufs["jerk"].download(jp)
        jp = jp[:, :3].copy()

    # i-particles: the first ni j-particles by address, plus one foreign particle
    sel = np.arange(ni)
    xi, vi, ai, ji = xp[sel].copy(), vp[sel].copy(), ap[sel].copy(), jp[sel].copy()
    idi = jids[sel].copy()
    xi[-1] += 1e-3
    idi[-1] = 5  # an id no j-particle carries: no self-exclusion for it
    h2 = 4.0 * reference.forces(xi, vi, idi, xp, vp, mj, jids, 0.0, order=2).nn_r2
    h2 = np.minimum(h2, np.median(h2))  # a few neighbours each, also for outliers
    ni_pad = -(-ni // (li * w)) * li * w
    nci = layout.nci(order)
    nco = layout.nco(order)
    idata = np.zeros((nci, ni_pad))
    idata[IC["id"], :] = -3
    idata[0:3, :ni] = xi.T
    if order == 2:  # no velocity: the j-range of every i-particle (layout.h's IC_J0, IC_J1)
        idata[LAYOUT["IC_J0"]], idata[LAYOUT["IC_J1"]] = 0, n
    else:
        idata[4:7, :ni] = vi.T
    idata[IC["id"], :ni] = idi
    idata[IC["h2"], :ni] = h2
    if order >= 6:
        idata[8:11, :ni] = ai.T
    if order >= 8:
        idata[11:14, :ni] = ji.T
    eps2 = 1e-4
    jchunk = -(-n // nparts)
    ibuf = ctx.alloc(idata.nbytes)
    ibuf.upload(idata)
    partial = ctx.alloc(nparts * nco * ni_pad * 8)
    final = ctx.alloc(nco * ni_pad * 8)
    fargs: list[Any] = [np.int32(n), np.int32(ni), np.int32(ni_pad), np.int32(jchunk),
                        np.float64(eps2), bufs["pos"]]
    if precision == 1:
        fargs.append(bufs["pos_lo"])
    fargs.append(bufs["vel"])
    if order >= 6:
        fargs.append(bufs["acc"])
    if order >= 8:
        fargs.append(bufs["jerk"])
    fargs += [bufs["jid"], ibuf, partial]
    if ngb:
        cnt, lst = ctx.alloc(ni_pad * 4), ctx.alloc(ni_pad * 64 * 4)
        fargs += [cnt, lst]

    def launch() -> np.ndarray:
        if ngb:
            cnt.fill(0)
        force_prog.kernel("force")((ni_pad // w, nparts * lj), (li, lj), *fargs)
        rows = -(-ni // REDUCE_ROWS) * REDUCE_ROWS
        force_prog.kernel("reduce")((REDUCE_LANES, rows), (REDUCE_LANES, REDUCE_ROWS),
                                    np.int32(ni), np.int32(ni_pad), np.int32(nparts), partial,
                                    final)
        out = np.empty((nco, ni_pad))
        final.download(out, wait=False)
        ctx.finish()
        return out

    out = launch()
    again = launch()
    result: dict[str, Any] = {"out": out, "again": again, "ni": ni, "h2": h2}
    result["ref"] = reference.forces(xi, vi, idi, xp, vp, mj, jids, eps2, order=order,
                                     ai=ai, aj=ap, h2=h2, ji=ji, jj=jp)
    result["x"] = (xi, xp, jids)
    if ngb:
        counts, lists = np.empty(ni_pad, np.int32), np.empty((ni_pad, 64), np.int32)
        cnt.download(counts)
        lst.download(lists)
        result["nb"] = (counts, lists)
    parts = np.empty((nparts, nco, ni_pad))
    partial.download(parts)
    result["partial"] = parts
    for b in [*bufs.values(), ibuf, partial, final]:
        b.free()
    return result


def check_forces(res: dict[str, Any], variant: tuple[int, ...]) -> None:
    order, precision, ngb = variant[:3]
    tol = 1e-12 if precision == 2 else 1e-5
    out, ref, ni = res["out"], res["ref"], res["ni"]
    np.testing.assert_array_equal(out, res["again"])  # deterministic, bitwise
    err = reference.relative_vector_error
    assert err(out[0:3, :ni].T, ref.acc, ref.acc_abs).max() < tol
    assert err(out[3, :ni], ref.pot, ref.pot_abs).max() < tol
    if order >= 4:
        assert err(out[4:7, :ni].T, ref.jerk, ref.jerk_abs).max() < tol
    if order >= 6:
        assert err(out[8:11, :ni].T, ref.snap, ref.snap_abs).max() < tol
    if order >= 8:
        assert err(out[12:15, :ni].T, ref.crackle, ref.crackle_abs).max() < tol
    xi, xp, jids = res["x"]
    nn_id = out[OC_NNID, :ni]
    assert (nn_id == np.round(nn_id)).all() and (nn_id >= 0).all()
    if precision == 2:
        np.testing.assert_array_equal(nn_id.astype(np.int64), ref.nn_index)
        np.testing.assert_array_equal(out[OC_NNR2, :ni], ref.nn_r2)
    else:  # the chosen neighbour is the nearest to float accuracy
        pos = {int(j): k for k, j in enumerate(jids)}
        chosen = xp[[pos[int(j)] for j in nn_id]]
        r2 = ((chosen - xi) ** 2).sum(axis=1)
        assert (np.abs(r2 - ref.nn_r2) <= 1e-5 * ref.nn_r2).all()
        assert (np.abs(out[OC_NNR2, :ni] - ref.nn_r2) <= 1e-5 * ref.nn_r2).all()
    if ngb:
        counts, lists = res["nb"]
        h2 = res["h2"]
        for k in range(ni):
            assert counts[k] <= 64, "test radius too large for the capacity"
            got = set(lists[k, : counts[k]].tolist())
            assert len(got) == counts[k], "a neighbour listed twice"
            want = set(ref.neighbours[k].tolist())
            if precision == 2:
                assert got == want
            else:  # only pairs within float rounding of the radius may differ
                r2 = dict(zip(jids.tolist(), ((xp - xi[k]) ** 2).sum(axis=1), strict=True))
                assert all(r2[j] < h2[k] * (1 + 1e-5) for j in got - want)
                assert all(r2[j] > h2[k] * (1 - 1e-5) for j in want - got)


def emulator_state(ctx: Any) -> dict[str, Any] | None:
    """The fake driver's state when ``ctx`` runs on the CPU emulation, else None."""
    return getattr(ctx.drv, "state", None)


@pytest.mark.parametrize("variant", GPU_VARIANTS, ids=variant_id)
def test_cuda_kernels_match_reference(cuda_context: Any, variant: tuple[int, ...]) -> None:
    res = run_forces(cuda_context, "cu", variant)
    check_forces(res, variant)
    state = emulator_state(cuda_context)
    if state is None:
        return
    # Threads in another order (reversed, shuffled) give the same bits: no result depends
    # on which thread of a block runs first.
    for schedule in (cudaemu.REVERSE, cudaemu.SHUFFLED):
        state["schedule"] = (schedule, 7)
        try:
            other = run_forces(cuda_context, "cu", variant)
        finally:
            state["schedule"] = (cudaemu.FORWARD, 1)
        np.testing.assert_array_equal(other["out"], res["out"])
        if variant[2]:
            counts, lists = res["nb"]
            counts2, lists2 = other["nb"]
            np.testing.assert_array_equal(counts2, counts)
            for k in range(res["ni"]):
                assert sorted(lists2[k, :counts[k]]) == sorted(lists[k, :counts[k]])


@pytest.mark.parametrize(("variant", "nparts"), [((4, 2, 0, 16, 1, 64, 1), 3),
                                                 ((6, 2, 1, 4, 3, 24, 1), 3),
                                                 ((4, 2, 0, 16, 1, 64, 1), 45),
                                                 ((8, 2, 1, 4, 3, 24, 1), 3),
                                                 ((8, 2, 0, 16, 1, 64, 1), 45)],
                         ids=["lj1", "lj3", "lj1-45parts", "o8-lj3", "o8-45parts"])
def test_emulated_cuda_equals_opencl_bitwise(opencl_context: Any, variant: tuple[int, ...],
                                             nparts: int) -> None:
    """In double precision, lanes combined in lane order (LJ = 1 or not a power of two),
    the CUDA kernels do the OpenCL kernels' arithmetic in the same order: same bits. (On a
    GPU only up to contraction into FMAs, which nvcc does and the OpenCL build forbids.)
    45 parts: the two reduce kernels (warp shuffles against local memory) sum in the same
    lane-and-tree order."""
    with emulated_cuda(), opened("cuda", "no emulated CUDA") as ctx:
        cu = run_forces(ctx, "cu", variant, nparts=nparts)
    cl = run_forces(opencl_context, "cl", variant, nparts=nparts)
    ni = cu["ni"]  # the padding past ni is not written (reduce stops at ni)
    np.testing.assert_array_equal(cu["out"][:, :ni], cl["out"][:, :ni])


def test_cuda_single_i_particle_many_lanes(cuda_context: Any) -> None:
    variant = (4, 1, 0, 1, 128, 128, 1)  # the library's default GPU shape for one particle
    check_forces(run_forces(cuda_context, "cu", variant, ni=1, nparts=5), variant)


PADDING_CASES = [((4, 1, 0, 128, 1, 128, 1), 33), ((4, 2, 0, 128, 1, 128, 1), 1),
                 ((4, 1, 0, 64, 2, 128, 1), 33), ((2, 1, 0, 64, 1, 128, 1, 2), 33)]


def check_padding(res: dict[str, Any], live_end: int) -> None:
    """Columns ni .. live_end - 1 (padding that shares a warp with a real particle) are
    computed; columns from live_end on (threads of padding only) are not: zeros, no
    neighbour."""
    parts, ni = res["partial"], res["ni"]
    assert live_end < parts.shape[2], "the case has no padding to skip"
    assert (parts[:, 3, ni:live_end] < 0).all()  # potential of computed padding
    dead = parts[:, :, live_end:]
    sums = [c for c in range(parts.shape[1]) if c not in (OC_NNR2, OC_NNID)]
    assert (dead[:, sums] == 0).all()
    assert (dead[:, OC_NNID] == -1).all() and np.isinf(dead[:, OC_NNR2]).all()


@pytest.mark.parametrize(("variant", "ni"), PADDING_CASES,
                         ids=["li128", "li128-ni1", "li64-lj2", "li64-w2"])
def test_padding_warps_skip_the_interactions(cuda_context: Any, variant: tuple[int, ...],
                                             ni: int) -> None:
    """Warps whose i-particles are all padding meet the barriers but compute nothing (a
    launch of 129 particles with LI = 128 then costs about 160, not 256), and the real
    particles' results are unchanged."""
    res = run_forces(cuda_context, "cu", variant, ni=ni, nparts=3)
    check_forces(res, variant)
    li, lj = variant[3:5]
    w = variant[7] if len(variant) > 7 else 1
    per_warp = 32 // lj * w  # i-particles per warp (the LJ lanes of one are consecutive)
    check_padding(res, -(-ni // per_warp) * per_warp)


@pytest.fixture(scope="module")
def opencl_context():
    with opened("opencl", "no OpenCL device") as ctx:
        yield ctx


@pytest.mark.parametrize("variant", [GPU_VARIANTS[1], GPU_VARIANTS[4]],
                         ids=["double-ngb", "ds-ngb"])
def test_gpu_harness_on_opencl(opencl_context: Any, variant: tuple[int, ...]) -> None:
    """The GPU tests' harness, run on the OpenCL twin kernels so that it is known to work."""
    check_forces(run_forces(opencl_context, "cl", variant), variant)


@pytest.mark.parametrize(("variant", "ni"), PADDING_CASES[:3], ids=["li128", "li128-ni1",
                                                                    "li64-lj2"])
def test_opencl_padding_items_skip_the_interactions(opencl_context: Any,
                                                    variant: tuple[int, ...], ni: int) -> None:
    """The OpenCL kernel skips per work-item (no portable warp vote in OpenCL 1.2): every
    padding column is left uncomputed."""
    res = run_forces(opencl_context, "cl", variant, ni=ni, nparts=3)
    check_forces(res, variant)
    check_padding(res, ni)
