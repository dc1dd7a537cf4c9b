"""The check that a PoCL platform computes sapporo's forces right (sapporo.backend.pocl_probe),
run in a child process by the OpenCL backend, and the refusal of a program without kernels."""

from __future__ import annotations

import subprocess

import pytest

from sapporo.backend import get_backend
from sapporo.errors import BackendError, BuildError


def _pocl_device():
    """(platform, device) of the first usable PoCL device, or skip."""
    from sapporo.backend import opencl

    if opencl.cl is None:
        pytest.skip("PyOpenCL is not importable")
    try:
        devices = get_backend("opencl")._scan()
    except BackendError as exc:
        pytest.skip(f"OpenCL unusable here: {exc}")
    for _, dev in devices:
        if "portable computing language" in dev.platform.name.lower():
            return dev.platform, dev
    pytest.skip("no usable PoCL device")


def test_the_probe_accepts_a_working_device():
    """The whole library, run on a device the backend uses, passes the check (in this
    process: the same code the child runs)."""
    from sapporo.backend import opencl, pocl_probe

    platform, dev = _pocl_device()
    assert pocl_probe.check(platform.version, dev.name, dev.driver_version) == ""
    assert opencl._IN_PROBE is False  # restored


def test_the_probe_names_a_device_it_cannot_find():
    from sapporo.backend import opencl, pocl_probe

    _pocl_device()
    why = pocl_probe.check("no such platform", "no such device", "0")
    assert "not listed" in why and opencl._IN_PROBE is False


def test_probe_command_line(capsys):
    from sapporo.backend import pocl_probe

    assert pocl_probe.main([]) == 2
    assert "usage" in capsys.readouterr().err
    # an error inside the check is the answer (last line), not a crash
    assert pocl_probe.main(["x", "y", "z"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "checking" and out[-1].startswith("error: ")


class _Named:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.mark.parametrize("stdout, returncode, expected, keep", [
    ("checking\nnoise\nok\n", 0, "", True),
    ("checking\nerror: the forces of 1 particle(s) are wrong\n", 0,
     "the forces of 1 particle(s) are wrong", True),
    ("checking\n", -6, "the check process ended with status -6 (Aborted)", True),
    ("", 1, "", False),  # the child could not import sapporo: no verdict
])
def test_the_parent_reads_the_childs_answer(monkeypatch, stdout, returncode, expected, keep):
    """ok: usable; "error: why": skipped for that reason; a crash during the check (PoCL's
    wheel aborts at exit after a broken build): skipped, naming the status; a child that
    never got to the device: assumed usable, and not remembered."""
    from sapporo.backend import opencl

    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, returncode, stdout, "Aborted\n")

    monkeypatch.setattr(opencl.subprocess, "run", fake_run)
    platform = _Named(version="OpenCL 3.0 PoCL 9")
    device = _Named(name="pthread-test", driver_version="9")
    assert opencl._run_probe(platform, device) == (expected, keep)
    assert seen["cmd"][1:3] == ["-m", "sapporo.backend.pocl_probe"]
    assert seen["cmd"][3:] == ["OpenCL 3.0 PoCL 9", "pthread-test", "9"]


def test_a_probe_that_hangs_is_an_answer(monkeypatch):
    from sapporo.backend import opencl

    def fake_run(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(opencl.subprocess, "run", fake_run)
    why, keep = opencl._run_probe(_Named(version="v"), _Named(name="d", driver_version="1"))
    assert "did not finish" in why and keep


def test_the_probe_never_runs_the_embedding_program(monkeypatch):
    """Inside the C API, sys.executable may be the client program: the probe only runs a
    Python interpreter (or none)."""
    from sapporo.backend import opencl

    monkeypatch.setattr(opencl.sys, "executable", "/usr/bin/banana01")
    monkeypatch.setattr(opencl.sys, "prefix", "/nonexistent")
    assert opencl._python_for_probe() is None
    called = []
    monkeypatch.setattr(opencl.subprocess, "run", lambda *a, **k: called.append(a))
    assert opencl._run_probe(_Named(version="v"),
                             _Named(name="d", driver_version="1")) == ("", False)
    assert not called


def test_a_program_without_kernels_is_refused(monkeypatch):
    """A runtime that 'builds' a program with no kernel in it (PoCL's wheel on AMD Zen 4)
    gets a BuildError that names the fix, not a missing-kernel error later."""
    from sapporo.backend import opencl

    _pocl_device()
    monkeypatch.setenv("SAPPORO_KERNEL_CACHE", "off")
    monkeypatch.setattr(opencl, "_kernel_names", lambda program: [])
    ctx = get_backend("opencl").open(0)
    try:
        with pytest.raises(BuildError, match="no kernel in it"):
            ctx.build("selftest.cl", {"SCALE": 7})
    finally:
        ctx.close()
