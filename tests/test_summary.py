"""``summary.json``: one writer, one reader, the same shared keys from every command."""

from __future__ import annotations

import json
import math

import pytest

from sapporo.cli import main
from sapporo.errors import SapporoError
from sapporo.summary import SHARED, SUMMARY_FILE, read_summary, write_summary

#: Every command that writes a summary, at a tiny size, quiet and without plots.
COMMANDS = {
    "run": ["run", "--n", "48", "--eps", "0.01", "--t-end", "0.125", "--precision", "double"],
    "pm": ["pm", "--n", "300", "--grid", "48", "--t-end", "0.04", "--dt", "0.02",
           "--precision", "double"],
}

FIELDS = {"device": "cpu", "backend": "opencl", "precision": "double", "energy_error": 1e-9,
          "max_energy_error": 2e-9, "energy_initial": -0.25, "energy_final": -0.25,
          "wall_seconds": 0.5}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_summary_reads_with_one_reader(command, tmp_path, capsys):
    out = tmp_path / command
    assert main([*COMMANDS[command], "--out", str(out), "--quiet", "--no-plots"]) == 0
    assert capsys.readouterr().out == ""
    s = read_summary(out)
    assert set(SHARED) <= set(s)
    assert s["command"] == command and s["precision"] == "double"
    assert s["backend"] in ("opencl", "cuda") and isinstance(s["device"], str) and s["device"]
    assert 0 <= s["energy_error"] <= s["max_energy_error"] < 1e-2
    assert s["energy_error"] == pytest.approx(
        abs(s["energy_final"] - s["energy_initial"]) / abs(s["energy_initial"]), rel=1e-9)
    assert math.isfinite(s["wall_seconds"]) and s["wall_seconds"] > 0
    assert not list(out.glob("*.png"))


def test_write_then_read(tmp_path):
    path = write_summary(tmp_path, "run", {**FIELDS, "steps": 7})
    assert path == tmp_path / SUMMARY_FILE
    data = read_summary(path)
    assert data == {"command": "run", **FIELDS, "steps": 7}
    assert list(json.loads(path.read_text()))[0] == "command"


@pytest.mark.parametrize("key", sorted(set(SHARED) - {"command"}))
def test_writer_refuses_a_missing_shared_key(tmp_path, key):
    fields = {k: v for k, v in FIELDS.items() if k != key}
    with pytest.raises(SapporoError, match=key):
        write_summary(tmp_path, "pm", fields)
    assert not (tmp_path / SUMMARY_FILE).exists()


@pytest.mark.parametrize("value", ["1e-9", None, True, -1.0])
def test_writer_refuses_an_energy_error_that_is_not_a_number(tmp_path, value):
    with pytest.raises(SapporoError, match="energy_error"):
        write_summary(tmp_path, "pm", {**FIELDS, "energy_error": value})


@pytest.mark.parametrize("text, words", [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({"energy": {"relative_error_final": 1e-9}}), "lacks command"),
])
def test_reader_names_the_file_and_the_problem(tmp_path, text, words):
    path = tmp_path / SUMMARY_FILE
    if text is not None:
        path.write_text(text)
    with pytest.raises(SapporoError, match=words) as info:
        read_summary(tmp_path)
    assert str(path) in str(info.value)
