"""The C API's open without Python (capi/warm.c, capi/warm.py).

A run whose force calls went the direct path leaves a recipe at g6_close; the next run with
the same settings opens from it without starting Python.  Its results must have the bits
of a run that started Python, also when the recipe does not cover a step and Python starts
in the middle of the run; any change of what the recipe depends on (settings, files) or a
damaged recipe means an ordinary open.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from conftest import CApi


def _run(capi: CApi, cwd: Path, cache: Path, *args: object, warm: str = "1",
         **env: str) -> tuple[str, dict[str, int]]:
    exe = capi.program("warm_steps.c")
    proc = capi.run(exe, *args, cwd=cwd,
                    env=capi.env(SAPPORO_CAPI_WARM=warm, SAPPORO_KERNEL_CACHE=str(cache), **env))
    m = re.search(r"python (\d+) warm (\d+) direct (\d+)", proc.stderr)
    assert m, proc.stderr
    assert "close 0" in proc.stdout and "rc -" not in proc.stdout, proc.stdout
    return proc.stdout, {"python": int(m[1]), "warm": int(m[2]), "direct": int(m[3])}


@pytest.mark.parametrize("order, precision", [(4, "double-single"), (6, "double"),
                                              (8, "double"), (2, "double-single")])
def test_open_without_python_gives_the_same_bits(capi: CApi, tmp_path: Path, order: int,
                                                 precision: str) -> None:
    cache = tmp_path / "cache"
    cold, c = _run(capi, tmp_path, cache, order, precision)
    assert c == {"python": 1, "warm": 0, "direct": 29}  # the first call stores through Python
    assert list((cache / "warm").glob("warm-*.rec")), "no recipe written at g6_close"
    warm, w = _run(capi, tmp_path, cache, order, precision)
    assert w == {"python": 0, "warm": 1, "direct": 30}  # every call in C, Python never started
    assert warm == cold
    again, w2 = _run(capi, tmp_path, cache, order, precision)
    assert again == cold and w2 == w


def test_python_starts_where_the_recipe_ends(capi: CApi, tmp_path: Path) -> None:
    """A j-address the recorded run never stored: Python starts, takes the j-particles
    stored so far from C, and the run goes on with the bits of an ordinary one."""
    cache = tmp_path / "cache"
    _run(capi, tmp_path, cache, 4, "double")
    reference, r = _run(capi, tmp_path, cache, 4, "double", 1, warm="0")
    assert r["python"] == 1 and r["warm"] == 0
    out, w = _run(capi, tmp_path, cache, 4, "double", 1)
    assert w["warm"] == 1 and w["python"] == 1  # opened without it, then started it
    assert out == reference


def test_one_recipe_per_number_of_particles(capi: CApi, tmp_path: Path) -> None:
    """Runs alternating between N = 600 and N = 500 with the same settings: each N leaves
    its own recipe; an open starts from the latest one, and the first force call changes to
    the recipe of its N (up or down), so that once both are there no run starts Python."""
    import os
    import time

    cache = tmp_path / "cache"
    ref = {n: _run(capi, tmp_path, cache, 4, "double-single", 0, n, warm="0")[0]
           for n in (600, 500)}

    def run(n: int, latest: int | None = None) -> tuple[int, int]:
        if latest is not None:  # that recipe the most recent: the open starts from it
            (rec,) = (cache / "warm").glob(f"warm-*-{latest}.rec")
            now = time.time() + 10
            os.utime(rec, (now, now))
        out, s = _run(capi, tmp_path, cache, 4, "double-single", 0, n)
        assert out == ref[n]
        return s["python"], s["warm"]

    assert run(600) == (1, 0)  # no recipe yet
    assert run(500) == (1, 1)  # opened from 600's, Python for its own
    assert run(600, latest=500) == (0, 1)  # from 500's to 600's at the first force call
    assert run(500, latest=600) == (0, 1)  # and down
    assert run(500) == (0, 1)
    assert len(list((cache / "warm").glob("warm-*-600.rec"))) == 1
    assert len(list((cache / "warm").glob("warm-*-500.rec"))) == 1


def test_direct_sequence_alike_after_a_warm_open(capi: CApi, tmp_path: Path) -> None:
    """tests/capi/direct_ab.c (new addresses, lists, a field point, refused input, a
    non-finite force) opened from a recipe: the bits of the runs through Python."""
    exe = capi.program("direct_ab.c")
    env = {"SAPPORO_KERNEL_CACHE": str(tmp_path / "cache")}
    py = capi.run(exe, 4, "double-single", cwd=tmp_path,
                  env=capi.env(SAPPORO_CAPI_DIRECT="0", **env)).stdout
    cold = capi.run(exe, 4, "double-single", cwd=tmp_path,
                    env=capi.env(SAPPORO_CAPI_WARM="1", **env))
    warm = capi.run(exe, 4, "double-single", cwd=tmp_path,
                    env=capi.env(SAPPORO_CAPI_WARM="1", SAPPORO_CAPI_WARM_TRACE="1", **env))
    assert "starting Python" in warm.stderr  # the recipe covers the first steps only
    assert cold.stdout == py and warm.stdout == py


def test_changed_settings_or_files_open_with_python(capi: CApi, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    ref, _ = _run(capi, tmp_path, cache, 4, "double-single")
    # another setting: its own recipe
    out, s = _run(capi, tmp_path, cache, 4, "double-single", SAPPORO_SPIN_US="0")
    assert s["warm"] == 0 and out == ref
    assert len(list((cache / "warm").glob("warm-*.rec"))) == 2
    # a device file appears in the working folder: it could choose other devices
    (tmp_path / "sapporo2.config").write_text("1\n0\n")
    out, s = _run(capi, tmp_path, cache, 4, "double-single")
    assert s["warm"] == 0 and out == ref
    (tmp_path / "sapporo2.config").unlink()
    # the device file SAPPORO_CONFIG names is edited
    named = tmp_path / "devices.config"
    named.write_text("1\n0\n")
    _run(capi, tmp_path, cache, 4, "double-single", SAPPORO_CONFIG=str(named))
    _, s = _run(capi, tmp_path, cache, 4, "double-single", SAPPORO_CONFIG=str(named))
    assert s["warm"] == 1
    named.write_text("1\n0\n\n")
    _, s = _run(capi, tmp_path, cache, 4, "double-single", SAPPORO_CONFIG=str(named))
    assert s["warm"] == 0
    # the tuning profile folder appears, then changes (SAPPORO_PROFILE_DIR is a setting
    # too: the same folder each time)
    prof = tmp_path / "profiles"
    _run(capi, tmp_path, cache, 4, "double-single", SAPPORO_PROFILE_DIR=str(prof))
    _, s = _run(capi, tmp_path, cache, 4, "double-single", SAPPORO_PROFILE_DIR=str(prof))
    assert s["warm"] == 1
    prof.mkdir()
    _, s = _run(capi, tmp_path, cache, 4, "double-single", SAPPORO_PROFILE_DIR=str(prof))
    assert s["warm"] == 0
    _, s = _run(capi, tmp_path, cache, 4, "double-single", SAPPORO_PROFILE_DIR=str(prof))
    assert s["warm"] == 1
    (prof / "notes.txt").write_text("not a profile, but the folder changed\n")
    _, s = _run(capi, tmp_path, cache, 4, "double-single", SAPPORO_PROFILE_DIR=str(prof))
    assert s["warm"] == 0


def _resealed(text: str) -> str:
    """A recipe's text with its checksum line made right again (after an edit)."""
    from sapporo.capi.warm import checksum

    body = text[: text.rindex("end ")]
    return body + f"end {checksum(body.encode()):016x}\n"


@pytest.mark.parametrize("damage", ["truncated", "garbage", "binary gone", "one digit",
                                    "wrong handle", "number for a pointer"])
def test_damaged_recipe_opens_with_python(capi: CApi, tmp_path: Path, damage: str) -> None:
    cache = tmp_path / "cache"
    ref, _ = _run(capi, tmp_path, cache, 4, "double-single")
    (rec,) = (cache / "warm").glob("warm-*.rec")
    text = rec.read_text()
    if damage == "truncated":
        rec.write_text(text[: len(text) * 2 // 3])
    elif damage == "garbage":
        rec.write_bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8)
                        .tobytes())
    elif damage == "binary gone":
        for b in (cache / "warm").glob("warm-*.bin"):
            b.unlink()
    elif damage == "one digit":  # caught by the checksum
        k = text.index("\nlibrary ") + 9
        rec.write_text(text[:k] + ("2" if text[k] == "1" else "1") + text[k + 1:])
    else:  # sealed again: caught by the checks of the plan's words
        if damage == "wrong handle":  # a kernel the recipe does not make
            bad = re.sub(r"(?m)^(plan .*?) k0 ", r"\1 k999 ", text, count=1)
        else:  # a raw address where a reference to the recipe's memory belongs
            bad = re.sub(r"(?m)^(plan .*?) m\d+\+\d+ ", r"\1 4096 ", text, count=1)
        assert bad != text
        rec.write_text(_resealed(bad))
    out, s = _run(capi, tmp_path, cache, 4, "double-single")
    assert s == {"python": 1, "warm": 0, "direct": 29}
    assert out == ref
    # and that run wrote a good recipe again
    _, s = _run(capi, tmp_path, cache, 4, "double-single")
    assert s["warm"] == 1


def test_switched_off_writes_nothing(capi: CApi, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for _ in range(2):
        _, s = _run(capi, tmp_path, cache, 4, "double-single", warm="0")
        assert s["warm"] == 0 and s["python"] == 1
    assert not (cache / "warm").exists() or not any((cache / "warm").iterdir())


def test_plan_words_match_bridge_h() -> None:
    """The Python writer reads the word offsets from bridge.h, which direct.c compiles."""
    from sapporo.capi.warm import _hex, bridge_enums, plan_words

    e = bridge_enums()
    assert e["DP_WORDS"] == e["DP_LAUNCHES"] + 2 * e["DP_LAUNCH_WORDS"]
    assert e["DP_LAUNCH_WORDS"] == e["DL_ARGS"] + 2 * e["DP_MAX_ARGS"]
    w = plan_words(0)
    assert w.shape == (e["DP_WORDS"],) and w[e["DP_STATUS"]] == 0 and not w.any()
    assert plan_words(-1)[e["DP_STATUS"]] == -1
    assert _hex("") == "-" and bytes.fromhex(_hex("a b\u00e9")).decode() == "a b\u00e9"


def test_replaced_binaries_are_pruned(capi: CApi, tmp_path: Path) -> None:
    """Kernel binaries no recipe names go when a recipe is written, once a day old (a
    writer in another process may be between its binaries and its recipe), and so do the
    recipes of a C library that is gone."""
    import os
    import time

    from sapporo.capi.warm import _hex

    folder = tmp_path / "cache" / "warm"
    folder.mkdir(parents=True)
    orphan = folder / "warm-0123456789abcdef-600.rec"
    gone = _hex("format 1\nlib /nonexistent/libg6.so 1 2\n")
    orphan.write_text(f"format 1\nfingerprint {gone}\n")
    old, young = folder / f"warm-{'a' * 24}.bin", folder / f"warm-{'b' * 24}.bin"
    old.write_bytes(b"stale")
    young.write_bytes(b"being written")
    day_ago = time.time() - 2 * 86400
    os.utime(old, (day_ago, day_ago))
    _run(capi, tmp_path, tmp_path / "cache", 4, "double-single")
    assert not old.exists() and young.exists() and not orphan.exists()
    (rec,) = folder.glob("warm-*.rec")
    named = [b for b in folder.glob("warm-*.bin") if b != young]
    assert named and all(bytes(b.name, "ascii").hex() in rec.read_text() for b in named)


def test_fortran_client_opens_without_python(capi: CApi, tmp_path: Path) -> None:
    """An unchanged Fortran GRAPE-6 client (g6_open_, ... linked with -lg6): the second
    run with the same settings never starts Python and writes the same files."""
    from test_capi import H2, write_ic

    exe = capi.program("hermite.f90", lib="g6")
    write_ic(tmp_path / "ic.txt")
    env = capi.env(SAPPORO_CAPI_WARM="1", SAPPORO_CAPI_WARM_TRACE="1",
                   SAPPORO_KERNEL_CACHE=str(tmp_path / "cache"))
    runs = []
    for k in range(2):
        proc = capi.run(exe, "ic.txt", f"out{k}", 0.0, 0.125, 0.02, H2, cwd=tmp_path, env=env)
        files = {p.name[len(f"out{k}"):]: p.read_bytes()
                 for p in sorted(tmp_path.glob(f"out{k}*"))}
        runs.append((proc, files))
    (cold, cold_files), (warm, warm_files) = runs
    assert "opening with Python: no recipe" in cold.stderr
    assert "sapporo:" not in warm.stderr  # neither opened with Python nor started it later
    assert warm.stdout == cold.stdout and warm_files == cold_files and cold_files
