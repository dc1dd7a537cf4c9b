"""The native block-step engine, compiled when the package is installed.

Everything else about the package is in pyproject.toml; this file only declares the one C
extension (``sapporo.core._engine``) and turns a missing compiler into a message that says
what to install.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HELP = (
    "sapporo-nbody compiles its native block-step engine (sapporo/core/_engine.c) when it is "
    "installed, and that needs a C compiler and Python's development headers: on Debian "
    "or Ubuntu 'apt install gcc python3-dev', on Fedora 'dnf install gcc python3-devel', "
    "on macOS 'xcode-select --install'; with conda, 'conda install c-compiler'. "
    "Then run the install again."
)


class BuildEngine(build_ext):
    """build_ext whose failure says what is missing."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - distutils raises several kinds
            raise SystemExit(f"error: {HELP}\n(the compiler said: {exc})") from None

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            raise SystemExit(f"error: {HELP}\n(the compiler said: {exc})") from None


setup(
    ext_modules=[
        Extension(
            "sapporo.core._engine",
            sources=["sapporo/core/_engine.c"],
            include_dirs=["sapporo"],
            depends=["sapporo/engine_api.h", "sapporo/plan.h", "sapporo/layout.h"],
            extra_compile_args=["-O2", "-std=gnu11"],
        )
    ],
    cmdclass={"build_ext": BuildEngine},
)
