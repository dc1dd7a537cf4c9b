"""The Python examples of README.md and docs/ run as written, and compute what they claim;
the project files (licence, citation, changelog) and the package's surface are in place.

Each ```python block of the files in ``EXAMPLES`` is executed in a fresh namespace in a
temporary directory (an example may write files). The integrator example of
docs/integrator.md runs at a reduced size (N and t_end substituted, said below); the
README's quick start runs unchanged. docs/library-contract.md holds a signature sketch, not
a runnable example, and is left out.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

from sapporo import reference
from sapporo.nbody import snapshot

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(name: str) -> list[str]:
    """The ```python blocks of a Markdown file of the repository."""
    blocks = BLOCK.findall((ROOT / name).read_text())
    assert blocks, f"{name} has no python block"
    return blocks


def run_block(code: str, where: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, str]:
    """Execute ``code`` in ``where``; return its namespace and what it printed."""
    monkeypatch.chdir(where)
    namespace: dict = {"__name__": "__docs_example__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<example>", "exec"), namespace)
    return namespace, out.getvalue()


def test_block_extraction_finds_the_examples():
    # The quick start is one block; a renamed fence (```py, ``` python) would drop it.
    (quick,) = python_blocks("README.md")
    assert "sapporo.Library(" in quick and "lib.compute(" in quick
    (integ,) = python_blocks("docs/integrator.md")
    assert "HermiteIntegrator(" in integ


def test_readme_quick_start(tmp_path, monkeypatch):
    """The README's quick start, unchanged: its forces match the float64 reference."""
    (code,) = python_blocks("README.md")
    ns, printed = run_block(code, tmp_path, monkeypatch)
    f, x, v, m, ids = ns["f"], ns["x"], ns["v"], ns["m"], ns["ids"]
    ref = reference.forces(x[:256], v[:256], ids[:256], x, v, m, ids, 1e-4, order=4, h2=0.01)
    # Double-single: 1e-5 of the sum of the terms' magnitudes (the suite's bound).
    np.testing.assert_array_less(
        np.abs(f.acc - ref.acc).max(axis=1), 1e-5 * ref.acc_abs)
    np.testing.assert_array_less(
        np.abs(f.jerk - ref.jerk).max(axis=1), 1e-5 * ref.jerk_abs)
    np.testing.assert_allclose(f.pot, ref.pot, rtol=1e-5)
    np.testing.assert_array_equal(f.nn_index, ref.nn_index)
    np.testing.assert_array_equal(f.neighbours(0), ref.neighbours[0])
    # It prints acc[0] first.
    assert printed.startswith(str(f.acc[0])), printed


def test_integrator_example(tmp_path, monkeypatch):
    """docs/integrator.md's example at N = 256, t_end = 1/16 (the doc: N = 2048, t_end = 1)."""
    (code,) = python_blocks("docs/integrator.md")
    small = code.replace("star_cluster(2048", "star_cluster(256").replace(
        "it.evolve(1.0)", "it.evolve(0.0625)")
    assert small.count("256") == 1 and "0.0625" in small, "the example's text changed"
    ns, printed = run_block(small, tmp_path, monkeypatch)
    fields = printed.split()
    assert len(fields) == 4, printed
    energy_error, block_steps, steps = float(fields[0]), int(fields[1]), int(fields[2])
    # 6th order in double precision with eta = 0.1: 1e-10 is generous over t = 1/16.
    assert 0.0 <= energy_error < 1e-10
    assert 0 < block_steps <= steps
    # The saved state resumes: it is the integrator's state at t = 1/16.
    snap = snapshot.load(tmp_path / "t1.npz")
    it = ns["it"]
    np.testing.assert_array_equal(snap.x, it.x)
    assert snap.time == it.time == 0.0625


# ---------------------------------------------------------------- project files and surface

USER_DOCS = ["README.md", "CHANGELOG.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
INTERNAL = re.compile(r"\bissue \d+|goals of issue|\bhelpers?\b|\bthis session\b|\bthe session\b"
                      r"|\blent machine\b|\bdevice tool\b", re.I)


def test_license_is_mit_as_pyproject_says():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text
    assert re.search(r'^license = \{ text = "MIT" \}', (ROOT / "pyproject.toml").read_text(),
                     re.M)


def test_citation_and_changelog_name_this_version():
    import sapporo

    cff = (ROOT / "CITATION.cff").read_text()
    for key in ("cff-version", "message", "title", "authors", "version", "license"):
        assert re.search(rf"^{key}:", cff, re.M), key
    assert re.search(rf"^version: {re.escape(sapporo.__version__)}$", cff, re.M)
    assert re.search(r"^license: MIT$", cff, re.M)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(sapporo.__version__)}\b", changelog, re.M)


def test_dir_shows_the_public_names():
    import sapporo

    names = dir(sapporo)
    assert set(sapporo.__all__) <= set(names)
    assert {"Library", "ForceResult", "InputError", "reference", "snapshot", "ic"} <= set(names)
    assert not [n for n in names if n.startswith("_") and n != "__version__"]
    for name in names:  # every name shown resolves
        assert getattr(sapporo, name) is not None


@pytest.mark.parametrize("name", USER_DOCS)
def test_user_docs_carry_no_internal_notes(name):
    for number, line in enumerate((ROOT / name).read_text().splitlines(), 1):
        assert not INTERNAL.search(line), f"{name}:{number}: {line}"
