"""Star-cluster initial conditions in Hénon units, and simple cluster diagnostics.

Hénon (N-body) units: G = 1, total mass M = 1, total energy E = -1/4 (virial radius 1).

* :func:`plummer`: an equal-mass Plummer sphere, reproducible from a seed (the sampling of
  :func:`sapporo.reference.plummer`). By default it is scaled analytically to Hénon units
  (the length scale 3 pi / 16 of an infinite Plummer sphere), so its measured energy differs
  from -1/4 by the sampling noise, about 1/sqrt(N); with ``exact=True`` it is rescaled
  exactly (measured, unsoftened potential energy) to E = -1/4 in virial equilibrium.
* :func:`star_cluster`: the same with an optional second, heavier mass component and an
  optional central massive black hole; these variants are always rescaled exactly.
"""

from __future__ import annotations

import math

import numpy as np

from sapporo import reference
from sapporo.errors import InputError

__all__ = [
    "kinetic_energy",
    "lagrangian_radii",
    "plummer",
    "potential_energy",
    "star_cluster",
    "to_henon_units",
    "two_component_counts",
]

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
        False (default): the analytic scaling of an infinite Plummer sphere, so the measured
        energy is -1/4 only up to the sampling noise (about 1/sqrt(N)). True: moved to the
        centre-of-mass frame and rescaled so that the unsoftened potential energy is
        exactly -1/2 and the kinetic energy exactly 1/4 (E = -1/4, virial ratio 1/2).

    Returns
    -------
    x, v : ndarray, shape (n, 3)
    m : ndarray, shape (n,)
        ``1 / n`` each.

    Raises
    ------
    InputError
        For ``exact`` with fewer than 2 particles (no potential energy to scale).
    """
    x, v, m = reference.plummer(n, seed)
    if not exact:
        return x, v, m
    if m.size < 2:
        raise InputError(f"exact scaling to E = -1/4 needs n >= 2, got {n!r}")
    return to_henon_units(x, v, m)


def kinetic_energy(v: np.ndarray, m: np.ndarray) -> float:
    """``0.5 sum m |v|^2``."""
    v = np.asarray(v, dtype=np.float64)
    return 0.5 * float(np.sum(np.asarray(m, dtype=np.float64) * np.einsum("ij,ij->i", v, v)))


def potential_energy(x: np.ndarray, m: np.ndarray, eps2: float = 0.0) -> float:
    """Exact pairwise potential energy ``-sum_{i<j} m_i m_j / sqrt(r_ij^2 + eps2)``.

    Float64 NumPy in row chunks: O(n^2) work, O(n) memory (a few seconds for n = 16k).

    Parameters
    ----------
    x : ndarray, shape (n, 3)
    m : ndarray, shape (n,)
    eps2 : float
        Softening squared.

    Returns
    -------
    float
    """
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


def to_henon_units(
    x: np.ndarray, v: np.ndarray, m: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Move to the centre-of-mass frame and scale to Hénon units in virial equilibrium.

    Masses are normalised to a total of 1, positions scaled so that the (unsoftened)
    potential energy is -1/2 and velocities so that the kinetic energy is 1/4.

    Returns
    -------
    x, v, m : ndarray
        New arrays.
    """
    m = np.asarray(m, dtype=np.float64) / float(np.sum(m))
    x = np.asarray(x, dtype=np.float64) - m @ np.asarray(x, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64) - m @ np.asarray(v, dtype=np.float64)
    w = potential_energy(x, m)
    x = x * (w / -0.5)
    k = kinetic_energy(v, m)
    if k > 0.0:
        v = v * math.sqrt(0.25 / k)
    return x, v, m


def two_component_counts(n: int, heavy_fraction: float, mass_ratio: float) -> tuple[int, float]:
    """Number of heavy stars and the light-star mass for a two-component cluster.

    With ``n_h`` heavy stars of mass ``mass_ratio * m_l`` and ``n - n_h`` light stars of
    mass ``m_l``, the heavy stars carry ``heavy_fraction`` of the total mass 1 (as closely
    as whole numbers allow; at least one star of each kind when ``0 < heavy_fraction``).

    Returns
    -------
    n_heavy : int
    m_light : float
    """
    if heavy_fraction <= 0.0 or n < 2:
        return 0, 1.0 / n
    f, mu = heavy_fraction, mass_ratio
    n_h = int(round(f * n / (mu * (1.0 - f) + f)))
    n_h = min(max(n_h, 1), n - 1)
    return n_h, 1.0 / (n_h * mu + (n - n_h))


def star_cluster(
    n: int,
    seed: int = 0,
    heavy_fraction: float = 0.0,
    mass_ratio: float = 1.0,
    bh_mass: float = 0.0,
    exact: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A Plummer star cluster, optionally two-component and with a central black hole.

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

    Returns
    -------
    x, v : ndarray, shape (n, 3)
    m : ndarray, shape (n,)
        Total mass 1. With neither option this is exactly ``plummer(n, seed, exact)``;
        otherwise the system is rescaled exactly (unsoftened) to E = -1/4 in virial
        equilibrium. Stars
        are positioned independently of their mass (no initial mass segregation).

    Raises
    ------
    InputError
        For parameters out of range, or ``n`` too small for the components (at least
        2 stars: ``n >= 3`` with a black hole, ``n >= 2`` with two components).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"n must be a positive integer, got {n!r}")
    n = int(n)
    for name, value in (("heavy_fraction", heavy_fraction), ("bh_mass", bh_mass)):
        if not (isinstance(value, (int, float, np.floating)) and 0.0 <= value < 1.0):
            raise InputError(f"{name} must be in [0, 1), got {value!r}")
    if not (isinstance(mass_ratio, (int, float, np.floating)) and math.isfinite(mass_ratio)
            and mass_ratio >= 1.0):
        raise InputError(f"mass_ratio must be a finite number >= 1, got {mass_ratio!r}")
    reference.check_seed(seed)
    if heavy_fraction == 0.0 and bh_mass == 0.0:
        return plummer(n, seed, exact=bool(exact))
    n_stars = n - 1 if bh_mass > 0.0 else n
    if n_stars < 2:  # one star sits at the centre of mass, i.e. on the black hole
        raise InputError(
            f"n = {n} is too small for the requested components: at least 2 stars are "
            f"needed (n >= {3 if bh_mass > 0.0 else 2}"
            + (" with a black hole)" if bh_mass > 0.0 else ")")
        )
    x, v, m = plummer(n_stars, seed)
    if heavy_fraction > 0.0:
        n_h, m_l = two_component_counts(n_stars, float(heavy_fraction), float(mass_ratio))
        heavy = np.random.default_rng([seed, 1]).permutation(n_stars)[:n_h]
        m = np.full(n_stars, m_l)
        m[heavy] = m_l * mass_ratio
        # The stellar positions and velocities keep their Plummer values; restore the
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


def lagrangian_radii(
    x: np.ndarray,
    m: np.ndarray,
    fractions: tuple[float, ...] = (0.1, 0.5, 0.9),
    centre: np.ndarray | None = None,
) -> np.ndarray:
    """Radii enclosing the given fractions of the total mass.

    Parameters
    ----------
    x : ndarray, shape (n, 3)
    m : ndarray, shape (n,)
    fractions : tuple of float
        Mass fractions in (0, 1].
    centre : ndarray, shape (3,), optional
        Default: the centre of mass.

    Returns
    -------
    ndarray, shape (len(fractions),)
        The smallest particle radius at which the enclosed mass reaches each fraction.
    """
    x = np.asarray(x, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    if centre is None:
        centre = m @ x / float(np.sum(m))
    r = np.sqrt(np.sum((x - centre) ** 2, axis=1))
    order = np.argsort(r, kind="stable")
    cum = np.cumsum(m[order]) / float(np.sum(m))
    idx = np.searchsorted(cum, np.asarray(fractions, dtype=np.float64) * (1.0 - 1e-12))
    return r[order][np.minimum(idx, r.size - 1)]
