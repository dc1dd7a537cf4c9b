"""``sapporo pm`` at a tiny size."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sapporo.cli import main


@pytest.mark.parametrize("model,extra", [("plummer", []), ("disk", ["--solver", "multigrid"]),
                                         ("uniform", ["--window", "tsc"]),
                                         ("plummer", ["--p3m", "--window", "tsc"]),
                                         ("plummer", ["--p3m", "--p3m-split", "s2"])])
def test_pm_command(backend, tmp_path, capsys, model, extra) -> None:
    """Three steps at a small size. Grid 48: the default TSC window and 4-point gradient
    keep 3 cells free on each side of an isolated mesh, and the models reach 0.4 box from
    the centre, so the grid needs more than 30 points (16 fitted the old CIC, 2-point
    default's 1.5 cells)."""
    out = tmp_path / "run"
    code = main(["pm", "--ic", model, "--n", "600", "--grid", "48", "--t-end", "0.06",
                 "--dt", "0.02", "--snapshots", "2", "--backend", backend, "--out", str(out),
                 *extra])
    assert code == 0
    text = capsys.readouterr().out
    assert "step 3/3" in text and "energy error" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["status"] == "completed"
    assert summary["boundary"] == ("periodic" if model == "uniform" else "isolated")
    stages = {"assignment", "poisson", "gradient", "interpolation", "update"}
    if "--p3m" in extra:
        stages.add("short_range")
        assert summary["solver"] == "p3m"
        assert summary["p3m_split"] == ("s2" if "s2" in extra else "gauss")
    assert set(summary["seconds_per_step"]) == stages
    assert all(t > 0 for t in summary["seconds_per_step"].values())
    assert summary["energy_error"] == pytest.approx(
        abs(summary["energy_final"] - summary["energy_initial"])
        / abs(summary["energy_initial"]))
    assert summary["energy_error"] <= summary["max_energy_error"]
    assert summary["max_energy_error"] < 0.05  # three short steps; the sign of a bug
    assert summary["snapshots"] == ["snapshots/snap_0000.npz", "snapshots/snap_0001.npz"]
    last = np.load(out / summary["snapshots"][-1])
    assert last["x"].shape == (600, 3) and float(last["t"]) == pytest.approx(0.06)
    for plot in summary["plots"]:
        assert (out / plot).stat().st_size > 0


@pytest.mark.parametrize("args,message", [
    (["--n", "0"], "--n"),
    (["--grid", "1"], "--grid"),
    (["--t-end", "-1"], "--t-end"),
    (["--dt", "0"], "--dt"),
    (["--ic", "uniform", "--solver", "multigrid"], "multigrid"),
    (["--solver", "multigrid", "--grid", "36"], "multigrid"),
    (["--p3m", "--solver", "multigrid"], "--p3m"),
    (["--grid", "8", "--window", "tsc", "--stencil", "4", "--n", "100"], "enlarge --box"),
])
def test_pm_usage_errors(tmp_path, capsys, args, message) -> None:
    code = main(["pm", "--out", str(tmp_path / "o"), "--t-end", "0.01", *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_pm_bad_choice_exits_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pm", "--ic", "hernquist"])
    assert exc.value.code == 2


def test_pm_without_matplotlib(backend, tmp_path, monkeypatch, caplog) -> None:
    """No matplotlib: the run completes, writes no plots and says so."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "run"
    code = main(["pm", "--n", "300", "--grid", "48", "--t-end", "0.02", "--dt", "0.02",
                 "--backend", backend, "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["plots"] == [] and not list(out.glob("*.png"))
    assert "matplotlib is not installed" in caplog.text


def test_pm_quiet_no_plots(backend, tmp_path, capsys) -> None:
    """--quiet prints nothing, --no-plots writes no PNG; the summary is still written."""
    out = tmp_path / "run"
    code = main(["pm", "--n", "300", "--grid", "48", "--t-end", "0.02", "--dt", "0.02",
                 "--backend", backend, "--out", str(out), "--quiet", "--no-plots"])
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["plots"] == [] and not list(out.glob("*.png"))
    assert summary["command"] == "pm" and summary["steps"] == 1
