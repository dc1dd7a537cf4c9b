"""Build and install ``libsapporo.so`` (and its names ``libg6.so``, ``libg5.so``,
``libpg5.so``), the GRAPE-6 and GRAPE-5 APIs for C and Fortran.

The library is made with cffi's embedding support (:func:`make_ffi`): the functions of
``bridge.h`` are implemented in Python by :mod:`sapporo.capi.bridge`, ``shim.c`` and ``g5.c``
are pasted in, and the C compiler (``$CC``, default ``cc``) links the result against this
interpreter's ``libpython``, exporting only ``g6*``, ``g5*``, ``sapporo_*`` and
``get_device_count``. Installed under a prefix: ``include/`` (:data:`HEADERS`), ``lib/``
(:data:`LIBRARY` and its :data:`ALIASES`, and :data:`STAMP`, what was built, for staleness
checks) and ``lib/pkgconfig/`` (:data:`PKGCONFIG`, the names AMUSE's configure looks for).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sapporo.errors import BuildError, SapporoError

__all__ = ["Installation", "build", "default_prefix", "flags", "installation", "make_ffi"]

logger = logging.getLogger(__name__)

#: cffi module name of the embedded extension (never importable from outside).
MODULE_NAME = "_sapporo_capi"
LIBRARY = "libsapporo.so"
ALIASES = ("libg6.so", "libg5.so", "libpg5.so")
HEADERS = ("grape6.h", "grape5.h", "gp5util.h", "sapporo.h")
#: pkg-config modules installed in PREFIX/lib/pkgconfig: name -> (library, description).
PKGCONFIG = {
    "sapporo_light": ("sapporo", "sapporo-nbody's GRAPE-6 library, for codes that link "
                      "sapporo_light or Sapporo2"),
    "sapporo": ("sapporo", "sapporo-nbody's GRAPE-6 library (libsapporo)"),
    "g6lib": ("g6", "sapporo-nbody's GRAPE-6 library under the name libg6"),
    "g5lib": ("g5", "sapporo-nbody's GRAPE-5 library (Phantom-GRAPE's PG5 calls) under the "
              "name libg5"),
}
STAMP = "sapporo-capi.json"
_SOURCES = ("shim.c", "shim.h", "g5.c", "bridge.h", "bridge.py", "grape6.h", "grape5.h",
            "gp5util.h", "sapporo.h", "build.py")

#: Exported ABI: ``g6*``, ``g5*``, ``sapporo_*`` and sapporo_light's ``get_device_count``;
#: every other symbol (cffi's PyInit_, the bridge functions) becomes local.
VERSION_SCRIPT = (
    "{\n  global:\n    g6*;\n    g5*;\n    sapporo_*;\n    get_device_count;\n"
    "  local:\n    *;\n};\n"
)

#: Functions of shim.c that Python calls (shim_report: an error of Python's, recorded and
#: printed as the C half's are), plus the error codes read from sapporo.h.
_CDEF_HELPERS = """
void shim_report(int code, const char *message, int every_time);
void shim_mark_ready(void);
"""

#: Run by shim.c right after it starts the interpreter (before cffi imports _cffi_backend):
#: the directories recorded when the library was built go first on sys.path, their .pth
#: files processed. SAPPORO_SITE replaces them; it is read here, not in sapporo.config,
#: because sapporo is not importable before these directories are added.
_SITE_CODE = """\
def _sapporo_add_sites():
    import os, site, sys
    override = os.environ.get("SAPPORO_SITE", "").strip()
    dirs = [d for d in override.split(os.pathsep) if d] if override else {sites!r}
    before = list(sys.path)
    for d in dirs:
        site.addsitedir(d)
    sys.path[:] = [p for p in sys.path if p not in before] + before
_sapporo_add_sites()
del _sapporo_add_sites
"""

#: cffi's embedding_init_code: import the real package and bind the Python functions.
_INIT_CODE = """\
from {module} import ffi, lib
from sapporo.capi.bridge import bind

bind(ffi, lib)
"""


def _c_string(text: str) -> str:
    """``text`` (UTF-8) as a C string literal."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch == "\n":
            out.append("\\n")
        elif 32 <= byte < 127 and ch not in '"\\?':
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def source_dir() -> Path:
    """The folder holding ``shim.c`` and the headers (this package)."""
    return Path(__file__).resolve().parent


def _layout_header() -> Path:
    """sapporo/layout.h, which shim.c includes (engine_api.h lies beside it)."""
    from sapporo.core.layout import LAYOUT_HEADER

    return LAYOUT_HEADER


def _read(name: str) -> str:
    return (source_dir() / name).read_text()


def recorded_sites() -> list[str]:
    """Directories the embedded interpreter adds before importing sapporo: the folder that
    holds the ``sapporo`` package in use (the source checkout of an editable install), this
    interpreter's site directories and the user site directory when enabled."""
    import sapporo

    dirs = [str(Path(sapporo.__file__).resolve().parents[1])]
    dirs += site.getsitepackages()
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def _error_code_names() -> list[str]:
    return re.findall(r"^#define\s+(SAPPORO_(?:OK|ERR_\w+))\s", _read("sapporo.h"), re.M)


def make_ffi(sites: list[str]):  # noqa: ANN201 (cffi.FFI, imported lazily)
    """The cffi ``FFI`` object of the embedding (not compiled); ``sites`` as recorded."""
    import cffi

    ffi = cffi.FFI()
    ffi.embedding_api(_read("bridge.h"))
    ffi.cdef(_CDEF_HELPERS + "".join(f"#define {n} ...\n" for n in _error_code_names()))
    site_code = _SITE_CODE.format(sites=sites)
    ffi.set_source(
        MODULE_NAME,
        f"static const char shim_python[] = {_c_string(sys.executable)};\n"
        f"static const char shim_site_code[] = {_c_string(site_code)};\n"
        '#include "shim.c"\n',
    )
    ffi.embedding_init_code(_INIT_CODE.format(module=MODULE_NAME))
    return ffi


@dataclass(frozen=True)
class _PythonLink:
    include_dirs: list[str]
    library_dir: str
    library: str


def _python_link() -> _PythonLink:
    """Where this interpreter's headers and shared ``libpython`` are."""
    cfg = sysconfig.get_config_var
    paths = sysconfig.get_paths()
    includes = list(dict.fromkeys([paths["include"], paths["platinclude"]]))
    name = f"python{cfg('LDVERSION') or cfg('VERSION')}"
    dirs = [cfg("LIBDIR"), cfg("LIBPL")]
    if cfg("MULTIARCH") and cfg("LIBDIR"):
        dirs.append(os.path.join(cfg("LIBDIR"), cfg("MULTIARCH")))
    for d in dirs:
        if d and os.path.exists(os.path.join(d, f"lib{name}.so")):
            return _PythonLink(includes, d, name)
    raise BuildError(
        f"no shared lib{name}.so found (looked in {', '.join(d for d in dirs if d)}): the C "
        "API embeds Python and needs an interpreter built with --enable-shared",
        options=[], log="", source_path=None,
    )


def _fingerprint(sites: list[str]) -> str:
    """What a build depends on: sources, versions, interpreter, recorded site directories."""
    import cffi

    import sapporo

    h = hashlib.sha256()
    for name in _SOURCES:
        h.update((source_dir() / name).read_bytes())
    h.update(_layout_header().read_bytes())
    h.update(_layout_header().with_name("engine_api.h").read_bytes())
    h.update(repr((sapporo.__version__, cffi.__version__, sys.executable, sites)).encode())
    return h.hexdigest()[:16]


def default_prefix() -> Path:
    """Per-user, per-environment install prefix, ``<user data dir>/sapporo/capi/<env>``:
    every environment (``sys.prefix``) and Python version gets its own library, linked to
    its own ``libpython``."""
    import platformdirs

    key = hashlib.sha256(os.path.abspath(sys.prefix).encode()).hexdigest()[:10]
    env = f"{Path(sys.prefix).name}-py{sys.version_info[0]}{sys.version_info[1]}-{key}"
    return Path(platformdirs.user_data_path("sapporo")) / "capi" / env


@dataclass(frozen=True)
class Installation:
    """Paths of a built C API under ``prefix``."""

    prefix: Path

    @property
    def include_dir(self) -> Path:
        """``PREFIX/include`` (grape6.h, sapporo.h)."""
        return self.prefix / "include"

    @property
    def lib_dir(self) -> Path:
        """``PREFIX/lib`` (libsapporo.so, libg6.so)."""
        return self.prefix / "lib"

    @property
    def library(self) -> Path:
        """``PREFIX/lib/libsapporo.so``."""
        return self.lib_dir / LIBRARY

    @property
    def pkgconfig_dir(self) -> Path:
        """``PREFIX/lib/pkgconfig`` (for ``PKG_CONFIG_PATH``)."""
        return self.lib_dir / "pkgconfig"

    def is_current(self) -> bool:
        """Whether the library exists and was built from these sources by this Python."""
        try:
            stamp = json.loads((self.lib_dir / STAMP).read_text())
        except (OSError, ValueError):
            return False
        return (
            self.library.is_file()
            and all((self.include_dir / h).is_file() for h in HEADERS)
            and (not _pkgconfig_possible(self.prefix)
                 or all((self.pkgconfig_dir / f"{m}.pc").is_file() for m in PKGCONFIG))
            and stamp.get("fingerprint") == _fingerprint(recorded_sites())
        )


def installation(prefix: str | os.PathLike[str] | None = None) -> Installation:
    """The :class:`Installation` under ``prefix`` (default: :func:`default_prefix`)."""
    return Installation(Path(prefix).expanduser().resolve() if prefix else default_prefix())


def build(prefix: str | os.PathLike[str] | None = None, sites: list[str] | None = None,
          keep_dir: str | os.PathLike[str] | None = None) -> Installation:
    """Compile ``libsapporo.so`` and install it, its aliases and the headers under ``prefix``
    (default :func:`default_prefix`), the embedded interpreter to add ``sites`` (default
    :func:`recorded_sites`); ``keep_dir``: where the generated C file and version script
    are kept (default: a temporary folder, removed after a successful build).

    Raises
    ------
    BuildError
        When the compiler fails (the message has the command and its output).
    """
    inst = installation(prefix)
    link = _python_link()
    sites = recorded_sites() if sites is None else sites
    ffi = make_ffi(sites)
    work = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="sapporo-capi-"))
    work.mkdir(parents=True, exist_ok=True)
    c_file = work / f"{MODULE_NAME}.c"
    with contextlib.redirect_stdout(io.StringIO()):  # cffi prints 'generating ...'
        ffi.emit_c_code(str(c_file))
    map_file = work / "exports.map"
    map_file.write_text(VERSION_SCRIPT)
    inst.lib_dir.mkdir(parents=True, exist_ok=True)
    inst.include_dir.mkdir(parents=True, exist_ok=True)
    tmp_lib = inst.lib_dir / f".{LIBRARY}.{os.getpid()}.tmp"
    cmd = [
        *shlex.split(os.environ.get("CC", "cc")),
        "-shared", "-fPIC", "-O2", "-pthread", "-fvisibility=hidden",
        f"-I{source_dir()}", f"-I{_layout_header().parent}",
        *(f"-I{d}" for d in link.include_dirs),
        str(c_file), str(source_dir() / "g5.c"), "-o", str(tmp_lib),
        f"-Wl,-soname,{LIBRARY}", f"-Wl,--version-script={map_file}", "-Wl,-Bsymbolic",
        "-Wl,-z,defs", f"-L{link.library_dir}", f"-l{link.library}",
        f"-Wl,-rpath,{link.library_dir}", "-lm", "-ldl",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise BuildError(f"cannot run the C compiler {cmd[0]!r}: {exc} (set CC)",
                         options=cmd, log="", source_path=str(c_file)) from None
    if proc.returncode != 0:
        tmp_lib.unlink(missing_ok=True)
        raise BuildError(f"building {LIBRARY} failed:\n{shlex.join(cmd)}\n{proc.stderr.strip()}",
                         options=cmd, log=proc.stdout + proc.stderr, source_path=str(c_file))
    os.replace(tmp_lib, inst.library)
    for alias in ALIASES:
        tmp_link = inst.lib_dir / f".{alias}.{os.getpid()}.tmp"
        tmp_link.unlink(missing_ok=True)
        tmp_link.symlink_to(LIBRARY)
        os.replace(tmp_link, inst.lib_dir / alias)
    for header in HEADERS:
        shutil.copyfile(source_dir() / header, inst.include_dir / header)
    write_pkgconfig(inst)
    stamp = {
        "fingerprint": _fingerprint(sites),
        "python": sys.executable,
        "libpython": os.path.join(link.library_dir, f"lib{link.library}.so"),
        "sites": sites,
    }
    (inst.lib_dir / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    if not keep_dir:
        shutil.rmtree(work, ignore_errors=True)
    return inst


def _pkgconfig_possible(prefix: Path) -> bool:
    return not any(c.isspace() or c in "$\\\"'#" for c in str(prefix))


def write_pkgconfig(inst: Installation) -> None:
    """Write every module of :data:`PKGCONFIG` into ``PREFIX/lib/pkgconfig``: ``pkg-config
    --cflags --libs sapporo_light`` then prints what ``flags(inst)`` prints. A prefix with
    blanks gets no ``.pc`` files (pkg-config cannot express it); the library is installed
    all the same."""
    import sapporo

    if not _pkgconfig_possible(inst.prefix):
        return
    inst.pkgconfig_dir.mkdir(parents=True, exist_ok=True)
    for module, (lib, description) in PKGCONFIG.items():
        (inst.pkgconfig_dir / f"{module}.pc").write_text(
            f"prefix={inst.prefix}\nlibdir=${{prefix}}/lib\nincludedir=${{prefix}}/include\n\n"
            f"Name: {module}\nDescription: {description}\nVersion: {sapporo.__version__}\n"
            "Cflags: -I${includedir}\n"
            f"Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -l{lib}\n")


def flags(inst: Installation, which: str = "all") -> str:
    """Compiler and linker flags for a program using the installation.

    ``which``: ``"cflags"`` (``-I``), ``"libs"`` (``-L``, rpath, ``-lsapporo``) or ``"all"``.
    """
    cflags = [f"-I{inst.include_dir}"]
    libs = [f"-L{inst.lib_dir}", f"-Wl,-rpath,{inst.lib_dir}", "-lsapporo"]
    chosen = {"cflags": cflags, "libs": libs, "all": cflags + libs}.get(which)
    if chosen is None:
        raise SapporoError(f"which must be 'cflags', 'libs' or 'all', got {which!r}")
    return " ".join(shlex.quote(f) for f in chosen)
