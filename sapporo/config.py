"""All ``SAPPORO_*`` environment variables are parsed here, and nowhere else.

:func:`from_environment` reads them into a :class:`Settings`. What each one means is listed
in README.md ("Configuration"); ``SAPPORO_SITE`` in docs/capi.md, ``SAPPORO_DECOMPOSITION``
and ``SAPPORO_RANK_OUTPUT`` in docs/parallel.md.

A numeric setting out of its range (:data:`INT_RANGES`; for ``SAPPORO_ORDER`` a value that
is not 2, 4, 6 or 8) is clamped to the nearest valid value, with a warning logged once per
process: a setting never keeps a library from opening. A value that is not an integer is a
:class:`ConfigError`.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from sapporo.errors import ConfigError

BACKENDS = ("opencl", "cuda")
PRECISIONS = ("double", "double-single", "single")
ORDERS = (2, 4, 6, 8)

logger = logging.getLogger(__name__)


def _c_api_constants() -> dict[str, int]:
    """The integer macros of the C API's public header, ``capi/sapporo.h`` (package data
    of ``sapporo.capi``): the one definition of the values C clients see."""
    import importlib.util

    spec = importlib.util.find_spec("sapporo.capi")
    folders = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    folders.append(Path(__file__).resolve().parents[1] / "capi")  # a bare source checkout
    for folder in folders:
        if (folder / "sapporo.h").is_file():
            text = (folder / "sapporo.h").read_text()
            return {k: int(v) for k, v in
                    re.findall(r"^#define\s+(SAPPORO_\w+)\s+(-?\d+)\b", text, re.MULTILINE)}
    raise RuntimeError("capi/sapporo.h not found: the package is incomplete")


_C_API = _c_api_constants()
#: i-particles per GRAPE force call when ``SAPPORO_NPIPES`` is not set: clients size static
#: arrays from g6_npipes(), and some hold no more than 128 (``SAPPORO_DEFAULT_NPIPES`` of
#: capi/sapporo.h)
DEFAULT_NPIPES = _C_API["SAPPORO_DEFAULT_NPIPES"]
#: The largest ``SAPPORO_NPIPES``: clients allocate g6_npipes() entries per array, and one
#: force call's i-particles, results and neighbour lists must fit in memory (65536
#: i-particles with the default 256-entry lists: 64 MiB of lists; ``SAPPORO_MAX_NPIPES``)
MAX_NPIPES = _C_API["SAPPORO_MAX_NPIPES"]
#: The largest neighbour-list capacity per i-particle (``SAPPORO_NB_CAPACITY`` and
#: ``Library(nb_capacity=...)``)
MAX_NB_CAPACITY = 65536
#: The longest poll of ``SAPPORO_SPIN_US`` (one second; the wait sleeps after it)
MAX_SPIN_US = 1_000_000
#: the cutoff lengths (S2 diameter, or the Gaussian split) a library takes: their
#: reciprocals (times 2) stay normal floats
CUTOFF_RANGE = (1e-30, 1e30)

#: The range of each integer setting, (smallest, largest or None): the one place that
#: defines them. A value outside is clamped to the nearest end (:func:`int_setting`).
INT_RANGES: dict[str, tuple[int, int | None]] = {
    "SAPPORO_NPIPES": (1, MAX_NPIPES),
    "SAPPORO_NB_CAPACITY": (1, MAX_NB_CAPACITY),
    "SAPPORO_SPIN_US": (0, MAX_SPIN_US),
    "SAPPORO_SMALL_PAIRS": (0, None),
}

_warned: set[str] = set()  # the clamping messages already logged by this process


def _warn_once(message: str) -> None:
    """Log ``message`` as a warning the first time this process meets it (the settings
    are read again and again: by the C API, by every ``Library``)."""
    if message not in _warned:
        _warned.add(message)
        logger.warning("%s", message)


def _get(name: str) -> str | None:
    return os.environ.get(name, "").strip() or None


def parse_backend(value: str | None, source: str = "backend") -> str | None:
    """Normalise a backend name; ``None``/``auto`` mean automatic selection."""
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("", "auto"):
        return None
    if v in ("cl", "ocl"):
        v = "opencl"
    if v not in BACKENDS:
        raise ConfigError(f"{source}: unknown backend {value!r}; expected one of opencl, cuda, "
                          "auto")
    return v


def parse_devices(value: str | None, source: str = "devices") -> str | list[int] | None:
    """Parse a device selection: ``None``, ``"all"`` or a list of non-negative indices."""
    if value is None:
        return None
    v = value.strip().lower()
    if v == "all":
        return "all"
    try:
        out = [int(p) for p in v.replace(" ", "").split(",") if p != ""]
    except ValueError:
        raise ConfigError(f"{source}: expected 'all' or comma-separated device indices, got "
                          f"{value!r}") from None
    if not out or any(d < 0 for d in out):
        raise ConfigError(f"{source}: device indices must be >= 0, got {value!r}")
    return out


def parse_order(value: str | int | None, source: str = "order") -> int | None:
    """Parse an integration order (2, 4, 6 or 8)."""
    if value is None:
        return None
    try:
        order = int(value)
    except (TypeError, ValueError):
        order = None
    if order not in ORDERS:
        raise ConfigError(f"{source}: expected 2, 4, 6 or 8, got {value!r}")
    return order


def parse_precision(value: str | None, source: str = "precision") -> str | None:
    """Parse a precision name (``double``, ``double-single`` or ``single``; ``ds`` is
    accepted)."""
    if value is None:
        return None
    v = value.strip().lower().replace("_", "-")
    if v in ("ds", "doublesingle", "mixed"):
        v = "double-single"
    if v not in PRECISIONS:
        raise ConfigError(f"{source}: expected 'double', 'double-single' or 'single', got "
                          f"{value!r}")
    return v


def int_setting(name: str) -> int | None:
    """The integer setting ``name`` (a key of :data:`INT_RANGES`) from the environment;
    None when unset or blank. A value outside its range is clamped to the nearest end, and a
    warning says so (once per process and value); one that is not an integer is a
    :class:`ConfigError`."""
    raw = _get(name)
    if raw is None:
        return None
    lo, hi = INT_RANGES[name]
    what = f"an integer from {lo} to {hi}" if hi is not None else f"an integer >= {lo}"
    try:
        n = int(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected {what}, got {raw!r}") from None
    clamped = max(n, lo) if hi is None else min(max(n, lo), hi)
    if clamped != n:
        _warn_once(f"{name}={raw} is out of range (expected {what}): using {clamped}")
    return clamped


def g5_cutoff_setting() -> float | None:
    """``SAPPORO_G5_CUTOFF``: the S2 split length of the GRAPE-5 calls' cutoff force
    (Phantom-GRAPE's PG5/table fixes it at compile time as ``SFT_FOR_PM``); None when unset,
    blank or 0 (Newtonian forces).

    Raises
    ------
    ConfigError
        When the value is not a number, or not a length the library takes
        (:data:`CUTOFF_RANGE`).
    """
    text = (_get("SAPPORO_G5_CUTOFF") or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if value == 0.0:
        return None
    if not (math.isfinite(value) and CUTOFF_RANGE[0] <= value <= CUTOFF_RANGE[1]):
        raise ConfigError(f"SAPPORO_G5_CUTOFF={text!r}: expected the S2 split length of the "
                          f"GRAPE-5 cutoff force, a number from {CUTOFF_RANGE[0]:g} to "
                          f"{CUTOFF_RANGE[1]:g} (0 or unset: Newtonian forces)")
    return value


def _order_setting() -> int | None:
    """``SAPPORO_ORDER``: 2, 4, 6 or 8; None when unset. Below 2 or above 8: the nearest
    end; an odd order: the next even one (it computes everything the odd one would need)."""
    raw = _get("SAPPORO_ORDER")
    if raw is None:
        return None
    try:
        n = int(raw)
    except ValueError:
        raise ConfigError(f"SAPPORO_ORDER: expected 2, 4, 6 or 8, got {raw!r}") from None
    order = min(max(n + n % 2, ORDERS[0]), ORDERS[-1])
    if order != n:
        _warn_once(f"SAPPORO_ORDER={raw} is not one of 2, 4, 6, 8: using {order}")
    return order


def read_sapporo2_config(path: str) -> list[int] | int:
    """Read a ``sapporo2.config`` file: first line the device count, then one id per line.
    Returns, for a positive count, the first ``count`` device ids listed; for a negative
    one, ``-count``: that many devices, whichever (sapporo2's "any free ones"); for 0, 0:
    every device. :func:`sapporo.capi.bridge.open_settings` makes device lists of them."""
    try:
        with open(path) as fh:
            lines = [ln.split("#", 1)[0].strip() for ln in fh]
    except OSError as exc:
        raise ConfigError(f"cannot read device configuration {path!r}: {exc}") from None
    lines = [ln for ln in lines if ln]
    if not lines:
        raise ConfigError(f"{path}: empty device configuration")
    try:
        count = int(lines[0].split()[0])
        ids = [int(ln.split()[0]) for ln in lines[1:]]
    except ValueError:
        raise ConfigError(f"{path}: expected integers (device count, then one id per "
                          "line)") from None
    if count <= 0:
        return -count
    if len(ids) < count:
        raise ConfigError(f"{path}: says {count} devices but lists {len(ids)} ids")
    ids = ids[:count]
    if any(d < 0 for d in ids):
        raise ConfigError(f"{path}: device ids must be >= 0")
    return ids


@dataclass(frozen=True)
class Settings:
    """Settings taken from the environment (``None`` where unset)."""

    backend: str | None
    devices: str | list[int] | None
    order: int | None
    precision: str | None
    npipes: int | None
    config_file: str | None
    nb_capacity: int | None
    profile_dir: str | None
    no_profile: bool
    site: str | None
    spin_us: int | None = None
    small_pairs: int | None = None
    kernel_cache: str | None = None
    decomposition: str | None = None
    rank_output: bool = False
    mpi_check: bool = False
    native_memory: str = "auto"


def from_environment() -> Settings:
    """Read every ``SAPPORO_*`` variable: numbers out of range are clamped (with a
    warning); raise :class:`ConfigError` on malformed values."""
    return Settings(backend=parse_backend(_get("SAPPORO_BACKEND"), "SAPPORO_BACKEND"),
                    devices=parse_devices(_get("SAPPORO_DEVICES"), "SAPPORO_DEVICES"),
                    order=_order_setting(),
                    precision=parse_precision(_get("SAPPORO_PRECISION"), "SAPPORO_PRECISION"),
                    npipes=int_setting("SAPPORO_NPIPES"),
                    config_file=_get("SAPPORO_CONFIG"),
                    nb_capacity=int_setting("SAPPORO_NB_CAPACITY"),
                    profile_dir=_get("SAPPORO_PROFILE_DIR"),
                    no_profile=_flag("SAPPORO_NO_PROFILE"),
                    site=_get("SAPPORO_SITE"),
                    spin_us=int_setting("SAPPORO_SPIN_US"),
                    small_pairs=int_setting("SAPPORO_SMALL_PAIRS"),
                    kernel_cache=_get("SAPPORO_KERNEL_CACHE"),
                    decomposition=_get("SAPPORO_DECOMPOSITION"),
                    rank_output=_flag("SAPPORO_RANK_OUTPUT"),
                    mpi_check=_flag("SAPPORO_MPI_CHECK"),
                    native_memory=parse_memory(_get("SAPPORO_NATIVE_MEMORY")))


def _flag(name: str) -> bool:
    """A yes/no setting: unset, ``0``, ``no``, ``false`` and ``off`` mean no."""
    return (_get(name) or "0").lower() not in ("0", "no", "false", "off")


def parse_memory(value: str | None, source: str = "SAPPORO_NATIVE_MEMORY") -> str:
    """``auto`` (default) or ``device`` (device buffers even where host memory would do)."""
    v = (value or "auto").strip().lower()
    if v not in ("auto", "device"):
        raise ConfigError(f"{source}: expected 'auto' or 'device', got {value!r}")
    return v


def kernel_cache_dir() -> Path | None:
    """Where built kernels are kept across processes:
    ``SAPPORO_KERNEL_CACHE`` (a folder, or ``0``/``off`` for none), else the user cache
    folder's ``opencl``. Rebuilding a program from its binary takes 1-5 ms where a build
    from source takes 15-20 ms even when PoCL's own cache hits (and seconds when it does
    not), so a warm ``Library()`` opens in tens of ms."""
    env = from_environment().kernel_cache
    if env is not None:
        return None if env.lower() in ("0", "off", "no", "false") else Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("sapporo")) / "opencl"
