"""Force calls of any shape run in C: no call enters Python once the memory is there.

tests/capi/shapes.c makes GRAPE-5 calls as a tree walk does (nj in 1-4096 and ni in 1-512,
new every call) and GRAPE-6 block steps whose nj and ni change every step, checks each
call's forces against a float64 direct sum, and counts the entries into Python
(``sapporo_python_calls``: the C API's own and the engine's, for its plans).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import CApi


@pytest.mark.parametrize("api, calls", [("g5", 2000), ("g6", 300)])
@pytest.mark.parametrize("memory", ["auto", "device"])
def test_any_shape_enters_python_only_at_the_first_call(capi: CApi, tmp_path: Path, api: str,
                                                         calls: int, memory: str) -> None:
    env = capi.env(SAPPORO_NATIVE_MEMORY=memory)
    proc = capi.run(capi.program("shapes.c"), api, calls, cwd=tmp_path, env=env, check=False)
    report = f"rc {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    words = proc.stdout.split()
    assert words[0] == "python" and words[3] == "worst", report
    after_first, at_end = int(words[1]), int(words[2])
    assert after_first > 0, report  # the first call made the plans (and stored the list)
    assert at_end == after_first, report  # none after it
    assert float(words[4]) <= 1e-5, report
