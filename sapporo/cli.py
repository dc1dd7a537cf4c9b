"""The ``sapporo`` command: one dispatcher, one module per sub-command.

Each module ``sapporo/cli_<name>.py`` provides ``add_parser(subparsers)``, which registers the
sub-command and sets ``func`` (taking the parsed arguments, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .errors import InputError, SapporoError

COMMANDS = ("info", "run", "bench", "tune", "accuracy", "capi")


def int_list(text: str, what: str) -> list[int]:
    """Parse ``"1k,4k,16384"`` into positive integers (``k`` multiplies by 1024).

    Raises
    ------
    InputError
        Naming the option ``what`` when the text is not such a list.
    """
    vals = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        mult = 1
        if part[-1] in "kK":
            part, mult = part[:-1], 1024
        try:
            vals.append(int(float(part) * mult))
        except ValueError:
            raise InputError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise InputError(f"{what}: expected positive integers, got {text!r}")
    return vals


def os_error_message(exc: OSError) -> str:
    """One line for an :class:`OSError`: ``"<reason>: <path>"`` when both are known."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None:
        return f"{reason}: {os.fsdecode(exc.filename)}"
    return reason


def ensure_writable_dir(path: str | os.PathLike[str], what: str) -> Path:
    """Create the folder ``path`` (with parents) and check that files can be written in it.

    A probe file is written and removed, so a run fails before its work, not after.

    Parameters
    ----------
    path : path-like
        The folder.
    what : str
        The option named in the message, e.g. ``"--out"``.

    Returns
    -------
    Path

    Raises
    ------
    InputError
        When the folder cannot be created or written.
    """
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{what} {folder} exists and is not a directory")
    probe = folder / f".sapporo-write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(
            f"{what} {folder}: cannot create or write the folder ({os_error_message(exc)})"
        ) from None
    return folder


def progress_writer() -> Callable[[str], None]:
    """A progress callback that writes one flushed line to stdout per call."""

    def progress(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    return progress


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available sub-command."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="sapporo",
        description="GRAPE-compatible direct-summation gravity on GPUs and CPUs.",
    )
    parser.add_argument("--version", action="version", version=f"sapporo {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"sapporo.cli_{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"sapporo.cli_{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sapporo`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SapporoError as exc:
        sys.stderr.write(f"sapporo {args.command}: error: {exc}\n")
        return 1
    except OSError as exc:  # unwritable output, missing input, full disk, ...
        sys.stderr.write(f"sapporo {args.command}: error: {os_error_message(exc)}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"sapporo {args.command}: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
