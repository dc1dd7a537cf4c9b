"""Fixtures for the C API tests: one library build per session, compiled test programs.

The library is built once (``sapporo capi build --prefix <tmp>``) into a session folder; the
C, C++ and Fortran programs in this folder (and the examples) are compiled against it on
first use.  Programs run
with ``PYTHONPATH``, ``LD_LIBRARY_PATH`` and every ``SAPPORO_*`` variable removed from
their environment: the library must find Python, sapporo and its dependencies by itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _which(env: str, *names: str) -> str | None:
    if os.environ.get(env):
        return shutil.which(os.environ[env].split()[0])
    for name in names:
        if path := shutil.which(name):
            return path
    return None


@dataclass
class CApi:
    """A built C API and the programs compiled against it."""

    prefix: Path
    cc: str
    fc: str | None
    workdir: Path
    cxx: str | None = None
    programs: dict[str, Path] = field(default_factory=dict)

    @property
    def lib_dir(self) -> Path:
        return self.prefix / "lib"

    @property
    def library(self) -> Path:
        return self.lib_dir / "libsapporo.so"

    def exported(self) -> set[str]:
        """The names the library exports (``nm -D``, version suffixes dropped); skips the
        test where binutils' nm is missing."""
        nm = shutil.which("nm")
        if nm is None:
            pytest.skip("nm (binutils) not found")
        out = subprocess.run([nm, "-D", "--defined-only", str(self.library)],
                             capture_output=True, text=True, check=True).stdout
        return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}

    @property
    def sites(self) -> list[str]:
        """Site directories recorded in the build (see capi/build.py)."""
        return json.loads((self.lib_dir / "sapporo-capi.json").read_text())["sites"]

    def link_flags(self, lib: str = "sapporo") -> list[str]:
        return [f"-I{self.prefix / 'include'}", f"-L{self.lib_dir}",
                f"-Wl,-rpath,{self.lib_dir}", f"-l{lib}"]

    def pc_file_flags(self, module: str) -> list[str]:
        """``--cflags --libs`` of ``PREFIX/lib/pkgconfig/<module>.pc``, read in Python."""
        return pc_file_flags(self.lib_dir / "pkgconfig" / f"{module}.pc")

    def program(self, source: str, lib: str = "sapporo", extra: tuple[str, ...] = (),
                flags: list[str] | None = None, sources: tuple[Path, ...] = ()) -> Path:
        """Compile ``tests/capi/<source>`` (C; C++ for .cc; Fortran for .f90, with any
        ``sources`` before it, e.g. a module) once; return the binary.  ``flags`` replaces
        the usual -I/-L/-l flags."""
        key = f"{source}:{lib}:{' '.join(extra)}:{flags}:{sources}"
        if key in self.programs:
            return self.programs[key]
        path = Path(source) if Path(source).is_absolute() else HERE / source
        fortran = source.endswith(".f90")
        cxx = source.endswith(".cc")
        if fortran and self.fc is None:
            pytest.skip("no Fortran compiler (gfortran) found: apt-get install gfortran")
        if cxx and self.cxx is None:
            pytest.skip("no C++ compiler (c++, g++ or clang++) found")
        exe = self.workdir / f"{path.stem}-{lib}{len(self.programs)}"
        compiler = self.fc if fortran else self.cxx if cxx else self.cc
        std = [] if fortran else ["-Wall"] if cxx else ["-std=gnu99", "-Wall"]
        link = self.link_flags(lib) if flags is None else flags
        # gfortran writes .mod files into the working directory: one per program folder
        moddir = self.workdir / f"mod-{path.stem}-{len(self.programs)}"
        mods = [f"-J{moddir}"] if fortran else []
        if fortran:
            moddir.mkdir(parents=True, exist_ok=True)
        cmd = [compiler, "-O2", *std, *mods, *map(str, sources), str(path), "-o", str(exe),
               *extra, *link, "-lm", "-pthread"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
        self.programs[key] = exe
        return exe

    @staticmethod
    def env(**extra: str) -> dict[str, str]:
        """The environment for a test program: no help to find Python or sapporo."""
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith("SAPPORO_") and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")
        }
        env.update(extra)
        return env

    def run(self, exe: Path, *args: object, cwd: Path, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        """Run a test program; with ``check``, fail showing its output when the status is not 0."""
        proc = subprocess.run([str(exe), *map(str, args)], cwd=cwd, env=env or self.env(),
                              capture_output=True, text=True, timeout=300)
        if check:
            assert proc.returncode == 0, (
                f"{exe.name} exited with {proc.returncode}\nstdout:\n{proc.stdout}\n"
                f"stderr:\n{proc.stderr}"
            )
        return proc


@pytest.fixture(scope="session")
def capi(tmp_path_factory: pytest.TempPathFactory) -> CApi:
    """Build the library once per session with ``sapporo capi build``."""
    cc = _which("CC", "cc", "gcc", "clang")
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) found: the C API cannot be built")
    prefix = tmp_path_factory.mktemp("capi-prefix")
    proc = subprocess.run(
        [sys.executable, "-m", "sapporo.cli", "capi", "build", "--prefix", str(prefix)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, f"sapporo capi build failed:\n{proc.stdout}{proc.stderr}"
    return CApi(prefix=prefix, cc=cc, fc=_which("FC", "gfortran"),
                workdir=tmp_path_factory.mktemp("capi-programs"),
                cxx=_which("CXX", "c++", "g++", "clang++"))


def pc_file_flags(path: Path) -> list[str]:
    """What ``pkg-config --cflags --libs`` prints for the .pc file ``path``, read in Python
    (variables expanded; enough for the files ``sapporo capi build`` writes)."""
    variables: dict[str, str] = {}
    fields: dict[str, str] = {}

    def expand(text: str) -> str:
        return re.sub(r"\$\{(\w+)\}", lambda m: variables[m[1]], text)

    for line in path.read_text().splitlines():
        if m := re.match(r"^(\w+)=(.*)$", line):
            variables[m[1]] = expand(m[2].strip())
        elif m := re.match(r"^(\w[\w.]*):\s*(.*)$", line):
            fields[m[1]] = expand(m[2].strip())
    return [*shlex.split(fields.get("Cflags", "")), *shlex.split(fields.get("Libs", ""))]


#: a test program's embedded interpreter imports this (as sitecustomize) and then runs on
#: the emulated CUDA: the fake PyCUDA in sys.modules, the emulated driver loaded
_EMULATE = """
import sys
sys.path.insert(0, {tests!r})
from cudaemu import driver_library
from cudaemu.fake_pycuda import make_fake_pycuda
sys.modules.update(make_fake_pycuda(execute=True))
driver_library()
sys.stderr.write("cudaemu: the emulated CUDA\\n")
"""


@pytest.fixture
def cuda_env(tmp_path: Path, cuda_gpu: bool) -> dict[str, str]:
    """The environment (for :meth:`CApi.env`) in which a test program opens the CUDA
    backend: a real GPU's where one is usable, else the emulation of tests/cudaemu (the
    only PyCUDA there: with ``SAPPORO_BACKEND=cuda`` the program runs on it or fails to
    open; its stderr then says ``cudaemu: the emulated CUDA``)."""
    import cudaemu

    if cuda_gpu:
        return {"SAPPORO_BACKEND": "cuda"}
    if not cudaemu.available()[0] or cudaemu.driver_library() is None:
        pytest.skip("no C/C++ compiler for the CUDA emulation")
    site = tmp_path / "emulated-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        _EMULATE.format(tests=str(Path(__file__).resolve().parents[1])))
    return {"SAPPORO_BACKEND": "cuda", "PYTHONPATH": str(site)}
