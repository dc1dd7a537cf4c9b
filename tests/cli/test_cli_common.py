"""Conventions shared by every ``sapporo`` sub-command: option names, help, exit codes."""

from __future__ import annotations

import argparse
import re

import pytest

from sapporo.cli import build_parser, main, subcommand_parsers

PARSERS = subcommand_parsers(build_parser())
#: Sub-commands that run kernels (they all take the same device and variant options).
MEASURING = ("run", "bench", "tune", "accuracy")
REST = re.compile(r"``|:(func|class|meth|mod|attr|data):`|\*\*\w")


def call(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def options(name: str) -> dict[str, argparse.Action]:
    return {s: a for a in PARSERS[name]._actions for s in a.option_strings}


def test_every_sub_command_is_found():
    assert set(MEASURING) | {"info"} <= set(PARSERS)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_option_has_help(name):
    for action in PARSERS[name]._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        assert action.help and action.help is not argparse.SUPPRESS, (
            f"sapporo {name} {'/'.join(action.option_strings) or action.dest} has no help")


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_help_is_plain_text(name, capsys):
    assert call([*name.split(), "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: sapporo " + name)
    assert not REST.search(text), REST.search(text)


@pytest.mark.parametrize("name", MEASURING)
def test_same_option_names(name):
    opts = options(name)
    for option in ("--order", "--precision", "--backend", "--devices"):
        assert option in opts, f"sapporo {name} lacks {option}"
    if name != "run":  # several values: the plural is the name, the singular an alias
        assert opts["--orders"] is opts["--order"]
        assert opts["--precisions"] is opts["--precision"]
    assert "--device" not in opts or opts["--device"] is opts["--devices"]


#: Whether each sub-command prints progress (then it takes --quiet) and writes plots (then
#: --no-plots). Every sub-command is listed, so a new one has to be placed here.
OUTPUT = {
    "run": (True, True), "bench": (True, True), "pm": (True, True),
    "tune": (True, False), "accuracy": (True, False),
    "info": (False, False), "capi": (False, False), "capi build": (False, False),
    "capi flags": (False, False), "capi amuse": (False, False),
}


def test_output_table_lists_every_sub_command():
    assert set(OUTPUT) == set(PARSERS)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_quiet_and_no_plots_wherever_progress_or_plots(name):
    progress, plots = OUTPUT[name]
    opts = options(name)
    assert ("--quiet" in opts) == progress, f"sapporo {name}: --quiet"
    assert ("--no-plots" in opts) == plots, f"sapporo {name}: --no-plots"
    for flag in ("--quiet", "--no-plots"):
        if flag in opts:  # the same kind of option everywhere: a flag, off by default
            action = opts[flag]
            assert isinstance(action, argparse._StoreTrueAction) and action.default is False
            assert action.dest == flag[2:].replace("-", "_")
            assert PARSERS[name].parse_args([flag]).__dict__[action.dest] is True


def test_quiet_bench_and_accuracy_print_only_results(tmp_path, capsys):
    out = tmp_path / "b"
    assert call(["bench", "--tiny", "--peers", "none", "--orders", "4", "--precisions",
                 "double", "--quiet", "--no-plots", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert (out / "bench-results.csv").is_file() and not list(out.glob("*.png"))
    assert call(["accuracy", "--n", "64", "--n-active", "8", "--orders", "4",
                 "--precisions", "double", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.startswith("|")  # the table is the result


@pytest.mark.parametrize(
    "argv, words",
    [
        (["run", "--no-such-option"], "unrecognized"),
        (["bench", "--no-such-option"], "unrecognized"),
        (["tune", "--no-such-option"], "unrecognized"),
        (["accuracy", "--no-such-option"], "unrecognized"),
        (["info", "--no-such-option"], "unrecognized"),
        (["run", "--order", "5"], "--order"),
        (["bench", "--orders", "4,5"], "--orders"),
        (["tune", "--orders", "5"], "--orders"),
        (["accuracy", "--orders", "5"], "--orders"),
        (["run", "--precision", "single"], "--precision"),
        (["bench", "--precisions", "single"], "--precisions"),
        (["tune", "--precision", "single"], "--precisions"),
        (["accuracy", "--precisions", "double,single"], "--precisions"),
        (["bench", "--backend", "vulkan"], "--backend"),
        (["tune", "--backend", "vulkan"], "--backend"),
        (["accuracy", "--backend", "vulkan"], "--backend"),
        (["bench", "--devices", "zero"], "--devices"),
        (["tune", "--devices", "0,1"], "one device"),
        (["accuracy", "--devices", "x"], "--devices"),
        (["accuracy", "--n", "100", "--n-active", "101"], "--n-active"),
        (["bench", "--n", "abc"], "--n"),
        (["tune", "--n-active", "-3"], "--n-active"),
        (["run", "--n", "many"], "--n"),
        (["accuracy", "--n", "many"], "--n"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing a refused command might create lands in the repo
    rc = call(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"sapporo {argv[0]}: error:") and words in lines[0], err
    assert "Traceback" not in err


def test_capi_usage_error_names_the_action(capsys):
    assert call(["capi", "build", "--no-such-option"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sapporo capi build: error:") and "\n" not in err


def test_sigterm_interrupts_any_command_as_ctrl_c_does(monkeypatch, capsys, tmp_path):
    import os
    import signal
    import time

    from sapporo.perf import bench

    def measure(settings, progress=None):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # interrupted long before this ends
        raise AssertionError("SIGTERM did not interrupt")

    monkeypatch.setattr(bench, "run_bench", measure)
    before = signal.getsignal(signal.SIGTERM)
    assert call(["bench", "--tiny", "--out", str(tmp_path / "b")]) == 130
    assert capsys.readouterr().err.strip() == "sapporo bench: interrupted"
    assert signal.getsignal(signal.SIGTERM) is before
