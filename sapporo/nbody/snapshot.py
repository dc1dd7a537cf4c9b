"""Integrator snapshots: everything needed to resume a run exactly.

:func:`save` and :func:`load` write and read a :class:`Snapshot` as NumPy ``.npz`` or HDF5
(``.h5`` / ``.hdf5``, with h5py). Floats are stored as float64 bit-for-bit, and the
parameters and metadata as JSON (whose floats round-trip exactly), so a resumed run follows
the same trajectory.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sapporo.errors import InputError, SapporoError
from sapporo.nbody.fileio import named_error, replacing

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

        Also: every ``dt`` is a positive power of two, the numeric integrator parameters and
        the counters are finite numbers in range, and params, counters and meta are
        dictionaries.

        Raises
        ------
        InputError
            Naming the first inconsistent field.
        """
        n = np.asarray(self.x).shape[0] if np.ndim(self.x) == 2 else -1
        shapes = {**dict.fromkeys(_VECTORS, (n, 3)), **dict.fromkeys((*_SCALARS, "ids"), (n,))}
        for name, shape in shapes.items():
            got = np.asarray(getattr(self, name)).shape
            if got != shape:
                raise InputError(f"snapshot field {name} must have shape {shape}, got {got}")
        _check_integers("ids", self.ids)
        if self.n_active_counts is not None:
            counts = np.asarray(self.n_active_counts)
            if counts.shape != (n + 1,):
                raise InputError(f"snapshot field n_active_counts must have shape ({n + 1},) "
                                 f"(one count per block size 0..n), got {counts.shape}")
            _check_integers("n_active_counts", counts)
            if np.any(counts < 0):
                raise InputError("snapshot field n_active_counts must be >= 0")
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


def _check_integers(name: str, values: Any) -> None:
    """``values`` must hold whole numbers that fit int64 (no 0.5, no text, no booleans)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
            raise InputError(f"snapshot field {name} holds values beyond int64")
        return
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise InputError(f"snapshot field {name} must hold integers, not NaN or inf")
        bad = arr != np.round(arr)
        if bad.any():
            raise InputError(f"snapshot field {name} must hold integers, got "
                             f"{float(arr[bad].flat[0])!r}")
        if arr.size and np.abs(arr).max() >= 2.0**63:
            raise InputError(f"snapshot field {name} holds values beyond int64")
        return
    raise InputError(f"snapshot field {name} must hold integers, got dtype {arr.dtype}")


def _format_version(value: Any, path: Path) -> int:
    """The snapshot's ``format_version``: an integer from 1 to :data:`FORMAT_VERSION`."""
    arr = np.asarray(value)
    number = float(arr) if arr.shape == () and arr.dtype.kind in "iuf" else np.nan
    if not (np.isfinite(number) and number == int(number)):
        raise InputError(f"{path}: format_version must be an integer, got {arr.tolist()!r}")
    version = int(number)
    if version < 1:
        raise InputError(f"{path}: format_version must be >= 1, got {version}")
    if version > FORMAT_VERSION:
        raise InputError(f"{path} has snapshot format {version}, newer than {FORMAT_VERSION}; "
                         "a newer sapporo wrote it")
    return version


def _write_npz(tmp: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` as ``.npz`` to ``tmp`` and flush it to the disk."""
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
        fh.flush()
        os.fsync(fh.fileno())


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
    """Write ``snapshot`` to ``path``: HDF5 for ``.h5``/``.hdf5``, else NumPy ``.npz``
    (appended when the name has no known suffix); returns the path written. The file is
    written under a temporary name and renamed, so a failed write leaves no truncated
    snapshot behind.

    Raises
    ------
    SapporoError
        For HDF5 when h5py is not installed.
    OSError
        When the file cannot be written; its ``filename`` is ``path``.
    """
    path = Path(path)
    if not _is_hdf5(path) and path.suffix.lower() != ".npz":
        path = path.with_name(path.name + ".npz")
    snapshot.validate()
    arrays: dict[str, np.ndarray] = {
        "format_version": np.asarray(FORMAT_VERSION, dtype=np.int64),
        "time": np.asarray(float(snapshot.time), dtype=np.float64),
        "ids": np.ascontiguousarray(snapshot.ids, dtype=np.int64),
        **{name: np.ascontiguousarray(getattr(snapshot, name), dtype=np.float64)
           for name in (*_VECTORS, *_SCALARS)},
    }
    if snapshot.n_active_counts is not None:
        arrays["n_active_counts"] = np.ascontiguousarray(snapshot.n_active_counts, dtype=np.int64)
    texts = {name: json.dumps(getattr(snapshot, name), sort_keys=True) for name in _JSON}
    if _is_hdf5(path) and not h5py_available():
        raise SapporoError(f"cannot write {path}: HDF5 snapshots need h5py (pip install h5py); "
                           "use a .npz name instead")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise named_error(exc, path) from exc
    with replacing(path) as tmp:
        if _is_hdf5(path):
            import h5py

            with h5py.File(tmp, "w") as f:
                for name, arr in arrays.items():
                    f.create_dataset(name, data=arr)
                for name, text in texts.items():
                    f.attrs[name] = text
        else:
            for name, text in texts.items():
                arrays[name] = np.asarray(text)
            _write_npz(tmp, arrays)
    return path


def load(path: str | os.PathLike[str]) -> Snapshot:
    """Read a snapshot written by :func:`save` (a ``.npz`` or ``.h5``/``.hdf5`` file).

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
    _format_version(data["format_version"], path)
    for name in ("ids", "n_active_counts"):
        if name in data:
            try:
                _check_integers(name, data[name])
            except InputError as exc:
                raise InputError(f"{path}: {exc}") from None
    try:
        parsed = {name: json.loads(texts.get(name, "{}")) for name in _JSON}
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: malformed metadata: {exc}") from exc
    try:
        if np.asarray(data["time"]).shape != ():
            raise ValueError("time must be one number")
        snap = Snapshot(
            time=float(data["time"]),
            ids=np.asarray(data["ids"], dtype=np.int64),
            n_active_counts=(
                np.asarray(data["n_active_counts"], dtype=np.int64)
                if "n_active_counts" in data else None
            ),
            **{name: np.asarray(data[name], dtype=np.float64)
               for name in (*_VECTORS, *_SCALARS)},
            **parsed,
        )
    except (TypeError, ValueError) as exc:  # text where numbers belong, and the like
        raise InputError(f"{path}: not a valid sapporo snapshot ({exc})") from None
    try:
        return snap.validate()
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
