"""The GRAPE-5 interface (grape5.h, Phantom-GRAPE's PG5 calls): forces, contexts, errors.

Every program is a C or Fortran client compiled against the built library; its forces are
compared with the float64 reference (:mod:`sapporo.reference`): every particle is a
j-particle and its own i-particle too, as in a tree code's self-gravity (GRAPE-5 excludes
no pair, so the reference gets distinct ids).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from sapporo.reference import forces, plummer

if TYPE_CHECKING:
    from conftest import CApi

#: largest relative error of acceleration and potential per particle: double agrees with
#: the float64 reference to 1e-12; double-single to single precision (float pair terms)
TOL = {"double": 1e-12, "double-single": 2e-6}
EPS = 0.01


def write_ic(path: Path, n: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    x, _, m = plummer(n, seed=seed)
    np.savetxt(path, np.column_stack([x, m]), fmt="%.17g")
    return x, m


def read_forces(stdout: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [ln.split()[1:] for ln in stdout.splitlines() if ln.startswith("f ")]
    data = np.array(rows, dtype=np.float64)
    return data[:, 1:4], data[:, 4]


def reference(x: np.ndarray, m: np.ndarray, ni: int, eps2: np.ndarray) -> tuple:
    """Forces on particles [0, ni) from all, softening eps2[i] each, no pair excluded."""
    n = len(m)
    acc = np.zeros((ni, 3))
    pot = np.zeros(ni)
    for e in np.unique(eps2):
        sel = np.flatnonzero(eps2 == e)
        ref = forces(x[sel], None, sel, x, None, m, np.arange(n) + n, float(e), order=2)
        acc[sel], pot[sel] = ref.acc, ref.pot
    return acc, pot


def check_forces(stdout: str, x: np.ndarray, m: np.ndarray, ni: int, eps2: np.ndarray,
                 tol: float) -> None:
    acc, pot = read_forces(stdout)
    assert acc.shape == (ni, 3), stdout[-2000:]
    ref_acc, ref_pot = reference(x, m, ni, eps2)
    err_a = np.linalg.norm(acc - ref_acc, axis=1) / np.linalg.norm(ref_acc, axis=1)
    err_p = np.abs(pot - ref_pot) / np.abs(ref_pot)
    assert np.all(pot < 0)
    assert err_a.max() < tol, f"acceleration off by {err_a.max():.3g} (tolerance {tol:g})"
    assert err_p.max() < tol, f"potential off by {err_p.max():.3g} (tolerance {tol:g})"


def softening(mode: str, ni: int) -> np.ndarray:
    """eps2 per i-particle as g5_forces.c gives it in ``mode``."""
    if mode in ("eps", "calce"):
        return (EPS * (1 + np.arange(ni) % 3)) ** 2
    return np.full(ni, EPS * EPS)


# ----------------------------------------------------------------------------- forces


@pytest.mark.parametrize("precision", ["double", "double-single"])
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
