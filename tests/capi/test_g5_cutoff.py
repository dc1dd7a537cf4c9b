"""The cutoff force of Phantom-GRAPE's PG5/table through the GRAPE-5 calls (grape5.h).

Programs written for PG5/table (g5_table.c, g5_table.f90) call g5_set_eta and
g5_set_cutoff_table and compute forces; the split length comes from SAPPORO_G5_CUTOFF (PG5's
compile-time SFT_FOR_PM) or g5_set_cutoff_scale. Their forces are compared with the float64
reference of the S2 short-range force (:func:`sapporo.reference.cutoff_factors`): every
particle is a j-particle and its own i-particle, no pair excluded by id (GRAPE-5 excludes
none), the self pair left out at eps = 0 (R = 0, as in PG5/table).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from sapporo.reference import forces, plummer

if TYPE_CHECKING:
    from conftest import CApi

#: largest error per particle, of the acceleration relative to the sum of the Newtonian pair
#: magnitudes and of the potential relative to the sum of the Newtonian pair potentials
#: (docs/accuracy.md, "The cutoff force")
TOL = {"double": 1e-12, "double-single": 2e-6}
SCALE = 0.5  # the S2 diameter: the Plummer sphere's core is about 1


def write_ic(path: Path, n: int, seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    x, _, m = plummer(n, seed=seed)
    np.savetxt(path, np.column_stack([x, m]), fmt="%.17g")
    return x, m


def read_forces(stdout: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """The "<key> i ax ay az pot" lines of a client's output."""
    rows = [ln.split()[1:] for ln in stdout.splitlines() if ln.startswith(f"{key} ")]
    data = np.array(rows, dtype=np.float64)
    return data[:, 1:4], data[:, 4]


def check_forces(stdout: str, x: np.ndarray, m: np.ndarray, eps: float, tol: float, key: str,
                 cutoff: float | None = SCALE) -> None:
    """The client's forces against the reference (the potential positive, PG5's sign)."""
    acc, pot = read_forces(stdout, key)
    n = len(m)
    assert acc.shape == (n, 3), stdout[-2000:]
    ref = forces(x, None, np.arange(n), x, None, m, np.arange(n) + n, eps * eps, order=2,
                 cutoff=cutoff)
    err_a = np.linalg.norm(acc - ref.acc, axis=1) / ref.acc_abs
    err_p = np.abs(pot + ref.pot) / ref.pot_abs
    assert err_a.max() < tol, f"{key}: acceleration off by {err_a.max():.3g} (tolerance {tol:g})"
    assert err_p.max() < tol, f"{key}: potential off by {err_p.max():.3g} (tolerance {tol:g})"
    if cutoff is not None:  # a real test: the cut changes the forces, to zero for some
        newton = forces(x, None, np.arange(n), x, None, m, np.arange(n) + n, max(eps, 1e-3)**2,
                        order=2)
        assert np.median(np.linalg.norm(acc - newton.acc, axis=1)
                         / np.linalg.norm(newton.acc, axis=1)) > 0.1
        assert (np.linalg.norm(acc, axis=1) == 0).any()


@pytest.mark.parametrize(("precision", "eps"), [("double", 0.0), ("double-single", 0.01)])
def test_pg5_table_program_with_the_length_of_the_environment(capi: CApi, tmp_path: Path,
                                                              precision: str,
                                                              eps: float) -> None:
    """A PG5/table program unchanged: SAPPORO_G5_CUTOFF stands for PG5's compile-time
    SFT_FOR_PM. With eps = 0 each particle's pair with itself is left out (PG5/table's table
    gives it no force), not refused as non-finite."""
    n = 300
    x, m = write_ic(tmp_path / "ic.txt", n)
    exe = capi.program("g5_table.c", lib="pg5")
    proc = capi.run(exe, "ic.txt", eps, "env", cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION=precision, SAPPORO_G5_CUTOFF=str(SCALE)))
    assert "rc 0" in proc.stdout and "sapporo:" not in proc.stderr, proc.stderr
    for key in ("f", "c"):
        check_forces(proc.stdout, x, m, eps, TOL[precision], key)


def test_cutoff_scale_call_and_a_refused_change(capi: CApi, tmp_path: Path) -> None:
    """g5_set_cutoff_scale before g5_open sets the length (no variable needed); another length
    once GRAPE-5 is open is refused (SAPPORO_ERR_STATE, -2) and changes nothing; the same
    length is accepted."""
    n = 300
    x, m = write_ic(tmp_path / "ic.txt", n)
    exe = capi.program("g5_table.c", lib="g5")
    proc = capi.run(exe, "ic.txt", 0.01, "call", SCALE, cwd=tmp_path)
    assert "refused -2" in proc.stdout and "rc 0" in proc.stdout, proc.stdout[-500:]
    assert "g5_set_cutoff_scale" in proc.stderr and "before" in proc.stderr, proc.stderr
    for key in ("f", "c"):
        check_forces(proc.stdout, x, m, 0.01, TOL["double-single"], key)


def test_no_length_set_warns_and_gives_newtons_forces(capi: CApi, tmp_path: Path) -> None:
    """Neither SAPPORO_G5_CUTOFF nor g5_set_cutoff_scale: g5_set_cutoff_table says that it
    is not used and the forces are Newtonian (PG5's newton variant)."""
    n = 200
    x, m = write_ic(tmp_path / "ic.txt", n)
    exe = capi.program("g5_table.c", lib="pg5")
    proc = capi.run(exe, "ic.txt", 0.01, "env", cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION="double"))
    assert "rc 0" in proc.stdout, proc.stderr
    assert "g5_set_cutoff_table" in proc.stderr and "Newtonian" in proc.stderr, proc.stderr
    check_forces(proc.stdout, x, m, 0.01, TOL["double"], "c", cutoff=None)


@pytest.mark.parametrize("value", ["lots", "-1", "inf"])
def test_bad_length_in_the_environment_fails_the_open(capi: CApi, tmp_path: Path,
                                                      value: str) -> None:
    write_ic(tmp_path / "ic.txt", 10)
    exe = capi.program("g5_table.c", lib="pg5")
    proc = capi.run(exe, "ic.txt", 0.01, "env", cwd=tmp_path,
                    env=capi.env(SAPPORO_G5_CUTOFF=value))
    assert "rc -3" in proc.stdout, proc.stdout[-300:]
    assert "SAPPORO_G5_CUTOFF" in proc.stderr, proc.stderr


def test_fortran_pg5_table_client(capi: CApi, tmp_path: Path) -> None:
    """g5_set_cutoff_scale, g5_set_eta and g5_set_cutoff_table by their Fortran names."""
    n = 200
    x, m = write_ic(tmp_path / "ic.txt", n)
    proc = capi.run(capi.program("g5_table.f90", lib="pg5"), cwd=tmp_path,
                    env=capi.env(SAPPORO_PRECISION="double"))
    assert "sapporo:" not in proc.stderr, proc.stderr
    check_forces(proc.stdout, x, m, 0.01, TOL["double"], "f")


def test_cutoff_calls_are_exported_and_declared(capi: CApi) -> None:
    names = capi.exported()
    header = (capi.prefix / "include" / "grape5.h").read_text()
    for c_name in ("g5_set_eta", "g5_set_cutoff_table", "g5_set_cutoff_scale"):
        for name in (c_name, f"{c_name}_"):
            assert name in names, f"{name} not exported"
            assert re.search(rf"\bint {name}\(", header), f"{name} not declared in grape5.h"
