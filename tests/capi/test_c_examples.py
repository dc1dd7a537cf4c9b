"""examples/c and examples/fortran: built as their comments say, run, energy conserved.

Each example integrates a Plummer sphere it makes itself; 128 bodies to t = 1/8 with
eta = 0.02 and eps2 = 1e-4 conserve energy to a few 1e-8 in double-single (measured
2e-8 in C); the test allows 1e-6.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import CApi

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ENERGY_TOL = 1e-6


def check_run(stdout: str, n: int) -> None:
    assert re.search(rf"N = {n}\b", stdout), stdout
    match = re.search(r"E0 = +(\S+) +E1 = +(\S+) +dE/E = +(\S+)", stdout)
    assert match, stdout
    e0, e1, rel = (float(g) for g in match.groups())
    assert -0.35 < e0 < -0.2, "not a Plummer sphere in Henon units (E = -1/4 up to noise)"
    assert abs((e1 - e0) / e0) < ENERGY_TOL
    assert rel == pytest.approx((e1 - e0) / e0, rel=1e-2, abs=1e-14)
    assert int(re.search(r"(\d+) steps", stdout)[1]) > 128


def test_c_example(capi: CApi, tmp_path: Path) -> None:
    exe = capi.program(str(EXAMPLES / "c" / "hermite.c"), extra=("-std=c99", "-pedantic"))
    check_run(capi.run(exe, 128, 0.125, cwd=tmp_path).stdout, 128)


def test_fortran_example_with_module(capi: CApi, tmp_path: Path) -> None:
    exe = capi.program(str(EXAMPLES / "fortran" / "hermite.f90"),
                       sources=(EXAMPLES / "fortran" / "sapporo_g6.f90",))
    proc = capi.run(exe, 128, 0.125, cwd=tmp_path)
    check_run(proc.stdout, 128)
    assert "IEEE" not in proc.stderr


def test_fortran_module_checks_arguments(capi: CApi, tmp_path: Path) -> None:
    """The explicit interfaces catch a wrong argument at compile time."""
    if capi.fc is None:
        pytest.skip("no Fortran compiler (gfortran) found: apt-get install gfortran")
    bad = tmp_path / "bad.f90"
    bad.write_text("program bad\n  use sapporo_g6\n  integer :: rc\n"
                   "  rc = g6_set_ti(0, 1)\nend program bad\n")  # ti must be a double
    proc = subprocess.run(
        [capi.fc, f"-J{tmp_path}", str(EXAMPLES / "fortran" / "sapporo_g6.f90"), str(bad),
         "-o", str(tmp_path / "bad"), *capi.link_flags()],
        capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode != 0
    assert "g6_set_ti" in proc.stderr or "Type mismatch" in proc.stderr, proc.stderr


def test_g5_tree_example(capi: CApi, tmp_path: Path) -> None:
    """examples/c/g5_tree.c: the tree's forces near the direct sum's, both through the
    GRAPE-5 calls (two OpenMP threads, each on its own context); the walk through
    g5_calculate_force_on_groups gives the one-list calls' forces (double-single's
    rounding apart)."""
    exe = capi.program(str(EXAMPLES / "c" / "g5_tree.c"), extra=("-fopenmp",))
    proc = capi.run(exe, 2048, 0.5, cwd=tmp_path, env=capi.env(OMP_NUM_THREADS="2"))
    assert "sapporo:" not in proc.stderr, proc.stderr
    assert re.search(r"N = 2048 .* groups = \d+ .* mean list = \d+", proc.stdout), proc.stdout
    diff = float(re.search(r"difference between the two walks = (\S+)", proc.stdout)[1])
    assert diff < 1e-5
    err = float(re.search(r"rms relative acceleration error = (\S+)", proc.stdout)[1])
    assert 1e-5 < err < 5e-3  # a tree's error at theta = 0.5, not the direct sum itself
    w_tree, w_direct = (float(v) for v in
                        re.search(r"W tree = (\S+) +W direct = (\S+)", proc.stdout).groups())
    assert -0.6 < w_direct < -0.45  # a Plummer sphere in Henon units: W = -1/2
    assert abs(w_tree - w_direct) < 1e-3 * abs(w_direct)


def test_g5_tree_threads_on_fresh_kernel_caches(capi: CApi, tmp_path: Path) -> None:
    """Two OpenMP threads, each on its own GRAPE-5 context, computing at once from empty
    kernel caches (PoCL's and ours). PoCL's CPU drivers aborted such runs
    (``pocl_release_dlhandle_cache: Assertion `found->ref_count > 0'``, 5 runs of 6 with
    the contexts' engines running at once on shared kernels); contexts of different
    instances have kernels of their own."""
    exe = capi.program(str(EXAMPLES / "c" / "g5_tree.c"), extra=("-fopenmp",))
    for run in range(3):
        env = capi.env(OMP_NUM_THREADS="2", POCL_CACHE_DIR=str(tmp_path / f"pocl{run}"),
                       SAPPORO_KERNEL_CACHE="0")
        proc = capi.run(exe, 1024, 0.5, cwd=tmp_path, env=env)
        assert proc.returncode == 0 and "rms relative" in proc.stdout, proc.stderr


def test_makefiles(capi: CApi, tmp_path: Path) -> None:
    """`make` in a copy of each example folder, with `sapporo capi flags` building the
    library into a fresh per-user folder, as a user would."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not found")
    env = capi.env(XDG_DATA_HOME=str(tmp_path / "data"), CC=capi.cc)
    sapporo = f"{sys.executable} -m sapporo.cli"
    kinds = ["c"] + (["fortran"] if capi.fc else [])
    for kind in kinds:
        folder = tmp_path / kind
        shutil.copytree(EXAMPLES / kind, folder)
        args = [make, "-s", f"SAPPORO={sapporo}"]
        if kind == "fortran":
            args.append(f"FC={capi.fc}")
        proc = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        run = subprocess.run([str(folder / "hermite"), "128", "0.0625"], cwd=folder, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        check_run(run.stdout, 128)
        if kind == "c":
            tree = subprocess.run([str(folder / "g5_tree"), "512"], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert tree.returncode == 0 and "rms relative" in tree.stdout, tree.stderr
    assert list((tmp_path / "data").glob("sapporo/capi/*/lib/libsapporo.so"))
    if not capi.fc:
        pytest.skip("the Fortran example was not built: no gfortran")


def test_examples_say_how_to_build() -> None:
    for path in (EXAMPLES / "c" / "hermite.c", EXAMPLES / "c" / "g5_tree.c",
                 EXAMPLES / "fortran" / "hermite.f90",
                 EXAMPLES / "fortran" / "sapporo_g6.f90"):
        assert "$(sapporo capi flags)" in path.read_text(), path
    assert os.path.isfile(EXAMPLES / "c" / "Makefile")
    assert os.path.isfile(EXAMPLES / "fortran" / "Makefile")
