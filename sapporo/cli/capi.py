"""``sapporo capi``: build the GRAPE-6 and GRAPE-5 library for C and Fortran, print its flags.

``build`` compiles ``libsapporo.so`` (also as ``libg6.so``, ``libg5.so``, ``libpg5.so``)
and installs it with its headers and pkg-config modules under ``--prefix``; ``flags``
prints what a Makefile needs, building first when the library is missing or stale, so
``cc prog.c $(sapporo capi flags)`` just works; ``amuse`` prints (``--install``: runs) the
pip command that builds AMUSE's ph4 and phiGRAPE GPU workers against this library, and
checks what was built (docs/capi.md).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

from sapporo.errors import InputError, SapporoError

#: AMUSE codes whose GPU worker links a GRAPE-6 library (sapporo_light), by package.
AMUSE_WORKERS = {"amuse-ph4": ("ph4", "ph4_worker_gpu"),
                 "amuse-phigrape": ("phigrape", "phigrape_worker_gpu")}


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
          "  (AMUSE from the package index ignores them: use 'sapporo capi amuse')\n")
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


def amuse_makeflags(lib_dir: Path) -> str:
    """The ``MAKEFLAGS`` that make AMUSE's worker builds link ``lib_dir/libsapporo.so``:
    assignments on make's command line win over the ``config.mk`` that ``amuse-framework``
    wrote (environment variables do not); ``CUDA_LIBS`` and ph4's ``BOOSTLIBS`` are emptied.

    Raises
    ------
    InputError
        When the path contains white space (make cannot carry it in ``MAKEFLAGS``).
    """
    if re.search(r"\s", str(lib_dir)):
        raise InputError(f"--prefix: {lib_dir} contains white space, which MAKEFLAGS cannot "
                         "carry; choose a prefix without blanks")
    return (f"SAPPORO_LIBS=-L{lib_dir}\\ -Wl,-rpath,{lib_dir}\\ -lsapporo "
            "CUDA_LIBS= BOOSTLIBS=")


def amuse_version(python: str) -> str | None:
    """The ``amuse-framework`` version installed for ``python`` (None: not installed)."""
    code = "import importlib.metadata as m; print(m.version('amuse-framework'))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True,
                              timeout=120)
    except OSError as exc:
        raise InputError(f"--python: cannot run {python}: {exc}") from None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


#: The file of ph4's source (in its sdist) that :func:`patch_ph4_initial_upload` changes.
PH4_IDATA = "src/amuse/community/ph4/src/idata.cc"
#: The statement it adds after the first forces of ``idata::setup``.
PH4_UPLOAD = "if (jdat->use_gpu) update_gpu();"
PH4_PATCH_NOTE = ("// added by sapporo capi amuse --patch-ph4-initial-upload: send the first "
                  "acc and jerk to the GRAPE")


def patch_ph4_initial_upload(source: str | os.PathLike[str]) -> Path:
    """Make ph4's GPU mode send the first accelerations and jerks to the GRAPE library.

    ph4 (AMUSE 2024.6.0) loads every particle into the library with zero acc and jerk, and
    ``idata::setup`` computes the first ones without sending them, so until a particle's
    first step the library predicts it with a/2 = jerk/6 = 0. This adds to ``idata::setup``,
    after its ``scatter()``, the call the step loop makes after every step
    (:data:`PH4_UPLOAD`).

    Parameters
    ----------
    source : path-like
        The unpacked ``amuse-ph4`` sdist (the folder holding ``src/``).

    Returns
    -------
    Path
        The file changed.

    Raises
    ------
    SapporoError
        When the file or ``idata::setup`` is missing, already sends the data, or does not
        have the expected form (one ``scatter();`` statement): nothing is changed then.
    """
    path = Path(source) / PH4_IDATA
    try:
        text = path.read_text()
    except OSError as exc:
        raise SapporoError(f"cannot patch ph4: {path}: {exc.strerror or exc}") from None
    setup = re.search(r"^void idata::setup\(\)\s*\{.*?^\}", text, re.S | re.M)
    if setup is None:
        raise SapporoError(f"cannot patch ph4: no idata::setup() in {path}")
    body = setup[0]
    if "update_gpu()" in body:
        raise SapporoError(f"ph4's idata::setup() in {path} already calls update_gpu(): "
                           "this ph4 needs no patch")
    calls = list(re.finditer(r"^([ \t]*)scatter\(\);[^\n]*$", body, re.M))
    if len(calls) != 1:
        raise SapporoError(f"cannot patch ph4: idata::setup() in {path} does not have the "
                           f"expected form (one scatter(); found {len(calls)})")
    line = calls[0]
    at = setup.start() + line.end()
    added = f"\n{line[1]}{PH4_UPLOAD}\t{PH4_PATCH_NOTE}"
    path.write_text(text[:at] + added + text[at:])
    return path


def patched_ph4_source(python: str, version: str, env: dict[str, str], work: Path) -> Path:
    """Download ``amuse-ph4==version``'s sdist for ``python``, unpack it in the folder
    ``work`` and apply :func:`patch_ph4_initial_upload`; returns the unpacked folder (a
    :class:`SapporoError` when pip cannot download it or the patch does not apply)."""
    cmd = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--no-build-isolation", f"amuse-ph4=={version}", "-d", str(work)]
    sys.stdout.write(f"running: {shlex.join(cmd)}\n")
    sys.stdout.flush()
    if subprocess.run(cmd, env=env).returncode != 0:
        raise SapporoError(f"pip could not download amuse-ph4=={version}'s source (see its "
                           "output above)")
    archives = sorted(work.glob("amuse_ph4-*.tar.gz")) + sorted(work.glob("amuse-ph4-*.tar.gz"))
    if len(archives) != 1:
        raise SapporoError(f"expected one amuse-ph4 source archive in {work}, found "
                           f"{len(archives)}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(work, filter="data")
    folders = [d for d in work.iterdir() if d.is_dir() and (d / PH4_IDATA).is_file()]
    if len(folders) != 1:
        raise SapporoError(f"{archives[0]} does not hold ph4's source ({PH4_IDATA})")
    changed = patch_ph4_initial_upload(folders[0])
    sys.stdout.write(f"patched ph4 (--patch-ph4-initial-upload): {changed}: idata::setup() "
                     f"now sends the first acc and jerk to the library ({PH4_UPLOAD})\n")
    return folders[0]


def amuse_pip_command(python: str, version: str,
                      ph4_source: Path | None = None) -> list[str]:
    """pip's command line: the GPU codes of ``version`` (ph4 from the folder ``ph4_source``,
    a patched sdist, when given), built here against the installed ``amuse-framework``,
    never from pip's cache (it would reuse a wheel built without the GPU worker), replacing
    an installed build."""
    return [python, "-m", "pip", "install", "--no-cache-dir", "--no-build-isolation",
            "--force-reinstall", "--no-deps",
            *(str(ph4_source) if package == "amuse-ph4" and ph4_source is not None
              else f"{package}=={version}" for package in AMUSE_WORKERS)]


def amuse_workers(python: str, library: Path) -> list[tuple[str, str]]:
    """Each GPU worker of :data:`AMUSE_WORKERS` and what it links as ``libsapporo.so``:
    ``(worker, verdict)`` pairs, the verdict ``ok...`` when ``ldd`` resolves it to
    ``library``."""
    out = []
    for code, worker in AMUSE_WORKERS.values():
        # AMUSE prints a list of references at exit: the path is the line marked WORKER
        find = (f"import os, amuse.community.{code} as m; "
                f"print('WORKER', os.path.join(os.path.dirname(m.__file__), {worker!r}))")
        proc = subprocess.run([python, "-c", find], capture_output=True, text=True,
                              timeout=120)
        found = re.search(r"^WORKER (.+)$", proc.stdout, re.M)
        path = Path(found[1]) if proc.returncode == 0 and found else None
        if path is None:
            out.append((worker, f"missing: {code} is not installed"))
            continue
        if not path.is_file():
            out.append((worker, f"missing: not built ({path})"))
            continue
        try:
            ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True,
                                 timeout=60).stdout
        except OSError as exc:
            out.append((worker, f"unknown: cannot run ldd: {exc} ({path})"))
            continue
        linked = re.search(r"libsapporo\.so\S*\s+=>\s+(\S+)", ldd)
        if linked and Path(linked[1]).resolve() == library.resolve():
            out.append((worker, f"ok: {path} links {linked[1]}"))
        else:
            what = linked[1] if linked else "no libsapporo.so"
            out.append((worker, f"wrong library: {path} links {what}, not {library}"))
    return out


def run_amuse(args: argparse.Namespace) -> int:
    """Print (``--install``: run) the build of AMUSE's GPU workers; check what was built."""
    b = capi_module()
    w = sys.stdout.write
    python = args.python or sys.executable
    inst = b.installation(args.prefix)
    makeflags = amuse_makeflags(inst.lib_dir)
    if args.patch_ph4_initial_upload and not args.install:
        raise InputError("--patch-ph4-initial-upload changes the build that --install runs: "
                         "give both")
    if not inst.is_current():
        sys.stderr.write(f"sapporo capi: building {inst.library} ...\n")
        b.build(inst.prefix)
    version = amuse_version(python)
    if version is None:
        raise SapporoError(
            f"amuse-framework is not installed for {python}; install it first: "
            f"{shlex.quote(python)} -m pip install amuse-framework mpi4py")
    bin_dir = str(Path(python).parent)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    w(f"AMUSE {version} for {python}; library {inst.library}\n")
    cmd = amuse_pip_command(python, version)
    if args.install:
        # amusifier, which the worker builds call, is in the environment's bin folder
        env = {**os.environ, "MAKEFLAGS": makeflags, "PATH": path}
        with tempfile.TemporaryDirectory(prefix="sapporo-ph4-") as work:
            if args.patch_ph4_initial_upload:
                source = patched_ph4_source(python, version, env, Path(work))
                cmd = amuse_pip_command(python, version, source)
            w(f"running: MAKEFLAGS={shlex.quote(makeflags)} {shlex.join(cmd)}\n")
            sys.stdout.flush()
            if subprocess.run(cmd, env=env).returncode != 0:
                raise SapporoError("pip could not install the AMUSE codes (see its output "
                                   "above)")
    else:
        w("build the GPU workers with (PATH: amusifier must be found):\n"
          f"  PATH={shlex.quote(bin_dir)}:$PATH MAKEFLAGS={shlex.quote(makeflags)} \\\n"
          f"    {shlex.join(cmd)}\n")
    verdicts = amuse_workers(python, inst.library)
    for worker, verdict in verdicts:
        w(f"{worker}: {verdict}\n")
    if args.install and not all(v.startswith("ok") for _, v in verdicts):
        w("the GPU workers were not all built against this library; pip's output above "
          "names the failure (search for 'Optional builds skipped' and 'error')\n")
        return 1
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo capi build`` and ``sapporo capi flags``."""
    p = sub.add_parser("capi", help="the GRAPE-6 library for C and Fortran programs")
    csub = p.add_subparsers(dest="capi_command", metavar="ACTION", required=True)
    b = csub.add_parser("build", help="build and install libsapporo.so (also as libg6.so, "
                        "libg5.so, libpg5.so) and headers")
    f = csub.add_parser("flags", help="print compile and link flags (builds when needed)")
    a = csub.add_parser("amuse", help="build AMUSE's ph4 and phiGRAPE GPU workers against "
                        "this library (prints the command; --install runs it)")
    for action, func in ((b, run_build), (f, run_flags), (a, run_amuse)):
        action.add_argument("--prefix", default=None, help="install prefix (default: a "
                            "per-user folder for this Python environment)")
        action.set_defaults(func=func)

    b.add_argument("--keep", metavar="DIR", default=None,
                   help="keep the generated C source and version script in DIR")

    f.add_argument("--cflags", action="store_true", help="only the compile flags (-I)")
    f.add_argument("--libs", action="store_true", help="only the link flags")

    a.add_argument("--python", default=None, metavar="PY",
                   help="the interpreter of the environment AMUSE is installed in (default: "
                        "this one)")
    a.add_argument("--install", action="store_true",
                   help="run pip (rebuilds amuse-ph4 and amuse-phigrape of the installed "
                        "amuse-framework's version), then check the workers")
    a.add_argument("--patch-ph4-initial-upload", action="store_true",
                   help="with --install: build ph4 from its source with one line added, so "
                        "that its GPU mode sends the first accelerations and jerks to the "
                        "library (ph4 2024.6.0 sends zeros; docs/accuracy.md)")
