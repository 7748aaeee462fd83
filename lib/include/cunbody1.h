/* SPDX-License-Identifier: MIT */
/*
 * The names of CUNBODY-1 (Hamada & Iitaka 2007) for programs written against them, mapped onto libmatcha_force.
 * Include this instead of the paper's header and link with libmatcha_force (pkg-config matcha_force).
 *
 *   paper (Fig. 9, Fig. 10)                      here
 *   force(xj, mj, xi, eps2, a, ni, nj)           matcha_force(xj, mj, xi, eps2, a, ni, nj)
 *   force(x, v, m, p, a, jk, n)  (Fig. A.2:      matcha_force_jerk(x, v, m, x, v, 0.0, a, jk, p, n, n): one set as both
 *     force, jerk and potential of n bodies)     i and j, eps = 0, so each body's own pair is the skipped coincident
 * one cunbody_api(p_xj, p_xi, a, ni, nj) and the   not provided: it runs user-written pipeline descriptions; matcha's
 *     pipeline descriptions (Fig. A.1, A.3)      pipelines are fixed (force; force, jerk and potential)
 *
 * Both of the paper's calls are named force(), which C cannot overload: the first is the default, the second replaces
 * it when CUNBODY1_FORCE_JERK is defined before this header is included. force() returns void, as in the paper; a
 * failure leaves the outputs untouched and matcha_force_last_error() says why.
 */
#ifndef CUNBODY1_H
#define CUNBODY1_H

#include "matcha_force.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CUNBODY1_FORCE_JERK

/* The paper's force(): accelerations of ni i-particles from nj j-particles with softening eps2, G = 1. */
static inline void force(double xj[][3], double mj[], double xi[][3], double eps2, double a[][3], int ni, int nj) {
  (void)matcha_force((const double(*)[3])xj, mj, (const double(*)[3])xi, eps2, a, ni, nj);
}

#else

/* The paper's Fig. A.2 force(): accelerations a, jerks jk and potentials p of n bodies on each other, no softening. */
static inline void force(double x[][3], double v[][3], double m[], double p[], double a[][3], double jk[][3], int n) {
  (void)matcha_force_jerk((const double(*)[3])x, (const double(*)[3])v, m, (const double(*)[3])x, (const double(*)[3])v,
                          0.0, a, jk, p, n, n);
}

#endif

#ifdef __cplusplus
}
#endif

#endif /* CUNBODY1_H */
