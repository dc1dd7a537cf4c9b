"""Neighbour-list merging of sapporo.parallel.library (no MPI needed): the smallest ``capacity`` ids
of the union of several partial lists, ascending, with exact lengths."""

from __future__ import annotations

import numpy as np

from sapporo.parallel.library import _merge_lists


def test_merge_lists_against_sets() -> None:
    rng = np.random.default_rng(0)
    ni, cap, parts = 60, 7, 6
    pool = iter(rng.permutation(10_000).tolist())  # disjoint ids, as the ranks hold
    sets = [[set() for _ in range(ni)] for _ in range(parts)]
    pairs = []
    for p in range(parts):
        lens = rng.integers(0, 10, ni)
        block = np.full((ni, int(lens.max()) + 2), -5, np.int64)  # junk past the lengths
        for i in range(ni):
            ids = sorted(next(pool) for _ in range(lens[i]))
            block[i, :lens[i]] = ids
            sets[p][i] = set(ids)
        pairs.append((lens, block))
    lens, ids = _merge_lists(pairs, ni, cap)
    assert ids.shape[1] <= cap
    for i in range(ni):
        union = sorted(set().union(*(sets[p][i] for p in range(parts))))
        assert lens[i] == min(len(union), cap)
        assert ids[i, :lens[i]].tolist() == union[:cap]


def test_merge_lists_empty() -> None:
    lens, ids = _merge_lists([(np.zeros(3, np.int64), np.zeros((3, 0), np.int64))], 3, 4)
    assert lens.tolist() == [0, 0, 0] and ids.shape == (3, 0)
