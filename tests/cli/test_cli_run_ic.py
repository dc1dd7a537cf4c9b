"""``sapporo run --ic FILE`` and ``--model king``: the particles of a file arrive as
written (the first force call reproduces a float64 direct sum of them), bad files and
conflicting options are one line and exit code 2, summary.json says where the particles
came from."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

from sapporo.cli import main
from sapporo.nbody.ic import kinetic_energy, lagrangian_radii, plummer, potential_energy
from sapporo.nbody.snapshot import load

EPS = 0.01
T_END = "0.0009765625"  # 2^-10: a Taylor series predicts the end exactly enough
RUN = ["run", "--precision", "double", "--eps", str(EPS), "--t-end", T_END, "--quiet",
       "--no-plots"]


def call(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sapporo run: error:"), err
    assert "Traceback" not in err
    return lines[0]


def cluster(n: int = 48) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unequal masses, so that a mix-up of columns or particles changes the energy."""
    x, v, _ = plummer(n, seed=11)
    m = np.random.default_rng(11).uniform(0.5, 1.5, n) / n
    return x, v, m


def fields(*values: float) -> str:
    return " ".join(repr(float(value)) for value in values)


def write(path, kind: str, x, v, m) -> np.ndarray:
    """Write the particles in one of the text layouts; return the ids the run should use."""
    n = m.size
    if kind == "nbody6":  # NBODY6's fort.10: m x y z vx vy vz
        path.write_text("".join(fields(m[k], *x[k], *v[k]) + "\n" for k in range(n)))
        return np.arange(n)
    if kind == "csv":  # id, m, x, y, z, vx, vy, vz with ids of our own
        ids = np.arange(n)[::-1] * 2 + 1
        path.write_text("# id, m, x, y, z, vx, vy, vz\n" + "".join(
            f"{ids[k]}, " + fields(m[k], *x[k], *v[k]).replace(" ", ", ") + "\n"
            for k in range(n)))
        return ids
    if kind == "banana":  # Phantom-GRAPE: t, N, then 1 / m / x y z / vx vy vz
        path.write_text(f"0.0\n{n}\n" + "".join(
            f"1\n{fields(m[k])}\n{fields(*x[k])}\n{fields(*v[k])}\n" for k in range(n)))
        return np.arange(n)
    if kind == "phigrape":  # step, N, time, then index m x y z vx vy vz
        path.write_text(f"0\n{n}\n0.0\n" + "".join(
            f"{k:010d} " + fields(m[k], *x[k], *v[k]) + "\n" for k in range(n)))
        return np.arange(n)
    raise AssertionError(kind)


def accelerations(x, m) -> np.ndarray:
    d = x[None, :, :] - x[:, None, :]
    r2 = np.sum(d * d, axis=2) + EPS * EPS
    np.fill_diagonal(r2, np.inf)
    return np.sum(m[None, :, None] * d / r2[:, :, None] ** 1.5, axis=1)


def check_arrived(out, x, v, m, ids) -> dict:
    """The run's start used exactly these particles: its initial energy (kinetic on the
    host, potential from the library's first force call of all of them) equals a float64
    direct sum, its t = 0 Lagrangian radii equal theirs, and the final snapshot holds
    their masses and ids, each at the position and velocity its Taylor series predicts
    (which no exchange of columns or particles would keep)."""
    summary = json.loads((out / "summary.json").read_text())
    energy = kinetic_energy(v, m) + potential_energy(x, m, EPS * EPS)
    assert summary["energy_initial"] == pytest.approx(energy, rel=1e-12, abs=0.0)
    with open(out / "diagnostics.csv", newline="") as fh:
        first = next(csv.DictReader(fh))
    assert float(first["time"]) == 0.0
    radii = lagrangian_radii(x, m, (0.1, 0.5, 0.9))
    got = [float(first[f"r_lagr_{p}"]) for p in (10, 50, 90)]
    np.testing.assert_allclose(got, radii, rtol=1e-14)
    snap = load(out / "snapshot_final.npz")
    order = np.argsort(snap.ids)
    want = np.argsort(ids)
    np.testing.assert_array_equal(snap.ids[order], np.asarray(ids)[want])
    np.testing.assert_array_equal(snap.m[order], m[want])
    t = 2.0**-10
    assert snap.time == t
    a = accelerations(x, m)
    np.testing.assert_allclose(snap.x[order], (x + v * t + a * t * t / 2)[want], atol=1e-6)
    np.testing.assert_allclose(snap.v[order], (v + a * t)[want], atol=1e-3)
    return summary


@pytest.mark.parametrize("kind, fmt", [("banana", "banana"), ("nbody6", "columns"),
                                       ("phigrape", "phigrape"), ("csv", "columns")])
def test_text_file_particles_arrive_as_written(tmp_path, kind, fmt):
    x, v, m = cluster()
    path = tmp_path / f"cluster.{kind}"
    ids = write(path, kind, x, v, m)
    out = tmp_path / "out"
    assert call([*RUN, "--ic", str(path), "--out", str(out)]) == 0
    summary = check_arrived(out, x, v, m, ids)
    source = summary["initial_conditions"]
    assert source["file"] == os.path.abspath(path) and source["format"] == fmt
    assert source["scale"] == "none" and source["n"] == m.size
    assert summary["t_start"] == 0.0 and summary["seed"] is None


def test_snapshot_particles_arrive_as_written(tmp_path):
    first = tmp_path / "first"
    assert call(["run", "--n", "40", "--t-end", "0.0625", "--out", str(first), "--quiet",
                 "--no-plots", "--seed", "5"]) == 0
    snap = load(first / "snapshot_final.npz")
    out = tmp_path / "again"
    assert call([*RUN, "--ic", str(first / "snapshot_final.npz"), "--out", str(out)]) == 0
    summary = check_arrived(out, snap.x, snap.v, snap.m, snap.ids)
    assert summary["initial_conditions"]["format"] == "snapshot"
    assert summary["initial_conditions"]["time"] == 2.0**-4  # recorded; the run starts at 0
    assert summary["t_start"] == 0.0


def test_scaled_file_and_resume_keep_the_source(tmp_path):
    x, v, m = cluster()
    path = tmp_path / "big.txt"
    write(path, "nbody6", 10.0 * x, 0.3 * v, 50.0 * m)
    out = tmp_path / "out"
    assert call([*RUN, "--ic", str(path), "--ic-scale", "nbody", "--out", str(out)]) == 0
    snap = load(out / "snapshot_final.npz")
    assert snap.m.sum() == pytest.approx(1.0, rel=1e-14)
    assert snap.meta["initial_conditions"]["scale"] == "nbody"
    assert call(["run", "--resume", str(out / "snapshot_final.npz"), "--t-end", "0.03125",
                 "--out", str(out), "--quiet", "--no-plots"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["initial_conditions"]["file"] == os.path.abspath(path)


@pytest.mark.parametrize(
    "text, words",
    [
        ("0.5 1 0 0 0 0.5 0\n0.5 -1 0 0 0 -0.5\n", "line 2: 6 values, expected 7"),
        ("0.5 1 0 0 0 0.5 0\n0.5 -1 0 nan 0 -0.5 0\n", "line 2: z is nan"),
        ("0.5 1 0 0 0 0.5 0\n-0.5 -1 0 0 0 -0.5 0\n", "line 2: the mass -0.5 is negative"),
        ("# no particles here\n", "no particles"),
        ("0.0\n0\n", "line 2: no particles (N = 0)"),
        ("4 0.5 1 0 0 0 0.5 0\n4 0.5 -1 0 0 0 -0.5 0\n", "line 2: id 4 repeats the id of line 1"),
        ("0.0\n2\n1\n0.5\n1 0 0\n0 0.5 0\n1\n0.5\n-1 0 0\n0 -0.5\n",
         "line 7: particle 2 has only 7 values of 8"),
    ],
)
def test_bad_file_is_one_line_exit_2(tmp_path, capsys, text, words):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    rc = call([*RUN, "--ic", str(path), "--out", str(tmp_path / "out")])
    line = one_line_error(capsys.readouterr().err)
    assert rc == 2
    assert line.startswith(f"sapporo run: error: --ic {path}")
    assert words in line, line
    assert not (tmp_path / "out").exists()  # refused before any output


@pytest.mark.parametrize("what, words", [("missing", "no such file"),
                                         ("folder", "is a directory"),
                                         ("binary", "line 1: not text")])
def test_unreadable_file_is_one_line_exit_2(tmp_path, capsys, what, words):
    path = tmp_path / what
    if what == "folder":
        path.mkdir()
    elif what == "binary":
        path.write_bytes(bytes(range(128, 256)))
    rc = call([*RUN, "--ic", str(path), "--out", str(tmp_path / "out")])
    line = one_line_error(capsys.readouterr().err)
    assert rc == 2 and str(path) in line and words in line, line


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--n", "16"], "--n cannot be combined with --ic"),
        (["--seed", "2"], "--seed cannot be combined with --ic"),
        (["--bh-mass", "0.1"], "--bh-mass cannot be combined with --ic"),
        (["--model", "king"], "--model cannot be combined with --ic"),
        (["--ic-scaling", "exact"], "--ic-scale"),
        (["--resume", "x.npz"], "--ic and --resume exclude each other"),
        (["--ic-format", "banana", "--ic-columns", "m,x,y,z,vx,vy,vz"],
         "--ic-columns is for text columns"),
        (["--ic-columns", "m,x,y,z,vx,vy"], "--ic-columns: vz missing"),
    ],
)
def test_ic_conflicts(tmp_path, capsys, argv, words):
    path = tmp_path / "ok.txt"
    path.write_text("0.5 1 0 0 0 0.5 0\n0.5 -1 0 0 0 -0.5 0\n")
    rc = call([*RUN, "--ic", str(path), "--out", str(tmp_path / "out"), *argv])
    assert rc == 2 and words in one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--ic-scale", "nbody"], "--ic-scale needs --ic FILE"),
        (["--ic-format", "banana"], "--ic-format needs --ic FILE"),
        (["--w0", "6"], "give --model king"),
        (["--model", "king", "--w0", "0.5"], "--w0 must be from 1 to 12"),
        (["--model", "king", "--w0", "13"], "--w0 must be from 1 to 12"),
    ],
)
def test_model_option_errors(tmp_path, capsys, argv, words):
    rc = call([*RUN, "--n", "16", "--out", str(tmp_path / "out"), *argv])
    assert rc == 2 and words in one_line_error(capsys.readouterr().err)


def test_king_run_records_its_model(tmp_path, capsys):
    out = tmp_path / "king"
    assert call(["run", "--model", "king", "--w0", "5", "--n", "64", "--t-end", "0.03125",
                 "--out", str(out), "--no-plots"]) == 0
    assert "King model (W0 = 5), seed 0" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == "king" and summary["w0"] == 5.0
    assert summary["initial_conditions"] == {
        "model": "king", "n": 64, "w0": 5.0, "seed": 0, "bh_mass": 0.0,
        "heavy_fraction": 0.0, "mass_ratio": 10.0, "ic_scaling": "analytic"}
    snap = out / "snapshot_final.npz"
    rc = call(["run", "--resume", str(snap), "--w0", "6", "--t-end", "0.0625", "--out",
               str(out), "--quiet", "--no-plots"])
    assert rc == 2 and "--w0 6.0 conflicts with the snapshot" in one_line_error(
        capsys.readouterr().err)
    assert call(["run", "--resume", str(snap), "--t-end", "0.0625", "--out", str(out),
                 "--quiet", "--no-plots"]) == 0


def test_default_run_records_plummer(tmp_path):
    out = tmp_path / "plummer"
    assert call(["run", "--n", "32", "--t-end", "0.03125", "--out", str(out), "--quiet",
                 "--no-plots"]) == 0
    source = json.loads((out / "summary.json").read_text())["initial_conditions"]
    assert source["model"] == "plummer" and "w0" not in source and source["n"] == 32
