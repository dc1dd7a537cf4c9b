"""Test configuration: every test that takes ``backend`` runs on each usable backend.

Where no real CUDA device is usable, the tests of the modules in ``EMULATED_MODULES`` also
run on ``cuda-emulated``: the CUDA backend and ``kernels_cuda/`` over the CPU emulation of
the CUDA execution model (``tests/cudaemu``); the test sees ``backend == "cuda"``.
``SAPPORO_TEST_CUDA_EMULATION=all`` extends that to every test that takes ``backend``,
``=0`` turns it off.

``SAPPORO_TEST_BACKENDS=opencl`` (comma-separated names, ``cuda-emulated`` among them)
narrows the selection. GPU-only tests are marked ``gpu`` and skip with a reason when no CUDA
device is usable.
"""

from __future__ import annotations

import os

import pytest


def _usable_backends() -> list[tuple[str, str]]:
    from sapporo.backend import probe_backends

    out = []
    for status in probe_backends():
        out.append((status.name, "" if status.devices else status.reason))
    return out


_BACKENDS = _usable_backends()

EMULATED = "cuda-emulated"
EMULATED_MODULES = {"test_library.py", "test_order8.py", "test_engine.py"}


def _emulate(module_file: str) -> bool:
    """Whether the tests of this module also run on the emulated CUDA backend."""
    mode = os.environ.get("SAPPORO_TEST_CUDA_EMULATION", "auto").strip().lower()
    if mode in ("0", "off", "no") or cuda_usable()[0]:
        return False
    return mode == "all" or os.path.basename(module_file) in EMULATED_MODULES


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    wanted = os.environ.get("SAPPORO_TEST_BACKENDS")
    wanted_set = {w.strip() for w in wanted.split(",")} if wanted else None
    params = []
    for name, reason in _BACKENDS:
        if wanted_set is not None and name not in wanted_set:
            continue
        skip = pytest.mark.skip(reason=f"backend {name} unusable here: {reason}")
        marks = [skip] if reason else []
        params.append(pytest.param(name, id=name, marks=marks))
    if _emulate(str(metafunc.definition.path)) and (
            wanted_set is None or EMULATED in wanted_set):
        params.append(pytest.param(EMULATED, id=EMULATED))
    metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest):
    """The backend name a test runs on (``cuda`` for the emulated CUDA backend)."""
    if request.param != EMULATED:
        yield request.param
        return
    from cudaemu.fake_pycuda import emulated_cuda

    with emulated_cuda():
        yield "cuda"


@pytest.fixture
def two_pocl_devices() -> None:
    """Skip unless PoCL's threaded CPU driver is here: a process started with
    ``POCL_DEVICES="pthread pthread"`` then sees two devices of it."""
    from sapporo.backend import get_backend
    from sapporo.errors import BackendError

    try:
        names = [d.name for d in get_backend("opencl").devices()]
    except BackendError as exc:
        pytest.skip(f"no OpenCL: {exc}")
    if not any(n.startswith("pthread") for n in names):
        pytest.skip(f"not PoCL's CPU driver ({names}): POCL_DEVICES cannot make two devices")


def cuda_usable() -> tuple[bool, str]:
    """Whether a CUDA device is usable, and why not."""
    for name, reason in _BACKENDS:
        if name == "cuda":
            return (not reason, reason)
    return (False, "cuda backend not probed")


@pytest.fixture(scope="session")
def cuda_gpu() -> bool:
    """Whether a real CUDA device is usable (not the emulation)."""
    return cuda_usable()[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ok, reason = cuda_usable()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no CUDA GPU/PyCUDA: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
