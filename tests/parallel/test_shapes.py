"""Ranks that make a force call with different shapes (issue 42, item 4): every rank raises
the same InputError, naming the ranks and their values, and no rank waits, with
``SAPPORO_MPI_CHECK`` off. The shapes travel in the step's first exchange, whose size is
fixed when the library opens; before, 7 against 8 i-particles hung on 2 ranks and aborted
the job ("Message truncated") on 3.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from mpi_launch import HERE, launch, mpi_env

#: seconds the failing call may take on a rank (the issue's bar)
CALL_SECONDS = 10
#: seconds a whole launch may take (start-up included) before it counts as a hang
LAUNCH_SECONDS = 60

NI = "passed different numbers of i-particles"
NI_RULE = "(every rank passes the same i-particles)"
#: on 4 ranks, case -> the message after "ParallelLibrary.compute: the ranks "
ALL_CASES = {
    "ni": f"{NI}: ranks 0, 2, 3: 8; rank 1: 7 {NI_RULE}",
    "half": f"{NI}: ranks 0, 1: 8; ranks 2, 3: 7 {NI_RULE}",
    "large": f"{NI}: ranks 0, 2, 3: 300; rank 1: 8 {NI_RULE}",
    "large2": f"{NI}: ranks 0, 2, 3: 300; rank 1: 301 {NI_RULE}",
    "largehalf": f"{NI}: ranks 0, 1: 300; ranks 2, 3: 301 {NI_RULE}",
    "lists": "asked for neighbour lists differently: ranks 0, 2, 3: no h2; rank 1: h2 "
             "(every rank passes h2, or none does)",
    "scatter": "set different scatter_min_bytes: ranks 0, 2, 3: 131072; rank 1: 0 "
               "(set it alike on every rank)",
}


def _run(mpiexec: str, nranks: int, mode: str, dec: str, tmp: Path) -> str:
    """mpi_shapes.py on ``nranks`` ranks, checks off; the ranks' reports, rank by rank."""
    proc = launch(mpiexec, nranks, [sys.executable, str(HERE / "mpi_shapes.py"), mode,
                                    str(tmp), dec],
                  timeout=LAUNCH_SECONDS, env=mpi_env(SAPPORO_MPI_CHECK="0"))
    out = "".join(p.read_text() for p in sorted(tmp.glob("rank*.txt")))
    assert proc.returncode == 0, f"{out}\n{proc.stdout}\n{proc.stderr}"
    return out


def _check(out: str, nranks: int, cases: dict[str, str]) -> None:
    for rank in range(nranks):
        for case, message in cases.items():
            got = re.findall(rf"^CAUGHT rank {rank} {case} (\S+) (.*)$", out, flags=re.M)
            assert len(got) == 1, (rank, case, out)
            seconds, text = float(got[0][0]), got[0][1]
            assert text == f"InputError: ParallelLibrary.compute: the ranks {message}", text
            assert seconds < CALL_SECONDS, (rank, case, seconds)
            # the ranks are in step afterwards: the same calls give the same bits as before
            assert f"INSTEP rank {rank} {case} True" in out, (rank, case, out)
    assert "NOERROR" not in out, out
    ok = re.findall(r"^OK rank (\d+) (.*)$", out, flags=re.M)
    assert sorted(int(r) for r, _ in ok) == list(range(nranks)), out
    assert len({v for _, v in ok}) == 1, ok


@pytest.mark.parametrize("nranks", [2, 3])
def test_different_numbers_of_i_particles(mpiexec: str, nranks: int, tmp_path: Path) -> None:
    """The issue's case: rank 1 passes 7 i-particles, the others 8."""
    others = "rank 0" if nranks == 2 else "ranks 0, 2"
    out = _run(mpiexec, nranks, "ni", "j", tmp_path)
    _check(out, nranks, {"ni": f"{NI}: {others}: 8; rank 1: 7 {NI_RULE}"})


@pytest.mark.parametrize("dec", ["j", "2d"])
def test_every_kind_of_shape_mismatch(mpiexec: str, dec: str, tmp_path: Path) -> None:
    """On 4 ranks (1 x 4 and 2 x 2): different ni within a row and between the rows of a
    2-D grid, partials in the first exchange against partials sent as messages, messages of
    different sizes, neighbour lists on one rank only, rows combined differently."""
    out = _run(mpiexec, 4, "all", dec, tmp_path)
    assert f"grid {'1x4' if dec == 'j' else '2x2'}" in out, out
    _check(out, 4, ALL_CASES)
