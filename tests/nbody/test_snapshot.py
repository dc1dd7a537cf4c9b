"""Snapshots (``sapporo.nbody.snapshot``): exact round trips through npz and HDF5."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sapporo import InputError
from sapporo.nbody.snapshot import FORMAT_VERSION, Snapshot, h5py_available, load, save


def make_snapshot(n: int = 17) -> Snapshot:
    rng = np.random.default_rng(1)
    vec = {k: rng.normal(size=(n, 3)) for k in ("x", "v", "a", "jerk", "snap", "crackle")}
    return Snapshot(
        time=0.3125, m=rng.uniform(size=n), ids=rng.permutation(n).astype(np.int64) + 5,
        t=np.full(n, 0.25), dt=2.0 ** -rng.integers(3, 25, n), pot=-rng.uniform(size=n),
        params={"order": 6, "eta": 0.1, "eps2": 1e-8 / 3, "criterion": "average"},
        counters={"steps": 12345678901, "block_steps": 7},
        n_active_counts=rng.integers(0, 100, n + 1), meta={"energy0": -0.2500000000000001},
        **vec,
    )


def assert_same(a: Snapshot, b: Snapshot) -> None:
    for name in ("x", "v", "a", "jerk", "snap", "crackle", "m", "t", "dt", "pot", "ids",
                 "n_active_counts"):
        got, want = getattr(a, name), getattr(b, name)
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert a.time == b.time
    assert a.params == b.params and a.counters == b.counters and a.meta == b.meta


@pytest.mark.parametrize("suffix", [".npz", ".h5"])
def test_round_trip_is_exact(tmp_path, suffix):
    if suffix == ".h5" and not h5py_available():
        pytest.skip("h5py is not installed")
    snap = make_snapshot()
    path = save(tmp_path / f"s{suffix}", snap)
    assert path.suffix == suffix and path.is_file()
    back = load(path)
    assert_same(back, snap)
    assert back.n == 17 and not back.synchronised
    assert not list(tmp_path.glob("*.tmp"))  # written atomically


def test_suffix_added_and_synchronised(tmp_path):
    snap = make_snapshot(4)
    snap.t[:] = snap.time
    path = save(tmp_path / "final", snap)
    assert path.name == "final.npz"
    assert load(path).synchronised


def test_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(InputError, match="cannot read snapshot"):
        load(junk)
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros((2, 3)))
    with pytest.raises(InputError, match="not a sapporo snapshot"):
        load(other)
    snap = make_snapshot(3)
    snap.v = snap.v[:2]
    with pytest.raises(InputError, match="v must have shape"):
        save(tmp_path / "bad.npz", snap)
    snap = make_snapshot(3)
    snap.x[1, 1] = np.nan
    with pytest.raises(InputError, match="x is not finite"):
        save(tmp_path / "nan.npz", snap)


def test_newer_format_refused(tmp_path):
    path = save(tmp_path / "s.npz", make_snapshot(3))
    with np.load(path) as f:
        data = dict(f)
    data["format_version"] = np.asarray(FORMAT_VERSION + 1)
    np.savez(path, **data)
    with pytest.raises(InputError, match="newer"):
        load(path)


def _rewrite(path, group: str, key: str | None, value) -> None:
    """Replace ``group[key]`` (JSON groups) or the whole array ``group`` in an ``.npz``."""
    with np.load(path) as f:
        data = dict(f)
    if key is None:
        data[group] = np.full_like(data[group], value)
    else:
        obj = json.loads(str(data[group]))
        obj[key] = value
        data[group] = np.asarray(json.dumps(obj))
    np.savez(path, **data)


@pytest.mark.parametrize(
    "group, key, value, match",
    [("params", "eps2", -1.0, "eps2"), ("params", "eps2", "x", "eps2"),
     ("params", "eps2", float("inf"), "eps2"), ("params", "dt_min", float("nan"), "dt_min"),
     ("params", "dt_max", 0.0, "dt_max"), ("params", "eta", True, "eta"),
     ("counters", "steps", "x", "steps"), ("counters", "block_steps", -1, "block_steps"),
     ("dt", None, 0.0, "dt"), ("dt", None, -0.25, "dt"), ("dt", None, 0.3, "dt"),
     ("t", None, np.inf, "t is not finite")],
)
def test_corrupt_values_refused(tmp_path, group, key, value, match):
    path = save(tmp_path / "s.npz", make_snapshot(5))
    _rewrite(path, group, key, value)
    with pytest.raises(InputError, match=match):
        load(path)


def test_metadata_must_be_objects(tmp_path):
    path = save(tmp_path / "s.npz", make_snapshot(3))
    with np.load(path) as f:
        data = dict(f)
    data["meta"] = np.asarray("[1, 2]")
    np.savez(path, **data)
    with pytest.raises(InputError, match="meta must be a JSON object"):
        load(path)


def _replace_array(path, name: str, value) -> None:
    with np.load(path) as f:
        data = dict(f)
    data[name] = np.asarray(value)
    np.savez(path, **data)


@pytest.mark.parametrize(
    "value, match",
    [("one", "format_version must be an integer"), (-1, "must be >= 1"), (0, "must be >= 1"),
     (1.5, "must be an integer"), ([1, 1], "must be an integer"), (True, "must be an integer")],
)
def test_bad_format_version_refused(tmp_path, value, match):
    path = save(tmp_path / "s.npz", make_snapshot(3))
    _replace_array(path, "format_version", value)
    with pytest.raises(InputError, match=match):
        load(path)


def test_integral_float_format_version_accepted(tmp_path):
    path = save(tmp_path / "s.npz", make_snapshot(3))
    _replace_array(path, "format_version", float(FORMAT_VERSION))
    assert load(path).n == 3


@pytest.mark.parametrize(
    "ids, match",
    [([0.5, 1.0, 2.0], "ids must hold integers, got 0.5"), ([0.0, np.nan, 2.0], "NaN"),
     (["a", "b", "c"], "ids must hold integers"), ([1e19, 0.0, 1.0], "beyond int64")],
)
def test_ids_must_be_integers(tmp_path, ids, match):
    path = save(tmp_path / "s.npz", make_snapshot(3))
    _replace_array(path, "ids", ids)
    with pytest.raises(InputError, match=match):
        load(path)
    snap = make_snapshot(3)
    if isinstance(ids[0], float):
        snap.ids = np.asarray(ids)  # also when built in Python
        with pytest.raises(InputError, match="ids"):
            save(tmp_path / "t.npz", snap)


def test_integral_float_ids_accepted(tmp_path):
    path = save(tmp_path / "s.npz", make_snapshot(3))
    _replace_array(path, "ids", [7.0, 8.0, 9.0])
    back = load(path)
    assert back.ids.dtype == np.int64 and back.ids.tolist() == [7, 8, 9]


@pytest.mark.parametrize("size", [3, 5, 0])
def test_n_active_counts_of_the_wrong_size_refused(tmp_path, size):
    path = save(tmp_path / "s.npz", make_snapshot(3))
    _replace_array(path, "n_active_counts", np.zeros(size, dtype=np.int64))
    with pytest.raises(InputError, match=r"n_active_counts must have shape \(4,\)"):
        load(path)


def test_n_active_counts_must_be_whole_and_non_negative(tmp_path):
    path = save(tmp_path / "s.npz", make_snapshot(3))
    _replace_array(path, "n_active_counts", [0.0, 1.5, 0.0, 0.0])
    with pytest.raises(InputError, match="n_active_counts must hold integers"):
        load(path)
    snap = make_snapshot(3)
    snap.n_active_counts = np.array([0, -1, 0, 0])
    with pytest.raises(InputError, match=">= 0"):
        save(tmp_path / "neg.npz", snap)


def test_time_as_text_refused(tmp_path):
    path = save(tmp_path / "s.npz", make_snapshot(3))
    _replace_array(path, "time", "soon")
    with pytest.raises(InputError, match="not a valid sapporo snapshot"):
        load(path)


@pytest.mark.parametrize("suffix", [".npz", ".h5"])
def test_failed_write_leaves_no_tmp_and_names_the_path(tmp_path, monkeypatch, suffix):
    """A full disk during the write: no temporary file is left, the error names the path."""
    import errno

    from sapporo.nbody import snapshot as snapshot_module

    if suffix == ".h5":
        if not h5py_available():
            pytest.skip("h5py is not installed")
        import h5py

        class FullDisk(h5py.File):
            def create_dataset(self, *args, **kwargs):
                raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(h5py, "File", FullDisk)
    else:
        def full_disk(tmp, arrays):
            tmp.write_bytes(b"PK\x03\x04 half a zip")  # what a full disk leaves
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(snapshot_module, "_write_npz", full_disk)
    target = tmp_path / f"s{suffix}"
    with pytest.raises(OSError) as info:
        save(target, make_snapshot(3))
    assert info.value.errno == errno.ENOSPC
    assert info.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []


def test_interrupted_write_leaves_no_tmp(tmp_path, monkeypatch):
    from sapporo.nbody import snapshot as snapshot_module

    def interrupted(tmp, arrays):
        tmp.write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(snapshot_module, "_write_npz", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path / "s.npz", make_snapshot(3))
    assert list(tmp_path.iterdir()) == []
