"""The GRAPE-5 interface (grape5.h, Phantom-GRAPE's PG5 calls): forces, contexts, errors.

Every program is a C or Fortran client compiled against the built library; its forces are
compared with the float64 reference (:mod:`sapporo.reference`): every particle is a
j-particle and its own i-particle too, as in a tree code's self-gravity (GRAPE-5 excludes
no pair, so the reference gets distinct ids).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from sapporo.reference import forces, plummer

if TYPE_CHECKING:
    from conftest import CApi

#: largest relative error of acceleration and potential per particle: double agrees with
#: the float64 reference to 1e-12; double-single to single precision (float pair terms);
#: single (float differences of float positions) to 3e-5 where the net force is small
TOL = {"double": 1e-12, "double-single": 2e-6, "single": 3e-5}
EPS = 0.01


def write_ic(path: Path, n: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    x, _, m = plummer(n, seed=seed)
    np.savetxt(path, np.column_stack([x, m]), fmt="%.17g")
    return x, m


def read_forces(stdout: str, key: str = "f") -> tuple[np.ndarray, np.ndarray]:
    """The "<key> i ax ay az pot" lines of a client's output."""
    rows = [ln.split()[1:] for ln in stdout.splitlines() if ln.startswith(f"{key} ")]
    data = np.array(rows, dtype=np.float64)
    return data[:, 1:4], data[:, 4]


def reference(x: np.ndarray, m: np.ndarray, ni: int, eps2: np.ndarray) -> tuple:
    """Forces on particles [0, ni) from all, softening eps2[i] each, no pair excluded (the
    potential negative, as the reference gives it)."""
    n = len(m)
    acc = np.zeros((ni, 3))
    pot = np.zeros(ni)
    for e in np.unique(eps2):
        sel = np.flatnonzero(eps2 == e)
        ref = forces(x[sel], None, sel, x, None, m, np.arange(n) + n, float(e), order=2)
        acc[sel], pot[sel] = ref.acc, ref.pot
    return acc, pot


def check_forces(stdout: str, x: np.ndarray, m: np.ndarray, ni: int, eps2: np.ndarray,
                 tol: float, key: str = "f") -> None:
    acc, pot = read_forces(stdout, key)
    assert acc.shape == (ni, 3), stdout[-2000:]
    ref_acc, ref_pot = reference(x, m, ni, eps2)
    ref_pot = -ref_pot  # PG5's sign
    err_a = np.linalg.norm(acc - ref_acc, axis=1) / np.linalg.norm(ref_acc, axis=1)
    err_p = np.abs(pot - ref_pot) / np.abs(ref_pot)
    assert np.all(pot > 0)
    assert err_a.max() < tol, f"acceleration off by {err_a.max():.3g} (tolerance {tol:g})"
    assert err_p.max() < tol, f"potential off by {err_p.max():.3g} (tolerance {tol:g})"


def softening(mode: str, ni: int) -> np.ndarray:
    """eps2 per i-particle as g5_forces.c gives it in ``mode``."""
    if mode in ("eps", "calce"):
        return (EPS * (1 + np.arange(ni) % 3)) ** 2
    return np.full(ni, EPS * EPS)


# ----------------------------------------------------------------------------- forces


@pytest.mark.parametrize("precision", ["double", "double-single", "single"])
@pytest.mark.parametrize("mode", ["set", "eps", "calc", "calce", "split"])
def test_forces_against_reference(capi: CApi, tmp_path: Path, mode: str,
                                  precision: str) -> None:
    n = 300
    x, m = write_ic(tmp_path / "ic.txt", n)
    proc = capi.run(capi.program("g5_forces.c", lib="g5"), "ic.txt", EPS, mode, cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION=precision))
    assert "rc 0" in proc.stdout, proc.stderr
    check_forces(proc.stdout, x, m, n, softening(mode, n), TOL[precision])
    # the engine ran them (no Python per call)
    assert int(re.search(r"direct_calls (\d+)", proc.stderr)[1]) > 0


@pytest.mark.parametrize("mode", ["set", "calce"])
def test_forces_on_cuda(capi: CApi, tmp_path: Path, mode: str,
                        cuda_env: dict[str, str]) -> None:
    """The GRAPE-5 calls on CUDA (a GPU, or the emulated driver and kernels): the engine
    computes the same forces."""
    n = 300
    x, m = write_ic(tmp_path / "ic.txt", n)
    proc = capi.run(capi.program("g5_forces.c", lib="g5"), "ic.txt", EPS, mode, cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION="double", **cuda_env))
    assert "rc 0" in proc.stdout, proc.stderr
    assert "PYTHONPATH" not in cuda_env or "cudaemu: the emulated CUDA" in proc.stderr
    check_forces(proc.stdout, x, m, n, softening(mode, n), TOL["double"])
    assert int(re.search(r"direct_calls (\d+)", proc.stderr)[1]) > 0


@pytest.mark.parametrize("mode", ["set", "calce"])
def test_forces_with_device_memory(capi: CApi, tmp_path: Path, mode: str) -> None:
    """The library's data in device buffers, as on a GPU (the engine copies the lists):
    the same forces, computed by the engine."""
    n = 300
    x, m = write_ic(tmp_path / "ic.txt", n)
    proc = capi.run(capi.program("g5_forces.c", lib="g5"), "ic.txt", EPS, mode, cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION="double", SAPPORO_NATIVE_MEMORY="device"))
    assert "rc 0" in proc.stdout, proc.stderr
    check_forces(proc.stdout, x, m, n, softening(mode, n), TOL["double"])
    assert int(re.search(r"direct_calls (\d+)", proc.stderr)[1]) > 0


def test_per_j_softening_of_pg5s_symmetric_variant(capi: CApi, tmp_path: Path) -> None:
    """-DSYMMETRIC: g5_set_xmj takes eps_j^2 (grape5.h maps it to g5_set_xmje); a pair is
    softened by eps_i^2 + eps_j^2."""
    n = 200
    x, m = write_ic(tmp_path / "ic.txt", n)
    exe = capi.program("g5_symmetric.c", extra=("-DSYMMETRIC",))
    proc = capi.run(exe, "ic.txt", 0.01, 3e-4, cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION="double"))
    assert "rc 0" in proc.stdout, proc.stderr
    check_forces(proc.stdout, x, m, n, np.full(n, 1e-4 + 3e-4), TOL["double"])


@pytest.mark.parametrize("precision", ["double", "double-single"])
def test_fortran_client(capi: CApi, tmp_path: Path, precision: str) -> None:
    n = 200
    x, m = write_ic(tmp_path / "ic.txt", n)
    proc = capi.run(capi.program("g5.f90", lib="pg5"), cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION=precision))
    assert "jmem T" in proc.stdout and "sapporo:" not in proc.stderr, proc.stderr
    for key in ("f", "g", "h"):
        check_forces(proc.stdout, x, m, n, np.full(n, EPS**2), TOL[precision], key)


@pytest.mark.parametrize("lib", ["pg5", "g5", "sapporo"])
def test_program_written_for_pg5_links_unchanged(capi: CApi, tmp_path: Path, lib: str) -> None:
    """PG5's own declarations (void calls), none of our headers: only the link changes."""
    n = 500
    x, m = write_ic(tmp_path / "ic.txt", n)
    flags = [f"-L{capi.lib_dir}", f"-Wl,-rpath,{capi.lib_dir}", f"-l{lib}"]
    exe = capi.program("g5_pg5style.c", lib=lib, flags=flags)
    proc = capi.run(exe, "ic.txt", EPS, cwd=tmp_path)
    assert "sapporo:" not in proc.stderr, proc.stderr
    for key in ("f", "c"):
        check_forces(proc.stdout, x, m, n, np.full(n, EPS**2), TOL["double-single"], key)


def capi_flags(capi: CApi) -> list[str]:
    """What ``sapporo capi flags`` prints for the test's library."""
    out = subprocess.run([sys.executable, "-m", "sapporo.cli", "capi", "flags", "--prefix",
                          str(capi.prefix)], capture_output=True, text=True, check=True).stdout
    return shlex.split(out)


@pytest.mark.parametrize("symmetric", [False, True], ids=["plain", "SYMMETRIC"])
def test_program_written_against_gp5util_h_compiles_unchanged(capi: CApi, tmp_path: Path,
                                                              symmetric: bool) -> None:
    """PG5's header, ``#include <gp5util.h>``: a program written for PG5 (its calls as
    statements, JMEMSIZE for its arrays, the original GRAPE-5's g5_set_range, g5_set_xj and
    g5_set_mj) compiles with ``sapporo capi flags`` and -lg5 only, without a warning
    (-Wextra -Werror: our calls return int where PG5's are void, which such a program never
    sees), and gets PG5's forces; -DSYMMETRIC (the program's own choice, as for PG5's
    SYMMETRIC build) makes g5_set_xmj take eps_j^2 per j-particle.  A new mass alone, then a
    new position alone: each force call uses the last of both."""
    n = 300
    x, m = write_ic(tmp_path / "ic.txt", n)
    define = ("-DSYMMETRIC",) if symmetric else ()
    exe = capi.program("g5_gp5util.c", extra=("-Wextra", "-Werror", *define),
                       flags=[*capi_flags(capi), "-lg5"])
    epsj2 = 3e-4 if symmetric else 0.0
    proc = capi.run(exe, "ic.txt", EPS, epsj2, cwd=tmp_path)
    assert "sapporo:" not in proc.stderr, proc.stderr
    eps2 = np.full(n, EPS**2 + epsj2)
    heavier = m * (1 + np.arange(n) % 3)
    tol = TOL["double-single"]  # the default precision
    check_forces(proc.stdout, x, m, n, eps2, tol, "f")
    check_forces(proc.stdout, x, heavier, n, eps2, tol, "c")
    check_forces(proc.stdout, 1.5 * x, heavier, n, eps2, tol, "d")


def test_gp5util_h_compiles_as_cplusplus(capi: CApi) -> None:
    """The same program as C++ (PG5's header has extern "C"; so has ours)."""
    if capi.cxx is None:
        pytest.skip("no C++ compiler (c++, g++ or clang++) found")
    cflags = [f for f in capi_flags(capi) if f.startswith("-I")]
    for define in ([], ["-DSYMMETRIC"]):
        cmd = [capi.cxx, "-fsyntax-only", "-Wall", "-Wextra", "-Werror", *define, "-x", "c++",
               str(Path(__file__).parent / "g5_gp5util.c"), *cflags]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{shlex.join(cmd)}\n{proc.stderr}"


def test_fortran_client_of_the_calls_pg5_lacks(capi: CApi, tmp_path: Path) -> None:
    """g5_open_special, g5_set_range, g5_set_eps2_to_all, g5_set_mj / g5_set_xj ("f") and
    g5_set_jp ("g") by their Fortran names."""
    n = 200
    x, m = write_ic(tmp_path / "ic.txt", n)
    proc = capi.run(capi.program("g5_split.f90", lib="g5"), cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION="double"))
    assert "sapporo:" not in proc.stderr, proc.stderr
    for key in ("f", "g"):
        check_forces(proc.stdout, x, m, n, np.full(n, 1e-4), TOL["double"], key)


# ----------------------------------------------------------------------------- contexts


@pytest.mark.parametrize(("precision", "runtime"), [("double", "default"),
                                                    ("double-single", "default"),
                                                    ("double", "cuda")])
def test_contexts_from_two_threads_bitwise_as_serial(capi: CApi, tmp_path: Path,
                                                     precision: str, runtime: str,
                                                     request: pytest.FixtureRequest) -> None:
    """Contexts 1 and 3 from two OpenMP threads at once: the same bits as the same calls
    made one after the other; and the last interaction list agrees with the reference. On
    CUDA (a GPU, or the emulation) the two contexts' engines run at the same time (on PoCL
    they take turns)."""
    n = 1000
    x, m = write_ic(tmp_path / "ic.txt", n)
    exe = capi.program("g5_threads.c", extra=("-fopenmp",))
    cuda = request.getfixturevalue("cuda_env") if runtime == "cuda" else {}
    proc = capi.run(exe, "ic.txt", 40, cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION=precision, OMP_NUM_THREADS="2", **cuda))
    assert "rc 0" in proc.stdout and "threads 2" in proc.stdout, proc.stdout + proc.stderr
    assert "same 1" in proc.stdout
    first, nj = (int(v) for v in re.search(r"^j (\d+) (\d+)", proc.stdout, re.M).groups())
    i0, ni = (int(v) for v in re.search(r"^i (\d+) (\d+)", proc.stdout, re.M).groups())
    acc, pot = read_forces(proc.stdout)
    xj, mj = x[first:first + nj], m[first:first + nj]
    ref = forces(x[i0:i0 + ni], None, np.arange(ni) + nj, xj, None, mj, np.arange(nj), EPS**2,
                 order=2)
    err = np.linalg.norm(acc - ref.acc, axis=1) / np.linalg.norm(ref.acc, axis=1)
    assert err.max() < TOL[precision]
    assert np.abs(pot + ref.pot).max() / np.abs(ref.pot).max() < TOL[precision]


# ----------------------------------------------------------------------------- groups


def check_groups(stdout: str, x: np.ndarray, m: np.ndarray, tol: float) -> None:
    """tests/capi/g5_groups.c's forces ("f": the groups' call) against the float64 reference
    of each i-particle's own list, and against the same lists through one-list calls ("o").
    Errors are relative to the sum of the pair terms' sizes, sum m_j / R^2 (a random list's
    net force may nearly cancel)."""
    lines = stdout.splitlines()
    pool_j = np.array([int(ln.split()[2]) for ln in lines if ln.startswith("j ")])
    rows = np.array([[int(v) for v in ln.split()[2:5]] for ln in lines if ln.startswith("i ")])
    acc, pot = read_forces(stdout, "f")
    one_acc, one_pot = read_forces(stdout, "o")
    assert acc.shape == (len(rows), 3) and one_acc.shape == acc.shape, stdout[-2000:]
    assert np.all(acc[rows[:, 1] == rows[:, 2]] == 0)  # an empty list: no force
    worst = worst_one = 0.0
    for lo, hi in {(int(a), int(b)) for a, b in rows[:, 1:] if b > a}:
        sel = np.flatnonzero((rows[:, 1] == lo) & (rows[:, 2] == hi))
        xi, js = x[rows[sel, 0]], pool_j[lo:hi]
        ref = forces(xi, None, np.arange(len(sel)), x[js], None, m[js],
                     np.arange(len(js)) + len(x), EPS**2, order=2)
        r2 = ((xi[:, None, :] - x[js][None, :, :]) ** 2).sum(-1) + EPS**2
        scale = (m[js] / r2).sum(1)
        pscale = (m[js] / np.sqrt(r2)).sum(1)
        err = np.linalg.norm(acc[sel] - ref.acc, axis=1) / scale
        perr = np.abs(pot[sel] + ref.pot) / pscale
        worst = max(worst, err.max(), perr.max())
        worst_one = max(worst_one, (np.linalg.norm(acc[sel] - one_acc[sel], axis=1)
                                    / scale).max(), (np.abs(pot[sel] - one_pot[sel])
                                                     / pscale).max())
    assert worst < tol, f"groups against the reference: {worst:.3g} (tolerance {tol:g})"
    assert worst_one < tol, f"groups against one-list calls: {worst_one:.3g}"


GROUPS_CALLS = {"async_same": 1, "bad decreasing": -1, "bad beyond": -1, "good again": 0,
                "good twice": 0, "bad start": -1, "bad after": -2, "rc": 0}


@pytest.mark.parametrize(("precision", "runtime", "ng"), [
    ("double-single", "default", 400), ("double", "default", 400), ("single", "default", 400),
    ("double", "device-memory", 60), ("double", "two-devices", 60), ("double", "cuda", 30),
    ("single", "cuda", 30)])
def test_groups_in_one_call_as_one_list_calls(capi: CApi, tmp_path: Path, precision: str,
                                              runtime: str, ng: int,
                                              request: pytest.FixtureRequest) -> None:
    """g5_calculate_force_on_groups on tree-walk-like groups (0-63 i-particles, lists of
    0-1999; 400 groups take two launches): the reference's forces, the one-list calls'
    forces, and bitwise the same through g5_start_groups and g5_get_groups_force with other
    calls between; bad offsets refused, the forces gone after another force call. Two
    devices (PoCL's two CPU devices) each take their share of every list."""
    x, m = write_ic(tmp_path / "ic.txt", 3000)
    env = {"SAPPORO_PRECISION": precision}
    if runtime == "device-memory":
        env["SAPPORO_NATIVE_MEMORY"] = "device"
    if runtime == "two-devices":
        request.getfixturevalue("two_pocl_devices")
        env.update(POCL_DEVICES="pthread pthread", SAPPORO_BACKEND="opencl",
                   SAPPORO_DEVICES="0,1")
    if runtime == "cuda":
        env.update(request.getfixturevalue("cuda_env"))
    proc = capi.run(capi.program("g5_groups.c", lib="g5"), "ic.txt", EPS, ng, 11,
                    cwd=tmp_path, env=capi.env(**env))
    said = {ln.rsplit(" ", 1)[0]: int(ln.rsplit(" ", 1)[1]) for ln in proc.stdout.splitlines()
            if ln.split(" ")[0] in ("async_same", "bad", "good", "rc")}
    assert said == GROUPS_CALLS, proc.stderr[-3000:]
    assert "i_offsets[0] = 1 must be 0" in proc.stderr
    assert "group 1's offsets decrease" in proc.stderr
    check_groups(proc.stdout, x, m, TOL[precision])


# ----------------------------------------------------------------------------- errors

#: what tests/capi/g5_bad.c's calls must return (sapporo.h's codes)
BAD_CALLS = {
    "xi_before_open": -2, "jmemsize_before_open": 0, "open": 0, "jmemsize_positive": 1,
    "xmj_negative_adr": -1, "xmj_past_jmemsize": -1, "xmj_nan_mass": -1, "xmj_null": -1,
    "n_negative": -1, "n_past_jmemsize": -1, "run_beyond_stored": -1, "eps_nan": -1,
    "xi_zero": -1, "xi_too_many": -1, "run_without_xi": -2, "get_force_without_run": -2,
    "xi_inf": -1, "xei_negative": -1, "eps_more_than_set": -1, "run": 0,
    "get_force_more_than_run": -1, "context_out_of_range": -1, "context_negative": -1,
    "calculate_null": -1, "calculate_negative": -1, "self_no_softening": -5,
    "xmje_part": 0, "run_part_epsj": -1, "run_varying_epsj": -1, "good": 0, "finite": 1,
    "close": 0, "run_after_close": -2,
}


def test_bad_calls_report_and_continue(capi: CApi, tmp_path: Path) -> None:
    proc = capi.run(capi.program("g5_bad.c"), cwd=tmp_path)
    got = dict(ln.split()[:2] for ln in proc.stdout.splitlines()
               if not ln.startswith("last_error"))
    assert {k: int(got[k]) for k in BAD_CALLS} == BAD_CALLS, proc.stdout + proc.stderr
    err = proc.stderr
    for message in [
        "sapporo: g5_set_xi: GRAPE-5 is not open (call g5_open first) (code -2)",
        "g5_set_xmj: adr = -1, nj = 10: the addresses must lie in 0 .. g5_get_jmemsize() - 1",
        "g5_set_xmj: j-particle at address 3 (index 0) has a NaN or infinite value (code -1)",
        "g5_run: n = 64 j-particles, but addresses were set up to 31 only",
        "g5_set_xi: ni = 0 must be between 1 and g5_get_number_of_pipelines() = 128",
        "g5_set_nMC: context id = 64 must be between 0 and 63 (code -1)",
        "g5_calculate_force_on_x: non-finite force on i-particle 0 (id 1) and 3 other(s)",
        "GRAPE-5 excludes no pair, so an i-particle at a j-particle's position needs eps > 0",
        "the per-j softening differs between j-particles",
    ]:
        assert message in err, err
    assert re.search(r"^last_error g5_calculate_force_on_x: non-finite force .*\(code -5\)$",
                     proc.stdout, re.M)


#: what tests/capi/g5_split.c's calls must return, and its comparisons (1: the same bits)
SPLIT_CALLS = {
    "xj_before_open": -2, "range_before_open": 0, "open_special_none": 0,
    "eps2_negative": -1, "eps2_nan": -1, "eps2": 0, "range": 0, "range_nan": 0,
    "range_reversed": 0, "xj_null": -1, "mj_null": -1, "xj_negative_adr": -1,
    "mj_past_jmemsize": -1, "xj_nan": -1, "xj_huge": -1, "mj_inf": -1, "xj_none": 0,
    "xj": 0, "n": 0, "run_no_mass": -1, "mj_half": 0, "run_half_mass": -1, "n_half": 0,
    "run_n_half": 0, "mj_past_n": 0, "n_past": 0, "mj_rest": 0, "run_no_position": -1,
    "n_all": 0, "run_split": 0, "xmj": 0, "run_xmj": 0, "split_same": 1, "xmj_other": 0,
    "jp": 0, "run_jp": 0, "jp_same": 1, "eps": 0, "run_eps": 0, "eps2_same": 1,
    "xmj_moved": 0, "run_moved": 0, "xmj_heavier": 0, "run_heavier": 0, "xmj_back": 0,
    "xj_after_xmj": 0, "run_xj_after_xmj": 0, "xj_after_xmj_same": 1, "mj_after_xj": 0,
    "run_mj_after_xj": 0, "mj_after_xj_same": 1, "xj_pending": 0, "mj_pending": 0,
    "xmj_after_pending": 0, "run_xmj_after_pending": 0, "xmj_after_pending_same": 1,
    "close": 0, "open_special_device": 0, "eps_again": 0, "mj_reopened": 0,
    "n_reopened": 0, "run_reopened": -1, "xj_reopened": 0, "run_reopened_both": 0,
    "reopened_same": 1, "close_again": 0, "open_special_bad": -1,
    "open_special_none_list": -1, "close_bad": 0,
}


def test_positions_and_masses_apart(capi: CApi, tmp_path: Path) -> None:
    """g5_set_xj / g5_set_mj: a force call uses the last position and the last mass given
    for each address, by any call; an address in [0, n) that has had one of the two only is
    refused by name, one past n is not looked at; g5_close forgets them.  g5_set_jp is
    g5_set_xmj with the masses first, g5_set_eps2_to_all g5_set_eps_to_all squared;
    g5_set_range takes anything (a warning when it is no range); g5_open_special opens on
    the devices it names (one the backend lacks is the open's error)."""
    proc = capi.run(capi.program("g5_split.c"), cwd=tmp_path)
    got = dict(ln.split()[:2] for ln in proc.stdout.splitlines())
    assert {k: int(got[k]) for k in SPLIT_CALLS} == SPLIT_CALLS, proc.stdout + proc.stderr
    err = proc.stderr
    for message in [
        "sapporo: g5_set_xj: GRAPE-5 is not open (call g5_open first) (code -2)",
        "g5_set_eps2_to_all: eps2 = -1 must be finite and >= 0 (code -1)",
        "g5_set_range: warning: xmin = nan, xmax = 2, mmin = 0.001 is not a range",
        "g5_set_range: warning: xmin = 2, xmax = -2, mmin = 0.001 is not a range",
        "g5_set_xj: xj must not be NULL (code -1)",
        "g5_set_mj: mj must not be NULL (code -1)",
        "g5_set_xj: adr = -1, nj = 4: the addresses must lie in 0 .. g5_get_jmemsize() - 1",
        "g5_set_xj: j-particle at address 5 has a NaN or infinite value (code -1)",
        "g5_set_xj: j-particle at address 1: position (0.764842, 0.963558, 1e+300) too large",
        "g5_set_mj: j-particle at address 7: mass inf is not finite (code -1)",
        "g5_run: j-particle at address 0 has a position (g5_set_xj) but never had a mass: "
        "give it with g5_set_mj, or both with g5_set_xmj, before a force call uses it "
        "(n = 64) (code -1)",
        "g5_run: j-particle at address 64 has a mass (g5_set_mj) but never had a position: "
        "give it with g5_set_xj",
        "g5_open_special: devices: 99 is not a device index",
        "g5_open_special: ndev = 2 device ids but list is NULL",
    ]:
        assert message in err, err
    assert "mmin = 0.001 is not a range" in err
    assert "xmin = -2, xmax = 2" not in err  # a range: no warning


def test_failed_open_is_said_at_every_force_call(capi: CApi, tmp_path: Path) -> None:
    proc = capi.run(capi.program("g5_bad.c"), cwd=tmp_path,
                    env=capi.env(SAPPORO_BACKEND="nonsense"))
    assert "open -3" in proc.stdout and "good -2" in proc.stdout, proc.stdout
    said = [ln for ln in proc.stderr.splitlines()
            if "no forces computed, GRAPE-5 could not be opened: g5_open: SAPPORO_BACKEND: "
               "unknown backend 'nonsense'" in ln]
    assert len(said) >= 8  # every run and calculate call after the failed open


def test_abort_mode_stops_at_the_first_error(capi: CApi, tmp_path: Path) -> None:
    proc = capi.run(capi.program("g5_bad.c"), cwd=tmp_path, check=False,
                    env=capi.env(SAPPORO_ON_ERROR="abort"))
    assert proc.returncode == 1
    assert proc.stdout.strip() == ""  # it exits inside the first call
    assert "GRAPE-5 is not open" in proc.stderr and "SAPPORO_ON_ERROR=abort" in proc.stderr


# ----------------------------------------------------------------------------- the build

#: PG5's calls (phantom_g5.c, pg5_fortran.c), C names; with SYMMETRIC PG5 gives g5_set_xmj
#: and g5_set_xmjMC a per-j softening, ours are g5_set_xmje and g5_set_xmjeMC
PG5_C = [
    "g5_open", "g5_close", "g5_get_number_of_pipelines", "g5_get_jmemsize",
    "g5_set_eps_to_all", "g5_set_eps", "g5_set_epsMC", "g5_set_n", "g5_set_nMC",
    "g5_set_xmj", "g5_set_xmjMC", "g5_set_xi", "g5_set_xiMC", "g5_set_xei", "g5_set_xeiMC",
    "g5_run", "g5_runMC", "g5_get_force", "g5_get_forceMC", "g5_calculate_force_on_x",
    "g5_calculate_force_on_xMC", "g5_calculate_force_on_xe", "g5_calculate_force_on_xeMC",
]
OURS_C = ["g5_set_xmje", "g5_set_xmjeMC"]
#: the original GRAPE-5's calls PG5 lacks, and Sapporo2's additions
BEYOND_PG5_C = ["g5_set_range", "g5_set_xj", "g5_set_mj", "g5_set_jp", "g5_set_eps2_to_all",
                "g5_open_special"]


def test_every_pg5_call_is_exported_and_declared(capi: CApi) -> None:
    names = capi.exported()
    header = (capi.prefix / "include" / "grape5.h").read_text()
    for c_name in PG5_C + OURS_C + BEYOND_PG5_C:
        fortran = [f"{c_name}_"] + ([f"{c_name.lower()}_"] if "MC" in c_name else [])
        for name in [c_name, *fortran]:
            assert name in names, f"{name} not exported"
        for name in [c_name, f"{c_name}_"]:
            assert re.search(rf"\bint {name}\(", header), f"{name} not declared in grape5.h"
    for alias in ("libg5.so", "libpg5.so"):
        assert (capi.lib_dir / alias).resolve() == capi.library.resolve()
    # PG5's header name, beside grape5.h, which declares the calls
    gp5util = (capi.prefix / "include" / "gp5util.h").read_text()
    assert '#include "grape5.h"' in gp5util and re.search(r"#define JMEMSIZE\b", gp5util)


def test_open_close_cycles_keep_memory_flat(capi: CApi, tmp_path: Path) -> None:
    """GRAPE-5 opened and closed 24 times, 16 contexts computing each time: the resident
    memory after the warm-up cycles stays within 40 MB (each cycle holds about 25 MB of
    libraries; before the libraries gave their freed heap back it grew by hundreds of MB)."""
    proc = capi.run(capi.program("g5_cycles.c", lib="g5"), 16, 24, cwd=tmp_path)
    rss = [float(v) for v in re.findall(r"^cycle \d+ rss_mb (\S+)$", proc.stdout, re.M)]
    assert len(rss) == 24 and proc.stdout.splitlines()[-1] == "ok", proc.stdout
    assert max(rss[4:]) - rss[3] < 40.0, rss
