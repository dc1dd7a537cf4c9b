"""SAPPORO_* environment parsing and the sapporo2.config device file."""

from __future__ import annotations

import pytest

from sapporo import config
from sapporo.errors import ConfigError, SapporoError


def test_defaults_when_unset(monkeypatch):
    for name in ("BACKEND", "DEVICES", "ORDER", "PRECISION", "NPIPES", "CONFIG", "NB_CAPACITY",
                 "PROFILE_DIR", "NO_PROFILE", "SITE"):
        monkeypatch.delenv(f"SAPPORO_{name}", raising=False)
    s = config.from_environment()
    assert s.backend is None and s.devices is None and s.order is None
    assert s.precision is None and s.npipes is None and not s.no_profile


def test_values_are_parsed(monkeypatch):
    monkeypatch.setenv("SAPPORO_BACKEND", "CL")
    monkeypatch.setenv("SAPPORO_DEVICES", "0, 2")
    monkeypatch.setenv("SAPPORO_ORDER", "6")
    monkeypatch.setenv("SAPPORO_PRECISION", "ds")
    monkeypatch.setenv("SAPPORO_NPIPES", "128")
    monkeypatch.setenv("SAPPORO_NO_PROFILE", "1")
    s = config.from_environment()
    assert s.backend == "opencl" and s.devices == [0, 2] and s.order == 6
    assert s.precision == "double-single" and s.npipes == 128 and s.no_profile


@pytest.mark.parametrize(
    "name,value",
    [("BACKEND", "metal"), ("DEVICES", "a,b"), ("DEVICES", "-1"), ("ORDER", "four"),
     ("ORDER", "4.0"), ("PRECISION", "quad"), ("NPIPES", "1e3"), ("NB_CAPACITY", "x"),
     ("SPIN_US", "fast"), ("SMALL_PAIRS", "many")],
)
def test_malformed_values_name_the_variable(monkeypatch, name, value):
    monkeypatch.setenv(f"SAPPORO_{name}", value)
    with pytest.raises(ConfigError, match=f"SAPPORO_{name}"):
        config.from_environment()


@pytest.mark.parametrize(
    "name,value,field,expected",
    [("NPIPES", "0", "npipes", 1), ("NPIPES", "100000", "npipes", config.MAX_NPIPES),
     ("NPIPES", "-3", "npipes", 1), ("NB_CAPACITY", "0", "nb_capacity", 1),
     ("NB_CAPACITY", "99999999999", "nb_capacity", config.MAX_NB_CAPACITY),
     ("SPIN_US", "-5", "spin_us", 0), ("SPIN_US", "5000000", "spin_us", config.MAX_SPIN_US),
     ("SMALL_PAIRS", "-1", "small_pairs", 0), ("ORDER", "5", "order", 6),
     ("ORDER", "3", "order", 4), ("ORDER", "1", "order", 2), ("ORDER", "-4", "order", 2),
     ("ORDER", "10", "order", 8)],
)
def test_out_of_range_values_are_clamped_with_one_warning(monkeypatch, caplog, name, value,
                                                           field, expected):
    """A number outside its range becomes the nearest valid one (odd orders the next even
    one), with one warning naming the variable however often the settings are read."""
    monkeypatch.setattr(config, "_warned", set())
    monkeypatch.setenv(f"SAPPORO_{name}", value)
    with caplog.at_level("WARNING", logger="sapporo.config"):
        for _ in range(3):
            assert getattr(config.from_environment(), field) == expected
    warnings = [r.getMessage() for r in caplog.records if r.name == "sapporo.config"]
    assert len(warnings) == 1, warnings
    assert f"SAPPORO_{name}={value}" in warnings[0] and f"using {expected}" in warnings[0]


def test_values_in_range_are_kept_without_warning(monkeypatch, caplog):
    monkeypatch.setattr(config, "_warned", set())
    for name, (lo, hi) in config.INT_RANGES.items():
        for value in (lo, hi if hi is not None else 10**12):
            monkeypatch.setenv(name, f" {value} ")
            assert config.int_setting(name) == value
    monkeypatch.setenv("SAPPORO_ORDER", "8")
    with caplog.at_level("WARNING", logger="sapporo.config"):
        assert config.from_environment().order == 8
    assert not caplog.records


def test_spin_us(monkeypatch):
    monkeypatch.delenv("SAPPORO_SPIN_US", raising=False)
    assert config.from_environment().spin_us is None
    monkeypatch.setenv("SAPPORO_SPIN_US", "0")
    assert config.from_environment().spin_us == 0
    monkeypatch.setenv("SAPPORO_SPIN_US", "250")
    assert config.from_environment().spin_us == 250


def test_config_error_is_a_sapporo_error():
    assert issubclass(ConfigError, SapporoError) and issubclass(ConfigError, ValueError)


def test_auto_backend_and_all_devices():
    assert config.parse_backend("auto") is None
    assert config.parse_devices("ALL") == "all"


def test_sapporo2_config(tmp_path):
    f = tmp_path / "sapporo2.config"
    f.write_text("2\n1\n0\n")
    assert config.read_sapporo2_config(str(f)) == [1, 0]
    f.write_text("-3\n")
    assert config.read_sapporo2_config(str(f)) == 3  # any three devices (sapporo2)
    f.write_text("0\n")
    assert config.read_sapporo2_config(str(f)) == 0  # all of them (sapporo2)
    f.write_text("# two devices\n2   # count\n3\n")
    with pytest.raises(ConfigError, match="lists 1"):
        config.read_sapporo2_config(str(f))
    f.write_text("two\n")
    with pytest.raises(ConfigError, match="integers"):
        config.read_sapporo2_config(str(f))
    with pytest.raises(ConfigError, match="cannot read"):
        config.read_sapporo2_config(str(tmp_path / "missing"))
