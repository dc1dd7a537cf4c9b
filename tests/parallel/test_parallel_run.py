"""``mpiexec -n P sapporo run``: every rank integrates the same, rank 0 writes; resuming with
another P; P, the decomposition and the communication time in the progress and summary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from mpi_launch import HERE, launch, mpi_env

RUN = [sys.executable, "-m", "sapporo.cli", "run", "--n", "48", "--precision", "double",
       "--no-plots", "--dt-max", "2^-5"]


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_run_on_two_ranks(mpiexec: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = launch(mpiexec, 2, [*RUN, "--t-end", "0.125", "--out", str(out)], cwd=tmp_path,
                  env=mpi_env(SAPPORO_RANK_OUTPUT="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["mpi_ranks"] == 2 and s["decomposition"] == "j" and s["grid"] == [1, 2]
    assert 0.0 <= s["communication_seconds"] <= s["wall_seconds"]
    assert s["t_end"] == 0.125 and s["energy_error"] < 1e-6
    # the progress line reports P and the communication time; rank 0 alone talks
    assert "P = 2 (j), comm" in proc.stderr
    assert proc.stdout.count("particles, order 4") == 1
    # rank 1 integrated bitwise the same (kept with SAPPORO_RANK_OUTPUT), and ran quietly
    s1 = _summary(tmp_path / "run.rank1")
    for key in ("energy_error", "steps", "block_steps", "energy_final", "mpi_ranks"):
        assert s1[key] == s[key], key
    a, b = (np.load(p / "snapshot_final.npz") for p in (out, tmp_path / "run.rank1"))
    for key in ("x", "v", "t", "dt", "a", "jerk", "pot"):
        assert np.array_equal(a[key], b[key]), key
    # one process gives the same trajectory up to rounding
    one = tmp_path / "one"
    proc = launch(mpiexec, 1, [*RUN, "--t-end", "0.125", "--out", str(one)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mpi_ranks" not in _summary(one)
    c = np.load(one / "snapshot_final.npz")
    assert np.abs(c["x"] - a["x"]).max() < 1e-9
    assert _summary(one)["steps"] == s["steps"]


def test_resume_with_another_rank_count(mpiexec: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = launch(mpiexec, 2, [*RUN, "--t-end", "0.0625", "--out", str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    snap = out / "snapshot_final.npz"
    out4 = tmp_path / "run4"
    proc = launch(mpiexec, 4, [*RUN[:4], "--no-plots", "--decomposition", "2d", "--t-end",
                               "0.125", "--resume", str(snap), "--out", str(out4)],
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out4)
    assert s["mpi_ranks"] == 4 and s["decomposition"] == "2d" and s["grid"] == [2, 2]
    assert s["t_start"] == 0.0625 and s["t_end"] == 0.125 and s["energy_error"] < 1e-6
    # against the same run resumed in one process
    one = tmp_path / "one"
    proc = launch(mpiexec, 1, [*RUN[:4], "--no-plots", "--t-end", "0.125", "--resume",
                               str(snap), "--out", str(one)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    a, b = (np.load(p / "snapshot_final.npz") for p in (out4, one))
    assert np.abs(a["x"] - b["x"]).max() < 1e-9


def test_bad_option_one_message(mpiexec: str, tmp_path: Path) -> None:
    proc = launch(mpiexec, 2, [*RUN, "--t-end", "-1", "--out", str(tmp_path / "x")],
                  cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("sapporo run: error: --t-end") == 1, proc.stderr


def test_one_rank_failing_before_the_library_stops_all(mpiexec: str, tmp_path: Path) -> None:
    """Rank 1 cannot read its snapshot (MPMD launch: other arguments on rank 1)."""
    out = tmp_path / "run"
    proc = launch(mpiexec, 1, [*RUN, "--t-end", "0.0625", "--out", str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    good, bad = out / "snapshot_final.npz", tmp_path / "missing.npz"
    common = [*RUN[:4], "--no-plots", "--t-end", "0.125", "--out", str(tmp_path / "b")]
    proc = launch(mpiexec, 1, [*common, "--resume", str(good), ":", "-n", "1", *common,
                               "--resume", str(bad)], cwd=tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "sapporo run: error: rank 1 failed before the library opened" in proc.stderr
    assert "sapporo run: error on rank 1: " in proc.stderr and "missing.npz" in proc.stderr


def test_one_rank_failing_alone_aborts_the_job(mpiexec: str, tmp_path: Path) -> None:
    proc = launch(mpiexec, 2, [sys.executable, str(HERE / "mpi_cli.py"), str(tmp_path)],
                  cwd=tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "mpi_cli: error on rank 1 of 2: RuntimeError: a failure of rank 1 alone" in proc.stderr
    assert "aborting every rank" in proc.stderr


def test_order8_on_two_ranks(mpiexec: str, tmp_path: Path) -> None:
    """The 8th-order integrator (j-particles with pop and d5, i-particles' jerk) on 2 ranks
    follows one process."""
    outs = {}
    for p in (1, 2):
        out = tmp_path / f"p{p}"
        proc = launch(mpiexec, p, [*RUN, "--order", "8", "--t-end", "0.0625", "--out",
                                   str(out)], cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs[p] = out
    s1, s2 = _summary(outs[1]), _summary(outs[2])
    assert s2["order"] == 8 and s2["mpi_ranks"] == 2 and s2["steps"] == s1["steps"]
    a, b = (np.load(outs[q] / "snapshot_final.npz") for q in (1, 2))
    assert np.abs(a["x"] - b["x"]).max() < 1e-9
