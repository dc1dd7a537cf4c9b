/* The particle-mesh kernels' variants and assignment window, written once: both kernel
 * trees include this file (kernels_opencl/pm.cl, kernels_cuda/pm.cu), so that assignment
 * and interpolation weigh the same cells with the same arithmetic in both languages.
 *
 * The includer defines PM_INLINE (how a small device function is declared: `inline` in
 * OpenCL C, `__device__ __forceinline__` in CUDA), PM_LONG (a 64-bit signed integer:
 * `long` in OpenCL C, `long long` in CUDA) and PM_GLOBAL (`__global`, nothing in CUDA).
 * The variants are described in pm.cl. */
#ifndef SAPPORO_PM_WINDOW_H
#define SAPPORO_PM_WINDOW_H

#ifndef PRECISION
#define PRECISION 2
#endif
#ifndef WINDOW
#define WINDOW 1
#endif
#ifndef PERIODIC
#define PERIODIC 0
#endif
#ifndef STENCIL
#define STENCIL 2
#endif
#ifndef NG
#define NG 16
#endif
#ifndef SPLIT
#define SPLIT 2
#endif
#if SPLIT != 1 && SPLIT != 2
#error "SPLIT must be 1 (S2) or 2 (Gaussian)"
#endif
#include "s2.h"

#if PRECISION == 1
typedef float real;
#elif PRECISION == 2
typedef double real;
#else
#error "PRECISION must be 1 (single) or 2 (double)"
#endif
#if WINDOW < 0 || WINDOW > 2
#error "WINDOW must be 0 (NGP), 1 (CIC) or 2 (TSC)"
#endif
#if PERIODIC != 0 && PERIODIC != 1
#error "PERIODIC must be 0 or 1"
#endif
#if STENCIL != 2 && STENCIL != 4
#error "STENCIL must be 2 or 4"
#endif
#if NG < 2
#error "NG must be at least 2"
#endif

#define NP (WINDOW + 1) /* window points per dimension */

/* The window's first point and weights along one axis, for u in mesh units (point i at
 * u = i). */
PM_INLINE int window1(double u, double *w)
{
#if WINDOW == 0
    const int i0 = (int)floor(u + 0.5);
    w[0] = 1.0;
    return i0;
#elif WINDOW == 1
    const int i0 = (int)floor(u);
    const double d = u - i0;
    w[0] = 1.0 - d;
    w[1] = d;
    return i0;
#else
    const int ic = (int)floor(u + 0.5);
    const double d = u - ic;
    w[0] = 0.5 * (0.5 - d) * (0.5 - d);
    w[1] = 0.75 - d * d;
    w[2] = 0.5 * (0.5 + d) * (0.5 + d);
    return ic - 1;
#endif
}

/* An index along one axis of n cells, or -1 when it falls off an isolated mesh. */
PM_INLINE int wrap_n(int i, int n)
{
#if PERIODIC
    i %= n;
    return i < 0 ? i + n : i;
#else
    return (i < 0 || i >= n) ? -1 : i;
#endif
}

/* A mesh index along one axis (NG cells), or -1 off an isolated mesh. */
PM_INLINE int wrap(int i) { return wrap_n(i, NG); }

/* Particle coordinate to mesh units. */
PM_INLINE double to_mesh(real x, double lo, double inv_h)
{
    return ((double)x - lo) * inv_h - 0.5;
}

/* Runs the statements given for every cell of the assignment window of the particle at
 * xp[0..2] that lies on the mesh, with `cell` (the cell's index) and `wa`, `wb`, `wc` (its
 * weights along x, y and z) defined: the one loop of assignment and interpolation. */
#define FOR_WINDOW_CELLS(xp, lo, inv_h, ...)                                                  \
    do {                                                                                      \
        double wx_[NP], wy_[NP], wz_[NP];                                                     \
        const int ix_ = window1(to_mesh((xp)[0], lo, inv_h), wx_);                            \
        const int iy_ = window1(to_mesh((xp)[1], lo, inv_h), wy_);                            \
        const int iz_ = window1(to_mesh((xp)[2], lo, inv_h), wz_);                            \
        for (int a_ = 0; a_ < NP; a_++) {                                                     \
            const int i_ = wrap(ix_ + a_);                                                    \
            if (i_ < 0) continue;                                                             \
            for (int b_ = 0; b_ < NP; b_++) {                                                 \
                const int j_ = wrap(iy_ + b_);                                                \
                if (j_ < 0) continue;                                                         \
                for (int c_ = 0; c_ < NP; c_++) {                                             \
                    const int k_ = wrap(iz_ + c_);                                            \
                    if (k_ < 0) continue;                                                     \
                    const PM_LONG cell = ((PM_LONG)i_ * NG + j_) * NG + k_;                   \
                    const double wa = wx_[a_], wb = wy_[b_], wc = wz_[c_];                    \
                    __VA_ARGS__                                                               \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
    } while (0)

/* The P^3M short-range sum of particle p (pm.cl's short_range, which says what it adds):
 * the particles of the 27 chaining-mesh cells around p's closer than rcut. PM_GLOBAL: the
 * includer's qualifier of device memory (`__global` in OpenCL C, nothing in CUDA). */
PM_INLINE void short_range_one(const int p, const double rs, const double rcut2,
                               const double lo, const double box, const double cell_inv,
                               const int nc, PM_GLOBAL const real *x, PM_GLOBAL const real *m,
                               PM_GLOBAL const int *start, PM_GLOBAL const int *end,
                               PM_GLOBAL real *acc, PM_GLOBAL real *pot)
{
    const double xi = x[3 * p], yi = x[3 * p + 1], zi = x[3 * p + 2];
    int ci[3];
    const double xyz[3] = {xi, yi, zi};
    for (int d = 0; d < 3; d++) {
        const int c = (int)floor((xyz[d] - lo) * cell_inv);
        ci[d] = c < 0 ? 0 : (c >= nc ? nc - 1 : c);
    }
#if SPLIT == 1
    const double two_over_a = 2.0 / rs;  /* (S2: rs is the clouds' diameter a) */
#else
    const double inv_2rs = 0.5 / rs, two_over_sqrtpi_2rs = 1.0 / (rs * 1.7724538509055160273);
#endif
    double ax = 0.0, ay = 0.0, az = 0.0, ph = 0.0;
    for (int a = -1; a <= 1; a++) {
        const int cx = wrap_n(ci[0] + a, nc);
        if (cx < 0) continue;
        for (int b = -1; b <= 1; b++) {
            const int cy = wrap_n(ci[1] + b, nc);
            if (cy < 0) continue;
            for (int c = -1; c <= 1; c++) {
                const int cz = wrap_n(ci[2] + c, nc);
                if (cz < 0) continue;
                const int cell = (cx * nc + cy) * nc + cz;
                for (int j = start[cell]; j < end[cell]; j++) {
                    if (j == p) continue;
                    double dx = (double)x[3 * j] - xi, dy = (double)x[3 * j + 1] - yi,
                           dz = (double)x[3 * j + 2] - zi;
#if PERIODIC
                    dx -= box * rint(dx / box);
                    dy -= box * rint(dy / box);
                    dz -= box * rint(dz / box);
#endif
                    const double r2 = dx * dx + dy * dy + dz * dz;
                    if (r2 >= rcut2 || r2 == 0.0) continue;
                    const double r = sqrt(r2), mj = (double)m[j];
#if SPLIT == 1  /* S2 (s2.h), zero from r = a on */
                    const double u = r * two_over_a, t = u < 2.0 ? 2.0 - u : 0.0;
                    const double g = (u < 1.0 ? S2_G_IN(u) : S2_G_OUT(t)) * (1.0 / 140);
                    const double e = (u < 1.0 ? S2_H_IN(u) : S2_H_OUT(t)) * (1.0 / 140);
#else  /* Gaussian: g = erfc(u) + 2 u exp(-u^2) / sqrt(pi), h = erfc(u), u = r / (2 rs) */
                    const double u = r * inv_2rs, e = erfc(u);
                    const double g = e + r * two_over_sqrtpi_2rs * exp(-u * u);
#endif
                    const double f = mj * g / (r2 * r);
                    ax += f * dx;
                    ay += f * dy;
                    az += f * dz;
                    ph -= mj * e / r;
                }
            }
        }
    }
    acc[3 * p] = (real)ax;
    acc[3 * p + 1] = (real)ay;
    acc[3 * p + 2] = (real)az;
    pot[p] = (real)ph;
}

#endif
