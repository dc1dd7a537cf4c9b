"""``sapporo bench``: the machinery on tiny sizes (files, columns); no timing assertions."""

from __future__ import annotations

import csv
import importlib.util

import pytest

from sapporo.cli import main
from sapporo.errors import InputError
from sapporo.perf import bench

HAVE_MPL = importlib.util.find_spec("matplotlib") is not None


def test_bench_quick_tiny_writes_csv_and_plots(tmp_path, backend, capsys):
    out = tmp_path / "bench"
    code = main(["bench", "--quick", "--tiny", "--backend", backend, "--out", str(out),
                 "--orders", "4", "--precisions", "double-single", "--n", "256",
                 "--sweep-n", "256", "--n-active", "1,8", "--peers", "numpy-reference",
                 "--peak-gflops", "100"])
    assert code == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "N x N" in text and "host overhead" in text and "N_active sweep" in text
    # Each line once on stdout (the table); the progress lines went to stderr.
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)), [x for x in lines if lines.count(x) > 1]
    assert "N x N  N=    256" in captured.err and "N x N  N=    256" not in text
    with (out / bench.CSV_NAME).open() as fh:
        rows = list(csv.DictReader(fh))
    header = list(rows[0])
    assert header[: len(bench.COLUMNS)] == bench.COLUMNS
    assert "ratio_numpy_reference" in header and "ratio_cpu_numpy_reference" in header
    kinds = {(r["kind"], r["code"]) for r in rows}
    assert kinds == {("nxn", "sapporo"), ("n_active", "sapporo"), ("overhead", "sapporo"),
                     ("nxn", "numpy-reference")}
    nxn = [r for r in rows if r["kind"] == "nxn" and r["code"] == "sapporo"]
    assert len(nxn) == 1 and nxn[0]["n"] == "256" and float(nxn[0]["gflops"]) > 0
    assert float(nxn[0]["ratio_numpy_reference"]) > 0
    assert 0 < float(nxn[0]["peak_fraction"])
    assert all(r["device"] and r["date"] for r in rows)
    assert [r["n_active"] for r in rows if r["kind"] == "n_active"] == ["1", "8"]
    over = [r for r in rows if r["kind"] == "overhead"]
    assert len(over) == 1 and over[0]["overhead_us"]
    assert float(over[0]["step_us"]) >= float(over[0]["step_us_min"]) > 0
    assert (out / bench.TABLE_NAME).is_file()
    for name in bench.PLOT_NAMES:
        assert (out / name).is_file() == HAVE_MPL


def test_settings_presets():
    q = bench.BenchSettings.quick()
    assert max(q.n_list) <= 4096 and q.sweep_n <= 4096
    t = bench.BenchSettings.tiny(orders=(2,))
    assert t.orders == (2,) and max(t.n_list) <= 512


def test_parse_peak():
    assert bench.parse_peak("150") == {"double-single": 150.0, "double": 150.0}
    assert bench.parse_peak("ds=150, double=75") == {"double-single": 150.0, "double": 75.0}
    assert bench.parse_peak(None) == {}
    with pytest.raises(InputError):
        bench.parse_peak("fast")


def test_unknown_peer_is_an_input_error(backend):
    with pytest.raises(InputError):
        bench.run_bench(bench.BenchSettings.tiny(peers=("abacus",), backend=backend))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("pytreegrav") is None, reason="needs pytreegrav")
def test_pytreegrav_peer(backend):
    s = bench.BenchSettings.tiny(orders=(4,), precisions=("double-single",), n_list=(1024,),
                                 sweep_n=256, n_active=(1,), peers=("pytreegrav",),
                                 backend=backend)
    report = bench.run_bench(s)
    peer = report.select("nxn", "pytreegrav")
    assert len(peer) == 1 and peer[0].interactions_per_s > 0
    assert "pytreegrav" in report.select("nxn")[0].ratios


@pytest.mark.parametrize("argv, words", [(["--repeats", "-1"], "--repeats"),
                                         (["--repeats", "0"], "--repeats"),
                                         (["--budget", "nan"], "--budget"),
                                         (["--budget", "-1"], "--budget")])
def test_bad_options_refused_before_the_work(tmp_path, monkeypatch, capsys, argv, words):
    def no_work(*args, **kwargs):
        raise AssertionError("benchmarked despite a bad option")

    monkeypatch.setattr(bench, "run_bench", no_work)
    code = main(["bench", "--tiny", "--out", str(tmp_path / "b"), *argv])
    assert code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sapporo bench: error:") and words in err[0]


def test_unwritable_out_refused_before_the_work(tmp_path, monkeypatch, capsys):
    def no_work(*args, **kwargs):
        raise AssertionError("benchmarked although --out cannot be written")

    monkeypatch.setattr(bench, "run_bench", no_work)
    (tmp_path / "file").write_text("a regular file")
    code = main(["bench", "--tiny", "--out", str(tmp_path / "file" / "sub")])
    assert code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sapporo bench: error: --out")


@pytest.mark.parametrize("kw, match", [({"repeats": 0}, "repeats"), ({"repeats": -1}, "repeats"),
                                       ({"budget": float("nan")}, "budget")])
def test_run_bench_validates_repeats_and_budget(kw, match):
    with pytest.raises(InputError, match=match):
        bench.run_bench(bench.BenchSettings.tiny(**kw))


def test_peers_and_plots_live_apart_from_the_measurement():
    from sapporo.perf import peers as bench_peers
    from sapporo.perf import plots

    assert not [name for name in vars(bench) if "peer" in name and callable(getattr(bench, name))
                and name != "peers"]
    assert not hasattr(bench, "plot") and callable(plots.plot_bench)
    notes: list[str] = []
    s = bench.BenchSettings.tiny()
    assert bench_peers.measure_peer("cupy", s, {}, lambda line: None, "cpu", notes) == []
    assert notes == ["cupy: skipped (a GPU peer; the device is a cpu)"]


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is not installed")
def test_bench_plots_raise_no_warnings(tmp_path, recwarn):
    from sapporo.perf.plots import plot_bench

    s = bench.BenchSettings.tiny(orders=(4,), precisions=("double",))
    common = {"device": "dev", "backend": "opencl", "date": "today"}
    rows = [bench.with_rates(bench.Row(**common, kind="nxn", code="sapporo", order=4,
                                       precision="double", n=n, n_active=n, repeats=1,
                                       seconds=1e-9 * n * n, seconds_median=1e-9 * n * n), {})
            for n in (256, 512)]
    report = bench.BenchReport(device="dev", backend="opencl", device_type="cpu", date="today",
                               rows=rows, launch_sources={}, settings=s, load_average=None)
    paths = plot_bench(report, tmp_path)  # no N_active sweep, no peers: empty panels
    assert [p.name for p in paths] == list(bench.PLOT_NAMES)
    assert all(p.stat().st_size > 1000 for p in paths)
    assert not [w for w in recwarn.list if "matplotlib" in str(w.filename) + str(w.message)]
