"""``sapporo info`` and the CLI dispatcher."""

from __future__ import annotations

import json
import subprocess
import sys

from sapporo.cli import main


def test_info_lists_devices_and_selection(capsys):
    assert main(["info", "--backend", "opencl"]) == 0
    out = capsys.readouterr().out
    assert "[opencl]" in out and "compute units" in out and "selected: opencl" in out


def test_info_reports_the_c_api(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))  # no C library built there
    assert main(["info", "--backend", "opencl"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("C API: ")]
    assert line == ["C API: not built for this version (sapporo capi build)"]


def test_info_reports_the_native_engine(capsys):
    from sapporo.core import engine

    assert main(["info", "--backend", "opencl"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines()
            if ln.startswith("block steps: ")]
    assert line == [f"block steps: {engine.status()}"]
    assert engine.status().startswith("native (_engine")


def test_info_json(capsys):
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {b["name"] for b in data["backends"]}
    assert {"opencl", "cuda"} <= names
    assert data["selected"]["name"]
    assert data["native"].startswith("native (")


def test_info_unusable_backend_says_why(capsys, monkeypatch):
    import sapporo.backend as be

    monkeypatch.setattr(be, "_cache", {"cuda": "PyCUDA is not importable: x"})
    assert main(["info", "--backend", "cuda"]) == 1
    out = capsys.readouterr().out
    assert "selected: none" in out and "pocl-binary-distribution" in out


def test_bad_config_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("SAPPORO_BACKEND", "metal")
    assert main(["info"]) == 2  # a configuration error is a usage error
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "SAPPORO_BACKEND" in err[0]


def test_console_script_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "sapporo.cli", "--version"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("sapporo ")


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out
