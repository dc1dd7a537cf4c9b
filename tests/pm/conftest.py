"""Shared fixtures of the particle-mesh tests: meshes are built once per module and
configuration (a kernel build costs about a second on the CPU device)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sapporo.pm import ParticleMesh


@pytest.fixture(scope="module")
def meshes() -> Iterator[Callable[..., ParticleMesh]]:
    """``meshes(backend, grid, box, **options)``: a cached :class:`ParticleMesh`."""
    cache: dict[Any, ParticleMesh] = {}

    def get(backend: str, grid: int, box: float, **kw: Any) -> ParticleMesh:
        key = (backend, grid, box, tuple(sorted(kw.items())))
        if key not in cache:
            cache[key] = ParticleMesh(grid, box, backend=backend, **kw)
        return cache[key]

    yield get
    for pm in cache.values():
        pm.close()
