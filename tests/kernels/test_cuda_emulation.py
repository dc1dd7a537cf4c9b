"""The CPU emulation of CUDA (tests/cudaemu) finds what it is there to find.

The CUDA kernels are tested without a GPU on this emulation (tests/backend/test_cuda.py,
the ``cuda-emulated`` backend of tests/core/test_library.py). These tests show, on small
kernels written here, that it gives CUDA's results for warp shuffles and votes, and that it
turns the mistakes a GPU lets pass silently (a missing barrier, blocks that race, a wrong
shuffle mask, a barrier not reached by every thread, a write past an allocation, arguments
packed with the wrong types) into failures.
"""

from __future__ import annotations

import numpy as np
import pytest

cudaemu = pytest.importorskip("cudaemu")
fake_pycuda = pytest.importorskip("cudaemu.fake_pycuda")

ok, why = cudaemu.available()
pytestmark = pytest.mark.skipif(not ok, reason=why)

SOURCE = r"""
/* ops: 0 xor, 1 down, 2 up, 3 idx */
extern "C" __global__ void shuffle(const int op, const int arg, const int width, int *out)
{
    const int v = 100 + (int)threadIdx.x;
    int r = 0;
    if (op == 0) r = __shfl_xor_sync(0xffffffffu, v, arg, width);
    if (op == 1) r = __shfl_down_sync(0xffffffffu, v, arg, width);
    if (op == 2) r = __shfl_up_sync(0xffffffffu, v, arg, width);
    if (op == 3) r = __shfl_sync(0xffffffffu, v, arg, width);
    out[blockIdx.x * blockDim.x + threadIdx.x] = r;
}

/* warp vote: do any lanes of my warp have t < lim? (a block of 40 ends inside a warp) */
extern "C" __global__ void vote(const int lim, int *out)
{
    const int t = (int)threadIdx.x;
    const int lanes = min(32, (int)blockDim.x - (t & ~31));
    const unsigned mask = lanes >= 32 ? 0xffffffffu : (1u << lanes) - 1u;
    out[blockIdx.x * blockDim.x + t] = __any_sync(mask, t < lim);
}

/* each thread reads its right neighbour's shared slot; the barrier is optional */
extern "C" __global__ void rotate(const int sync, int *out)
{
    __shared__ int s[1024];
    s[threadIdx.x] = 3 * (int)threadIdx.x + (int)blockIdx.x;
    if (sync) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

/* every block writes its index to one place: the last block run wins (a race on a GPU) */
extern "C" __global__ void last_block(int *out)
{
    if (threadIdx.x == 0) out[0] = (int)blockIdx.x;
}

/* the mistakes: 0 none, 1 barrier after an early return, 2 mask without the caller,
 * 3 source lane outside the mask, 4 full mask in a partial warp, 5 deadlock,
 * 6 write one element past n */
extern "C" __global__ void mistake(const int which, const int n, double *out)
{
    const int t = (int)threadIdx.x;
    double v = t;
    if (which == 1) {
        if (t == 0) return;
        __syncthreads();
    }
    if (which == 2 && t == 1) v = __shfl_xor_sync(1u, v, 1);
    if (which == 3 && t < 2) v = __shfl_xor_sync(3u, v, 2);
    if (which == 4) v = __shfl_xor_sync(0xffffffffu, v, 1);
    if (which == 5) {
        if (t < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
        else __syncthreads();
    }
    if (t < n) out[t] = v;
    if (which == 6 && t == 0) out[n] = -1.0;
}
"""


@pytest.fixture(scope="module")
def module() -> cudaemu.Module:
    return cudaemu.compile_module(SOURCE)


def run(module: cudaemu.Module, name: str, grid: int, block: int, fmt: str, *values: object,
        n_out: int, dtype: type = np.int32) -> np.ndarray:
    out = np.full(n_out, -7, dtype)
    module.kernels[name]((grid, 1, 1), (block, 1, 1), fmt + "P", [*values, out.ctypes.data])
    return out


def expected_shuffle(op: int, arg: int, width: int, block: int, grid: int) -> np.ndarray:
    """CUDA's definition (programming guide, warp shuffle functions), per thread."""
    out = []
    for t in list(range(block)) * grid:
        lane = t % 32
        seg = lane - lane % width
        if op == 0:
            src = lane ^ arg
            src = lane if src >= seg + width else src
        elif op == 1:
            src = lane + arg if lane + arg < seg + width else lane
        elif op == 2:
            src = lane - arg if lane - arg >= seg else lane
        else:
            src = seg + arg % width
        out.append(100 + t - lane + src)
    return np.array(out, np.int32)


@pytest.mark.parametrize("op", [0, 1, 2, 3], ids=["xor", "down", "up", "idx"])
@pytest.mark.parametrize("width", [32, 8, 4])
@pytest.mark.parametrize("arg", [1, 2, 5])
def test_shuffles_follow_cuda(module: cudaemu.Module, op: int, width: int, arg: int) -> None:
    got = run(module, "shuffle", 2, 64, "iii", op, arg, width, n_out=128)
    np.testing.assert_array_equal(got, expected_shuffle(op, arg, width, 64, 2))


@pytest.mark.parametrize("lim", [0, 1, 31, 32, 33, 40])
def test_any_sync_votes_per_warp(module: cudaemu.Module, lim: int) -> None:
    block = 40
    got = run(module, "vote", 2, block, "i", lim, n_out=2 * block)
    t = np.tile(np.arange(block), 2)
    np.testing.assert_array_equal(got, (t // 32 * 32 < lim).astype(np.int32))


@pytest.mark.parametrize("schedule", [cudaemu.FORWARD, cudaemu.REVERSE, cudaemu.SHUFFLED])
def test_missing_barrier_is_caught_by_every_schedule(module: cudaemu.Module,
                                                     schedule: int) -> None:
    block, grid = 96, 3
    t = np.arange(grid * block)
    want = 3 * ((t % block + 1) % block) + t // block
    module.set_schedule(schedule, seed=11)
    try:
        np.testing.assert_array_equal(
            run(module, "rotate", grid, block, "i", 1, n_out=grid * block), want)
        racy = run(module, "rotate", grid, block, "i", 0, n_out=grid * block)
    finally:
        module.set_schedule(cudaemu.FORWARD)
    assert (racy != want).any()
    # what went wrong is visible: unwritten shared memory reads as 0xff bytes
    assert (racy[racy != want] == -1).all()


def test_blocks_run_in_the_schedules_order(module: cudaemu.Module) -> None:
    """Blocks, too, run forward, reversed or shuffled, so that two blocks writing one place
    (whose result a GPU leaves open) give another result under another schedule."""
    grid = 16
    last = {}
    for schedule, seed in ((cudaemu.FORWARD, 1), (cudaemu.REVERSE, 1),
                           *((cudaemu.SHUFFLED, s) for s in range(1, 6))):
        module.set_schedule(schedule, seed)
        try:
            last[schedule, seed] = int(run(module, "last_block", grid, 32, "", n_out=1)[0])
        finally:
            module.set_schedule(cudaemu.FORWARD)
    assert last[cudaemu.FORWARD, 1] == grid - 1 and last[cudaemu.REVERSE, 1] == 0
    assert len({v for (mode, _), v in last.items() if mode == cudaemu.SHUFFLED}) > 1


@pytest.mark.parametrize(("which", "block", "message"), [
    (1, 64, "__syncthreads reached by 63 of 64 threads"),
    (2, 32, "leaves out the calling lane 1"),
    (3, 32, "lane 0 reads lane 2, which is not in the mask"),
    (4, 20, "naming lanes that do not exist in warp 0"),
    (5, 32, "deadlock: thread 0 waits at a warp operation"),
])
def test_mistakes_end_the_launch_with_a_reason(module: cudaemu.Module, which: int, block: int,
                                               message: str) -> None:
    run(module, "mistake", 1, block, "ii", 0, block, n_out=block, dtype=np.float64)
    with pytest.raises(cudaemu.EmulatorError, match=message):
        run(module, "mistake", 1, block, "ii", which, block, n_out=block, dtype=np.float64)


def test_arguments_must_match_the_kernel(module: cudaemu.Module) -> None:
    with pytest.raises(cudaemu.EmulatorError, match=r"packed as 'idiP'.*takes 'iiiP'"):
        run(module, "shuffle", 1, 32, "idi", 0, 1.0, 32, n_out=32)
    with pytest.raises(cudaemu.EmulatorError, match="invalid launch configuration"):
        run(module, "shuffle", 1, 2048, "iii", 0, 1, 32, n_out=2048)


def test_fake_pycuda_catches_writes_outside_an_allocation() -> None:
    modules = fake_pycuda.make_fake_pycuda(execute=True)
    drv, compiler = modules["pycuda.driver"], modules["pycuda.compiler"]
    drv.Device(0).make_context()
    try:
        mod = drv.module_from_buffer(compiler.compile(SOURCE, no_extern_c=True))
        fn = mod.get_function("mistake").prepare("iiP")
        n = 16
        buf = drv.mem_alloc(8 * n)
        fresh = np.empty(n)
        drv.memcpy_dtoh_async(fresh, buf)
        assert np.isnan(fresh).all(), "new device memory is poisoned, not zeroed"
        fn.prepared_async_call((1, 1), (32, 1, 1), drv.Stream(), 0, n, int(buf))
        got = np.empty(n)
        drv.memcpy_dtoh_async(got, buf)
        np.testing.assert_array_equal(got, np.arange(n))
        with pytest.raises(drv.LaunchError, match="wrote outside an allocation of 128 bytes"):
            fn.prepared_async_call((1, 1), (32, 1, 1), drv.Stream(), 6, n, int(buf))
        with pytest.raises(drv.LogicError, match="invalid device pointer"):
            fn.prepared_async_call((1, 1), (32, 1, 1), drv.Stream(), 0, n, 12345)
    finally:
        drv.Context.pop()
