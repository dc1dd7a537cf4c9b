"""Green's functions and the FFT Poisson solve of the particle-mesh solver, on the host with
:mod:`numpy.fft` (on CPU devices in place on the mesh buffers; docs/pm.md says why no device
FFT library is used yet).
"""

from __future__ import annotations

import math

import numpy as np

#: potential at the centre of a uniform cube of unit side and unit density, int dV / r:
#: 3 ln(2 + sqrt 3) - pi / 2 (the self-term of the isolated Green's function, in units of
#: mass / h)
CUBE_SELF = 3.0 * math.log(2.0 + math.sqrt(3.0)) - 0.5 * math.pi

#: Fourier-space power of each window's transfer function, sinc(k h / 2) ** p
_WINDOW_POWER = {"ngp": 1, "cic": 2, "tsc": 3}

#: the splits of gravity a P^3M / TreePM mesh keeps the long-range part of (as the short-range
#: force's ``cutoff_shape`` of :class:`sapporo.Library`): a Gaussian (split length r_s) or
#: S2 clouds (Hockney & Eastwood; split length the clouds' diameter a, PG5/table's)
SPLIT_SHAPES = ("gauss", "s2")


def s2_long_potential(r: np.ndarray, a: float) -> np.ndarray:
    """The long-range potential of a unit mass in the S2 split of diameter ``a``: that of
    two S2 clouds, ``-1/r`` from ``r = a`` on; inside, with ``xi = 2 r / a``,
    ``-(1 + I(xi) / 70) / a``, ``I`` the integral from ``xi`` to 2 of the clouds' force
    polynomial (``-208 / (70 a)`` at ``r = 0``). Newton's less the short-range potential
    ``h(R) / R`` of the force kernels' S2 cutoff (``sapporo/variants.h``)."""
    xi = 2.0 * np.asarray(r, dtype=np.float64) / a
    q_in = xi * xi * (112.0 + xi * xi * (-56.0 + xi * (14.0 + xi * (8.0 - 3.0 * xi))))
    safe = np.where(xi > 0.0, xi, 1.0)
    q_out = (-12.0 / safe + xi * (-224.0 + xi * (448.0 + xi * (-280.0 + xi * (
        56.0 + xi * (14.0 + xi * (-8.0 + xi)))))))
    integral = np.where(xi < 1.0, 138.0 - q_in, 58.0 - q_out)
    inside = -(1.0 + integral / 70.0) / a
    return np.where(xi < 2.0, inside, -1.0 / np.where(xi > 0.0, r, 1.0))


def isolated_green(grid: int, h: float, split: float | None = None,
                   shape: str = "gauss") -> np.ndarray:
    """The real-space free-space Green's function on the doubled mesh, shape (2G, 2G, 2G).

    ``g[i, j, k] = -1 / r`` with ``r = h * |(min(i, 2G - i), ...)|`` (Hockney & Eastwood's
    zero-padding method: a cyclic convolution on the doubled mesh equals the aperiodic one
    on the original mesh); the central value is the potential at the centre of a uniform
    cube of side ``h``, ``-CUBE_SELF / h``. With ``split`` (a length r_s) only the
    long-range part, ``-erf(r / 2 r_s) / r`` (centre ``-1 / (r_s sqrt(pi))``), for P^3M;
    with ``shape="s2"`` that of the S2 split of diameter ``split``
    (:func:`s2_long_potential`).
    """
    m = 2 * grid
    d = np.minimum(np.arange(m), m - np.arange(m))
    # squared distances in cells are integers up to 3 G^2: tabulate per integer
    r2 = d[:, None, None] ** 2 + d[None, :, None] ** 2 + d[None, None, :] ** 2
    table_r = h * np.sqrt(np.arange(3 * grid * grid + 1, dtype=np.float64))
    table_r[0] = 1.0
    if split is None:
        table = -1.0 / table_r
        table[0] = -CUBE_SELF / h
    elif shape == "s2":
        table_r[0] = 0.0
        table = s2_long_potential(table_r, split)
    else:
        erf = np.vectorize(math.erf, otypes=[np.float64])
        table = -erf(table_r / (2.0 * split)) / table_r
        table[0] = -1.0 / (split * math.sqrt(math.pi))
    return table[r2]


def isolated_kernel(grid: int, h: float, split: float | None = None,
                    window: str | None = None, shape: str = "gauss") -> np.ndarray:
    """The transform of :func:`isolated_green` times the cell volume (real: the Green's
    function is even), shape (2G, 2G, G + 1). With ``window``, divided by the window's
    transfer function squared on the doubled mesh (meant for the smooth long-range
    Green's function of P^3M)."""
    out = np.fft.rfftn(isolated_green(grid, h, split, shape)).real * h**3
    if window is not None:
        out /= _window_transfer(2 * grid, 2 * grid * h, window) ** 2
    return out.copy()


def _window_transfer(grid: int, box: float, window: str) -> np.ndarray:
    """The window's transfer function prod_d sinc(k_d h / 2)^p on the rfft layout."""
    h = box / grid
    sx, sz = (np.sinc(k * h / (2.0 * np.pi)) ** _WINDOW_POWER[window]
              for k in _wavenumbers(grid, box))
    return sx[:, None, None] * sx[None, :, None] * sz[None, None, :]


def _wavenumbers(grid: int, box: float) -> tuple[np.ndarray, np.ndarray]:
    """Angular wavenumbers along an axis: of the full and of the real (last) FFT axis."""
    return (2.0 * np.pi * np.fft.fftfreq(grid, d=box / grid),
            2.0 * np.pi * np.fft.rfftfreq(grid, d=box / grid))


def periodic_kernel(grid: int, box: float, green: str = "continuous",
                    window: str | None = None, split: float | None = None,
                    shape: str = "gauss") -> np.ndarray:
    """Fourier-space Green's function of the periodic mesh, shape (G, G, G // 2 + 1).

    ``green="continuous"``: ``-4 pi / k^2``; ``"discrete"``: the inverse of the 7-point
    Laplacian's eigenvalues, ``-4 pi / sum_d (2 - 2 cos(k_d h)) / h^2``. The mean (k = 0)
    is dropped: the potential is that of the density minus its mean. ``split`` (a length
    r_s) keeps the long-range part only, times ``exp(-k^2 r_s^2)`` (P^3M), or with
    ``shape="s2"`` times ``S(k)^2``, ``S = 12 (2 - 2 cos u - u sin u) / u^4``,
    ``u = k a / 2`` (the S2 cloud of diameter ``a = split``). With ``window``
    (``"ngp"``, ``"cic"``, ``"tsc"``) it is divided by the window's transfer function
    squared (deconvolution of assignment and interpolation).
    """
    h = box / grid
    k, kr = _wavenumbers(grid, box)
    if green == "continuous":
        kx2, kz2 = k**2, kr**2
    elif green == "discrete":
        kx2, kz2 = ((2.0 - 2.0 * np.cos(q * h)) / h**2 for q in (k, kr))
    else:
        raise ValueError(f"green: expected 'continuous' or 'discrete', got {green!r}")
    denom = kx2[:, None, None] + kx2[None, :, None] + kz2[None, None, :]
    denom[0, 0, 0] = 1.0
    out = -4.0 * np.pi / denom
    out[0, 0, 0] = 0.0
    if split is not None:  # the long-range part only (P^3M, TreePM)
        k2 = k[:, None, None] ** 2 + k[None, :, None] ** 2 + kr[None, None, :] ** 2
        if shape == "s2":  # times S(k)^2
            u = np.sqrt(k2) * split / 2.0
            big = np.where(u > 1e-3, u, 1.0)
            s = np.where(u > 1e-3, 12.0 * (2.0 - 2.0 * np.cos(big) - big * np.sin(big))
                         / big**4, 1.0 - u * u / 15.0)
            out *= s * s
        else:  # times exp(-k^2 r_s^2)
            out *= np.exp(-k2 * split**2)
    if window is not None:
        out /= _window_transfer(grid, box, window) ** 2
    return out


class HostFFTSolver:
    """Poisson by FFT on the host, ``phi = IFFT(kernel * FFT(rho))``, on ``grid`` points per
    side of a box of side ``box``: ``"isolated"`` (zero padding to 2G) or ``"periodic"``
    ``boundary``, in the precision ``dtype``; ``green``, ``window``, ``split`` and
    ``shape`` (P^3M, TreePM) as for :func:`periodic_kernel` and :func:`isolated_kernel`."""

    def __init__(self, grid: int, box: float, boundary: str, dtype: np.dtype,
                 green: str = "continuous", window: str | None = None,
                 split: float | None = None, shape: str = "gauss"):
        self.grid, self.boundary = grid, boundary
        h = box / grid
        if boundary == "isolated":
            kernel = isolated_kernel(grid, h, split, window, shape)
            self.shape = (2 * grid,) * 3
        else:
            kernel = periodic_kernel(grid, box, green, window, split, shape)
            self.shape = (grid,) * 3
        self.kernel = kernel.astype(dtype)

    def solve(self, rho: np.ndarray, phi: np.ndarray) -> None:
        """Write the potential of the mesh density ``rho`` (G, G, G) into ``phi``."""
        g = self.grid
        spec = np.fft.rfftn(rho, s=self.shape, axes=(0, 1, 2))
        spec *= self.kernel
        out = np.fft.irfftn(spec, s=self.shape, axes=(0, 1, 2))
        phi[...] = out[:g, :g, :g]
