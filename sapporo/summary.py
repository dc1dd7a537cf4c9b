"""``summary.json``: what a command that writes results leaves in its ``--out`` folder.

Every such command (``sapporo run``, ``sapporo pm``) writes its summary through
:func:`write_summary`, and every reader (the plots of :mod:`sapporo.perf.plots`, scripts)
reads it through :func:`read_summary`. The quantities the commands share have one name and
one meaning, listed in :data:`SHARED`; each command adds its own fields beside them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sapporo.errors import SapporoError
from sapporo.nbody.fileio import write_text_atomic

#: The file name, in the command's ``--out`` folder.
SUMMARY_FILE = "summary.json"

#: The shared keys and their meaning (the README's table says the same).
SHARED: dict[str, str] = {
    "command": "the sub-command that wrote the file: run, pm",
    "device": "the device's name",
    "backend": "opencl or cuda",
    "precision": "the force or mesh arithmetic: double-single, double (run); double, "
                 "single (pm)",
    "energy_error": "|E - E0| / |E0| at the end of the run",
    "max_energy_error": "the largest |E - E0| / |E0| seen during the run",
    "energy_initial": "E0, the total energy at the start",
    "energy_final": "E, the total energy at the end",
    "wall_seconds": "wall-clock seconds of the integration",
}


def summary_fields(command: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with ``command`` first, checked for every shared key of :data:`SHARED`.

    Raises
    ------
    SapporoError
        When a shared key is missing or an energy error or wall time is not a number
        (a defect of the command, not of its input).
    """
    data = {"command": command, **{k: v for k, v in fields.items() if k != "command"}}
    missing = [k for k in SHARED if k not in data]
    if missing:
        raise SapporoError(f"sapporo {command}: summary lacks the shared keys "
                           f"{', '.join(missing)}")
    for key in ("energy_error", "max_energy_error", "wall_seconds", "energy_initial",
                "energy_final"):
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SapporoError(f"sapporo {command}: summary {key} must be a number, "
                               f"got {value!r}")
        if key.startswith("energy_") and key != "energy_error":
            continue  # energies have either sign
        if not math.isnan(value) and value < 0:
            raise SapporoError(f"sapporo {command}: summary {key} must be >= 0, got {value}")
    return data


def write_summary(out: str | os.PathLike[str], command: str,
                  fields: Mapping[str, Any]) -> Path:
    """Write ``out/summary.json`` (``out`` exists) atomically: the shared keys of
    :data:`SHARED` and the command's own ``fields``, under ``command``; returns the path.

    Raises
    ------
    SapporoError
        When ``fields`` lacks a shared key (see :func:`summary_fields`).
    OSError
        When the file cannot be written.
    """
    data = summary_fields(command, fields)
    path = Path(out) / SUMMARY_FILE
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")
    return path


def read_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a summary written by any command: ``path`` is the ``summary.json`` file, or the
    output folder that holds it; every shared key of :data:`SHARED` is present.

    Raises
    ------
    SapporoError
        When the file is missing or unreadable, is not a JSON object, or lacks a shared
        key (a summary of an older sapporo, or not a sapporo summary).
    """
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_FILE
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise SapporoError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise SapporoError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SapporoError(f"{path} is not a sapporo summary (not a JSON object)")
    missing = [k for k in SHARED if k not in data]
    if missing:
        raise SapporoError(f"{path} is not a summary of this sapporo version: it lacks "
                           f"{', '.join(missing)}")
    return data
