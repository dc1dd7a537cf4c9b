"""Recipes for opening the C API without Python (``capi/warm.c``).

At ``g6_close`` of a run whose force calls went the C API's direct path, the C half hands
over the block shapes it ran and the fingerprint of the open (its arguments, the library
file, the CPU and the environment variables that steer sapporo, PoCL and OpenCL, as C saw
them before Python started).  :func:`write_recipe` plans those shapes again
(:meth:`Bridge.direct_plan <sapporo.capi.bridge.Bridge.direct_plan>`) and writes what C
needs to make the same objects in the next process: the runtime's objects
(:meth:`Context.native_objects <sapporo.backend.base.Context.native_objects>`), the host
memory they compute on, and the plans' words with every handle and address written as a
reference to those objects.  The files the library's behaviour depends on (sapporo's own,
the tuning profiles, ``sapporo2.config``, the OpenCL loader and drivers) are listed with
their sizes and modification times: C opens without Python only when all are unchanged.

A recipe is a text file of lines ``tag fields...``; strings are hex-encoded, so that any
character fits.  The format is read by ``warm.c`` only and may change with it
(``format``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMAT", "bridge_enums", "plan_words", "recipe_folder", "usable_recipes",
           "write_recipe"]

logger = logging.getLogger(__name__)

#: the recipe format warm.c reads (WARM_FORMAT there)
FORMAT = 1
#: a recipe's file name: the fingerprint's hash and the number of j-addresses (warm.c)
RECIPE_NAME = re.compile(r"warm-[0-9a-f]{16}-\d+\.rec")

#: environment variables that the fingerprint holds (as warm.c's warm_env_name chooses them)
ENV_PREFIXES = ("SAPPORO_", "POCL_", "OCL_", "PYOPENCL_", "CUDA_")

#: the entry points of a plan, in the order warm.c numbers them (f0 ... f5)
ENTRY_NAMES = ("set_arg", "enqueue", "flush", "finish", "event_info", "release")

_ENUMS: dict[str, int] | None = None


def bridge_enums() -> dict[str, int]:
    """The ``DP_*`` and ``DL_*`` word offsets of ``bridge.h`` (read from its text)."""
    global _ENUMS
    if _ENUMS is None:
        text = (Path(__file__).resolve().parent / "bridge.h").read_text()
        found: dict[str, int] = {}
        for body in re.findall(r"enum\s*\{([^}]*)\}", text):
            value = 0
            for item in body.split(","):
                item = item.strip()
                if not item:
                    continue
                name, _, expr = item.partition("=")
                name = name.strip()
                if expr.strip():
                    value = int(expr.strip())
                found[name] = value
                value += 1
        _ENUMS = found
    return dict(_ENUMS)


def plan_words(plan: dict[str, Any] | int) -> np.ndarray:
    """The words of a direct plan (``bridge.h``'s layout) from
    :meth:`Bridge.direct_plan <sapporo.capi.bridge.Bridge.direct_plan>`'s answer: status
    0 or -1 alone when it is a number, or when a launch does not fit the table."""
    e = bridge_enums()
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


def checksum(data: bytes) -> int:
    """64-bit FNV-1a of ``data``: the recipe's last line, checked by warm.c before it
    reads anything else (a damaged recipe is never used)."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _hex(text: str | bytes) -> str:
    """A string as one token: its bytes in hex, ``-`` when empty."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return data.hex() or "-"


def _stat_line(path: str) -> str:
    """``file`` line of a path: its size and modification time, or -1 when absent."""
    try:
        st = os.stat(path)
        return f"file {_hex(path)} {st.st_size} {st.st_mtime_ns}"
    except OSError:
        return f"file {_hex(path)} -1 0"


def _tree(root: Path) -> Iterable[str]:
    """Every folder and file under ``root`` but byte-code caches."""
    if not root.is_dir():
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        yield folder
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                yield os.path.join(folder, name)


def dependencies(loader: str) -> list[str]:
    """The files and folders whose change could change what an open does: sapporo's
    package (code, kernels, the C API), the tuning profiles, the device file of the
    working folder, the OpenCL loader, its vendor files and the drivers loaded."""
    import sapporo
    from sapporo.backend.base import kernel_dir
    from sapporo.launch import user_profile_dir

    paths: list[str] = []
    roots = [Path(sapporo.__file__).resolve().parent, Path(__file__).resolve().parent,
             user_profile_dir()]
    try:
        roots.append(kernel_dir("opencl"))
    except Exception:  # noqa: BLE001 - no kernel tree: nothing to list
        pass
    for root in dict.fromkeys(roots):
        paths.append(str(root))  # its absence too: a profile folder made later counts
        paths.extend(_tree(root))
    paths.append("sapporo2.config")  # relative: the working folder's, when C opens
    if os.environ.get("SAPPORO_CONFIG", "").strip():  # its path is a setting, its text too
        paths.append(os.path.abspath(os.environ["SAPPORO_CONFIG"].strip()))
    vendors = [os.environ.get("OCL_ICD_VENDORS", ""), "/etc/OpenCL/vendors"]
    for v in vendors:
        if v:
            paths.append(v)
            if os.path.isdir(v):
                paths.extend(os.path.join(v, f) for f in sorted(os.listdir(v)))
    paths.append(loader)
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                name = line.split()[-1] if "/" in line else ""
                base = os.path.basename(name).lower()  # libraries, not PoCL's kernel cache
                if (base.startswith("lib") and ("pocl" in base or "opencl" in base)
                        and name not in paths):
                    paths.append(name)
                    folder = os.path.dirname(name)
                    for f in sorted(os.listdir(folder)) if folder.endswith(".libs") else ():
                        if f.endswith(".icd"):
                            paths.append(os.path.join(folder, f))
    except OSError:
        pass
    return list(dict.fromkeys(paths))


def _changed_environment(fingerprint: str,
                         after: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """Variables the fingerprint covers that Python set or changed between C taking it and
    the library's open (``after``; default now): PoCL's device list and affinity. C sets
    them the same way before it loads OpenCL."""
    before: dict[str, str] = {}
    for line in fingerprint.splitlines():
        if line.startswith("env "):
            name, _, value = line[4:].partition("=")
            before[name] = value
    out = []
    for name, value in sorted((os.environ if after is None else after).items()):
        if (name.startswith(ENV_PREFIXES) and not name.startswith("SAPPORO_CAPI_WARM")
                and before.get(name) != value and "\n" not in value):
            out.append((name, value))
    return out


def _regions(objects: Any, plans: Sequence[dict[str, Any]], lib: Any) -> list[list[int]]:
    """The host memory blocks the plans and buffers use, as [start, bytes, fill] (fill:
    0 zeros, 4 int32 -1, 8 int64 -1, as the library initialises them)."""
    spans = [(host, size) for host, size, _ in objects.buffers.values() if host is not None]
    spans += [(lib._raw.ctypes.data, lib._raw.nbytes), (lib._ids.ctypes.data, lib._ids.nbytes)]
    spans.sort()
    blocks: list[list[int]] = []
    for start, size in spans:
        if blocks and start < blocks[-1][0] + blocks[-1][1]:  # overlapping: one block
            end = max(blocks[-1][0] + blocks[-1][1], start + size)
            blocks[-1][1] = end - blocks[-1][0]
        else:
            blocks.append([start, size, 0])
    for key, fill in (("dev_ids", 4), ("mirror_ids", 8)):
        for b in blocks:
            if b[0] <= plans[0][key] < b[0] + b[1]:
                b[2] = fill
    return blocks


def _ref_memory(blocks: list[list[int]], address: int) -> str:
    for m, (start, size, _) in enumerate(blocks):
        if start <= address < start + size:
            return f"m{m}+{address - start}"
    raise LookupError(f"address {address:#x} is in no known block")


def write_recipe(bridge: Any, path: str, fingerprint: str,
                 shapes: Sequence[tuple[int, int, int]],
                 env_after_open: dict[str, str] | None = None) -> bool:
    """Write the recipe of this open to ``<path>-<n>.rec`` for the library's ``n``
    j-addresses (and its kernel binaries beside it), for the block shapes ``(nj, ni,
    lists)``; ``env_after_open``: the environment as the library's open left it (default:
    now). False (logged) when this open cannot be made without Python."""
    import sapporo

    from .bridge import device_count

    lib = bridge.lib
    plans: list[dict[str, Any]] = []
    # the prediction reads derivative records as they appear: plans for each number of them
    # up to the library's, as a run that stores them one after the other meets them
    for terms in range(lib._pred_terms + 1):
        covered: set[tuple[int, int, int]] = set()
        for nj, ni, lists in sorted(set(shapes)):
            if (nj, ni, lists) in covered:
                continue
            plan = bridge.direct_plan(nj, ni, bool(lists), terms)
            if not isinstance(plan, dict):
                continue
            plan["shape"] = (nj, lists)
            plans.append(plan)
            covered.update((nj, k, lists) for k in range(plan["ni_lo"], plan["ni_hi"] + 1))
    if not plans:
        logger.debug("no recipe: no block shape could be planned")
        return False
    dev = lib._devs[0]
    launches = [x for p in plans for x in p["launch_objects"]]
    objects = dev.ctx.native_objects(launches)
    if objects is None:
        logger.debug("no recipe: the backend cannot describe its objects")
        return False
    e = bridge_enums()
    blocks = _regions(objects, plans, lib)
    folder = Path(path).parent
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"format {FORMAT}", f"fingerprint {_hex(fingerprint)}"]
    binaries = []
    for device, binary, options in objects.programs:
        name = folder / f"warm-{hashlib.sha256(binary).hexdigest()[:24]}.bin"
        if not name.is_file() or name.stat().st_size != len(binary):
            tmp = name.with_name(f".{name.name}.{os.getpid()}.tmp")
            tmp.write_bytes(binary)
            os.replace(tmp, name)
        binaries.append((device, str(name), options))
    lines += [_stat_line(p) for p in dependencies(objects.loader)]
    lines += [_stat_line(name) for _, name, _ in binaries]
    lines += [f"setenv {_hex(n)} {_hex(v)}"
              for n, v in _changed_environment(fingerprint, env_after_open)]
    lines.append(f"opencl {_hex(objects.loader)}")
    lines.append("devices " + " ".join(_hex(x) for x in (*objects.platform, *objects.devices)))
    queue_ref: dict[int, str] = {}
    for q, (handle, device) in enumerate(sorted(objects.queues.items(), key=lambda x: x[1])):
        lines.append(f"queue {q} {device}")
        queue_ref[handle] = f"q{q}"
    for m, (_, size, fill) in enumerate(blocks):
        lines.append(f"mem {m} {size} {fill}")
    buffer_ref: dict[int, str] = {}
    for b, (handle, (host, size, flags)) in enumerate(objects.buffers.items()):
        if host is None:
            lines.append(f"buffer {b} -1 0 {size} {flags}")
        else:
            ref = _ref_memory(blocks, host)
            m, off = ref[1:].split("+")
            lines.append(f"buffer {b} {m} {off} {size} {flags}")
        buffer_ref[handle] = f"b{b}"
    for p, (device, name, options) in enumerate(binaries):
        lines.append(f"program {p} {device} {_hex(name)} {_hex(options)}")
    kernel_ref: dict[int, str] = {}
    for k, (handle, (p, name)) in enumerate(objects.kernels.items()):
        lines.append(f"kernel {k} {p} {_hex(name)}")
        kernel_ref[handle] = f"k{k}"
    lines.append(f"library {bridge.npipes()} {lib.max_address} {device_count()} "
                 f"{lib._n_stored} {_hex(sapporo.__version__)}")
    memory_words = [e[f"DP_{k}"] for k in ("IDATA", "OUT", "MIRROR_RAW", "MIRROR_IDS",
                                            "DEV_RAW", "DEV_IDS", "NB_COUNTS", "NB_LISTS")]
    entry_words = {e["DP_FN_" + k.upper()]: f"f{i}" for i, k in enumerate(ENTRY_NAMES)}
    for plan in plans:
        w = plan_words(plan)
        w[e["DP_TIME_BITS"]] = 0  # a new library's time, 0.0
        w[e["DP_GEN"]] = 0
        words: list[str] = [str(int(x)) for x in w]
        for k in memory_words:
            if w[k] != 0:
                words[k] = _ref_memory(blocks, int(w[k]))
        for k, ref in entry_words.items():
            words[k] = ref
        for launch_k, launch in enumerate(plan["launches"]):
            o = e["DP_LAUNCHES"] + launch_k * e["DP_LAUNCH_WORDS"]
            words[o + e["DL_QUEUE"]] = queue_ref[launch.queue]
            words[o + e["DL_KERNEL"]] = kernel_ref[launch.kernel]
            for a, (_, bits) in enumerate(launch.args):
                if launch.buffer_args[a]:
                    words[o + e["DL_ARGS"] + 2 * a + 1] = buffer_ref[bits] if bits else "0"
        nj, lists = plan["shape"]
        lines.append(f"plan {nj} {plan['ni_lo']} {plan['ni_hi']} {lists} " + " ".join(words))
    text = "\n".join(lines) + "\n"
    text += f"end {checksum(text.encode('utf-8', 'surrogateescape')):016x}\n"
    path = f"{path}-{lib._n_stored}.rec"  # one per number of j-addresses (warm.c)
    tmp = Path(path).with_name(f".{Path(path).name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8", errors="surrogateescape")
    os.replace(tmp, path)
    logger.debug("recipe for opening without Python written to %s (%d plans)", path,
                 len(plans))
    _prune(folder)
    return True


#: kernel binaries no recipe names are removed once they are this old (seconds): a writer
#: in another process may be between its binaries and its recipe
PRUNE_AGE = 86400.0


def recipe_folder() -> Path | None:
    """Where ``warm.c`` keeps recipes (its ``warm_dir``): ``SAPPORO_KERNEL_CACHE/warm``,
    else ``$XDG_CACHE_HOME/sapporo/capi-warm``, else ``~/.cache/sapporo/capi-warm``; None
    when ``SAPPORO_KERNEL_CACHE`` switches caching off or no home folder is known."""
    cache = os.environ.get("SAPPORO_KERNEL_CACHE", "")
    if cache:
        return None if cache.lower() in ("0", "off", "no", "false") else Path(cache) / "warm"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return Path(xdg) / "sapporo" / "capi-warm"
    home = os.environ.get("HOME", "")
    return Path(home) / ".cache" / "sapporo" / "capi-warm" if home else None


def usable_recipes(folder: Path | None = None) -> list[Path]:
    """The recipes in ``folder`` (default :func:`recipe_folder`) whose C library is still
    the one they were written for."""
    folder = recipe_folder() if folder is None else folder
    if folder is None or not folder.is_dir():
        return []
    out = []
    for rec in sorted(folder.glob("warm-*.rec")):
        try:
            if RECIPE_NAME.fullmatch(rec.name) and not _library_gone(
                    rec.read_text(errors="replace")):
                out.append(rec)
        except OSError:
            continue
    return out


def _library_gone(text: str) -> bool:
    """Whether the C library a recipe was written for is gone or rebuilt (the ``lib`` line
    of its fingerprint): no open can use that recipe again."""
    found = re.search(r"(?m)^fingerprint ([0-9a-f]+)$", text)
    if found is None:
        return True
    line = re.search(r"(?m)^lib (.*) (\d+) (\d+)$",
                     bytes.fromhex(found[1]).decode("utf-8", "surrogateescape"))
    if line is None:
        return True
    try:
        st = os.stat(line[1])
    except OSError:
        return True
    return (st.st_size, st.st_mtime_ns) != (int(line[2]), int(line[3]))


def _prune(folder: Path) -> None:
    """Remove the recipes of C libraries that are gone or were rebuilt, and the kernel
    binaries no recipe names any more (best effort)."""
    import time

    try:
        named: set[str] = set()
        for rec in folder.glob("warm-*.rec"):
            text = rec.read_text(errors="replace")
            if not RECIPE_NAME.fullmatch(rec.name) or _library_gone(text):
                rec.unlink()  # an earlier naming, or its library is gone
                continue
            named.update(re.findall(r"warm-[0-9a-f]{24}\.bin", bytes.fromhex(
                "".join(re.findall(r"(?m)^program \d+ \d+ ([0-9a-f]+) ", text)))
                .decode("utf-8", "replace")))
        now = time.time()
        for b in folder.glob("warm-*.bin"):
            if b.name not in named and now - b.stat().st_mtime > PRUNE_AGE:
                b.unlink()
    except (OSError, ValueError) as exc:
        logger.debug("recipe folder %s not pruned: %s", folder, exc)
