"""ParallelLibrary under ``mpiexec -n 2`` and ``-n 4`` (oversubscribed on small machines).

Each launch runs a script of this folder on every rank and has a timeout: a hang fails.
Against one process (double: within 1e-14 of the reference's error scale, neighbour data
exact) and against the float64 reference; results bitwise identical on every rank; an error
on one rank raised on every rank, which then carry on in step.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from mpi_launch import HERE, launch, mpi_env

#: against the float64 reference, relative to its error scale (as tests/core/test_library.py)
TOL_REF = {"double": 1e-12, "double-single": 1e-5}
#: against one process, double precision (the issue's bound)
TOL_ONE_DOUBLE = 1e-14


@pytest.fixture(scope="module", params=[2, 4])
def forces_run(request: pytest.FixtureRequest, mpiexec: str,
               tmp_path_factory: pytest.TempPathFactory) -> dict:
    nranks = request.param
    out = tmp_path_factory.mktemp(f"mpi{nranks}") / "forces.json"
    proc = launch(mpiexec, nranks, [sys.executable, str(HERE / "mpi_forces.py"), str(out)])
    assert proc.returncode == 0, f"mpiexec -n {nranks} failed:\n{proc.stdout}\n{proc.stderr}"
    data = json.loads(out.read_text())
    assert data["size"] == nranks
    return data


def test_grids(forces_run: dict) -> None:
    p = forces_run["size"]
    grids = {c["name"]: c["grid"] for c in forces_run["cases"]}
    assert grids["j double order 4 all"] == [1, p]
    assert grids["2d double order 4 all"] == ([2, 2] if p == 4 else [1, 2])
    assert grids[f"{p}x1 one particle"] == [p, 1]
    assert grids["auto order 2"] == [1, p]  # up to 4 ranks auto is the j-decomposition


def test_bitwise_identical_on_every_rank(forces_run: dict) -> None:
    for c in forces_run["cases"]:
        assert c["identical"], c["name"]
        # a row combined by slices (all-to-all) gives the bits of the allgather
        assert c["paths_same"], c["name"]


def test_against_one_process_and_reference(forces_run: dict) -> None:
    for c in forces_run["cases"]:
        precision = "double-single" if "double-single" in c["name"] else "double"
        for q, err in c["err_ref"].items():
            assert err < TOL_REF[precision], (c["name"], q, err)
        if precision == "double":
            for q, err in c["err_one"].items():
                assert err < TOL_ONE_DOUBLE, (c["name"], q, err)
        else:  # another order of summation of float partials, same accuracy
            for q, err in c["err_one"].items():
                assert err < 2 * TOL_REF[precision], (c["name"], q, err)


def test_neighbour_data_exact(forces_run: dict) -> None:
    cases = forces_run["cases"]
    for c in cases:
        assert c["nn_same"], c["name"]
        if "double-single" not in c["name"]:
            assert c["nn_ref"], c["name"]
        if "lists_ok" in c:
            assert c["counts_same"], c["name"]
            assert c["lists_ok"], c["name"]
    with_lists = [c for c in cases if "lists_ok" in c]
    assert len(with_lists) >= 6
    for c in cases:
        if "overflow" in c["name"]:  # counts stay exact past the capacity, flag as one process
            assert c["overflow"] == [True, True] and c["overflowing"] > 0, c
        elif "lists_ok" in c:
            assert c["overflow"] == [False, False], c


def _errors(mpiexec: str, nranks: int, mode: str, tmp: Path,
            check: bool = False) -> tuple[int, str, str]:
    """Run mpi_errors.py (with ``SAPPORO_MPI_CHECK=1`` when ``check``); its status, the
    ranks' reports (rank by rank) and stderr."""
    proc = launch(mpiexec, nranks, [sys.executable, str(HERE / "mpi_errors.py"), mode,
                                    str(tmp)], timeout=60,
                  env=mpi_env(SAPPORO_MPI_CHECK="1" if check else "0"))
    out = "".join(p.read_text() for p in sorted(tmp.glob("rank*.txt")))
    return proc.returncode, out, proc.stderr


ERROR_CASES = [
    # mode, SAPPORO_MPI_CHECK, calls that fail, error class, message pattern
    ("open", False, ["open", "options"], "InputError",
     {"open": r"rank 1 of \d: devices: 99 is not a device index",
      "options": r"ranks passed different arguments \(rank 1 differs"}),
    ("nan", False, ["compute"], "InputError", r"rank 1 of \d: x: non-finite value in row 3"),
    ("nan2d", False, ["compute"], "InputError", r"rank 1 of \d: x: non-finite value in row 3"),
    # raised at once by every rank: this layer's own checks of the arguments; what each
    # rank's own library finds travels with the gather, and is raised on every rank alike
    ("jnan", False, ["set_j"], "InputError",
     r"InputError: mass: non-finite value at position 5 \(address 5\)"),
    ("shape", False, ["set_j", "compute"], "InputError",
     {"set_j": r"InputError: x: expected 64 rows \(as x\), got 63$",
      "compute": r"on every rank: v: expected 64 rows"}),
    ("ragged", False, ["set_j", "compute"], "InputError",
     {"set_j": r"InputError: address: expected an array, got list",
      "compute": r"InputError: x: expected an array, got list"}),
    ("ragged", True, ["set_j", "compute"], "InputError",
     {"set_j": r"on every rank: address: expected an array, got list",
      "compute": r"on every rank: x: expected an array, got list"}),
    ("lost", False, ["compute"], "BackendError", r"rank 1 of \d: device lost \(simulated\)"),
    ("lost2d", False, ["compute"], "BackendError", r"rank 1 of \d: device lost \(simulated\)"),
    ("lostmsg2d", False, ["compute"], "BackendError",
     r"rank 1 of \d: device lost \(simulated\)"),
    ("lostscatter", False, ["compute"], "BackendError",
     r"rank 1 of \d: device lost \(simulated\)"),
    # a failure in a call of no collective: held, raised by the next force call everywhere
    ("jlost", False, ["compute"], "BackendError",
     r"rank 1 of \d: set_j_particles: device lost \(simulated\)$"),
    ("tlost", False, ["compute"], "BackendError",
     r"rank 1 of \d: set_time: device lost \(simulated\)$"),
    ("overflow", False, ["compute"], "NonFiniteError",
     r"^CAUGHT rank \d compute NonFiniteError: non-finite force on i-particle 0 \(id 5\)"),
    ("checkdiffer", False, ["open"], "ConfigError",
     r"SAPPORO_MPI_CHECK differs between the ranks \(on: ranks 1\)"),
    # the debug mode: every call checks at once, different arguments are found
    ("mismatch", True, ["compute", "set_time"], "InputError",
     r"ranks passed different arguments \(rank 1 differs"),
    ("jlost", True, ["set_j"], "BackendError", r"rank 1 of \d: device lost \(simulated\)$"),
    ("tlost", True, ["set_time"], "BackendError", r"rank 1 of \d: device lost \(simulated\)$"),
    ("nan", True, ["compute"], "InputError", r"rank 1 of \d: x: non-finite value in row 3"),
    ("shape", True, ["set_j", "compute"], "InputError", r"on every rank: (x|v): expected 64 rows"),
    ("lost2d", True, ["compute"], "BackendError", r"rank 1 of \d: device lost \(simulated\)"),
]


#: every case on 4 ranks, three of them on 2 too
ERROR_RUNS = [(4, *c) for c in ERROR_CASES] + [(2, *c) for c in ERROR_CASES
                                              if c[0] in ("open", "nan", "lostscatter")
                                              and not c[1]]


@pytest.mark.parametrize("nranks,mode,check,calls,cls,pattern", ERROR_RUNS,
                         ids=[f"{r[1]}-{r[3][0]}-{r[0]}{'-checked' if r[2] else ''}"
                              for r in ERROR_RUNS])
def test_error_on_one_rank_raises_everywhere(mpiexec: str, nranks: int, mode: str,
                                             check: bool, calls: list[str], cls: str,
                                             pattern: str | dict[str, str],
                                             tmp_path: Path) -> None:
    rc, out, err = _errors(mpiexec, nranks, mode, tmp_path, check)
    assert rc == 0, f"{out}\n{err}"
    for rank in range(nranks):
        for call in calls:
            lines = [ln for ln in out.splitlines() if ln.startswith(f"CAUGHT rank {rank} {call} ")]
            assert len(lines) == 1, (rank, call, out)
            assert f" {cls}: " in lines[0], lines[0]
            want = pattern[call] if isinstance(pattern, dict) else pattern
            assert re.search(want, lines[0]), lines[0]
    # every rank carried on in step: the same good result everywhere afterwards
    ok = re.findall(r"^OK rank (\d+) (\S+)$", out, flags=re.M)
    assert sorted(int(r) for r, _ in ok) == list(range(nranks)), out
    assert len({v for _, v in ok}) == 1, ok
    # the calls not listed raise nothing, on any rank
    others = re.findall(r"^CAUGHT rank \d+ (\S+)", out, flags=re.M)
    assert set(others) <= set(calls), out


def test_uncaught_error_ends_every_rank(mpiexec: str, tmp_path: Path) -> None:
    """An error left uncaught ends the run on every rank. Each rank notes the error where it
    is raised; the launcher may end the others as soon as one rank exits, so not every rank
    always gets to note it (nor to print its traceback), but none goes on, and those that
    note it note the same error, naming rank 1."""
    rc, out, err = _errors(mpiexec, 4, "uncaught", tmp_path)
    assert rc != 0
    assert "UNREACHED" not in out
    raised = re.findall(r"^RAISED rank \d: (.*)$", out, flags=re.M)
    assert raised and len(set(raised)) == 1, out
    assert raised[0].startswith("InputError: rank 1 of 4: x: non-finite value in row 0")
    assert "sapporo.errors.InputError: rank 1 of 4: x: non-finite value in row 0" in err


def test_unreported_failure_is_logged(mpiexec: str, tmp_path: Path) -> None:
    """A failure held for the next force call, when none comes: the rank warns on close."""
    rc, out, err = _errors(mpiexec, 2, "unreported", tmp_path)
    assert rc == 0, f"{out}\n{err}"
    assert sorted(re.findall(r"^CLOSED rank (\d)", out, flags=re.M)) == ["0", "1"], out
    assert err.count("set_j_particles failed and no force call came after it") == 1, err
    assert "rank 1: set_j_particles failed" in err and "device lost (simulated)" in err, err


def test_no_mpi_needed_to_import() -> None:
    """sapporo.parallel.library imports without mpi4py and reads the launcher's variables."""
    import os
    import subprocess

    code = ("import sys, sapporo.parallel.library as p; assert 'mpi4py' not in sys.modules; "
            "print(p.launcher_size(), p.launcher_local_rank(), p.under_mpi())")
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_SIZE", "MPI_LOCALRANKID")}
    env.update(OMPI_COMM_WORLD_SIZE="6", OMPI_COMM_WORLD_LOCAL_RANK="2")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=Path(__file__).parent, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["6", "2", "True"]


def test_grid_rules() -> None:
    from sapporo.parallel import auto_rows, square_rows

    assert [square_rows(p) for p in (1, 2, 4, 6, 8, 12, 16, 64, 7)] == [1, 1, 2, 2, 2, 3, 4, 8, 1]
    assert auto_rows(2) == 1 and auto_rows(4) == 1 and auto_rows(8) == 2
    assert auto_rows(16) == 4 and auto_rows(7) == 1


def _pocl_cpu() -> bool:
    from sapporo.backend import get_backend
    from sapporo.errors import BackendError

    try:
        return any(d.name.startswith("pthread") for d in get_backend("opencl").devices())
    except BackendError:
        return False


@pytest.mark.parametrize("pinned", [False, True])
def test_device_per_rank(mpiexec: str, tmp_path: Path, pinned: bool) -> None:
    """Two PoCL CPU devices: ranks take devices by their rank on the node (0, 1, 0), unless
    SAPPORO_DEVICES names one for all."""
    if not _pocl_cpu():
        pytest.skip("not PoCL's CPU driver: POCL_DEVICES cannot make two devices")
    from mpi_launch import mpi_env

    env = mpi_env(POCL_DEVICES="pthread pthread", SAPPORO_BACKEND="opencl")
    if pinned:
        env["SAPPORO_DEVICES"] = "1"
    proc = launch(mpiexec, 3, [sys.executable, str(HERE / "mpi_devices.py")], cwd=tmp_path,
                  env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {int(m[0]): (int(m[1]), int(m[2]), m[3])
           for m in re.findall(r"RANK (\d+) node (\d+) device (\d+) launcher (\d+|None)",
                               proc.stdout)}
    assert sorted(got) == [0, 1, 2], proc.stdout
    for rank, (node, device, launcher) in got.items():
        assert node == rank  # one node
        assert device == (1 if pinned else rank % 2)
        assert launcher == str(rank % 2)  # what the C API's open would take
