"""The native block-step engine's Python side: loading it, and the plans it runs.

The engine (``sapporo.core._engine``, compiled from ``_engine.c`` when the package is
installed) is the one executor of force calls: it stores j-particles, predicts, queues the
force and reduce launches, waits and combines the parts, for the Python API and the C API
alike, on plans the library made (the launches of :mod:`sapporo.core.device`). Python
checks what the engine does not take as it is, and names the error. A library that
profiles has the engine time its launches into :attr:`Library.kernel_seconds
<sapporo.Library.kernel_seconds>` (the plan's ``seconds_at``).

A plan is a table of int64 words whose layout is written once, in ``sapporo/plan.h``:
:func:`plan_enums` reads it from there and :func:`plan_words` fills it. A library with
several devices hands the engine one such table per device, one after the other.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

__all__ = ["PLAN_HEADER", "load", "plan_enums", "plan_keys", "plan_words", "status"]

#: the plan table (plan.h)
PLAN_HEADER = Path(__file__).resolve().parents[1] / "plan.h"

_STATE: dict[str, object] = {}  # "module", or "why" it is not there (once per process)


def load() -> ModuleType:
    """The engine module (imported once per process).

    Raises
    ------
    BackendError
        When the package was installed without it (its C compiler failed, say).
    """
    if "module" not in _STATE:
        try:
            from sapporo.core import _engine as module  # type: ignore[attr-defined]
        except ImportError as exc:
            from sapporo.errors import BackendError

            raise BackendError(f"the native engine sapporo.core._engine cannot be imported "
                               f"({exc}): reinstall sapporo-nbody with a C compiler "
                               "(pip install --force-reinstall --no-cache-dir ...)") from None
        _STATE["module"] = module
    return _STATE["module"]  # type: ignore[return-value]


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


def plan_keys() -> list[str]:
    """The plan's own values, as :meth:`Library._plans
    <sapporo.core.library.Library._plans>` names them: every ``DP_*`` word of
    ``plan.h`` but the status, the runtime's entry points (``DP_FN_*``, from the plan's
    ``entry``), the launches and the sizes."""
    skip = ("DP_STATUS", "DP_LAUNCHES", "DP_MAX_ARGS", "DP_LAUNCH_WORDS", "DP_WORDS")
    return [name[3:].lower() for name in plan_enums()
            if name.startswith("DP_") and name not in skip and not name.startswith("DP_FN_")]


def plan_words(plan: dict[str, Any] | int) -> np.ndarray:
    """The words of one device's plan (``plan.h``'s layout: one block of a plan) from
    :meth:`Library._plans <sapporo.core.library.Library._plans>`'s answer: its
    status alone (-1: never) when it is a number, or when a launch does
    not fit the table."""
    e = plan_enums()
    w = np.zeros(e["DP_WORDS"], dtype=np.int64)
    if not isinstance(plan, dict):
        w[e["DP_STATUS"]] = plan
        return w
    for key in plan_keys():
        w[e["DP_" + key.upper()]] = plan[key]
    for key, value in plan["entry"].items():
        w[e["DP_FN_" + key.upper()]] = value
    # the prediction, the force, the scatter (device memory) and the reduce (parts combined
    # by a kernel); a launch that is None leaves its slot zero
    for k, (launch, call_arg, ni_arg) in enumerate(zip(
            plan["launches"], plan["call_args"], plan["ni_args"], strict=False)):
        if launch is None:
            continue
        if len(launch.args) > e["DP_MAX_ARGS"] or len(launch.global_size) > 2:
            return plan_words(-1)
        o = e["DP_LAUNCHES"] + k * e["DP_LAUNCH_WORDS"]
        gs = (*launch.global_size, 1, 1)
        ls = (*(launch.local_size or (0, 0)), 0, 0)
        words = {"QUEUE": launch.queue, "KERNEL": launch.kernel, "CALL_ARG": call_arg,
                 "DIMS": len(launch.global_size), "NI_ARG": ni_arg, "G0": gs[0], "G1": gs[1],
                 "L0": ls[0], "L1": ls[1], "NARGS": len(launch.args)}
        for key, value in words.items():
            w[o + e["DL_" + key]] = value
        for a, (size, bits) in enumerate(launch.args):
            w[o + e["DL_ARGS"] + 2 * a] = size
            w[o + e["DL_ARGS"] + 2 * a + 1] = np.uint64(bits).view(np.int64)
    w[e["DP_STATUS"]] = 1
    return w


def status() -> str:
    """The engine's file, as ``sapporo info`` shows it (or why it cannot be imported)."""
    from sapporo.errors import BackendError

    try:
        return f"native ({Path(load().__file__).name})"
    except BackendError as exc:
        return str(exc)
