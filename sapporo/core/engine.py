"""The Python API's small block steps in C: building and loading the step module.

:class:`~sapporo.Library` runs a block step of a few particles (``set_j_particles``,
``set_time``, ``compute``) in Python in 50-100 us on a CPU, around 5-25 us of kernels. The
module built from ``_step.c`` runs the same steps in C on plans the library made (the
launches of :mod:`sapporo.core.device`, as the C API's direct path runs them; ``sapporo/engine.h``),
with the library's checks and the same bits. What it does not take as it is goes the
library's own way, with the usual results and errors.

The module is compiled once per environment with the C compiler (``$CC``, else ``cc``) and
Python's headers, into the kernel cache (:func:`sapporo.config.kernel_cache_dir`, its
``step`` folder; a temporary folder when the cache is off or cannot be written), and
loaded from there. Without a compiler, or with ``SAPPORO_STEP_ENGINE=0``, every step takes
the Python way.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from sapporo import config

log = logging.getLogger(__name__)

__all__ = ["MODULE_NAME", "load", "plan_enums", "plan_words", "source_files", "status"]

#: the compiled module's name (its init function is PyInit__sapporo_step)
MODULE_NAME = "_sapporo_step"
#: the plan table (plan.h)
PLAN_HEADER = Path(__file__).resolve().parents[1] / "plan.h"

_STATE: dict[str, object] = {}  # "module", or "why" it is not there (once per process)


def source_files() -> list[Path]:
    """The files the module is built from: ``_step.c``, and the headers it includes."""
    shared = PLAN_HEADER.parent  # engine.h, plan.h, layout.h: shared with the C API
    return [Path(__file__).with_name("_step.c"), shared / "engine.h", PLAN_HEADER,
            shared / "layout.h"]


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CC", "cc"))


def _key() -> str:
    h = hashlib.sha256()
    for f in source_files():
        h.update(f.read_bytes())
    h.update(repr((sys.version, sys.implementation.cache_tag, sys.executable,
                   importlib.machinery.EXTENSION_SUFFIXES[0], _compiler())).encode())
    return h.hexdigest()[:16]


def _folder(temporary: bool = False) -> Path:
    """The kernel cache's ``step`` folder, or this process's temporary folder."""
    root = config.kernel_cache_dir()
    if root is not None and not temporary:
        return root / "step"
    if "tmp" not in _STATE:
        tmp = tempfile.mkdtemp(prefix="sapporo-step-")
        atexit.register(shutil.rmtree, tmp, True)
        _STATE["tmp"] = tmp
    return Path(str(_STATE["tmp"]))


def _build(path: Path) -> None:
    """Compile the module into ``path`` (written beside it, then renamed: processes that
    build at the same time each leave a whole file)."""
    files = source_files()
    paths = sysconfig.get_paths()
    includes = dict.fromkeys([paths["include"], paths["platinclude"], str(files[1].parent),
                              str(files[3].parent)])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    cmd = [*_compiler(), "-shared", "-fPIC", "-O2", "-std=gnu11",
           *(f"-I{d}" for d in includes), str(files[0]), "-o", str(tmp), "-lm"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot run the C compiler {cmd[0]!r}: {exc}") from None
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
        raise RuntimeError(f"{' '.join(cmd)} failed: " + " | ".join(tail))
    os.replace(tmp, path)
    log.info("built the compiled block step %s in %.1f s", path, time.perf_counter() - t0)


def load() -> ModuleType | None:
    """The step module (built first when needed), or None: ``SAPPORO_STEP_ENGINE=0``, no C
    compiler, no Python headers. Decided once per process; why not: :func:`status`."""
    if "module" in _STATE:
        return _STATE["module"]  # type: ignore[return-value]
    module: ModuleType | None = None
    try:
        if not config.from_environment().step_engine:
            raise RuntimeError("SAPPORO_STEP_ENGINE=0")
        name = f"{MODULE_NAME}-{_key()}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
        path = _folder() / name
        if not path.is_file():
            try:
                _build(path)
            except OSError as exc:  # a cache folder we cannot write: this process only
                log.debug("cannot build into %s (%s): a temporary folder instead",
                          path.parent, exc)
                path = _folder(temporary=True) / name
                _build(path)
        loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
        spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
        if spec is None:
            raise RuntimeError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        _STATE["why"] = f"compiled ({path})"
    except Exception as exc:  # noqa: BLE001 - the Python way always works
        module = None
        _STATE["why"] = f"not available: {exc}"
        log.info("block steps take the Python way: the compiled step is %s", _STATE["why"])
    _STATE["module"] = module
    return module


def plan_enums() -> dict[str, int]:
    """The ``DP_*`` and ``DL_*`` word offsets of ``plan.h`` (read from its text)."""
    if "enums" not in _STATE:
        found: dict[str, int] = {}
        for body in re.findall(r"enum\s*\{([^}]*)\}", PLAN_HEADER.read_text()):
            value = 0
            for item in filter(None, (i.strip() for i in body.split(","))):
                name, _, expr = item.partition("=")
                value = int(expr) if expr.strip() else value
                found[name.strip()] = value
                value += 1
        _STATE["enums"] = found
    return dict(_STATE["enums"])  # type: ignore[call-overload]


def plan_words(plan: dict[str, Any] | int) -> np.ndarray:
    """The words of a plan (``plan.h``'s layout) from :meth:`Library._direct_plan
    <sapporo.core.library.Library._direct_plan>`'s answer: its status alone (0: the Python way,
    -1: never) when it is a number, or when a launch does not fit the table."""
    e = plan_enums()
    w = np.zeros(e["DP_WORDS"], dtype=np.int64)
    if not isinstance(plan, dict):
        w[e["DP_STATUS"]] = plan
        return w
    for key in ("order", "nci", "nco", "ni_pad", "nparts", "raw_n", "pred_terms", "n_stored",
                "ds", "check_rows", "spin_ns", "time_bits", "max_id", "idata", "out",
                "mirror_raw", "mirror_ids", "dev_raw", "dev_ids", "gen", "ni_lo", "ni_hi",
                "nb_counts", "nb_lists", "nb_cap"):
        w[e["DP_" + key.upper()]] = plan[key]
    for key, value in plan["entry"].items():
        w[e["DP_FN_" + key.upper()]] = value
    for k, (launch, call_arg, ni_arg) in enumerate(zip(
            plan["launches"], plan["call_args"], plan["ni_args"], strict=True)):
        if len(launch.args) > e["DP_MAX_ARGS"] or len(launch.global_size) > 2:
            w[:] = 0
            w[e["DP_STATUS"]] = -1
            return w
        o = e["DP_LAUNCHES"] + k * e["DP_LAUNCH_WORDS"]
        gs = (*launch.global_size, 1, 1)
        ls = (*(launch.local_size or (0, 0)), 0, 0)
        w[o + e["DL_QUEUE"]], w[o + e["DL_KERNEL"]] = launch.queue, launch.kernel
        w[o + e["DL_CALL_ARG"]], w[o + e["DL_DIMS"]] = call_arg, len(launch.global_size)
        w[o + e["DL_NI_ARG"]] = ni_arg
        w[o + e["DL_G0"]], w[o + e["DL_G1"]] = gs[0], gs[1]
        w[o + e["DL_L0"]], w[o + e["DL_L1"]] = ls[0], ls[1]
        w[o + e["DL_NARGS"]] = len(launch.args)
        for a, (size, bits) in enumerate(launch.args):
            w[o + e["DL_ARGS"] + 2 * a] = size
            w[o + e["DL_ARGS"] + 2 * a + 1] = np.uint64(bits).view(np.int64)
    w[e["DP_STATUS"]] = 1
    return w


def status() -> str:
    """Whether this process runs small block steps in C, and why not (after :func:`load`)."""
    load()
    return str(_STATE["why"])
