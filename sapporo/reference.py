"""Independent float64 NumPy oracle for every force kernel of the library.

Everything here is plain, vectorised double-precision NumPy, written to be read and
trusted rather than to be fast.  The kernel tests compare the devices against it.

Conventions
-----------
* G = 1; the potential is negative, ``pot_i = -sum_j m_j / R``.
* All time derivatives are unscaled (no factorials folded in).
* With ``r = xj - xi``, ``v = vj - vi``, ``a = aj - ai`` and ``R^2 = |r|^2 + eps2``::

      acc_ij  = m r / R^3
      alpha   = (r . v) / R^2
      jerk_ij = m v / R^3 - 3 alpha acc_ij
      beta    = (|v|^2 + r . a) / R^2 + alpha^2
      snap_ij = m a / R^3 - 6 alpha jerk_ij - 3 beta acc_ij      (Nitadori & Makino 2008)
      pot_ij  = -m / R

* Crackle (order 8, the third time derivative) is *not* computed by the kernels' recurrence
  (alpha, beta, gamma) but by truncated Taylor-series arithmetic along the relative path
  ``r(t) = r + v t + a t^2/2 + j t^3/6`` (``j = jerk_j - jerk_i``): the coefficients of
  ``s(t) = |r(t)|^2 + eps2``, of ``s(t)^(-3/2)`` by the power-series recurrence
  ``q_k = sum_{i=1..k} (i (p + 1) - k) s_i q_{k-i} / (k s_0)`` with ``p = -3/2``, and of
  ``m q(t) r(t)``; crackle is ``3!`` times its ``t^3`` coefficient.  (tests/core/test_order8.py
  checks it against finite differences in 40-digit decimal arithmetic.)

* A j-particle whose id equals the i-particle's id contributes nothing and is never a
  neighbour.  Zero-mass j-particles give no force but are neighbour candidates.
* Coincident particles with different ids and ``eps2 = 0`` give non-finite results,
  silently (no NumPy warnings): the oracle does not hide them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sapporo.core import validate
from sapporo.errors import InputError

__all__ = ["CUTOFF_SHAPES", "ReferenceForces", "cutoff_factors", "forces", "plummer", "predict",
           "relative_vector_error", "uniform_cube"]

#: Default upper bound on the number of (i, j) pairs handled at once by :func:`forces`.
#: Each per-pair temporary is then at most 8 MiB (vector temporaries 24 MiB).
DEFAULT_CHUNK_ELEMENTS = 1 << 20

_NO_ID = np.iinfo(np.int64).max

# The arguments are checked as the library checks them (sapporo.core.validate): the same
# messages, and the same refusals (non-finite values, complex numbers, text, booleans, ragged
# lists). Nothing here writes to the checked arrays, which may be the caller's own.


# --------------------------------------------------------------------------- prediction


def predict(t: float, tj: float | np.ndarray, x: np.ndarray, v: np.ndarray,
            a: np.ndarray | None = None, jerk: np.ndarray | None = None,
            snap: np.ndarray | None = None, crackle: np.ndarray | None = None,
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Taylor-predict j-particles from their times ``tj`` to time ``t``.

    With ``dt = t - tj``::

        xp = x + v dt + a dt^2/2 + jerk dt^3/6 + snap dt^4/24 + crackle dt^5/120
        vp = v + a dt + jerk dt^2/2 + snap dt^3/6 + crackle dt^4/24
        ap = a + jerk dt + snap dt^2/2 + crackle dt^3/6

    Parameters
    ----------
    t : float
        Target time.
    tj : float or ndarray, shape (n,)
        Time of each particle's data (one scalar for all, or one per particle).
    x, v : ndarray, shape (n, 3)
        Positions and velocities at ``tj``.
    a, jerk, snap, crackle : ndarray, shape (n, 3), optional
        Higher derivatives at ``tj``; a missing (None) term is zero.

    Returns
    -------
    xp, vp, ap : ndarray, shape (n, 3), float64
        Predicted position, velocity and acceleration (new arrays).
    """
    x = validate.vec3("x", x, None)
    n = x.shape[0]
    v = validate.vec3("v", v, n)
    a, jerk, snap, crackle = (np.zeros((n, 3)) if val is None else validate.vec3(name, val, n)
                              for name, val in (("a", a), ("jerk", jerk), ("snap", snap),
                                                ("crackle", crackle)))
    dt = (validate.scalar("t", t) - validate.scalars("tj", tj, n))[:, None]

    xp = x + v * dt + a * dt**2 / 2 + jerk * dt**3 / 6 + snap * dt**4 / 24 + crackle * dt**5 / 120
    vp = v + a * dt + jerk * dt**2 / 2 + snap * dt**3 / 6 + crackle * dt**4 / 24
    ap = a + jerk * dt + snap * dt**2 / 2 + crackle * dt**3 / 6
    return xp, vp, ap


# --------------------------------------------------------------------------- forces


@dataclass
class ReferenceForces:
    """Forces on a set of i-particles from a set of j-particles (see :func:`forces`).

    Attributes
    ----------
    acc, jerk, snap : ndarray, shape (ni, 3)
        Acceleration and its first two time derivatives (jerk when order >= 4, snap when
        order >= 6, else None).
    pot : ndarray, shape (ni,)
        Potential, ``-sum_j m_j / R``.
    nn_index : ndarray, shape (ni,), int64
        Id (not position) of the nearest neighbour by unsoftened r^2; ties go to the
        lower id; -1 when there is no candidate.
    nn_r2 : ndarray, shape (ni,)
        Unsoftened r^2 to that neighbour; inf when there is none.
    acc_abs, jerk_abs, snap_abs : ndarray, shape (ni,)
        Sum over j of the magnitudes of the pairwise terms: the error scale.
    pot_abs : ndarray, shape (ni,)
        ``sum_j |m_j| / R`` (``sum_j m_j / R`` for non-negative masses).
    neighbours : list of ndarray or None
        When ``h2`` is given: per i, the ascending int64 ids with unsoftened r^2 < h2.
    neighbour_r2 : list of ndarray or None
        The matching unsoftened r^2 values, in the same order.
    crackle, crackle_abs : ndarray, shape (ni, 3) / (ni,), or None
        Third time derivative of the acceleration and its error scale (order 8).
    """

    acc: np.ndarray
    jerk: np.ndarray | None
    snap: np.ndarray | None
    pot: np.ndarray
    nn_index: np.ndarray
    nn_r2: np.ndarray
    acc_abs: np.ndarray
    jerk_abs: np.ndarray | None
    snap_abs: np.ndarray | None
    pot_abs: np.ndarray
    neighbours: list[np.ndarray] | None
    neighbour_r2: list[np.ndarray] | None
    crackle: np.ndarray | None = None
    crackle_abs: np.ndarray | None = None


def _dot(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Component-wise dot product of two (3, ...) arrays, summed x + y + z in order."""
    return p[0] * q[0] + p[1] * q[1] + p[2] * q[2]


def _norm(p: np.ndarray) -> np.ndarray:
    """Euclidean norm of a (3, ...) array."""
    return np.sqrt(_dot(p, p))


def forces(xi: np.ndarray, vi: np.ndarray | None, index_i: np.ndarray, xj: np.ndarray,
           vj: np.ndarray | None, mj: np.ndarray, index_j: np.ndarray, eps2: float, *,
           order: int = 4, ai: np.ndarray | None = None, aj: np.ndarray | None = None,
           h2: float | np.ndarray | None = None, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
           ji: np.ndarray | None = None, jj: np.ndarray | None = None,
           cutoff: float | None = None, cutoff_shape: str = "s2") -> ReferenceForces:
    """Direct-summation forces on i-particles from j-particles, in float64.

    Parameters
    ----------
    xi, vi : ndarray, shape (ni, 3)
        Positions and velocities of the i-particles (``vi`` may be None for order 2).
    index_i : ndarray, shape (ni,), integer
        Ids of the i-particles (a j-particle with the same id is excluded).
    xj, vj : ndarray, shape (nj, 3)
        Positions and velocities of the j-particles (``vj`` may be None for order 2).
    mj : ndarray, shape (nj,)
        Masses of the j-particles.
    index_j : ndarray, shape (nj,), integer
        Ids of the j-particles.
    eps2 : float
        Softening length squared (>= 0).
    order : {2, 4, 6, 8}
        2: acceleration and potential; 4: plus jerk; 6: plus snap (needs ``ai``, ``aj``);
        8: plus crackle (needs ``ai``, ``aj``, ``ji``, ``jj``).
    ai, aj : ndarray, shape (ni, 3) / (nj, 3), optional
        Accelerations of the i- and j-particles, required for orders 6 and 8.
    h2 : float or ndarray, shape (ni,), optional
        Neighbour radius squared (unsoftened); when given, neighbour lists are built.
    chunk_elements : int
        Upper bound on the number of pairs evaluated at once (memory bound; results do
        not depend on it).
    ji, jj : ndarray, shape (ni, 3) / (nj, 3), optional
        Jerks of the i- and j-particles, required for order 8.
    cutoff : float, optional
        Order 2 only: the short-range (cutoff) force of a TreePM / P^3M split with this
        split length (:func:`cutoff_factors`): each pair's acceleration times ``g(R)``, its
        potential times ``h(R)``; pairs with ``R = 0`` are left out. ``acc_abs`` and
        ``pot_abs`` stay the sums of the Newtonian magnitudes (the scale of the rounding).
    cutoff_shape : {"s2", "gauss"}
        The split (:func:`cutoff_factors`).

    Returns
    -------
    ReferenceForces
        The forces, error scales, nearest neighbours and (optionally) neighbour lists.

    Raises
    ------
    ValueError
        On a bad order, shape, dtype, length or missing argument (the message names it).
    """
    if isinstance(order, bool) or order not in (2, 4, 6, 8):
        raise InputError(f"order must be 2, 4, 6 or 8, got {order!r}")
    cut = None
    if cutoff is not None:
        if order != 2:
            raise InputError(f"cutoff needs order 2, got order {order!r}")
        cut = (validate.positive("cutoff", cutoff), _cutoff_shape(cutoff_shape))
    xi = validate.vec3("xi", xi, None)
    ni = xi.shape[0]
    xj = validate.vec3("xj", xj, None)
    nj = xj.shape[0]
    index_i = validate.ints("index_i", index_i, ni, -(2**63), 2**63 - 1)
    index_j = validate.ints("index_j", index_j, nj, -(2**63), 2**63 - 1)
    mj = validate.scalars("mj", mj, nj)
    given = {"vi": vi, "vj": vj, "ai": ai, "aj": aj, "ji": ji, "jj": jj}
    for name in list(given)[: order - 2]:  # order 4 needs vi, vj; 6 ai, aj too; 8 ji, jj too
        if given[name] is None:
            raise InputError(f"{name} is required for order {order}")
    vi, vj, ai, aj, ji, jj = (np.zeros((k, 3)) if u is None else validate.vec3(name, u, k)
                              for (name, u), k in zip(given.items(), (ni, nj) * 3, strict=True))
    eps2 = validate.scalar("eps2", eps2, nonneg=True)
    h2_arr = None if h2 is None else validate.scalars("h2", h2, ni)
    chunk_elements = validate.int_arg("chunk_elements", chunk_elements, 1, 2**62)

    out = ReferenceForces(
        acc=np.zeros((ni, 3)), jerk=np.zeros((ni, 3)) if order >= 4 else None,
        snap=np.zeros((ni, 3)) if order >= 6 else None, pot=np.zeros(ni),
        nn_index=np.full(ni, -1, dtype=np.int64), nn_r2=np.full(ni, np.inf),
        acc_abs=np.zeros(ni), jerk_abs=np.zeros(ni) if order >= 4 else None,
        snap_abs=np.zeros(ni) if order >= 6 else None, pot_abs=np.zeros(ni),
        neighbours=None if h2_arr is None else [], neighbour_r2=None if h2_arr is None else [],
        crackle=np.zeros((ni, 3)) if order == 8 else None,
        crackle_abs=np.zeros(ni) if order == 8 else None)
    if nj == 0:
        if h2_arr is not None:
            out.neighbours = [np.zeros(0, dtype=np.int64) for _ in range(ni)]
            out.neighbour_r2 = [np.zeros(0) for _ in range(ni)]
        return out

    # Component-major (3, n) copies: every per-pair array below is (3, rows, nj) or
    # (rows, nj), so sums over j run along contiguous rows, independently of the chunking.
    xjT, vjT, ajT, jjT = xj.T.copy(), vj.T.copy(), aj.T.copy(), jj.T.copy()
    rows = max(1, chunk_elements // nj)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for s in range(0, ni, rows):
            e = min(ni, s + rows)
            _chunk(out, s, e, order, eps2, h2_arr,
                   xi[s:e].T, vi[s:e].T, ai[s:e].T, index_i[s:e],
                   xjT, vjT, ajT, mj, index_j, ji[s:e].T, jjT, cut)
    return out


def _chunk(out: ReferenceForces, s: int, e: int, order: int, eps2: float,
           h2: np.ndarray | None, xi: np.ndarray, vi: np.ndarray, ai: np.ndarray,
           index_i: np.ndarray, xj: np.ndarray, vj: np.ndarray, aj: np.ndarray, mj: np.ndarray,
           index_j: np.ndarray, ji: np.ndarray, jj: np.ndarray,
           cut: tuple[float, str] | None = None) -> None:
    """Fill rows ``s:e`` of ``out``; vector inputs are component-major, shape (3, n)."""
    r = xj[:, None, :] - xi[:, :, None]  # (3, c, nj)
    r2 = _dot(r, r)  # unsoftened, (c, nj)
    same = index_j[None, :] == index_i[:, None]

    # Nearest neighbour: minimum unsoftened r^2 among the other ids, ties to the lower id.
    r2_other = np.where(same, np.inf, r2)
    nn_r2 = r2_other.min(axis=1)
    candidate = ~same & (r2_other == nn_r2[:, None])
    nn_id = np.where(candidate, index_j[None, :], _NO_ID).min(axis=1)
    has_nn = candidate.any(axis=1)
    out.nn_index[s:e] = np.where(has_nn, nn_id, -1)
    out.nn_r2[s:e] = np.where(has_nn, nn_r2, np.inf)

    if h2 is not None:
        inside = ~same & (r2 < h2[s:e, None])
        for row in range(e - s):
            ids = index_j[inside[row]]
            order_by_id = np.argsort(ids, kind="stable")
            out.neighbours.append(ids[order_by_id])
            out.neighbour_r2.append(r2[row][inside[row]][order_by_id])

    # Self pairs are masked *before* dividing, so eps2 = 0 gives no 0/0 for them; other
    # coincident pairs with eps2 = 0 divide by zero and stay non-finite on purpose.
    R2 = np.where(same, 1.0, r2 + eps2)
    inv_R2 = np.where(same, 0.0, 1.0 / R2)
    inv_R = np.sqrt(inv_R2)
    m = mj[None, :]
    m_R3 = m * inv_R * inv_R2

    pot = m * inv_R
    if cut is not None:
        # the short-range parts; coincident pairs (R = 0) left out, as self pairs are
        keep = ~same & (r2 + eps2 > 0.0)
        m_R3 = np.where(keep, m_R3, 0.0)
        pot = np.where(keep, pot, 0.0)
    acc = m_R3 * r  # (3, c, nj)
    out.acc_abs[s:e] = _norm(acc).sum(axis=1)
    out.pot_abs[s:e] = np.abs(pot).sum(axis=1)
    if cut is not None:
        g, h = cutoff_factors(np.sqrt(np.where(keep, R2, 0.0)), *cut)
        out.acc[s:e] = (m_R3 * g * r).sum(axis=2).T
        out.pot[s:e] = -(pot * h).sum(axis=1)
        return
    out.acc[s:e] = acc.sum(axis=2).T
    out.pot[s:e] = -pot.sum(axis=1)
    if order == 2:
        return

    v = vj[:, None, :] - vi[:, :, None]
    alpha = _dot(r, v) * inv_R2
    jerk = m_R3 * v - 3.0 * alpha * acc
    out.jerk[s:e] = jerk.sum(axis=2).T
    out.jerk_abs[s:e] = _norm(jerk).sum(axis=1)
    if order == 4:
        return

    a = aj[:, None, :] - ai[:, :, None]
    beta = (_dot(v, v) + _dot(r, a)) * inv_R2 + alpha * alpha
    snap = m_R3 * a - 6.0 * alpha * jerk - 3.0 * beta * acc
    out.snap[s:e] = snap.sum(axis=2).T
    out.snap_abs[s:e] = _norm(snap).sum(axis=1)
    if order == 6:
        return

    # Crackle by truncated Taylor series along r(t) (see the module docstring): coefficients
    # of r(t), s(t) = |r(t)|^2 + eps2 and q(t) = s(t)^(-3/2) up to t^3.
    rc = [r, v, 0.5 * a, (jj[:, None, :] - ji[:, :, None]) / 6.0]
    sc = [_dot(rc[i], rc[k - i]) for k in range(4) for i in range(k + 1)]
    s_k = [sc[0] + eps2, sc[1] + sc[2], sc[3] + sc[4] + sc[5], sc[6] + sc[7] + sc[8] + sc[9]]
    p = -1.5
    q = [np.where(same, 0.0, inv_R * inv_R2)]
    inv_s0 = inv_R2
    for k in range(1, 4):
        q.append(sum((i * (p + 1.0) - k) * s_k[i] * q[k - i] for i in range(1, k + 1))
                 * inv_s0 / k)
    crackle = 6.0 * m * sum(q[i] * rc[3 - i] for i in range(4))
    out.crackle[s:e] = crackle.sum(axis=2).T
    out.crackle_abs[s:e] = _norm(crackle).sum(axis=1)


# --------------------------------------------------------------------------- cutoff

#: the splits :func:`cutoff_factors` knows (as :class:`sapporo.Library`'s ``cutoff_shape``)
CUTOFF_SHAPES = ("s2", "gauss")

#: Gauss-Legendre rule for the S2 potential's integral (exact for the polynomial pieces,
#: to rounding for the 12 / xi^2 term)
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(24)


def _cutoff_shape(shape: object) -> str:
    if not isinstance(shape, str) or shape.lower() not in CUTOFF_SHAPES:
        raise InputError(f"cutoff_shape must be one of {', '.join(CUTOFF_SHAPES)}, got "
                         f"{shape!r}")
    return shape.lower()


def _s2_force(r: np.ndarray, a: float) -> np.ndarray:
    """The force between two S2 clouds of diameter ``a`` at distance ``r`` (unit masses,
    G = 1; Hockney & Eastwood's R(xi), xi = 2 r / a, as Phantom-GRAPE's PG5/table
    ``reff(a, r) * r`` writes it): Newton's ``1/r^2`` for ``r >= a``."""
    xi = 2.0 * r / a
    inner = xi * (224.0 + xi * xi * (-224.0 + xi * (70.0 + xi * (48.0 - 21.0 * xi))))
    safe = np.where(xi > 0.0, xi, 1.0)
    outer = (12.0 / (safe * safe) - 224.0 + xi * (896.0 + xi * (-840.0 + xi * (
        224.0 + xi * (70.0 + xi * (-48.0 + xi * 7.0))))))
    newton = 4.0 / (safe * safe)  # 1 / r^2 in units of 1 / a^2
    return np.where(xi < 1.0, inner / 35.0, np.where(xi < 2.0, outer / 35.0, newton)) / (a * a)


def cutoff_factors(R: np.ndarray, cutoff: float, shape: str = "s2",
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The short-range factors of a TreePM / P^3M split at distances ``R``, in float64.

    Newton's pair force ``m / R^2`` splits into a long-range part (the mesh's) and the
    short-range part ``g(R) m / R^2``; the potential ``-m / R`` likewise into
    ``-h(R) m / R`` and the rest, with ``d/dR (h / R) = -g / R^2``.

    * ``"s2"`` (Phantom-GRAPE's PG5/table): the long-range force is that between two S2
      clouds (Hockney & Eastwood) of diameter ``a = cutoff`` (PG5's ``SFT_FOR_PM``), so
      ``g = 1 - R^2 F_S2(R)``, zero for ``R >= a``; ``h = R * integral_R^a g(s) / s^2 ds``,
      evaluated here by Gauss-Legendre quadrature of ``F_S2`` (not by the closed form the
      kernels use).
    * ``"gauss"`` (:class:`sapporo.pm.P3M`): ``x = R / (2 r_s)``, ``r_s = cutoff``,
      ``g = erfc(x) + 2 x exp(-x^2) / sqrt(pi)``, ``h = erfc(x)``.

    Parameters
    ----------
    R : array_like
        Distances (>= 0); ``g(0) = h(0) = 1``.
    cutoff : float
        The split length.
    shape : {"s2", "gauss"}
        The split.

    Returns
    -------
    g, h : ndarray
        The factors of the force and of the potential, shaped as ``R``.
    """
    a = validate.positive("cutoff", cutoff)
    shape = _cutoff_shape(shape)
    R = np.asarray(R, dtype=np.float64)
    if shape == "gauss":
        x = R / (2.0 * a)
        h = np.vectorize(math.erfc, otypes=[np.float64])(x)
        return h + 2.0 / math.sqrt(math.pi) * x * np.exp(-x * x), h
    g = np.where(R < a, 1.0 - R * R * _s2_force(R, a), 0.0)
    # h = R (1/R - 1/a - integral_R^a F_S2 ds), the integral over the two pieces of F_S2
    integral = np.zeros_like(R)
    for lo, hi in ((np.minimum(R, a / 2), np.full_like(R, a / 2)),
                   (np.clip(R, a / 2, a), np.full_like(R, a))):
        half = (hi - lo) / 2.0
        s = (lo + half)[..., None] + half[..., None] * _GL_NODES
        integral += half * (_s2_force(s, a) * _GL_WEIGHTS).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(R > 0.0, 1.0 - R / a - R * integral, 1.0)
    return g, np.where(R < a, h, 0.0)


# --------------------------------------------------------------------------- helpers


def check_seed(seed: object) -> int:
    """A random seed: a non-negative integer (bools, floats, strings and None refused)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def plummer(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plummer sphere in Henon units (G = M = 1, E = -1/4), reproducible from ``seed``.

    Aarseth, Henon & Wielen (1974) sampling with ``np.random.default_rng(seed)``: radii
    from the inverted cumulative mass (mass fraction drawn below 0.999, as in the usual
    implementations, to avoid rare far outliers), speeds by von Neumann rejection from
    ``q^2 (1 - q^2)^(7/2)``, isotropic directions; then moved to the centre-of-mass frame
    and scaled from Plummer's structural units by ``3 pi / 16`` (lengths) and
    ``sqrt(16 / (3 pi))`` (velocities).

    Parameters
    ----------
    n : int
        Number of particles (>= 1).
    seed : int
        Seed for :func:`numpy.random.default_rng` (a non-negative integer).

    Returns
    -------
    x, v : ndarray, shape (n, 3)
        Positions and velocities.
    m : ndarray, shape (n,)
        Masses, ``1 / n`` each.
    """
    n = _count(n)
    check_seed(seed)
    rng = np.random.default_rng(seed)
    mass_fraction = rng.uniform(0.0, 0.999, n)
    # Guard the (measure-zero) draw 0.0, which would put a particle at r = 0 exactly.
    mass_fraction = np.maximum(mass_fraction, np.finfo(np.float64).tiny)
    radius = 1.0 / np.sqrt(mass_fraction ** (-2.0 / 3.0) - 1.0)
    x = radius[:, None] * _isotropic(rng, n)

    q = np.empty(n)
    filled = 0
    while filled < n:
        want = n - filled
        trial = rng.uniform(0.0, 1.0, want)
        accept = rng.uniform(0.0, 0.1, want) < trial**2 * (1.0 - trial**2) ** 3.5
        got = trial[accept]
        q[filled:filled + got.size] = got
        filled += got.size
    escape = np.sqrt(2.0) * (1.0 + radius**2) ** -0.25
    v = (q * escape)[:, None] * _isotropic(rng, n)

    m = np.full(n, 1.0 / n)
    x -= m @ x
    v -= m @ v
    scale = 3.0 * np.pi / 16.0
    return x * scale, v / np.sqrt(scale), m


def uniform_cube(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions uniform in [-1, 1]^3, small random velocities, equal masses.

    Parameters
    ----------
    n : int
        Number of particles (>= 1).
    seed : int
        Seed for :func:`numpy.random.default_rng` (a non-negative integer).

    Returns
    -------
    x : ndarray, shape (n, 3)
        Positions, uniform in [-1, 1]^3.
    v : ndarray, shape (n, 3)
        Velocities, normal with standard deviation 0.1 per component.
    m : ndarray, shape (n,)
        Masses, ``1 / n`` each.
    """
    n = _count(n)
    check_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (n, 3))
    v = rng.normal(0.0, 0.1, (n, 3))
    return x, v, np.full(n, 1.0 / n)


def relative_vector_error(
    result: np.ndarray, reference: np.ndarray, scale: float | np.ndarray
) -> np.ndarray:
    """The library's error metric: ``|result - reference|`` per row divided by ``scale``.

    Parameters
    ----------
    result, reference : ndarray, shape (n, 3) or (n,)
        Values to compare; for 2-d input the Euclidean norm of each row's difference is
        taken, for 1-d input the absolute difference.
    scale : float or ndarray, shape (n,)
        Error scale, normally ``sum_j |term_j|`` (e.g. ``ReferenceForces.acc_abs``).
        Where it is 0 the absolute difference is returned unscaled.

    Returns
    -------
    ndarray, shape (n,)
        The relative error per row (non-finite where either input is).
    """
    result = np.asarray(result, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    if result.shape != reference.shape:
        raise InputError(f"result and reference must have the same shape, got {result.shape} "
                         f"and {reference.shape}")
    if result.ndim not in (1, 2):
        raise InputError(f"result must be 1-d or 2-d, got shape {result.shape}")
    with np.errstate(invalid="ignore", over="ignore"):
        diff = result - reference
        delta = np.abs(diff) if diff.ndim == 1 else np.sqrt((diff * diff).sum(axis=1))
        scale_arr = np.broadcast_to(np.asarray(scale, dtype=np.float64), delta.shape)
        safe = np.where(scale_arr == 0.0, 1.0, scale_arr)
        return np.where(scale_arr == 0.0, delta, delta / safe)


def _count(n: object) -> int:
    """Validate a particle count."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"n must be a positive integer, got {n!r}")
    return int(n)


def _isotropic(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` random unit vectors, uniform on the sphere, shape (n, 3)."""
    z = rng.uniform(-1.0, 1.0, n)
    phi = rng.uniform(0.0, 2.0 * np.pi, n)
    s = np.sqrt(1.0 - z * z)
    return np.stack([s * np.cos(phi), s * np.sin(phi), z], axis=1)
