"""The host/kernel data layout, read from ``layout.h``, and the kernels' argument lists.

``sapporo/layout.h`` is the one place where the j-record rows (``RAW_*``), the i-particle
rows (``IC_*``), the result rows (``OC_*``) and the reduce kernel's lanes are written down.
Both kernel trees include it; this module parses its ``#define`` lines, so the host uses the
same numbers by construction.

The kernels' parameter lists are described once as well (:data:`FORCE_ARGS`, ...): each
entry names a parameter as the kernel source does and says in which variants it exists.
The library builds its argument lists from these tables by name (:func:`kernel_args`), and
a test holds the tables to the kernel signatures of both trees.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FORCE_ARGS",
    "KERNELS",
    "ACC_ROWS",
    "COORD_LIMIT",
    "CRACKLE_ROWS",
    "JERK_ROWS",
    "SNAP_ROWS",
    "LAYOUT",
    "MAX_ADDRESS",
    "MAX_ID",
    "NCO",
    "OC_NNID",
    "OC_NNR2",
    "OC_POT",
    "PREDICT_ARGS",
    "RAW_N",
    "MAX_PARTS",
    "NI_CHUNK",
    "REDUCE_ARGS",
    "REDUCE_LANES",
    "REDUCE_ROWS",
    "SCATTER_ARGS",
    "KernelArg",
    "arg_index",
    "arg_names",
    "kernel_args",
    "nci",
    "nco",
    "raw_n",
    "read_layout",
    "result_rows",
]

LAYOUT_HEADER = Path(__file__).resolve().parents[1] / "layout.h"

_DEFINE = re.compile(r"^#define\s+([A-Z][A-Z0-9_]*)\s+(\d+)\b", re.MULTILINE)


def read_layout(path: Path = LAYOUT_HEADER) -> dict[str, int]:
    """The integer ``#define`` lines of ``layout.h`` (name -> value)."""
    out: dict[str, int] = {}
    for name, value in _DEFINE.findall(path.read_text()):
        if name in out:  # the file defines each number once; the NCI choice is symbolic
            raise RuntimeError(f"{path}: {name} is defined twice")
        out[name] = int(value)
    return out


LAYOUT: dict[str, int] = read_layout()

#: the largest j-address, the largest id and the coordinate limit (layout.h's LIMIT_*)
MAX_ADDRESS = LAYOUT["LIMIT_MAX_ADDRESS"]
MAX_ID = LAYOUT["LIMIT_MAX_ID"]
#: i-particles per force launch, and the most parts it cuts its j-range into (LIMIT_*)
NI_CHUNK = LAYOUT["LIMIT_NI_CHUNK"]
MAX_PARTS = LAYOUT["LIMIT_MAX_PARTS"]
COORD_LIMIT = float(re.search(r"^#define\s+LIMIT_COORD\s+(\S+)", LAYOUT_HEADER.read_text(),
                              re.MULTILINE)[1])

#: double4 records per raw j-particle at orders 2 to 6 (:func:`raw_n` for any order)
RAW_N = LAYOUT["RAW_N_LOW"]
#: result rows at orders 2 to 6 (:func:`nco` gives them for any order)
NCO = LAYOUT["NCO_LOW"]
OC_NNR2 = LAYOUT["OC_NNR2"]
OC_NNID = LAYOUT["OC_NNID"]
OC_POT = LAYOUT["OC_POT"]
#: the result rows of each vector (slices of the OC_* rows)
ACC_ROWS = slice(LAYOUT["OC_AX"], LAYOUT["OC_AZ"] + 1)
JERK_ROWS = slice(LAYOUT["OC_JX"], LAYOUT["OC_JZ"] + 1)
SNAP_ROWS = slice(LAYOUT["OC_SX"], LAYOUT["OC_SZ"] + 1)
CRACKLE_ROWS = slice(LAYOUT["OC_CX"], LAYOUT["OC_CZ"] + 1)
REDUCE_LANES = LAYOUT["REDUCE_LANES"]  #: the reduce kernel's lanes per i-particle
REDUCE_ROWS = LAYOUT["REDUCE_ROWS"]  #: and its i-particles per group


def raw_n(order: int) -> int:
    """double4 records per raw j-particle for ``order`` (``RAW_N`` in layout.h): pop and
    the 5th derivative at order 8 only."""
    return LAYOUT["RAW_N_ORDER8"] if order >= 8 else LAYOUT["RAW_N_LOW"]


def nci(order: int) -> int:
    """Rows of i-particle data for ``order`` (``NCI`` in layout.h)."""
    if order >= 8:
        return LAYOUT["NCI_ORDER8"]
    return LAYOUT["NCI_HIGH"] if order >= 6 else LAYOUT["NCI_LOW"]


def nco(order: int) -> int:
    """Result rows for ``order`` (``NCO`` in layout.h): the crackle rows at order 8 only."""
    return LAYOUT["NCO_ORDER8"] if order >= 8 else LAYOUT["NCO_LOW"]


def result_rows(order: int) -> list[int]:
    """The result rows a kernel of ``order`` fills (acc, pot; + jerk; + snap; + crackle)."""
    rows = [LAYOUT["OC_AX"], LAYOUT["OC_AY"], LAYOUT["OC_AZ"], OC_POT]
    if order >= 4:
        rows += [LAYOUT["OC_JX"], LAYOUT["OC_JY"], LAYOUT["OC_JZ"]]
    if order >= 6:
        rows += [LAYOUT["OC_SX"], LAYOUT["OC_SY"], LAYOUT["OC_SZ"]]
    if order >= 8:
        rows += [LAYOUT["OC_CX"], LAYOUT["OC_CY"], LAYOUT["OC_CZ"]]
    return rows


# ---------------------------------------------------------------------------------------------
# kernel parameter lists

#: conditions under which a parameter exists, by name: (order, double-single, lists) -> bool
_WHEN: dict[str, Callable[[int, bool, bool], bool]] = {
    "always": lambda order, ds, ngb: True,
    "double-single": lambda order, ds, ngb: ds,
    "order>=6": lambda order, ds, ngb: order >= 6,
    "order>=8": lambda order, ds, ngb: order >= 8,
    "ngb": lambda order, ds, ngb: ngb,
}


@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter: its name in the kernel sources and when it exists."""

    name: str
    when: str = "always"

    def present(self, order: int, ds: bool, ngb: bool) -> bool:
        """Whether the parameter exists in this variant."""
        return _WHEN[self.when](order, ds, ngb)


def _args(*spec: str | tuple[str, str]) -> tuple[KernelArg, ...]:
    return tuple(KernelArg(s) if isinstance(s, str) else KernelArg(*s) for s in spec)


#: ``force`` (force.cl / force.cu)
FORCE_ARGS = _args(
    "nj", "ni", "ni_pad", "jchunk", "eps2_d", "jpos", ("jpos_lo", "double-single"), "jvel",
    ("jacc", "order>=6"), ("jjerk", "order>=8"), "jid", "idata", "out", ("nb_count", "ngb"),
    ("nb_list", "ngb"),
)
#: ``reduce`` (force.cl / force.cu)
REDUCE_ARGS = _args("ni", "ni_pad", "nparts", "partial", "out")
#: ``predict`` (predict.cl / predict.cu)
PREDICT_ARGS = _args(
    "n", "t", "raw", "pos", ("pos_lo", "double-single"), "vel", ("acc", "order>=6"),
    ("jerk", "order>=8"),
)
#: ``scatter_j`` (predict.cl / predict.cu)
SCATTER_ARGS = _args("n", "packed", "raw", "jid")

#: every kernel's table, by kernel name
KERNELS: dict[str, tuple[KernelArg, ...]] = {
    "force": FORCE_ARGS, "reduce": REDUCE_ARGS, "predict": PREDICT_ARGS,
    "scatter_j": SCATTER_ARGS,
}


def arg_names(table: Sequence[KernelArg], order: int, ds: bool, ngb: bool = False) -> list[str]:
    """The parameter names of a kernel in one variant, in order."""
    return [a.name for a in table if a.present(order, ds, ngb)]


def arg_index(table: Sequence[KernelArg], name: str, order: int, ds: bool,
              ngb: bool = False) -> int:
    """Position of parameter ``name`` in one variant."""
    return arg_names(table, order, ds, ngb).index(name)


def kernel_args(table: Sequence[KernelArg], values: Mapping[str, Any], order: int, ds: bool,
                ngb: bool = False) -> list[Any]:
    """The argument list of one variant, from values given by parameter name.

    Raises ``KeyError`` naming a parameter the variant has but ``values`` lacks (a
    programming error, not a user's).
    """
    out = []
    for name in arg_names(table, order, ds, ngb):
        if name not in values:
            raise KeyError(f"kernel argument {name!r} missing")
        out.append(values[name])
    return out
