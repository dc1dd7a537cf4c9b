"""Initial conditions from files (``sapporo run --ic FILE``; docs/initial-conditions.md).

:func:`read` loads the masses, positions, velocities and (where the file has them) the ids
of a star cluster from one of :data:`FORMATS`:

* ``columns``: plain text, one particle per line, values separated by white space or
  commas, ``#`` starting a comment: ``m x y z vx vy vz`` (NBODY6's layout), ``id m x y z vx
  vy vz``, or any order named with ``columns`` (:func:`parse_columns`);
* ``banana`` (Phantom-GRAPE): the time, N, then per particle an ignored integer, m, x y z
  and vx vy vz; ids 0 .. N-1 in file order;
* ``phigrape``: the output step, N, the time, then per particle ``id m x y z vx vy vz``
  (in both header formats a particle starts on a new line and may continue over lines);
* ``snapshot``: a synchronised ``.npz`` or ``.h5`` snapshot of ``sapporo run``;
* ``amuse``: the last AMUSE HDF5 particle set saved in the file (needs h5py).

Values are N-body units (G = 1), except in AMUSE files, whose datasets carry their units
(S.I. ones need ``scale="nbody"``). ``scale="nbody"`` moves the system to its centre-of-mass
frame in Hénon units (:func:`sapporo.nbody.ic.to_nbody_units`), keeping its virial ratio. A
run from a file starts at time 0; the file's time is kept in the ``source``. Every problem
is an :class:`sapporo.InputError` naming the file and the line (or particle).
"""

from __future__ import annotations

import ast
import math
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sapporo.errors import InputError
from sapporo.nbody import snapshot as snapshot_module
from sapporo.nbody.ic import to_nbody_units

__all__ = ["COLUMN_NAMES", "FORMATS", "G_SI", "SCALES", "InitialConditions", "parse_columns",
           "read"]

#: The formats :func:`read` knows; ``auto`` tells them apart by the file's content.
FORMATS = ("auto", "columns", "banana", "phigrape", "snapshot", "amuse")
#: ``none`` keeps the values; ``nbody`` changes them to Hénon units.
SCALES = ("none", "nbody")
#: The names a ``columns`` list may hold (``skip``: a column that is read and ignored).
COLUMN_NAMES = ("id", "m", "x", "y", "z", "vx", "vy", "vz", "skip")
#: The gravitational constant in S.I. units (CODATA 2018), for AMUSE files in S.I. units.
G_SI = 6.6743e-11
#: Ids the integrator accepts: 0 <= id < 2^31.
MAX_ID = 2**31 - 1

_REQUIRED = ("m", "x", "y", "z", "vx", "vy", "vz")
_EIGHT = ("id", *_REQUIRED)
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_ZIP_MAGIC = b"PK\x03\x04"


@dataclass
class InitialConditions:
    """Particles read from a file.

    Attributes
    ----------
    x, v : ndarray, shape (n, 3)
        Positions and velocities.
    m : ndarray, shape (n,)
        Masses.
    ids : ndarray, shape (n,), int64, or None
        The file's particle ids; None where the format has none (the integrator then
        numbers the particles 0 .. n-1 in file order).
    source : dict
        Where they came from (JSON-serialisable): ``file``, ``format``, ``scale``, ``n``,
        ``time`` (the file's, or None); ``columns`` (column format); ``set``, ``units`` and
        ``units_system`` (AMUSE files).
    """

    x: np.ndarray
    v: np.ndarray
    m: np.ndarray
    ids: np.ndarray | None
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of particles."""
        return int(self.m.size)


def parse_columns(text: str) -> tuple[str, ...]:
    """Parse a column list such as ``"id,m,x,y,z,vx,vy,vz"``.

    The names are those of :data:`COLUMN_NAMES`, comma-separated: ``m x y z vx vy vz``
    once each, ``id`` at most once, ``skip`` for any column to ignore.

    Raises
    ------
    InputError
        Naming the problem (an unknown, repeated or missing name).
    """
    names = tuple(part.strip().lower() for part in str(text).split(","))
    unknown = [name for name in names if name not in COLUMN_NAMES]
    if unknown:
        raise InputError(f"--ic-columns: unknown column {unknown[0]!r} (the names are "
                         f"{', '.join(COLUMN_NAMES)})")
    repeated = sorted({name for name in names if name != "skip" and names.count(name) > 1})
    if repeated:
        raise InputError(f"--ic-columns: {repeated[0]} is named twice in {text!r}")
    missing = [name for name in _REQUIRED if name not in names]
    if missing:
        raise InputError(f"--ic-columns: {', '.join(missing)} missing in {text!r} (m, x, y, "
                         "z, vx, vy and vz are needed)")
    return names


def read(path: str | os.PathLike[str], format: str = "auto",
         columns: str | tuple[str, ...] | None = None, scale: str = "none"
         ) -> InitialConditions:
    """Read initial conditions from the file ``path``.

    Parameters
    ----------
    format : str
        One of :data:`FORMATS`; ``auto`` tells them apart by the content: HDF5 files are
        snapshots (with a ``format_version``) or AMUSE sets, zip files snapshots, text whose
        first line holds one number banana or phiGRAPE (by the header lines, or the count
        of values), other text columns (7 or 8).
    columns : str or tuple of str, optional
        The columns of the ``columns`` format (:func:`parse_columns`).
    scale : str
        ``none`` (keep the values) or ``nbody`` (centre-of-mass frame, Hénon units).

    Raises
    ------
    InputError
        For a file that cannot be read or is malformed, naming the file and the line or
        particle.
    """
    if format not in FORMATS:
        raise InputError(f"unknown initial-conditions format {format!r} (one of "
                         f"{', '.join(FORMATS)})")
    if scale not in SCALES:
        raise InputError(f"unknown scaling {scale!r} (one of {', '.join(SCALES)})")
    if isinstance(columns, str):
        columns = parse_columns(columns)
    if columns is not None and format not in ("auto", "columns"):
        raise InputError(f"columns are given only for the columns format, not {format}")
    path = Path(path)
    head = _head(path)
    if format == "auto":
        format = _detect(path, head, columns)
    if format == "snapshot":
        ics = _read_snapshot(path)
    elif format == "amuse":
        ics = _read_amuse(path, scale)
    elif head.startswith((_HDF5_MAGIC, _ZIP_MAGIC)):
        raise InputError(f"{path} is a binary file, not {format} text")
    elif format == "columns":
        ics = _read_columns(path, columns)
    else:
        ics = _read_header_format(path, format)
    _check_particles(path, ics)
    ics.source = {"file": os.path.abspath(path), "format": format, "scale": scale,
                  "n": ics.n, **ics.source}
    if scale == "nbody":
        g = G_SI if ics.source.get("units_system") == "S.I." else 1.0
        try:
            ics.x, ics.v, ics.m = to_nbody_units(ics.x, ics.v, ics.m, g=g)
        except InputError as exc:
            raise InputError(f"{path}: cannot scale to N-body units: {exc}") from None
    return ics


def _head(path: Path) -> bytes:
    """The file's first bytes; InputError when it cannot be read."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a file")
    try:
        with open(path, "rb") as fh:
            return fh.read(8)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _detect(path: Path, head: bytes, columns: tuple[str, ...] | None) -> str:
    if columns is not None:
        return "columns"
    if head.startswith(_ZIP_MAGIC):
        return "snapshot"
    if head.startswith(_HDF5_MAGIC):
        with _hdf5(path)[1] as f:
            return "snapshot" if "format_version" in f else "amuse"
    counts: list[int] = []
    total = 0
    tokens: list[str] = []
    for _, values in _data_lines(path):
        if len(counts) < 4:
            counts.append(len(values))
            tokens.extend(values)
        total += len(values)
    if not counts or counts[0] != 1:
        return "columns"  # also for an empty file: the column reader says so
    # A particle on one line right after two header lines is banana, after three phiGRAPE.
    if len(counts) > 2 and counts[2] > 1:
        return "banana"
    if len(counts) > 3 and counts[3] > 1:
        return "phigrape"
    # Particles split over lines (as in banana's own files): the count of values decides.
    try:
        n = int(tokens[1]) if counts[1:2] == [1] else -1
    except ValueError:
        n = -1
    return "phigrape" if n >= 0 and total == 3 + 8 * n else "banana"


def _hdf5(path: Path) -> tuple[Any, Any]:
    """h5py, and the HDF5 file ``path`` open for reading."""
    try:
        import h5py
    except ImportError:
        raise InputError(f"{path} is an HDF5 file; reading it needs h5py (pip install h5py, "
                         "or the hdf5 extra)") from None
    try:
        return h5py, h5py.File(path, "r")
    except OSError as exc:
        raise InputError(f"{path}: cannot read this HDF5 file ({exc})") from None


def _data_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, values) of each line holding data: comments (``#`` to the end of the
    line) and blank lines skipped, values split at commas or else at white space."""
    try:
        with open(path, "rb") as fh:
            for number, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"{path}, line {number}: not text (bytes that are not "
                                     "UTF-8); a binary file needs --ic-format snapshot or "
                                     "amuse") from None
                if "\x00" in line:
                    raise InputError(f"{path}, line {number}: not text (a NUL byte); a "
                                     "binary file needs --ic-format snapshot or amuse")
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                values = [part.strip() for part in line.split(",")] if "," in line else line.split()
                if "" in values:
                    raise InputError(f"{path}, line {number}: an empty field between commas")
                yield number, values
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _count(k: int) -> str:
    return f"{k} value" if k == 1 else f"{k} values"


def _number(path: Path, line: int, text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{path}, line {line}: {name} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{path}, line {line}: {name} is {text} (not finite)")
    return value


def _integer(path: Path, line: int, text: str, name: str, whole_floats: bool) -> int:
    """An integer written as such (or, with ``whole_floats``, as a whole number ``3.0``)."""
    try:
        return int(text)
    except ValueError:
        pass
    if whole_floats:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value == int(value):
            return int(value)
    raise InputError(f"{path}, line {line}: {name} {text!r} is not an integer")


class _Particles:
    """Values gathered particle by particle (compactly, for files of millions of lines)."""

    def __init__(self, path: Path, with_ids: bool) -> None:
        self.path = path
        self.values = array("d")  # m x y z vx vy vz per particle
        self.ids = array("q") if with_ids else None
        self.lines = array("q")

    def add(self, line: int, record: dict[str, str], pid: int | None,
            lines: dict[str, int] | None = None) -> None:
        """Add a particle; ``line`` is where it starts, ``lines`` where each value is
        (when the particle spans several lines)."""
        for name in _REQUIRED:
            at = lines[name] if lines else line
            value = _number(self.path, at, record[name], "mass" if name == "m" else name)
            if name == "m" and value < 0.0:
                raise InputError(f"{self.path}, line {at}: the mass {record[name]} is "
                                 "negative")
            self.values.append(value)
        if self.ids is not None:
            assert pid is not None
            if not 0 <= pid <= MAX_ID:
                raise InputError(f"{self.path}, line {line}: id {pid} is out of range (ids "
                                 f"are 0 to {MAX_ID}){_SKIP_HINT}")
            self.ids.append(pid)
        self.lines.append(line)

    def result(self, source: dict[str, Any]) -> InitialConditions:
        data = np.frombuffer(self.values, dtype=np.float64).reshape(-1, 7).copy()
        ids = None
        if self.ids is not None:
            ids = np.frombuffer(self.ids, dtype=np.int64).copy()
            _check_unique_ids(self.path, ids, np.frombuffer(self.lines, dtype=np.int64))
        return InitialConditions(x=data[:, 1:4].copy(), v=data[:, 4:7].copy(),
                                 m=data[:, 0].copy(), ids=ids, source=source)


_SKIP_HINT = " (to ignore the file's ids, name the column skip in --ic-columns)"


def _check_unique_ids(path: Path, ids: np.ndarray, lines: np.ndarray) -> None:
    order = np.argsort(ids, kind="stable")
    same = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if same.size == 0:
        return
    # The repeat that comes first in the file, and the earlier line with the same id.
    later = order[same + 1]
    k = int(np.argmin(lines[later]))
    first, again = int(order[same[k]]), int(later[k])
    raise InputError(f"{path}, line {int(lines[again])}: id {int(ids[again])} repeats the id "
                     f"of line {int(lines[first])}{_SKIP_HINT}")


def _read_columns(path: Path, columns: tuple[str, ...] | None) -> InitialConditions:
    names = columns
    first_line = 0
    particles = _Particles(path, with_ids=columns is None or "id" in columns)
    for line, values in _data_lines(path):
        if names is None:  # the first line sets the columns
            if len(values) not in (7, 8):
                raise InputError(f"{path}, line {line}: {_count(len(values))}; a particle line "
                                 "has 7 (m x y z vx vy vz) or 8 (id m x y z vx vy vz); name "
                                 "other columns with --ic-columns")
            names = _REQUIRED if len(values) == 7 else _EIGHT
            particles.ids = array("q") if "id" in names else None
            first_line = line
        if len(values) != len(names):
            origin = (f"line {first_line} has {len(names)}, which sets the columns"
                      if columns is None else "--ic-columns names")
            raise InputError(f"{path}, line {line}: {_count(len(values))}, expected "
                             f"{len(names)} ({' '.join(names)}; {origin})")
        record = dict(zip(names, values, strict=True))
        try:
            pid = (_integer(path, line, record["id"], "id", whole_floats=True)
                   if "id" in names else None)
            particles.add(line, record, pid)
        except InputError as exc:
            if line == first_line and "is not a" in str(exc):
                raise InputError(f"{exc} (a header line must start with #)") from None
            raise
    if names is None:
        raise InputError(f"{path}: no particles (the file holds no data lines)")
    return particles.result({"time": None, "columns": list(names)})


def _read_header_format(path: Path, format: str) -> InitialConditions:
    """banana: ``t``, ``N``, then N times ``i m x y z vx vy vz`` (i ignored);
    phigrape: ``step``, ``N``, ``t``, then N times ``id m x y z vx vy vz``."""
    header = ("time", "N") if format == "banana" else ("step", "N", "time")
    fields = ("first" if format == "banana" else "id", *_REQUIRED)
    layout = " ".join(("i" if format == "banana" else "id", *_REQUIRED))
    lines = _data_lines(path)
    head: dict[str, tuple[int, str]] = {}
    for line, values in lines:
        for value in values:
            if len(head) == len(header):
                raise InputError(f"{path}, line {line}: {value!r} after the header "
                                 f"({', '.join(header)}); each particle starts on a new line")
            head[header[len(head)]] = (line, value)
        if len(head) == len(header):
            break
    if len(head) < len(header):
        missing = ", ".join(header[len(head):])
        raise InputError(f"{path}: the header ends early ({missing} missing; the {format} "
                         f"header is {', '.join(header)})")
    n_line, n_text = head["N"]
    n = _integer(path, n_line, n_text, "the particle count N", whole_floats=False)
    if n < 0:
        raise InputError(f"{path}, line {n_line}: the particle count N = {n} is negative")
    if n == 0:
        raise InputError(f"{path}, line {n_line}: no particles (N = 0)")
    t_line, t_text = head["time"]
    time = _number(path, t_line, t_text, "the time")
    if format == "phigrape":
        _number(path, head["step"][0], head["step"][1], "the output step")
    particles = _Particles(path, with_ids=format == "phigrape")
    record: list[str] = []
    record_lines: list[int] = []
    start = 0
    count = 0
    last = n_line
    for line, values in lines:
        last = line
        if count == n:
            raise InputError(f"{path}, line {line}: more data after the {n} particles that "
                             f"line {n_line} announces")
        if not record:
            start = line
        record.extend(values)
        record_lines.extend([line] * len(values))
        if len(record) < 8:
            continue
        if len(record) > 8:
            if start == line:
                raise InputError(f"{path}, line {line}: {_count(len(values))}, expected 8 "
                                 f"({layout})")
            raise InputError(f"{path}, line {start}: particle {count + 1} has "
                             f"{_count(len(record) - len(values))} before line {line}, "
                             f"expected 8 ({layout})")
        rec = dict(zip(fields, record, strict=True))
        at = dict(zip(fields, record_lines, strict=True))
        first = _integer(path, start, record[0],
                         "the first value" if format == "banana" else "id",
                         whole_floats=False)
        particles.add(start, rec, None if format == "banana" else first, at)
        record, record_lines = [], []
        count += 1
    if record:
        raise InputError(f"{path}, line {start}: particle {count + 1} has only "
                         f"{_count(len(record))} of 8 ({layout}) when the file ends")
    if count < n:
        raise InputError(f"{path}, line {last}: the file ends after {count} particles; line "
                         f"{n_line} announces N = {n}")
    return particles.result({"time": time})


def _read_snapshot(path: Path) -> InitialConditions:
    snap = snapshot_module.load(path)
    if not snap.synchronised:
        raise InputError(f"{path}: the snapshot is not synchronised (its particles are at "
                         f"different times, up to t = {snap.time:g}); continue it with "
                         "--resume instead")
    return InitialConditions(x=snap.x.copy(), v=snap.v.copy(), m=snap.m.copy(),
                             ids=snap.ids.copy(), source={"time": float(snap.time)})


_DIMENSIONS = {"mass": {"mass": 1.0}, **dict.fromkeys(("x", "y", "z"), {"length": 1.0}),
               **dict.fromkeys(("vx", "vy", "vz"), {"length": 1.0, "time": -1.0})}
#: AMUSE's unit system of physical units (the other, N-body values, is "generic")
_SI_SYSTEM = "S.I."


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _read_amuse(path: Path, scale: str) -> InitialConditions:
    h5py, f = _hdf5(path)
    with f:
        group = _amuse_set(path, f, h5py)
        set_name = str(group.name)
        attributes = group.get("attributes")
        if not isinstance(attributes, h5py.Group):
            raise InputError(f"{path}: the particle set {group.name} has no attributes group")
        arrays: dict[str, np.ndarray] = {}
        units: dict[str, str] = {}
        systems: set[str] = set()
        for name, want in _DIMENSIONS.items():
            data = attributes.get(name)
            if not isinstance(data, h5py.Dataset):
                raise InputError(f"{path}: the particle set {group.name} has no {name!r} "
                                 "(AMUSE particles need mass, x, y, z, vx, vy, vz)")
            unit = _text(data.attrs.get("units", "none"))
            factor, dims = _amuse_unit(path, name, unit)
            system = {s for s, _ in dims}
            if len(system) > 1:
                raise InputError(f"{path}: {name} mixes unit systems ({unit})")
            got = {q: p for (_, q), p in dims.items()}
            if dims and got != want:
                raise InputError(f"{path}: {name} has the unit {unit}, not a "
                                 f"{' / '.join(want)} unit")
            systems |= system
            values = np.asarray(data[()])
            if values.ndim != 1 or values.dtype.kind not in "iuf":
                raise InputError(f"{path}: {name} must be a 1-d array of numbers, got "
                                 f"shape {values.shape} of {values.dtype}")
            arrays[name] = values.astype(np.float64) * factor
            units[name] = unit
    if len(systems) > 1:
        raise InputError(f"{path}: the particles mix N-body and S.I. units "
                         f"({', '.join(f'{k}: {v}' for k, v in units.items())})")
    system = systems.pop() if systems else "none"
    if system == _SI_SYSTEM and scale != "nbody":
        raise InputError(f"{path}: the particles are in physical units (mass in "
                         f"{units['mass']}); give --ic-scale nbody to convert them to "
                         "N-body units")
    if len({arr.size for arr in arrays.values()}) != 1:
        raise InputError(f"{path}: the attributes have different lengths "
                         f"({', '.join(f'{k} {v.size}' for k, v in arrays.items())})")
    x = np.stack([arrays["x"], arrays["y"], arrays["z"]], axis=1)
    v = np.stack([arrays["vx"], arrays["vy"], arrays["vz"]], axis=1)
    return InitialConditions(x=x, v=v, m=arrays["mass"], ids=None,
                             source={"time": None, "set": set_name, "units": units,
                                     "units_system": "S.I." if system == _SI_SYSTEM
                                     else "nbody"})


def _amuse_set(path: Path, f: Any, h5py: Any) -> Any:
    """The particle set to read: the last one saved (AMUSE numbers them 0000000001, ...)
    in the ``data`` group, or in the one named set."""
    container = f.get("data")
    if not isinstance(container, h5py.Group):
        named = [k for k in f if k != "AMUSE_INF" and isinstance(f[k], h5py.Group)]
        if len(named) != 1:
            what = ", ".join(named) if named else "none"
            raise InputError(f"{path} is not an AMUSE particle file with one particle set "
                             f"(no data group; named sets: {what})")
        container = f[named[0]]
    versions = [k for k in container if k.isdigit() and isinstance(container[k], h5py.Group)]
    if not versions:
        raise InputError(f"{path}: no particle set in {container.name} (expected groups "
                         "named 0000000001, ...)")
    group = container[max(versions, key=int)]
    kind = _text(group.attrs.get("type", "particles"))
    if kind != "particles":
        raise InputError(f"{path}: {group.name} holds a {kind}, not particles")
    return group


_Unit = tuple[float, dict[tuple[str, str], float]]


def _amuse_unit(path: Path, name: str, text: str) -> _Unit:
    """AMUSE's unit reference string (``"none"``, ``"system.get('generic').base('mass')"``,
    ``"(1.98892e+30 * system.get('S.I.').base('mass'))"``, products, quotients and powers
    of these) as a factor and the powers of its base units, keyed by (system, quantity)."""
    if text == "none":
        return 1.0, {}
    try:
        return _unit(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ArithmeticError):
        raise InputError(f"{path}: {name} has a unit this reader does not know: "
                         f"{text!r}") from None


def _unit(node: ast.expr) -> _Unit:
    """The unit of an expression of :func:`_amuse_unit` (ValueError for anything else)."""
    match node:
        case ast.Constant(value=int() | float() as number) if not isinstance(number, bool):
            return float(number), {}
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            factor, dims = _unit(operand)
            if dims:
                raise ValueError("a negative unit")
            return -factor, {}
        case ast.Call(func=ast.Attribute(attr="base", value=ast.Call(
                func=ast.Attribute(attr="get", value=ast.Name(id="system")),
                args=[ast.Constant(value=str() as system)])),
                args=[ast.Constant(value=str() as quantity)]):
            return 1.0, {(system, quantity): 1.0}
        case ast.Call(func=ast.Attribute(attr="get", value=ast.Name(id="no_system")),
                      args=[ast.Constant(value="none")]):
            return 1.0, {}
        case ast.BinOp(left=left, op=ast.Mult() | ast.Div() as op, right=right):
            (f1, d1), (f2, d2) = _unit(left), _unit(right)
            sign = 1.0 if isinstance(op, ast.Mult) else -1.0
            dims = dict(d1)
            for key, power in d2.items():
                dims[key] = dims.get(key, 0.0) + sign * power
            return f1 * f2**sign, {k: p for k, p in dims.items() if p != 0.0}
        case ast.BinOp(left=base, op=ast.Pow(), right=exponent):
            (factor, dims), (power, none) = _unit(base), _unit(exponent)
            if none:
                raise ValueError("a unit as exponent")
            return factor**power, {k: p * power for k, p in dims.items()}
    raise ValueError("not a unit")


def _check_particles(path: Path, ics: InitialConditions) -> None:
    """What every format must satisfy (the text readers check most of it per line)."""
    n = ics.m.size
    if n == 0:
        raise InputError(f"{path}: no particles")
    for name, arr in (("mass", ics.m), ("position", ics.x), ("velocity", ics.v)):
        bad = np.flatnonzero(~np.isfinite(arr).reshape(n, -1).all(axis=1))
        if bad.size:
            raise InputError(f"{path}: {_particle(ics, int(bad[0]))} has a {name} that is "
                             "not finite")
    negative = np.flatnonzero(ics.m < 0.0)
    if negative.size:
        k = int(negative[0])
        raise InputError(f"{path}: {_particle(ics, k)} has the negative mass "
                         f"{float(ics.m[k])!r}")
    if not float(np.sum(ics.m)) > 0.0:
        raise InputError(f"{path}: the total mass is 0")
    if ics.ids is not None and np.unique(ics.ids).size != n:
        order = np.argsort(ics.ids, kind="stable")
        k = int(order[np.flatnonzero(ics.ids[order][1:] == ics.ids[order][:-1])[0] + 1])
        raise InputError(f"{path}: {_particle(ics, k)} repeats an earlier particle's id")


def _particle(ics: InitialConditions, k: int) -> str:
    """``particle 3 of 100 (id 2)``: the k-th particle (from 0) in words, counted from 1."""
    note = f" (id {int(ics.ids[k])})" if ics.ids is not None else ""
    return f"particle {k + 1} of {ics.m.size}{note}"
