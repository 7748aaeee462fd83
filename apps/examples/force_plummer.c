/* SPDX-License-Identifier: MIT */
/*
 * The CUNBODY-1 paper's test program (Hamada & Iitaka 2007, Fig. 10) on libmatcha_force: the accelerations of a
 * Plummer sphere's N bodies on each other from matcha_force, against the host's direct sum in double, as the paper's
 * E_max = max_i |a_i - a_host,i| / |a_host,i| (its Table 2: 5.4e-7 at N = 2048 with the Chamomile scheme), and the
 * time of the call.
 *
 *   usage: matcha_force_example [N [eps2]]   (default 2048 bodies, eps2 = 0.01 as the paper's program)
 *
 * Exits 0 when E_max < 1e-5, 1 otherwise (or on a library error).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "matcha_force.h"
#include "plummer.h"

static double seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 2048;
  const double eps2 = argc > 2 ? atof(argv[2]) : 0.01;
  if (n < 1 || n > 10000000 || !(eps2 >= 0.0)) {
    fprintf(stderr, "usage: matcha_force_example [N >= 1 [eps2 >= 0]]\n");
    return 2;
  }
  double* m = malloc(sizeof(double) * n);
  double(*x)[3] = malloc(sizeof(double[3]) * n), (*v)[3] = malloc(sizeof(double[3]) * n);
  double(*a)[3] = malloc(sizeof(double[3]) * n);
  if (!m || !x || !v || !a) {
    fprintf(stderr, "matcha_force_example: out of memory\n");
    return 1;
  }
  example_plummer(n, 2007, m, x, v);

  /* The library call: every body is an i-particle and a j-particle (ni = nj = n). */
  matcha_force((const double(*)[3])x, m, (const double(*)[3])x, eps2, a, n, n); /* warm-up: engine start, memory */
  const double start = seconds();
  if (matcha_force((const double(*)[3])x, m, (const double(*)[3])x, eps2, a, n, n) != MATCHA_FORCE_OK) {
    fprintf(stderr, "matcha_force_example: %s\n", matcha_force_last_error());
    return 1;
  }
  const double elapsed = seconds() - start;

  /* The host's direct sum in double; with eps2 = 0 a body's own (coincident) pair is skipped, as the library does. */
  double eMax = 0.0;
  for (int i = 0; i < n; ++i) {
    double h[3] = {0, 0, 0};
    for (int j = 0; j < n; ++j) {
      const double r[3] = {x[j][0] - x[i][0], x[j][1] - x[i][1], x[j][2] - x[i][2]};
      const double s2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + eps2;
      if (s2 == 0.0) continue;
      const double f = m[j] / (s2 * sqrt(s2));
      for (int d = 0; d < 3; ++d) h[d] += f * r[d];
    }
    const double error = sqrt(pow(a[i][0] - h[0], 2) + pow(a[i][1] - h[1], 2) + pow(a[i][2] - h[2], 2)) /
                         sqrt(h[0] * h[0] + h[1] * h[1] + h[2] * h[2]);
    if (error > eMax) eMax = error;
  }
  printf("matcha_force_example: libmatcha_force %s on %s\n", matcha_force_version(), matcha_force_engine());
  printf("matcha_force_example: N = %d, eps2 = %g: %.3f ms, %.3g interactions/s, E_max = %.2e\n", n, eps2,
         1e3 * elapsed, (double)n * n / elapsed, eMax);
  matcha_force_close();
  if (!(eMax < 1e-5)) {
    fprintf(stderr, "matcha_force_example: E_max exceeds 1e-5\n");
    return 1;
  }
  return 0;
}
