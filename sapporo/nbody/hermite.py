"""Block-time-step Hermite integrators (4th, 6th and 8th order) on the sapporo library.

The 4th-order scheme is Makino & Aarseth (1992), the 6th- and 8th-order ones Nitadori &
Makino (2008).
Every particle has its own time ``t_i`` and a power-of-two step ``dt_i`` in
``[dt_min, dt_max]``; ``t_i`` is always a multiple of ``dt_i``. A block step advances the
particles with the smallest ``t_i + dt_i`` (the *active block*):

1. ``lib.set_time(t_block)`` makes the device predict all j-particles to the block time; the
   active i-particles are predicted on the host by the same Taylor series (positions,
   velocities and, for 6th and 8th order, accelerations; for 8th order also jerks).
2. ``lib.compute`` returns their acceleration, jerk (and snap) and potential.
3. The corrector and the new steps are vectorised NumPy over the block; a new step is the
   criterion's value rounded down to a power of two, it may at most double, and only when
   the new time is a multiple of the doubled step.
4. ``lib.set_j_particles`` re-sends the corrected particles: a and jerk, and for 6th order
   also snap and the crackle interpolated by the corrector (the device predictor uses every
   derivative it is given; for 4th order it is the classical second-order predictor in a);
   for 8th order snap and crackle computed by the library and the 4th and 5th derivatives
   interpolated by the corrector (the predictor then errs by O(dt^8) in position).

The 8th-order corrector is the Hermite (Obreshkov) quadrature through a, j, s, c at both ends
of the step, exact for an acceleration of degree 7 in time::

    v1 = v0 + h/2 (a0 + a1) + 3h^2/28 (j0 - j1) + h^3/84 (s0 + s1) + h^4/1680 (c0 - c1)
    x1 = x0 + h/2 (v0 + v1) + 3h^2/28 (a0 - a1) + h^3/84 (j0 + j1) + h^4/1680 (s0 - s1)

and the degree-7 interpolant of a through the same values gives the 4th to 7th derivatives
at the end of the step (the predictor's pop and d5; the step criterion's d5, d6, d7).

Only the public :class:`sapporo.Library` API is used. Energies are measured at synchronised
times with one extra force evaluation of all particles on their corrected positions.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time as _time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from sapporo.core import layout, validate
from sapporo.errors import InputError, SapporoError
from sapporo.nbody.snapshot import Snapshot

__all__ = [
    "CRITERIA",
    "DT_MAX",
    "DT_MIN",
    "FALLBACK_SCALE",
    "FLOOR_FRACTION",
    "FORCE_NOISE",
    "HermiteIntegrator",
    "RESOLVED_FACTOR",
    "default_eta",
    "fallback_criterion",
    "floor_pow2",
    "predict_taylor",
    "quantise_steps",
    "step_criterion",
]

log = logging.getLogger(__name__)

#: Default smallest and largest block time steps (as in HiGPUs).
DT_MIN = 2.0**-25
DT_MAX = 2.0**-3

#: Time-step criteria: Aarseth's (eta inside the square root), the generalised one of
#: Nitadori & Makino (2008), and the average of both (Aarseth with ``eta4``, generalised
#: with ``eta``) as used by HiGPUs and the Sapporo2 paper.
CRITERIA = ("aarseth", "generalised", "average")
_ALIASES = {"generalized": "generalised", "avg": "average", "aarseth": "aarseth"}

_MAX_ID = layout.MAX_ID + 1
#: snapshot metadata keys of the 8th-order scheme's 4th and 5th derivatives
_META_POP, _META_D5 = "hermite8_pop", "hermite8_d5"

#: Relative force error assumed for each library precision (conservative: the library's
#: double-single forces are good to about 1e-6 relative to the net force, see
#: ``docs/integrator.md``); interpolated derivatives within :data:`RESOLVED_FACTOR` times
#: the resulting error bound are not trusted by the time-step criterion.
FORCE_NOISE = {"double": 1e-13, "double-single": 2e-6}
RESOLVED_FACTOR = 2.0
#: Steps never go below this fraction of :func:`fallback_criterion` (a guard against
#: noise-driven collapse; the full criteria stay above it in all but a few per cent of the
#: steps of a double-precision Plummer run).
FLOOR_FRACTION = 0.125
#: (Aarseth, generalised) scale factors of :func:`fallback_criterion` per order.
#: Order 8: N = 256 Plummer, double, eps2 = 1e-4, to t = 1/8 (the same measurement gives
#: order 6's values as 0.734 and 0.315).
FALLBACK_SCALE = {4: (0.27, 0.27), 6: (0.74, 0.32), 8: (0.73, 0.17)}


def default_eta(criterion: str, order: int) -> float:
    """The default accuracy parameter of a criterion.

    ``aarseth``: 0.01 (inside the square root); ``generalised`` and ``average``: 0.1 (the
    6th-order ``eta6`` of HiGPUs and the Sapporo2 paper; for 4th order the generalised
    criterion with eta is Aarseth's with eta**2).
    """
    del order
    return 0.01 if criterion == "aarseth" else 0.1


def floor_pow2(x: np.ndarray | float) -> np.ndarray:
    """The largest power of two ``<= x`` for positive finite ``x`` (exact, via frexp)."""
    _, e = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(1.0, e - 1)


def _norm(q: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->i", q, q))


def _norms(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """Row norms of several (n, 3) arrays in one pass: shape (len(vectors), n), bitwise
    :func:`_norm` of each."""
    q = np.stack(vectors)
    return np.sqrt(np.einsum("kij,kij->ki", q, q))


def predict_taylor(
    h: np.ndarray,
    x: np.ndarray,
    v: np.ndarray,
    a: np.ndarray,
    jerk: np.ndarray,
    snap: np.ndarray | None = None,
    crackle: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Taylor-predict particles by ``h`` (per particle), in the device's Horner form.

    Parameters
    ----------
    h : ndarray, shape (n,)
        Time since the particles' data.
    x, v, a, jerk : ndarray, shape (n, 3)
        Position, velocity, acceleration and jerk at the particles' times.
    snap, crackle : ndarray, shape (n, 3), optional
        Higher derivatives (None: zero).

    Returns
    -------
    xp, vp, ap : ndarray, shape (n, 3)
        Predicted position, velocity and acceleration.
    """
    h = np.asarray(h, dtype=np.float64)[:, None]
    if snap is None:
        xp = x + h * (v + h * (a * 0.5 + h * (jerk * (1.0 / 6.0))))
        vp = v + h * (a + h * (jerk * 0.5))
        ap = a + h * jerk
        return xp, vp, ap
    c = np.zeros_like(x) if crackle is None else crackle
    xp = x + h * (v + h * (a * 0.5 + h * (jerk * (1.0 / 6.0)
                                          + h * (snap * (1.0 / 24.0) + h * (c * (1.0 / 120.0))))))
    vp = v + h * (a + h * (jerk * 0.5 + h * (snap * (1.0 / 6.0) + h * (c * (1.0 / 24.0)))))
    ap = a + h * (jerk + h * (snap * 0.5 + h * (c * (1.0 / 6.0))))
    return xp, vp, ap


def predict_taylor8(
    h: np.ndarray,
    x: np.ndarray,
    v: np.ndarray,
    a: np.ndarray,
    jerk: np.ndarray,
    snap: np.ndarray,
    crackle: np.ndarray,
    pop: np.ndarray,
    d5: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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


# The degree-7 Hermite interpolant of a through a, j, s, c at both ends of a step, expanded
# about the midpoint (T in [-tau, tau]): a(T) = sum_n D_n (T / tau)^n. Its even part takes
# (a1 + a0)/2, tau (j1 - j0)/2, tau^2 (s1 + s0)/2, tau^3 (c1 - c0)/2 at T = tau, its odd part
# the other half-sums and -differences; each is a 4x4 system with constant coefficients.
_EVEN8 = np.linalg.inv(np.array([[1, 1, 1, 1], [0, 2, 4, 6], [0, 2, 12, 30], [0, 0, 24, 120]],
                                dtype=np.float64))
_ODD8 = np.linalg.inv(np.array([[1, 1, 1, 1], [1, 3, 5, 7], [0, 6, 20, 42], [0, 6, 60, 210]],
                               dtype=np.float64))
#: d^k a / dT^k at T = tau is sum_n _DER8[k][n] D_n / tau^k
_DER8 = np.array([[math.perm(n, k) for n in range(8)] for k in range(8)], dtype=np.float64)


def interpolate8(tau: np.ndarray, a0: np.ndarray, j0: np.ndarray, s0: np.ndarray,
                 c0: np.ndarray, a1: np.ndarray, j1: np.ndarray, s1: np.ndarray,
                 c1: np.ndarray) -> list[np.ndarray]:
    """The 4th to 7th derivatives of the acceleration at the end of a step of ``2 tau``,
    from the degree-7 interpolant through a, j, s, c at both ends (8th-order scheme).

    Returns
    -------
    list of ndarray, shape (n, 3)
        ``[d4, d5, d6, d7]`` at the end of the step.
    """
    t = tau[:, None]
    even = np.stack([0.5 * (a1 + a0), t * 0.5 * (j1 - j0), t**2 * 0.5 * (s1 + s0),
                     t**3 * 0.5 * (c1 - c0)])
    odd = np.stack([0.5 * (a1 - a0), t * 0.5 * (j1 + j0), t**2 * 0.5 * (s1 - s0),
                    t**3 * 0.5 * (c1 + c0)])
    d = np.empty((8,) + a0.shape)
    d[0::2] = np.einsum("ij,j...->i...", _EVEN8, even)
    d[1::2] = np.einsum("ij,j...->i...", _ODD8, odd)
    return [np.einsum("n,n...->...", _DER8[k], d) / t**k for k in range(4, 8)]


def step_criterion(
    criterion: str,
    order: int,
    eta: float,
    eta4: float,
    derivs: list[np.ndarray],
) -> np.ndarray:
    """The (unquantised) time step of each particle.

    Parameters
    ----------
    criterion : {"aarseth", "generalised", "average"}
        Which criterion.
    order : {4, 6, 8}
        Integration order ``p``.
    eta : float
        Accuracy parameter of ``aarseth`` (inside the square root) or of ``generalised``;
        for ``average`` the generalised part's.
    eta4 : float
        The Aarseth part's parameter for ``average``.
    derivs : list of ndarray, shape (n, 3)
        ``[a, jerk, snap, crackle]`` and, for 6th order, also the 4th and 5th derivatives,
        for 8th order the 4th to 7th.

    Returns
    -------
    ndarray, shape (n,)
        Aarseth: ``sqrt(eta (|a||s| + |j|^2) / (|j||c| + |s|^2))``. Generalised:
        ``eta (A1 / A(p-2))^(1/(p-3))`` with ``A(k) = sqrt(|a(k-1)||a(k+1)| + |a(k)|^2)``.
        Average: the mean of Aarseth with ``eta4`` and generalised with ``eta``.
    """
    return _criterion_from_norms(criterion, order, eta, eta4, [_norm(d) for d in derivs])


def _criterion_from_norms(criterion: str, order: int, eta: float, eta4: float,
                          n: Sequence[np.ndarray]) -> np.ndarray:
    """:func:`step_criterion` from the norms of the derivatives."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a1sq = n[0] * n[2] + n[1] ** 2
        a2sq = n[1] * n[3] + n[2] ** 2

        def aarseth(e: float) -> np.ndarray:
            return np.sqrt(e * a1sq / a2sq)

        def generalised(e: float) -> np.ndarray:
            if order == 4:
                return e * np.sqrt(a1sq / a2sq)
            if order == 8:
                a6sq = n[5] * n[7] + n[6] ** 2
                return e * (a1sq / a6sq) ** (1.0 / 10.0)
            a4sq = n[3] * n[5] + n[4] ** 2
            return e * (a1sq / a4sq) ** (1.0 / 6.0)

        if criterion == "aarseth":
            return aarseth(eta)
        if criterion == "generalised":
            return generalised(eta)
        return 0.5 * (aarseth(eta4) + generalised(eta))


def fallback_criterion(
    criterion: str,
    order: int,
    eta: float,
    eta4: float,
    a: np.ndarray,
    jerk: np.ndarray,
    snap: np.ndarray | None = None,
) -> np.ndarray:
    """Step from the directly computed force derivatives only (no interpolation).

    Used where the interpolated higher derivatives are below the force noise. With the
    time scale ``T1 = |a| / |j|`` (4th order) or ``|a| / sqrt(|j|^2 + |a||s|)`` (6th
    order): ``cA sqrt(eta) T1`` for ``aarseth``, ``cG eta T1`` for ``generalised`` and
    ``(cA sqrt(eta4) + cG eta) T1 / 2`` for ``average``, with the constants of
    :data:`FALLBACK_SCALE` (the lower quartile of full criterion / this estimate, measured
    on Plummer spheres in double precision, so the fallback errs on the small side).
    """
    return _fallback_from_norms(criterion, order, eta, eta4, _norm(a), _norm(jerk),
                                None if snap is None else _norm(snap))


def _fallback_from_norms(criterion: str, order: int, eta: float, eta4: float,
                         na: np.ndarray, nj: np.ndarray, ns: np.ndarray | None) -> np.ndarray:
    """:func:`fallback_criterion` from the norms of a, jerk (and snap)."""
    c_a, c_g = FALLBACK_SCALE[order]
    t1 = _starting_step_from_norms(order, 1.0, na, nj, ns)
    if criterion == "aarseth":
        return c_a * math.sqrt(eta) * t1
    if criterion == "generalised":
        return c_g * eta * t1
    return 0.5 * (c_a * math.sqrt(eta4) + c_g * eta) * t1


def _unresolved(
    criterion: str,
    order: int,
    noise: float,
    tau: np.ndarray,
    n0: Sequence[np.ndarray],
    n: Sequence[np.ndarray],
) -> np.ndarray:
    """Where an interpolated derivative the criterion uses is within the force noise.

    The interpolated derivatives are differences of a, j (and s) between the ends of the
    step divided by powers of the half step ``tau``; a relative force error ``noise`` in
    those gives the error bounds below. A derivative counts as resolved when it exceeds
    :data:`RESOLVED_FACTOR` times its bound. ``n0``: the norms of a, j (and s) at the start
    of the step; ``n``: those of the criterion's derivatives at its end (a, j, s, c, ...).
    """
    da = noise * np.maximum(n0[0], n[0])
    dj = noise * np.maximum(n0[1], n[1])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if order == 4:
            s3 = 3.0 * (dj + da / tau) / tau**2
            bounds = {2: dj / tau + tau * s3, 3: s3}
            used = (2, 3)
        elif order == 8:
            # the interpolant is linear in the end values: bound each derivative by the
            # absolute values of its coefficients times the noise of a, j, s and c
            ds = noise * np.maximum(n0[2], n[2])
            dc = noise * np.maximum(n0[3], n[3])
            e_in = np.stack([da, tau * dj, tau**2 * ds, tau**3 * dc])
            de = np.einsum("ij,j...->i...", np.abs(_EVEN8), e_in)
            do = np.einsum("ij,j...->i...", np.abs(_ODD8), e_in)
            dd = np.empty((8,) + tau.shape)
            dd[0::2], dd[1::2] = de, do
            bounds = {k: np.einsum("n,n...->...", _DER8[k], dd) / tau**k for k in (5, 6, 7)}
            used = () if criterion == "aarseth" else (5, 6, 7)  # aarseth: all computed
        else:
            ds = noise * np.maximum(n0[2], n[2])
            s4 = 3.0 * (ds + dj / tau) / tau**2
            s5 = 15.0 * (ds * tau**2 + 3.0 * dj * tau + 3.0 * da) / tau**5
            s3 = ds / tau + s5 * tau**2 / 6.0
            bounds = {3: s3 + tau * s4 + 0.5 * tau**2 * s5, 4: s4 + tau * s5, 5: s5}
            used = (3,) if criterion == "aarseth" else (3, 4, 5)
        bad = np.zeros(tau.shape, dtype=bool)
        for k in used:
            bad |= ~(n[k] > RESOLVED_FACTOR * bounds[k])
    return bad


def _starting_step(order: int, eta_s: float, a: np.ndarray, j: np.ndarray,
                   s: np.ndarray | None) -> np.ndarray:
    """First step: ``eta_s |a| / |j|`` (4th order), ``eta_s |a| / sqrt(|j|^2 + |a||s|)`` (6th)."""
    return _starting_step_from_norms(order, eta_s, _norm(a), _norm(j),
                                     None if order == 4 or s is None else _norm(s))


def _starting_step_from_norms(order: int, eta_s: float, na: np.ndarray, nj: np.ndarray,
                              ns: np.ndarray | None) -> np.ndarray:
    """:func:`_starting_step` from the norms of a, j (and s)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if order == 4 or ns is None:
            return eta_s * na / nj
        return eta_s * na / np.sqrt(nj**2 + na * ns)


def quantise_steps(
    dt_crit: np.ndarray,
    dt_old: np.ndarray,
    t_new: np.ndarray,
    dt_min: float,
    dt_max: float,
    t_limit: float | None = None,
) -> np.ndarray:
    """Block steps from criterion values.

    The criterion is rounded down to a power of two and clipped to ``[dt_min, dt_max]``
    (non-finite values mean ``dt_max``). A smaller step is taken as it is; a larger one is
    limited to ``2 dt_old``, and allowed only when ``t_new`` is a multiple of ``2 dt_old``.
    With ``t_limit`` no particle below it steps beyond it.

    Parameters
    ----------
    dt_crit : ndarray, shape (n,)
        Criterion values.
    dt_old : ndarray, shape (n,)
        The steps just taken (powers of two; ``t_new`` is a multiple of them).
    t_new : ndarray, shape (n,)
        The particles' new times.
    dt_min, dt_max : float
        Bounds (powers of two).
    t_limit : float, optional
        A time the particles must not step over (a synchronisation point on the grid).

    Returns
    -------
    ndarray, shape (n,)
        The new steps.
    """
    crit = np.where(np.isfinite(dt_crit), dt_crit, dt_max)
    p = floor_pow2(np.clip(crit, dt_min, dt_max))
    double_ok = (p >= 2.0 * dt_old) & (np.fmod(t_new, 2.0 * dt_old) == 0.0)
    new = np.where(p < dt_old, p, np.where(double_ok, 2.0 * dt_old, dt_old))
    if t_limit is not None:
        room = t_limit - t_new
        below = room > 0.0
        if below.any():
            cap = floor_pow2(np.where(below, room, 1.0))
            new = np.where(below, np.minimum(new, cap), new)
    return new


def _largest_dividing_pow2(t: float, dt: np.ndarray, dt_min: float) -> np.ndarray:
    """Halve each ``dt`` until ``t`` is a multiple of it (never below ``dt_min``)."""
    dt = dt.copy()
    for _ in range(2100):
        bad = (np.fmod(t, dt) != 0.0) & (dt > dt_min)
        if not bad.any():
            break
        dt[bad] *= 0.5
    return dt


def _is_pow2(x: float) -> bool:
    return x > 0.0 and math.isfinite(x) and math.frexp(x)[0] == 0.5


class HermiteIntegrator:
    """Block-time-step Hermite integrator (4th, 6th or 8th order) on a
    :class:`sapporo.Library`.

    Parameters
    ----------
    lib_or_options : Library, dict or None
        An open library (its order must equal ``order``; it stays open after
        :meth:`close`), or keyword options for a new one (``precision``, ``backend``,
        ``devices``, ...), which the integrator owns and closes; the option
        ``library_factory`` (a callable taking the other options, default
        :class:`~sapporo.Library`) makes it, e.g. a :class:`sapporo.parallel.ParallelLibrary`.
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
        Starting-step parameter.
    t0 : float
        Initial time (a multiple of ``dt_min``).
    force_noise : float, optional
        Relative force error assumed when judging whether the interpolated higher
        derivatives are resolved (default :data:`FORCE_NOISE` of the library precision;
        0 trusts them always). Unresolved ones make the step fall back to
        :func:`fallback_criterion`.

    Raises
    ------
    InputError
        For bad parameters or initial conditions (the message names the culprit).
    """

    def __init__(
        self,
        lib_or_options: Any = None,
        x: Any = None,
        v: Any = None,
        m: Any = None,
        ids: Any = None,
        order: int = 4,
        eta: float | None = None,
        eps2: float = 0.0,
        dt_min: float = DT_MIN,
        dt_max: float = DT_MAX,
        criterion: str | None = None,
        eta4: float = 0.01,
        eta_s: float = 0.01,
        t0: float = 0.0,
        force_noise: float | None = None,
    ) -> None:
        self._set_params(order, eta, eps2, dt_min, dt_max, criterion, eta4, eta_s)
        self._set_particles(x, v, m, ids)
        t0 = float(t0)
        if not math.isfinite(t0) or math.fmod(t0, self.dt_min) != 0.0:
            raise InputError(f"t0 must be a finite multiple of dt_min, got {t0!r}")
        self._reset_counters()
        self.meta: dict[str, Any] = {}
        self._open(lib_or_options)
        self._set_noise(force_noise)
        try:
            self._start(t0)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ construction

    def _set_params(self, order: Any, eta: Any, eps2: Any, dt_min: Any, dt_max: Any,
                    criterion: Any, eta4: Any, eta_s: Any) -> None:
        if isinstance(order, bool) or order not in (4, 6, 8):
            raise InputError(f"order must be 4, 6 or 8, got {order!r}")
        self.order = int(order)
        if criterion is None:
            criterion = "aarseth" if self.order == 4 else "generalised"
        crit = _ALIASES.get(str(criterion).lower(), str(criterion).lower())
        if crit not in CRITERIA:
            raise InputError(
                f"criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}"
            )
        self.criterion = crit
        self.eta = default_eta(crit, self.order) if eta is None else validate.positive("eta", eta)
        self.eta4 = validate.positive("eta4", eta4)
        self.eta_s = validate.positive("eta_s", eta_s)
        self.eps2 = validate.scalar("eps2", eps2, nonneg=True)
        self.dt_min = validate.positive("dt_min", dt_min)
        self.dt_max = validate.positive("dt_max", dt_max)
        for name, value in (("dt_min", self.dt_min), ("dt_max", self.dt_max)):
            if not _is_pow2(value):
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
            self.close()
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
            self.ids = validate.ints("ids", ids, n, 0, _MAX_ID - 1).copy()
            if np.unique(self.ids).size != n:
                raise InputError("ids: must be distinct")
        self.n = n
        self._addr = np.arange(n, dtype=np.int64)

    def _reset_counters(self) -> None:
        self.steps = 0
        self.block_steps = 0
        self.interactions = 0
        self.force_calls = 0
        self.library_seconds = 0.0
        self.fallback_steps = 0
        self.n_active_counts = np.zeros(self.n + 1, dtype=np.int64)
        self._stop_requested = False
        self.interrupted = False

    def _open(self, lib_or_options: Any) -> None:
        self._owns_lib = False
        self.lib: Any = None
        if lib_or_options is None or isinstance(lib_or_options, Mapping):
            opts = dict(lib_or_options or {})
            if opts.setdefault("order", self.order) != self.order:
                raise InputError(
                    f"library option order={opts['order']!r} differs from the integrator "
                    f"order {self.order}"
                )
            from sapporo import Library

            factory = opts.pop("library_factory", None) or Library
            self.lib = factory(**opts)
            self._owns_lib = True
        else:
            lib = lib_or_options
            if getattr(lib, "order", None) != self.order:
                raise InputError(
                    f"the library has order {getattr(lib, 'order', None)!r}, the integrator "
                    f"needs order {self.order}"
                )
            self.lib = lib
        self.precision = getattr(self.lib, "precision", None)
        self.device_name = str(getattr(self.lib, "device_name", "unknown device"))

    def _compute(self, x: np.ndarray, v: np.ndarray, ids: np.ndarray,
                 a: np.ndarray | None, jerk: np.ndarray | None = None) -> Any:
        t0 = _time.perf_counter()
        if self.order == 8:
            f = self.lib.compute(x, v, ids, self.eps2, a=a, jerk=jerk)
        else:
            f = self.lib.compute(x, v, ids, self.eps2, a=a if self.order == 6 else None)
        self.library_seconds += _time.perf_counter() - t0
        self.force_calls += 1
        self.interactions += int(x.shape[0]) * self.n
        return f

    def _send(self, sel: np.ndarray | slice, state: tuple | None = None) -> None:
        """Upload the (corrected) state of particles ``sel`` as j-particles. ``state``:
        (t, x, v, a, jerk, snap, crackle[, pop, d5]) of those particles when the caller holds
        them already (the same values as ``self.t[sel]``, ...), which saves gathering them."""
        if state is None:
            state = (self.t[sel], self.x[sel], self.v[sel], self.a[sel], self.jerk[sel],
                     self.snap[sel], self.crackle[sel])
            if self.order == 8:
                state += (self.pop[sel], self.d5[sel])
        t, x, v, a, jerk, snap, crackle = state[:7]
        if self.order == 8:
            self.lib.set_j_particles(self._addr[sel], self.ids[sel], t, self.m[sel], x, v,
                                     a=a, jerk=jerk, snap=snap, crackle=crackle,
                                     pop=state[7], d5=state[8])
            return
        six = self.order == 6
        self.lib.set_j_particles(
            self._addr[sel], self.ids[sel], t, self.m[sel], x, v, a=a, jerk=jerk,
            snap=snap if six else None, crackle=crackle if six else None,
        )

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
        log.debug("started %d particles at t=%g, steps %g..%g", n, t0, self.dt.min(),
                  self.dt.max())

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

        Returns
        -------
        HermiteIntegrator
        """
        snapshot.validate()
        p = snapshot.params
        try:
            order = int(p["order"])
            eta, eps2 = p["eta"], p["eps2"]
            dt_min, dt_max = p["dt_min"], p["dt_max"]
            criterion, eta4, eta_s = p["criterion"], p["eta4"], p["eta_s"]
        except KeyError as exc:
            raise InputError(f"snapshot lacks integrator parameter {exc}") from None
        self = cls.__new__(cls)
        self._set_params(order, eta, eps2, dt_min, dt_max, criterion, eta4, eta_s)
        self._set_particles(snapshot.x, snapshot.v, snapshot.m, snapshot.ids)
        self._reset_counters()
        c = snapshot.counters
        self.steps = int(c.get("steps", 0))
        self.block_steps = int(c.get("block_steps", 0))
        self.interactions = int(c.get("interactions", 0))
        self.force_calls = int(c.get("force_calls", 0))
        self.library_seconds = float(c.get("library_seconds", 0.0))
        self.fallback_steps = int(c.get("fallback_steps", 0))
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
        self.t = np.array(snapshot.t, dtype=np.float64)
        self.dt = np.array(snapshot.dt, dtype=np.float64)
        self.a = np.array(snapshot.a, dtype=np.float64)
        self.jerk = np.array(snapshot.jerk, dtype=np.float64)
        self.snap = np.array(snapshot.snap, dtype=np.float64)
        self.crackle = np.array(snapshot.crackle, dtype=np.float64)
        self.pot = np.array(snapshot.pot, dtype=np.float64)
        if np.any(self.t > self.time) or np.any(self.t + self.dt < self.time):
            raise InputError("snapshot particle times are inconsistent with its global time")
        if isinstance(lib_or_options, Mapping) or lib_or_options is None:
            opts = dict(lib_or_options or {})
            if "precision" in p:
                opts.setdefault("precision", p["precision"])
            lib_or_options = opts
        self._open(lib_or_options)
        self._set_noise(p.get("force_noise"))
        try:
            self._send(slice(None))
        except BaseException:
            self.close()
            raise
        return self

    # ------------------------------------------------------------------ properties

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
        """Counters: particle steps, block steps, interactions, force calls, library time."""
        return {
            "steps": self.steps, "block_steps": self.block_steps,
            "interactions": self.interactions, "force_calls": self.force_calls,
            "library_seconds": self.library_seconds, "fallback_steps": self.fallback_steps,
        }

    @property
    def n_active_sum(self) -> int:
        """Sum of the active-block sizes over all block steps (equals :attr:`steps`)."""
        return self.steps

    @property
    def mean_n_active(self) -> float:
        """Mean number of active particles per block step (0 before the first)."""
        return self.steps / self.block_steps if self.block_steps else 0.0

    @property
    def synchronised(self) -> bool:
        """True when every particle is at the global time."""
        return bool(np.all(self.t == self.time))

    # ------------------------------------------------------------------ integration

    def request_stop(self) -> None:
        """Ask :meth:`evolve` to stop after the current block (as Ctrl-C does)."""
        self._stop_requested = True

    @contextmanager
    def _deferred_sigint(self) -> Iterator[None]:
        """While evolving, Ctrl-C only requests a stop; a second one interrupts at once.

        Only Python's default SIGINT handler is replaced: a handler the application installed
        (``sapporo run`` installs one for SIGINT and SIGTERM that calls :meth:`request_stop`)
        stays in charge.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            if self._stop_requested:
                raise KeyboardInterrupt
            self._stop_requested = True

        try:
            signal.signal(signal.SIGINT, handler)
        except ValueError:  # not in the main interpreter thread after all
            yield
            return
        try:
            yield
        finally:
            signal.signal(
                signal.SIGINT, previous if previous is not None else signal.default_int_handler
            )

    def _grid_time(self, t: float) -> float:
        """``t`` rounded to the ``dt_min`` grid."""
        k = round(t / self.dt_min)
        tg = k * self.dt_min
        if tg != t:
            log.info("target time %r rounded to the block grid: %r", t, tg)
        return tg

    def evolve(self, t_end: float, callback: Callable[[HermiteIntegrator], Any] | None = None
               ) -> float:
        """Integrate until every particle is at ``t_end`` (rounded to the dt_min grid).

        Steps are capped so that no particle passes ``t_end``; a ``t_end`` that is a multiple
        of ``dt_max`` changes nothing. Ctrl-C (or :meth:`request_stop`) finishes the current
        block and raises :class:`KeyboardInterrupt` with a consistent state.

        Parameters
        ----------
        t_end : float
            Target time (>= the current time).
        callback : callable, optional
            Called as ``callback(self)`` after every block step.

        Returns
        -------
        float
            The time reached (``t_end`` on the grid).
        """
        try:
            t_end_f = float(t_end)
        except (TypeError, ValueError):
            raise InputError(f"t_end must be a number, got {t_end!r}") from None
        if not math.isfinite(t_end_f):
            raise InputError(f"t_end must be finite, got {t_end!r}")
        t_end_f = self._grid_time(t_end_f)
        if t_end_f < self.time:
            raise InputError(f"t_end ({t_end!r}) is before the current time {self.time!r}")
        if self.lib is None:
            raise SapporoError("the integrator is closed")
        self.interrupted = False
        below = self.t < t_end_f
        if below.any():
            cap = floor_pow2(np.where(below, t_end_f - self.t, 1.0))
            self.dt = np.where(below & (self.t + self.dt > t_end_f), np.minimum(self.dt, cap),
                               self.dt)
        with self._deferred_sigint():
            while self.time < t_end_f:
                self._block_step(t_end_f)
                if callback is not None:
                    callback(self)
                if self._stop_requested:
                    self._stop_requested = False
                    self.interrupted = True
                    raise KeyboardInterrupt
        return self.time

    def _block_step(self, t_limit: float) -> None:
        """Advance the active block: predict, compute, correct, choose steps, upload."""
        if self.order == 8:
            self._block_step8(t_limit)
            return
        t_next = self.t + self.dt
        tb = float(t_next.min())
        act = np.flatnonzero(t_next == tb)
        h = self.dt[act]
        x0, v0, a0, j0 = self.x[act], self.v[act], self.a[act], self.jerk[act]
        six = self.order == 6
        if six:
            s0, c0 = self.snap[act], self.crackle[act]
            xp, vp, ap = predict_taylor(h, x0, v0, a0, j0, s0, c0)
        else:
            xp, vp, ap = predict_taylor(h, x0, v0, a0, j0)
        self.lib.set_time(tb)
        f = self._compute(xp, vp, self.ids[act], ap if six else None)
        a1 = np.asarray(f.acc, dtype=np.float64)
        j1 = np.asarray(f.jerk, dtype=np.float64)
        hc = h[:, None]
        tau = 0.5 * hc
        am = 0.5 * (a1 - a0)
        jp = 0.5 * (j1 + j0)
        jm = 0.5 * (j1 - j0)
        if six:
            s1 = np.asarray(f.snap, dtype=np.float64)
            v1 = v0 + hc * (0.5 * (a1 + a0) + hc * (-0.1 * (j1 - j0)
                                                    + hc * ((1.0 / 120.0) * (s1 + s0))))
            x1 = x0 + hc * (0.5 * (v1 + v0) + hc * (-0.1 * (a1 - a0)
                                                    + hc * ((1.0 / 120.0) * (j1 + j0))))
            # Quintic through a, j, s at both ends (midpoint expansion, T in [-tau, tau]).
            sp = 0.5 * (s1 + s0)
            sm = 0.5 * (s1 - s0)
            d4 = 3.0 * (sp - jm / tau) / tau**2
            d5 = 15.0 * (sm * tau**2 - 3.0 * jp * tau + 3.0 * am) / tau**5
            d3 = sm / tau - d5 * tau**2 / 6.0
            c1 = d3 + tau * (d4 + 0.5 * tau * d5)
            pop1 = d4 + tau * d5
            derivs = [a1, j1, s1, c1, pop1, d5]
        else:
            v1 = v0 + hc * (0.5 * (a1 + a0) + hc * ((1.0 / 12.0) * (j0 - j1)))
            x1 = x0 + hc * (0.5 * (v1 + v0) + hc * ((1.0 / 12.0) * (a0 - a1)))
            # Cubic through a, j at both ends.
            d2 = jm / tau
            d3 = 3.0 * (jp - am / tau) / tau**2
            s1 = d2 + tau * d3
            c1 = d3
            derivs = [a1, j1, s1, c1]
        # Every norm the criteria need, in one pass: |a|, |j| (, |s|) at the start of the
        # step, then those of the derivatives at its end.
        k0 = 3 if six else 2
        norms = _norms(([a0, j0, s0] if six else [a0, j0]) + derivs)
        n0, n1 = norms[:k0], norms[k0:]
        crit = _criterion_from_norms(self.criterion, self.order, self.eta, self.eta4, n1)
        fb = _fallback_from_norms(self.criterion, self.order, self.eta, self.eta4,
                                  n1[0], n1[1], n1[2] if six else None)
        if self.force_noise > 0.0:
            unresolved = _unresolved(self.criterion, self.order, self.force_noise, tau[:, 0],
                                     n0, n1)
            if unresolved.any():
                crit = np.where(unresolved, fb, crit)
                self.fallback_steps += int(unresolved.sum())
        # Never below a fixed fraction of the fallback: force noise the model above
        # underestimates cannot make the steps collapse to dt_min.
        crit = np.fmax(crit, FLOOR_FRACTION * fb)
        t_new = np.full(act.size, tb)
        dt_new = quantise_steps(crit, h, t_new, self.dt_min, self.dt_max, t_limit)

        # Commit the block (all temporaries are ready, so the state stays consistent).
        self.x[act], self.v[act], self.a[act], self.jerk[act] = x1, v1, a1, j1
        self.snap[act], self.crackle[act] = s1, c1
        self.pot[act] = f.pot
        self.t[act] = tb
        self.dt[act] = dt_new
        self.time = tb
        self._send(act, (tb, x1, v1, a1, j1, s1, c1))  # the arrays at hand, not re-gathered
        self.steps += int(act.size)
        self.block_steps += 1
        self.n_active_counts[act.size] += 1

    def _block_step8(self, t_limit: float) -> None:
        """:meth:`_block_step` of the 8th-order scheme (see the module docstring)."""
        t_next = self.t + self.dt
        tb = float(t_next.min())
        act = np.flatnonzero(t_next == tb)
        h = self.dt[act]
        x0, v0, a0, j0 = self.x[act], self.v[act], self.a[act], self.jerk[act]
        s0, c0 = self.snap[act], self.crackle[act]
        xp, vp, ap, jp = predict_taylor8(h, x0, v0, a0, j0, s0, c0, self.pop[act],
                                         self.d5[act])
        self.lib.set_time(tb)
        f = self._compute(xp, vp, self.ids[act], ap, jp)
        a1 = np.asarray(f.acc, dtype=np.float64)
        j1 = np.asarray(f.jerk, dtype=np.float64)
        s1 = np.asarray(f.snap, dtype=np.float64)
        c1 = np.asarray(f.crackle, dtype=np.float64)
        hc = h[:, None]
        v1 = v0 + hc * (0.5 * (a0 + a1) + hc * ((3.0 / 28.0) * (j0 - j1) + hc * (
            (1.0 / 84.0) * (s0 + s1) + hc * ((1.0 / 1680.0) * (c0 - c1)))))
        x1 = x0 + hc * (0.5 * (v0 + v1) + hc * ((3.0 / 28.0) * (a0 - a1) + hc * (
            (1.0 / 84.0) * (j0 + j1) + hc * ((1.0 / 1680.0) * (s0 - s1)))))
        tau = 0.5 * h
        d4, d5, d6, d7 = interpolate8(tau, a0, j0, s0, c0, a1, j1, s1, c1)
        derivs = [a1, j1, s1, c1, d4, d5, d6, d7]
        norms = _norms([a0, j0, s0, c0] + derivs)
        n0, n1 = norms[:4], norms[4:]
        crit = _criterion_from_norms(self.criterion, 8, self.eta, self.eta4, n1)
        fb = _fallback_from_norms(self.criterion, 8, self.eta, self.eta4, n1[0], n1[1], n1[2])
        if self.force_noise > 0.0:
            unresolved = _unresolved(self.criterion, 8, self.force_noise, tau, n0, n1)
            if unresolved.any():
                crit = np.where(unresolved, fb, crit)
                self.fallback_steps += int(unresolved.sum())
        crit = np.fmax(crit, FLOOR_FRACTION * fb)
        t_new = np.full(act.size, tb)
        dt_new = quantise_steps(crit, h, t_new, self.dt_min, self.dt_max, t_limit)

        self.x[act], self.v[act], self.a[act], self.jerk[act] = x1, v1, a1, j1
        self.snap[act], self.crackle[act] = s1, c1
        self.pop[act], self.d5[act] = d4, d5
        self.pot[act] = f.pot
        self.t[act] = tb
        self.dt[act] = dt_new
        self.time = tb
        self._send(act, (tb, x1, v1, a1, j1, s1, c1, d4, d5))
        self.steps += int(act.size)
        self.block_steps += 1
        self.n_active_counts[act.size] += 1

    # ------------------------------------------------------------------ diagnostics

    def predicted(self, t: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions, velocities and accelerations of all particles predicted to ``t``.

        Parameters
        ----------
        t : float, optional
            Common time (default: the global time); no particle may be ahead of it.

        Returns
        -------
        x, v, a : ndarray, shape (n, 3)
            Exactly the stored values for particles already at ``t``.
        """
        t = self.time if t is None else float(t)
        if np.any(self.t > t):
            raise InputError(f"cannot predict backwards to t={t!r}")
        h = t - self.t
        if self.order == 8:
            return self._predicted8(h)[:3]
        if self.order == 6:
            return predict_taylor(h, self.x, self.v, self.a, self.jerk, self.snap, self.crackle)
        return predict_taylor(h, self.x, self.v, self.a, self.jerk)

    def _predicted8(self, h: np.ndarray) -> tuple[np.ndarray, ...]:
        """x, v, a and jerk of all particles predicted by ``h`` (8th order)."""
        return predict_taylor8(h, self.x, self.v, self.a, self.jerk, self.snap, self.crackle,
                               self.pop, self.d5)

    def energy_terms(self) -> tuple[float, float]:
        """Kinetic and potential energy at the global time.

        All particles are predicted to :attr:`time` (exact when synchronised) and the
        potential comes from one force evaluation of all of them by the library,
        ``W = 0.5 sum m pot`` (softened with ``eps2``).

        Returns
        -------
        kinetic, potential : float
        """
        if self.lib is None:
            raise SapporoError("the integrator is closed")
        x, v, a = self.predicted()
        jerk = self._predicted8(self.time - self.t)[3] if self.order == 8 else None
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
        """A complete copy of the state (synchronised after :meth:`evolve` returns).

        Returns
        -------
        Snapshot
            Everything :meth:`from_snapshot` needs to continue bit for bit (at 8th order
            the 4th and 5th derivatives ride in ``meta`` as exact JSON floats).
        """
        meta = dict(self.meta)
        if self.order == 8:
            meta[_META_POP], meta[_META_D5] = self.pop.tolist(), self.d5.tolist()
        return Snapshot(
            time=self.time, x=self.x.copy(), v=self.v.copy(), m=self.m.copy(),
            ids=self.ids.copy(), t=self.t.copy(), dt=self.dt.copy(), a=self.a.copy(),
            jerk=self.jerk.copy(), snap=self.snap.copy(), crackle=self.crackle.copy(),
            pot=self.pot.copy(), params=self.params, counters=self.counters,
            n_active_counts=self.n_active_counts.copy(), meta=meta,
        )

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Close the library if the integrator opened it (idempotent)."""
        lib, self.lib = getattr(self, "lib", None), None
        if lib is not None and getattr(self, "_owns_lib", False):
            lib.close()

    def __enter__(self) -> HermiteIntegrator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
