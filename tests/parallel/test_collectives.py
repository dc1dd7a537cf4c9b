"""Collectives per block step of ParallelLibrary, counted on its communicators (mpiexec -n 4).

A block step is ``set_j_particles``, ``set_time`` and a force call. By default the
j-decomposition runs one collective per step (the gather of the partial forces, which
carries the error flags and the shapes); the 2-D grid adds the gather along the column,
neighbour lists one exchange, a row combined by slices a second collective. Partials too
large for the first exchange go as point-to-point messages beside it, not as collectives.
``SAPPORO_MPI_CHECK=1`` adds the three argument checks of today's debug mode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mpi_launch import HERE, launch, mpi_env

#: point-to-point calls (the messages of partials too large for the first exchange)
P2P = {"Isend", "Irecv", "Mprobe"}
#: collectives per block step: (default, SAPPORO_MPI_CHECK=1), by grid and kind of step
EXPECTED = {
    "j": {"ni=1": (1, 4), "ni=16": (1, 4), "ni=200": (1, 4), "started": (1, 4),
          "lists": (2, 5), "by slices": (2, 5)},
    "2d": {"ni=1": (2, 5), "ni=16": (2, 5), "ni=200": (2, 5), "started": (2, 5),
           "lists": (4, 7), "by slices": (3, 6)},
}


@pytest.fixture(scope="module", params=[False, True], ids=["default", "checked"])
def counted(request: pytest.FixtureRequest, mpiexec: str,
            tmp_path_factory: pytest.TempPathFactory) -> dict:
    check = request.param
    out = tmp_path_factory.mktemp("collectives") / "calls.json"
    env = mpi_env(SAPPORO_MPI_CHECK="1" if check else "0")
    proc = launch(mpiexec, 4, [sys.executable, str(HERE / "mpi_collectives.py"), str(out)],
                  env=env)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    data = json.loads(Path(out).read_text())
    data["check"] = check
    return data


def test_calls_per_block_step(counted: dict) -> None:
    check = counted["check"]
    assert counted["runs"]["j"]["grid"] == [1, 4]
    assert counted["runs"]["2d"]["grid"] == [2, 2]
    for dec, kinds in EXPECTED.items():
        run = counted["runs"][dec]
        assert run["check"] is check
        assert set(run["steps"]) == set(kinds)
        for kind, counts in kinds.items():
            want = counts[1] if check else counts[0]
            for _, counter, names in run["steps"][kind]:
                collectives = [q for q in names if q not in P2P]
                assert len(collectives) == want, (dec, kind, names)
                assert counter == want, (dec, kind)  # the library's counter is honest


def test_messages_only_for_large_partials(counted: dict) -> None:
    """Partials that fit in the first exchange (4 kB a rank: 39 i-particles at order 4)
    travel in it; larger ones as one message to each other rank of the row (and of the
    column), posted beside the collectives."""
    sent = {"j": {"ni=200": 3, "by slices": 3}, "2d": {"ni=200": 2, "by slices": 2}}
    for dec, kinds in sent.items():
        for kind, steps in counted["runs"][dec]["steps"].items():
            for _, _, names in steps:
                p2p = [q for q in names if q in P2P]
                n = kinds.get(kind, 0)
                assert sorted(p2p) == ["Irecv"] * n + ["Isend"] * n, (dec, kind, names)


def test_one_collective_per_j_step(counted: dict) -> None:
    """The issue's bar: by default one collective per block step of the j-decomposition,
    the gather of the partial forces along the row (after three checks in the debug
    mode)."""
    want = ["Allgather"] * (4 if counted["check"] else 1)
    for kind in ("ni=1", "ni=16", "ni=200", "started"):
        for _, _, names in counted["runs"]["j"]["steps"][kind]:
            assert [q for q in names if q not in P2P] == want, (kind, names)
