"""``sapporo info``: backends, devices, their capabilities, and which one would be used."""

from __future__ import annotations

import argparse
import json
import sys

from sapporo import __version__, config
from sapporo.backend import get_backend, probe_backends, quirks
from sapporo.core import engine
from sapporo.errors import BackendError


def run(args: argparse.Namespace) -> int:
    """Print the report; exit code 1 when no device is usable."""
    from sapporo.capi import build

    statuses = probe_backends()
    try:
        chosen = get_backend(args.backend)
        chosen_dev, error = chosen.devices()[0], None
    except BackendError as exc:
        chosen_dev, error = None, str(exc)
    if args.json:
        out = {
            "version": __version__,
            "backends": [
                {"name": s.name, "usable": bool(s.devices), "reason": s.reason,
                 "devices": [d.as_dict() for d in s.devices],
                 "skipped": list(getattr(s.backend, "skipped", []))}
                for s in statuses
            ],
            "selected": None if chosen_dev is None else chosen_dev.as_dict(),
            "error": error,
            "native": engine.status(),
        }
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return 0 if error is None else 1
    w = sys.stdout.write
    w(f"sapporo {__version__}\n")
    env = config.from_environment()
    w(f"SAPPORO_BACKEND={env.backend or 'auto'}  SAPPORO_DEVICES={env.devices or 'default'}\n\n")
    for s in statuses:
        if not s.devices:
            w(f"[{s.name}] unusable: {s.reason}\n")
            continue
        w(f"[{s.name}] {len(s.devices)} device(s)\n")
        for d in s.devices:
            w(f"  {d.index}: {d.name} ({d.device_type}, {d.vendor}; platform {d.platform})\n")
            w(f"     compute units {d.compute_units}, max work-group {d.max_work_group_size}, "
              f"local memory {d.local_mem_size // 1024} KiB, global memory "
              f"{d.global_mem_size / 2**30:.1f} GiB, fp64 {'yes' if d.double_support else 'NO'}, "
              f"driver {d.driver_version}\n")
            if d.companion:
                w(f"     small launches (SAPPORO_SMALL_PAIRS) on {d.companion}, the "
                  "single-threaded device on the same memory"
                  + (", half of each on a second one (two cores)" if d.twin else "") + "\n")
            if (advice := quirks.narrow_vectors(d)) is not None:
                w(f"     note: {advice}\n")
        for why in getattr(s.backend, "skipped", []):
            w(f"  skipped: {why}\n")
    inst = build.installation()
    w("\nC API: " + (f"built in {inst.prefix}" if inst.is_current()
                     else "not built for this version (sapporo capi build)") + "\n")
    w(f"block steps: {engine.status()}\n")
    if error is None:
        w(f"selected: {chosen.name} device 0: {chosen_dev.name}\n")
        return 0
    w(f"selected: none\n{error}\n")
    return 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``sapporo info``."""
    p = sub.add_parser("info", help="list backends and devices, and which one would be used")
    p.add_argument("--backend", default=None, help="opencl, cuda or auto (default: auto)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
