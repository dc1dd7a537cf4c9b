"""The native block-step engine and integrator core, compiled when the package is installed.

Everything else about the package is in pyproject.toml; this file only declares the two C
extensions (``sapporo.core._engine``, ``sapporo.nbody._hermite``) and turns a missing
compiler into a message that says what to install.
"""

import shutil
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HELP = (
    "sapporo-nbody compiles its native block-step engine (sapporo/core/_engine.c) and "
    "integrator core (sapporo/nbody/_hermite.c) when it is installed, and that needs a C "
    "compiler and Python's development headers: on Debian or Ubuntu 'apt install gcc "
    "python3-dev', on Fedora 'dnf install gcc python3-devel', on macOS 'xcode-select "
    "--install'; with conda, 'conda install c-compiler'. Then run the install again."
)


class BuildEngine(build_ext):
    """build_ext that says what is missing when there is no C compiler or no Python headers
    (a compiler error in the source itself is reported as the compiler gives it)."""

    def build_extension(self, ext: Extension) -> None:
        compiler = getattr(self.compiler, "compiler_so", None) or ["cc"]
        headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
        if shutil.which(compiler[0]) is None:
            raise SystemExit(f"error: {HELP}\n(no C compiler: {compiler[0]!r} not found)")
        if not headers.is_file():
            raise SystemExit(f"error: {HELP}\n(no Python headers: {headers} not found)")
        super().build_extension(ext)


setup(
    ext_modules=[
        Extension(
            "sapporo.core._engine",
            sources=["sapporo/core/_engine.c", "sapporo/core/engine.c", "sapporo/core/calls.c",
                     "sapporo/core/jstore.c", "sapporo/core/runtime.c", "sapporo/core/plan.c",
                     "sapporo/core/twin.c"],
            include_dirs=["sapporo"],
            depends=["sapporo/engine_api.h", "sapporo/plan.h", "sapporo/layout.h",
                     "sapporo/core/engine.h"],
            extra_compile_args=["-O2", "-std=gnu11"],
        ),
        Extension(
            "sapporo.nbody._hermite",
            sources=["sapporo/nbody/_hermite.c"],
            include_dirs=["sapporo"],
            depends=["sapporo/engine_api.h", "sapporo/layout.h"],
            # no FMA contraction: each formula rounds as its NumPy statement does
            extra_compile_args=["-O2", "-std=gnu11", "-ffp-contract=off"],
        ),
    ],
    cmdclass={"build_ext": BuildEngine},
)
