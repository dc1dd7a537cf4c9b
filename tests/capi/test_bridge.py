"""The Python half of the C API without C: how g6_open resolves its settings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sapporo.capi.bridge import DEFAULT_NPIPES, MAX_NPIPES, Bridge, open_settings, read_npipes

from sapporo.errors import ConfigError, SapporoError


def _set_j(bridge: Bridge, ids: np.ndarray, m: np.ndarray, x: np.ndarray, v: np.ndarray,
           a: np.ndarray | None = None, jerk: np.ndarray | None = None) -> None:
    """j-particles at addresses ``ids`` (times 0) as the C half hands them over: raw
    records (layout.h: x|m, v|t, a, jerk, ...)."""
    rec = np.zeros((len(ids), 8, 4))
    rec[:, 0, :3], rec[:, 0, 3], rec[:, 1, :3] = x, m, v
    given = 1
    for q, d in ((2, a), (3, jerk)):
        if d is not None:
            rec[:, q, :3], given = d, q
    bridge.set_j_records(np.asarray(ids, np.int32), np.asarray(ids, np.int32), rec, given)


@pytest.fixture(autouse=True)
def _no_sapporo_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("ORDER", "PRECISION", "BACKEND", "DEVICES", "CONFIG", "NPIPES"):
        monkeypatch.delenv(f"SAPPORO_{name}", raising=False)
    monkeypatch.chdir(tmp_path)


def test_defaults() -> None:
    assert open_settings() == {
        "order": 4, "precision": "double-single", "backend": None, "devices": None,
    }
    assert Bridge().npipes() == DEFAULT_NPIPES == 128


def test_environment_then_explicit_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAPPORO_ORDER", "6")
    monkeypatch.setenv("SAPPORO_PRECISION", "double")
    monkeypatch.setenv("SAPPORO_BACKEND", "opencl")
    monkeypatch.setenv("SAPPORO_NPIPES", "16384")
    assert open_settings() == {
        "order": 6, "precision": "double", "backend": "opencl", "devices": None,
    }
    assert open_settings(order=2, precision="ds", backend="auto", devices=[1]) == {
        "order": 2, "precision": "double-single", "backend": None, "devices": [1],
    }
    assert Bridge().npipes() == 16384


def test_sapporo2_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "sapporo2.config").write_text("2\n1\n0\n")
    assert open_settings()["devices"] == [1, 0]  # ./sapporo2.config
    other = tmp_path / "other.config"
    other.write_text("-1\n")
    monkeypatch.setenv("SAPPORO_CONFIG", str(other))
    assert open_settings()["devices"] == [0]  # negative count -n: any n devices
    other.write_text("0\n")
    assert open_settings()["devices"] == "all"  # as many as there are (sapporo2)
    monkeypatch.setenv("SAPPORO_DEVICES", "all")
    assert open_settings()["devices"] == "all"  # the variable wins over the file
    assert open_settings(devices=[3])["devices"] == [3]  # g6_open_special wins over both


def test_any_n_devices(caplog: pytest.LogCaptureFixture) -> None:
    """sapporo2's "any n devices": the backend's first n, fewer (said) where it has fewer."""
    from sapporo.backend import get_backend

    available = len(get_backend(None).devices())
    assert open_settings(devices=1)["devices"] == [0]
    assert open_settings(devices=0)["devices"] == "all"
    with caplog.at_level("WARNING", logger="sapporo.capi.bridge"):
        got = open_settings(devices=available + 2)["devices"]
    assert got == list(range(available))
    assert f"{available + 2} devices asked for" in caplog.text


def test_malformed_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SAPPORO_ORDER", "five")
    with pytest.raises(ConfigError, match="SAPPORO_ORDER"):
        open_settings()
    monkeypatch.setenv("SAPPORO_ORDER", "5")  # a number out of range: the nearest order up
    assert open_settings()["order"] == 6
    monkeypatch.delenv("SAPPORO_ORDER")
    (tmp_path / "sapporo2.config").write_text("2\n0\n")
    with pytest.raises(ConfigError, match="says 2 devices"):
        open_settings()


def test_calls_before_open_raise() -> None:
    bridge = Bridge()
    with pytest.raises(SapporoError, match="not open"):
        bridge.set_time(0.0)
    with pytest.raises(SapporoError, match="no force call pending"):
        bridge.finish(1)
    with pytest.raises(SapporoError, match="no force result"):
        bridge.read_neighbours()
    bridge.close()  # idempotent, also when never opened


def test_negative_h2_of_one_particle_gives_an_empty_list() -> None:
    """GRAPE-6: neighbours have r^2 < h2[i]; a negative h2[i] among positive ones is no
    error, just an empty list for that particle (all h2 <= 0: lists off)."""
    bridge = Bridge()
    bridge.open(order=4, precision="double")
    try:
        x = np.array([[0.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0]])
        z = np.zeros((3, 3))
        ids = np.arange(3, dtype=np.int32)
        _set_j(bridge, ids, np.ones(3), x, z)
        bridge.set_time(0.0)
        bridge.start(3, ids, x, z, None, 0.0, np.array([4.0, -1.0, 4.0]))
        res = bridge.finish(3)
        offsets, counts, nb_ids, overflow = bridge.read_neighbours()
        assert counts.tolist() == [2, 0, 2] and not overflow
        assert nb_ids[offsets[0]:offsets[1]].tolist() == [1, 2]
        assert res.pot[1] == pytest.approx(-1.0 - 1.0 / np.sqrt(2.0), rel=1e-14)
    finally:
        bridge.close()


def test_npipes_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """SAPPORO_NPIPES: 1 .. MAX_NPIPES, a number outside clamped; the count never depends
    on the other variables."""
    monkeypatch.setenv("SAPPORO_BACKEND", "nonsense")
    assert read_npipes() == DEFAULT_NPIPES
    for good in ("1", str(MAX_NPIPES), " 64 "):
        monkeypatch.setenv("SAPPORO_NPIPES", good)
        assert read_npipes() == int(good)
    for far, clamped in (("0", 1), ("-3", 1), (str(MAX_NPIPES + 1), MAX_NPIPES),
                         ("99999999999", MAX_NPIPES)):
        monkeypatch.setenv("SAPPORO_NPIPES", far)
        assert read_npipes() == clamped
    for bad in ("1e3", "lots"):
        monkeypatch.setenv("SAPPORO_NPIPES", bad)
        with pytest.raises(ConfigError, match=f"SAPPORO_NPIPES: expected an integer from 1 "
                                              f"to {MAX_NPIPES}, got '{bad}'"):
            read_npipes()
    with pytest.raises(ConfigError, match="SAPPORO_NPIPES"):
        Bridge().open()  # refused at open, before any device work


def test_npipes_limits_match_sapporo_h() -> None:
    header = (Path(__file__).resolve().parents[2] / "capi" / "sapporo.h").read_text()
    assert f"#define SAPPORO_DEFAULT_NPIPES {DEFAULT_NPIPES}\n" in header
    assert f"#define SAPPORO_MAX_NPIPES     {MAX_NPIPES}\n" in header


def test_binary_config_file_names_the_file(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    cfg = tmp_path / "binary.config"
    cfg.write_bytes(b"\xff\xfe\x00\x01" * 64)
    monkeypatch.setenv("SAPPORO_CONFIG", str(cfg))
    with pytest.raises(ConfigError, match=f"{cfg}: not a text file"):
        open_settings()


def test_non_finite_h2_means_no_list_and_forces_all_the_same() -> None:
    """h2 only shapes neighbour lists: NaN or inf gives that particle no list (all of them:
    lists off), the forces are those of a call without h2; 1e300 lists everyone."""
    bridge = Bridge()
    bridge.open(order=4, precision="double")
    try:
        x = np.array([[0.0, 0, 0], [1.0, 0, 0]])
        z = np.zeros((2, 3))
        ids = np.arange(2, dtype=np.int32)
        _set_j(bridge, ids, np.ones(2), x, z)
        bridge.set_time(0.0)
        bridge.start(2, ids, x, z, None, 0.0, None)
        plain = bridge.finish(2)
        for h2, counts in (([np.nan, np.nan], [0, 0]), ([np.inf, -np.inf], [0, 0]),
                           ([1e300, np.nan], [1, 0]), ([np.nan, 2.0], [0, 1])):
            bridge.start(2, ids, x, z, None, 0.0, np.array(h2))
            res = bridge.finish(2)
            np.testing.assert_array_equal(res.acc, plain.acc)
            np.testing.assert_array_equal(res.pot, plain.pot)
            assert bridge.read_neighbours()[1].tolist() == counts, h2
    finally:
        bridge.close()


def test_open_takes_the_device_of_the_local_rank(monkeypatch, tmp_path):
    """Under an MPI launcher, each rank's g6_open takes the device of its rank on the node,
    unless SAPPORO_DEVICES or a sapporo2.config names devices."""
    import sapporo.parallel.launcher

    monkeypatch.chdir(tmp_path)  # no ./sapporo2.config
    monkeypatch.delenv("SAPPORO_DEVICES", raising=False)
    monkeypatch.delenv("SAPPORO_CONFIG", raising=False)
    monkeypatch.setattr(sapporo.parallel.launcher, "launcher_device", lambda backend=None: 3)
    assert open_settings()["devices"] == [3]
    monkeypatch.setenv("SAPPORO_DEVICES", "1")
    assert open_settings()["devices"] == [1]
    monkeypatch.delenv("SAPPORO_DEVICES")
    monkeypatch.setattr(sapporo.parallel.launcher, "launcher_device", lambda backend=None: None)
    assert open_settings()["devices"] is None


def test_c_buffer_matches_the_layout() -> None:
    """The C half buffers j-particles as the library's raw records: as many as order 8
    uses, in the rows of sapporo/layout.h, and refuses positions at the same limit as
    sapporo.core.validate."""
    import re
    from pathlib import Path

    from sapporo.capi import bridge

    from sapporo.core import engine as native
    from sapporo.core import layout, library, validate

    shim = (Path(bridge.__file__).with_name("shim.c")).read_text()
    engine = layout.LAYOUT_HEADER.with_name("engine_api.h").read_text()
    core = (Path(library.__file__).with_name("_engine.c")).read_text()
    # the limits and the record count come from layout.h, for C and Python alike
    assert "#define JB_RECORDS RAW_N_ORDER8" in engine and bridge.JB_RECORDS == layout.raw_n(8)
    assert "#define COORD_LIMIT LIMIT_COORD" in engine and validate.COORD_LIMIT == 1e150
    assert library.MAX_ID == 2**31 - 1 == layout.LAYOUT["LIMIT_MAX_ID"]
    assert "LIMIT_MAX_ID" in core and "2147483647" not in core
    assert float(re.search(r"#define ENGINE_FLT_MIN (\S+)", core).group(1)) == library.FLT_MIN
    # the one packer (engine_api.h's put_record, which shim.c and g5.c call too), through
    # the engine's pack_j: each column in its layout.h record, .w zero past x|m and v|t
    L = layout.LAYOUT
    rng = np.random.default_rng(1)
    names = ("x", "v", "a", "jerk", "snap", "crackle", "pop", "d5")
    cols = {name: rng.normal(size=(3, 3)) for name in names}
    t, m = rng.random(3), rng.random(3)
    out = np.full((3, bridge.JB_RECORDS, 4), np.nan)
    native.load().pack_j(out, t, m, *(cols[k] for k in names))
    for name, rec in zip(names, ("RAW_XM", "RAW_VT", "RAW_A", "RAW_J", "RAW_S", "RAW_C",
                                 "RAW_P", "RAW_D5"), strict=True):
        np.testing.assert_array_equal(out[:, L[rec], :3], cols[name], err_msg=name)
    np.testing.assert_array_equal(out[:, L["RAW_XM"], 3], m)
    np.testing.assert_array_equal(out[:, L["RAW_VT"], 3], t)
    assert not out[:, 2:, 3].any()
    short = np.full((3, 2, 4), np.nan)  # GRAPE-5's two records; no velocity: zero
    native.load().pack_j(short, t, m, cols["x"], np.zeros((3, 3)), *[None] * 6)
    np.testing.assert_array_equal(short[:, 0], out[:, 0])
    assert not short[:, 1, :3].any()
    with pytest.raises(TypeError, match="pack_j"):  # a derivative past its records
        native.load().pack_j(short, t, m, cols["x"], cols["v"], cols["a"], *[None] * 5)
    assert "put_record(" in shim and "put_record(" in core


def test_records_path_matches_the_python_api() -> None:
    """set_j_records (the C buffer's raw records) stores what the Python API's
    set_j_particles stores: the same forces, bitwise."""
    rng = np.random.default_rng(3)
    n = 40
    x, v, a, j = (rng.normal(size=(n, 3)) for _ in range(4))
    m = rng.random(n) / n
    ids = np.arange(n, dtype=np.int32)
    out = []
    for packed in (False, True):
        bridge = Bridge()
        bridge.open(order=4, precision="double")
        try:
            if packed:
                _set_j(bridge, ids, m, x, v, a, j)
            else:
                bridge._open_lib().set_j_particles(ids, ids, 0.0, m, x, v, a=a, jerk=j)
            bridge.set_time(0.01)
            bridge.start(n, ids[:5], x[:5], v[:5], None, 1e-4, None)
            out.append(bridge.finish(5))
        finally:
            bridge.close()
    np.testing.assert_array_equal(out[0].acc, out[1].acc)
    np.testing.assert_array_equal(out[0].jerk, out[1].jerk)


def test_grape5_contexts_are_separate_libraries() -> None:
    """GRAPE-5 contexts: one order-2 library each; forces from [0, nj) with nothing
    excluded; a context not opened is an error."""
    from sapporo.capi.bridge import JB_RECORDS, _store

    from sapporo.errors import NonFiniteError
    from sapporo.reference import forces, plummer

    bridge = Bridge()
    with pytest.raises(SapporoError, match="context 5 is not open"):
        bridge.g5_lib(5)
    x, _, m = plummer(64, seed=1)
    try:
        libs = [bridge.g5_open(c) for c in (0, 5)]
        assert libs[0] is not libs[1] and bridge.g5_open(5) is libs[1]
        assert libs[0].order == 2
        rec = np.zeros((64, JB_RECORDS, 4))
        rec[:, 0, :3], rec[:, 0, 3] = x, m
        _store(libs[1], np.arange(64), np.zeros(64, dtype=np.int64), rec, 1)
        res = bridge.g5_force(5, 40, x[:8], 1e-4)
        ref = forces(x[:8], None, np.arange(8) + 100, x[:40], None, m[:40], np.arange(40),
                     1e-4, order=2)
        assert np.allclose(res.acc, ref.acc, rtol=1e-5) and np.allclose(res.pot, ref.pot,
                                                                        rtol=1e-5)
        with pytest.raises(NonFiniteError, match="GRAPE-5 excludes no pair") as info:
            bridge.g5_force(5, 40, x[:8], 0.0)
        assert "(id" not in str(info.value)
    finally:
        for c in (0, 5):
            bridge.g5_close(c)
    assert bridge.g5 == {}
