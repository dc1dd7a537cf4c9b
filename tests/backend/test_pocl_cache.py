"""PoCL's kernel cache on a full disk: a temporary cache, or a BackendError; never an abort.

LLVM, inside PoCL, aborts the whole process when it cannot write its output into the cache
folder. sapporo looks at the free space before PoCL starts (and falls back to a temporary
cache) and before every build (and refuses with a BackendError, SAPPORO_ERR_BACKEND in C).
The free space is faked here; the last test uses a real, full tmpfs when one can be mounted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sapporo.backend import get_backend, quirks
from sapporo.backend import opencl as ocl
from sapporo.errors import BackendError

MiB = 1 << 20


def fake_free(monkeypatch, small_under: list[Path]) -> None:
    """Folders under any of ``small_under`` have 1 MiB free, the others plenty."""

    def free(folder: Path) -> int:
        folder = Path(folder).resolve()
        for root in small_under:
            if folder == root.resolve() or root.resolve() in folder.parents:
                return 1 * MiB
        return 10**12

    monkeypatch.setattr(ocl, "_free_bytes", free)
    monkeypatch.setattr(ocl, "_pocl_present", lambda: True)


def test_cache_dir_follows_pocl(monkeypatch, tmp_path):
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "k"))
    assert ocl._pocl_cache_dir() == tmp_path / "k"
    monkeypatch.delenv("POCL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ocl._pocl_cache_dir() == tmp_path / "xdg" / "pocl" / "kcache"


def test_room_enough_changes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "kcache"))
    fake_free(monkeypatch, [])
    ocl._ensure_pocl_cache()
    assert os.environ["POCL_CACHE_DIR"] == str(tmp_path / "kcache")


def test_full_cache_falls_back_to_a_temporary_one(monkeypatch, tmp_path, caplog):
    full = tmp_path / "full"
    monkeypatch.setenv("POCL_CACHE_DIR", str(full / "kcache"))  # restored after the test
    fake_free(monkeypatch, [full])
    ocl._ensure_pocl_cache()
    tmp = Path(os.environ["POCL_CACHE_DIR"])
    try:
        assert tmp != full / "kcache" and tmp.is_dir() and tmp.name.startswith("sapporo-pocl")
        assert "only 1.0 MiB free" in caplog.text and str(tmp) in caplog.text
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_no_room_anywhere_is_a_backend_error(monkeypatch, tmp_path):
    import tempfile

    full = tmp_path / "full"
    (full / "tmp").mkdir(parents=True)
    monkeypatch.setenv("POCL_CACHE_DIR", str(full / "kcache"))
    monkeypatch.setattr(tempfile, "tempdir", str(full / "tmp"))
    fake_free(monkeypatch, [full])
    with pytest.raises(BackendError, match="kcache: only 1.0 MiB free") as info:
        ocl._ensure_pocl_cache()
    assert "POCL_CACHE_DIR" in str(info.value)
    assert list((full / "tmp").iterdir()) == []  # the temporary folder tried is gone
    assert os.environ["POCL_CACHE_DIR"] == str(full / "kcache")


def _pocl_device() -> int | None:
    try:
        devices = get_backend("opencl").devices()
    except BackendError:
        return None
    for d in devices:
        if quirks.is_pocl(d):
            return d.index
    return None


def test_build_on_a_full_cache_is_refused(monkeypatch, tmp_path):
    index = _pocl_device()
    if index is None:
        pytest.skip("no PoCL device")
    ctx = get_backend("opencl").open(index)
    try:
        monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path / "kcache"))
        fake_free(monkeypatch, [tmp_path])
        with pytest.raises(BackendError, match="cannot build selftest.cl .*only 1.0 MiB"):
            ctx.build("selftest.cl", {"SCALE": 12345})  # a variant never built before
    finally:
        ctx.close()


def _mount_tmpfs(where: Path, size: str) -> bool:
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True)
    return proc.returncode == 0


def test_real_full_disk_does_not_abort(tmp_path):
    """A nearly full tmpfs as the cache: the build succeeds from a temporary cache."""
    if _pocl_device() is None:
        pytest.skip("no PoCL device")
    mnt = tmp_path / "tiny"
    if not _mount_tmpfs(mnt, "2m"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        (mnt / "fill").write_bytes(b"\0" * (1600 * 1024))  # 0.4 MiB left
        (mnt / "kcache").mkdir()
        code = textwrap.dedent("""
            import numpy as np, sapporo
            with sapporo.Library(order=4, precision="double") as lib:
                x = np.random.default_rng(0).normal(size=(16, 3)); ids = np.arange(16)
                lib.set_j_particles(ids, ids, 0.0, np.full(16, 1 / 16), x, np.zeros((16, 3)))
                f = lib.compute(x, np.zeros((16, 3)), ids, 1e-4)
                print("acc", float(abs(f.acc).sum()) > 0)
        """)
        env = dict(os.environ, POCL_CACHE_DIR=str(mnt / "kcache"))
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "acc True" in proc.stdout
        assert "using the temporary cache" in proc.stderr
        assert "LLVM ERROR" not in proc.stderr
        # Nowhere to go: a clean error (exit 1), not an abort (134).
        env["TMPDIR"] = str(mnt)
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "BackendError" in proc.stderr and "has no room either" in proc.stderr
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
