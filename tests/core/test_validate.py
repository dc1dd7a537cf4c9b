"""Argument checks shared by the library, the integrator and the reference: every bad value
is an InputError that names the argument and reports the value as given."""

from __future__ import annotations

import numpy as np
import pytest

import sapporo
from sapporo import reference as ref
from sapporo.core import validate
from sapporo.errors import InputError


@pytest.mark.parametrize("bad", [[[0.0, 0, 0], [1.0, 2.0]], [[0, 0, 0], "abc"], [1 + 2j, 0, 0],
                                 [[True, False, True]], None, object()])
def test_vec3_refuses_ragged_complex_text_and_objects(bad) -> None:
    with pytest.raises(InputError, match="^x:"):
        validate.vec3("x", bad, None)


def test_vec3_coordinate_limit() -> None:
    ok = validate.vec3("x", [[1e149, 0, 0]], 1, limit=validate.COORD_LIMIT)
    assert ok.shape == (1, 3)
    for n in (1, 100):  # the small (Python) and large (numpy) paths
        arr = np.zeros((n, 3))
        arr[n - 1, 2] = -1e300
        with pytest.raises(InputError, match=rf"^x: value in row {n - 1} too large.*overflow"):
            validate.vec3("x", arr, n, limit=validate.COORD_LIMIT)


def test_ints_report_huge_values_as_given() -> None:
    with pytest.raises(InputError, match=r"^address: value 100000000000000000000 outside"):
        validate.ints("address", [1e20], None, 0, 2**31 - 2)
    big = np.array([5, 2**63 + 5], dtype=np.uint64)
    with pytest.raises(InputError, match=r"^address: value 9223372036854775813 outside"):
        validate.ints("address", big, None, 0, 2**31 - 2)
    many = np.arange(100, dtype=np.uint64)
    many[70] = 2**64 - 1
    with pytest.raises(InputError, match=r"value 18446744073709551615 outside"):
        validate.ints("address", many, None, 0, 2**31 - 2)
    with pytest.raises(InputError, match=r"^ids: expected integers, got 0.5"):
        validate.ints("ids", [0.5], 1, 0, 10)
    with pytest.raises(InputError, match="^ids: expected integers"):
        validate.ints("ids", [[0, 1], [2]], None, 0, 10)
    assert validate.ints("ids", np.array([3.0, 4.0]), 2, 0, 10).tolist() == [3, 4]


@pytest.mark.parametrize("bad", ["1e-4", True, np.bool_(False), 1j, 10**400, np.array("1.0"),
                                 [1e-4], np.array([1e-4]), None, float("nan")])
def test_scalar_refuses_text_bools_huge_and_non_finite(bad) -> None:
    with pytest.raises(InputError, match="^eps2:"):
        validate.scalar("eps2", bad)


def test_scalar_accepts_numbers() -> None:
    assert validate.scalar("eps2", 1) == 1.0
    assert validate.scalar("eps2", np.float32(0.5)) == 0.5
    assert validate.scalar("eps2", np.array(2.0)) == 2.0
    assert validate.positive("eta", 0.1) == 0.1
    with pytest.raises(InputError, match="^eta: must be > 0"):
        validate.positive("eta", 0.0)


def test_int_arg() -> None:
    assert validate.int_arg("nj", 4.0, 0, 10) == 4
    for bad in (True, "3", 2.5, float("inf"), 11):
        with pytest.raises(InputError, match="^nj:"):
            validate.int_arg("nj", bad, 0, 10)


# ------------------------------------------------------------------ through the Library


@pytest.fixture
def make_lib(backend):
    opened: list[sapporo.Library] = []

    def get(order: int, precision: str) -> sapporo.Library:
        lib = sapporo.Library(order=order, precision=precision, backend=backend)
        opened.append(lib)
        return lib

    yield get
    for lib in opened:
        lib.close()


def test_strided_views_are_taken(make_lib) -> None:
    """Columns and every k-th row of larger arrays (views that are not contiguous) are
    valid input: the same forces as contiguous copies of them."""
    lib = make_lib(4, "double")
    n = 300
    x, v, m = ref.plummer(n, seed=4)
    ids = np.arange(n)
    state = np.zeros((n, 7))
    state[:, 0], state[:, 1:4], state[:, 4:] = m, x, v
    lib.set_j_particles(ids[::-1], ids[::-1], 0.0, state[::-1, 0], state[::-1, 1:4],
                        state[::-1, 4:])
    f = lib.compute(state[::7, 1:4], state[::7, 4:], ids[::7], 1e-4)
    r = ref.forces(x[::7], v[::7], ids[::7], x, v, m, ids, 1e-4, order=4)
    assert ref.relative_vector_error(f.acc, r.acc, r.acc_abs).max() <= 1e-12
    np.testing.assert_array_equal(f.nn_index, r.nn_index)


def test_library_arguments(make_lib) -> None:
    lib = make_lib(4, "double")
    x = np.zeros((2, 3))
    cases = [
        ("index", dict(index=[[0], [1, 2]])),
        ("eps2", dict(eps2="1e-4")),
        ("eps2", dict(eps2=True)),
        ("eps2", dict(eps2=10**400)),
        ("x", dict(x=[[1e300, 0, 0], [0, 0, 0]])),
    ]
    for name, over in cases:
        kw = dict(x=x, v=x, index=[0, 1], eps2=0.0)
        kw.update(over)
        with pytest.raises(InputError, match=f"^{name}:"):
            lib.compute(**kw)
    with pytest.raises(InputError, match=r"^address: value 100000000000000000000 outside"):
        lib.set_j_particles([1e20], [0], 0.0, 1.0, [[0.0, 0, 0]], [[0.0, 0, 0]])


def test_library_constructor_arguments(backend) -> None:
    for kw, name in ((dict(order=4.5), "order"), (dict(order=True), "order"),
                     (dict(precision=None), "precision"), (dict(precision=2), "precision")):
        with pytest.raises(InputError, match=name):
            sapporo.Library(backend=backend, **kw)


def test_denormal_masses_are_refused_in_double_single(make_lib) -> None:
    lib = make_lib(4, "double-single")
    with pytest.raises(InputError, match="^mass: .*below single precision's normal range"):
        lib.set_j_particles([0, 1], [0, 1], 0.0, [1.0, 1e-39], np.zeros((2, 3)),
                            np.zeros((2, 3)))
    lib.set_j_particles([0, 1], [0, 1], 0.0, [1.0, 0.0], np.zeros((2, 3)), np.zeros((2, 3)))
    dbl = make_lib(4, "double")  # double has the range
    dbl.set_j_particles([0], [0], 0.0, [1e-39], np.zeros((1, 3)), np.zeros((1, 3)))
