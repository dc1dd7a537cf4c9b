"""``sapporo accuracy`` produces a table whose figures meet the contract bounds."""

from __future__ import annotations

from sapporo.cli import main
from sapporo.perf.accuracy import markdown, measure


def test_measure_small_double_and_ds():
    rows = measure(n=300, n_active=40, orders=(4,), precisions=("double", "double-single"))
    assert len(rows) == 2 * 3  # two precisions x three cases
    for r in rows:
        tol = 1e-12 if r.precision == "double" else 1e-5
        assert r.acc_max <= tol and r.jerk_max <= tol and r.pot_max <= tol, r
        assert r.snap_max is None and r.n_active == 40
    table = markdown(rows)
    assert table.count("\n") == len(rows) + 1 and "plummer+1e4" in table


def test_cli(capsys):
    assert main(["accuracy", "--n", "200", "--n-active", "5", "--orders", "2",
                 "--precisions", "double"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| precision") and "| double | 2 | plummer |" in out
