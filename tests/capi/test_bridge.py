"""The Python half of the C API without C: how g6_open resolves its settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from sapporo.capi_bridge import DEFAULT_NPIPES, Bridge, open_settings
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
    assert Bridge().npipes() == DEFAULT_NPIPES == 256


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
    assert open_settings()["devices"] is None  # negative count: any device
    monkeypatch.setenv("SAPPORO_DEVICES", "all")
    assert open_settings()["devices"] == "all"  # the variable wins over the file
    assert open_settings(devices=[3])["devices"] == [3]  # g6_open_special wins over both


def test_malformed_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SAPPORO_ORDER", "5")
    with pytest.raises(ConfigError, match="SAPPORO_ORDER"):
        open_settings()
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
