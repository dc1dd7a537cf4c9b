"""Star-cluster initial conditions in Hénon units, and simple cluster diagnostics.

Hénon (N-body) units: G = 1, total mass M = 1, total energy E = -1/4 (virial radius 1).
Plummer spheres (:func:`plummer`) and King models (:func:`king`) are scaled analytically by
default (so their measured energy is -1/4 up to the sampling noise, about 1/sqrt(N)), or
exactly (:func:`to_henon_units`); :func:`star_cluster` adds a heavier mass component and a
central black hole. docs/initial-conditions.md describes the models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sapporo import reference
from sapporo.errors import InputError

__all__ = ["KING_W0_RANGE", "MODELS", "KingModel", "king", "king_model", "kinetic_energy",
           "lagrangian_radii", "plummer", "potential_energy", "star_cluster", "to_henon_units",
           "to_nbody_units", "two_component_counts"]

#: The cluster models :func:`star_cluster` builds.
MODELS = ("plummer", "king")
#: The central potentials ``W0`` of King models accepted (inclusive): below 1 the model is
#: nearly a uniform sphere, above 12 its tidal radius exceeds 10^3 core radii.
KING_W0_RANGE = (1.0, 12.0)

_PAIR_CHUNK = 1 << 21


def plummer(n: int, seed: int = 0, exact: bool = False
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equal-mass Plummer sphere in Hénon units (see :func:`sapporo.reference.plummer`).

    Parameters
    ----------
    n : int
        Number of particles (>= 1; >= 2 with ``exact``).
    seed : int
        Random seed; the same seed gives the same particles.
    exact : bool
        False (default): the analytic scaling of an infinite Plummer sphere (the measured
        energy is -1/4 up to the sampling noise). True: rescaled exactly, in the
        centre-of-mass frame, to E = -1/4 in virial equilibrium (:func:`to_henon_units`).

    Returns
    -------
    x, v : ndarray, shape (n, 3)
    m : ndarray, shape (n,)
        ``1 / n`` each.
    """
    return _scaled(*reference.plummer(n, seed), exact)


def _scaled(x: np.ndarray, v: np.ndarray, m: np.ndarray, exact: bool
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The system, rescaled exactly to E = -1/4 in virial equilibrium when ``exact``."""
    if not exact:
        return x, v, m
    if m.size < 2:
        raise InputError(f"exact scaling to E = -1/4 needs n >= 2, got {m.size}")
    return to_henon_units(x, v, m)


def kinetic_energy(v: np.ndarray, m: np.ndarray) -> float:
    """``0.5 sum m |v|^2``."""
    v = np.asarray(v, dtype=np.float64)
    return 0.5 * float(np.sum(np.asarray(m, dtype=np.float64) * np.einsum("ij,ij->i", v, v)))


def potential_energy(x: np.ndarray, m: np.ndarray, eps2: float = 0.0) -> float:
    """Exact pairwise potential energy ``-sum_{i<j} m_i m_j / sqrt(r_ij^2 + eps2)`` of the
    positions ``x`` (n, 3) and masses ``m`` (n,): float64 NumPy in row chunks, O(n^2) work,
    O(n) memory (a few seconds for n = 16k)."""
    x = np.asarray(x, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    n = x.shape[0]
    rows = max(1, _PAIR_CHUNK // max(n, 1))
    total = 0.0
    for s in range(0, n, rows):
        e = min(n, s + rows)
        d = x[s:e, None, :] - x[None, :, :]
        r2 = np.einsum("ijk,ijk->ij", d, d) + eps2
        r2[np.arange(e - s), np.arange(s, e)] = np.inf  # no self term
        total += float(np.sum(m[s:e, None] * m[None, :] / np.sqrt(r2)))
    return -0.5 * total


def to_henon_units(x: np.ndarray, v: np.ndarray, m: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Move to the centre-of-mass frame and scale to Hénon units in virial equilibrium: new
    arrays, the masses normalised to a total of 1, the positions scaled so that the
    (unsoftened) potential energy is -1/2 and the velocities so that the kinetic is 1/4."""
    m = np.asarray(m, dtype=np.float64) / float(np.sum(m))
    x = np.asarray(x, dtype=np.float64) - m @ np.asarray(x, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64) - m @ np.asarray(v, dtype=np.float64)
    w = potential_energy(x, m)
    x = x * (w / -0.5)
    k = kinetic_energy(v, m)
    if k > 0.0:
        v = v * math.sqrt(0.25 / k)
    return x, v, m


def to_nbody_units(x: np.ndarray, v: np.ndarray, m: np.ndarray, g: float = 1.0
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Move to the centre-of-mass frame and change units to N-body (Hénon) units (Heggie &
    Mathieu 1986: mass ``M``, length ``g M^2 / (-4 E)``, velocity ``sqrt(-4 E / M)``), so
    that G = M = 1 and E = -1/4; unlike :func:`to_henon_units`, the virial ratio is kept.

    Parameters
    ----------
    x, v : ndarray, shape (n, 3)
        Positions and velocities in any consistent units.
    m : ndarray, shape (n,)
        Masses (total > 0).
    g : float
        The gravitational constant in the units of ``x``, ``v`` and ``m`` (1 for N-body
        units; 6.6743e-11 for SI).

    Returns
    -------
    x, v, m : ndarray
        New arrays.

    Raises
    ------
    InputError
        When the system is not bound (E >= 0: no N-body units exist).
    """
    m = np.asarray(m, dtype=np.float64)
    total = float(np.sum(m))
    x = np.asarray(x, dtype=np.float64) - (m @ x) / total
    v = np.asarray(v, dtype=np.float64) - (m @ v) / total
    energy = kinetic_energy(v, m) + g * potential_energy(x, m)
    if not energy < 0.0:
        raise InputError(f"the system is not bound (total energy {energy:.6g} >= 0), so it "
                         "has no N-body units")
    length = g * total * total / (-4.0 * energy)
    speed = math.sqrt(-4.0 * energy / total)
    return x / length, v / speed, m / total


def _king_density(w: float) -> float:
    """King's density ``exp(W) erf(sqrt W) - sqrt(4 W / pi) (1 + 2 W / 3)`` (in units of
    ``rho_1``; 0 for ``W <= 0``), by its power series for small ``W`` (no cancellation)."""
    if w <= 0.0:
        return 0.0
    if w >= 1.0:
        return (math.exp(w) * math.erf(math.sqrt(w))
                - math.sqrt(4.0 * w / math.pi) * (1.0 + 2.0 * w / 3.0))
    # exp(W) erf(sqrt W) = 2 sqrt(W / pi) sum_k (2W)^k / (2k+1)!!; the terms k = 0, 1 cancel.
    term = 4.0 * w * w / 15.0
    total = 0.0
    k = 2
    while term > 1e-18 * total or total == 0.0:
        total += term
        term *= 2.0 * w / (2 * k + 3)
        k += 1
    return 2.0 * math.sqrt(w / math.pi) * total


def _check_w0(w0: object) -> float:
    """``w0`` as a float, checked to lie in :data:`KING_W0_RANGE`."""
    lo, hi = KING_W0_RANGE
    if (isinstance(w0, bool) or not isinstance(w0, (int, float, np.integer, np.floating))
            or not lo <= w0 <= hi):
        raise InputError(f"King model: W0 must be a number from {lo:g} to {hi:g}, got {w0!r}")
    return float(w0)


@dataclass(frozen=True)
class KingModel:
    """The numerical solution of a King (1966) model, in Hénon units (G = M = 1, E = -1/4).

    Attributes
    ----------
    w0 : float
        Central dimensionless potential ``W0 = Psi(0) / sigma^2``.
    r : ndarray
        Radii from 0 to the tidal radius, increasing.
    w : ndarray
        The dimensionless potential ``W = Psi / sigma^2`` at ``r`` (``W0`` to 0).
    mass : ndarray
        The mass fraction inside ``r`` (0 to 1).
    r_tidal, r_core : float
        The tidal radius and King's core radius ``r0 = sqrt(9 sigma^2 / (4 pi G rho_0))``.
    concentration : float
        ``log10(r_tidal / r_core)``.
    sigma : float
        The velocity parameter ``sigma`` of the distribution function
        ``f(E) ~ exp(E / sigma^2) - 1`` (E the binding energy per unit mass).
    """

    w0: float
    r: np.ndarray
    w: np.ndarray
    mass: np.ndarray
    r_tidal: float
    r_core: float
    concentration: float
    sigma: float


#: Step of the integration of King's Poisson equation in ln(r / r0).
_KING_STEP = 1.0 / 256.0


def king_model(w0: float) -> KingModel:
    """Solve Poisson's equation of a King (1966) model: ``W'' + 2 W' / r = -9 rho(W) /
    rho(W0)`` (G = sigma = r0 = 1), by 4th-order Runge-Kutta in ``ln r`` out to the tidal
    radius, where ``W = 0``; then scaled to Hénon units with the virial theorem
    (docs/initial-conditions.md).

    Parameters
    ----------
    w0 : float
        Central potential, in :data:`KING_W0_RANGE`.

    Raises
    ------
    InputError
        For ``w0`` outside :data:`KING_W0_RANGE` or not a number.
    """
    w0 = _check_w0(w0)
    rho0 = _king_density(w0)

    def deriv(t: float, w: float, y: float) -> tuple[float, float]:
        # W(t), Y = dW/dt with t = ln r: W_tt + W_t = -9 r^2 rho(W) / rho(W0)
        return y, -y - 9.0 * math.exp(2.0 * t) * _king_density(w) / rho0

    def step(t: float, w: float, y: float, h: float) -> tuple[float, float]:
        k1 = deriv(t, w, y)
        k2 = deriv(t + h / 2, w + h / 2 * k1[0], y + h / 2 * k1[1])
        k3 = deriv(t + h / 2, w + h / 2 * k2[0], y + h / 2 * k2[1])
        k4 = deriv(t + h, w + h * k3[0], y + h * k3[1])
        return (w + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]),
                y + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]))

    r_start = 1e-4
    t, w, y = math.log(r_start), w0 - 1.5 * r_start**2, -3.0 * r_start**2
    points = [(t, w, y)]
    h = _KING_STEP
    while (w_y := step(t, w, y, h))[0] > 0.0:
        t, w, y = t + h, *w_y
        points.append((t, w, y))
    lo_h, hi_h = 0.0, h  # W(t + lo_h) > 0 >= W(t + hi_h)
    for _ in range(60):
        mid = 0.5 * (lo_h + hi_h)
        if step(t, w, y, mid)[0] > 0.0:
            lo_h = mid
        else:
            hi_h = mid
    points.append((t + hi_h, 0.0, step(t, w, y, hi_h)[1]))
    ts, ws, ys = np.asarray(points).T
    r = np.exp(ts)
    mass = -r * ys  # -r^2 dW/dr = -r dW/dt
    total = float(mass[-1])
    r_t = float(r[-1])
    r = np.concatenate(([0.0], r))
    wv = np.concatenate(([w0], ws))
    mass = np.concatenate(([0.0], mass))
    integral = float(np.sum(0.5 * (wv[1:] + wv[:-1]) * np.diff(mass)))  # int W dM
    potential = -0.5 * (integral + total * total / r_t)
    energy = 0.5 * potential  # virial equilibrium
    length = total * total / (-4.0 * energy)  # the Hénon length unit, in r0
    speed = math.sqrt(-4.0 * energy / total)  # the Hénon velocity unit, in sigma
    return KingModel(w0=w0, r=r / length, w=wv, mass=mass / total, r_tidal=r_t / length,
                     r_core=1.0 / length, concentration=math.log10(r_t),
                     sigma=1.0 / speed)


def king(n: int, w0: float = 6.0, seed: int = 0, exact: bool = False
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Equal-mass King (1966) model in Hénon units, sampled from its distribution function:
    radii from the cumulative mass of :func:`king_model`, isotropic directions, speeds by
    rejection from the lowered Maxwellian at each radius. Scaled with the model's own mass
    and energy, its measured energy is -1/4 up to the sampling noise (about 1/sqrt(N)).

    Parameters
    ----------
    n : int
        Number of particles (>= 1; >= 2 with ``exact``).
    w0 : float
        Central potential ``W0``, in :data:`KING_W0_RANGE`.
    seed : int
        Random seed (a non-negative integer).
    exact : bool
        Rescale exactly (unsoftened) to E = -1/4 in virial equilibrium, as
        :func:`plummer` does.

    Returns
    -------
    x, v : ndarray, shape (n, 3)
    m : ndarray, shape (n,)
        ``1 / n`` each.
    """
    n = reference._count(n)
    reference.check_seed(seed)
    model = king_model(w0)
    rng = np.random.default_rng(seed)
    r = np.interp(rng.uniform(0.0, 1.0, n), model.mass, model.r)
    x = r[:, None] * reference._isotropic(rng, n)
    w = np.interp(r, model.r, model.w)
    # Speeds in units of sigma: the density of v is g(v) = v^2 (exp(W - v^2/2) - 1). Its
    # maximum is at y = v^2 with (2 - y) exp(W - y/2) = 2, 0 < y < min(2, 2W).
    lo, hi = np.zeros(n), np.minimum(2.0, 2.0 * w)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        above = (2.0 - mid) * np.exp(w - 0.5 * mid) > 2.0
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    g_max = lo * np.expm1(w - 0.5 * lo)
    speed = np.empty(n)
    todo = np.arange(n)
    while todo.size:
        trial = rng.uniform(0.0, 1.0, todo.size) * np.sqrt(2.0 * w[todo])
        density = trial**2 * np.expm1(w[todo] - 0.5 * trial**2)
        accept = rng.uniform(0.0, 1.0, todo.size) * g_max[todo] <= density
        speed[todo[accept]] = trial[accept]
        todo = todo[~accept]
    v = (speed * model.sigma)[:, None] * reference._isotropic(rng, n)
    m = np.full(n, 1.0 / n)
    x -= m @ x
    v -= m @ v
    return _scaled(x, v, m, exact)


def two_component_counts(n: int, heavy_fraction: float, mass_ratio: float) -> tuple[int, float]:
    """The number of heavy stars ``n_h`` (of mass ``mass_ratio * m_l``) and the light-star
    mass ``m_l`` for which the heavy stars carry ``heavy_fraction`` of the total mass 1, as
    closely as whole numbers allow (at least one star of each kind when 0 < fraction)."""
    if heavy_fraction <= 0.0 or n < 2:
        return 0, 1.0 / n
    f, mu = heavy_fraction, mass_ratio
    n_h = int(round(f * n / (mu * (1.0 - f) + f)))
    n_h = min(max(n_h, 1), n - 1)
    return n_h, 1.0 / (n_h * mu + (n - n_h))


def star_cluster(n: int, seed: int = 0, heavy_fraction: float = 0.0, mass_ratio: float = 1.0,
                 bh_mass: float = 0.0, exact: bool = False, model: str = "plummer",
                 w0: float = 6.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A Plummer or King star cluster, optionally two-component and with a central black
    hole.

    Parameters
    ----------
    n : int
        Total number of particles, the black hole included.
    seed : int
        Random seed, a non-negative integer (positions, velocities and which stars are
        heavy).
    heavy_fraction : float
        Fraction of the stellar mass in heavy stars, in [0, 1).
    mass_ratio : float
        Heavy-to-light star mass ratio (>= 1); irrelevant when ``heavy_fraction`` is 0.
    bh_mass : float
        Black-hole mass as a fraction of the total mass, in [0, 1); the black hole is the
        last particle, at rest at the centre.
    exact : bool
        For the plain equal-mass cluster: rescale exactly to E = -1/4 (see :func:`plummer`;
        default False, the analytic scaling). The other variants are always exact.
    model : str
        ``"plummer"`` (:func:`plummer`) or ``"king"`` (:func:`king`), one of :data:`MODELS`.
    w0 : float
        The King model's central potential ``W0`` (ignored for Plummer).

    Returns
    -------
    x, v : ndarray, shape (n, 3)
    m : ndarray, shape (n,)
        Total mass 1. With neither option this is exactly ``plummer(n, seed, exact)``
        (``king(n, w0, seed, exact)``); otherwise rescaled exactly to E = -1/4 in virial
        equilibrium, the stars placed independently of their mass.

    Raises
    ------
    InputError
        For parameters out of range, or fewer than 2 stars.
    """
    n = reference._count(n)
    for name, value in (("heavy_fraction", heavy_fraction), ("bh_mass", bh_mass)):
        if not (isinstance(value, (int, float, np.floating)) and 0.0 <= value < 1.0):
            raise InputError(f"{name} must be in [0, 1), got {value!r}")
    if not (isinstance(mass_ratio, (int, float, np.floating)) and math.isfinite(mass_ratio)
            and mass_ratio >= 1.0):
        raise InputError(f"mass_ratio must be a finite number >= 1, got {mass_ratio!r}")
    reference.check_seed(seed)
    if model not in MODELS:
        raise InputError(f"model must be one of {', '.join(MODELS)}, got {model!r}")

    def sample(count: int, exactly: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if model == "king":
            return king(count, w0, seed, exact=exactly)
        return plummer(count, seed, exact=exactly)

    if model == "king":
        _check_w0(w0)
    if heavy_fraction == 0.0 and bh_mass == 0.0:
        return sample(n, bool(exact))
    n_stars = n - 1 if bh_mass > 0.0 else n
    if n_stars < 2:  # one star sits at the centre of mass, i.e. on the black hole
        raise InputError(f"n = {n} is too small for the requested components: at least 2 stars are "
                         f"needed (n >= {3 if bh_mass > 0.0 else 2}"
                         + (" with a black hole)" if bh_mass > 0.0 else ")"))
    x, v, m = sample(n_stars, False)
    if heavy_fraction > 0.0:
        n_h, m_l = two_component_counts(n_stars, float(heavy_fraction), float(mass_ratio))
        heavy = np.random.default_rng([seed, 1]).permutation(n_stars)[:n_h]
        m = np.full(n_stars, m_l)
        m[heavy] = m_l * mass_ratio
        # The stellar positions and velocities keep their model's values; restore the
        # centre-of-mass frame for the new masses.
        x = x - m @ x
        v = v - m @ v
    if bh_mass > 0.0:
        m = np.append(m * (1.0 - bh_mass), bh_mass)
        x = np.vstack([x, np.zeros((1, 3))])
        v = np.vstack([v, np.zeros((1, 3))])
    x, v, m = to_henon_units(x, v, m)
    if bh_mass > 0.0:
        # Keep the black hole exactly at rest at the centre.
        x = x - x[-1]
        v = v - v[-1]
    return x, v, m


def lagrangian_radii(x: np.ndarray, m: np.ndarray,
                     fractions: tuple[float, ...] = (0.1, 0.5, 0.9),
                     centre: np.ndarray | None = None) -> np.ndarray:
    """Radii enclosing the given ``fractions`` (in (0, 1]) of the total mass of the particles
    ``x`` (n, 3), ``m`` (n,) about ``centre`` (default: the centre of mass): for each, the
    smallest particle radius at which the enclosed mass reaches it."""
    x = np.asarray(x, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    if centre is None:
        centre = m @ x / float(np.sum(m))
    r = np.sqrt(np.sum((x - centre) ** 2, axis=1))
    order = np.argsort(r, kind="stable")
    cum = np.cumsum(m[order]) / float(np.sum(m))
    idx = np.searchsorted(cum, np.asarray(fractions, dtype=np.float64) * (1.0 - 1e-12))
    return r[order][np.minimum(idx, r.size - 1)]
