"""The ``sapporo`` command: one dispatcher, one module per sub-command.

Each module ``sapporo/cli/<name>.py`` provides ``add_parser(subparsers)``, which registers the
sub-command and sets ``func`` (taking the parsed arguments, returning an exit code). Every
sub-command uses the same option names (``--order``/``--precision``, ``--orders``/
``--precisions`` where several are measured, ``--backend``, ``--devices``; lists
comma-separated), exit codes (0 done, 1 a failure of the work, 2 a usage error, one line
``sapporo COMMAND: error: ...``, 130 after Ctrl-C or SIGTERM), ``--quiet`` and
``--no-plots`` (:func:`add_output_options`), and plain-text help (:func:`plain`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from sapporo import config
from sapporo.errors import ConfigError, InputError, SapporoError

COMMANDS = ("info", "run", "bench", "tune", "accuracy", "capi", "pm")


def int_list(text: str, what: str) -> list[int]:
    """Parse ``"1k,4k,16384"`` into positive integers (``k`` multiplies by 1024); an
    :class:`InputError` naming the option ``what`` when the text is not such a list."""
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


def plain(text: str | None) -> str | None:
    """``text`` without reST markup (````x````, ``:func:`x```, ``**x**``), for ``--help``."""
    if text is None:
        return None
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    text = text.replace("``", "")
    return re.sub(r"\*\*([^*]+)\*\*", r"\1", text)


def usage_error(prog: str) -> Callable[[str], NoReturn]:
    """An ``ArgumentParser.error`` replacement: one line on stderr, exit code 2."""

    def error(message: str) -> NoReturn:
        sys.stderr.write(f"{prog}: error: {message}\n")
        sys.exit(2)

    return error


def _parsed_list(text: str, parse: Callable[[str, str], object], what: str) -> list:
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if part:
            try:
                value = parse(part, what)
            except SapporoError as exc:
                raise InputError(str(exc)) from None
            if value not in out:
                out.append(value)
    if not out:
        raise InputError(f"{what}: empty list")
    return out


def order_list(text: str, what: str = "--orders") -> list[int]:
    """Parse ``"4,6"`` into orders (each checked by :func:`sapporo.config.parse_order`)."""
    return _parsed_list(text, config.parse_order, what)


def command_precision(value: str, what: str = "--precision") -> str:
    """A precision for the commands: ``double-single`` or ``double`` (``single`` is for
    order-2 tree codes, through the GRAPE-5 calls or ``Library(order=2)``)."""
    precision = config.parse_precision(value, what)
    if precision == "single":
        raise ConfigError(f"{what}: 'single' is for order-2 tree codes (the GRAPE-5 calls, "
                          f"Library(order=2)); the commands take double-single or double")
    return precision


def precision_list(text: str, what: str = "--precisions") -> list[str]:
    """Parse ``"double-single,double"`` into precision names."""
    return _parsed_list(text, command_precision, what)


def add_device_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                       one: bool = False) -> None:
    """Add ``--backend`` and ``--devices`` (``one``: a single device index)."""
    parser.add_argument("--backend", default=None, help="opencl, cuda or auto (default auto)")
    if one:
        parser.add_argument("--devices", "--device", dest="devices", default=None, metavar="INDEX",
                            help="the device to use, one index such as 0 (default 0)")
    else:
        parser.add_argument("--devices", default=None,
                            help="'all' or comma-separated device indices such as 0,1 "
                                 "(default: the first device, or SAPPORO_DEVICES)")


def add_variant_options(parser: argparse.ArgumentParser, defaults: bool = True) -> None:
    """Add ``--orders`` and ``--precisions`` (also spelt ``--order``, ``--precision``), by
    default 2,4,6 and both precisions (``defaults=False``: None, the command decides)."""
    parser.add_argument("--orders", "--order", dest="orders",
                        default="2,4,6" if defaults else None,
                        help="comma-separated orders, e.g. 4,6 (default 2,4,6)")
    parser.add_argument("--precisions", "--precision", dest="precisions",
                        default="double-single,double" if defaults else None,
                        help="comma-separated precisions, e.g. double-single,double (default both)")


def one_device(text: str | None, what: str = "--devices") -> int:
    """The single device index of a ``--devices`` value (default 0)."""
    if text is None:
        return 0
    try:
        devices = config.parse_devices(text, what)
    except SapporoError as exc:
        raise InputError(str(exc)) from None
    if devices == "all" or not isinstance(devices, list) or len(devices) != 1:
        raise InputError(f"{what}: this command measures one device at a time; "
                         f"give one index, got {text!r}")
    return devices[0]


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Free bytes for an unprivileged user on the file system of ``path`` (None: unknown)."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def os_error_message(exc: OSError) -> str:
    """One line for an :class:`OSError`: ``"<reason>: <path>"`` when both are known."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None:
        return f"{reason}: {os.fsdecode(exc.filename)}"
    return reason


def ensure_writable_dir(path: str | os.PathLike[str], what: str, need_bytes: int = 0) -> Path:
    """Create the folder ``path`` (with parents) and check that files can be written in it,
    so that a command fails before its work, not after: a probe file is written and
    removed, and the free space is compared with ``need_bytes`` (an estimate of what will be
    written there; at least 1 MiB). ``what`` names the option in the :class:`InputError`
    raised when the folder cannot be created or written, e.g. ``"--out"``."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{what} {folder} exists and is not a directory")
    probe = folder / f".sapporo-write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"{what} {folder}: cannot create or write the folder "
                         f"({os_error_message(exc)})") from None
    need = max(int(need_bytes), 1 << 20)
    free = free_bytes(folder)
    if free is not None and free < need:
        raise InputError(f"{what} {folder}: not enough free space ({free / 2**20:.1f} MiB free, "
                         f"about {need / 2**20:.1f} MiB needed)")
    return folder


def add_output_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                       plots: bool = True) -> None:
    """Add ``--quiet`` and, where the command writes plots, ``--no-plots``.

    The same two options, with the same meaning, on every command that prints progress or
    writes plots (``tests/cli/test_cli_common.py`` checks it).
    """
    parser.add_argument("--quiet", action="store_true", help="no progress and no closing "
                        "summary on the terminal (errors still go to stderr)")
    if plots:
        parser.add_argument("--no-plots", action="store_true", help="do not write PNG plots")


class StatusLine:
    """Progress lines on ``stream``: rewritten in place on a terminal, one per call
    otherwise (none when ``quiet``)."""

    def __init__(self, stream: TextIO, quiet: bool = False) -> None:
        self.stream, self.quiet = stream, quiet
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.width = 0

    def __call__(self, line: str) -> None:
        if self.quiet:
            return
        if self.tty:
            self.stream.write("\r" + line + " " * max(0, self.width - len(line)))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self, keep: bool = False) -> None:
        """End the line on a terminal: ``keep`` it, or clear it."""
        if self.tty and self.width:
            self.stream.write("\n" if keep else "\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def progress_writer(quiet: bool = False) -> Callable[[str], None]:
    """A progress callback that writes one flushed line to stdout per call (nothing when
    ``quiet``)."""

    def progress(line: str) -> None:
        if quiet:
            return
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    return progress


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available sub-command."""
    from sapporo import __version__

    parser = argparse.ArgumentParser(
        prog="sapporo",
        description="GRAPE-compatible direct-summation gravity on GPUs and CPUs.",
    )
    parser.add_argument("--version", action="version", version=f"sapporo {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"sapporo.cli.{name}").add_parser(sub)
    for name, command in subcommand_parsers(parser).items():  # one-line usage errors
        command.error = usage_error(f"sapporo {name}")  # type: ignore[method-assign]
    return parser


def subcommand_parsers(parser: argparse.ArgumentParser | None = None
                       ) -> dict[str, argparse.ArgumentParser]:
    """Every (nested) sub-command parser by its name, e.g. ``"run"``, ``"capi build"``."""
    parser = parser or build_parser()
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, prefix: Sequence[str]) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    out[" ".join((*prefix, name))] = child
                    walk(child, (*prefix, name))

    walk(parser, ())
    return out


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a command as Ctrl-C does (``sapporo run`` then saves its state)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sapporo`` console script."""
    parser = build_parser()
    parser.error = usage_error("sapporo")  # type: ignore[method-assign]
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported by the sub-command that was given them, in one line
        words = [args.command] if getattr(args, "command", None) else []
        words += [str(v) for k, v in sorted(vars(args).items())
                  if k.endswith("_command") and v and k != "command"]
        target = subcommand_parsers(parser).get(" ".join(words), parser)
        target.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with _sigterm_as_interrupt():
            return int(args.func(args) or 0)
    except SapporoError as exc:  # InputError, ConfigError: a bad option or value (usage)
        sys.stderr.write(f"sapporo {args.command}: error: {exc}\n")
        return 2 if isinstance(exc, (InputError, ConfigError)) else 1
    except OSError as exc:  # unwritable output, missing input, full disk, ...
        sys.stderr.write(f"sapporo {args.command}: error: {os_error_message(exc)}\n")
        return 1
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM
        sys.stderr.write(f"sapporo {args.command}: interrupted\n")
        return 130
