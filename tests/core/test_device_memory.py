"""The native engine on device memory: with ``SAPPORO_NATIVE_MEMORY=device`` a CPU device
keeps the library's data in device buffers with explicit copies, as a GPU does, and the
engine queues the copies of j-records, i-particles, results and neighbour lists itself.

The engine's own tests and the C API's direct-path tests (the same bits and errors as the
library's own way, orders 2 to 8, both precisions, neighbour lists) run again in a child
process in that mode.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_engine_and_c_api_tests_pass_on_device_memory():
    from sapporo.backend import get_backend
    from sapporo.errors import BackendError

    try:
        devices = get_backend("opencl").devices()
    except BackendError as exc:
        pytest.skip(f"OpenCL unusable here: {exc}")
    if not devices:
        pytest.skip("no OpenCL device")
    env = {**os.environ, "SAPPORO_NATIVE_MEMORY": "device", "SAPPORO_TEST_BACKENDS": "opencl"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/core/test_engine.py", "tests/capi/test_capi_direct.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
