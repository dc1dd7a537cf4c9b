/*
 * grape5.h -- the GRAPE-5 interface of Phantom-GRAPE's PG5, as provided by sapporo
 * (libsapporo.so, also installed as libg5.so and libpg5.so).
 *
 * For collisionless codes (tree codes, PM-tree): accelerations and potentials of
 * i-particles from j-particles that are not predicted.  Two names per function: the C name
 * takes its arguments by value; the Fortran name (one trailing underscore) takes every
 * argument by pointer.  Arrays declared double (*x)[3] are laid out like Fortran x(3, n).
 *
 * Conventions (PG5's): G = 1; the acceleration is sum m_j (x_j - x_i) / (r^2 + eps^2)^(3/2)
 * and the potential is returned POSITIVE, sum m_j / sqrt(r^2 + eps^2) (the physical
 * potential is its negative; grape6.h's is negative).  No pair is excluded: a particle that
 * is both i and j adds m/eps to its own potential (PG5's clients subtract it), and with
 * eps = 0 its force is not finite (an error, SAPPORO_ERR_NONFINITE).  Softening is given as eps by
 * g5_set_eps_to_all and g5_set_eps, and as eps^2 by g5_set_eps2_to_all, g5_set_xei,
 * g5_calculate_force_on_xe and g5_set_xmje.
 *
 * The MC calls take a context id (0 .. 63) first; the others use context 0.  Each context
 * has its own j-memory, n, i-particles, softening and results (its own library), so threads
 * that each use their own id may call at the same time.  g5_set_eps_to_all sets the
 * softening of every context (read by the next g5_set_xi).
 *
 * PG5 declares these functions void; here they return 0, or a negative SAPPORO_ERR_* code
 * (sapporo.h) with the message printed on stderr and kept for sapporo_last_error(), so a
 * program written for PG5 links unchanged and a new one may check.
 * g5_get_number_of_pipelines and g5_get_jmemsize return counts.  gp5util.h, PG5's header
 * name, includes this one.
 *
 * Beyond PG5's calls: the original GRAPE-5's g5_set_range, g5_set_xj and g5_set_mj, and
 * Sapporo2's g5_open_special, g5_set_jp and g5_set_eps2_to_all.
 *
 * PG5/table (the variant TreePM and P3M codes link) computes the short-range force of an S2
 * split instead of Newton's: here g5_set_cutoff_scale or SAPPORO_G5_CUTOFF sets its length
 * (PG5's compile-time SFT_FOR_PM), and g5_set_eta and g5_set_cutoff_table are accepted, as in
 * PG5/table, changing nothing.  With a cutoff the potential is the short-range one (still
 * positive; PG5/table returns 0).
 */
#ifndef SAPPORO_GRAPE5_H
#define SAPPORO_GRAPE5_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- C names -------------------------------------------------------------------------- */

/* Open (context 0 at once, the others on their first use); opening again does nothing.
 * Order 2; precision, backend and devices as for g6_open (SAPPORO_* variables). */
int g5_open(void);
/* Sapporo2's open with a device list: every context opens on the devices list[0 .. ndev - 1]
 * (at most 16); ndev <= 0 is g5_open. */
int g5_open_special(int ndev, int *list);
/* Close every context: their j-particles are gone.  g5_open may follow. */
int g5_close(void);
/* Most i-particles g5_set_xi takes (SAPPORO_NPIPES, default 128; PG5: 4). */
int g5_get_number_of_pipelines(void);
/* j-memory: addresses 0 .. g5_get_jmemsize() - 1 (set by the device memory; PG5: 65536).
 * 0 before g5_open. */
int g5_get_jmemsize(void);

/* Softening eps (not squared) of every i-particle set by the following g5_set_xi, in every
 * context. */
int g5_set_eps_to_all(double eps);
/* The same given squared (Sapporo2): eps2 >= 0. */
int g5_set_eps2_to_all(double eps2);
/* The original GRAPE-5's fixed-point range of positions and masses: not used (the devices
 * compute in floating point).  Any values are accepted; non-finite ones, or xmin >= xmax,
 * print a warning. */
int g5_set_range(double xmin, double xmax, double mmin);
/* Softening eps[i] (not squared) of i-particles 0 .. ni - 1 set by the last g5_set_xi. */
int g5_set_eps(int ni, double *eps);
/* j-particles in [0, n) take part in the next force. */
int g5_set_n(int n);
/* Store j-particles at addresses adr .. adr + nj - 1, reading xj[adr] .. xj[adr + nj - 1]
 * and mj[adr] ..: the arrays are indexed by address (as PG5 reads them). */
int g5_set_xmj(int adr, int nj, double (*xj)[3], double *mj);
/* The same, arguments in Sapporo2's order (masses first). */
int g5_set_jp(int adr, int nj, double *mj, double (*xj)[3]);
/* Positions alone, or masses alone, of addresses adr .. adr + nj - 1 (read from xj[adr ..],
 * mj[adr ..], as g5_set_xmj reads them).  A force call uses, for each address, the last
 * position and the last mass given by any of these calls and g5_set_xmj; an address in
 * [0, n) that has had a position but never a mass, or the other way round, makes the force
 * call fail (SAPPORO_ERR_INPUT) naming it.  Sent to the device at the next force call. */
int g5_set_xj(int adr, int nj, double (*xj)[3]);
int g5_set_mj(int adr, int nj, double *mj);
/* The same with a softening per j-particle (PG5 built with SYMMETRIC): a pair uses
 * eps_i^2 + epsj2[j]; sapporo takes one softening per call, so every j-particle in [0, n)
 * must have the same epsj2 (else the force call fails with SAPPORO_ERR_INPUT). */
int g5_set_xmje(int adr, int nj, double (*xj)[3], double *mj, double *epsj2);
/* i-particles (1 .. g5_get_number_of_pipelines()); their softening is g5_set_eps_to_all's,
 * or eps2[i] (squared) with g5_set_xei. */
int g5_set_xi(int ni, double (*xi)[3]);
int g5_set_xei(int ni, double (*xi)[3], double *eps2);
/* Compute the forces on the i-particles set from the j-particles in [0, n). */
int g5_run(void);
/* The forces of the last g5_run: a[i], pot[i] for i < ni. */
int g5_get_force(int ni, double (*a)[3], double *pot);
/* Set, run and read in one call, for any ni (softening: g5_set_eps_to_all's, or eps2[i]). */
int g5_calculate_force_on_x(double (*x)[3], double (*a)[3], double *p, int ni);
int g5_calculate_force_on_xe(double (*x)[3], double *eps2, double (*a)[3], double *p, int ni);

/* Groups (sapporo's own; no other GRAPE library has them): the interaction lists of many
 * groups in one launch, as a tree walk makes them.  Group g (0 .. ng - 1) is the
 * i-particles x[i_offsets[g] .. i_offsets[g + 1] - 1], which take the force of the
 * j-particles at addresses j_offsets[g] .. j_offsets[g + 1] - 1 only (stored before, by
 * g5_set_xmj; g5_set_n plays no part).  Both offset arrays have ng + 1 entries and never
 * decrease; i_offsets[0] = 0, and offsets count from 0 in Fortran too.  Softening:
 * g5_set_eps_to_all's.  a[i], p[i] for every i < i_offsets[ng], as g5_calculate_force_on_x
 * gives them.  g5_start_groups returns once the last launch is queued (a group of more
 * i-particles than one launch takes, LIMIT_NI_CHUNK padded to whole work-groups, or more
 * groups than fit in one, take several launches: all but the last are waited for);
 * g5_get_groups_force waits for it and reads the forces.  Between the two the host is free
 * (a tree walk of the next groups); a force call or j-store on the context waits for it
 * first, and a force call discards it.  g5_calculate_force_on_groups is the pair in one. */
int g5_calculate_force_on_groups(int ng, int *i_offsets, int *j_offsets, double (*x)[3],
                                 double (*a)[3], double *p);
int g5_start_groups(int ng, int *i_offsets, int *j_offsets, double (*x)[3]);
int g5_get_groups_force(double (*a)[3], double *p);

/* The cutoff force of PG5/table (TreePM, P3M).  g5_set_cutoff_scale (sapporo's): the diameter
 * a of the S2 shape (PG5's SFT_FOR_PM, 3.0 / SIZE_OF_MESH there), 0 for Newtonian forces;
 * called before g5_open, it replaces SAPPORO_G5_CUTOFF, and every context computes
 * acc = sum m_j d g(R) / R^3, pot = sum m_j h(R) / R (R^2 = r^2 + eps^2; zero for R >= a,
 * and for R = 0), the short-range part of the S2 split (docs/capi.md).  Once GRAPE-5 is open
 * another length is refused (SAPPORO_ERR_STATE; g5_close first). */
int g5_set_cutoff_scale(double scale);
/* PG5/table's: eta is accepted and not used (as there); any value. */
int g5_set_eta(double eta);
/* PG5/table's placeholder: accepted, the functions never called (the split is S2's); a
 * warning when no cutoff scale is set. */
int g5_set_cutoff_table(double (*ffunc)(double), double fcut, double fcor,
                        double (*pfunc)(double), double pcut, double pcor);

/* The same on context devid (0 .. 63). */
int g5_set_epsMC(int devid, int ni, double *eps);
int g5_set_nMC(int devid, int n);
int g5_set_xmjMC(int devid, int adr, int nj, double (*xj)[3], double *mj);
int g5_set_xmjeMC(int devid, int adr, int nj, double (*xj)[3], double *mj, double *epsj2);
int g5_set_xiMC(int devid, int ni, double (*xi)[3]);
int g5_set_xeiMC(int devid, int ni, double (*xi)[3], double *eps2);
int g5_runMC(int devid);
int g5_get_forceMC(int devid, int ni, double (*a)[3], double *pot);
int g5_calculate_force_on_xMC(int devid, double (*x)[3], double (*a)[3], double *p, int ni);
int g5_calculate_force_on_xeMC(int devid, double (*x)[3], double *eps2, double (*a)[3],
                               double *p, int ni);
int g5_calculate_force_on_groupsMC(int devid, int ng, int *i_offsets, int *j_offsets,
                                   double (*x)[3], double (*a)[3], double *p);
int g5_start_groupsMC(int devid, int ng, int *i_offsets, int *j_offsets, double (*x)[3]);
int g5_get_groups_forceMC(int devid, double (*a)[3], double *p);

/* PG5 built with SYMMETRIC names the per-j softening calls g5_set_xmj and g5_set_xmjMC. */
#ifdef SYMMETRIC
#define g5_set_xmj g5_set_xmje
#define g5_set_xmjMC g5_set_xmjeMC
#endif

/* ---- Fortran names (every argument by pointer) ----------------------------------------
 * The MC calls also have their lower-case names (g5_set_xmjmc_, ...), which gfortran calls
 * for `call g5_set_xmjMC(...)`; PG5 has the mixed-case ones only. */

int g5_open_(void);
int g5_open_special_(int *ndev, int *list);
int g5_close_(void);
int g5_get_number_of_pipelines_(void);
int g5_get_jmemsize_(void);
int g5_set_eps_to_all_(double *eps);
int g5_set_eps2_to_all_(double *eps2);
int g5_set_range_(double *xmin, double *xmax, double *mmin);
int g5_set_eps_(int *ni, double *eps);
int g5_set_epsMC_(int *devid, int *ni, double *eps);
int g5_set_n_(int *n);
int g5_set_nMC_(int *devid, int *n);
int g5_set_xmj_(int *adr, int *nj, double (*xj)[3], double *mj);
int g5_set_xmjMC_(int *devid, int *adr, int *nj, double (*xj)[3], double *mj);
int g5_set_jp_(int *adr, int *nj, double *mj, double (*xj)[3]);
int g5_set_xj_(int *adr, int *nj, double (*xj)[3]);
int g5_set_mj_(int *adr, int *nj, double *mj);
int g5_set_xmje_(int *adr, int *nj, double (*xj)[3], double *mj, double *epsj2);
int g5_set_xmjeMC_(int *devid, int *adr, int *nj, double (*xj)[3], double *mj, double *epsj2);
int g5_set_xi_(int *ni, double (*xi)[3]);
int g5_set_xiMC_(int *devid, int *ni, double (*xi)[3]);
int g5_set_xei_(int *ni, double (*xi)[3], double *eps2);
int g5_set_xeiMC_(int *devid, int *ni, double (*xi)[3], double *eps2);
int g5_run_(void);
int g5_runMC_(int *devid);
int g5_get_force_(int *ni, double (*a)[3], double *pot);
int g5_get_forceMC_(int *devid, int *ni, double (*a)[3], double *pot);
int g5_calculate_force_on_x_(double (*x)[3], double (*a)[3], double *p, int *ni);
int g5_calculate_force_on_xMC_(int *devid, double (*x)[3], double (*a)[3], double *p, int *ni);
int g5_calculate_force_on_xe_(double (*x)[3], double *eps2, double (*a)[3], double *p, int *ni);
int g5_calculate_force_on_xeMC_(int *devid, double (*x)[3], double *eps2, double (*a)[3],
                                double *p, int *ni);
int g5_calculate_force_on_groups_(int *ng, int *i_offsets, int *j_offsets, double (*x)[3],
                                  double (*a)[3], double *p);
int g5_calculate_force_on_groupsMC_(int *devid, int *ng, int *i_offsets, int *j_offsets,
                                    double (*x)[3], double (*a)[3], double *p);
int g5_start_groups_(int *ng, int *i_offsets, int *j_offsets, double (*x)[3]);
int g5_start_groupsMC_(int *devid, int *ng, int *i_offsets, int *j_offsets, double (*x)[3]);
int g5_get_groups_force_(double (*a)[3], double *p);
int g5_get_groups_forceMC_(int *devid, double (*a)[3], double *p);
int g5_set_cutoff_scale_(double *scale);
int g5_set_eta_(double *eta);
int g5_set_cutoff_table_(double (*ffunc)(double *), double *fcut, double *fcor,
                         double (*pfunc)(double *), double *pcut, double *pcor);

#ifdef __cplusplus
}
#endif

#endif
