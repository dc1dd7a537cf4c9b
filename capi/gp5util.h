/*
 * gp5util.h -- the header name of Phantom-GRAPE's PG5, as provided by sapporo (installed
 * beside grape5.h).  A program written for PG5 that includes <gp5util.h> or "gp5util.h"
 * compiles unchanged with the flags of `sapporo capi flags` and links with -lg5 (or -lpg5,
 * -lsapporo); built with -DSYMMETRIC, as for PG5's SYMMETRIC library, its
 * g5_set_xmj(adr, nj, xj, mj, epsj2) and g5_set_xmjMC(devid, adr, nj, xj, mj, epsj2) (eps_j
 * squared per j-particle) become g5_set_xmje and g5_set_xmjeMC.
 *
 * The declarations are grape5.h's: every PG5 call with PG5's name and argument types
 * (PG5/table's g5_set_eta and g5_set_cutoff_table among them), and the calls PG5 lacks (the
 * original GRAPE-5's g5_set_range, g5_set_xj, g5_set_mj; Sapporo2's g5_open_special,
 * g5_set_jp, g5_set_eps2_to_all; g5_set_xmje, g5_set_xmjeMC; g5_set_cutoff_scale, the
 * length PG5/table fixes at compile time).
 *
 * PG5 declares its calls void; here they return int (0, or a negative SAPPORO_ERR_* code
 * of sapporo.h, the message also printed on stderr), as the library defines them.  A
 * program that calls them as statements, ignoring the value, compiles and runs the same
 * either way.  What PG5's void allowed and an int does not: storing a call's address in a
 * pointer to a void function, returning a call's value from a void function, declaring a
 * call void again after including this header.
 */
#ifndef SAPPORO_GP5UTIL_H
#define SAPPORO_GP5UTIL_H

#include "grape5.h"

/* PG5's j-memory, a fixed 64K, which its programs use to size their arrays.  Ours is
 * g5_get_jmemsize(), set by the device memory (millions of addresses); an address past it
 * is refused, never written. */
#ifndef JMEMSIZE
#define JMEMSIZE (1 << 16)
#endif

#endif
