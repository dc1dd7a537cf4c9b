"""The Python scripts of examples/python run as documented and compute what they print.

(The C and Fortran examples are built and run by the C API tests, tests/capi.)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sapporo.nbody import snapshot

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "python"


def run(script: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_every_python_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == [
        "integrate_cluster.py", "library_quickstart.py", "p3m_g5.py"]


@pytest.mark.parametrize("precision, tol", [("double-single", 1e-5), ("double", 1e-12)])
def test_library_quickstart(tmp_path, precision, tol):
    out = run("library_quickstart.py", "--n", "1000", "--n-active", "50", "--precision",
              precision, cwd=tmp_path)
    assert f"50 i-particles against 1000 j-particles, {precision}" in out
    errors = re.search(r"max relative error: acc (\S+), jerk (\S+), pot (\S+);", out)
    assert errors, out
    assert all(0.0 <= float(e) < tol for e in errors.groups()), out
    assert "same nearest neighbour for 100.0 %" in out


def test_p3m_g5(tmp_path):
    """The mesh's long range (S2 split) plus the GRAPE-5 cutoff calls' short range, through
    ctypes in the same process: Newton's force to the mesh's accuracy (measured median
    4.3e-3, largest 2.4e-2 for 1887 bodies), the momentum kept over a leapfrog step."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler for the C API")
    out = run("p3m_g5.py", "--n", "2000", cwd=tmp_path)
    assert "1887 bodies, 32^3 mesh, a = 4 cells" in out, out
    median, largest, pot = (float(v) for v in re.search(
        r"median (\S+), largest (\S+); potential median (\S+)", out).groups())
    assert median < 8e-3 and largest < 5e-2 and pot < 3e-3, out
    momentum, scale = (float(v) for v in re.search(
        r"total momentum (\S+) \(of sum m \|v\| = (\S+)\)", out).groups())
    assert momentum < 1e-8 * scale, out


def test_integrate_cluster(tmp_path):
    out = run("integrate_cluster.py", "--n", "128", "--t-end", "0.25", "--out", "snap",
              cwd=tmp_path)
    rows = re.findall(r"^\s*(0\.\d+)\s+(\S+)\s+(\S+)\s+(\d+)$", out, re.M)
    assert [r[0] for r in rows] == ["0.125", "0.250"], out
    assert all(float(r[1]) < 1e-5 for r in rows), out  # 4th order, double-single
    blocks = [int(r[3]) for r in rows]
    assert 0 < blocks[0] < blocks[1]
    snap = snapshot.load(tmp_path / "snap" / "cluster_final.npz")
    assert snap.time == 0.25 and snap.n == 128 and snap.synchronised
