"""Launch configurations: every shape the kernels accept gives the reference's results.

The GPU shapes (local-memory tiles, several j-lanes per i-particle) run here on PoCL too, so
the code paths a GPU takes are checked on every machine.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import sapporo
from sapporo import reference as ref
from sapporo.core.launch import (
    NI_CHUNK,
    LaunchConfig,
    LaunchTable,
    check_table,
    default_table,
    load_table,
    profile_name,
    split_j,
    table_from_json,
)
from sapporo.errors import ConfigError

SHAPES = [
    LaunchConfig(li=1, lj=1, w=1, jt=32, use_local=False),
    LaunchConfig(li=4, lj=1, w=2, jt=16, use_local=True),
    LaunchConfig(li=1, lj=1, w=16, jt=64, use_local=False, groups_per_cu=1),
    # the widths with inline x86 square roots (double-single: vrsqrtps + Newton step with
    # 4 and 8 floats, AVX-512's vrsqrt14ps with 16; double: vsqrtpd with 2, 4 and, with
    # AVX-512, 8 doubles); W = 2 and 16 are above
    LaunchConfig(li=1, lj=1, w=4, jt=64, use_local=False),
    LaunchConfig(li=1, lj=1, w=8, jt=64, use_local=False),
    # lanes over j-particles (CPUs, few active particles)
    LaunchConfig(li=1, lj=1, w=4, jt=64, use_local=False, jv=True, min_jchunk=16),
    LaunchConfig(li=1, lj=1, w=8, jt=16, use_local=False, jv=True, groups_per_cu=3,
                 min_jchunk=8),
    LaunchConfig(li=1, lj=32, w=1, jt=64, use_local=True, min_jchunk=16),
    LaunchConfig(li=8, lj=4, w=1, jt=32, use_local=True),
    LaunchConfig(li=2, lj=4, w=1, jt=24, use_local=False),
]


@pytest.mark.parametrize("cfg", SHAPES,
                         ids=lambda c: f"li{c.li}-lj{c.lj}-w{c.w}{'jv' if c.jv else ''}"
                         f"-jt{c.jt}-{'local' if c.use_local else 'global'}")
@pytest.mark.parametrize("order,precision", [(6, "double"), (4, "double-single")])
def test_shape_matches_reference(backend, cfg, order, precision):
    n = 517
    x, v, m = ref.plummer(n, seed=41)
    ids = np.arange(n) + 1
    a = ref.forces(x, v, ids, x, v, m, ids, 1e-4, order=2).acc
    with sapporo.Library(order=order, precision=precision, backend=backend) as lib:
        table = LaunchTable([(10**9, cfg)], source="test")
        if backend == "cuda" and (cfg.w not in (1, 2, 4) or cfg.jv):  # OpenCL-only shapes
            with pytest.raises(ConfigError, match="no jv variant|w must be one of 1, 2, 4 on cuda"):
                lib.set_launch_table(table)
            return
        lib.set_launch_table(table)
        lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v, a=a)
        for sel in (np.array([5]), np.arange(0, n, 4), np.arange(n)):
            f = lib.compute(x[sel], v[sel], ids[sel], 1e-4, a=a[sel], h2=0.03)
            r = ref.forces(x[sel], v[sel], ids[sel], x, v, m, ids, 1e-4, order=order,
                           ai=a[sel], aj=a, h2=0.03)
            tol = 1e-12 if precision == "double" else 1e-5
            assert ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max() <= tol
            assert ref.relative_vector_error(f.jerk, r.jerk, r.jerk_abs).max() <= tol
            if order == 6:
                assert ref.relative_vector_error(f.snap, r.snap, r.snap_abs).max() <= tol
            assert (np.abs(f.pot - r.pot) / np.abs(r.pot)).max() <= tol
            if precision == "double":
                np.testing.assert_array_equal(f.nn_index, r.nn_index)
                for k in range(len(sel)):
                    np.testing.assert_array_equal(f.neighbours(k), r.neighbours[k])


def test_default_gpu_table_runs_here(backend):
    """The built-in GPU table, forced onto this device, still matches the reference."""
    from sapporo.backend import get_backend

    info = get_backend(backend).devices()[0]
    gpu_info = type(info)(**{**info.as_dict(), "device_type": "gpu"})
    table = default_table(gpu_info, 4, "double")
    n = 700
    x, v, m = ref.plummer(n, seed=43)
    ids = np.arange(n)
    with sapporo.Library(order=4, precision="double", backend=backend) as lib:
        lib.set_launch_table(table)
        lib.set_j_particles(ids, ids, 0.0, m, x, v)
        for ni in (1, 5, 20, 100, n):
            f = lib.compute(x[:ni], v[:ni], ids[:ni], 1e-4)
            r = ref.forces(x[:ni], v[:ni], ids[:ni], x, v, m, ids, 1e-4, order=4)
            assert ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max() <= 1e-12
            np.testing.assert_array_equal(f.nn_index, r.nn_index)


def test_invalid_shapes_rejected():
    with pytest.raises(ConfigError, match="w must be"):
        LaunchConfig(w=3)
    with pytest.raises(ConfigError, match="lj > 1 needs w == 1"):
        LaunchConfig(lj=4, w=8)
    with pytest.raises(ConfigError, match="multiple"):
        LaunchConfig(li=4, lj=1, w=1, jt=6, use_local=True)


def test_table_lookup_and_json_round_trip():
    a, b = LaunchConfig(w=4), LaunchConfig(w=8)
    t = LaunchTable([(16, a), (1024, b)])
    assert t.for_ni(1) is a and t.for_ni(16) is a and t.for_ni(17) is b
    assert t.for_ni(10**6) is b  # beyond the last entry: the last one
    t2 = table_from_json(json.loads(json.dumps(t.to_json())), "mem")
    assert t2.entries == t.entries
    with pytest.raises(ConfigError, match="malformed"):
        table_from_json({"entries": [{"ni_max": 4, "bogus": 1}]}, "x")
    with pytest.raises(ConfigError, match="no entries"):
        table_from_json({"entries": []}, "x")


@pytest.mark.parametrize("lanes,ds,dp", [(8, 8, 4), (16, 16, 8), (4, 8, 4), (1, 8, 4)])
def test_cpu_table_fills_the_vector_registers(lanes, ds, dp):
    """A CPU's built-in table puts a register's worth of i-particles in each work-item, as
    the compiler reports it (16 floats with AVX-512, else 8), and 4 for three or four."""
    from sapporo.backend import DeviceInfo

    info = DeviceInfo("opencl", 0, "cpu", "v", "p", "cpu", 2, 4096, 65536, 2**30, True, "1",
                      float_lanes=lanes)
    for precision, w in (("double-single", ds), ("double", dp)):
        table = default_table(info, 4, precision)
        assert table.for_ni(2).jv and not table.for_ni(3).jv
        assert table.for_ni(4).w == 4
        assert table.for_ni(5).w == table.for_ni(NI_CHUNK).w == w


def test_parts_fill_the_device():
    from sapporo.backend import DeviceInfo

    info = DeviceInfo("opencl", 0, "dev", "v", "p", "gpu", 100, 1024, 65536, 2**30, True, "1")
    cfg = LaunchConfig(li=1, lj=128, w=1, jt=128, use_local=True, groups_per_cu=4)
    assert split_j(cfg, info, 1, 10**6) == (400, 2500)  # one i-particle: 4 groups per CU
    assert split_j(cfg, info, 1, 1000)[0] == 3  # but never parts shorter than min_jchunk
    assert split_j(cfg, info, 1, 0) == (1, 1)
    assert split_j(cfg, info, 1, 10**9)[0] == 400
    big = LaunchConfig(li=128, lj=1, w=1, jt=128, use_local=True)
    assert split_j(big, info, 128 * 1000, 10**6) == (1, 10**6)  # enough groups already
    tiny = LaunchConfig(li=1, lj=1, w=1, jt=1, groups_per_cu=100, min_jchunk=1)
    assert split_j(tiny, info, 1, 10**8)[0] == 4096  # never more parts than LIMIT_MAX_PARTS
    # parts of the j-lane kernels start at multiples of w; they cover nj, none empty
    jv = LaunchConfig(w=8, jv=True, min_jchunk=16)
    for nj in (0, 1, 7, 1000, 1031, 10**6):
        nparts, jchunk = split_j(jv, info, 1, nj)
        assert jchunk % 8 == 0 and nparts * jchunk >= nj and (nparts - 1) * jchunk < max(nj, 1)
    assert split_j(cfg, info, 1, 1000) == (3, 334)


def test_profile_is_loaded_and_bad_profile_ignored(tmp_path, monkeypatch, caplog):
    import sapporo.core.launch
    from sapporo.backend import get_backend
    from sapporo.errors import BackendError

    try:
        info = get_backend("opencl").devices()[0]
    except (BackendError, IndexError) as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    monkeypatch.setattr(sapporo.core.launch, "_shipped_profile_dir", lambda: None)
    monkeypatch.setenv("SAPPORO_PROFILE_DIR", str(tmp_path))
    monkeypatch.delenv("SAPPORO_NO_PROFILE", raising=False)
    path = tmp_path / profile_name(info, 4, "double")
    path.write_text(json.dumps(LaunchTable([(64, LaunchConfig(w=2))]).to_json()))
    table = load_table(info, 4, "double")
    assert table.source == str(path) and table.entries[0][1].w == 2
    monkeypatch.setenv("SAPPORO_NO_PROFILE", "1")
    assert load_table(info, 4, "double").source.startswith("defaults")
    monkeypatch.delenv("SAPPORO_NO_PROFILE")
    path.write_text("{not json")
    with caplog.at_level("WARNING"):
        assert load_table(info, 4, "double").source.startswith("defaults")
    assert "ignoring tuning profile" in caplog.text
    huge = LaunchConfig(li=1, lj=1, w=1, jt=10**7, use_local=True)
    path.write_text(json.dumps(LaunchTable([(64, huge)]).to_json()))
    with pytest.raises(ConfigError, match="local memory"):
        check_table(LaunchTable([(64, huge)]), info, 6, "double")
    assert load_table(info, 4, "double").source.startswith("defaults")


def test_jv_only_on_opencl(backend):
    """The j-lane kernels exist only in kernels_opencl/: a CUDA table with jv is refused."""
    from sapporo.backend import get_backend

    info = get_backend(backend).devices()[0]
    cuda_info = type(info)(**{**info.as_dict(), "backend": "cuda"})
    ocl_info = type(info)(**{**info.as_dict(), "backend": "opencl"})
    table = LaunchTable([(8, LaunchConfig(w=8, jv=True))], source="test")
    check_table(table, ocl_info, 4, "double-single")
    with pytest.raises(ConfigError, match="cuda kernels have no jv variant"):
        check_table(table, cuda_info, 4, "double-single")
    wide = LaunchTable([(8, LaunchConfig(w=8))], source="test")
    check_table(wide, ocl_info, 4, "double-single")
    with pytest.raises(ConfigError, match="w must be one of 1, 2, 4 on cuda"):
        check_table(wide, cuda_info, 4, "double-single")


@pytest.mark.parametrize("precision", ["double-single", "double"])
def test_portable_kernels_without_x86_builtins(backend, monkeypatch, precision):
    """The OpenCL built-ins path (other CPUs, GPUs) of the vector kernels, forced on PoCL by
    leaving out -DSAPPORO_X86_BUILTINS: same accuracy contract."""
    if backend != "opencl":
        pytest.skip("the x86 built-ins are a path of the OpenCL kernels only")
    from sapporo.backend import quirks

    real = quirks.opencl_build_options
    monkeypatch.setattr(quirks, "opencl_build_options",
                        lambda info: [o for o in real(info) if "SAPPORO_X86" not in o])
    n = 300
    x, v, m = ref.plummer(n, seed=44)
    ids = np.arange(n)
    tol = 1e-12 if precision == "double" else 1e-5
    w = 8 if precision == "double-single" else 4
    for cfg in (LaunchConfig(w=w), LaunchConfig(w=8, jv=True, min_jchunk=16),
                LaunchConfig(w=1)):
        with sapporo.Library(order=4, precision=precision, backend=backend) as lib:
            lib.set_launch_table(LaunchTable([(10**9, cfg)], source="test"))
            lib.set_j_particles(ids, ids, 0.0, m, x, v)
            for ni in (1, 37):
                f = lib.compute(x[:ni], v[:ni], ids[:ni], 0.0)
                r = ref.forces(x[:ni], v[:ni], ids[:ni], x, v, m, ids, 0.0, order=4)
                assert ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max() <= tol
                assert ref.relative_vector_error(f.jerk, r.jerk, r.jerk_abs).max() <= tol


@pytest.mark.parametrize("cfg", SHAPES,
                         ids=lambda c: f"li{c.li}-lj{c.lj}-w{c.w}{'jv' if c.jv else ''}"
                         f"-jt{c.jt}-{'local' if c.use_local else 'global'}")
@pytest.mark.parametrize("precision", ["double", "double-single"])
def test_shape_awkward_cases(backend, cfg, precision):
    """Every shape far from the origin (1e4), with eps2 = 0 and self-exclusion, and with
    neighbour lists that overflow a capacity of 4: forces, nearest neighbours (the data has
    no near ties), exact counts (no r^2 near h2) and the stored part of each list."""
    n, h2, cap = 389, 0.06, 4
    x, v, m = ref.plummer(n, seed=67)
    x = x + 1e4
    ids = np.arange(n) * 2 + 3
    with sapporo.Library(order=4, precision=precision, backend=backend,
                         nb_capacity=cap) as lib:
        table = LaunchTable([(10**9, cfg)], source="test")
        if backend == "cuda" and (cfg.w not in (1, 2, 4) or cfg.jv):  # OpenCL-only shapes
            return
        lib.set_launch_table(table)
        lib.set_j_particles(np.arange(n), ids, 0.0, m, x, v)
        for sel in (np.array([11]), np.array([11, 200]), np.arange(0, n, 3)):
            f = lib.compute(x[sel], v[sel], ids[sel], 0.0, h2=h2)
            r = ref.forces(x[sel], v[sel], ids[sel], x, v, m, ids, 0.0, order=4, h2=h2)
            tol = 1e-12 if precision == "double" else 1e-5
            assert ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max() <= tol
            assert ref.relative_vector_error(f.jerk, r.jerk, r.jerk_abs).max() <= tol
            assert (np.abs(f.pot - r.pot) / np.abs(r.pot)).max() <= tol
            # the data is chosen so that double-single must agree exactly here
            r2 = ((x[sel][:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
            r2[ids[sel][:, None] == ids[None, :]] = np.inf
            near = np.sort(r2, axis=1)
            assert (near[:, 1] - near[:, 0] > 1e-4 * near[:, 0]).all()
            assert (np.abs(r2 - h2) > 1e-4 * h2).all()
            np.testing.assert_array_equal(f.nn_index, r.nn_index)
            np.testing.assert_array_equal(f.neighbour_counts, [w.size for w in r.neighbours])
            assert f.overflow == any(w.size > cap for w in r.neighbours)
            for k in range(len(sel)):
                got = f.neighbours(k)
                assert got.size == min(cap, r.neighbours[k].size)
                assert np.all(np.diff(got) > 0) and set(got) <= set(r.neighbours[k].tolist())
        assert f.overflow  # the capacity was exceeded somewhere
