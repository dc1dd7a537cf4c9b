"""What a force call returns: :class:`ForceResult`, and :class:`PendingForce` while in flight."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sapporo.core.validate import int_arg
from sapporo.errors import InputError

__all__ = ["DEFAULT_NB_CAPACITY", "ForceResult", "PendingForce"]

DEFAULT_NB_CAPACITY = 256


@dataclass
class ForceResult:
    """Forces on a block of i-particles (all arrays float64 unless stated).

    Attributes
    ----------
    acc : (ni, 3) array
        Acceleration.
    jerk : (ni, 3) array or None
        Its time derivative (order >= 4).
    snap : (ni, 3) array or None
        Second time derivative (orders 6 and 8).
    pot : (ni,) array
        Potential (negative).
    nn_index : (ni,) int64 array
        Id of the nearest neighbour by unsoftened distance, -1 when there is none.
    nn_r2 : (ni,) array
        Its unsoftened squared distance, inf when there is none.
    crackle : (ni, 3) array or None
        Third time derivative of the acceleration (order 8).
    neighbour_counts : (ni,) int64 array or None
        Exact number of neighbours (even on overflow); None when no ``h2`` was given.
    overflow : bool
        True when any neighbour list held more than ``capacity`` entries.
    capacity : int
        Neighbour-list capacity per i-particle.
    """

    acc: np.ndarray
    jerk: np.ndarray | None
    snap: np.ndarray | None
    pot: np.ndarray
    nn_index: np.ndarray
    nn_r2: np.ndarray
    crackle: np.ndarray | None = None
    neighbour_counts: np.ndarray | None = None
    overflow: bool = False
    capacity: int = DEFAULT_NB_CAPACITY
    #: (counts (ni,), lists (ni, width) of ids): the neighbours of i-particle k are the
    #: first min(count, width, capacity) entries of row k, ascending
    _lists: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    #: the library's result rows these were read from (sapporo/layout.h: (nco, ni)), which
    #: the C API and the MPI layer pass on as they are
    _rows: np.ndarray | None = field(default=None, repr=False)

    @property
    def ni(self) -> int:
        """Number of i-particles."""
        return self.acc.shape[0]

    def neighbours(self, k: int) -> np.ndarray:
        """Ascending ids of the neighbours of the k-th i-particle (at most ``capacity``)."""
        if self.neighbour_counts is None or self._lists is None:
            raise InputError("neighbours: no neighbour lists were computed (pass h2 to compute)")
        if not (type(k) is int and -self.ni <= k < self.ni):
            k = int_arg("neighbours: k", k, -self.ni, self.ni - 1,
                        f" (out of range for {self.ni} i-particles)")
        counts, lists = self._lists
        return lists[k, : min(int(counts[k]), lists.shape[1], self.capacity)].astype(np.int64)


class PendingForce:
    """A force computation in flight; :meth:`result` waits for it (GRAPE's lasthalf).

    Parameters
    ----------
    lock : lock
        The owner's lock, held while the result is collected.
    finish : callable
        Waits for the devices and assembles the :class:`ForceResult`.
    on_done : callable, optional
        Called (under the lock) once the result or its error is known.
    """

    def __init__(self, lock: threading.RLock, finish: Callable[[], ForceResult],
                 on_done: Callable[[PendingForce], None] | None = None):
        self._lock = lock
        self._finish: Callable[[], ForceResult] | None = finish
        self._on_done = on_done
        self._result: ForceResult | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """True once :meth:`result` has been collected."""
        return self._result is not None or self._error is not None

    def result(self) -> ForceResult:
        """Wait for the devices and return the forces.

        Raises
        ------
        NonFiniteError
            When a result is not finite; the message names the i-particle. (A library
            closed in between has collected the result already: it is still returned.)
        """
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._result is None:
                finish, self._finish = self._finish, None
                try:
                    assert finish is not None
                    self._result = finish()
                except BaseException as exc:
                    self._error = exc
                    raise
                finally:
                    if self._on_done is not None:
                        self._on_done(self)
            return self._result
