"""Plots of runs and comparisons: labels, titles, and no matplotlib warnings leaking out."""

from __future__ import annotations

import numpy as np
import pytest

from sapporo.perf import plots
from sapporo.summary import write_summary

pytestmark = pytest.mark.skipif(not plots.available(), reason="matplotlib is not installed")


def fake_run(folder, n=64, precision="double", seed=0, eta=0.1, errors=None):
    folder.mkdir(parents=True)
    t = np.arange(5) / 8
    errors = np.array([0.0, 1e-9, 2e-9, 3e-9, 2e-9]) if errors is None else errors
    lines = ["time,energy,energy_error,angular_momentum_error,r_lagr_10,r_lagr_50,r_lagr_90"]
    for k in range(5):
        lines.append(f"{float(t[k])!r},-0.25,{float(errors[k])!r},0.0,0.2,0.8,2.0")
    (folder / "diagnostics.csv").write_text("\n".join(lines) + "\n")
    summary = {"n": n, "order": 4, "precision": precision, "criterion": "aarseth",
               "eta": eta, "eps": 0.01, "seed": seed, "backend": "opencl", "device": "cpu",
               "energy_error": float(errors[-1]), "max_energy_error": float(max(errors)),
               "energy_initial": -0.25, "energy_final": -0.25, "wall_seconds": 1.0}
    write_summary(folder, "run", summary)
    return folder


def axes_of(monkeypatch):
    """Capture every figure saved (their axes) instead of looking at pixels."""
    seen = []
    save = plots._save

    def keep(fig, path, dpi=110):
        seen.append(fig.axes)
        return save(fig, path, dpi)

    monkeypatch.setattr(plots, "_save", keep)
    return seen


def test_run_plots_say_of_mass_and_name_the_run(tmp_path, monkeypatch, recwarn):
    seen = axes_of(monkeypatch)
    diag = plots.read_diagnostics(fake_run(tmp_path / "r") / "diagnostics.csv")
    title = "N = 64, order 4, double, eta 0.1, eps 0.01, seed 3"
    paths = plots.plot_run(tmp_path, diag, np.array([0, 5, 0, 2]), title)
    assert [p.name for p in paths] == ["energy_error.png", "lagrangian_radii.png", "n_active.png"]
    energy, radii, active = (axes[0] for axes in seen)
    assert all(title in ax.get_title() for ax in (energy, radii, active))
    labels = [t.get_text() for t in radii.get_legend().get_texts()]
    assert labels == ["10 % of mass", "50 % of mass", "90 % of mass"]
    assert not recwarn.list, [str(w.message) for w in recwarn.list]


def test_all_zero_energy_error_plots_without_warnings(tmp_path, recwarn):
    diag = plots.read_diagnostics(
        fake_run(tmp_path / "r", errors=np.zeros(5)) / "diagnostics.csv")
    plots.plot_run(tmp_path, diag, np.zeros(4, dtype=np.int64), "")
    plots.compare_runs(tmp_path / "c.png", [tmp_path / "r"])
    assert not recwarn.list, [str(w.message) for w in recwarn.list]


def test_compare_labels_are_distinct(tmp_path, monkeypatch):
    a = fake_run(tmp_path / "a", seed=1)
    b = fake_run(tmp_path / "b", seed=2)
    c = fake_run(tmp_path / "c", seed=2)
    d = fake_run(tmp_path / "d", seed=2, eta=0.05, precision="double-single")
    assert plots.run_labels([a, b]) == ["seed 1", "seed 2"]
    assert plots.run_labels([b, d]) == ["double, eta 0.1", "double-single, eta 0.05"]
    assert plots.run_labels([b, c]) == ["b: N 64, order 4, double", "c: N 64, order 4, double"]
    seen = axes_of(monkeypatch)
    plots.compare_runs(tmp_path / "cmp.png", [a, b, c])
    legend = [t.get_text() for t in seen[0][0].get_legend().get_texts()]
    assert len(set(legend)) == 3
    with pytest.raises(plots.SapporoError, match="2 labels for 3 runs"):
        plots.compare_runs(tmp_path / "x.png", [a, b, c], labels=["x", "y"])
