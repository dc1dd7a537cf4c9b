"""One CPU counted once: when several OpenCL platforms expose this machine's processor
(PoCL's wheel and the system's PoCL, or PoCL and Intel's CPU runtime), the OpenCL backend
lists the CPU devices of one of them only.

The selection is tested on fake platforms (always, where PyOpenCL imports), and the device
list of this machine is checked for a CPU listed twice."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sapporo.errors import BackendError

opencl = pytest.importorskip("sapporo.backend.opencl")
if opencl.cl is None:  # pragma: no cover - depends on the machine
    pytest.skip("PyOpenCL is not importable", allow_module_level=True)

CPU = opencl.cl.device_type.CPU
GPU = opencl.cl.device_type.GPU
MODEL = "Test(R) CPU 9000"
POCL = "Portable Computing Language"
#: where the fake platforms' drivers live (PyOpenCL's own PoCL sits in its package folder)
SYSTEM_LIB = "/usr/lib/x86_64-linux-gnu/libpocl.so.2"
WHEEL_LIB = str(Path(opencl.cl.__file__).parent / ".libs" / "libpocl-0.so")


class FakeDevice:
    def __init__(self, name: str, kind: int = CPU, vendor: str = "TestVendor"):
        self.name, self.type, self.vendor = name, kind, vendor
        self.driver_version = "1.0"
        self.max_compute_units, self.max_work_group_size = 2, 4096
        self.local_mem_size, self.global_mem_size = 1 << 20, 1 << 30
        self.max_mem_alloc_size = 1 << 28
        self.preferred_vector_width_float = 8
        self.double_fp_config, self.extensions = 1, "cl_khr_fp64"
        self.platform: FakePlatform | None = None


class FakePlatform:
    def __init__(self, name: str, version: str, library: str, devices: list[FakeDevice]):
        self.name, self.version, self.library, self._devices = name, version, library, devices
        for d in devices:
            d.platform = self

    def get_devices(self) -> list[FakeDevice]:
        return list(self._devices)

    def add(self, device: FakeDevice) -> FakePlatform:
        device.platform = self
        self._devices.append(device)
        return self


def system_pocl(*drivers: str) -> FakePlatform:
    return FakePlatform(POCL, "OpenCL 3.0 PoCL 3.1+debian  Linux, LLVM 15", SYSTEM_LIB,
                        [FakeDevice(f"{d}-skylake-avx512-{MODEL}") for d in drivers])


def wheel_pocl(*drivers: str) -> FakePlatform:
    return FakePlatform(POCL, "OpenCL 3.0 PoCL 3.0-rc2  Linux, LLVM 14", WHEEL_LIB,
                        [FakeDevice(f"{d}-{MODEL}") for d in drivers])


def intel_cpu() -> FakePlatform:
    return FakePlatform("Intel(R) OpenCL", "OpenCL 3.0 LINUX", "/opt/intel/libintelocl.so",
                        [FakeDevice(MODEL, vendor="Intel(R) Corporation")])


def nvidia_gpu() -> FakePlatform:
    return FakePlatform("NVIDIA CUDA", "OpenCL 3.0 CUDA 12.4", "/usr/lib/libnvidia-opencl.so",
                        [FakeDevice("NVIDIA H100", kind=GPU, vendor="NVIDIA Corporation")])


@pytest.fixture
def scan(monkeypatch):
    """scan(platforms, broken={library: why}) -> (the backend after its scan, the
    platforms the PoCL check ran on)."""
    monkeypatch.setenv("POCL_DEVICES", "pthread")  # no companion requested from the test
    monkeypatch.setenv("POCL_AFFINITY", "0")
    monkeypatch.setattr(opencl, "_cpuinfo", lambda: {"model name": MODEL})
    monkeypatch.setattr(opencl, "_platform_library", lambda p: p.library)
    monkeypatch.setattr(opencl, "_ensure_pocl_cache", lambda: None)

    def run(platforms, broken=None):
        checked = []

        def cannot_build(platform, devices):
            if platform.name == POCL and any(d.type & CPU for d in devices):
                checked.append(platform)
            return (broken or {}).get(platform.library, "")

        monkeypatch.setattr(opencl.cl, "get_platforms", lambda: platforms)
        monkeypatch.setattr(opencl, "_pocl_cannot_build", cannot_build)
        backend = opencl.OpenCLBackend()
        backend.devices()
        return backend, checked

    return run


def _names(backend) -> list[tuple[int, str, str]]:
    return [(d.index, d.name, d.platform) for d in backend.devices()]


@pytest.mark.parametrize("wheel_first", [False, True])
def test_two_pocls_one_cpu_the_systems_is_used(scan, wheel_first):
    system, wheel = system_pocl("pthread"), wheel_pocl("pthread")
    backend, checked = scan([wheel, system] if wheel_first else [system, wheel])
    assert _names(backend) == [(0, f"pthread-skylake-avx512-{MODEL}", POCL)]
    assert checked == [system]  # the other one is not checked at all
    assert backend.skipped == [
        f"OpenCL platform {POCL} (OpenCL 3.0 PoCL 3.0-rc2 Linux): same CPU as platform "
        f"{POCL} (OpenCL 3.0 PoCL 3.1+debian Linux), which is used"]


def test_the_first_that_passes_the_check_is_used(scan):
    system, wheel = system_pocl("pthread"), wheel_pocl("pthread")
    backend, checked = scan([system, wheel], broken={SYSTEM_LIB: "no kernel in it"})
    assert _names(backend) == [(0, f"pthread-{MODEL}", POCL)]
    assert checked == [system, wheel]
    assert len(backend.skipped) == 1 and backend.skipped[0].endswith(
        "cannot build kernels here: no kernel in it")


def test_no_pocl_passes(scan):
    backend, _ = scan([system_pocl("pthread"), wheel_pocl("pthread")],
                      broken={SYSTEM_LIB: "bad", WHEEL_LIB: "worse"})
    assert backend.devices() == []
    assert len(backend.skipped) == 2 and "apt install pocl-opencl-icd" in backend.reason


def test_several_devices_of_the_used_platform_stay(scan):
    """POCL_DEVICES="pthread pthread" gives two devices in each PoCL: the two of the used
    one are listed, with indices in order, and the GPU after them."""
    backend, _ = scan([wheel_pocl("pthread", "pthread"), system_pocl("pthread", "pthread"),
                       nvidia_gpu()])
    assert _names(backend) == [(0, f"pthread-skylake-avx512-{MODEL}", POCL),
                               (1, f"pthread-skylake-avx512-{MODEL}", POCL),
                               (2, "NVIDIA H100", "NVIDIA CUDA")]


def test_pocl_is_preferred_to_another_cpu_runtime(scan):
    backend, _ = scan([intel_cpu(), wheel_pocl("pthread")])
    assert [d.platform for d in backend.devices()] == [POCL]
    assert "same CPU as platform" in backend.skipped[0]
    assert backend.skipped[0].startswith("OpenCL platform Intel(R) OpenCL")


def test_gpus_are_never_left_out(scan):
    """A platform whose CPU is served by another keeps its GPUs (PoCL with its CUDA
    driver); two GPU platforms keep all their GPUs."""
    pocl_cuda = system_pocl("pthread").add(FakeDevice("NVIDIA H100", kind=GPU))
    backend, _ = scan([intel_cpu(), pocl_cuda, nvidia_gpu(), nvidia_gpu()])
    assert [(d.name, d.device_type) for d in backend.devices()] == [
        (f"pthread-skylake-avx512-{MODEL}", "cpu"), ("NVIDIA H100", "gpu"),
        ("NVIDIA H100", "gpu"), ("NVIDIA H100", "gpu")]
    backend, _ = scan([wheel_pocl("pthread"), pocl_cuda], {SYSTEM_LIB: "bad"})
    assert [d.name for d in backend.devices()] == [f"pthread-{MODEL}"]  # broken: all out
    pocl_cuda_wheel = wheel_pocl("pthread").add(FakeDevice("NVIDIA H100", kind=GPU))
    backend, _ = scan([pocl_cuda_wheel, system_pocl("pthread")])
    assert [d.name for d in backend.devices()] == [
        "NVIDIA H100", f"pthread-skylake-avx512-{MODEL}"]


def test_another_processor_is_not_this_cpu(scan):
    """A CPU device that is not this machine's processor (by its name) is kept."""
    other = FakePlatform("Remote", "OpenCL 3.0 remote", "/opt/remote.so",
                         [FakeDevice("pthread-Other CPU 1")])
    backend, _ = scan([system_pocl("pthread"), other])
    assert len(backend.devices()) == 2 and backend.skipped == []


def test_the_checks_child_lists_every_platform(scan, monkeypatch):
    """The check's child process finds the device under test whichever PoCL it is."""
    monkeypatch.setattr(opencl, "_IN_PROBE", True)
    backend, _ = scan([system_pocl("pthread"), wheel_pocl("pthread")])
    assert len(backend.devices()) == 2 and backend.skipped == []


def test_info_says_which_platform_is_skipped(scan, monkeypatch, capsys):
    import json

    import sapporo.backend as be
    from sapporo.cli import main

    backend, _ = scan([wheel_pocl("pthread"), system_pocl("pthread")])
    monkeypatch.setattr(be, "_cache", {"cuda": "PyCUDA is not importable: x",
                                       "opencl": backend})
    assert main(["info", "--backend", "opencl"]) == 0
    out = capsys.readouterr().out
    assert "[opencl] 1 device(s)" in out
    assert f"  skipped: {backend.skipped[0]}\n" in out and "same CPU as platform" in out
    assert main(["info", "--backend", "opencl", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (status,) = [b for b in data["backends"] if b["name"] == "opencl"]
    assert status["skipped"] == backend.skipped and len(status["devices"]) == 1


def test_host_cpu_by_name(monkeypatch):
    monkeypatch.setattr(opencl, "_cpuinfo", lambda: {"model name": "Intel(R)  Xeon(R) X"})
    assert opencl._is_host_cpu(FakeDevice("pthread-skylake-avx512-Intel(R) Xeon(R) X"))
    assert opencl._is_host_cpu(FakeDevice("Intel(R) Xeon(R) X"))
    assert not opencl._is_host_cpu(FakeDevice("Intel(R) Xeon(R) X", kind=GPU))
    assert not opencl._is_host_cpu(FakeDevice("pthread-AMD EPYC 9654"))
    monkeypatch.setattr(opencl, "_cpuinfo", lambda: {})  # no model name (some ARM kernels)
    assert opencl._is_host_cpu(FakeDevice("pthread-cortex-a72"))


def test_this_machine_lists_its_cpu_once():
    """On this machine: the CPU devices of the backend come from one platform, and every
    other platform that exposes this CPU is reported as skipped."""
    try:
        backend = opencl.OpenCLBackend()
        devices = backend._scan()
        platforms = opencl.cl.get_platforms()
    except (BackendError, opencl.cl.Error) as exc:
        pytest.skip(f"OpenCL unusable here: {exc}")
    used = {opencl._platform_label(dev.platform) for _, dev in devices
            if opencl._is_host_cpu(dev)}
    assert len(used) <= 1, used
    exposing = [p for p in platforms if any(opencl._is_host_cpu(d) for d in p.get_devices())]
    if len(exposing) > 1:
        assert len(used) == 1
        reported = [why for why in backend.skipped
                    if "same CPU as platform" in why or "cannot build" in why]
        assert len(reported) == len(exposing) - 1, backend.skipped
    if os.environ.get("POCL_DEVICES", "").split() == ["pthread", "pthread"]:
        assert len(devices) == 2


def test_the_driver_library_of_each_platform():
    """Every platform here names the file of its driver; PyOpenCL's own PoCL ranks after a
    system PoCL."""
    try:
        platforms = opencl.cl.get_platforms()
    except opencl.cl.Error as exc:
        pytest.skip(f"no OpenCL platform: {exc}")
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("no /proc/self/maps here")
    for p in platforms:
        library = opencl._platform_library(p)
        assert os.path.isfile(library), (p.name, library)
        bundled = Path(library).resolve().is_relative_to(
            Path(opencl.cl.__file__).resolve().parent)
        if p.name.strip() == POCL:
            assert opencl._cpu_preference(p) == (1 if bundled else 0)
