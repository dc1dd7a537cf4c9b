/* Particle-mesh gravity: mass assignment, finite-difference gradient, interpolation,
 * leapfrog updates and the multigrid relaxation kernels.
 *
 * Compile-time variants:
 *   PRECISION  1 = single (grids and particle arrays in float), 2 = double
 *   WINDOW     0 = NGP, 1 = CIC, 2 = TSC (assignment and interpolation use the same one)
 *   PERIODIC   1 = periodic mesh (indices wrap), 0 = isolated (the host keeps every window
 *              and stencil on the mesh; out-of-range points are skipped, never written)
 *   STENCIL    2 or 4: points of the centred finite-difference derivative
 *   NG         mesh points per dimension
 *
 * Mesh point (i, j, k) sits at the cell centre lo + (i + 1/2) h and is stored at
 * (i * NG + j) * NG + k. Particle coordinates are (n, 3) row-major arrays.
 *
 * Mass assignment is deterministic: every contribution is rounded to a 64-bit fixed-point
 * integer (mass * weight * scale) and added with an integer atomic. Integer addition is
 * associative, so the sum per cell does not depend on the order of the work-items. */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable

#define PM_INLINE inline
#define PM_LONG long
#define PM_GLOBAL __global
#include "pm_window.h"
#define NG3 ((long)NG * NG * NG)

/* Mass assignment: q[cell] += round(m * w * scale), 64-bit integer atomics. */
__kernel void assign(const int n, const double lo, const double inv_h, const double scale,
                     __global const real *x, __global const real *m, __global long *q)
{
    const int p = get_global_id(0);
    if (p >= n) return;
    const double ms = (double)m[p] * scale;
    FOR_WINDOW_CELLS(x + 3 * p, lo, inv_h, {
        const long v = (long)rint(ms * wa * wb * wc);
        if (v != 0) atom_add(q + cell, v);
    });
}

/* Floating-point atomics, for comparison only (ParticleMesh(..., assignment="float")):
 * rho[cell] += m * w * factor with a compare-and-swap loop (OpenCL 1.2 has no float
 * atomic add). Sums then depend on the order of the work-items in the last bits. */
inline void add_real(__global real *p, double v)
{
#if PRECISION == 2
    __global long *pl = (__global long *)p;
    long old = *pl, assumed;
    do {
        assumed = old;
        old = atom_cmpxchg(pl, assumed, as_long(as_double(assumed) + v));
    } while (old != assumed);
#else
    __global int *pi = (__global int *)p;
    int old = *pi, assumed;
    do {
        assumed = old;
        old = atomic_cmpxchg(pi, assumed, as_int(as_float(assumed) + (float)v));
    } while (old != assumed);
#endif
}

__kernel void assign_float(const int n, const double lo, const double inv_h,
                           const double factor, __global const real *x,
                           __global const real *m, __global real *rho)
{
    const int p = get_global_id(0);
    if (p >= n) return;
    const double ms = (double)m[p] * factor;
    FOR_WINDOW_CELLS(x + 3 * p, lo, inv_h, add_real(rho + cell, ms * wa * wb * wc););
}

/* Fixed-point sums to density: rho = q * factor (factor = 1 / (scale h^3)). */
__kernel void to_density(const double factor, __global const long *q, __global real *rho)
{
    const long c = get_global_id(0);
    if (c >= NG3) return;
    rho[c] = (real)((double)q[c] * factor);
}

/* One axis of the centred derivative of phi at point (i, j, k); s is the index stride of
 * the axis and t the point's index along it. Isolated meshes: points whose stencil leaves
 * the mesh get 0 (the host keeps particles away from them). */
inline double deriv(__global const real *phi, long c, int t, long s)
{
#if PERIODIC
    const long cp1 = c + (long)(wrap(t + 1) - t) * s, cm1 = c + (long)(wrap(t - 1) - t) * s;
#if STENCIL == 4
    const long cp2 = c + (long)(wrap(t + 2) - t) * s, cm2 = c + (long)(wrap(t - 2) - t) * s;
#endif
#else
    if (t - STENCIL / 2 < 0 || t + STENCIL / 2 >= NG) return 0.0;
    const long cp1 = c + s, cm1 = c - s;
#if STENCIL == 4
    const long cp2 = c + 2 * s, cm2 = c - 2 * s;
#endif
#endif
#if STENCIL == 2
    return 0.5 * ((double)phi[cp1] - (double)phi[cm1]);
#else
    return (8.0 * ((double)phi[cp1] - (double)phi[cm1])
            - ((double)phi[cp2] - (double)phi[cm2])) * (1.0 / 12.0);
#endif
}

/* Mesh acceleration g = -grad phi, stored as three planes g[d * NG^3 + cell]. */
__kernel void gradient(const double inv_h, __global const real *phi, __global real *g)
{
    const long c = get_global_id(0);
    if (c >= NG3) return;
    const int i = (int)(c / ((long)NG * NG));
    const int j = (int)((c / NG) % NG);
    const int k = (int)(c % NG);
    g[c] = (real)(-inv_h * deriv(phi, c, i, (long)NG * NG));
    g[NG3 + c] = (real)(-inv_h * deriv(phi, c, j, NG));
    g[2 * NG3 + c] = (real)(-inv_h * deriv(phi, c, k, 1));
}

/* Interpolation of potential and acceleration to the particles, same window. */
__kernel void interpolate(const int n, const double lo, const double inv_h,
                          __global const real *x, __global const real *phi,
                          __global const real *g, __global real *acc, __global real *pot)
{
    const int p = get_global_id(0);
    if (p >= n) return;
    double sp = 0.0, sx = 0.0, sy = 0.0, sz = 0.0;
    FOR_WINDOW_CELLS(x + 3 * p, lo, inv_h, {
        const double w = wa * wb * wc;
        sp += w * (double)phi[cell];
        sx += w * (double)g[cell];
        sy += w * (double)g[NG3 + cell];
        sz += w * (double)g[2 * NG3 + cell];
    });
    pot[p] = (real)sp;
    acc[3 * p] = (real)sx;
    acc[3 * p + 1] = (real)sy;
    acc[3 * p + 2] = (real)sz;
}

/* Leapfrog kick: v += dt * a (n particles, three components each). */
__kernel void kick(const int n, const double dt, __global const real *acc, __global real *v)
{
    const int q = get_global_id(0);
    if (q >= 3 * n) return;
    v[q] = (real)((double)v[q] + dt * (double)acc[q]);
}

/* Leapfrog drift: x += dt * v; periodic meshes wrap positions into [lo, lo + box).
 * flag[0] becomes 1 when a new position is not finite or, on isolated meshes, outside the
 * usable region [ulo, uhi) (as stored, after rounding to real); the host then finds and
 * names the particles. */
__kernel void drift(const int n, const double dt, const double lo, const double box,
                    const double ulo, const double uhi, __global real *x,
                    __global const real *v, __global int *flag)
{
    const int q = get_global_id(0);
    if (q >= 3 * n) return;
    double y = (double)x[q] + dt * (double)v[q];
#if PERIODIC
    y -= box * floor((y - lo) / box);
    if (y >= lo + box) y -= box; /* rounding of the line above */
#endif
    const real yr = (real)y;
    x[q] = yr;
    if (!isfinite(yr) || (double)yr < ulo || (double)yr >= uhi) flag[0] = 1;
}

/* ---- Multigrid (isolated boundaries, cell-centred, runtime level size nl) -------------- *
 * Solves L phi = rhs with the 7-point Laplacian. Dirichlet values sit on the box faces,
 * half a cell outside the outer points: the ghost value is 2 * b - phi. On the finest level
 * b comes from bnd (6 faces of nl^2 values: face 2 * axis + side, indexed by the two other
 * indices in order); on coarser levels (error equations) b = 0. */

inline double face_value(__global const real *bnd, int use_bnd, int nl, int face, int a,
                         int b)
{
    return use_bnd ? (double)bnd[((long)face * nl + a) * nl + b] : 0.0;
}

/* Sum of the six neighbours (ghosts for points on the faces) and the number of ghosts. */
inline double neighbour_sum(__global const real *phi, __global const real *bnd, int use_bnd,
                            int nl, int i, int j, int k, int *ghosts)
{
    const long c = ((long)i * nl + j) * nl + k;
    const long sx = (long)nl * nl, sy = nl;
    double s = 0.0;
    int ng = 0;
    if (i > 0) s += phi[c - sx]; else { s += 2.0 * face_value(bnd, use_bnd, nl, 0, j, k); ng++; }
    if (i < nl - 1) s += phi[c + sx]; else { s += 2.0 * face_value(bnd, use_bnd, nl, 1, j, k); ng++; }
    if (j > 0) s += phi[c - sy]; else { s += 2.0 * face_value(bnd, use_bnd, nl, 2, i, k); ng++; }
    if (j < nl - 1) s += phi[c + sy]; else { s += 2.0 * face_value(bnd, use_bnd, nl, 3, i, k); ng++; }
    if (k > 0) s += phi[c - 1]; else { s += 2.0 * face_value(bnd, use_bnd, nl, 4, i, j); ng++; }
    if (k < nl - 1) s += phi[c + 1]; else { s += 2.0 * face_value(bnd, use_bnd, nl, 5, i, j); ng++; }
    *ghosts = ng;
    return s;
}

/* One colour of red-black Gauss-Seidel: points with (i + j + k) % 2 == color. */
__kernel void mg_smooth(const int nl, const double h2, const int color, const int use_bnd,
                        __global real *phi, __global const real *rhs,
                        __global const real *bnd)
{
    const long c = get_global_id(0);
    if (c >= (long)nl * nl * nl) return;
    const int i = (int)(c / ((long)nl * nl)), j = (int)((c / nl) % nl), k = (int)(c % nl);
    if (((i + j + k) & 1) != color) return;
    int ng;
    const double s = neighbour_sum(phi, bnd, use_bnd, nl, i, j, k, &ng);
    phi[c] = (real)((s - h2 * (double)rhs[c]) / (6.0 + ng));
}

/* Residual res = rhs - L phi. */
__kernel void mg_residual(const int nl, const double inv_h2, const int use_bnd,
                          __global const real *phi, __global const real *rhs,
                          __global const real *bnd, __global real *res)
{
    const long c = get_global_id(0);
    if (c >= (long)nl * nl * nl) return;
    const int i = (int)(c / ((long)nl * nl)), j = (int)((c / nl) % nl), k = (int)(c % nl);
    int ng;
    const double s = neighbour_sum(phi, bnd, use_bnd, nl, i, j, k, &ng);
    res[c] = (real)((double)rhs[c] - inv_h2 * (s - (6.0 + ng) * (double)phi[c]));
}

/* Right-hand side of the fourth-order (defect-corrected) equation on the finest level:
 * out = rhs + sum_d delta_d^4 phi / (12 h^2), the 7-point Laplacian's truncation error, so
 * that a V-cycle on L7 phi = out drives phi towards L4 phi = rhs, L4 the 13-point fourth-
 * order Laplacian (L4 = L7 - sum_d delta_d^4 / 12 h^2). An axis whose 5 points leave the
 * level adds nothing (L7 there, two cells from the faces, where the potential is smooth). */
__kernel void mg_defect(const int nl, const double inv_12h2, __global const real *phi,
                        __global const real *rhs, __global real *out)
{
    const long c = get_global_id(0);
    if (c >= (long)nl * nl * nl) return;
    const int i = (int)(c / ((long)nl * nl)), j = (int)((c / nl) % nl), k = (int)(c % nl);
    const int at[3] = {i, j, k};
    const long step[3] = {(long)nl * nl, nl, 1};
    const double p0 = (double)phi[c];
    double s = 0.0;
    for (int d = 0; d < 3; d++) {
        if (at[d] < 2 || at[d] > nl - 3) continue;
        const long q = step[d];
        s += (double)phi[c - 2 * q] - 4.0 * (double)phi[c - q] + 6.0 * p0
             - 4.0 * (double)phi[c + q] + (double)phi[c + 2 * q];
    }
    out[c] = (real)((double)rhs[c] + inv_12h2 * s);
}

/* Restriction to the coarse level (nc points per side): mean of the 8 fine cells. */
__kernel void mg_restrict(const int nc, __global const real *fine, __global real *coarse)
{
    const long c = get_global_id(0);
    if (c >= (long)nc * nc * nc) return;
    const int i = (int)(c / ((long)nc * nc)), j = (int)((c / nc) % nc), k = (int)(c % nc);
    const int nf = 2 * nc;
    double s = 0.0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int d = 0; d < 2; d++)
                s += fine[((long)(2 * i + a) * nf + (2 * j + b)) * nf + (2 * k + d)];
    coarse[c] = (real)(0.125 * s);
}

/* Coarse value at (i, j, k) with homogeneous Dirichlet ghosts (-e) off the level. */
inline double coarse_at(__global const real *e, int nc, int i, int j, int k, int i0, int j0,
                        int k0)
{
    const double sign = ((i < 0 || i >= nc) ? -1.0 : 1.0) * ((j < 0 || j >= nc) ? -1.0 : 1.0)
                        * ((k < 0 || k >= nc) ? -1.0 : 1.0);
    i = (i < 0 || i >= nc) ? i0 : i;
    j = (j < 0 || j >= nc) ? j0 : j;
    k = (k < 0 || k >= nc) ? k0 : k;
    return sign * (double)e[((long)i * nc + j) * nc + k];
}

/* Prolongation: fine += trilinear (cell-centred: weights 3/4, 1/4 per axis) of coarse. */
__kernel void mg_prolong(const int nc, __global const real *coarse, __global real *fine)
{
    const int nf = 2 * nc;
    const long f = get_global_id(0);
    if (f >= (long)nf * nf * nf) return;
    const int I = (int)(f / ((long)nf * nf)), J = (int)((f / nf) % nf), K = (int)(f % nf);
    const int i = I >> 1, j = J >> 1, k = K >> 1;
    const int di = (I & 1) ? 1 : -1, dj = (J & 1) ? 1 : -1, dk = (K & 1) ? 1 : -1;
    double s = 0.0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int d = 0; d < 2; d++) {
                const double w = (a ? 0.25 : 0.75) * (b ? 0.25 : 0.75) * (d ? 0.25 : 0.75);
                s += w * coarse_at(coarse, nc, i + a * di, j + b * dj, k + d * dk, i, j, k);
            }
    fine[f] = (real)((double)fine[f] + s);
}

/* ---- P^3M short-range part ------------------------------------------------------------ *
 * The mesh carries the long-range part of gravity (Green's function -erf(r / 2 rs) / r);
 * this adds the rest, -erfc(r / 2 rs) / r, by a direct sum over the particles closer than
 * rcut. Particles come sorted by cell of a chaining mesh (nc^3 cells of side >= rcut over
 * the box, cell c holding particles start[c] .. end[c] - 1), so each particle visits the
 * 27 cells around its own. Periodic meshes use the nearest image (nc >= 3). */
__kernel void short_range(const int n, const double rs, const double rcut2, const double lo,
                        const double box, const double cell_inv, const int nc,
                        __global const real *x, __global const real *m,
                        __global const int *start, __global const int *end,
                        __global real *acc, __global real *pot)
{
    const int p = get_global_id(0);
    if (p >= n) return;
    short_range_one(p, rs, rcut2, lo, box, cell_inv, nc, x, m, start, end, acc, pot);
}
