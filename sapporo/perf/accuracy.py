"""Accuracy of the kernels against the float64 reference, as tables (``sapporo accuracy``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from sapporo import reference as ref
from sapporo.core.library import Library

log = logging.getLogger(__name__)


@dataclass
class AccuracyRow:
    """Errors of one (order, precision, case): max and median over i-particles."""

    order: int
    precision: str
    case: str
    n: int
    n_active: int
    acc_max: float
    acc_median: float
    jerk_max: float | None
    snap_max: float | None
    pot_max: float
    nn_agree: float


CASES = {
    "plummer": dict(shift=0.0, eps2=1e-4),
    "plummer+1e4": dict(shift=1e4, eps2=1e-4),
    "plummer eps2=0": dict(shift=0.0, eps2=0.0),
}


def measure(n: int = 4096, n_active: int = 512, orders=(2, 4, 6),
            precisions=("double-single", "double"), cases=tuple(CASES), seed: int = 1,
            backend: str | None = None, devices=None) -> list[AccuracyRow]:
    """Errors |Delta| / sum_j |term_j| (potential: |Delta| / |pot|) against the reference."""
    x0, v, m = ref.plummer(n, seed=seed)
    ids = np.arange(n)
    rng = np.random.default_rng(seed)
    sel = np.sort(rng.choice(n, min(n_active, n), replace=False))
    rows = []
    for precision in precisions:
        for order in orders:
            with Library(order=order, precision=precision, backend=backend,
                         devices=devices) as lib:
                for case in cases:
                    spec = CASES[case]
                    x = x0 + spec["shift"]
                    f4 = ref.forces(x, v, ids, x, v, m, ids, 1e-4, order=4)
                    a, jk = f4.acc, f4.jerk  # the jerks matter at order 8 only
                    lib.reset()
                    lib.set_j_particles(ids, ids, 0.0, m, x, v, a=a, jerk=jk)
                    lib.set_time(0.0)
                    f = lib.compute(x[sel], v[sel], ids[sel], spec["eps2"], a=a[sel],
                                    jerk=jk[sel])
                    r = ref.forces(x[sel], v[sel], ids[sel], x, v, m, ids, spec["eps2"],
                                   order=order, ai=a[sel], aj=a, ji=jk[sel], jj=jk)
                    ea = ref.relative_vector_error(f.acc, r.acc, r.acc_abs)
                    ej = es = None
                    if order >= 4:
                        ej = float(ref.relative_vector_error(f.jerk, r.jerk, r.jerk_abs).max())
                    if order >= 6:
                        es = float(ref.relative_vector_error(f.snap, r.snap, r.snap_abs).max())
                    rows.append(AccuracyRow(
                        order, precision, case, n, len(sel), float(ea.max()),
                        float(np.median(ea)), ej, es,
                        float((np.abs(f.pot - r.pot) / np.abs(r.pot)).max()),
                        float((f.nn_index == r.nn_index).mean())))
                    log.info("accuracy %s", rows[-1])
    return rows


def markdown(rows: list[AccuracyRow]) -> str:
    """The rows as a Markdown table."""
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.1e}"

    out = ["| precision | order | case | acc max | acc median | jerk max | snap max | pot max "
           "| nn agree |", "|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {r.precision} | {r.order} | {r.case} | {fmt(r.acc_max)} | "
            f"{fmt(r.acc_median)} | {fmt(r.jerk_max)} | {fmt(r.snap_max)} | "
            f"{fmt(r.pot_max)} | {100 * r.nn_agree:.1f} % |" for r in rows]
    return "\n".join(out)
