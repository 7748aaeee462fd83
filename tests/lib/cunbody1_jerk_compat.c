/* SPDX-License-Identifier: MIT */
/* cunbody1.h compiled as C, with the paper's force, jerk and potential call (Fig. A.2) selected, for
 * test_matcha_force.cpp. */
#define CUNBODY1_FORCE_JERK
#include "cunbody1.h"

void cunbody1_force_jerk_from_c(double x[][3], double v[][3], double m[], double p[], double a[][3], double jk[][3],
                                int n) {
  force(x, v, m, p, a, jk, n);
}
