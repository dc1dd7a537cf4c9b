"""``sapporo run`` under signals and failed writes: nothing is lost, every failure is named.

Full disks are simulated by making the write functions raise ``OSError(ENOSPC)`` (and the
free-space probe report a nearly full disk); signals are sent to this very process from the
progress callback, which runs in the main thread between block steps.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import sapporo.summary
from sapporo.cli import main
from sapporo.cli import run as cli_run
from sapporo.nbody import snapshot as snapshot_module
from sapporo.nbody.snapshot import load

BASE = ["run", "--n", "48", "--eps", "0.01", "--no-plots"]


def call(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def no_tmp_files(folder) -> bool:
    return not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def at_block(monkeypatch, block: int, action) -> None:
    """Call ``action(integ)`` once, after the given block step (from the progress callback,
    which then comes after every block step, not every 0.1 s: a run may take less)."""
    import sapporo.nbody.hermite

    monkeypatch.setattr(sapporo.nbody.hermite, "CALLBACK_SECONDS", 0.0)
    original = cli_run._Progress.__call__
    done = []

    def hook(self, integ, force=False):
        if integ.block_steps >= block and not done:
            done.append(True)
            action(integ)
        return original(self, integ, force)

    monkeypatch.setattr(cli_run._Progress, "__call__", hook)


def diagnostics_times(path) -> list[float]:
    with open(path, newline="") as fh:
        return [float(r["time"]) for r in csv.DictReader(fh)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_after_the_block_and_saves_everything(tmp_path, monkeypatch, capsys, sig):
    at_block(monkeypatch, 30, lambda integ: os.kill(os.getpid(), sig))
    out = tmp_path / "cut"
    rc = call([*BASE, "--t-end", "0.5", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 130, err
    assert f"by {signal.Signals(sig).name}" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and 0 < summary["t_end"] < 0.5
    snap = load(out / "snapshot_final.npz")
    assert snap.time == summary["t_end"] and snap.counters["block_steps"] >= 30
    assert diagnostics_times(out / "diagnostics.csv")[-1] == summary["t_end"]
    assert no_tmp_files(out)
    # The handlers are back as they were.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_second_signal_during_the_final_writes_loses_nothing(tmp_path, monkeypatch, capsys):
    at_block(monkeypatch, 20, lambda integ: os.kill(os.getpid(), signal.SIGINT))
    save = cli_run.save_snapshot

    def save_under_fire(path, state):
        os.kill(os.getpid(), signal.SIGINT)  # held back until the writes are done
        os.kill(os.getpid(), signal.SIGTERM)
        return save(path, state)

    monkeypatch.setattr(cli_run, "save_snapshot", save_under_fire)
    out = tmp_path / "cut"
    assert call([*BASE, "--t-end", "0.5", "--out", str(out)]) == 130
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert load(out / "snapshot_final.npz").time == summary["t_end"]
    assert no_tmp_files(out)


def test_third_signal_aborts_and_keeps_what_is_on_disk(tmp_path, monkeypatch, capsys):
    def three(integ):
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGINT)

    at_block(monkeypatch, 20, three)
    out = tmp_path / "cut"
    assert call([*BASE, "--t-end", "0.5", "--out", str(out)]) == 130
    assert "aborted" in capsys.readouterr().err
    assert not (out / "summary.json").exists() and not (out / "snapshot_final.npz").exists()
    assert diagnostics_times(out / "diagnostics.csv")[0] == 0.0


def test_diagnostics_are_written_as_the_run_goes(tmp_path, monkeypatch):
    out = tmp_path / "live"
    seen = []

    def look(integ):
        seen.append(diagnostics_times(out / "diagnostics.csv"))

    at_block(monkeypatch, 150, look)
    assert call([*BASE, "--t-end", "0.5", "--out", str(out), "--quiet"]) == 0
    assert len(seen) == 1 and len(seen[0]) >= 2 and seen[0][0] == 0.0, seen
    assert seen[0][-1] < 0.5
    assert diagnostics_times(out / "diagnostics.csv")[-1] == 0.5


def full_disk_for(monkeypatch, prefix: str) -> None:
    """Snapshot files whose name starts with ``prefix`` hit a full disk half-way."""
    write = snapshot_module._write_npz

    def write_npz(tmp, arrays):
        if tmp.name.startswith(prefix):
            tmp.write_bytes(b"PK\x03\x04 partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(tmp, arrays)

    monkeypatch.setattr(snapshot_module, "_write_npz", write_npz)


def test_full_disk_at_the_final_snapshot(tmp_path, monkeypatch, capsys):
    full_disk_for(monkeypatch, "snapshot_final")
    out = tmp_path / "full"
    rc = call([*BASE, "--t-end", "0.25", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"No space left on device: {out / 'snapshot_final.npz'}" in err
    summary = json.loads((out / "summary.json").read_text())  # still written
    assert summary["snapshot"] is None and "snapshot_final.npz" in summary["write_errors"][0]
    assert diagnostics_times(out / "diagnostics.csv")[-1] == 0.25
    assert no_tmp_files(out) and not (out / "snapshot_final.npz").exists()


def test_failed_periodic_snapshot_warns_and_the_run_continues(tmp_path, monkeypatch, capsys):
    full_disk_for(monkeypatch, "snapshot_t0000.12500")
    out = tmp_path / "periodic"
    rc = call([*BASE, "--t-end", "0.375", "--snapshot-every", "0.125", "--out", str(out)])
    err = capsys.readouterr().err
    assert "warning: periodic snapshot not written" in err and "snapshot_t0000.12500" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["t_end"] == 0.375 and summary["interrupted"] is False
    assert [os.path.basename(p) for p in summary["snapshots"]] == ["snapshot_t0000.25000.npz"]
    assert load(out / "snapshot_final.npz").time == 0.375
    assert no_tmp_files(out)
    assert rc == 1  # something was not written


def test_failed_summary_write_names_the_file(tmp_path, monkeypatch, capsys):
    write = sapporo.summary.write_text_atomic

    def no_summary(path, text):
        if path.name == "summary.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return write(path, text)

    monkeypatch.setattr(sapporo.summary, "write_text_atomic", no_summary)
    out = tmp_path / "nosummary"
    rc = call([*BASE, "--t-end", "0.125", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and f"summary not written (No space left on device: {out}" in err
    assert load(out / "snapshot_final.npz").time == 0.125
    assert no_tmp_files(out)


@pytest.mark.parametrize("recovers", [True, False])
def test_failed_diagnostics_write(tmp_path, monkeypatch, capsys, recovers):
    line = cli_run._DiagnosticsFile._line
    state = {"rows": 0, "running": True}

    def flaky(self, row):
        state["rows"] += 1
        if state["rows"] > 3 and (state["running"] or not recovers):
            raise OSError(errno.ENOSPC, "No space left on device")
        return line(self, row)

    finish = cli_run._DiagnosticsFile.finish

    def end(self, rows):
        state["running"] = False
        return finish(self, rows)

    monkeypatch.setattr(cli_run._DiagnosticsFile, "_line", flaky)
    monkeypatch.setattr(cli_run._DiagnosticsFile, "finish", end)
    out = tmp_path / "diag"
    rc = call([*BASE, "--t-end", "0.25", "--out", str(out)])
    err = capsys.readouterr().err
    assert f"cannot write {out / 'diagnostics.csv'} (No space left on device)" in err
    summary = json.loads((out / "summary.json").read_text())
    assert load(out / "snapshot_final.npz").time == 0.25
    assert no_tmp_files(out)
    if recovers:
        assert rc == 0 and summary["write_errors"] == []
        assert diagnostics_times(out / "diagnostics.csv") == [k / 32 for k in range(9)]
    else:
        assert rc == 1 and "diagnostics.csv" in summary["write_errors"][0]
        assert "diagnostics not written" in err


def test_full_disk_is_found_before_the_work(tmp_path, monkeypatch, capsys):
    import sapporo.cli

    def no_integration(*args, **kwargs):
        raise AssertionError("integrated although the disk is full")

    monkeypatch.setattr(cli_run, "HermiteIntegrator", no_integration)
    monkeypatch.setattr(sapporo.cli, "free_bytes", lambda path: 4096)
    rc = call([*BASE, "--t-end", "0.25", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    assert err.startswith("sapporo run: error: --out") and "not enough free space" in err


def test_output_size_estimate_grows_with_n_and_snapshots():
    small = cli_run._output_bytes(100, 0.0, 1.0, 0.125, None, False)
    big = cli_run._output_bytes(100_000, 0.0, 1.0, 0.125, None, False)
    many = cli_run._output_bytes(100_000, 0.0, 1.0, 0.125, 0.125, False)
    assert big > 2 * 100_000 * 8 * 22 > small  # two snapshots of 22 float64 per particle
    assert many > 8 * big / 2


def test_snapshot_every_must_be_a_multiple_of_the_log_interval(tmp_path, capsys):
    rc = call([*BASE, "--t-end", "1", "--snapshot-every", "0.1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "--snapshot-every 0.1 is not a multiple" in err
    rc = call([*BASE, "--t-end", "1", "--log-every", "0.25", "--snapshot-every", "0.125",
               "--out", str(tmp_path)])
    assert rc == 2 and "--log-every" in capsys.readouterr().err


def test_resume_into_another_runs_folder_is_refused(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert call([*BASE, "--t-end", "0.125", "--out", str(a), "--quiet"]) == 0
    assert call([*BASE, "--t-end", "0.125", "--out", str(b), "--quiet", "--seed", "1"]) == 0
    before = (b / "diagnostics.csv").read_text()
    capsys.readouterr()
    rc = call(["run", "--resume", str(a / "snapshot_final.npz"), "--t-end", "0.25", "--out",
               str(b), "--quiet", "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 2 and "holds the diagnostics of another run" in err
    assert (b / "diagnostics.csv").read_text() == before  # untouched
    # Into a new folder: a new diagnostics file that starts where the snapshot does.
    c = tmp_path / "c"
    assert call(["run", "--resume", str(a / "snapshot_final.npz"), "--t-end", "0.25",
                 "--out", str(c), "--quiet", "--no-plots"]) == 0
    assert diagnostics_times(c / "diagnostics.csv")[0] == 0.125
    assert json.loads((c / "run.json").read_text())["run_id"] == json.loads(
        (a / "run.json").read_text())["run_id"]


def test_resume_keeps_the_log_interval_of_the_run(tmp_path):
    out = tmp_path / "r"
    assert call([*BASE, "--t-end", "0.25", "--log-every", "0.125", "--out", str(out),
                 "--quiet"]) == 0
    assert call(["run", "--resume", str(out / "snapshot_final.npz"), "--t-end", "0.5",
                 "--out", str(out), "--quiet", "--no-plots"]) == 0
    assert diagnostics_times(out / "diagnostics.csv") == [0.0, 0.125, 0.25, 0.375, 0.5]


def test_progress_line_has_an_eta():
    p = cli_run._Progress(sys.stderr, 1.0, 3.0, enabled=False)
    assert p.eta(1.0, 5.0) == "ETA   ?"
    assert p.eta(2.0, 10.0) == "ETA   10 s"
    assert p.eta(1.5, 60.0) == "ETA  3.0 min"


def test_sigterm_from_outside(tmp_path):
    """A real SIGTERM to a real ``sapporo run`` process: exit 130 with everything saved."""
    out = tmp_path / "term"
    cmd = [sys.executable, "-m", "sapporo.cli", "run", "--n", "64", "--eps", "0.01",
           "--t-end", "64", "--log-every", "0.125", "--no-plots", "--quiet", "--out",
           str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            csv_path = out / "diagnostics.csv"
            if csv_path.is_file() and len(csv_path.read_text().splitlines()) >= 4:
                break
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "by SIGTERM" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and 0.25 <= summary["t_end"] < 64
    assert load(out / "snapshot_final.npz").time == summary["t_end"]
    assert no_tmp_files(out)


def _mount_tmpfs(where, size: str) -> bool:
    import shutil

    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True)
    return proc.returncode == 0


def test_a_real_full_disk(tmp_path, monkeypatch, capsys):
    """A 256 KiB tmpfs: the start-up check refuses it; told there is room, the run finds out
    at each write, names every file it could not write, leaves no partial file and ends
    with exit code 1 (mounts only where this is root and may mount)."""
    import sapporo.cli

    mnt = tmp_path / "tiny"
    if not _mount_tmpfs(mnt, "256k"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        argv = ["run", "--n", "2048", "--t-end", "0.25", "--snapshot-every", "0.125",
                "--out", str(mnt / "run"), "--quiet"]
        assert call(argv) == 2
        assert "not enough free space" in capsys.readouterr().err
        monkeypatch.setattr(sapporo.cli, "free_bytes", lambda path: 10**12)
        assert call(argv) == 1
        err = capsys.readouterr().err
        assert f"No space left on device: {mnt / 'run' / 'snapshot_final.npz'}" in err
        assert "periodic snapshot not written" in err
        assert no_tmp_files(mnt)
        for path in (mnt / "run").iterdir():  # whatever is there is complete
            if path.suffix == ".npz":
                load(path)
            elif path.suffix == ".json":
                json.loads(path.read_text())
            elif path.suffix == ".png":
                assert path.read_bytes()[-8:] == b"IEND\xaeB`\x82"
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_a_failure_during_the_run_keeps_the_diagnostics(tmp_path, monkeypatch, capsys):
    from sapporo.errors import NonFiniteError

    def fail(integ):
        raise NonFiniteError("non-finite force on particle 7")

    at_block(monkeypatch, 100, fail)
    out = tmp_path / "fails"
    rc = call([*BASE, "--t-end", "0.5", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "sapporo run: error: non-finite force on particle 7" in err
    times = diagnostics_times(out / "diagnostics.csv")
    assert times[0] == 0.0 and times[-1] < 0.5
    assert no_tmp_files(out) and not (out / "summary.json").exists()


def test_a_message_while_the_kernels_build(tmp_path, capsys):
    assert call([*BASE, "--t-end", "0.125", "--out", str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("sapporo run: opening the device and building the force kernels")
    assert call([*BASE, "--t-end", "0.125", "--out", str(tmp_path / "q"), "--quiet"]) == 0
    assert "building" not in capsys.readouterr().err
