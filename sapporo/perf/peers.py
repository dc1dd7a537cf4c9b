"""The peers of ``sapporo bench``: other codes timed on the same particles, in the same process.

``numpy-reference`` (the float64 reference, :func:`sapporo.reference.forces`, small N only),
``pytreegrav`` / ``pytreegrav-target`` (pytreegrav's numba brute force, acceleration only)
and ``cupy`` / ``torch`` (a naive float32 direct sum on a CUDA GPU). A peer that is not
installed, or needs a GPU the device is not, is skipped with a note.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sapporo.perf.report import EPS2, BenchSettings, Progress, Row, bench_system, with_rates

__all__ = ["measure_peer"]


def measure_peer(peer: str, s: BenchSettings, common: dict[str, Any], say: Progress,
                 device_type: str, notes: list[str]) -> list[Row]:
    """The N x N rows of ``peer`` (one of :data:`sapporo.perf.bench.PEERS`) with the sizes,
    seed and time budget of ``s`` (``common``: the fields of every row; ``say``: progress);
    empty, with a line in ``notes``, when it is skipped (a GPU peer beside a device of
    another ``device_type``, or one not installed)."""
    try:
        if peer == "numpy-reference":
            return _numpy_peer(s, common, say)
        if peer in ("pytreegrav", "pytreegrav-target"):
            return _pytreegrav_peer(s, common, say, peer == "pytreegrav-target")
        if device_type != "gpu":
            notes.append(f"{peer}: skipped (a GPU peer; the device is a {device_type})")
            return []
        return _gpu_peer(s, common, say, peer)
    except ImportError as exc:
        notes.append(f"{peer}: skipped (not available: {exc})")
        say(f"peer {peer}: skipped (not available: {exc})")
        return []


def _repeat(fn: Callable[[], Any], repeats: int, enough: float) -> tuple[list[float],
                                                                       list[float]]:
    """Wall and process CPU times of up to ``repeats`` calls (stop once one takes ``enough``)."""
    walls, cpus = [], []
    for _ in range(repeats):
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        if walls[-1] > enough:
            break
    return walls, cpus


def _numpy_peer(s: BenchSettings, common: dict[str, Any], say: Progress) -> list[Row]:
    from sapporo.reference import forces

    rows = []
    for order in s.orders:
        for n in s.n_list:
            if n > s.numpy_max_n:
                continue
            sysd = bench_system(n, s.seed, order)
            times, cpus = _repeat(lambda sysd=sysd, order=order: forces(
                sysd["x"], sysd["v"], sysd["id"], sysd["x"], sysd["v"], sysd["m"], sysd["id"],
                EPS2, order=order, ai=sysd["a"], aj=sysd["a"], ji=sysd["jerk"],
                jj=sysd["jerk"]), 2, s.budget / 4)
            best = min(times)
            row = with_rates(Row(**common, kind="nxn", code="numpy-reference", order=order,
                            precision="float64", n=n, n_active=n, repeats=len(times),
                            seconds=best, seconds_median=statistics.median(times),
                            cpu_seconds=min(cpus)), {})
            rows.append(row)
            say(f"peer numpy-reference order {order}: N={n:>7}  {best:9.4f} s  "
                f"{row.interactions_per_s / 1e9:7.4f} Gint/s")
    return rows


def _pytreegrav_peer(s: BenchSettings, common: dict[str, Any], say: Progress,
                     target: bool) -> list[Row]:
    import pytreegrav

    name = "pytreegrav-target" if target else "pytreegrav"
    symmetric_from = 1000  # pytreegrav's Accel switches to its symmetric kernel here
    with contextlib.suppress(ImportError):
        from pytreegrav.bruteforce_symmetric import SYMMETRIC_NMIN as symmetric_from

    def run(x: np.ndarray, m: np.ndarray, ni: int) -> None:
        if target:
            pytreegrav.AccelTarget(x[:ni], x, m, method="bruteforce", parallel=True)
        else:
            pytreegrav.Accel(x, m, method="bruteforce", parallel=True)

    # JIT warm-up of every code path the sizes below take (Accel switches kernels at ~1000)
    for n in sorted({min(n, 1024) for n in s.n_list} | {min(n, 999) for n in s.n_list}):
        sysd = bench_system(n, s.seed, 2)
        run(sysd["x"], sysd["m"], n)
    rows = []
    per_pair = None
    for n in s.n_list:
        sysd = bench_system(n, s.seed, 2)
        ni, note = n, ""
        if per_pair is not None and per_pair * n * n > s.budget:
            if not target:
                say(f"peer {name}: skipped N={n}: estimated {per_pair * n * n:.0f} s > budget")
                continue
            ni = min(n, max(1024, int(s.budget / (per_pair * n)) // 1024 * 1024))
            if ni < n:
                note = f"i-subset: {ni} of {n} targets (time budget {s.budget:g} s)"
        times, cpus = _repeat(lambda sysd=sysd, ni=ni: run(sysd["x"], sysd["m"], ni), 2,
                              s.budget / 4)
        best = min(times)
        per_pair = best / (ni * n)
        row = with_rates(Row(**common, kind="nxn", code=name, order=None, precision="float64",
                        n=n, n_active=ni, repeats=len(times), seconds=best,
                        seconds_median=statistics.median(times), cpu_seconds=min(cpus),
                        note=("acceleration only, numba parallel=True"
                              + ("" if target or n < symmetric_from else
                                 ", symmetric N^2/2 pair kernel"))
                        + (f"; {note}" if note else "")), {})
        rows.append(row)
        say(f"peer {name}: N={n:>7} i={ni:>7}  {best:9.4f} s  "
            f"{row.interactions_per_s / 1e9:7.4f} Gint/s")
    return rows


def _gpu_peer(s: BenchSettings, common: dict[str, Any], say: Progress, lib: str) -> list[Row]:
    """A naive float32 direct sum (acceleration and potential) on a CUDA GPU."""
    if lib == "cupy":
        import cupy

        asarray, sync = cupy.asarray, cupy.cuda.Device().synchronize
    else:
        import torch

        if not torch.cuda.is_available():
            raise ImportError("torch sees no CUDA device")

        def asarray(a: np.ndarray) -> Any:
            return torch.as_tensor(a, device="cuda")

        sync = torch.cuda.synchronize

    def direct(x: Any, m: Any, chunk: int) -> None:  # one evaluation, waited for
        n = x.shape[0]
        for i0 in range(0, n, chunk):
            d = x[None, :, :] - x[i0:i0 + chunk, None, :]
            r2 = (d * d).sum(-1) + EPS2
            inv = r2 ** -0.5
            w = m[None, :] * inv * inv * inv
            (w[:, :, None] * d).sum(1)
            (-m[None, :] * inv).sum(1)
        sync()

    rows = []
    per_pair = None
    for n in s.n_list:
        sysd = bench_system(n, s.seed, 2)
        if per_pair is not None and per_pair * n * n > s.budget:
            say(f"peer {lib}: skipped N={n} (time budget)")
            continue
        x = asarray(sysd["x"].astype(np.float32))
        m = asarray(sysd["m"].astype(np.float32))
        chunk = max(1, (1 << 26) // n)
        direct(x, m, chunk)  # warm-up
        times, _ = _repeat(lambda x=x, m=m, chunk=chunk: direct(x, m, chunk), 3, math.inf)
        best = min(times)
        per_pair = best / (n * n)
        row = with_rates(Row(**common, kind="nxn", code=lib, order=None, precision="float32",
                        n=n, n_active=n, repeats=len(times), seconds=best,
                        seconds_median=statistics.median(times),
                        note="naive float32 direct sum (acc, pot)"), {})
        rows.append(row)
        say(f"peer {lib}: N={n:>7}  {best:9.4f} s  {row.interactions_per_s / 1e9:7.3f} Gint/s")
    return rows
