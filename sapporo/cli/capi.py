"""``sapporo capi``: build the GRAPE-6 library for C and Fortran, and print its flags.

``sapporo capi build [--prefix DIR]`` compiles ``libsapporo.so`` (and ``libg6.so``) and
installs it with ``grape6.h`` and ``sapporo.h`` into ``DIR/lib`` and ``DIR/include``, and
pkg-config modules (``sapporo_light``, ``sapporo``, ``g6lib``) into ``DIR/lib/pkgconfig``;
``sapporo capi flags [--prefix DIR]`` prints what a Makefile needs, building first when the
library is missing or stale, so ``cc prog.c $(sapporo capi flags)`` just works.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def capi_module(name: str = "build") -> ModuleType:
    """Import ``sapporo.capi.<name>``, also from a source checkout that is not installed.

    Installed, ``sapporo.capi`` is the ``capi/`` folder (setuptools maps it); from a bare
    checkout on ``PYTHONPATH`` it is loaded from ``capi/`` next to the ``sapporo`` folder.
    """
    try:
        importlib.import_module("sapporo.capi")
    except ModuleNotFoundError as exc:
        if exc.name != "sapporo.capi":
            raise
        folder = Path(__file__).resolve().parents[2] / "capi"
        spec = importlib.util.spec_from_file_location(
            "sapporo.capi", folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        if spec is None or spec.loader is None:  # pragma: no cover
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules["sapporo.capi"] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"sapporo.capi.{name}")


def run_build(args: argparse.Namespace) -> int:
    """Build and install; print where, and the flags to use."""
    b = capi_module()
    inst = b.build(args.prefix, keep_dir=args.keep)
    w = sys.stdout.write
    w(f"built {inst.library}\n")
    for alias in b.ALIASES:
        w(f"      {inst.lib_dir / alias} -> {b.LIBRARY}\n")
    w(f"headers in {inst.include_dir}: {', '.join(b.HEADERS)}\n")
    pcs = sorted(p.stem for p in inst.pkgconfig_dir.glob("*.pc"))
    if pcs:
        w(f"pkg-config modules in {inst.pkgconfig_dir}: {', '.join(pcs)}\n"
          f"  (for AMUSE: export PKG_CONFIG_PATH={inst.pkgconfig_dir}:$PKG_CONFIG_PATH)\n")
    w(f"flags: {b.flags(inst)}\n")
    return 0


def run_flags(args: argparse.Namespace) -> int:
    """Print the flags (building first when needed; progress goes to stderr)."""
    b = capi_module()
    inst = b.installation(args.prefix)
    if not inst.is_current():
        sys.stderr.write(f"sapporo capi: building {inst.library} ...\n")
        b.build(inst.prefix)
    which = "all" if args.cflags == args.libs else "cflags" if args.cflags else "libs"
    sys.stdout.write(b.flags(inst, which) + "\n")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo capi build`` and ``sapporo capi flags``."""
    p = sub.add_parser("capi", help="the GRAPE-6 library for C and Fortran programs")
    csub = p.add_subparsers(dest="capi_command", metavar="ACTION", required=True)
    prefix_help = "install prefix (default: a per-user folder for this Python environment)"

    b = csub.add_parser("build", help="build and install libsapporo.so, libg6.so and headers")
    b.add_argument("--prefix", default=None, help=prefix_help)
    b.add_argument("--keep", metavar="DIR", default=None,
                   help="keep the generated C source and version script in DIR")
    b.set_defaults(func=run_build)

    f = csub.add_parser("flags", help="print compile and link flags (builds when needed)")
    f.add_argument("--prefix", default=None, help=prefix_help)
    f.add_argument("--cflags", action="store_true", help="only the compile flags (-I)")
    f.add_argument("--libs", action="store_true", help="only the link flags")
    f.set_defaults(func=run_flags)
