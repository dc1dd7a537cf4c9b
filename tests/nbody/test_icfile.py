"""Initial conditions from files (``sapporo.nbody.icfile``): every format, every refusal."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from sapporo import InputError
from sapporo.nbody import icfile
from sapporo.nbody.ic import kinetic_energy, plummer, potential_energy
from sapporo.nbody.snapshot import Snapshot, save

N = 24


def cluster(n: int = N, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A Plummer sphere with unequal masses (any mix-up of columns shows)."""
    x, v, _ = plummer(n, seed=seed)
    m = np.random.default_rng(seed).uniform(0.5, 1.5, n) / n
    return x, v, m


def row(*values: float) -> str:
    return " ".join(repr(float(value)) for value in values)


def write_columns(path, x, v, m, ids=None, sep=" ") -> None:
    lines = ["# m x y z vx vy vz" if ids is None else "# id m x y z vx vy vz"]
    for k in range(m.size):
        values = [repr(float(c)) for c in (m[k], *x[k], *v[k])]
        if ids is not None:
            values.insert(0, str(ids[k]))
        lines.append(sep.join(values))
    path.write_text("\n".join(lines) + "\n")


def write_banana(path, x, v, m, split: bool = True) -> None:
    """Phantom-GRAPE's layout: time, N, then per particle 1 / m / x y z / vx vy vz."""
    lines = ["0.0", str(m.size)]
    for k in range(m.size):
        if split:
            lines += ["1", repr(float(m[k])), row(*x[k]), row(*v[k])]
        else:
            lines.append("1 " + row(m[k], *x[k], *v[k]))
    path.write_text("\n".join(lines) + "\n")


def write_phigrape(path, x, v, m, time: float = 0.0) -> None:
    """phiGRAPE's layout: step, N, time, then ``index m x y z vx vy vz`` (index from 0,
    written I10.10 by phiGRAPE itself)."""
    lines = ["0", str(m.size), repr(time)]
    lines += [f"{k:010d} " + row(m[k], *x[k], *v[k]) for k in range(m.size)]
    path.write_text("\n".join(lines) + "\n")


def assert_particles(ics, x, v, m) -> None:
    np.testing.assert_array_equal(ics.x, x)
    np.testing.assert_array_equal(ics.v, v)
    np.testing.assert_array_equal(ics.m, m)


# ---------------------------------------------------------------------------- formats


@pytest.mark.parametrize("with_ids, sep", [(False, " "), (True, " "), (True, ", "),
                                           (False, "\t")])
def test_columns_read_exactly(tmp_path, with_ids, sep):
    x, v, m = cluster()
    ids = np.arange(N) * 3 + 7 if with_ids else None
    path = tmp_path / "ics.txt"
    write_columns(path, x, v, m, ids, sep)
    ics = icfile.read(path)
    assert_particles(ics, x, v, m)
    assert ics.source["format"] == "columns" and ics.source["n"] == N
    if with_ids:
        np.testing.assert_array_equal(ics.ids, ids)
        assert ics.source["columns"] == ["id", "m", "x", "y", "z", "vx", "vy", "vz"]
    else:
        assert ics.ids is None and ics.source["columns"][0] == "m"
    assert ics.source["file"] == os.path.abspath(path) and ics.source["time"] is None


def test_windows_line_ends_and_byte_order_mark(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf0.5,1,0,0,0,0.5,0\r\n0.5,-1,0,0,0,-0.5,0\r\n")
    ics = icfile.read(path)
    np.testing.assert_array_equal(ics.x[:, 0], [1.0, -1.0])


def test_named_columns_any_order_with_skipped_ones(tmp_path):
    x, v, m = cluster()
    path = tmp_path / "ics.dat"
    lines = [row(-1.0, *v[k], m[k], *x[k], 99.0) + "   # trailing comment" for k in range(N)]
    path.write_text("\n\n".join(lines))  # blank lines between, no newline at the end
    ics = icfile.read(path, columns="skip,vx,vy,vz,m,x,y,z,skip")
    assert_particles(ics, x, v, m)
    assert ics.ids is None


@pytest.mark.parametrize("split", [True, False])
def test_banana(tmp_path, split):
    x, v, m = cluster()
    path = tmp_path / "pl024.init"
    write_banana(path, x, v, m, split)
    for fmt in ("auto", "banana"):
        ics = icfile.read(path, format=fmt)
        assert_particles(ics, x, v, m)
        assert ics.ids is None  # banana numbers them 0 .. N-1; its first value is ignored
        assert ics.source["format"] == "banana" and ics.source["time"] == 0.0


def test_phigrape(tmp_path):
    x, v, m = cluster()
    path = tmp_path / "data.inp"
    write_phigrape(path, x, v, m, time=2.5)
    ics = icfile.read(path)
    assert_particles(ics, x, v, m)
    np.testing.assert_array_equal(ics.ids, np.arange(N))
    assert ics.source["format"] == "phigrape" and ics.source["time"] == 2.5


def test_phigrape_output_file(tmp_path):
    """phiGRAPE's own output (I10 header, 1P E15.6 fields) reads as input."""
    text = ("         0\n         2\n   1.000000E+00\n"
            "0000000000   5.000000E-01   1.000000E+00  0.000000E+00  0.000000E+00  "
            "0.000000E+00  5.000000E-01  0.000000E+00\n"
            "0000000001   5.000000E-01  -1.000000E+00  0.000000E+00  0.000000E+00  "
            "0.000000E+00 -5.000000E-01  0.000000E+00\n")
    path = tmp_path / "00001.dat"
    path.write_text(text)
    ics = icfile.read(path)
    assert ics.source["format"] == "phigrape" and ics.source["time"] == 1.0
    np.testing.assert_array_equal(ics.x[:, 0], [1.0, -1.0])
    np.testing.assert_array_equal(ics.v[:, 1], [0.5, -0.5])


def make_snapshot(x, v, m, time: float = 0.5, synchronised: bool = True) -> Snapshot:
    n = m.size
    zeros = np.zeros((n, 3))
    t = np.full(n, time)
    if not synchronised:
        t[0] = time - 0.125
    return Snapshot(time=time, x=x, v=v, m=m, ids=np.arange(n, dtype=np.int64)[::-1] + 10,
                    t=t, dt=np.full(n, 0.125), a=zeros, jerk=zeros, snap=zeros,
                    crackle=zeros, pot=np.zeros(n), params={"order": 4})


def test_snapshot_npz(tmp_path):
    x, v, m = cluster()
    path = save(tmp_path / "snap.npz", make_snapshot(x, v, m))
    ics = icfile.read(path)
    assert_particles(ics, x, v, m)
    np.testing.assert_array_equal(ics.ids, np.arange(N)[::-1] + 10)
    assert ics.source["format"] == "snapshot" and ics.source["time"] == 0.5


def test_unsynchronised_snapshot_is_refused(tmp_path):
    x, v, m = cluster()
    path = save(tmp_path / "cut.npz", make_snapshot(x, v, m, synchronised=False))
    with pytest.raises(InputError, match="not synchronised.*--resume"):
        icfile.read(path)


def test_scale_nbody_keeps_the_virial_ratio(tmp_path):
    x, v, m = cluster()
    x, v, m = 3.0 * x + 5.0, 0.4 * v + 1.0, 7.0 * m  # other units, a moving centre
    q = kinetic_energy(v - m @ v / m.sum(), m) / -potential_energy(x, m)
    path = tmp_path / "ics.txt"
    write_columns(path, x, v, m)
    ics = icfile.read(path, scale="nbody")
    k, w = kinetic_energy(ics.v, ics.m), potential_energy(ics.x, ics.m)
    assert ics.m.sum() == pytest.approx(1.0, rel=1e-14)
    assert k + w == pytest.approx(-0.25, rel=1e-12)
    assert k / -w == pytest.approx(q, rel=1e-12)
    np.testing.assert_allclose(ics.m @ ics.x, 0.0, atol=1e-14)
    np.testing.assert_allclose(ics.m @ ics.v, 0.0, atol=1e-14)
    assert ics.source["scale"] == "nbody"


def test_scale_nbody_refuses_an_unbound_system(tmp_path):
    path = tmp_path / "ics.txt"
    path.write_text("0.5 1 0 0 0 5 0\n0.5 -1 0 0 0 -5 0\n")
    with pytest.raises(InputError, match="not bound"):
        icfile.read(path, scale="nbody")


# ---------------------------------------------------------------------------- refusals

GOOD = "0.5 1 0 0 0 0.5 0\n"


@pytest.mark.parametrize(
    "text, columns, words",
    [
        (GOOD + "0.5 -1 0 0 0 -0.5\n", None, "line 2: 6 values, expected 7"),
        (GOOD + "0.5 -1 0 0 0 nan 0\n", None, "line 2: vy is nan"),
        (GOOD + "0.5 -1 0 0 0 inf 0\n", None, "line 2: vy is inf"),
        (GOOD + "-0.5 -1 0 0 0 0 0\n", None, "line 2: the mass -0.5 is negative"),
        (GOOD + "0.5 -1 0 0 0 x 0\n", None, "line 2: vy 'x' is not a number"),
        ("# only a comment\n\n", None, "no particles"),
        ("0 0.5 1 0 0 0 0 0\n1 0.5 2 0 0 0 0 0\n0 0.5 3 0 0 0 0 0\n", None,
         "line 3: id 0 repeats the id of line 1"),
        ("-1.0000 0.5 1 0 0 0 0 0\n", None, "line 1: id -1 is out of range"),
        ("2.5 0.5 1 0 0 0 0 0\n", None, "line 1: id '2.5' is not an integer"),
        ("0.5 1 0 0 0 0.5\n", None, "line 1: 6 values; a particle line has 7"),
        ("0.5, 1, 0,, 0, 0.5, 0\n", None, "line 1: an empty field"),
        ("m,x,y,z,vx,vy,vz\n" + GOOD, None, "line 1: mass 'm' is not a number (a header "
         "line must start with #)"),
        (GOOD, ("id", *icfile._REQUIRED), "line 1: 7 values, expected 8"),
        ("0.0\n2\n1 0.5 1 0 0 0 0.5 0\n1 0.5 -1 0 0 0 -0.5\n", None,
         "line 4: particle 2 has only 7 values of 8"),
        ("0.0\n2\n1 0.5 1 0 0 0 0.5\n1 0.5 -1 0 0 0 -0.5 0\n", None,
         "line 3: particle 1 has 7 values before line 4, expected 8"),
        ("0.0\n0\n", None, "line 2: no particles (N = 0)"),
        ("0.0\n3\n1 0.5 1 0 0 0 0.5 0\n1 0.5 -1 0 0 0 -0.5 0\n", None,
         "line 4: the file ends after 2 particles; line 2 announces N = 3"),
        ("0.0\n1\n1 0.5 1 0 0 0 0.5 0\n1 0.5 -1 0 0 0 -0.5 0\n", None,
         "line 4: more data after the 1 particles"),
        ("0\n2\n0.0\n0 0.5 1 0 0 0 0.5 0\n1 0.5 -1 0 0 0 -0.5\n", None,
         "line 5: particle 2 has only 7 values of 8 (id m x y z vx vy vz)"),
        ("0\n2\n0.0\n0 0.5 1 0 0 0 0.5 0\n0 -0.5 -1 0 0 0 -0.5 0\n", None,
         "line 5: the mass -0.5 is negative"),
        ("0\n2\n0.0\n0 0.5 1 0 0 0 0.5 0\n0 0.5 -1 0 0 0 -0.5 0\n", None,
         "line 5: id 0 repeats the id of line 4"),
        ("0\n2.0\n0.0\n0 0.5 1 0 0 0 0.5 0\n1 0.5 -1 0 0 0 -0.5 0\n", None,
         "line 2: the particle count N '2.0' is not an integer"),
    ],
)
def test_bad_text_is_one_line_naming_file_and_line(tmp_path, text, columns, words):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        icfile.read(path, columns=columns)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert words in message, message


def test_unreadable_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        icfile.read(tmp_path / "missing.txt")
    with pytest.raises(InputError, match="is a directory"):
        icfile.read(tmp_path)
    binary = tmp_path / "noise.dat"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(InputError, match=r"line 1: not text"):
        icfile.read(binary)
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.txt"
        locked.write_text(GOOD)
        locked.chmod(0)
        with pytest.raises(InputError, match="cannot read it"):
            icfile.read(locked)


def test_snapshot_with_negative_mass_names_the_particle(tmp_path):
    x, v, m = cluster()
    m[5] = -1.0
    path = save(tmp_path / "bad.npz", make_snapshot(x, v, m))
    with pytest.raises(InputError, match=r"particle 6 of 24 \(id 28\) has the negative mass"):
        icfile.read(path)


@pytest.mark.parametrize("text, words", [
    ("id,m,x", "z, vx, vy, vz missing"), ("m,x,y,z,vx,vy,vz,m", "m is named twice"),
    ("mass,x,y,z,vx,vy,vz", "unknown column 'mass'")])
def test_bad_column_lists(text, words):
    with pytest.raises(InputError, match=words):
        icfile.parse_columns(text)


def test_hdf5_without_h5py_is_a_clear_message(tmp_path, monkeypatch):
    path = tmp_path / "set.h5"
    path.write_bytes(icfile._HDF5_MAGIC + bytes(100))
    monkeypatch.setitem(sys.modules, "h5py", None)  # import h5py fails
    with pytest.raises(InputError, match=r"is an HDF5 file; reading it needs h5py"):
        icfile.read(path)


# ---------------------------------------------------------------------------- AMUSE

NBODY = "system.get('generic').base('{}')"
NBODY_SPEED = ("(system.get('generic').base('length') * "
               "(system.get('generic').base('time')**-1))")
MSUN = "(1.98892e+30 * system.get('S.I.').base('mass'))"
PARSEC = "(3.0856775814913674e+16 * system.get('S.I.').base('length'))"
KMS = ("((1000.0 * system.get('S.I.').base('length')) * "
       "(system.get('S.I.').base('time')**-1))")


def write_amuse(path, x, v, m, units: dict[str, str], versions: int = 1,
                named: str | None = None) -> None:
    """A particle set as AMUSE's store (version 2) writes it: ``data/0000000001/`` with
    ``keys`` and ``attributes/<name>`` datasets, each with a ``units`` attribute."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        f.create_group("AMUSE_INF").attrs["version"] = "2.0"
        container = f.create_group(named or "data")
        for version in range(1, versions + 1):
            group = container.create_group(format(version, "010d"))
            group.attrs["type"] = "particles"
            group.attrs["number_of_particles"] = m.size
            rng = np.random.default_rng(version)
            group.create_dataset("keys", data=rng.integers(1, 2**63, m.size, dtype=np.uint64))
            attributes = group.create_group("attributes")
            scale = float(version)  # later versions differ: the last one must be read
            values = {"mass": m, "x": x[:, 0] * scale, "y": x[:, 1], "z": x[:, 2],
                      "vx": v[:, 0], "vy": v[:, 1], "vz": v[:, 2], "radius": m * 0.0}
            for name, data in values.items():
                dataset = attributes.create_dataset(name, data=data)
                dataset.attrs["units"] = units.get(name, "none")


def nbody_units() -> dict[str, str]:
    units = {"mass": NBODY.format("mass")}
    units.update({c: NBODY.format("length") for c in "xyz"})
    units.update({f"v{c}": NBODY_SPEED for c in "xyz"})
    return units


def test_amuse_nbody_units(tmp_path):
    x, v, m = cluster()
    path = tmp_path / "cluster.hdf5"
    write_amuse(path, x, v, m, nbody_units(), versions=2)
    ics = icfile.read(path)
    x_last = x.copy()
    x_last[:, 0] *= 2.0
    assert_particles(ics, x_last, v, m)
    assert ics.ids is None  # AMUSE keys are 64-bit; particles are numbered in file order
    assert ics.source["format"] == "amuse" and ics.source["set"] == "/data/0000000002"
    assert ics.source["units"]["vx"] == NBODY_SPEED


def test_amuse_named_set(tmp_path):
    x, v, m = cluster()
    path = tmp_path / "named.h5"
    write_amuse(path, x, v, m, nbody_units(), named="stars")
    assert_particles(icfile.read(path, format="amuse"), x, v, m)


def test_amuse_si_units_need_scaling_and_convert_exactly(tmp_path):
    x, v, m = cluster()
    m = m * 1e4  # 10^4 solar masses within a parsec or so, at about 1 km/s: bound
    units = {"mass": MSUN, **{c: PARSEC for c in "xyz"}, **{f"v{c}": KMS for c in "xyz"}}
    path = tmp_path / "si.h5"
    write_amuse(path, x, v, m, units)
    with pytest.raises(InputError, match="physical units.*--ic-scale nbody"):
        icfile.read(path)
    ics = icfile.read(path, scale="nbody")
    # The same particles in S.I. units, converted with G by hand.
    ms, xs, vs = m * 1.98892e30, x * 3.0856775814913674e16, v * 1000.0
    energy = kinetic_energy(vs - ms @ vs / ms.sum(), ms) + icfile.G_SI * potential_energy(xs, ms)
    length = icfile.G_SI * ms.sum() ** 2 / (-4.0 * energy)
    xc = xs - ms @ xs / ms.sum()
    np.testing.assert_allclose(ics.x, xc / length, rtol=1e-10, atol=1e-13)
    assert kinetic_energy(ics.v, ics.m) + potential_energy(ics.x, ics.m) == pytest.approx(
        -0.25, rel=1e-12)


@pytest.mark.parametrize("change, words", [
    ({"x": NBODY.format("mass")}, "x has the unit"),
    ({"x": PARSEC}, "mix N-body and S.I. units"),
    ({"mass": "units.MSun"}, "unit this reader does not know"),
])
def test_amuse_bad_units(tmp_path, change, words):
    x, v, m = cluster()
    path = tmp_path / "bad.h5"
    write_amuse(path, x, v, m, {**nbody_units(), **change})
    with pytest.raises(InputError, match=words):
        icfile.read(path, scale="nbody")


def test_amuse_missing_attribute(tmp_path):
    h5py = pytest.importorskip("h5py")
    x, v, m = cluster()
    path = tmp_path / "novz.h5"
    write_amuse(path, x, v, m, nbody_units())
    with h5py.File(path, "a") as f:
        del f["data/0000000001/attributes/vz"]
    with pytest.raises(InputError, match="has no 'vz'"):
        icfile.read(path)


def test_amuse_unit_strings():
    assert icfile._amuse_unit("f", "mass", MSUN) == (1.98892e30, {("S.I.", "mass"): 1.0})
    factor, dims = icfile._amuse_unit("f", "vx", KMS)
    assert factor == 1000.0 and dims == {("S.I.", "length"): 1.0, ("S.I.", "time"): -1.0}
    assert icfile._amuse_unit("f", "m", "none") == (1.0, {})
    factor, dims = icfile._amuse_unit(
        "f", "a", "(system.get('generic').base('length')/(system.get('generic').base('time')"
        "**2))")
    assert factor == 1.0 and dims == {("generic", "length"): 1.0, ("generic", "time"): -2.0}
