"""Block-time-step Hermite integrators (4th, 6th and 8th order) on the sapporo library.

The 4th-order scheme is Makino & Aarseth (1992), the 6th- and 8th-order ones Nitadori &
Makino (2008). Every particle has its own time ``t_i`` and a power-of-two step ``dt_i`` in
``[dt_min, dt_max]``, ``t_i`` a multiple of ``dt_i``. A block step advances the particles
with the smallest ``t_i + dt_i``: the device predicts all j-particles to the block time and
the host the active ones (by the same Taylor series); the library computes their forces;
the corrector gives the new state and steps (the criterion's value rounded down to a power
of two, at most doubling, and only when the new time is a multiple of the doubled step);
the corrected particles are stored again as j-particles with every derivative the
predictor uses (for 8th order the 4th and 5th, interpolated by the corrector). The 8th-order
corrector is the Hermite (Obreshkov) quadrature through a, jerk, snap and crackle at both
ends of the step (docs/integrator.md has it, and the criteria).

The block steps run in the native core ``sapporo.nbody._hermite`` (``_hermite.c``), the
force calls through the library's native engine in-process (the C table of
``sapporo/engine_api.h``), or through its Python API where the engine cannot take them
(MPI, stand-ins). This module is the Python layer: parameters, the start, snapshots,
energies (measured at synchronised times with one extra force evaluation), callbacks.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import threading
import time as _time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from sapporo.core import layout, validate
from sapporo.errors import BackendError, InputError, SapporoError
from sapporo.nbody.snapshot import Snapshot

__all__ = ["CALLBACK_SECONDS", "CRITERIA", "DT_MAX", "DT_MIN", "FORCE_NOISE", "HermiteIntegrator",
           "default_eta", "floor_pow2", "predict_taylor", "predict_taylor8"]

log = logging.getLogger(__name__)

#: Default smallest and largest block time steps (as in HiGPUs).
DT_MIN = 2.0**-25
DT_MAX = 2.0**-3

#: Time-step criteria: Aarseth's (eta inside the square root), the generalised one of
#: Nitadori & Makino (2008), and the average of both (Aarseth with ``eta4``, generalised
#: with ``eta``) as used by HiGPUs and the Sapporo2 paper.
CRITERIA = ("aarseth", "generalised", "average")
_ALIASES = {"generalized": "generalised", "avg": "average"}

#: snapshot metadata keys of the 8th-order scheme's 4th and 5th derivatives
_META_POP, _META_D5 = "hermite8_pop", "hermite8_d5"

#: Relative force error assumed for each library precision (conservative: the library's
#: double-single forces are good to about 1e-6 relative to the net force, see
#: ``docs/integrator.md``); the native core does not trust interpolated derivatives within
#: twice the resulting error bound and takes the fallback step there.
FORCE_NOISE = {"double": 1e-13, "double-single": 2e-6}
#: Wall-clock seconds between :meth:`HermiteIntegrator.evolve`'s callbacks (by default).
CALLBACK_SECONDS = 0.1


def default_eta(criterion: str, order: int) -> float:
    """The default accuracy parameter of a criterion: ``aarseth`` 0.01 (inside the square
    root); ``generalised`` and ``average`` 0.1 (the ``eta6`` of HiGPUs and the Sapporo2
    paper; at 4th order the generalised criterion with eta is Aarseth's with eta**2)."""
    del order
    return 0.01 if criterion == "aarseth" else 0.1


def floor_pow2(x: np.ndarray | float) -> np.ndarray:
    """The largest power of two ``<= x`` for positive finite ``x`` (exact, via frexp)."""
    _, e = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(1.0, e - 1)


def _norm(q: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", q, q))


def predict_taylor(h: np.ndarray, x: np.ndarray, v: np.ndarray, a: np.ndarray, jerk: np.ndarray,
                   snap: np.ndarray | None = None, crackle: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Taylor-predict particles by ``h`` (shape (n,), the time since their data), in the
    device's Horner form: position, velocity and acceleration, shape (n, 3), from ``x``,
    ``v``, ``a``, ``jerk`` and (None: zero) ``snap`` and ``crackle`` at the particles' times."""
    zero = np.zeros_like(x)  # the missing terms add exact zeros
    xp, vp, ap, _ = predict_taylor8(h, x, v, a, jerk, zero if snap is None else snap,
                                    zero if crackle is None else crackle, zero, zero)
    return xp, vp, ap


def predict_taylor8(h: np.ndarray, x: np.ndarray, v: np.ndarray, a: np.ndarray,
                    jerk: np.ndarray, snap: np.ndarray, crackle: np.ndarray, pop: np.ndarray,
                    d5: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 8th-order predictor: Taylor series through the 5th derivative of the
    acceleration, in the device's Horner form.

    Returns
    -------
    xp, vp, ap, jp : ndarray, shape (n, 3)
        Predicted position, velocity, acceleration and jerk.
    """
    h = np.asarray(h, dtype=np.float64)[:, None]
    xp = x + h * (v + h * (a * 0.5 + h * (jerk * (1.0 / 6.0) + h * (
        snap * (1.0 / 24.0) + h * (crackle * (1.0 / 120.0) + h * (
            pop * (1.0 / 720.0) + h * (d5 * (1.0 / 5040.0))))))))
    vp = v + h * (a + h * (jerk * 0.5 + h * (snap * (1.0 / 6.0) + h * (
        crackle * (1.0 / 24.0) + h * (pop * (1.0 / 120.0) + h * (d5 * (1.0 / 720.0)))))))
    ap = a + h * (jerk + h * (snap * 0.5 + h * (crackle * (1.0 / 6.0) + h * (
        pop * (1.0 / 24.0) + h * (d5 * (1.0 / 120.0))))))
    jp = jerk + h * (snap + h * (crackle * 0.5 + h * (pop * (1.0 / 6.0)
                                                      + h * (d5 * (1.0 / 24.0)))))
    return xp, vp, ap, jp


def _starting_step(order: int, eta_s: float, a: np.ndarray, j: np.ndarray,
                   s: np.ndarray | None) -> np.ndarray:
    """The first guess of the first step: ``eta_s |a| / |j|`` (4th order),
    ``eta_s |a| / sqrt(|j|^2 + |a||s|)`` (6th and 8th); the trial steps of
    :meth:`HermiteIntegrator._start` then shorten it where the criterion asks."""
    na, nj = _norm(a), _norm(j)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if order == 4 or s is None:
            return eta_s * na / nj
        return eta_s * na / np.sqrt(nj**2 + na * _norm(s))


def _largest_dividing_pow2(t: float, dt: np.ndarray, dt_min: float) -> np.ndarray:
    """Halve each ``dt`` until ``t`` is a multiple of it (never below ``dt_min``)."""
    dt = dt.copy()
    for _ in range(2100):
        bad = (np.fmod(t, dt) != 0.0) & (dt > dt_min)
        if not bad.any():
            break
        dt[bad] *= 0.5
    return dt


class HermiteIntegrator:
    """Block-time-step Hermite integrator (4th, 6th or 8th order) on a
    :class:`sapporo.Library`.

    Parameters
    ----------
    lib_or_options : Library, dict or None
        An open library of order ``order`` (it stays open after :meth:`close`), or options
        for a new one (``precision``, ``backend``, ``devices``, ...), which the integrator
        owns; the option ``library_factory`` (default :class:`~sapporo.Library`) makes it,
        e.g. a :class:`sapporo.parallel.ParallelLibrary`.
    x, v : array_like, shape (n, 3)
        Initial positions and velocities.
    m : array_like, shape (n,)
        Masses (>= 0).
    ids : array_like, shape (n,), optional
        Distinct particle ids in ``[0, 2**31)`` (default ``0 .. n-1``).
    order : {4, 6, 8}
        Integration order.
    eta : float, optional
        Accuracy parameter (default :func:`default_eta`).
    eps2 : float
        Plummer softening squared.
    dt_min, dt_max : float
        Step bounds, powers of two.
    criterion : {"aarseth", "generalised", "average"}, optional
        Time-step criterion (default: ``aarseth`` for 4th order, ``generalised`` for 6th and
        8th).
    eta4 : float
        The Aarseth part of the ``average`` criterion.
    eta_s : float
        First guess of the first steps, ``eta_s |a| / |j|``, then shortened until the
        criterion accepts them.
    t0 : float
        Initial time (a multiple of ``dt_min``).
    force_noise : float, optional
        Relative force error assumed when judging whether the interpolated higher
        derivatives are resolved (default :data:`FORCE_NOISE` of the precision; 0 trusts
        them always); unresolved ones make the step fall back (``docs/integrator.md``).

    Raises
    ------
    InputError
        For bad parameters or initial conditions (the message names the culprit).
    """

    def __init__(self, lib_or_options: Any = None, x: Any = None, v: Any = None, m: Any = None,
                 ids: Any = None, order: int = 4, eta: float | None = None, eps2: float = 0.0,
                 dt_min: float = DT_MIN, dt_max: float = DT_MAX, criterion: str | None = None,
                 eta4: float = 0.01, eta_s: float = 0.01, t0: float = 0.0,
                 force_noise: float | None = None) -> None:
        self._set_params(order, eta, eps2, dt_min, dt_max, criterion, eta4, eta_s)
        self._set_particles(x, v, m, ids)
        t0 = float(t0)
        if not math.isfinite(t0) or math.fmod(t0, self.dt_min) != 0.0:
            raise InputError(f"t0 must be a finite multiple of dt_min, got {t0!r}")
        self._reset_counters()
        self.meta: dict[str, Any] = {}
        self._open(lib_or_options, force_noise, lambda: self._start(t0))

    def _set_params(self, order: Any, eta: Any, eps2: Any, dt_min: Any, dt_max: Any,
                    criterion: Any, eta4: Any, eta_s: Any) -> None:
        if isinstance(order, bool) or order not in (4, 6, 8):
            raise InputError(f"order must be 4, 6 or 8, got {order!r}")
        self.order = int(order)
        if criterion is None:
            criterion = "aarseth" if self.order == 4 else "generalised"
        crit = _ALIASES.get(str(criterion).lower(), str(criterion).lower())
        if crit not in CRITERIA:
            raise InputError(f"criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
        self.criterion = crit
        self.eta = default_eta(crit, self.order) if eta is None else validate.positive("eta", eta)
        self.eta4 = validate.positive("eta4", eta4)
        self.eta_s = validate.positive("eta_s", eta_s)
        self.eps2 = validate.scalar("eps2", eps2, nonneg=True)
        self.dt_min = validate.positive("dt_min", dt_min)
        self.dt_max = validate.positive("dt_max", dt_max)
        for name, value in (("dt_min", self.dt_min), ("dt_max", self.dt_max)):
            if math.frexp(value)[0] != 0.5:  # not a power of two (finite and > 0 already)
                raise InputError(f"{name} must be a power of two (e.g. 2**-3), got {value!r}")
        if self.dt_min > self.dt_max:
            raise InputError(f"dt_min ({self.dt_min!r}) must be <= dt_max ({self.dt_max!r})")

    def _set_noise(self, force_noise: Any) -> None:
        if force_noise is None:
            force_noise = FORCE_NOISE.get(str(self.precision), FORCE_NOISE["double-single"])
        try:
            f = float(force_noise)
        except (TypeError, ValueError):
            f = -1.0
        if not (math.isfinite(f) and f >= 0.0):
            raise InputError(f"force_noise must be finite and >= 0, got {force_noise!r}")
        self.force_noise = f

    def _set_particles(self, x: Any, v: Any, m: Any, ids: Any) -> None:
        for name, value in (("x", x), ("v", v), ("m", m)):
            if value is None:
                raise InputError(f"{name}: required")
        self.x = validate.vec3("x", x, None, limit=validate.COORD_LIMIT).copy()
        n = self.x.shape[0]
        if n < 1:
            raise InputError("x: at least one particle is needed")
        self.v = validate.vec3("v", v, n).copy()
        self.m = validate.scalars("m", m, n, nonneg=True).copy()
        if ids is None:
            self.ids = np.arange(n, dtype=np.int64)
        else:
            self.ids = validate.ints("ids", ids, n, 0, layout.MAX_ID).copy()
            if np.unique(self.ids).size != n:
                raise InputError("ids: must be distinct")
        self.n = n
        self._addr = np.arange(n, dtype=np.int64)
        self._work()

    def _reset_counters(self) -> None:
        self.steps = self.block_steps = self.fallback_steps = 0
        self.interactions = self.force_calls = 0
        self.library_seconds = self.integrator_seconds = 0.0
        self.n_active_counts = np.zeros(self.n + 1, dtype=np.int64)
        self._stop_requested = False
        self.interrupted = False
        self._core: Any = None

    def _open(self, lib_or_options: Any, force_noise: Any, start: Callable[[], Any]) -> None:
        """Open the library (or take the one given), set the force noise, then ``start()``;
        a failure after the library opened closes it."""
        self._owns_lib = False
        self.lib: Any = None
        if lib_or_options is None or isinstance(lib_or_options, Mapping):
            opts = dict(lib_or_options or {})
            if opts.setdefault("order", self.order) != self.order:
                raise InputError(f"library option order={opts['order']!r} differs from the "
                                 f"integrator order {self.order}")
            from sapporo import Library

            factory = opts.pop("library_factory", None) or Library
            self.lib = factory(**opts)
            self._owns_lib = True
        else:
            lib = lib_or_options
            if getattr(lib, "order", None) != self.order:
                raise InputError(f"the library has order {getattr(lib, 'order', None)!r}, the "
                                 f"integrator needs order {self.order}")
            self.lib = lib
        self.precision = getattr(self.lib, "precision", None)
        self.device_name = str(getattr(self.lib, "device_name", "unknown device"))
        try:
            self._set_noise(force_noise)
            start()
        except BaseException:
            self.close()
            raise

    def _compute(self, x: np.ndarray, v: np.ndarray, ids: np.ndarray,
                 a: np.ndarray | None, jerk: np.ndarray | None = None) -> Any:
        """One force call, counted (callers give ``a`` at orders 6 and 8 only)."""
        t0 = _time.perf_counter()
        extra = {"jerk": jerk} if self.order == 8 else {}
        f = self.lib.compute(x, v, ids, self.eps2, a=a, **extra)
        self.library_seconds += _time.perf_counter() - t0
        self.force_calls += 1
        self.interactions += int(x.shape[0]) * self.n
        return f

    def _send(self, sel: np.ndarray | slice) -> None:
        """Upload the (corrected) state of particles ``sel`` as j-particles, with the
        derivatives the order's predictor uses."""
        extra = {}
        if self.order >= 6:
            extra = {"snap": self.snap[sel], "crackle": self.crackle[sel]}
        if self.order == 8:
            extra.update(pop=self.pop[sel], d5=self.d5[sel])
        self.lib.set_j_particles(self._addr[sel], self.ids[sel], self.t[sel], self.m[sel],
                                 self.x[sel], self.v[sel], a=self.a[sel], jerk=self.jerk[sel],
                                 **extra)

    def _start(self, t0: float) -> None:
        """Initial forces (two passes for 6th and 8th order: snap needs the accelerations,
        crackle the accelerations and jerks)."""
        n = self.n
        self.time = t0
        self.t = np.full(n, t0)
        zero = np.zeros((n, 3))
        self.a, self.jerk, self.snap, self.crackle = zero, zero.copy(), zero.copy(), zero.copy()
        if self.order == 8:  # the 4th and 5th derivatives stay zero for the first step
            self.pop, self.d5 = zero.copy(), zero.copy()
        self.pot = np.zeros(n)
        self._send(slice(None))
        self.lib.set_time(t0)
        f = self._compute(self.x, self.v, self.ids, zero if self.order >= 6 else None, zero)
        self.a = np.array(f.acc, dtype=np.float64)
        self.jerk = np.array(f.jerk, dtype=np.float64)
        self.pot = np.array(f.pot, dtype=np.float64)
        if self.order >= 6:
            self._send(slice(None))
            f = self._compute(self.x, self.v, self.ids, self.a, self.jerk)
            self.snap = np.array(f.snap, dtype=np.float64)
            if self.order == 8:
                self.crackle = np.array(f.crackle, dtype=np.float64)
        self._send(slice(None))
        crit = _starting_step(self.order, self.eta_s, self.a, self.jerk,
                              self.snap if self.order >= 6 else None)
        crit = np.where(np.isfinite(crit), crit, self.dt_max)
        dt = floor_pow2(np.clip(crit, self.dt_min, self.dt_max))
        self.dt = _largest_dividing_pow2(t0, dt, self.dt_min)
        self._trial_steps()
        log.debug("started %d particles at t=%g, steps %g..%g", n, t0, self.dt.min(),
                  self.dt.max())

    def _trial_steps(self) -> None:
        """Shorten the first steps until the step criterion, evaluated over each first step
        itself, accepts it: the first guess knows a and jerk only. Each particle's first step
        is tried (nothing committed; a group of particles shares a force call), and where the
        criterion's step is shorter it takes that step and is tried again (steps only
        shrink, so this ends)."""
        core = self._make_core()
        try:
            pending = np.arange(self.n, dtype=np.int64)
            while pending.size:
                again = []
                for h in np.unique(self.dt[pending]):
                    sel = pending[self.dt[pending] == h]
                    self._w_act[: sel.size] = sel
                    with self._engine_errors():
                        core.trial(sel.size, float(h))
                    crit = self._crit[: sel.size]
                    crit = np.where(np.isfinite(crit), crit, self.dt_max)
                    p = floor_pow2(np.clip(crit, self.dt_min, self.dt_max))
                    short = p < h
                    if short.any():
                        self.dt[sel[short]] = p[short]
                        again.append(sel[short])
                pending = np.concatenate(again) if again else pending[:0]
        finally:
            self._take_counters(core)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, lib_or_options: Any = None) -> HermiteIntegrator:
        """Resume exactly from a :class:`~sapporo.nbody.snapshot.Snapshot` made by :meth:`state`.

        Parameters
        ----------
        snapshot : Snapshot
            The saved state.
        lib_or_options : Library, dict or None
            As in the constructor; a missing ``precision`` option is taken from the
            snapshot.
        """
        snapshot.validate()
        p = snapshot.params
        names = ("order", "eta", "eps2", "dt_min", "dt_max", "criterion", "eta4", "eta_s")
        missing = [k for k in names if k not in p]
        if missing:
            raise InputError(f"snapshot lacks integrator parameter {missing[0]!r}")
        self = cls.__new__(cls)
        self._set_params(*(p[k] for k in names))
        self._set_particles(snapshot.x, snapshot.v, snapshot.m, snapshot.ids)
        self._reset_counters()
        for name, value in self.counters.items():  # each keeps its type, int or float
            setattr(self, name, type(value)(snapshot.counters.get(name, value)))
        if snapshot.n_active_counts is not None and snapshot.n_active_counts.size == self.n + 1:
            self.n_active_counts = snapshot.n_active_counts.astype(np.int64).copy()
        self.meta = dict(snapshot.meta)
        if self.order == 8:
            pop, d5 = self.meta.pop(_META_POP, None), self.meta.pop(_META_D5, None)
            if pop is None or d5 is None:
                log.warning("8th-order snapshot without the 4th and 5th derivatives: the "
                            "first steps predict without them")
                pop = d5 = np.zeros((self.n, 3))
            self.pop = validate.vec3(_META_POP, pop, self.n).copy()
            self.d5 = validate.vec3(_META_D5, d5, self.n).copy()
        self.time = float(snapshot.time)
        for name in ("t", "dt", "a", "jerk", "snap", "crackle", "pot"):
            setattr(self, name, np.array(getattr(snapshot, name), dtype=np.float64))
        if np.any(self.t > self.time) or np.any(self.t + self.dt < self.time):
            raise InputError("snapshot particle times are inconsistent with its global time")
        if isinstance(lib_or_options, Mapping) or lib_or_options is None:
            opts = dict(lib_or_options or {})
            if "precision" in p:
                opts.setdefault("precision", p["precision"])
            lib_or_options = opts
        self._open(lib_or_options, p.get("force_noise"), lambda: self._send(slice(None)))
        return self

    @property
    def params(self) -> dict[str, Any]:
        """The integrator parameters (what a snapshot needs to resume)."""
        return {
            "order": self.order, "eta": self.eta, "eta4": self.eta4, "eta_s": self.eta_s,
            "eps2": self.eps2, "dt_min": self.dt_min, "dt_max": self.dt_max,
            "criterion": self.criterion, "precision": self.precision,
            "force_noise": self.force_noise,
        }

    @property
    def counters(self) -> dict[str, Any]:
        """Counters: particle steps, block steps, interactions, force calls, library time
        (seconds in force calls), integrator time (seconds in the native core's block steps
        besides their force calls), fallback steps."""
        return {
            "steps": self.steps, "block_steps": self.block_steps,
            "interactions": self.interactions, "force_calls": self.force_calls,
            "library_seconds": self.library_seconds,
            "integrator_seconds": self.integrator_seconds,
            "fallback_steps": self.fallback_steps,
        }

    @property
    def mean_n_active(self) -> float:
        """Mean number of active particles per block step (0 before the first)."""
        return self.steps / self.block_steps if self.block_steps else 0.0

    @property
    def synchronised(self) -> bool:
        """True when every particle is at the global time."""
        return bool(np.all(self.t == self.time))

    def request_stop(self) -> None:
        """Ask :meth:`evolve` to stop after the current block (as Ctrl-C does)."""
        self._stop_requested = True
        if self._core is not None:
            self._core.stop = 1

    @contextmanager
    def _deferred_sigint(self) -> Iterator[None]:
        """While evolving, Ctrl-C only requests a stop; a second one interrupts at once. Only
        Python's default SIGINT handler is replaced: one the application installed (``sapporo
        run``'s, which calls :meth:`request_stop`) stays in charge."""
        if (threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            if self._stop_requested:
                raise KeyboardInterrupt
            self.request_stop()

        try:
            signal.signal(signal.SIGINT, handler)
        except ValueError:  # not in the main interpreter thread after all
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def evolve(self, t_end: float, callback: Callable[[HermiteIntegrator], Any] | None = None,
               callback_steps: int | None = None) -> float:
        """Integrate until every particle is at ``t_end`` (>= the current time, rounded to
        the dt_min grid); returns the time reached.

        The block steps run in the native core, which returns to Python only for the
        callback. Steps are capped so that no particle passes ``t_end`` (a multiple of
        ``dt_max`` changes nothing). Ctrl-C (or :meth:`request_stop`) finishes the current
        block and raises :class:`KeyboardInterrupt` with a consistent state.

        Parameters
        ----------
        callback : callable, optional
            Called as ``callback(self)`` between block steps: after the block step that ends
            :data:`CALLBACK_SECONDS` of wall time since the last call, and after the last.
        callback_steps : int, optional
            Call it after every ``callback_steps`` block steps instead (and after the last).
        """
        t_end_f = round(validate.scalar("t_end", t_end) / self.dt_min) * self.dt_min
        if t_end_f != t_end:
            log.info("target time %r rounded to the block grid: %r", t_end, t_end_f)
        if callback_steps is not None and (isinstance(callback_steps, bool)
                                           or not isinstance(callback_steps, int)
                                           or callback_steps < 1):
            raise InputError(f"callback_steps must be an int >= 1, got {callback_steps!r}")
        if t_end_f < self.time:
            raise InputError(f"t_end ({t_end!r}) is before the current time {self.time!r}")
        if self.lib is None:
            raise SapporoError("the integrator is closed")
        self.interrupted = False
        below = self.t < t_end_f
        if below.any():
            cap = floor_pow2(np.where(below, t_end_f - self.t, 1.0))
            self.dt[:] = np.where(below & (self.t + self.dt > t_end_f),
                                  np.minimum(self.dt, cap), self.dt)
        seconds = math.inf if callback is None or callback_steps else CALLBACK_SECONDS
        with self._deferred_sigint():
            core = self._make_core()
            core.stop = int(self._stop_requested)  # asked before: one block step, then stop
            self._core = core
            try:
                while self.time < t_end_f:
                    with self._engine_errors():
                        core.run(t_end_f, seconds, callback_steps or 0)
                    self._take_counters(core)
                    if callback is not None:
                        callback(self)
                    if self._stop_requested:
                        self._stop_requested = False
                        self.interrupted = True
                        raise KeyboardInterrupt
            finally:
                self._core = None
                self._take_counters(core)
        return self.time

    def _work(self) -> None:
        """The work arrays the native core shares with Python: the block's particles, their
        predicted x, v, a and jerk (``_w``) and their acc, jerk, snap, crackle (``_r``) and
        pot, which the library's way reads and writes (``_py_force``, ``_py_send``), and the
        criteria of trial steps."""
        self._w_act = np.zeros(self.n, dtype=np.int64)
        self._w, self._r = np.zeros((4, self.n, 3)), np.zeros((4, self.n, 3))
        self._r_pot, self._crit = np.zeros(self.n), np.zeros(self.n)

    def _make_core(self) -> Any:
        """A native core on the current arrays, calling the library's engine in-process where
        it has one (the C table of ``sapporo/engine_api.h``, as the C API does)."""
        from sapporo.nbody import _hermite  # type: ignore[attr-defined]

        api = engine = None
        lib = self.lib
        if hasattr(lib, "_engine_ready"):  # a sapporo.Library (not MPI, not a stand-in)
            from sapporo.core import _engine  # type: ignore[attr-defined]

            api, engine = _engine.C_API, lib._engine_ready()
        # a force call reads every stored j-particle, as lib.compute does (a library the
        # caller opened may hold more than the integrator's)
        self._nj = int(getattr(lib, "n_stored", self.n))
        for name in ("t", "dt", "pot", "m"):  # the core writes into these in place
            setattr(self, name, np.ascontiguousarray(getattr(self, name), dtype=np.float64))
        return _hermite.Core(self, api, engine)

    @contextmanager
    def _engine_errors(self) -> Iterator[None]:
        """The native core's calls, under the library's lock (the core calls its engine
        without the GIL: another thread's call of the library waits for the lock); the
        engine's error (``RuntimeError(message, code)``) as the library raises it; the
        library's own errors pass."""
        lock = getattr(self.lib, "_lock", None)
        with lock if lock is not None else contextlib.nullcontext():
            try:
                yield
            except SapporoError:
                raise
            except RuntimeError as exc:
                if hasattr(self.lib, "_engine_error"):
                    raise self.lib._engine_error(exc) from None
                raise BackendError(f"{self.device_name}: {exc}") from None

    def _take_counters(self, core: Any) -> None:
        """Move what the core counted into the integrator's counters."""
        self.time = core.time
        for name in ("steps", "block_steps", "fallback_steps", "force_calls", "interactions"):
            setattr(self, name, getattr(self, name) + getattr(core, name))
            setattr(core, name, 0)
        self.library_seconds += core.library_seconds
        self.integrator_seconds += core.seconds - core.library_seconds
        core.library_seconds = core.seconds = 0.0

    def _py_force(self, k: int, t: float) -> None:
        """The native core's force call on its block of ``k`` at time ``t``, the library's
        way (the core counts it)."""
        w, r = self._w[:, :k], self._r[:, :k]
        extra = {"jerk": w[3]} if self.order == 8 else {}
        self.lib.set_time(t)
        f = self.lib.compute(w[0], w[1], self.ids[self._w_act[:k]], self.eps2,
                             a=w[2] if self.order >= 6 else None, **extra)
        r[0], r[1], self._r_pot[:k] = f.acc, f.jerk, f.pot
        if self.order >= 6:
            r[2] = f.snap
        if self.order == 8:
            r[3] = f.crackle

    def _py_send(self, k: int) -> None:
        """The native core's new j-particles (its block of ``k``), the library's way."""
        self._send(self._w_act[:k])

    def predicted(self, t: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions, velocities and accelerations of all particles predicted to the common
        time ``t`` (default: the global time; no particle may be ahead of it), exactly the
        stored values for particles already at ``t``."""
        return self._predicted(self.time if t is None else float(t))[:3]

    def _predicted(self, t: float) -> tuple[np.ndarray, ...]:
        """x, v, a and jerk of all particles predicted to ``t`` by the terms the order's
        predictor uses (the others zero)."""
        if np.any(self.t > t):
            raise InputError(f"cannot predict backwards to t={t!r}")
        zero = np.zeros_like(self.x)
        high = (self.snap, self.crackle) if self.order >= 6 else (zero, zero)
        top = (self.pop, self.d5) if self.order == 8 else (zero, zero)
        return predict_taylor8(t - self.t, self.x, self.v, self.a, self.jerk, *high, *top)

    def energy_terms(self) -> tuple[float, float]:
        """Kinetic and potential energy at the global time: all particles predicted to
        :attr:`time` (exact when synchronised), the potential from one force evaluation of
        all of them by the library, ``W = 0.5 sum m pot`` (softened with ``eps2``)."""
        if self.lib is None:
            raise SapporoError("the integrator is closed")
        x, v, a, jerk = self._predicted(self.time)
        self.lib.set_time(self.time)
        f = self._compute(x, v, self.ids, a if self.order >= 6 else None, jerk)
        kinetic = 0.5 * float(np.sum(self.m * np.einsum("ij,ij->i", v, v)))
        potential = 0.5 * float(np.sum(self.m * np.asarray(f.pot, dtype=np.float64)))
        return kinetic, potential

    def energy(self) -> float:
        """Total energy (kinetic + softened potential) at the global time."""
        k, w = self.energy_terms()
        return k + w

    def angular_momentum(self) -> np.ndarray:
        """Total angular momentum ``sum m x x v`` at the global time, shape (3,)."""
        x, v, _ = self.predicted()
        return np.sum(self.m[:, None] * np.cross(x, v), axis=0)

    def state(self) -> Snapshot:
        """A complete copy of the state (synchronised after :meth:`evolve` returns): all that
        :meth:`from_snapshot` needs to continue bit for bit (at 8th order the 4th and 5th
        derivatives ride in ``meta`` as exact JSON floats)."""
        meta = dict(self.meta)
        if self.order == 8:
            meta[_META_POP], meta[_META_D5] = self.pop.tolist(), self.d5.tolist()
        copies = {k: getattr(self, k).copy() for k in ("x", "v", "m", "ids", "t", "dt", "a", "jerk",
                                                       "snap", "crackle", "pot", "n_active_counts")}
        return Snapshot(time=self.time, params=self.params, counters=self.counters, meta=meta,
                        **copies)

    def close(self) -> None:
        """Close the library if the integrator opened it (idempotent)."""
        lib, self.lib = getattr(self, "lib", None), None
        if lib is not None and getattr(self, "_owns_lib", False):
            lib.close()

    def __enter__(self) -> HermiteIntegrator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
