"""The backend layer driven for real on OpenCL (PoCL on a machine without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from sapporo import config
from sapporo.backend import get_backend
from sapporo.backend.base import format_defines, load_source
from sapporo.errors import BackendError, BuildError


def _opencl_reason() -> str:
    try:
        return "" if get_backend("opencl").devices() else "no OpenCL device"
    except BackendError as exc:
        return str(exc)


_WHY = _opencl_reason()
pytestmark = pytest.mark.skipif(bool(_WHY), reason=f"OpenCL unusable here: {_WHY}")


@pytest.fixture(scope="module")
def ctx():
    backend = get_backend("opencl")
    c = backend.open(0, profiling=True)
    yield c
    c.close()


def test_device_info_fields():
    devs = get_backend("opencl").devices()
    assert devs, "PoCL must provide at least one device"
    d = devs[0]
    assert d.backend == "opencl" and d.index == 0 and d.name
    assert d.compute_units >= 1 and d.max_work_group_size >= 1
    assert d.local_mem_size > 0 and d.global_mem_size > 0
    assert d.device_type in ("cpu", "gpu", "accelerator")
    assert isinstance(d.double_support, bool)
    assert d.key.startswith("opencl:")


def test_pocl_runs_one_kernel_at_a_time(ctx):
    """PoCL's CPU drivers abort when two threads run one kernel at once with different grid
    sizes; its contexts say so, and the GRAPE-5 calls then run their engines one at a time
    (capi/g5.c, g5_engine_enter). Other platforms' contexts run at once."""
    pocl = "portable computing language" in ctx.info.platform.lower()
    assert ctx.one_kernel_at_a_time is pocl


def test_buffer_round_trip_and_offsets(ctx):
    host = np.arange(1000, dtype=np.float64)
    buf = ctx.alloc(host.nbytes)
    buf.upload(host)
    back = np.empty_like(host)
    buf.download(back)
    np.testing.assert_array_equal(back, host)
    # partial upload at a byte offset, asynchronous with an explicit wait
    part = np.full(10, -1.0)
    ev = buf.upload(part, offset=100 * 8, wait=False)
    ev.wait()
    sub = np.empty(12)
    buf.download(sub, offset=99 * 8, wait=False).wait()
    np.testing.assert_array_equal(sub, [99.0] + [-1.0] * 10 + [110.0])
    buf.free()
    buf.free()  # idempotent


def test_fill(ctx):
    buf = ctx.alloc(64 * 4)
    buf.fill(7)
    out = np.empty(64, dtype=np.int32)
    buf.download(out)
    assert (out == 7).all()
    buf.fill(-1)
    buf.download(out)
    assert (out == -1).all()


def test_transfer_bounds_are_checked(ctx):
    buf = ctx.alloc(80)
    with pytest.raises(BackendError, match="exceeds buffer"):
        buf.upload(np.zeros(11))
    with pytest.raises(BackendError, match="exceeds buffer"):
        buf.download(np.zeros(10), offset=8)
    with pytest.raises(BackendError, match="contiguous"):
        buf.upload(np.zeros((10, 2))[:, 0])


def test_kernel_with_definitions_1d(ctx):
    n = 1000  # not a multiple of the local size: the kernel guards
    x = np.random.default_rng(0).normal(size=n)
    bx, by = ctx.alloc(x.nbytes), ctx.alloc(x.nbytes)
    bx.upload(x)
    for scale in (2, 5):
        prog = ctx.build("selftest.cl", {"SCALE": scale})
        ev = prog.kernel("axpb")((1024,), (64,), np.int32(n), np.float64(0.5), bx, by)
        ev.wait()
        assert ev.elapsed is not None and ev.elapsed >= 0
        y = np.empty(n)
        by.download(y)
        np.testing.assert_allclose(y, scale * x + 0.5, rtol=1e-15, atol=1e-15)


def test_programs_are_cached_per_definitions(ctx):
    a = ctx.build("selftest.cl", {"SCALE": 3})
    b = ctx.build("selftest.cl", {"SCALE": 3})
    c = ctx.build("selftest.cl", {"SCALE": 4})
    assert a is b and a is not c


def test_kernel_2d(ctx):
    nrows, ncols = 5, 7
    buf = ctx.alloc(nrows * ncols * 4)
    prog = ctx.build("selftest.cl")
    prog.kernel("grid2d")((8, 6), (4, 2), np.int32(nrows), np.int32(ncols), buf, wait=True)
    out = np.empty((nrows, ncols), dtype=np.int32)
    buf.download(out)
    r, c = np.mgrid[0:nrows, 0:ncols]
    np.testing.assert_array_equal(out, r * 1000 + c + 8 * 1000000)


def test_broken_kernel_gives_readable_error(ctx):
    with pytest.raises(BuildError) as info:
        ctx.build("selftest.cl", {"BROKEN": 1})
    err = info.value
    assert "selftest.cl" in str(err) and "-DBROKEN=1" in str(err)
    assert "error" in err.log.lower()
    assert err.source_path and open(err.source_path).read().count("this line is not OpenCL C")


def test_missing_kernel_and_source(ctx):
    with pytest.raises(BackendError, match="not found"):
        ctx.build("no_such_file.cl")
    with pytest.raises(BackendError, match="nope"):
        ctx.build("selftest.cl").kernel("nope")


def test_open_out_of_range():
    with pytest.raises(BackendError, match="out of range"):
        get_backend("opencl").open(99)


def test_includes_are_inlined_once():
    src = load_source("opencl", "force.cl")
    assert "#include" not in src.replace("already included", "")
    assert src.count("#define SAPPORO_COMMON_H") == 1


def test_format_defines():
    assert format_defines({"B": True, "A": 4}) == ["-DA=4", "-DB=1"]
    with pytest.raises(BackendError, match="invalid macro"):
        format_defines({"bad name": 1})


def test_host_buffer_zero_copy_on_cpu(ctx):
    """On a CPU device the kernels work on the host array itself: no copy commands."""
    hb = ctx.alloc_host(64 * 8)
    if ctx.info.device_type == "cpu":  # unless told to use device buffers
        assert hb.zero_copy == (config.from_environment().native_memory == "auto")
    x = hb.view(np.float64, (64,))
    x[:] = np.arange(64.0)
    hb.to_device(x.nbytes)
    prog = ctx.build("selftest.cl", {"SCALE": 2})
    prog.kernel("axpb")((64,), None, np.int32(64), np.float64(1.0), hb.buffer, hb.buffer)
    hb.from_device(x.nbytes)
    ctx.finish()
    np.testing.assert_array_equal(x, 2 * np.arange(64.0) + 1)
    hb.free()


def test_host_buffer_copying_fallback(ctx):
    """The generic (copying) host buffer gives the same results."""
    from sapporo.backend.base import Context

    hb = Context.alloc_host(ctx, 64 * 8)
    assert not hb.zero_copy
    x = hb.view(np.float64, (64,))
    x[:] = np.arange(64.0)
    hb.to_device(x.nbytes)
    prog = ctx.build("selftest.cl", {"SCALE": 5})
    prog.kernel("axpb")((64,), None, np.int32(64), np.float64(0.0), hb.buffer, hb.buffer)
    hb.from_device(x.nbytes)
    ctx.finish()
    np.testing.assert_array_equal(x, 5 * np.arange(64.0))
    hb.free()


# --- the companion device for small launches (PoCL's single-threaded 'basic' device) -----

def test_companion_request_respects_the_environment(monkeypatch):
    from sapporo.backend import opencl

    monkeypatch.setattr(opencl, "_system_pocl_installed", lambda: False)
    monkeypatch.setenv("POCL_DEVICES", "pthread pthread")
    opencl._request_pocl_companion()
    assert opencl.os.environ["POCL_DEVICES"] == "pthread pthread"  # the user's choice stays
    monkeypatch.delenv("POCL_DEVICES")
    monkeypatch.setenv("SAPPORO_SMALL_PAIRS", "0")
    opencl._request_pocl_companion()
    assert "POCL_DEVICES" not in opencl.os.environ  # switched off
    monkeypatch.delenv("SAPPORO_SMALL_PAIRS")
    monkeypatch.setattr(opencl, "_system_pocl_installed", lambda: True)
    monkeypatch.setattr(opencl, "_system_pocl_cpu_only", lambda: False)
    opencl._request_pocl_companion()
    assert "POCL_DEVICES" not in opencl.os.environ  # another PoCL could lose devices
    monkeypatch.setattr(opencl, "_system_pocl_cpu_only", lambda: True)
    monkeypatch.setattr(opencl.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    opencl._request_pocl_companion()
    # a CPU-only system PoCL: the companion and, with two cores, its twin
    assert opencl.os.environ["POCL_DEVICES"] == "pthread basic basic"
    monkeypatch.delenv("POCL_DEVICES")
    monkeypatch.setattr(opencl, "_system_pocl_installed", lambda: False)
    opencl._request_pocl_companion()
    assert opencl.os.environ["POCL_DEVICES"] == "pthread basic basic"
    monkeypatch.delenv("POCL_DEVICES")
    monkeypatch.setattr(opencl.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    opencl._request_pocl_companion()
    assert opencl.os.environ["POCL_DEVICES"] == "pthread basic"  # one core: no twin


def test_system_pocl_drivers_decide_the_companion(monkeypatch, tmp_path):
    """A system PoCL whose driver folder has CPU drivers only may get POCL_DEVICES; one
    with any other driver (or none found) may not."""
    from sapporo.backend import opencl

    vendors, lib = tmp_path / "vendors", tmp_path / "lib"
    (lib / "pocl").mkdir(parents=True)
    vendors.mkdir()
    (vendors / "pocl.icd").write_text(f"{lib / 'libpocl.so.2'}\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(vendors))
    monkeypatch.setattr(opencl.os.path, "isdir",
                        lambda p, real=opencl.os.path.isdir: real(p) and "/etc/" not in p)
    assert not opencl._system_pocl_cpu_only()  # no driver found: unsure
    for name in ("basic", "pthread"):
        (lib / "pocl" / f"libpocl-devices-{name}.so").write_text("")
    assert opencl._system_pocl_cpu_only()
    (lib / "pocl" / "libpocl-devices-cuda.so").write_text("")
    assert not opencl._system_pocl_cpu_only()


def test_a_pocl_that_cannot_build_is_skipped():
    """On a CPU newer than a PoCL's LLVM, that platform cannot build (unknown target CPU),
    or builds the force kernel into a program without kernels; its devices are skipped and
    the reason names the fix, unless a platform preferred for this CPU (a system PoCL) was
    used and it was never checked (then it is skipped as the same CPU). Other platforms are
    untouched."""
    from sapporo.backend import opencl

    if opencl.cl is None:
        pytest.skip("PyOpenCL is not importable")
    platforms = opencl.cl.get_platforms()
    for platform in platforms:
        devices = platform.get_devices()
        broken = opencl._pocl_cannot_build(platform, devices)
        if "portable computing language" not in platform.name.lower():
            assert broken == ""
        elif broken:
            assert isinstance(broken, str) and broken.strip()
    backend = opencl.OpenCLBackend()
    names = {info.platform for info in backend.devices()}
    for platform in platforms:
        if opencl._pocl_cannot_build(platform, platform.get_devices()):
            assert platform.name.strip() not in names or len(
                [p for p in platforms if p.name == platform.name]) > 1
            label = opencl._platform_label(platform)
            why = [w for w in backend.skipped if label in w.split(":")[0]]
            assert why, f"{label} is not listed as skipped"
            if "cannot build kernels here" in why[0]:
                assert "apt install pocl-opencl-icd" in backend.reason
            else:
                assert "same CPU as platform" in why[0]


def test_companion_device_names():
    from sapporo.backend.quirks import is_pocl_single_threaded_cpu, is_pocl_threaded_cpu

    assert is_pocl_single_threaded_cpu("basic-AMD EPYC")
    assert is_pocl_single_threaded_cpu("cpu-minimal-Intel")
    assert is_pocl_threaded_cpu("pthread-AMD EPYC") and is_pocl_threaded_cpu("cpu-Intel")
    assert not is_pocl_threaded_cpu("cpu-minimal-Intel")
    assert not is_pocl_single_threaded_cpu("cpu-x")


def test_small_launches_on_the_companion_match(monkeypatch):
    """Small force launches (and their predictions) on the companion give the forces of the
    threaded device; mixing small and large launches keeps the j-data consistent."""
    import sapporo
    from sapporo import reference as ref

    info = get_backend("opencl").devices()[0]
    if not info.companion:
        pytest.skip("no companion device (POCL_DEVICES set by the user, or not PoCL)")
    n = 2000
    x, v, m = ref.plummer(n, seed=7)
    ids = np.arange(n)
    a = ref.forces(x, v, ids, x, v, m, ids, 1e-4, order=2).acc
    results = {}
    for pairs in ("1", "131072"):  # never / usually on the companion
        monkeypatch.setenv("SAPPORO_SMALL_PAIRS", pairs)
        with sapporo.Library(order=4, precision="double", backend="opencl") as lib:
            dev = lib._devs[0]
            assert dev.ctx.small_pairs == int(pairs)
            lib.set_j_particles(ids, ids, 0.0, m, x, v, a=a)
            out = []
            for t, ni in ((0.0, 1), (0.01, 5), (0.01, 2000), (0.02, 3), (0.02, 2000)):
                lib.set_time(t)
                f = lib.compute(x[:ni], v[:ni], ids[:ni], 1e-4)
                xp, vp = x + t * v + 0.5 * t * t * a, v + t * a
                r = ref.forces(x[:ni], v[:ni], ids[:ni], xp, vp, m, ids, 1e-4, order=4)
                assert ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max() <= 1e-12
                assert ref.relative_vector_error(f.jerk, r.jerk, r.jerk_abs).max() <= 1e-12
                np.testing.assert_array_equal(f.nn_index, r.nn_index)
                out.append(f)
            (shape,) = lib._engine.shape(n, 1, False)
            assert shape["small"] == (pairs != "1")
            results[pairs] = out
    for f1, f2 in zip(results["1"], results["131072"], strict=True):
        np.testing.assert_allclose(f1.acc, f2.acc, rtol=1e-14, atol=0)
        np.testing.assert_array_equal(f1.nn_index, f2.nn_index)


def test_small_launches_keep_one_part(monkeypatch):
    """The companion runs work-groups one after the other: a small launch there is not cut
    into parts (nothing to merge), a large one on the threaded device is."""
    import sapporo
    from sapporo import reference as ref

    info = get_backend("opencl").devices()[0]
    if not info.companion:
        pytest.skip("no companion device (POCL_DEVICES set by the user, or not PoCL)")
    n = 3000
    x, v, m = ref.plummer(n, seed=9)
    ids = np.arange(n)
    with sapporo.Library(order=4, precision="double", backend="opencl") as lib:
        lib.set_j_particles(ids, ids, 0.0, m, x, v)
        f = lib.compute(x[:1], v[:1], ids[:1], 1e-4)
        (shape,) = lib._engine.shape(n, 1, False)
        assert shape["small"] and shape["parts"] == 1
        r = ref.forces(x[:1], v[:1], ids[:1], x, v, m, ids, 1e-4, order=4)
        assert ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max() <= 1e-12
    monkeypatch.setenv("SAPPORO_SMALL_PAIRS", "0")  # the same launch on the threaded device
    with sapporo.Library(order=4, precision="double", backend="opencl") as lib:
        lib.set_j_particles(ids, ids, 0.0, m, x, v)
        g = lib.compute(x[:1], v[:1], ids[:1], 1e-4)
        (shape,) = lib._engine.shape(n, 1, False)
        assert not shape["small"] and shape["parts"] > 1
        np.testing.assert_allclose(g.acc, f.acc, rtol=1e-14)


def test_kernel_binaries_are_cached_across_contexts(monkeypatch, tmp_path):
    """A built program is kept as a binary (SAPPORO_KERNEL_CACHE); the next context rebuilds
    it from there, with the same results; a damaged file is rebuilt from source and
    replaced; SAPPORO_KERNEL_CACHE=0 keeps nothing."""
    from sapporo.backend import opencl

    backend = get_backend("opencl")
    monkeypatch.setenv("SAPPORO_KERNEL_CACHE", str(tmp_path))
    builds: list[str] = []
    real_program = opencl.cl.Program

    def counting_program(ctx, *args):
        builds.append("source" if len(args) == 1 else "binary")
        return real_program(ctx, *args)

    monkeypatch.setattr(opencl.cl, "Program", counting_program)

    def run() -> np.ndarray:
        ctx = backend.open(0)
        try:
            x = np.arange(64, dtype=np.float64)
            buf = ctx.alloc(x.nbytes)
            buf.upload(x)
            ctx.build("selftest.cl", {"SCALE": 5}).kernel("axpb")(
                (64,), (64,), np.int32(64), np.float64(2.0), buf, buf, wait=True)
            out = np.empty_like(x)
            buf.download(out)
            buf.free()
            return out
        finally:
            ctx.close()

    first = run()
    files = sorted(tmp_path.glob("*.bin"))
    assert files and "source" in builds
    builds.clear()
    second = run()
    assert "binary" in builds and "source" not in builds
    np.testing.assert_array_equal(first, second)
    for f in files:
        f.write_bytes(b"not a binary")
    builds.clear()
    third = run()
    assert "source" in builds
    np.testing.assert_array_equal(first, third)
    assert all(f.read_bytes() != b"not a binary" for f in files)
    monkeypatch.setenv("SAPPORO_KERNEL_CACHE", "0")
    for f in tmp_path.glob("*.bin"):
        f.unlink()
    run()
    assert not list(tmp_path.glob("*.bin"))


def test_cache_keys_name_the_cpu(monkeypatch, tmp_path):
    """A home folder shared by machines of different CPU generations: the kernel binaries
    and the PoCL probe's answers are keyed by the processor as well."""
    from sapporo.backend import opencl

    backend = get_backend("opencl")
    info, device = backend._scan()[0]
    monkeypatch.setenv("SAPPORO_KERNEL_CACHE", str(tmp_path))
    here = opencl._binary_cache_file(info, device, "src", ["-DX=1"])
    assert here == opencl._binary_cache_file(info, device, "src", ["-DX=1"])
    assert "|" in opencl._host_cpu_id()
    monkeypatch.setattr(opencl, "_host_cpu_id", lambda: "x86_64|another processor")
    assert opencl._binary_cache_file(info, device, "src", ["-DX=1"]) != here


def test_affinity_request_respects_the_environment(monkeypatch):
    """POCL_AFFINITY=1 is asked for unless the user set POCL_AFFINITY or several ranks of
    an MPI job share the node."""
    from sapporo.backend import opencl

    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POCL_AFFINITY", "0")
    opencl._request_pocl_affinity()
    assert opencl.os.environ["POCL_AFFINITY"] == "0"  # the user's choice stays
    monkeypatch.delenv("POCL_AFFINITY")
    monkeypatch.setenv("PMI_SIZE", "4")
    opencl._request_pocl_affinity()
    assert "POCL_AFFINITY" not in opencl.os.environ  # ranks would pin to the same cores
    monkeypatch.delenv("PMI_SIZE")
    monkeypatch.setattr(opencl.os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(opencl.os, "cpu_count", lambda: 4)
    opencl._request_pocl_affinity()
    assert "POCL_AFFINITY" not in opencl.os.environ  # held to some of the cores
    monkeypatch.setattr(opencl.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    opencl._request_pocl_affinity()
    assert opencl.os.environ["POCL_AFFINITY"] == "1"


def test_narrow_vectors_are_said_with_the_fix(monkeypatch, capsys):
    """A CPU runtime compiling for 8 float lanes on a CPU with AVX-512 (PoCL's pip wheel,
    whose LLVM 14 does not know the CPU) is said, with the command that fixes it; 16 lanes,
    a CPU without AVX-512 or a GPU are not. `sapporo info` prints it under the device."""
    from dataclasses import replace

    from sapporo.backend import quirks
    from sapporo.backend.base import DeviceInfo
    from sapporo.cli import main

    cpu = DeviceInfo("opencl", 0, "pthread-x86-64-v3-Some CPU", "v", "Portable Computing "
                     "Language", "cpu", 2, 4096, 65536, 2**30, True, "3.0", float_lanes=8)
    monkeypatch.setattr(quirks, "cpu_flags", lambda: {"avx2", "avx512f"})
    advice = quirks.narrow_vectors(cpu)
    assert advice is not None and "8 float lanes" in advice and "apt install pocl" in advice
    assert quirks.narrow_vectors(replace(cpu, float_lanes=16)) is None
    assert quirks.narrow_vectors(replace(cpu, device_type="gpu", float_lanes=1)) is None
    monkeypatch.setattr(quirks, "cpu_flags", lambda: {"avx2"})
    assert quirks.narrow_vectors(cpu) is None
    # sapporo info: under the device, where this machine's runtime has narrow vectors
    monkeypatch.setattr(quirks, "narrow_vectors", lambda info: "NARROW" if info.device_type
                        == "cpu" else None)
    assert main(["info", "--backend", "opencl"]) == 0
    out = capsys.readouterr().out
    assert "note: NARROW" in out
