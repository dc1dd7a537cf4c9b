"""``sapporo.nbody.fileio``: files are written whole or not at all."""

from __future__ import annotations

import errno

import pytest

from sapporo.nbody import fileio


def test_write_text_atomic_replaces(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text("old")
    fileio.write_text_atomic(target, "new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_failed_write_leaves_the_old_file_and_no_tmp(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text("old")

    def fsync_fails(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", fsync_fails)
    with pytest.raises(OSError) as info:
        fileio.write_text_atomic(target, "new")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_interrupt_inside_replacing_removes_the_tmp(tmp_path):
    target = tmp_path / "f.bin"
    with pytest.raises(KeyboardInterrupt), fileio.replacing(target) as tmp:
        tmp.write_bytes(b"partial")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_error_without_errno_is_named_eio(tmp_path):
    err = fileio.named_error(OSError("odd"), tmp_path / "x")
    assert err.errno == errno.EIO and err.filename == str(tmp_path / "x")
    assert "odd" in err.strerror
