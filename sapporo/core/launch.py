"""Launch parameters of the force kernels: built-in defaults and tuning profiles.

A :class:`LaunchTable` maps the number of active i-particles to a :class:`LaunchConfig`.
Tables come from a tuning profile (JSON written by ``sapporo tune``, keyed by backend,
device name, order and precision) when one matches, else from built-in defaults chosen by
device type. Profiles are data, never code.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from sapporo import config
from sapporo.backend import capabilities
from sapporo.backend.base import DeviceInfo
from sapporo.core import layout
from sapporo.errors import ConfigError

log = logging.getLogger(__name__)

#: i-particles per kernel launch; larger blocks are cut into chunks of this size.
NI_CHUNK = layout.NI_CHUNK


@dataclass(frozen=True)
class LaunchConfig:
    """Shape of one force-kernel launch.

    Parameters
    ----------
    li, lj : int
        Work-group shape: ``li`` work-items over i times ``lj`` lanes over j.
    w : int
        i-particles per work-item (OpenCL vector width; 1 on GPUs).
    jt : int
        j-particles per tile.
    use_local : bool
        Stage tiles in local/shared memory (GPUs) or read them from global memory (CPUs).
    groups_per_cu : int
        The j-range is cut into parts until there are about this many work-groups per
        compute unit (so that a single active particle still fills the device).
    min_jchunk : int
        Never cut the j-range into parts shorter than this.
    jv : bool
        Vector lanes over j-particles instead of i-particles: one i-particle per work-item,
        ``w`` (4 or 8) j-particles per step (CPUs, few active particles).
    """

    li: int = 1
    lj: int = 1
    w: int = 8
    jt: int = 64
    use_local: bool = False
    groups_per_cu: int = 4
    min_jchunk: int = 256
    jv: bool = False

    def __post_init__(self) -> None:
        if self.li < 1 or self.lj < 1 or self.jt < 1 or self.groups_per_cu < 1:
            raise ConfigError(f"invalid launch configuration {self}")
        if self.w not in (1, 2, 4, 8, 16):
            raise ConfigError(f"launch configuration: w must be 1, 2, 4, 8 or 16, got {self.w}")
        if self.lj > 1 and self.w != 1:
            raise ConfigError("launch configuration: lj > 1 needs w == 1")
        if self.use_local and self.jt % (self.li * self.lj):
            raise ConfigError("launch configuration: jt must be a multiple of li * lj")
        if self.jv and (self.w not in (4, 8) or self.li != 1 or self.lj != 1
                        or self.use_local or self.jt % self.w):
            raise ConfigError("launch configuration: jv needs w = 4 or 8, li = lj = 1, no "
                              "local memory and jt a multiple of w")

    def defines(self) -> dict[str, int]:
        """The kernel's compile-time definitions for this shape."""
        return {"LI": self.li, "LJ": self.lj, "W": self.w, "JT": self.jt,
                "USE_LOCAL": int(self.use_local), "JV": int(self.jv)}

    def local_bytes(self, order: int, precision: str) -> int:
        """Local (shared) memory one work-group of this shape uses."""
        if not self.use_local and self.lj == 1:
            return 0
        ds = precision != "double"  # (float records: double-single, single)
        rs = 16 if ds else 32  # one real4
        # position and id (and the position's low part), velocity, acceleration, jerk
        per_j = rs + 4 + (16 if ds else 0) + rs * ((order >= 4) + (order >= 6) + (order >= 8))
        tile = per_j * self.jt if self.use_local else 0
        lanes = (15 if order >= 8 else 12) * 8 * self.li * self.lj if self.lj > 1 else 0
        return tile + lanes

    @property
    def i_per_group(self) -> int:
        """i-particles per work-group."""
        return self.li if self.jv else self.li * self.w

    @property
    def i_per_item(self) -> int:
        """i-particles per work-item."""
        return 1 if self.jv else self.w

    @property
    def j_align(self) -> int:
        """Parts of the j-range start at multiples of this."""
        return self.w if self.jv else 1


@dataclass
class LaunchTable:
    """Launch configurations by number of active i-particles (``ni <= ni_max``)."""

    entries: list[tuple[int, LaunchConfig]]
    source: str = "defaults"
    meta: dict[str, Any] = field(default_factory=dict)

    def for_ni(self, ni: int) -> LaunchConfig:
        """The configuration for a launch of ``ni`` i-particles."""
        for ni_max, cfg in self.entries:
            if ni <= ni_max:
                return cfg
        return self.entries[-1][1]

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable form (the profile format)."""
        return {
            **self.meta,
            "entries": [{"ni_max": n, **asdict(c)} for n, c in self.entries],
        }


def default_table(info: DeviceInfo, order: int, precision: str) -> LaunchTable:
    """Built-in launch parameters for a device type."""
    if info.device_type == "cpu":
        # Explicit vectors over i are what makes PoCL emit SIMD code; a register's worth of
        # i-particles per work-item: 8 floats or 4 doubles with AVX2, 16 or 8 with AVX-512
        # (there 17-25% faster than 8 / 4 from 16 active particles up, and as fast below, on
        # Zen 4: docs/performance.md).
        # One or two active particles would leave most lanes idle: there the lanes run over
        # j-particles instead (jv). Kernel time at N = 16k, order 4, one / two active
        # particles: 55 / 130 us (double-single) and 61 / 126 us (double) against 180 / 178
        # and 204 / 210 with the lanes over i-particles.
        # Three or four active particles: 4 per work-item (double with AVX-512: 140 against
        # 201 us; the same time elsewhere).
        floats = 16 if info.float_lanes >= 16 else 8
        w = floats if precision != "double" else floats // 2
        few = LaunchConfig(li=1, lj=1, w=8, jt=64, use_local=False, groups_per_cu=2, jv=True)
        cfg = LaunchConfig(li=1, lj=1, w=w, jt=64, use_local=False, groups_per_cu=4)
        four = [(4, replace(cfg, w=4))] if w > 4 else []
        return LaunchTable([(2, few), *four, (NI_CHUNK, cfg)], source="defaults (cpu)")
    # GPUs: one i-particle per work-item; few active particles share a group across j-lanes.
    # At most 128 work-items and 32 KiB of local memory per group (fits NVIDIA, AMD, Intel).
    entries = [
        (1, LaunchConfig(li=1, lj=128, w=1, jt=128, use_local=True, groups_per_cu=4)),
        (8, LaunchConfig(li=8, lj=16, w=1, jt=128, use_local=True, groups_per_cu=4)),
        (32, LaunchConfig(li=32, lj=4, w=1, jt=128, use_local=True, groups_per_cu=4)),
        (128, LaunchConfig(li=64, lj=2, w=1, jt=128, use_local=True, groups_per_cu=4)),
        (NI_CHUNK, LaunchConfig(li=128, lj=1, w=1, jt=128, use_local=True, groups_per_cu=4)),
    ]
    return LaunchTable(entries, source="defaults (gpu)")


def check_table(table: LaunchTable, info: DeviceInfo, order: int, precision: str) -> None:
    """Raise :class:`ConfigError` when a configuration does not fit the device."""
    for _, cfg in table.entries:
        need = cfg.local_bytes(order, precision)
        if need > info.local_mem_size:
            raise ConfigError(f"launch configuration {cfg} needs {need} bytes of local memory, "
                              f"{info.name} has {info.local_mem_size}")
        caps = capabilities(info.backend)
        if cfg.jv and not caps.jv:
            raise ConfigError(f"launch configuration {cfg}: the {info.backend} kernels have "
                              "no jv variant")
        if cfg.w not in caps.widths:
            raise ConfigError(
                f"launch configuration {cfg}: w must be one of "
                f"{', '.join(map(str, caps.widths))} on {info.backend} (i-particles per "
                "work-item)")
        if cfg.li * cfg.lj > info.max_work_group_size:
            raise ConfigError(f"launch configuration {cfg} has {cfg.li * cfg.lj} work-items per "
                              f"group, {info.name} allows {info.max_work_group_size}")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def profile_name(info: DeviceInfo, order: int, precision: str) -> str:
    """File name of the tuning profile for a device, order and precision."""
    return f"{info.backend}-{_slug(info.name)}-order{order}-{precision}.json"


def user_profile_dir() -> Path:
    """Where ``sapporo tune`` writes profiles (``SAPPORO_PROFILE_DIR`` overrides)."""
    env = config.from_environment()
    if env.profile_dir:
        return Path(env.profile_dir)
    import platformdirs

    from sapporo import __version__

    version = __version__.rsplit(".", 1)[0]
    return Path(platformdirs.user_cache_dir("sapporo", version=version)) / "profiles"


def _shipped_profile_dir() -> Path | None:
    try:
        path = Path(str(resources.files("sapporo.tune"))) / "profiles"
    except ModuleNotFoundError:
        path = Path(__file__).resolve().parents[2] / "tune" / "profiles"
    return path if path.is_dir() else None


def table_from_json(data: dict[str, Any], source: str) -> LaunchTable:
    """Parse a profile; raise :class:`ConfigError` when malformed."""
    try:
        entries = []
        for e in data["entries"]:
            e = dict(e)
            ni_max = int(e.pop("ni_max"))
            entries.append((ni_max, LaunchConfig(**e)))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"malformed tuning profile {source}: {exc}") from None
    if not entries:
        raise ConfigError(f"tuning profile {source} has no entries")
    entries.sort(key=lambda t: t[0])
    meta = {k: v for k, v in data.items() if k != "entries"}
    return LaunchTable(entries, source=source, meta=meta)


def load_table(info: DeviceInfo, order: int, precision: str) -> LaunchTable:
    """The tuned table for this device when a profile exists, else the defaults."""
    env = config.from_environment()
    folders = () if env.no_profile else (user_profile_dir(), _shipped_profile_dir())
    for folder in filter(None, folders):
        path = folder / profile_name(info, order, precision)
        if not path.is_file():
            continue
        try:
            table = table_from_json(json.loads(path.read_text()), str(path))
            check_table(table, info, order, precision)
        except (OSError, json.JSONDecodeError, ConfigError) as exc:
            log.warning("ignoring tuning profile %s: %s", path, exc)
            continue
        log.debug("using tuning profile %s", path)
        return table
    return default_table(info, order, precision)


def split_j(cfg: LaunchConfig, info: DeviceInfo, ni_pad: int, nj: int) -> tuple[int, int]:
    """The j-range of a launch of ``ni_pad`` i-particles on ``nj`` j-addresses cut into parts,
    as the native engine cuts it: ``(nparts, jchunk)``, parts starting at multiples of
    ``cfg.j_align`` (the last one may be shorter), about ``cfg.groups_per_cu`` work-groups
    per compute unit, none shorter than ``cfg.min_jchunk`` (``sapporo/core/plan.c``)."""
    from sapporo.core import engine

    return engine.load().split(cfg.i_per_group, cfg.j_align, cfg.min_jchunk,
                               info.compute_units * cfg.groups_per_cu, ni_pad, nj)
