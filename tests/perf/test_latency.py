"""The latency budget of block steps (sapporo.perf.latency, ``sapporo bench --block-step``)."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest

from sapporo.errors import InputError
from sapporo.perf import latency


def test_budget_fields_are_consistent(backend) -> None:
    row = latency.block_step_budget(300, 4, order=4, precision="double", backend=backend,
                                    steps=20, warmup=3)
    assert row["n"] == 300 and row["n_active"] == 4 and row["steps"] == 20
    assert row["wall_us"] > 0 and row["wall_min_us"] <= row["wall_us"]
    # (kernels of a few microseconds may read 0 on a CPU runtime's profiling clock)
    assert row["device_us"] >= 0 and row["host_us"] >= 0
    phases = sum(row[f"{p}_us"] for p in latency.PHASES)
    assert 0 < phases <= 3 * row["wall_us"]  # medians of parts: near the whole, not above
    # stored and computed in C: Python's checks stay empty
    assert row["store_us"] > 0 and row["step_us"] > 0 and row["checks_us"] == 0
    # a block step queues at least a prediction and a force launch
    assert row["commands"] >= 2
    assert row["interactions_per_s"] == pytest.approx(4 * 300 / (row["wall_us"] * 1e-6))
    assert row["gflops"] == pytest.approx(row["interactions_per_s"] * 60 / 1e9)
    table = latency.budget_table([row])
    assert table.count("\n") == 2 and "| 300 | 4 |" in table


@pytest.mark.parametrize("order", [2, 6, 8])
def test_budget_every_order(order) -> None:
    row = latency.block_step_budget(200, 2, order=order, precision="double", steps=5,
                                    warmup=1)
    assert row["order"] == order and row["device_us"] >= 0 and row["wall_us"] > 0
    assert row["gflops"] == pytest.approx(row["interactions_per_s"] * latency.FLOPS[order] / 1e9)


def test_bad_sizes() -> None:
    with pytest.raises(InputError, match="n_active"):
        latency.block_step_budget(10, 11)
    with pytest.raises(InputError, match="steps"):
        latency.block_step_budget(10, 1, steps=0)


def test_cli_block_step_writes_table_csv(tmp_path) -> None:
    out = tmp_path / "bs"
    proc = subprocess.run(
        [sys.executable, "-m", "sapporo.cli", "bench", "--block-step", "--tiny", "--no-plots",
         "--precisions", "double", "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "| N | N_active | wall |" in proc.stdout
    rows = list(csv.DictReader(open(out / "block-step.csv")))
    assert [(r["n"], r["n_active"]) for r in rows] == [("256", "1"), ("256", "16")]
    assert all(float(r["device_us"]) >= 0 and float(r["wall_us"]) > 0 for r in rows)
    assert (out / "block-step.md").read_text().count("| 256 |") == 2


def test_cli_block_step_through_the_c_api(tmp_path) -> None:
    """--capi adds the same steps timed through the C API (the library is built under a
    temporary data folder)."""
    import os
    import shutil

    if shutil.which(os.environ.get("CC", "cc").split()[0]) is None:
        pytest.skip("no C compiler: the C API cannot be built")
    out = tmp_path / "bs"
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    proc = subprocess.run(
        [sys.executable, "-m", "sapporo.cli", "bench", "--block-step", "--tiny", "--no-plots",
         "--precisions", "double", "--capi", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "| C API |" in proc.stdout
    rows = list(csv.DictReader(open(out / "block-step.csv")))
    assert len(rows) == 2
    assert all(float(r["capi_us"]) > 0 for r in rows)
    # and the start-up, in the output and the table's file
    note = re.search(r"C API start-up \(g6_open, N = 1024\): (\d+) ms, starting the "
                     r"embedded Python", proc.stdout)
    assert note and int(note[1]) > 0, proc.stdout
    assert note[0] in (out / "block-step.md").read_text()


def test_capi_needs_block_step() -> None:
    proc = subprocess.run([sys.executable, "-m", "sapporo.cli", "bench", "--capi"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--block-step" in proc.stderr


def test_write_sweep_with_figure(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    rows = []
    for n in (256, 1024):
        for na in (1, 16):
            row = {"n": n, "n_active": na, "order": 4, "precision": "double", "device": "x",
                   "steps": 10, "wall_us": 100.0 + na, "wall_min_us": 90.0,
                   "device_us": 20.0 + na, "host_us": 80.0, "commands": 2.0,
                   "interactions_per_s": 1e8, "gflops": 6.0}
            row.update({f"{p}_us": 5.0 for p in latency.PHASES})
            rows.append(row)
    paths = latency.write_sweep(rows, tmp_path)
    png = tmp_path / "block-step.png"
    assert png in paths and png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
