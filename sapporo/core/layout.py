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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ACC_ROWS", "COORD_LIMIT", "CRACKLE_ROWS", "FORCE_ARGS", "JERK_ROWS", "KERNELS", "LAYOUT",
    "MAX_ADDRESS", "MAX_ID", "MAX_PARTS", "NCO", "NI_CHUNK", "OC_NNID", "OC_NNR2", "OC_POT",
    "PREDICT_ARGS", "RAW_N", "REDUCE_ARGS", "REDUCE_LANES", "REDUCE_ROWS", "SCATTER_ARGS",
    "SNAP_ROWS", "KernelArg", "arg_index", "arg_names", "kernel_args", "nci", "nco", "raw_n",
    "read_layout", "result_rows",
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
    rows = [*range(ACC_ROWS.start, ACC_ROWS.stop), OC_POT]
    for need, vec in ((4, JERK_ROWS), (6, SNAP_ROWS), (8, CRACKLE_ROWS)):
        if order >= need:
            rows += range(vec.start, vec.stop)
    return rows


# ---------------------------------------------------------------------------------------------
# kernel parameter lists

@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter: its name in the kernel sources and when it exists
    (``"always"``, ``"double-single"``, ``"order>=6"``, ``"order>=8"`` or ``"ngb"``: with
    neighbour lists)."""

    name: str
    when: str = "always"

    def present(self, order: int, ds: bool, ngb: bool) -> bool:
        """Whether the parameter exists in this variant."""
        return {"always": True, "double-single": ds, "order>=6": order >= 6,
                "order>=8": order >= 8, "ngb": ngb}[self.when]


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
    """The argument list of one variant, from values given by parameter name (a
    ``KeyError`` names a parameter the variant has but ``values`` lacks)."""
    return [values[name] for name in arg_names(table, order, ds, ngb)]
