"""A force call refused because nothing is stored yet must not spoil the calls after it.

tests/capi/refused_first.c: g6_open, g6_set_ti, a force call with nj = 64 while no
j-particle is stored (refused, a message naming nj); then 64 j-particles stored at
addresses 0..63, g6_set_ti and the same force call, which must succeed with the forces of a
float64 direct sum (double-single: 1e-5 of sum_j |term_j|); all again after g6_close and a
new g6_open.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import CApi


@pytest.mark.parametrize("runtime", ["default", "cuda"])
def test_force_call_refused_before_any_store_then_valid(
        capi: CApi, tmp_path: Path, runtime: str, request: pytest.FixtureRequest) -> None:
    cuda = request.getfixturevalue("cuda_env") if runtime == "cuda" else {}
    proc = capi.run(capi.program("refused_first.c"), cwd=tmp_path, env=capi.env(**cuda),
                    check=False)
    report = f"rc {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert proc.stdout.splitlines()[-1] == "ok", report
    assert "PYTHONPATH" not in cuda or "cudaemu: the emulated CUDA" in proc.stderr, report
