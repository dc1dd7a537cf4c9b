"""The MPI layer: :class:`ParallelLibrary` (j- and 2-D decompositions over ranks,
:mod:`.library`) and what an MPI launcher told this process (:mod:`.launcher`, which imports
nothing). Importing this package does not import mpi4py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["ParallelLibrary", "auto_rows", "run_cli", "square_rows", "under_mpi"]

if TYPE_CHECKING:  # pragma: no cover
    from sapporo.parallel.library import ParallelLibrary, auto_rows, run_cli, square_rows, under_mpi


def __getattr__(name: str) -> Any:
    if name in __all__:
        from sapporo.parallel import library

        return getattr(library, name)
    raise AttributeError(f"module 'sapporo.parallel' has no attribute {name!r}")
