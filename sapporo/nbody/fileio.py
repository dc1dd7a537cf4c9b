"""Files written whole or not at all: a temporary name beside the target, then a rename.

An interrupted or failed write (a full disk, a signal) removes the temporary file, so no
truncated file is ever left under the target's name or beside it, and the :class:`OSError`
names the target, not the temporary file.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["named_error", "replacing", "write_text_atomic"]


def named_error(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """``exc`` as an :class:`OSError` of the same errno whose ``filename`` is ``path``."""
    code = exc.errno if exc.errno is not None else errno.EIO
    return OSError(code, exc.strerror or str(exc) or "write failed", os.fspath(path))


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield the temporary path to write; afterwards it replaces ``path``. A failed write or
    rename removes it and raises an :class:`OSError` naming ``path``."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise named_error(exc, path) from exc
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` (flushed to the disk) through :func:`replacing`."""
    with replacing(path) as tmp, open(tmp, "w", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
