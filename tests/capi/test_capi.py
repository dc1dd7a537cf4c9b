"""The GRAPE-6 API for C and Fortran (libsapporo.so), driven by real C and Fortran programs.

Tolerances: the library's default precision is double-single (relative force error ~1e-6),
so first forces must agree with the float64 reference to 1e-5 of sum_j |term_j|; ``double``
precision to 1e-10.  A 4th-order Hermite run of a 128-body Plummer model (eps2 = 0,
eta = 0.02, to t = 1/4) must conserve energy to |dE/E| < 1e-6 (measured: 7e-8).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

import sapporo
from sapporo.reference import forces, plummer, relative_vector_error

if TYPE_CHECKING:
    from conftest import CApi

N = 128
H2 = 0.05
ENERGY_TOL = 1e-6
DS_TOL = 1e-5

# Every function of docs grape6-api.md, C name; the Fortran name adds "_".
GRAPE6 = [
    "g6_open", "g6_close", "g6_npipes", "g6_set_tunit", "g6_set_xunit", "g6_set_ti",
    "g6_set_j_particle", "g6calc_firsthalf", "g6calc_lasthalf", "g6calc_lasthalf2",
    "g6_read_neighbour_list", "g6_get_neighbour_list", "g6_initialize_jp_buffer",
    "g6_flush_jp_buffer", "g6_reset", "g6_reset_fofpga", "g6_set_neighbour_list_sort_mode",
    "g6_set_overflow_flag_test_mode", "g6_open_special",
]
EXTENSIONS = [
    "sapporo_open", "sapporo_set_j_particle", "sapporo_calc_firsthalf",
    "sapporo_calc_lasthalf", "sapporo_flush", "sapporo_last_error", "sapporo_version",
    "sapporo_set_j_particle8", "sapporo_calc_firsthalf8", "sapporo_calc_lasthalf8",
    "sapporo_direct_calls", "sapporo_python_calls",
]


# ----------------------------------------------------------------------------- helpers


def write_ic(path: Path, n: int = N, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, v, m = plummer(n, seed=seed)
    rows = np.column_stack([m, x, v])
    np.savetxt(path, rows, fmt="%.17g", header=str(n), comments="")
    return x, v, m


def read_neighbour_file(path: Path) -> dict[int, list[int]]:
    out = {}
    for line in path.read_text().splitlines():
        vals = [int(t) for t in line.split()]
        assert len(vals) == 2 + vals[1], f"bad neighbour line {line!r}"
        out[vals[0]] = vals[2:]
    return out


def check_first_forces(prefix: Path, x: np.ndarray, v: np.ndarray, m: np.ndarray,
                       eps2: float, tol: float) -> None:
    """Compare OUT.forces and OUT.nb of a hermite run with the float64 reference."""
    data = np.loadtxt(f"{prefix}.forces")
    idx = np.arange(len(m))
    assert np.array_equal(data[:, 0], idx)
    ref = forces(x, v, idx, x, v, m, idx, eps2, order=4, h2=H2)
    assert relative_vector_error(data[:, 1:4], ref.acc, ref.acc_abs).max() < tol
    assert relative_vector_error(data[:, 4:7], ref.jerk, ref.jerk_abs).max() < tol
    assert relative_vector_error(data[:, 7], ref.pot, ref.pot_abs).max() < tol
    r2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    nnb = data[:, 8].astype(int)
    assert (nnb != idx).all(), "a particle is its own nearest neighbour"
    differ = np.flatnonzero(nnb != ref.nn_index)  # only on near ties
    assert np.allclose(r2[differ, nnb[differ]], ref.nn_r2[differ], rtol=tol, atol=0)
    lists = read_neighbour_file(Path(f"{prefix}.nb"))
    assert sorted(lists) == list(idx)
    for i in idx:
        got = lists[i]
        assert got == sorted(got), "neighbour list not ascending"
        assert i not in got, "a particle is in its own neighbour list"
        for k in set(got) ^ set(ref.neighbours[i].tolist()):  # only on the sphere's edge
            assert abs(r2[i, k] - H2) <= tol * H2, (i, k)
    assert sum(len(lst) for lst in lists.values()) > N / 4, "test needs some neighbours"


def parse_energy(stdout: str) -> tuple[float, float]:
    match = re.search(r"E0\s+(\S+)\s+E1\s+(\S+)\s+steps\s+(\d+)", stdout)
    assert match, stdout
    return float(match[1]), float(match[2])


# ----------------------------------------------------------------------------- the build


def test_exported_symbols_only_g6_g5_and_sapporo(capi: CApi) -> None:
    names = capi.exported()
    stray = sorted(n for n in names
                   if not re.match(r"(g6|g5_|sapporo_|get_device_count$)", n))
    assert not stray, f"exported symbols outside g6*/g5_*/sapporo_*/get_device_count: {stray}"
    expected = (set(GRAPE6) | {f"{f}_" for f in GRAPE6} | set(EXTENSIONS)
                | {f"{f}_" for f in EXTENSIONS})
    assert expected <= names, f"missing: {sorted(expected - names)}"


def test_libg6_alias_and_headers(capi: CApi) -> None:
    alias = capi.lib_dir / "libg6.so"
    assert alias.resolve() == capi.library.resolve()
    for header in ("grape6.h", "sapporo.h"):
        assert (capi.prefix / "include" / header).is_file()


def test_flags_command(capi: CApi) -> None:
    def flags(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "sapporo.cli", "capi", "flags", "--prefix", str(capi.prefix),
             *args], capture_output=True, text=True, check=True,
        )
        assert "building" not in proc.stderr, "flags rebuilt a current library"
        return proc.stdout.strip()

    assert flags().split() == capi.link_flags()
    assert flags("--cflags") == f"-I{capi.prefix / 'include'}"
    assert flags("--libs").split() == capi.link_flags()[1:]


def test_flags_builds_on_demand_in_the_default_prefix(capi: CApi, tmp_path: Path) -> None:
    """``cc prog.c $(sapporo capi flags)`` just works, building into the per-user folder."""
    (tmp_path / "prog.c").write_text(
        '#include <stdio.h>\n#include "sapporo.h"\n'
        'int main(void) { printf("npipes %d\\n", g6_npipes()); return 0; }\n'
    )
    data_home = tmp_path / "data"
    env = {**os.environ, "XDG_DATA_HOME": str(data_home)}
    cmd = f"{capi.cc} prog.c -o prog $({sys.executable} -m sapporo.cli capi flags)"
    proc = subprocess.run(cmd, shell=True, cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert "building" in proc.stderr
    assert list(data_home.glob("sapporo/capi/*/lib/libsapporo.so"))
    assert capi.run(tmp_path / "prog", cwd=tmp_path).stdout == "npipes 128\n"


# ----------------------------------------------------------------------------- integrators


def test_c_hermite_plummer(capi: CApi, tmp_path: Path) -> None:
    """C names: first forces, nearest neighbours, neighbour lists, eps2 = 0, energy."""
    exe = capi.program("hermite.c")
    x, v, m = write_ic(tmp_path / "ic.txt")
    proc = capi.run(exe, "ic.txt", "out", 0.0, 0.25, 0.02, H2, cwd=tmp_path)
    check_first_forces(tmp_path / "out", x, v, m, 0.0, DS_TOL)
    e0, e1 = parse_energy(proc.stdout)
    assert abs((e1 - e0) / e0) < ENERGY_TOL
    assert abs(e0 + 0.25) < 0.05  # a Plummer model in Henon units


def test_fortran_hermite_plummer(capi: CApi, tmp_path: Path) -> None:
    """Fortran names through gfortran, linked with -lg6; the same checks as in C."""
    exe = capi.program("hermite.f90", lib="g6")
    x, v, m = write_ic(tmp_path / "ic.txt")
    proc = capi.run(exe, "ic.txt", "out", 0.0, 0.25, 0.02, H2, cwd=tmp_path)
    check_first_forces(tmp_path / "out", x, v, m, 0.0, DS_TOL)
    e0, e1 = parse_energy(proc.stdout)
    assert abs((e1 - e0) / e0) < ENERGY_TOL


def test_c_hermite_double_precision_softened(capi: CApi, tmp_path: Path) -> None:
    """Precision from the environment (SAPPORO_PRECISION=double), eps2 > 0, npipes 32."""
    exe = capi.program("hermite.c")
    x, v, m = write_ic(tmp_path / "ic.txt", seed=3)
    env = capi.env(SAPPORO_PRECISION="double", SAPPORO_NPIPES="32")
    proc = capi.run(exe, "ic.txt", "out", 1e-4, 0.125, 0.02, H2, cwd=tmp_path, env=env)
    check_first_forces(tmp_path / "out", x, v, m, 1e-4, 1e-10)
    e0, e1 = parse_energy(proc.stdout)
    assert abs((e1 - e0) / e0) < ENERGY_TOL


@pytest.mark.parametrize("source", ["ext.c", "ext.f90"])
def test_order6_extensions(capi: CApi, tmp_path: Path, source: str) -> None:
    """sapporo_open(6, "double"), unscaled j-particles with snap and crackle, snap, nn_r2;
    from C, and through the Fortran names (blank strings, h2(1) < 0, error text)."""
    n, ti, eps2 = 64, 0.01, 1e-3
    x, v, m = plummer(n, seed=5)
    rng = np.random.default_rng(5)
    a, jerk, snap, crackle = (rng.normal(0, s, (n, 3)) for s in (1.0, 3.0, 10.0, 30.0))
    np.savetxt(tmp_path / "ic.txt", np.column_stack([m, x, v, a, jerk, snap, crackle]),
               fmt="%.17g", header=str(n), comments="")
    proc = capi.run(capi.program(source), "ic.txt", "out", ti, eps2, cwd=tmp_path)
    if source.endswith(".f90"):
        assert f"version {sapporo.__version__}" in proc.stdout
        bad = re.search(r"^bad (-\d+) (.*)$", proc.stdout, re.M)
        assert bad and int(bad.group(1)) < 0 and "quadruple" in bad.group(2), proc.stdout
    data = np.loadtxt(tmp_path / "out")
    dt = ti
    xp = x + dt * (v + dt * (a / 2 + dt * (jerk / 6 + dt * (snap / 24 + dt * crackle / 120))))
    vp = v + dt * (a + dt * (jerk / 2 + dt * (snap / 6 + dt * crackle / 24)))
    ap = a + dt * (jerk + dt * (snap / 2 + dt * crackle / 6))
    idx = np.arange(n)
    ref = forces(x, v, idx, xp, vp, m, idx, eps2, order=6, ai=a, aj=ap)
    tol = 1e-10
    assert relative_vector_error(data[:, 1:4], ref.acc, ref.acc_abs).max() < tol
    assert relative_vector_error(data[:, 4:7], ref.jerk, ref.jerk_abs).max() < tol
    assert relative_vector_error(data[:, 7:10], ref.snap, ref.snap_abs).max() < tol
    assert relative_vector_error(data[:, 10], ref.pot, ref.pot_abs).max() < tol
    assert np.array_equal(data[:, 11].astype(int), ref.nn_index)
    np.testing.assert_allclose(data[:, 12], ref.nn_r2, rtol=1e-12)


@pytest.mark.parametrize("source", ["ext8.c", "ext8.f90"])
def test_order8_extension(capi: CApi, tmp_path: Path, source: str) -> None:
    """sapporo_open(8, "double"): j-particles with snap, crackle, pop and d5 predicted
    through d5, force calls with the i-particles' jerks returning snap and crackle, from C
    and through the Fortran names; a call without the jerks is refused (C)."""
    n, ti, eps2 = 64, 0.01, 1e-3
    x, v, m = plummer(n, seed=6)
    rng = np.random.default_rng(6)
    derivs = [rng.normal(0, s, (n, 3)) for s in (1.0, 3.0, 10.0, 30.0, 100.0, 300.0)]
    a, jerk = derivs[0], derivs[1]
    np.savetxt(tmp_path / "ic.txt", np.column_stack([m, x, v, *derivs]), fmt="%.17g",
               header=str(n), comments="")
    proc = capi.run(capi.program(source), "ic.txt", "out", ti, eps2, cwd=tmp_path)
    if source.endswith(".c"):
        bad = re.search(r"^nojerk (-?\d+) (.*)$", proc.stdout, re.M)
        assert bad and int(bad.group(1)) == -1 and "jerk" in bad.group(2), proc.stdout
    data = np.loadtxt(tmp_path / "out")
    # x, v, a and jerk of the j-particles through d5, term by term
    d = [x, v, *derivs]
    xp, vp, ap, jp = (sum(d[k + q] * ti**q / math.factorial(q) for q in range(8 - k))
                      for k in range(4))
    idx = np.arange(n)
    ref = forces(x, v, idx, xp, vp, m, idx, eps2, order=8, ai=a, aj=ap, ji=jerk, jj=jp)
    tol = 1e-10
    for cols, name in ((slice(1, 4), "acc"), (slice(4, 7), "jerk"), (slice(7, 10), "snap"),
                       (slice(10, 13), "crackle")):
        err = relative_vector_error(data[:, cols], getattr(ref, name),
                                    getattr(ref, f"{name}_abs"))
        assert err.max() < tol, (name, err.max())
    assert relative_vector_error(data[:, 13], ref.pot, ref.pot_abs).max() < tol
    assert np.array_equal(data[:, 14].astype(int), ref.nn_index)
    np.testing.assert_allclose(data[:, 15], ref.nn_r2, rtol=1e-12)


# ----------------------------------------------------------------------------- robustness


@pytest.mark.parametrize("precision", ["double", "double-single"])
def test_scaled_j_particles_are_predicted(capi: CApi, tmp_path: Path, precision: str) -> None:
    """g6_set_j_particle's a/2, jerk/6 and snap/18 at each particle's own time tj, predicted to
    ti by the library: the forces of a float64 Taylor prediction (reference.predict), the
    nearest neighbours and lists too. An address sent twice before the flush counts once,
    with its last values. g6_get_neighbour_list with maxlength 1 copies one id and returns 1
    for longer lists."""
    from sapporo import reference

    ti, eps2, h2 = 0.375, 1e-3, 0.3
    env = capi.env(SAPPORO_PRECISION=precision, SAPPORO_ORDER="4")
    proc = capi.run(capi.program("predict.c"), ti, eps2, h2, cwd=tmp_path, env=env)
    rows = {tag: [ln.split()[1:] for ln in proc.stdout.splitlines() if ln.split()[0] == tag]
            for tag in ("J", "I", "F", "NB")}
    j = np.array(rows["J"], dtype=float)
    assert len(j) == 40 and sorted(j[:, 0]) == list(range(40))  # address 3 once
    idj, tj, m = j[:, 1].astype(int), j[:, 2], j[:, 3]
    x, v, a, jerk, snap = (j[:, 4 + 3 * q: 7 + 3 * q] for q in range(5))
    assert (tj < ti).sum() > 20  # most are predicted
    xp, vp, _ = reference.predict(ti, tj, x, v, a, jerk, snap)
    i = np.array(rows["I"], dtype=float)
    idi, xi, vi = i[:, 0].astype(int), i[:, 1:4], i[:, 4:7]
    r = forces(xi, vi, idi, xp, vp, m, idj, eps2, order=4, h2=h2)
    f = np.array(rows["F"], dtype=float)
    acc, jk, pot, nnb = f[:, 1:4], f[:, 4:7], f[:, 7], f[:, 8].astype(int)
    tol = 1e-12 if precision == "double" else DS_TOL
    assert relative_vector_error(acc, r.acc, r.acc_abs).max() < tol
    assert relative_vector_error(jk, r.jerk, r.jerk_abs).max() < tol
    assert (np.abs(pot - r.pot) / np.abs(r.pot)).max() < tol
    np.testing.assert_array_equal(nnb, r.nn_index)
    for k, rc, nblen, first, second in (map(int, row) for row in rows["NB"]):
        want = r.neighbours[k]
        assert nblen == want.size and rc == int(want.size > 1), (k, rc, nblen)
        assert first == (want[0] if want.size else -7) and second == -7
    assert any(int(row[2]) > 1 for row in rows["NB"])  # some lists did not fit


def test_bad_calls_report_and_continue(capi: CApi, tmp_path: Path) -> None:
    env = capi.env(SAPPORO_NPIPES="8", SAPPORO_NB_CAPACITY="2")
    proc = capi.run(capi.program("badcalls.c"), cwd=tmp_path, env=env)
    assert "END" in proc.stdout
    assert "npipes 8" in proc.stdout
    checks = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CHECK "):
            head, _, message = line.partition(" | ")
            _, label, rc = head.split()
            checks[label] = (int(rc), message)
    expected = {  # label: (code, words of the message)
        "settime_before_open": (-2, "not open"),
        "open": (0, ""),
        "settime": (0, ""),
        "address_negative": (-1, "address = -1"),
        "nan_j": (-1, "NaN"),
        "huge_j": (-1, "squared distances would overflow double"),
        "ni_above_npipes": (-1, "g6_npipes() = 8"),
        "good_after_errors": (0, ""),
        "ni_zero": (-1, "ni = 0"),
        "nan_i": (-1, "non-finite"),
        "lasthalf_without_firsthalf": (-2, "no force call pending"),
        "nj_beyond_stored": (-1, "nj"),
        "coincident": (-5, "non-finite"),
        "good_again": (0, ""),
        "read_neighbours": (0, ""),
        "ipipe_out_of_range": (-1, "ipipe = 50"),
        "nb_force": (0, ""),
        "nb_read_overflow": (1, ""),
        "nb_get_overflow": (1, ""),
        "nb_force_failed": (-1, "g6_npipes()"),
        "nb_read_after_failed": (-2, "the last force call failed"),
        "nb_get_after_failed": (-2, "the last force call failed"),
        "move_1": (0, ""),
        "address_too_large": (-1, "largest j-address"),
        "settime_after_bad_address": (0, ""),
        "force_after_bad_address": (0, ""),
        "close": (0, ""),
        "set_j_closed": (-2, "not open"),
        "settime_closed": (-2, "not open"),
        "force_closed": (-2, "not open"),
        "close_again": (0, ""),
        "reopen_null": (0, ""),
        "settime_reopened": (0, ""),
        "good_reopened": (0, ""),
        "close_end": (0, ""),
        "open_special": (0, ""),
        "close_special": (0, ""),
        "open_special_zero": (0, ""),
        "close_special_zero": (0, ""),
        "open_special_any": (0, ""),
        "close_special_any": (0, ""),
    }
    for label, (code, words) in expected.items():
        assert label in checks, f"check {label} did not run:\n{proc.stdout}"
        rc, message = checks[label]
        assert rc == code, f"{label}: rc {rc}, expected {code} ({message})"
        assert words in message, f"{label}: message {message!r} lacks {words!r}"
        if code < 0:
            assert f"(code {code})" in message
    # One stderr line per kind of error (code and message, numbers left out), as documented.
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("sapporo: ")]
    kinds = {(rc, re.sub(r"\d", "", msg.split(": ", 1)[1]))
             for rc, msg in checks.values() if rc < 0}
    assert len(errors) == len(kinds) < sum(1 for c, _ in expected.values() if c < 0), errors
    assert "Traceback" not in proc.stderr
    # Overflow: the full length (3), the stored ids (capacity 2) ascending, from {1, 2, 3}.
    nblist = [int(w) for w in re.search(r"nblist (.*)", proc.stdout)[1].split()]
    assert nblist[0] == 3 and nblist[1] < nblist[2] and {*nblist[1:]} <= {1, 2, 3}
    moved = [float(w) for w in re.search(r"moved (.*)", proc.stdout)[1].split()]
    np.testing.assert_allclose(moved, [0, 1, 1 + 1e-4], rtol=1e-6, atol=1e-12)
    acc = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("acc0")]
    assert len(acc) == 2 and acc[0] == acc[1]
    # Unit masses at (1,0,0), (0,1,0), (0,0,1) on one at the origin: acc = (1, 1, 1).
    np.testing.assert_allclose([float(a) for a in acc[0]], [1, 1, 1], rtol=1e-6)


def _garbage_run(capi: CApi, tmp_path: Path, *args: str, **env: str) -> tuple[str, str, tuple]:
    """Run garbage.c on 64 Plummer bodies; its stdout, stderr and the bodies (x, v, m)."""
    bodies = write_ic(tmp_path / "ic.txt", n=64, seed=11)
    proc = capi.run(capi.program("garbage.c"), "ic.txt", *args, cwd=tmp_path,
                    env=capi.env(**env))
    assert "END" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout, proc.stderr, bodies


def _check_garbage_forces(stdout: str, bodies: tuple, capacity: int, order: int = 4) -> None:
    """Every call of garbage.c: forces of the float64 reference to DS_TOL (jerks from order
    4), return codes 0, and neighbour lists only where h2 is finite and positive."""
    x, v, m = bodies
    n = len(m)
    idx = np.arange(n)
    ref = forces(x, v, idx, x, v, m, idx, 0.0, order=4)
    r2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    mixed = [np.nan, 0.05, -np.inf, np.inf, 1e300]
    for name in ("nan", "mixed", "huge"):
        rows = [ln.split()[2:] for ln in stdout.splitlines() if ln.startswith(f"F {name} ")]
        assert len(rows) == 2 * n, name  # each call twice
        for half in (rows[:n], rows[n:]):
            f = np.array(half, dtype=float)
            assert relative_vector_error(f[:, 1:4], ref.acc, ref.acc_abs).max() < DS_TOL, name
            if order >= 4:
                assert relative_vector_error(f[:, 4:7], ref.jerk, ref.jerk_abs).max() < DS_TOL
            else:
                assert (f[:, 4:7] == 0).all(), name
            assert relative_vector_error(f[:, 7], ref.pot, ref.pot_abs).max() < DS_TOL, name
            nn = f[:, 8].astype(int)
            differ = np.flatnonzero(nn != ref.nn_index)  # only on near ties
            assert np.allclose(r2[differ, nn[differ]], ref.nn_r2[differ], rtol=DS_TOL)
        rcs = [ln.split()[2:] for ln in stdout.splitlines() if ln.startswith(f"RC {name} ")]
        h2 = np.array([{"nan": np.nan, "huge": 1e300}.get(name, mixed[i % 5])
                       for i in range(n)])
        wants = np.isfinite(h2) & (h2 > 0)
        want_len = np.zeros(n, dtype=int)
        for i in np.flatnonzero(wants):
            want_len[i] = int(((r2[i] < h2[i]) & (idx != i)).sum())
        overflow = want_len > capacity
        assert [r[:2] for r in rcs] == [["0", str(int(overflow.any()))]] * 2, (name, rcs)
        nbs = [list(map(int, ln.split()[2:])) for ln in stdout.splitlines()
               if ln.startswith(f"NB {name} ")]
        for k, (i, rc_get, nblen) in enumerate(nbs):
            assert i == k % n and nblen == want_len[i], (name, i, nblen, want_len[i])
            assert rc_get == int(nblen > capacity), (name, i, rc_get)
    assert (want_len[wants] == n - 1).all()  # the last kind, 1e300: everyone


def test_garbage_h2_and_unread_arrays_cost_no_forces(capi: CApi, tmp_path: Path) -> None:
    """Sapporo2's example integrator passes h2 it never set, and aold, j6old, phiold, which
    4th order does not read: NaN there, and h2 = 1e300 (everyone a neighbour: the lists
    overflow as usual), leave the forces as the float64 reference has them, every call
    returns 0, and a throttled warning names the first particle whose h2 is not finite."""
    out, err, bodies = _garbage_run(capi, tmp_path, SAPPORO_NB_CAPACITY="8")
    assert "open 0" in out
    _check_garbage_forces(out, bodies, capacity=8)
    calls = [int(ln.split()[-1]) for ln in out.splitlines() if ln.startswith("RC ")]
    # the second call of each kind runs on the direct path
    assert all(calls[k] > calls[k - 1] for k in (1, 3, 5)), calls
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    # 4 calls with a non-finite h2 (2 "nan", 2 "mixed"): one kind per value printed (nan,
    # inf), each the 1st time only
    assert warnings and all(w.startswith("sapporo: g6calc_firsthalf: warning: h2 (neighbour "
                                         "radius squared) is not finite for ") for w in warnings)
    assert "64 of 64 i-particles, the first h2[0] = nan (index 0)" in warnings[0], warnings
    assert len(warnings) == len(set(warnings)) <= 3, warnings
    assert "code -" not in err, err  # no error at all


def test_order2_reads_no_i_velocities(capi: CApi, tmp_path: Path) -> None:
    """At order 2 (no jerk) the i-particles' velocities are not read: NaN there costs
    nothing either."""
    out, err, bodies = _garbage_run(capi, tmp_path, "nanv", SAPPORO_ORDER="2",
                                    SAPPORO_NB_CAPACITY="8")
    _check_garbage_forces(out, bodies, capacity=8, order=2)
    assert "code -" not in err, err


def test_npipes_out_of_range_is_clamped(capi: CApi, tmp_path: Path) -> None:
    """SAPPORO_NPIPES=100000: g6_open opens all the same, with 65536 pipes (the message
    once on stderr), and the forces are right."""
    from sapporo.config import MAX_NPIPES

    out, err, bodies = _garbage_run(capi, tmp_path, SAPPORO_NPIPES="100000")
    assert f"npipes {MAX_NPIPES}" in out and "open 0" in out, out
    said = [ln for ln in err.splitlines() if "SAPPORO_NPIPES" in ln]
    assert len(said) == 1 and "100000" in said[0] and f"using {MAX_NPIPES}" in said[0], said
    _check_garbage_forces(out, bodies, capacity=256)


def test_second_process_reports_what_the_first_did(capi: CApi, tmp_path: Path) -> None:
    """Two runs of the same client, one after the other, with the same caches: the second
    opens as the first did, and coincident particles with eps2 = 0 get -5 and the message
    both times (nothing of the first run decides how the second computes)."""
    env = capi.env(SAPPORO_NPIPES="8", SAPPORO_NB_CAPACITY="2",
                   SAPPORO_KERNEL_CACHE=str(tmp_path / "cache"))
    exe = capi.program("badcalls.c")
    for run in range(2):
        proc = capi.run(exe, cwd=tmp_path, env=env)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("CHECK coincident ")]
        assert line and line[0].startswith("CHECK coincident -5 | "), (run, proc.stdout)
        assert "non-finite" in line[0] and "(code -5)" in line[0], (run, line[0])
        assert "non-finite" in proc.stderr, (run, proc.stderr)


def test_client_wrappers_over_fortran_names_do_not_recurse(capi: CApi, tmp_path: Path) -> None:
    """A client's own g6_open() etc. over g6_open_() & co.; g6_open_(NULL) tolerated."""
    proc = capi.run(capi.program("wrappers.c", extra=("-rdynamic",)), cwd=tmp_path)
    assert "RECURSION" not in proc.stdout
    match = re.search(r"OK acc (\S+)", proc.stdout)
    assert match and abs(float(match[1]) - 1.0) < 1e-6, proc.stdout


def test_first_call_from_several_threads(capi: CApi, tmp_path: Path) -> None:
    proc = capi.run(capi.program("threads.c"), cwd=tmp_path)
    match = re.search(r"OK npipes (\d+) version (\S+) maxerr (\S+)", proc.stdout)
    assert match, proc.stdout
    assert int(match[1]) == 128
    assert float(match[3]) < DS_TOL


def test_sapporo2_config_file_is_read(capi: CApi, tmp_path: Path) -> None:
    """./sapporo2.config names a device that does not exist: g6_open says so, no crash."""
    (tmp_path / "sapporo2.config").write_text("1\n97\n")
    proc = capi.run(capi.program("badcalls.c"), cwd=tmp_path, check=False)
    assert proc.returncode == 3, proc.stderr  # badcalls stops: it cannot store particles
    assert re.search(r"CHECK open -1 \| g6_open: devices: 97", proc.stdout), proc.stdout
    # SAPPORO_DEVICES wins over the file.
    proc = capi.run(capi.program("badcalls.c"), cwd=tmp_path, env=capi.env(SAPPORO_DEVICES="0"))
    assert "CHECK open 0 |" in proc.stdout


def test_init_failure_is_reported_not_fatal(capi: CApi, tmp_path: Path) -> None:
    """The embedded init fails (sapporo.capi.bridge made unimportable): no crash, clear codes."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "zz_break.pth").write_text(
        "import sys; sys.modules['sapporo.capi.bridge'] = None\n"
    )
    env = capi.env(SAPPORO_SITE=os.pathsep.join([*capi.sites, str(site_dir)]))
    proc = capi.run(capi.program("badcalls.c"), cwd=tmp_path, check=False, env=env)
    assert proc.returncode == 3, proc.stderr  # went on to its first store, which it checks
    assert re.search(r"CHECK open -6 \| g6_open: the embedded Python could not load sapporo",
                     proc.stdout), proc.stdout
    assert "npipes 128" in proc.stdout  # never an error code: clients size arrays with it


def test_open_failed_then_every_force_call_says_why(capi: CApi, tmp_path: Path) -> None:
    """A client that checks nothing runs on after a failed g6_open: each force call prints
    the reason (never throttled), the other calls' messages stay throttled, no crash; with
    SAPPORO_ON_ERROR=abort the program stops at the failed open."""
    exe = capi.program("openfail.c")
    proc = capi.run(exe, cwd=tmp_path, env=capi.env(SAPPORO_BACKEND="bogus"))
    assert "END" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr
    rc = int(re.search(r"^open (-?\d+)$", proc.stdout, re.M)[1])
    assert rc < 0
    assert "npipes 128" in proc.stdout
    steps = re.findall(r"^step \d+ (-?\d+) (\S+)$", proc.stdout, re.M)
    assert len(steps) == 25 and all(int(s[0]) == -2 for s in steps), proc.stdout
    lines = proc.stderr.splitlines()
    forces_lines = [ln for ln in lines if ln.startswith("sapporo: g6calc_firsthalf: no forces")]
    assert len(forces_lines) == 25, proc.stderr
    assert all("SAPPORO_BACKEND" in ln and "bogus" in ln for ln in forces_lines), forces_lines
    assert forces_lines[-1].endswith("[25 times so far]")
    # the 225 stores and g6_set_ti calls: one kind, printed the 1st, 10th and 100th time
    others = [ln for ln in lines if "g6_set_j_particle" in ln or "g6_set_ti" in ln]
    assert len(others) == 3, others
    proc = capi.run(exe, cwd=tmp_path, check=False,
                    env=capi.env(SAPPORO_BACKEND="bogus", SAPPORO_ON_ERROR="abort"))
    assert proc.returncode == 1 and "step" not in proc.stdout, proc.stdout
    assert "SAPPORO_ON_ERROR=abort" in proc.stderr


def test_embedded_interpreter_is_the_installing_one(capi: CApi, tmp_path: Path) -> None:
    """With no variables set, the program runs this interpreter with these packages (a .pth
    in an extra site directory, via SAPPORO_SITE, records them when the library opens)."""
    import _cffi_backend

    site = tmp_path / "site"
    site.mkdir()
    (site / "sapporo_capi_seen.py").write_text(SEEN)
    (site / "zz_sapporo_capi_seen.pth").write_text("import sapporo_capi_seen\n")
    env = capi.env(SAPPORO_SITE=os.pathsep.join([*capi.sites, str(site)]))
    capi.run(capi.program("bench.c"), 64, 16, 3, cwd=tmp_path, env=env)
    seen = json.loads((tmp_path / "embedded-modules.json").read_text())
    assert seen == {
        "executable": sys.executable,
        "_cffi_backend": _cffi_backend.__file__,
        "numpy": np.__file__,
        "sapporo": sys.modules["sapporo"].__file__,
    }


SEEN = '''\
"""Records the embedded interpreter's modules when a library opens (C API tests only)."""
import json
import sys

import sapporo.core.library as L

_init = L.Library.__init__


def _recording_init(self, *args, **kwargs):
    seen = {name: sys.modules[name].__file__ for name in ("_cffi_backend", "numpy", "sapporo")}
    with open("embedded-modules.json", "w") as fh:
        json.dump({"executable": sys.executable, **seen}, fh)
    _init(self, *args, **kwargs)


L.Library.__init__ = _recording_init
'''


def test_null_scalar_pointers_to_fortran_names_are_refused_by_name(capi, tmp_path):
    """A NULL scalar given to a Fortran name (every scalar by reference) is refused with
    SAPPORO_ERR_INPUT naming the argument (not a crash, not "n = -1" or "eps = nan"); the
    library computes afterwards."""
    proc = capi.run(capi.program("null_scalars.c"), cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "ok"
    assert "= -1" not in proc.stdout and "nan" not in proc.stdout.lower()


def test_a_store_the_engine_refuses_is_g6_set_tis_error(capi: CApi, tmp_path: Path) -> None:
    """g6_set_ti hands the buffered j-particles to the engine: a store it refuses (a mass
    below float's normal range in double-single) is that call's error, and the library then
    computes with what it holds."""
    proc = capi.run(capi.program("store_at_set_ti.c"), cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION="double-single"), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "ok"
