"""Launch-parameter tuning: a tiny sweep writes a profile the library then loads.

Only the machinery is tested (a few candidates, small N); no timing is asserted.
"""

from __future__ import annotations

import json
import logging

import pytest

import sapporo
from sapporo.cli import main
from sapporo.core import launch
from sapporo.core.launch import NI_CHUNK, LaunchConfig, profile_name, table_from_json
from sapporo.errors import InputError
from sapporo.perf import tuning

CPU_CANDS = [
    LaunchConfig(li=1, lj=1, w=8, jt=64, use_local=False, groups_per_cu=4),
    LaunchConfig(li=1, lj=1, w=4, jt=64, use_local=False, groups_per_cu=2),
]
# the CUDA kernels take w = 1 only
GPU_CANDS = [
    LaunchConfig(li=32, lj=4, w=1, jt=128, use_local=True, groups_per_cu=4),
    LaunchConfig(li=8, lj=16, w=1, jt=128, use_local=True, groups_per_cu=2),
]
CLI_CANDS = {"cuda": "li=32,lj=4,w=1,jt=128,gpc=4;li=8,lj=16,w=1,jt=128,gpc=2",
             "opencl": "w=8,jt=64,gpc=4;w=4,jt=64,gpc=2"}


def cands(backend: str) -> list[LaunchConfig]:
    return GPU_CANDS if backend == "cuda" else CPU_CANDS


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SAPPORO_PROFILE_DIR", str(tmp_path))
    monkeypatch.delenv("SAPPORO_NO_PROFILE", raising=False)
    return tmp_path


def test_tiny_sweep_writes_profile_the_library_loads(profile_dir, backend):
    lines: list[str] = []
    res = tuning.tune(2, "double-single", backend=backend, n=384, points=[1, 32, 384],
                      configs=cands(backend), repeats=1, progress=lines.append)
    assert res.path is not None and res.path.parent == profile_dir
    with sapporo.Library(order=2, precision="double-single", backend=backend) as lib:
        info = lib.device_infos[0]
        assert res.path.name == profile_name(info, 2, "double-single")
        table = lib.launch_tables()[0]
        assert table.source == str(res.path)
    parsed = table_from_json(json.loads(res.path.read_text()), str(res.path))
    assert parsed.entries == table.entries == res.table.entries
    assert parsed.entries[-1][0] == NI_CHUNK
    assert {cfg for _, cfg in parsed.entries} <= set(cands(backend))
    meta = parsed.meta
    assert meta["order"] == 2 and meta["precision"] == "double-single"
    assert meta["device"] == info.name and meta["n"] == 384
    assert set(meta["best_seconds"]) == {"1", "32", "384"}
    # one progress line per configuration tried, with its time
    timed = [ln for ln in lines if "N_active=" in ln and " ms " in ln]
    assert len(timed) >= 3
    assert any("verify" in ln and "ok" in ln for ln in lines)


def test_failing_candidate_is_skipped(profile_dir, backend):
    too_big = LaunchConfig(li=8192, lj=1, w=1, jt=64, use_local=False, groups_per_cu=1)
    lines: list[str] = []
    res = tuning.tune(2, "double", backend=backend, n=256, points=[1, 256],
                      configs=[too_big, cands(backend)[1]], repeats=1, write=False,
                      progress=lines.append)
    assert res.path is None
    assert any("skipped" in ln for ln in lines)
    assert all(cfg == cands(backend)[1] for _, cfg in res.table.entries)
    assert any(t.seconds is None and t.note for t in res.trials)
    assert res.table.meta["sweep"]["skipped"]


def test_malformed_profile_is_ignored_with_a_warning(profile_dir, backend, caplog, monkeypatch):
    monkeypatch.setattr(launch, "_shipped_profile_dir", lambda: None)  # defaults next
    with sapporo.Library(order=4, precision="double", backend=backend) as lib:
        info = lib.device_infos[0]
    for text in ("{not json", json.dumps({"entries": [{"ni_max": 8192, "w": 3}]}),
                 json.dumps({"no_entries": []})):
        (profile_dir / profile_name(info, 4, "double")).write_text(text)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sapporo"):
            with sapporo.Library(order=4, precision="double", backend=backend) as lib:
                source = lib.launch_tables()[0].source
        assert source.startswith("defaults")
        assert any("ignoring tuning profile" in r.getMessage() for r in caplog.records)


def test_cli_tune(profile_dir, backend, capsys):
    out = profile_dir / "out"
    code = main(["tune", "--backend", backend, "--order", "2", "--precision", "ds",
                 "--n", "256", "--n-active", "1,256", "--repeats", "1",
                 "--configs", CLI_CANDS[backend], "--out", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "N_active=" in text and "summary" in text
    assert len(list(out.glob("*-order2-double-single.json"))) == 1


def test_parse_config_jv():
    cfg = tuning.parse_config("w=8,jv=1,gpc=2")
    assert cfg.jv and cfg.w == 8 and cfg.i_per_group == 1 and "jv=1" in tuning.describe(cfg)
    with pytest.raises(InputError, match="jv needs"):
        tuning.parse_config("w=16,jv=1")


def test_parse_config():
    cfg = tuning.parse_config("w=16, jt=256, gpc=2, local=0")
    assert cfg == LaunchConfig(w=16, jt=256, groups_per_cu=2, use_local=False)
    with pytest.raises(InputError):
        tuning.parse_config("w=3")
    with pytest.raises(InputError):
        tuning.parse_config("speed=11")


def test_choose_and_entries():
    a, b, c = (LaunchConfig(w=w) for w in (4, 8, 16))
    times = {1: {a: 1.0, b: 1.02, c: 2.0}, 8: {a: 1.5, b: 1.0, c: 1.2},
             64: {a: 3.0, b: 1.0, c: 1.01}, 1000: {a: 9.0, b: 1.0, c: 0.5}}
    chosen = tuning._choose(list(times), times, sticky=0.03)
    assert chosen == {1000: c, 64: c, 8: b, 1: b}
    assert tuning._entries(chosen) == [(8, b), (NI_CHUNK, c)]


def test_n_active_points_and_candidates():
    assert tuning.n_active_points(16384) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 16384]
    assert tuning.n_active_points(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    cpu = tuning.cpu_candidates("double-single", quick=True)
    assert {c.w for c in cpu} == {4, 8, 16}


def test_shipped_profiles_parse():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "tune" / "profiles"
    files = sorted(folder.glob("*.json"))
    if not files:
        pytest.skip("no shipped profiles")
    for path in files:
        table = table_from_json(json.loads(path.read_text()), str(path))
        meta = table.meta
        assert path.name.endswith(f"-order{meta['order']}-{meta['precision']}.json")
        assert path.name.startswith(f"{meta['backend']}-")
        assert table.entries[-1][0] >= NI_CHUNK


def test_gpu_candidates_are_cuda_shapes():
    """Every GPU candidate (w = 2 and 4 included) is a shape the CUDA kernels accept (the
    smallest variant: at order 6 in double some tiles exceed 48 KiB, which the tuner skips)."""
    from sapporo.backend.base import DeviceInfo
    from sapporo.core.launch import LaunchTable, check_table

    info = DeviceInfo("cuda", 0, "H100", "NVIDIA Corporation", "CUDA", "gpu", 132, 1024, 49152,
                      1 << 34, True, "")
    for quick in (False, True):
        cands = tuning.gpu_candidates(info, quick=quick)
        assert {c.w for c in cands} == ({1, 2} if quick else {1, 2, 4})
        for cfg in cands:
            check_table(LaunchTable([(NI_CHUNK, cfg)]), info, 2, "double-single")


@pytest.mark.parametrize("kw, match", [({"margin": float("nan")}, "margin"),
                                       ({"margin": -0.1}, "margin"), ({"margin": 1.0}, "margin"),
                                       ({"confirm": -3}, "confirm"), ({"confirm": 1.5}, "confirm")])
def test_bad_margin_and_confirm_refused(kw, match):
    with pytest.raises(InputError, match=match):
        tuning.tune(2, "double-single", write=False, **kw)


@pytest.mark.parametrize("argv, words", [(["--margin", "nan"], "margin"),
                                         (["--confirm", "-3"], "confirm")])
def test_cli_bad_margin_and_confirm_one_line(capsys, argv, words):
    assert main(["tune", "--dry-run", *argv]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sapporo tune: error:") and words in err[0]


def test_cli_unwritable_out_refused_before_the_sweep(tmp_path, monkeypatch, capsys):
    def no_sweep(*args, **kwargs):
        raise AssertionError("tuned although --out cannot be written")

    monkeypatch.setattr(tuning, "tune", no_sweep)
    (tmp_path / "file").write_text("a regular file")
    assert main(["tune", "--out", str(tmp_path / "file" / "sub")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sapporo tune: error: --out")
