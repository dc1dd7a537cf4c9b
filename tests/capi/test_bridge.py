"""The Python half of the C API without C: how g6_open resolves its settings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sapporo.capi.bridge import DEFAULT_NPIPES, MAX_NPIPES, Bridge, open_settings, read_npipes

from sapporo.errors import ConfigError, SapporoError


@pytest.fixture(autouse=True)
def _no_sapporo_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("ORDER", "PRECISION", "BACKEND", "DEVICES", "CONFIG", "NPIPES"):
        monkeypatch.delenv(f"SAPPORO_{name}", raising=False)
    monkeypatch.chdir(tmp_path)


def test_defaults() -> None:
    assert open_settings() == {
        "order": 4, "precision": "double-single", "backend": None, "devices": None,
    }
    assert read_npipes() == DEFAULT_NPIPES == 128


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
    assert read_npipes() == 16384


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
        bridge.engine()
    bridge.close()  # idempotent, also when never opened


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

    from sapporo.core import layout, library, validate

    shim = (Path(bridge.__file__).with_name("shim.c")).read_text()
    engine = layout.LAYOUT_HEADER.with_name("engine_api.h").read_text()
    core = (Path(library.__file__).with_name("_engine.c")).read_text()
    # the limits and the record count come from layout.h, for C and Python alike
    assert "#define JB_RECORDS RAW_N_ORDER8" in engine
    assert "#define COORD_LIMIT LIMIT_COORD" in engine and validate.COORD_LIMIT == 1e150
    assert library.MAX_ID == 2**31 - 1 == layout.LAYOUT["LIMIT_MAX_ID"]
    assert "LIMIT_MAX_ID" in core and "2147483647" not in core
    assert float(re.search(r"#define ENGINE_FLT_MIN (\S+)", engine).group(1)) == library.FLT_MIN
    # the one packer (engine_api.h's put_record, which shim.c and g5.c call too), through
    # the engine's store into the host mirror: each column in its layout.h record, .w zero
    # past x|m and v|t
    import sapporo

    L = layout.LAYOUT
    rng = np.random.default_rng(1)
    names = ("x", "v", "a", "jerk", "snap", "crackle", "pop", "d5")
    cols = {name: rng.normal(size=(3, 3)) for name in names}
    t, m = rng.random(3), rng.random(3)
    with sapporo.Library(order=8, precision="double") as lib:
        lib.set_j_particles(np.arange(3), np.arange(3), t, m, *(cols[k] for k in names))
        out = lib._raw[:3]
        for name, rec in zip(names, ("RAW_XM", "RAW_VT", "RAW_A", "RAW_J", "RAW_S", "RAW_C",
                                     "RAW_P", "RAW_D5"), strict=True):
            np.testing.assert_array_equal(out[:, L[rec], :3], cols[name], err_msg=name)
        np.testing.assert_array_equal(out[:, L["RAW_XM"], 3], m)
        np.testing.assert_array_equal(out[:, L["RAW_VT"], 3], t)
        assert not out[:, 2:, 3].any()
    assert "put_record(" in shim and "put_record(" in core


def test_grape5_contexts_are_separate_libraries() -> None:
    """GRAPE-5 contexts: one order-2 library each (their forces: tests/capi/test_g5.py),
    without ids and without the companion's twin (a tree code's threads compute at once)."""
    bridge = Bridge()
    try:
        libs = [bridge.g5_open(c) for c in (0, 5)]
        assert libs[0] is not libs[1] and bridge.g5_open(5) is libs[1]
        assert libs[0].order == 2 and not libs[0].ids
        assert not any(d.ctx.twin for lib in libs for d in lib._devs)
        assert all(bridge.engine(5)) and 5 in bridge._engines  # held for C until closed
        bridge.g5_close(5)
        assert libs[1]._closed and bridge.g5_open(5) is not libs[1]
        assert 5 not in bridge._engines
    finally:
        for c in (0, 5):
            bridge.g5_close(c)
