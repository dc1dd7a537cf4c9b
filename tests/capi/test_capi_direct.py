"""The C API's direct path: block steps run in C on the native engine, from plans Python makes.

A block-step sequence (tests/capi/direct_ab.c; at order 8 through the calls with jerks and
crackle) walks through what makes new plans (a new address, neighbour lists, a field point,
part of the j-range, a derivative the predictor did not read yet) and what is refused
(bad input, a non-finite force); it prints every result bit for bit, and two runs must
print the same.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from sapporo.capi.bridge import Bridge

from sapporo.core.launch import NI_CHUNK

if TYPE_CHECKING:
    from conftest import CApi


def _run(capi: CApi, tmp_path: Path, order: int, precision: str, **env: str):
    exe = capi.program("direct_ab.c")
    proc = capi.run(exe, order, precision, cwd=tmp_path, env=capi.env(**env))
    calls = re.search(r"direct_calls (\d+)", proc.stderr)
    assert calls, proc.stderr
    return proc.stdout, int(calls.group(1))


@pytest.mark.parametrize("order, precision", [(4, "double-single"), (4, "double"),
                                              (6, "double-single"), (2, "double"),
                                              (8, "double")])
def test_direct_path_sequence(capi: CApi, tmp_path: Path, order: int, precision: str) -> None:
    out, calls = _run(capi, tmp_path, order, precision)
    _check_sequence(out, calls)
    assert _run(capi, tmp_path, order, precision) == (out, calls)  # the same bits again


@pytest.mark.parametrize("order", [4, 8])
def test_direct_path_on_cuda(capi: CApi, tmp_path: Path, order: int,
                             cuda_env: dict[str, str]) -> None:
    """The C API's block steps on CUDA: the same sequence, run by the engine through the
    CUDA driver's entry points (a GPU's, or the emulated driver over kernels_cuda/ compiled
    for the CPU), with no Python per step; the forces of OpenCL's run to double's
    rounding."""
    cl, _ = _run(capi, tmp_path, order, "double", SAPPORO_BACKEND="opencl")
    proc = capi.run(capi.program("direct_ab.c"), order, "double", cwd=tmp_path,
                    env=capi.env(**cuda_env))
    assert "PYTHONPATH" not in cuda_env or "cudaemu: the emulated CUDA" in proc.stderr
    cu, calls = proc.stdout, int(re.search(r"direct_calls (\d+)", proc.stderr).group(1))
    _check_sequence(cu, calls)
    _same_forces(cl, cu)


def test_two_devices(capi: CApi, tmp_path: Path, two_pocl_devices: None) -> None:
    """The same sequence on two devices (PoCL's two CPU devices, opened through
    ``SAPPORO_DEVICES``): the engine runs the block steps on both without Python, with the
    forces of one device to double's rounding; on device memory too."""
    one, _ = _run(capi, tmp_path, 4, "double", SAPPORO_NB_CAPACITY="4")
    # device 1 exists only when PoCL made two: the open fails otherwise
    two = {"POCL_DEVICES": "pthread pthread", "SAPPORO_BACKEND": "opencl",
           "SAPPORO_DEVICES": "0,1", "SAPPORO_NB_CAPACITY": "4"}
    for memory in ("auto", "device"):
        out, calls = _run(capi, tmp_path, 4, "double", **two, SAPPORO_NATIVE_MEMORY=memory)
        assert "read_neighbour_list 1" in out  # lists merged past the capacity
        _check_sequence(out, calls)
        _same_forces(one, out)


def test_overflowing_lists(capi: CApi, tmp_path: Path) -> None:
    """Lists beyond a capacity of 4: stored ids, exact counts and the overflow flag."""
    out, calls = _run(capi, tmp_path, 4, "double", SAPPORO_NB_CAPACITY="4")
    assert "read_neighbour_list 1" in out  # an overflow
    assert calls >= 60


def _same_forces(out_a: str, out_b: str) -> None:
    """Two runs of the sequence in double: the same forces to double's rounding (the sums
    in another order), the same nearest neighbours."""
    values = [[ln.split() for ln in out.splitlines() if ln.startswith(("acc ", "pot "))]
              for out in (out_a, out_b)]
    assert len(values[0]) == len(values[1]) > 100
    for a_row, b_row in zip(*values, strict=True):
        assert a_row[:2] == b_row[:2]
        if a_row[0] == "pot":  # pot i value nn id r2: the nearest neighbour exact
            assert a_row[3:] == b_row[3:]
            a_row, b_row = a_row[:3], b_row[:3]
        a, b = (np.array([float.fromhex(w) for w in row[2:]]) for row in (a_row, b_row))
        assert np.abs(a - b).max() <= 1e-12 * max(np.abs(a).max(), 1e-300)


def _check_sequence(out_c: str, calls_c: int) -> None:
    assert calls_c >= 60, f"only {calls_c} of 80 force calls ran on the direct path"
    # what the sequence is made to meet
    assert "step 70 ni 100 nj 701 rc -1" in out_c and "x: non-finite value" in out_c
    assert "step 75 ni 7 nj 701 rc -5" in out_c and "non-finite force on i-particle 0" in out_c
    blocks = dict(re.findall(r"^step (\d+) .*?\n((?:(?!step ).*\n)*)", out_c, re.M))
    lengths = {k: [int(n) for n in re.findall(r"^list \d+ rc \d len (\d+)", b, re.M)]
               for k, b in blocks.items()}
    assert any(lengths["20"]) and any(lengths["27"]) and any(lengths["44"]), "asked for lists"
    assert lengths["28"][1] == 0 and any(lengths["28"]), "a negative radius: an empty list"
    assert lengths["21"] == [0] * 7 and lengths["23"] == [0] * 33, "no lists asked for"
    assert lengths["29"] == [0] * 3, "no positive radius: no lists"
    assert out_c.count("\nacc 0 ") == 78


def test_many_parts_combine(capi: CApi, tmp_path: Path, monkeypatch) -> None:
    """More j-parts than the reduce kernel's 32 lanes (a tuning profile that asks for many
    small parts, as a CPU with many cores gets): the direct path combines them all."""
    import json
    from dataclasses import asdict

    from sapporo.backend import get_backend
    from sapporo.core.launch import NI_CHUNK, default_table, load_table, profile_name, split_j
    from sapporo.errors import BackendError

    try:
        info = get_backend("opencl").devices()[0]
    except (BackendError, IndexError) as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for precision in ("double-single", "double"):
        table = default_table(info, 4, precision)
        entries = []
        for ni_max, cfg in table.entries:
            many = asdict(cfg) | {"groups_per_cu": 64, "min_jchunk": 8}
            entries.append({"ni_max": ni_max if ni_max < NI_CHUNK else NI_CHUNK, **many})
        (profiles / profile_name(info, 4, precision)).write_text(
            json.dumps({"entries": entries}))
    out_few, _ = _run(capi, tmp_path, 4, "double")
    out_c, calls = _run(capi, tmp_path, 4, "double", SAPPORO_PROFILE_DIR=str(profiles))
    assert calls >= 60
    _same_forces(out_few, out_c)  # as with the default parts, to double's rounding
    # the profile is the one used, and it cuts a block of 7 into more parts than lanes
    monkeypatch.setenv("SAPPORO_PROFILE_DIR", str(profiles))
    cfg = load_table(info, 4, "double").for_ni(7)
    assert split_j(cfg, info, 8, 700)[0] > 32


def test_engine_and_plans_from_python() -> None:
    """The Python half: the C half gets the library's engine and its function table; the
    library's plans for a CPU device, none beyond the stored addresses."""
    from sapporo.backend import get_backend
    from sapporo.errors import BackendError

    try:
        devices = get_backend("opencl").devices()
    except BackendError as exc:
        pytest.skip(f"OpenCL unusable here: {exc}")
    if not devices or devices[0].device_type != "cpu":
        pytest.skip("the engine is for devices that compute on host memory (CPUs)")
    bridge = Bridge()
    bridge.open(order=4, precision="double-single", backend="opencl", devices=[0])
    try:
        lib = bridge.lib
        api, engine = bridge.engine()
        import ctypes

        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        assert api != 0 and engine == get(lib._engine.handle, b"sapporo.core._engine.Engine")
        n = 64
        rng = np.random.default_rng(3)
        lib.set_j_particles(np.arange(n), np.arange(n), 0.0, np.full(n, 1 / n),
                            rng.normal(size=(n, 3)), rng.normal(size=(n, 3)))
        plans = lib._plans(False)  # one device: a plan per entry of its launch table
        dev = lib._devs[0]
        (plan,) = [p for p in plans if p["ni_lo"] <= 5 <= p["ni_hi"] and not p["small"]]
        assert plan["n_stored_at"] == lib._stored.ctypes.data and lib.n_stored == n
        assert plan["ni_pad_max"] >= 5 and plan["dev"] == 0 and plan["j_cap"] >= n
        assert set(plan["entry"]) == {"set_arg", "enqueue", "flush", "finish", "event_info",
                                      "release", "write", "read", "profiling_info"}
        if dev.h_raw is not None:  # host memory: the engine writes the device's records
            assert plan["memory"] == 0 and plan["dev_raw"] == dev.h_raw.ctypes.data
        else:  # device memory: it queues copies into the device's buffers
            assert plan["memory"] == 1 and plan["dev_raw"] == dev.j["raw"].native()
            assert plan["out_buf"] and plan["idata_buf"] and plan["queue"]
            assert plan["launches"][2] is not None and plan["scatter_max"] > 0  # scatter
        assert plan["call_args"][:2] == (dev.t_arg, dev.eps2_arg)
        # every block size up to the chunk has a plan, whose buffers hold its largest block
        for ni in range(1, NI_CHUNK + 1):
            (p,) = [p for p in plans if p["ni_lo"] <= ni <= p["ni_hi"] and not p["small"]]
            assert p["ni_pad_max"] >= ni and dev.table.for_ni(ni) == dev.table.for_ni(
                p["ni_lo"])
        assert all(p["gen"] == dev.gen_cell[0] for p in plans)
        assert plan["gen_at"] == dev.gen_cell.ctypes.data
        assert plan["lgen_at"] == lib._lgen.ctypes.data
        assert plan["ni_args"][1] == dev.ni_arg
        lib._engine_ready()
        assert lib._engine.shape(n + 1, 5, False) is None  # more j-addresses than stored
        (shape,) = lib._engine.shape(n, 5, False)
        assert shape["ni_pad"] >= 5 and shape["parts"] >= 1
        # a new launch table: no plan holds until the next is made
        lgen = int(lib._lgen[0])
        lib.set_launch_table(dev.table)
        assert lib._lgen[0] > lgen
    finally:
        bridge.close()
