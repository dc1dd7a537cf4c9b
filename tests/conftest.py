"""Test configuration: every test that takes ``backend`` runs on each usable backend.

``SAPPORO_TEST_BACKENDS=opencl`` (comma-separated) narrows the selection. GPU-only tests are
marked ``gpu`` and skip with a reason when no CUDA device is usable.
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
    metafunc.parametrize("backend", params)


def cuda_usable() -> tuple[bool, str]:
    """Whether a CUDA device is usable, and why not."""
    for name, reason in _BACKENDS:
        if name == "cuda":
            return (not reason, reason)
    return (False, "cuda backend not probed")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ok, reason = cuda_usable()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"no CUDA GPU/PyCUDA: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
