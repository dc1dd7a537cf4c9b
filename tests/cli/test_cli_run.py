"""``sapporo run`` through ``sapporo.cli.main`` (tiny clusters on the real library)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from sapporo.cli import main
from sapporo.cli import run as cli_run
from sapporo.nbody.snapshot import load
from sapporo.perf.plots import available as plots_available

SUMMARY_KEYS = {
    "n", "order", "precision", "device", "t_end", "energy_error", "max_energy_error",
    "angular_momentum_error", "steps", "block_steps", "mean_n_active", "wall_seconds",
    "interactions_per_second",
}


def call(argv: list[str]) -> int:
    """``main(argv)``, with argparse's SystemExit turned into its exit code."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def test_tiny_run_writes_everything(tmp_path, capsys):
    out = tmp_path / "run1"
    rc = call(["run", "--n", "64", "--order", "6", "--precision", "double", "--t-end",
               "0.25", "--eps", "0.01", "--seed", "3", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["n"] == 64 and summary["order"] == 6 and summary["precision"] == "double"
    assert summary["t_end"] == 0.25 and summary["interrupted"] is False
    assert 0 <= summary["energy_error"] <= summary["max_energy_error"] < 1e-9
    assert summary["steps"] >= summary["block_steps"] > 10
    assert summary["mean_n_active"] == pytest.approx(summary["steps"] / summary["block_steps"])
    assert summary["interactions_per_second"] > 0 and summary["wall_seconds"] > 0
    assert f"device: {summary['device']}" in captured.out
    assert "energy error (final)" in captured.out  # the summary table
    with open(out / "diagnostics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["time"]) for r in rows] == [k / 32 for k in range(9)]  # dt_max / 4
    assert float(rows[-1]["energy_error"]) == summary["energy_error"]
    snap = load(out / "snapshot_final.npz")
    assert snap.synchronised and snap.time == 0.25 and snap.n == 64
    if plots_available():
        for name in ("energy_error.png", "lagrangian_radii.png", "n_active.png"):
            data = (out / name).read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name


def test_two_component_with_black_hole(tmp_path):
    out = tmp_path / "bh"
    rc = call(["run", "--n", "65", "--t-end", "0.125", "--bh-mass", "0.02",
               "--heavy-fraction", "0.3", "--mass-ratio", "5", "--out", str(out), "--quiet",
               "--no-plots"])
    assert rc == 0
    snap = load(out / "snapshot_final.npz")
    assert snap.m[-1] == pytest.approx(0.02) and snap.m.sum() == pytest.approx(1.0)
    assert len(np.unique(snap.m[:-1])) == 2
    assert not list(out.glob("*.png"))


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--eta", "-1"], "--eta"),
        (["--n", "0"], "--n"),
        (["--n", "many"], "--n"),
        (["--order", "5"], "--order"),
        (["--dt-max", "0.1"], "power of two"),
        (["--dt-min", "2^-2", "--dt-max", "2^-3"], "dt_min"),
        (["--criterion", "fastest"], "--criterion"),
        (["--t-end", "nan"], "--t-end"),
        (["--bh-mass", "1"], "--bh-mass"),
        (["--mass-ratio", "0.5", "--heavy-fraction", "0.1"], "--mass-ratio"),
        (["--resume", "no-such-file.npz"], "does not exist"),
        (["--backend", "vulkan"], "backend"),
        (["--seed", "-1"], "--seed"),
        (["--n", "2", "--bh-mass", "0.5"], "too small"),
        (["--n", "16", "--t-end", "0.01", "--log-every", "1e-12"], "--log-every"),
        (["--n", "16", "--t-end", "1", "--snapshot-every", "1e-12"], "--snapshot-every"),
        (["--n", "16", "--t-end", "1e300"], "--t-end"),
        (["--n", "16", "--t-end", "1e6"], "output times"),
        (["--n", "16", "--t-end", "100", "--log-every", "1e-6"], "output times"),
    ],
)
def test_bad_parameters_one_line_exit_2(tmp_path, capsys, argv, words):
    rc = call(["run", "--out", str(tmp_path / "bad"), *argv])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sapporo run: error:"), err
    assert words in lines[0]
    assert "Traceback" not in err


def test_resume_equals_uninterrupted(tmp_path):
    common = ["--n", "48", "--eps", "0.01", "--quiet", "--no-plots"]
    assert call(["run", *common, "--t-end", "0.375", "--out", str(tmp_path / "full")]) == 0
    assert call(["run", *common, "--t-end", "0.125", "--out", str(tmp_path / "part")]) == 0
    rc = call(["run", "--resume", str(tmp_path / "part" / "snapshot_final.npz"), "--t-end",
               "0.375", "--out", str(tmp_path / "part"), "--quiet", "--no-plots"])
    assert rc == 0
    full = load(tmp_path / "full" / "snapshot_final.npz")
    resumed = load(tmp_path / "part" / "snapshot_final.npz")
    assert resumed.time == full.time == 0.375
    np.testing.assert_array_equal(resumed.x, full.x)
    np.testing.assert_array_equal(resumed.v, full.v)
    a = json.loads((tmp_path / "full" / "summary.json").read_text())
    b = json.loads((tmp_path / "part" / "summary.json").read_text())
    assert b["energy_error"] == a["energy_error"] and b["t_start"] == 0.125
    with open(tmp_path / "part" / "diagnostics.csv") as fh:  # history kept across resumes
        assert [float(r["time"]) for r in csv.DictReader(fh)] == [k / 32 for k in range(13)]


def test_resume_conflicting_option(tmp_path, capsys):
    assert call(["run", "--n", "32", "--t-end", "0.125", "--out", str(tmp_path),
                 "--quiet", "--no-plots"]) == 0
    rc = call(["run", "--resume", str(tmp_path / "snapshot_final.npz"), "--order", "6",
               "--t-end", "0.25", "--out", str(tmp_path)])
    assert rc == 2
    assert "conflicts with the snapshot" in capsys.readouterr().err


def test_ctrl_c_writes_snapshot_and_summary(tmp_path, monkeypatch, capsys):
    import sapporo.nbody.hermite

    # the progress callback after every block step (not every 0.1 s: the run may take less)
    monkeypatch.setattr(sapporo.nbody.hermite, "CALLBACK_SECONDS", 0.0)
    original = cli_run._Progress.__call__
    pressed: list[int] = []

    def press_ctrl_c(self, integ, force=False):
        if not force and integ.block_steps >= 25 and not pressed:  # inside evolve
            pressed.append(integ.block_steps)
            integ.request_stop()  # what the SIGINT handler does
        return original(self, integ, force)

    monkeypatch.setattr(cli_run._Progress, "__call__", press_ctrl_c)
    out = tmp_path / "cut"
    rc = call(["run", "--n", "48", "--eps", "0.01", "--t-end", "0.375", "--out", str(out),
               "--no-plots"])
    assert rc == 130
    assert "interrupted at t =" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["block_steps"] == pressed[0]
    assert 0 < summary["t_end"] < 0.375
    snap = load(out / "snapshot_final.npz")
    assert snap.time == summary["t_end"] and snap.counters["block_steps"] == pressed[0]

    monkeypatch.setattr(cli_run._Progress, "__call__", original)
    assert call(["run", "--resume", str(out / "snapshot_final.npz"), "--t-end", "0.375",
                 "--out", str(out), "--quiet", "--no-plots"]) == 0
    assert call(["run", "--n", "48", "--eps", "0.01", "--t-end", "0.375", "--out",
                 str(tmp_path / "whole"), "--quiet", "--no-plots"]) == 0
    np.testing.assert_array_equal(load(out / "snapshot_final.npz").x,
                                  load(tmp_path / "whole" / "snapshot_final.npz").x)


def test_without_matplotlib_plots_are_skipped(tmp_path, monkeypatch, capsys):
    import sapporo.perf.plots

    monkeypatch.setattr(sapporo.perf.plots, "available", lambda: False)
    out = tmp_path / "noplot"
    assert call(["run", "--n", "32", "--t-end", "0.125", "--out", str(out), "--quiet"]) == 0
    assert "matplotlib is not installed" in capsys.readouterr().err
    assert (out / "summary.json").is_file() and not list(out.glob("*.png"))


def _one_line_error(err: str, command: str = "run") -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sapporo {command}: error:"), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_unwritable_out_fails_before_integrating(tmp_path, capsys, monkeypatch, where):
    def no_integration(*args, **kwargs):
        raise AssertionError("integrated although --out cannot be written")

    monkeypatch.setattr(cli_run, "HermiteIntegrator", no_integration)
    (tmp_path / "file").write_text("a regular file")
    out = tmp_path / "file" / "sub" if where == "under-a-file" else "/proc/sapporo-no-such-dir"
    rc = call(["run", "--n", "16", "--t-end", "0.125", "--out", str(out), "--quiet",
               "--no-plots"])
    assert rc == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "--out" in line and "cannot create or write" in line


def test_os_error_of_any_command_is_one_line(monkeypatch, capsys):
    import sapporo.cli.info

    def fails(args):
        raise PermissionError(13, "Permission denied", "/some/where/file.tmp")

    monkeypatch.setattr(sapporo.cli.info, "run", fails)
    assert call(["info"]) == 1
    line = _one_line_error(capsys.readouterr().err, "info")
    assert line == "sapporo info: error: Permission denied: /some/where/file.tmp"


@pytest.mark.parametrize(
    "argv, words",
    [(["--seed", "-1"], "--seed"), (["--n", "1"], "--n"), (["--n-active", "0"], "--n-active")],
)
def test_accuracy_bad_parameters_one_line(capsys, argv, words):
    rc = call(["accuracy", *argv])
    assert rc != 0
    assert words in _one_line_error(capsys.readouterr().err, "accuracy")


def _corrupt(path, what: str, value) -> None:
    """Rewrite one field of a ``.npz`` snapshot: ``"params.eps2"``, ``"meta.energy0"``, ``"dt"``."""
    with np.load(path) as f:
        data = dict(f)
    if "." in what:
        group, key = what.split(".")
        obj = json.loads(str(data[group]))
        obj[key] = value
        data[group] = np.asarray(json.dumps(obj))
    else:
        data[what] = np.full_like(data[what], value)
    np.savez(path, **data)


@pytest.mark.parametrize(
    "what, value, words",
    [("params.eps2", -1.0, "eps2"), ("params.dt_max", "x", "dt_max"),
     ("meta.energy0", "x", "energy0"), ("meta.angular_momentum0", [1, 2], "angular_momentum0"),
     ("meta.seed", -3, "seed"), ("dt", 0.0, "dt"), ("dt", 0.3, "dt"),
     ("counters.steps", "many", "steps")],
)
def test_corrupt_snapshot_is_refused_on_resume(tmp_path, capsys, what, value, words):
    assert call(["run", "--n", "16", "--t-end", "0.125", "--out", str(tmp_path), "--quiet",
                 "--no-plots"]) == 0
    snap = tmp_path / "snapshot_final.npz"
    _corrupt(snap, what, value)
    capsys.readouterr()
    rc = call(["run", "--resume", str(snap), "--t-end", "0.25", "--out", str(tmp_path),
               "--quiet", "--no-plots"])
    assert rc == 2
    assert words in _one_line_error(capsys.readouterr().err)
