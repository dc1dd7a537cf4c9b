"""The force library: :class:`~sapporo.core.library.Library` (j-memory, chunking, several
devices), one device's buffers and launches (:mod:`.device`), the results, the argument
checks, the host/kernel data layout, the launch parameters, and the native block-step
engine's Python side (:mod:`.engine`). Public names are re-exported by :mod:`sapporo`.
"""
