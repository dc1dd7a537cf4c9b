"""Clients written for other GRAPE-6 libraries: AMUSE's ph4 (sapporo_light), Phantom-GRAPE.

How they find the library (pkg-config, ``get_device_count``), what they call (every symbol
of sapporo_light, Sapporo2 and Phantom-GRAPE that such codes reference), and what happens to
a client that ignores error codes when the library is misconfigured.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from sapporo.capi.bridge import DEFAULT_NPIPES, MAX_NPIPES

from sapporo.reference import forces, plummer, relative_vector_error

if TYPE_CHECKING:
    from conftest import CApi

DS_TOL = 1e-5
ROOT = Path(__file__).resolve().parents[2]

# Symbols that AMUSE's codes (ph4's grape.h/gpu.cc, phiGRAPE's Fortran), sapporo_light,
# Sapporo2's GRAPE-6 interface and Phantom-GRAPE's PG6 export or call; "_" marks the
# Fortran name.  Kept in step with the table in docs/capi.md.
REFERENCED = [
    "get_device_count",
    "g6_open_", "g6_close_", "g6_npipes_", "g6_set_tunit_", "g6_set_xunit_", "g6_set_ti_",
    "g6_set_j_particle_", "g6calc_firsthalf_", "g6calc_lasthalf_", "g6calc_lasthalf2_",
    "g6_initialize_jp_buffer_", "g6_flush_jp_buffer_", "g6_reset_", "g6_reset_fofpga_",
    "g6_read_neighbour_list_", "g6_get_neighbour_list_",
    "g6_set_neighbour_list_sort_mode", "g6_set_overflow_flag_test_mode",
    "g6_open_special", "g6_get_nj_max_",
    "g6calc_lasthalfn", "g6calc_lasthalfn_", "g6calc_lasthalf2n", "g6calc_lasthalf2n_",
    "g6_setup_njdata", "g6_setup_njdata_",
]


def lines(stdout: str, key: str) -> list[list[str]]:
    return [ln.split()[1:] for ln in stdout.splitlines() if ln.split()[:1] == [key]]


def sapporo_errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("sapporo: ")]


# ----------------------------------------------------------------------------- finding us


def test_referenced_symbols_are_exported(capi: CApi) -> None:
    names = capi.exported()
    missing = sorted(set(REFERENCED) - names)
    assert not missing, f"not exported: {missing}"
    table = (ROOT / "docs" / "capi.md").read_text()
    undocumented = [s for s in REFERENCED if f"`{s.rstrip('_')}`" not in table]
    assert not undocumented, f"not in docs/capi.md's table: {undocumented}"


@pytest.mark.parametrize("module, lib", [("sapporo_light", "sapporo"), ("sapporo", "sapporo"),
                                         ("g6lib", "g6"), ("g5lib", "g5")])
def test_pkgconfig_modules_give_the_flags(capi: CApi, module: str, lib: str) -> None:
    """PREFIX/lib/pkgconfig/<module>.pc says what ``sapporo capi flags`` says (read in
    Python always; through pkg-config itself when it is installed)."""
    want = capi.link_flags(lib)
    assert capi.pc_file_flags(module) == want
    if lib == "sapporo":
        flags = subprocess.run(
            [sys.executable, "-m", "sapporo.cli", "capi", "flags", "--prefix", str(capi.prefix)],
            capture_output=True, text=True, check=True).stdout
        assert shlex.split(flags) == want
    pkg_config = shutil.which("pkg-config")
    if pkg_config is None:
        pytest.skip("pkg-config not installed (the .pc file was checked in Python)")
    env = capi.env(PKG_CONFIG_PATH=str(capi.lib_dir / "pkgconfig"))
    out = subprocess.run([pkg_config, "--cflags", "--libs", module], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert shlex.split(out) == want


def test_get_device_count(capi: CApi, tmp_path: Path) -> None:
    """sapporo_light's meaning: the devices of the backend in use, before any open."""
    from sapporo.backend import get_backend

    exe = capi.program("compat.c")
    proc = capi.run(exe, "devices", cwd=tmp_path)
    assert lines(proc.stdout, "devices") == [[str(len(get_backend(None).devices()))]]
    assert int(lines(proc.stdout, "devices")[0][0]) >= 1
    proc = capi.run(exe, "devices", cwd=tmp_path, env=capi.env(SAPPORO_BACKEND="nonsense"))
    assert lines(proc.stdout, "devices") == [["0"]]
    assert "get_device_count: SAPPORO_BACKEND" in proc.stdout  # sapporo_last_error()
    assert len(sapporo_errors(proc.stderr)) == 1


# ----------------------------------------------------------------------------- ph4's way


def write_ic(path: Path, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, v, m = plummer(n, seed=seed)
    np.savetxt(path, np.column_stack([m, x, v]), fmt="%.17g", header=str(n), comments="")
    return x, v, m


@pytest.fixture
def ph4style(capi: CApi) -> Path:
    """ph4style.cc built with the pkg-config module AMUSE uses (sapporo_light)."""
    return capi.program("ph4style.cc", flags=capi.pc_file_flags("sapporo_light"))


def test_ph4_style_client(capi: CApi, ph4style: Path, tmp_path: Path) -> None:
    """C++ wrappers over the Fortran names, new real[g6_npipes()], cluster id 32650: the
    forces, nearest neighbours and lists of 300 particles (3 chunks of 128)."""
    n, eps2, h2 = 300, 1e-4, 0.05
    x, v, m = write_ic(tmp_path / "ic.txt", n, seed=7)
    proc = capi.run(ph4style, "ic.txt", cwd=tmp_path)
    assert "END" in proc.stdout and not sapporo_errors(proc.stderr), proc.stderr
    assert lines(proc.stdout, "npipes") == [[str(DEFAULT_NPIPES)]]
    f = np.array(lines(proc.stdout, "F"), dtype=float)
    idx = np.arange(n)
    assert np.array_equal(f[:, 0], idx)
    ref = forces(x, v, idx, x, v, m, idx, eps2, order=4, h2=h2)
    assert relative_vector_error(f[:, 1:4], ref.acc, ref.acc_abs).max() < DS_TOL
    assert relative_vector_error(f[:, 4:7], ref.jerk, ref.jerk_abs).max() < DS_TOL
    assert relative_vector_error(f[:, 7], ref.pot, ref.pot_abs).max() < DS_TOL
    r2 = ((x[:, None] - x[None]) ** 2).sum(axis=2)
    nn = f[:, 8].astype(int)
    differ = nn != ref.nn_index  # only at near-ties
    np.testing.assert_allclose(r2[idx[differ], nn[differ]], ref.nn_r2[differ], rtol=DS_TOL)
    pot2 = np.array(lines(proc.stdout, "P"), dtype=float)
    np.testing.assert_array_equal(pot2[:, 1], f[:, 7])
    nb = {int(r[0]): [int(t) for t in r[2:]] for r in lines(proc.stdout, "NB")}
    assert sorted(nb) == list(idx)
    assert sum(map(len, nb.values())) > n / 4
    for i, got in nb.items():
        assert got == sorted(got) and i not in got
        for k in set(got) ^ set(ref.neighbours[i].tolist()):
            assert abs(r2[i, k] - h2) <= DS_TOL * h2


def test_ph4_style_client_misconfigured(capi: CApi, ph4style: Path, tmp_path: Path) -> None:
    """SAPPORO_BACKEND=nonsense: g6_open fails, the client ignores it and goes on. It is not
    crashed (g6_npipes() answers 128), and stderr says what went wrong once per kind."""
    write_ic(tmp_path / "ic.txt", 300, seed=7)
    env = capi.env(SAPPORO_BACKEND="nonsense")
    proc = capi.run(ph4style, "ic.txt", cwd=tmp_path, env=env)
    assert "END" in proc.stdout
    assert lines(proc.stdout, "npipes") == [[str(DEFAULT_NPIPES)]]
    errors = sapporo_errors(proc.stderr)
    assert "Traceback" not in proc.stderr
    assert re.match(r"sapporo: g6_open_: SAPPORO_BACKEND: .*'nonsense'.* \(code -3\)$",
                    errors[0]), errors
    # every later store fails with "not open" and the reason: one kind, printed the 1st,
    # 10th and 100th time (300 stores), not once per call; every force call says that it
    # computed nothing, and why, every time (impossible to miss in a run's log)
    stores = [e for e in errors if "g6_set_j_particle_" in e]
    forces = [e for e in errors if "no forces computed" in e]
    assert len(stores) == 3, errors
    assert re.match(r"sapporo: g6_set_j_particle_: the library is not open: g6_open_: "
                    r"SAPPORO_BACKEND.* \(code -2\)$", stores[0]), errors
    assert stores[1].endswith("[10 times so far]") and stores[2].endswith("[100 times so far]")
    assert forces and all("SAPPORO_BACKEND" in e for e in forces), errors
    assert len(errors) == 1 + len(stores) + len(forces), errors

    # SAPPORO_ON_ERROR=abort: the message, then exit status 1 at the first failure
    proc = capi.run(ph4style, "ic.txt", cwd=tmp_path, check=False,
                    env=capi.env(SAPPORO_BACKEND="nonsense", SAPPORO_ON_ERROR="abort"))
    assert proc.returncode == 1, proc.stderr
    assert "END" not in proc.stdout and "npipes" not in proc.stdout
    errors = sapporo_errors(proc.stderr)
    assert "g6_open_: SAPPORO_BACKEND" in errors[0]
    assert errors[-1] == "sapporo: stopping the program (SAPPORO_ON_ERROR=abort)"
    assert len(errors) == 2


def test_on_error_return_is_the_default_and_checked(capi: CApi, tmp_path: Path,
                                                    ph4style: Path) -> None:
    write_ic(tmp_path / "ic.txt", 20, seed=1)
    proc = capi.run(ph4style, "ic.txt", cwd=tmp_path,
                    env=capi.env(SAPPORO_BACKEND="nonsense", SAPPORO_ON_ERROR="sometimes"))
    assert "END" in proc.stdout
    assert "SAPPORO_ON_ERROR: expected 'return' or 'abort', got 'sometimes'" in proc.stderr


def test_repeated_errors_are_printed_1_10_100_times(capi: CApi, tmp_path: Path) -> None:
    """A kind of error repeated 150 times prints 3 lines: the 1st, 10th and 100th."""
    src = tmp_path / "repeat.c"
    src.write_text(
        '#include "grape6.h"\n'
        "int main(void) { for (int k = 0; k < 150; k++) g6_set_ti(0, 0.0); return 0; }\n")
    proc = capi.run(capi.program(str(src)), cwd=tmp_path)
    errors = sapporo_errors(proc.stderr)
    assert len(errors) == 3, errors
    assert errors[1].endswith("[10 times so far]") and errors[2].endswith("[100 times so far]")


# ----------------------------------------------------------------------------- reliability


def test_npipes_huge_is_clamped_malformed_refused_at_open(capi: CApi, tmp_path: Path) -> None:
    """A number out of range is clamped (one message); one that is not a number is refused,
    and g6_npipes() answers the default meanwhile."""
    exe = capi.program("compat.c")
    proc = capi.run(exe, "open", cwd=tmp_path, env=capi.env(SAPPORO_NPIPES="99999999999"))
    assert lines(proc.stdout, "npipes") == [[str(MAX_NPIPES)]]
    assert lines(proc.stdout, "open") == [["0", "|"]]
    said = [ln for ln in proc.stderr.splitlines() if "SAPPORO_NPIPES" in ln]
    assert said == [f"SAPPORO_NPIPES=99999999999 is out of range (expected an integer from 1 "
                    f"to {MAX_NPIPES}): using {MAX_NPIPES}"], proc.stderr
    proc = capi.run(exe, "open", cwd=tmp_path, env=capi.env(SAPPORO_NPIPES="lots"))
    assert lines(proc.stdout, "npipes") == [[str(DEFAULT_NPIPES)]]
    assert re.search(rf"^open -3 \| g6_open: SAPPORO_NPIPES: expected an integer from 1 to "
                     rf"{MAX_NPIPES}, got 'lots'", proc.stdout, re.M), proc.stdout
    assert lines(proc.stdout, "njmax") == [["0", "0"]]
    proc = capi.run(exe, "open", cwd=tmp_path, env=capi.env(SAPPORO_NPIPES=str(MAX_NPIPES)))
    assert lines(proc.stdout, "npipes") == [[str(MAX_NPIPES)]]
    assert lines(proc.stdout, "open") == [["0", "|"]]
    before, after = map(int, lines(proc.stdout, "njmax")[0])
    assert before == 0 and after > 1000


def test_binary_config_file_is_a_config_error(capi: CApi, tmp_path: Path) -> None:
    cfg = tmp_path / "devices.bin"
    cfg.write_bytes(bytes(range(256)) * 4)
    proc = capi.run(capi.program("compat.c"), "open", cwd=tmp_path,
                    env=capi.env(SAPPORO_CONFIG=str(cfg)))
    assert re.search(rf"^open -3 \| g6_open: {re.escape(str(cfg))}: not a text file",
                     proc.stdout, re.M), proc.stdout
    assert "UnicodeDecodeError" not in proc.stdout + proc.stderr


def test_all_nan_h2_is_a_warning_and_costs_no_forces(capi: CApi, tmp_path: Path) -> None:
    """h2 only shapes neighbour lists: all NaN means no lists, the forces are those of a
    finite h2, the call returns 0, and a warning (no error code) names the first one."""
    proc = capi.run(capi.program("compat.c"), "nanh2", cwd=tmp_path)
    (rc, ax, bar), = lines(proc.stdout, "nanh2")
    assert rc == "0" and bar == "|", proc.stdout
    assert lines(proc.stdout, "goodh2") == [["0", ax]]  # the same force
    assert float(ax) == pytest.approx(1.0, rel=1e-6)  # unit masses on the three axes
    assert ("sapporo: g6calc_firsthalf: warning: h2 (neighbour radius squared) is not finite "
            "for 4 of 4 i-particles, the first h2[0] = nan (index 0): no neighbour list for "
            "them; their forces are computed") in proc.stderr.splitlines(), proc.stderr


def test_field_points_with_negative_index(capi: CApi, tmp_path: Path) -> None:
    """Index -1 (phiGRAPE's gravity_at_point): every j-particle pulls, none is excluded."""
    proc = capi.run(capi.program("compat.c"), "field", cwd=tmp_path)
    assert lines(proc.stdout, "fieldrc") == [["0", "|"]]
    got = np.array(lines(proc.stdout, "field"), dtype=float)
    xj = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    m, ids = np.ones(4), np.arange(4)
    pts = np.array([[0, 0, 0], [2, 0, 0], [1, 0, 0]], float)
    ref = forces(pts, np.zeros((3, 3)), np.array([10, 10, 1]), xj, np.zeros((4, 3)), m, ids,
                 0.01, order=4)
    np.testing.assert_allclose(got[:, 1:4], ref.acc, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[:, 4], ref.pot, rtol=1e-6)
    np.testing.assert_array_equal(got[:, 5], [0, 1, 0])  # the point at 0 is on particle 0


# ----------------------------------------------------------------------------- Phantom-GRAPE


def test_phantom_grape_lasthalfn(capi: CApi, tmp_path: Path) -> None:
    """g6calc_lasthalfn / g6calc_lasthalf2n (C and Fortran names) give what lasthalf2 gives,
    and the lists of firsthalf's h2; h2 that reaches only lasthalfn is an error."""
    proc = capi.run(capi.program("compat.c", lib="g6"), "pg6", cwd=tmp_path)
    rows: dict[str, list[list[str]]] = {}
    for r in lines(proc.stdout, "pg6"):
        rows.setdefault(r[0], []).append(r[1:])
    base = rows["lasthalf2"]
    assert len(base) == 4 and all(r[0] == "0" for r in base)
    # unit masses at the origin and on the axes: particle 0 has 3 neighbours within 1.5^0.5
    assert base[0][5:] == ["3", "1", "2", "3"] and base[1][5:] == ["1", "0"]
    for name in ("lasthalfn", "lasthalf2n", "lasthalf2n_"):
        got = rows[name]
        assert [r[:4] + r[5:] for r in got] == [r[:4] + r[5:] for r in base], name
        if name != "lasthalfn":
            assert [r[4] for r in got] == [r[4] for r in base]  # nearest neighbours
    assert re.search(r"^pg6_h2_late -1 \| g6calc_lasthalfn: h2\[0\] = 1.5 reaches lasthalf "
                     r"but g6calc_firsthalf had no positive h2", proc.stdout, re.M), proc.stdout
    # an infinite h2 asks for no list, at firsthalf and at lasthalfn alike: no error
    assert lines(proc.stdout, "pg6_inf_both") == [["0"]], proc.stdout


@pytest.mark.parametrize("precision", ["double", "double-single"])
def test_no_ieee_denormal_note_at_stop(capi: CApi, tmp_path: Path, precision: str) -> None:
    """The library leaves the caller's floating-point flags as it found them (gfortran's
    IEEE_DENORMAL note at STOP appeared in double precision before)."""
    proc = capi.run(capi.program("denormal.f90", lib="g6"), cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION=precision))
    rc, acc, pot = proc.stdout.split()
    assert rc == "0" and float(acc) == pytest.approx(0.25) and float(pot) == pytest.approx(-2.5)
    assert "IEEE" not in proc.stderr, proc.stderr


def test_callers_floating_point_state_kept(capi: CApi, tmp_path: Path) -> None:
    """Across GRAPE-5 and GRAPE-6 calls: no flag of the library's own arithmetic is left
    raised, the flag the caller raised (on the x87) stays raised, and its rounding mode comes
    back."""
    proc = capi.run(capi.program("fpstate.c"), cwd=tmp_path)
    said = dict(line.split() for line in proc.stdout.splitlines())
    assert said == {"no_flags_left": "1", "round_kept": "1", "own_flag_kept": "1",
                    "rc": "0"}, proc.stdout + proc.stderr
