"""Integrator snapshots: everything needed to resume a run exactly.

A :class:`Snapshot` holds the per-particle state of a block-time-step Hermite integrator
(positions, velocities, masses, ids, the time and step of each particle and the force
derivatives a, jerk, snap and crackle at that time), the integrator parameters, its counters
and free-form metadata. :func:`save` and :func:`load` write and read it as NumPy ``.npz``
(always available) or HDF5 (``.h5`` / ``.hdf5``, when :mod:`h5py` is installed). Floats are
stored as float64 bit-for-bit, and the parameters and metadata as JSON (whose float
representation round-trips exactly), so a resumed run follows the same trajectory.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError, SapporoError

__all__ = ["FORMAT_VERSION", "Snapshot", "h5py_available", "load", "save"]

#: Version of the on-disk layout; :func:`load` refuses newer ones.
FORMAT_VERSION = 1

_VECTORS = ("x", "v", "a", "jerk", "snap", "crackle")
_SCALARS = ("m", "t", "dt", "pot")
_JSON = ("params", "counters", "meta")
_HDF5_SUFFIXES = (".h5", ".hdf5")


@dataclass
class Snapshot:
    """The complete state of an integrator at one moment.

    Attributes
    ----------
    time : float
        The integrator's global time (the last block time); every ``t <= time``.
    x, v : ndarray, shape (n, 3)
        Positions and velocities at each particle's own time ``t``.
    m : ndarray, shape (n,)
        Masses.
    ids : ndarray, shape (n,), int64
        Particle ids.
    t, dt : ndarray, shape (n,)
        Each particle's time and (power-of-two) time step.
    a, jerk, snap, crackle : ndarray, shape (n, 3)
        Acceleration and its first three time derivatives at ``t``.
    pot : ndarray, shape (n,)
        Potential from each particle's last force evaluation.
    params : dict
        Integrator parameters (order, eta, eps2, dt_min, dt_max, criterion, ...).
    counters : dict
        Integrator counters (steps, block_steps, interactions, ...).
    n_active_counts : ndarray, shape (n + 1,), int64
        Number of block steps with each number of active particles.
    meta : dict
        Free JSON-serialisable metadata (e.g. the initial energy of a run).
    """

    time: float
    x: np.ndarray
    v: np.ndarray
    m: np.ndarray
    ids: np.ndarray
    t: np.ndarray
    dt: np.ndarray
    a: np.ndarray
    jerk: np.ndarray
    snap: np.ndarray
    crackle: np.ndarray
    pot: np.ndarray
    params: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    n_active_counts: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of particles."""
        return int(self.x.shape[0])

    @property
    def synchronised(self) -> bool:
        """True when every particle is at the global time."""
        return bool(np.all(self.t == self.time))

    def validate(self) -> Snapshot:
        """Check shapes and finiteness; return ``self``.

        Also: every ``dt`` is a positive power of two, the numeric integrator parameters
        (``eps2 >= 0``; ``eta``, ``dt_min``, ``dt_max``, ... ``> 0``) and the counters are
        finite numbers, and params, counters and meta are dictionaries.

        Raises
        ------
        InputError
            Naming the first inconsistent field.
        """
        n = np.asarray(self.x).shape[0] if np.ndim(self.x) == 2 else -1
        for name in _VECTORS:
            arr = np.asarray(getattr(self, name))
            if arr.shape != (n, 3):
                raise InputError(f"snapshot field {name} must have shape ({n}, 3), got {arr.shape}")
        for name in _SCALARS:
            arr = np.asarray(getattr(self, name))
            if arr.shape != (n,):
                raise InputError(f"snapshot field {name} must have shape ({n},), got {arr.shape}")
        if np.asarray(self.ids).shape != (n,):
            raise InputError(f"snapshot field ids must have shape ({n},)")
        for name in (*_VECTORS, "m", "t", "dt"):
            if not np.all(np.isfinite(getattr(self, name))):
                raise InputError(f"snapshot field {name} is not finite")
        if not np.isfinite(self.time):
            raise InputError("snapshot time is not finite")
        dt = np.asarray(self.dt, dtype=np.float64)
        if np.any(dt <= 0.0) or np.any(np.frexp(dt)[0] != 0.5):
            raise InputError("snapshot field dt must hold positive powers of two")
        for name in _JSON:
            if not isinstance(getattr(self, name), dict):
                raise InputError(f"snapshot {name} must be a JSON object, "
                                 f"got {type(getattr(self, name)).__name__}")
        _check_numbers("params", self.params, _PARAM_RANGES)
        _check_numbers("counters", self.counters, {k: 0.0 for k in self.counters})
        return self


#: Integrator parameters that must be finite numbers: name -> smallest value allowed
#: (``eps2`` may be 0, the others must be positive: checked as > 0 when the bound is None).
_PARAM_RANGES: dict[str, float | None] = {
    "eps2": 0.0, "eta": None, "eta4": None, "eta_s": None, "dt_min": None, "dt_max": None,
    "force_noise": 0.0,
}


def _check_numbers(what: str, values: dict[str, Any], ranges: dict[str, float | None]) -> None:
    """Entries of ``values`` named in ``ranges`` must be finite numbers in range.

    A bound of ``None`` means strictly positive, a number ``b`` means ``>= b``; missing
    entries (and ``None`` values) are left alone.
    """
    for name, low in ranges.items():
        value = values.get(name)
        if value is None:
            continue
        ok = (isinstance(value, (int, float, np.integer, np.floating))
              and not isinstance(value, bool) and bool(np.isfinite(value)))
        if ok:
            ok = value > 0.0 if low is None else value >= low
        if not ok:
            rule = "> 0" if low is None else f">= {low:g}"
            raise InputError(f"snapshot {what}.{name} must be a finite number {rule}, "
                             f"got {value!r}")


def h5py_available() -> bool:
    """Whether HDF5 snapshots can be written and read (h5py importable)."""
    try:
        import h5py  # noqa: F401
    except ImportError:
        return False
    return True


def _is_hdf5(path: Path) -> bool:
    return path.suffix.lower() in _HDF5_SUFFIXES


def save(path: str | os.PathLike[str], snapshot: Snapshot) -> Path:
    """Write ``snapshot`` to ``path``: HDF5 for ``.h5``/``.hdf5``, else NumPy ``.npz``.

    The file is written under a temporary name and renamed, so an interrupted write never
    leaves a truncated snapshot behind.

    Parameters
    ----------
    path : path-like
        Destination; ``.npz`` is appended when the name has no known suffix.
    snapshot : Snapshot
        What to write.

    Returns
    -------
    Path
        The path written.

    Raises
    ------
    SapporoError
        For HDF5 when h5py is not installed.
    """
    path = Path(path)
    if not _is_hdf5(path) and path.suffix.lower() != ".npz":
        path = path.with_name(path.name + ".npz")
    snapshot.validate()
    arrays: dict[str, np.ndarray] = {
        "format_version": np.asarray(FORMAT_VERSION, dtype=np.int64),
        "time": np.asarray(float(snapshot.time), dtype=np.float64),
        "ids": np.ascontiguousarray(snapshot.ids, dtype=np.int64),
    }
    for name in (*_VECTORS, *_SCALARS):
        arrays[name] = np.ascontiguousarray(getattr(snapshot, name), dtype=np.float64)
    if snapshot.n_active_counts is not None:
        arrays["n_active_counts"] = np.ascontiguousarray(snapshot.n_active_counts, dtype=np.int64)
    texts = {name: json.dumps(getattr(snapshot, name), sort_keys=True) for name in _JSON}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if _is_hdf5(path):
        if not h5py_available():
            raise SapporoError(
                f"cannot write {path}: HDF5 snapshots need h5py (pip install h5py); "
                "use a .npz name instead"
            )
        import h5py

        with h5py.File(tmp, "w") as f:
            for name, arr in arrays.items():
                f.create_dataset(name, data=arr)
            for name, text in texts.items():
                f.attrs[name] = text
    else:
        for name, text in texts.items():
            arrays[name] = np.asarray(text)
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
    os.replace(tmp, path)
    return path


def load(path: str | os.PathLike[str]) -> Snapshot:
    """Read a snapshot written by :func:`save`.

    Parameters
    ----------
    path : path-like
        A ``.npz`` or ``.h5``/``.hdf5`` file.

    Returns
    -------
    Snapshot

    Raises
    ------
    InputError
        When the file is missing, unreadable or not a sapporo snapshot.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"snapshot {path} does not exist")
    try:
        if _is_hdf5(path):
            if not h5py_available():
                raise InputError(f"cannot read {path}: HDF5 snapshots need h5py (pip install h5py)")
            import h5py

            with h5py.File(path, "r") as f:
                data = {name: np.asarray(f[name][()]) for name in f}
                texts = {name: str(f.attrs[name]) for name in _JSON if name in f.attrs}
        else:
            with np.load(path, allow_pickle=False) as f:
                data = {name: f[name] for name in f.files}
            texts = {name: str(data.pop(name)) for name in _JSON if name in data}
    except InputError:
        raise
    except Exception as exc:  # any reader failure means "not a snapshot"
        raise InputError(f"cannot read snapshot {path}: {exc}") from exc
    missing = [k for k in ("format_version", "time", "ids", *_VECTORS, *_SCALARS) if k not in data]
    if missing:
        raise InputError(f"{path} is not a sapporo snapshot (missing {', '.join(missing)})")
    version = int(data["format_version"])
    if version > FORMAT_VERSION:
        raise InputError(f"{path} has snapshot format {version}, newer than {FORMAT_VERSION}")
    try:
        parsed = {name: json.loads(texts.get(name, "{}")) for name in _JSON}
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: malformed metadata: {exc}") from exc
    snap = Snapshot(
        time=float(data["time"]),
        ids=np.asarray(data["ids"], dtype=np.int64),
        n_active_counts=(
            np.asarray(data["n_active_counts"], dtype=np.int64)
            if "n_active_counts" in data else None
        ),
        **{name: np.asarray(data[name], dtype=np.float64) for name in (*_VECTORS, *_SCALARS)},
        **parsed,
    )
    return snap.validate()
