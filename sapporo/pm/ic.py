"""Initial conditions of the particle-mesh command: the three models of Aubert, Amini &
David (2009), a Plummer sphere, an exponential disk and a uniform random cube. G = 1,
total mass 1.
"""

from __future__ import annotations

import numpy as np

from sapporo import reference
from sapporo.errors import InputError

MODELS = ("plummer", "disk", "uniform")


def plummer(n: int, r_max: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A Plummer sphere in Hénon units (scale radius 3 pi / 16) truncated at ``r_max``:
    particles drawn beyond it are replaced by further draws (so the truncated model is
    slightly out of equilibrium; about 1% of the mass lies beyond 8 scale radii)."""
    if r_max <= 0:
        raise InputError(f"r_max: expected a positive radius, got {r_max!r}")
    xs, vs, got, k = [], [], 0, 0
    while got < n:
        x, v, _ = reference.plummer(max(n, 64), seed + 7919 * k)
        keep = np.linalg.norm(x, axis=1) < r_max
        xs.append(x[keep])
        vs.append(v[keep])
        got += int(keep.sum())
        k += 1
        if k > 1000:
            raise InputError(f"r_max {r_max}: too small for a Plummer sphere")
    x, v = np.concatenate(xs)[:n], np.concatenate(vs)[:n]
    x -= x.mean(axis=0)
    v -= v.mean(axis=0)
    return x, v, np.full(n, 1.0 / n)


def exponential_disk(n: int, r_max: float, seed: int = 0, scale_length: float = 1.0,
                     scale_height: float = 0.1, dispersion: float = 0.1
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A thin exponential disk (surface density ~ exp(-R / scale_length), Gaussian
    vertical profile) in the x-y plane, truncated at ``r_max`` in R and 3 scale heights
    in z, on circular orbits with the enclosed-mass speed sqrt(M(<R) / R) and a Gaussian
    velocity dispersion of ``dispersion`` times that speed in each component. Not an exact
    equilibrium: a test model for the solver."""
    rng = np.random.default_rng(seed)
    # R from the cumulative mass 1 - (1 + s) e^-s of the exponential disk (s = R / Rd),
    # by rejection below r_max
    s_max = r_max / scale_length
    cdf_max = 1.0 - (1.0 + s_max) * np.exp(-s_max)
    grid = np.linspace(0.0, s_max, 4097)
    cdf = 1.0 - (1.0 + grid) * np.exp(-grid)
    s = np.interp(rng.uniform(0.0, cdf_max, n), cdf, grid)
    big_r = s * scale_length
    phi = rng.uniform(0.0, 2 * np.pi, n)
    z = np.clip(rng.normal(0.0, scale_height, n), -3 * scale_height, 3 * scale_height)
    x = np.stack([big_r * np.cos(phi), big_r * np.sin(phi), z], axis=1)
    enclosed = (1.0 - (1.0 + s) * np.exp(-s)) / cdf_max
    vc = np.sqrt(enclosed / np.maximum(big_r, 1e-3 * scale_length))
    v = np.stack([-vc * np.sin(phi), vc * np.cos(phi), np.zeros(n)], axis=1)
    v += rng.normal(0.0, 1.0, (n, 3)) * (dispersion * vc)[:, None]
    x -= x.mean(axis=0)
    v -= v.mean(axis=0)
    return x, v, np.full(n, 1.0 / n)


def uniform_cube(n: int, side: float, seed: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Particles uniformly at random in ``[-side/2, side/2)^3``, at rest."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-side / 2, side / 2, (n, 3))
    x = np.minimum(x, np.nextafter(side / 2, 0.0))
    return x, np.zeros((n, 3)), np.full(n, 1.0 / n)


def make(model: str, n: int, box: float, seed: int = 0
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``x, v, m`` of ``model`` (one of :data:`MODELS`) sized for a box of side ``box``:
    the Plummer sphere and the disk within 0.4 box of the centre, the uniform cube filling
    the box (meant for periodic boundaries)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"n: expected a positive integer, got {n!r}")
    if model == "plummer":
        return plummer(n, 0.4 * box, seed)
    if model == "disk":
        return exponential_disk(n, 0.4 * box, seed)
    if model == "uniform":
        return uniform_cube(n, box, seed)
    raise InputError(f"ic: expected one of {', '.join(MODELS)}, got {model!r}")
