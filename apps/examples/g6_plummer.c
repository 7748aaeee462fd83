/* SPDX-License-Identifier: MIT */
/*
 * A GRAPE-6 program in miniature, linked against libmatcha_g6: a Plummer cluster integrated with the 4th-order Hermite
 * scheme (Makino & Aarseth 1992) in block time steps, the way kira and NBODY6 drive GRAPE-6. The host predicts the
 * i-particles and corrects them; the library holds the j-particles, predicts them to each block time and sums the
 * forces, i-blocks of g6_npipes() at a time (g6calc_firsthalf / g6calc_lasthalf).
 *
 *   usage: matcha_g6_example [N [t_end]]   (default 256 bodies to t = 1/8; t_end a multiple of 1/16)
 *
 * Prints the energy error and exits 0 when |dE/E| < 1e-5, 1 otherwise (or on a library error).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "matcha_g6.h"
#include "plummer.h"

#define CLUSTER 0
#define ETA 0.02          /* Aarseth's accuracy parameter */
#define ETA_START 0.002   /* the first step, from acceleration and jerk alone: smaller than ETA, for want of a2 */
#define DT_MAX 0.0625     /* the longest step, 1/16 */
#define EPS (1.0 / 256.0) /* softening, as kirin's Table 1 */

/* Stops on a library error, with its message. */
#define G6(call)                                                                            \
  do {                                                                                      \
    if ((call) != 0) {                                                                      \
      fprintf(stderr, "matcha_g6_example: %s failed: %s\n", #call, matcha_g6_last_error()); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

typedef struct {
  int n;
  double *m, *t, *dt, *pot;
  double (*x)[3], (*v)[3], (*a)[3], (*j)[3], (*a2)[3]; /* a2: 2nd derivative of the acceleration */
  double (*xp)[3], (*vp)[3];                           /* predicted i-particles of the current block */
} Bodies;

static double norm(const double u[3]) { return sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]); }

/* Sends body k to j-memory address k (index k), its derivatives scaled as GRAPE-6 wants them. */
static void send(const Bodies* b, int k) {
  double a2by18[3], a1by6[3], aby2[3];
  for (int d = 0; d < 3; ++d) {
    a2by18[d] = b->a2[k][d] / 18.0;
    a1by6[d] = b->j[k][d] / 6.0;
    aby2[d] = b->a[k][d] / 2.0;
  }
  G6(g6_set_j_particle(CLUSTER, k, k, b->t[k], b->dt[k], b->m[k], a2by18, a1by6, aby2, b->v[k], b->x[k]));
}

/* Forces on the bodies list[0..count) at their predicted xp, vp (indexed by list position), npipes at a time. */
static void forces(Bodies* b, const int* list, int count, double acc[][3], double jerk[][3], double pot[]) {
  const int pipes = g6_npipes();
  int index[4096];
  double xi[4096][3], vi[4096][3];
  const int chunk = pipes < 4096 ? pipes : 4096;
  for (int first = 0; first < count; first += chunk) {
    const int ni = count - first < chunk ? count - first : chunk;
    for (int i = 0; i < ni; ++i) {
      index[i] = list[first + i];
      for (int d = 0; d < 3; ++d) {
        xi[i][d] = b->xp[first + i][d];
        vi[i][d] = b->vp[first + i][d];
      }
    }
    G6(g6calc_firsthalf(CLUSTER, b->n, ni, index, xi, vi, NULL, NULL, NULL, EPS * EPS, NULL));
    G6(g6calc_lasthalf(CLUSTER, b->n, ni, index, xi, vi, EPS * EPS, NULL, acc + first, jerk + first, pot + first));
  }
}

/* Total energy of bodies all at the same time (pot from the last force call on all of them). */
static double energy(const Bodies* b) {
  double e = 0.0;
  for (int k = 0; k < b->n; ++k)
    e += b->m[k] *
         (0.5 * (b->v[k][0] * b->v[k][0] + b->v[k][1] * b->v[k][1] + b->v[k][2] * b->v[k][2]) + 0.5 * b->pot[k]);
  return e;
}

/* The largest power of two not above `dt` and DT_MAX. */
static double powerOfTwoBelow(double dt) {
  double p = DT_MAX;
  while (p > dt && p > 1e-30) p *= 0.5;
  return p;
}

int main(int argc, char** argv) {
  Bodies b;
  b.n = argc > 1 ? atoi(argv[1]) : 256;
  const double tEnd = argc > 2 ? atof(argv[2]) : 0.125;
  if (b.n < 2 || b.n > 1000000 || !(tEnd > 0.0) || fmod(tEnd, DT_MAX) != 0.0) {
    fprintf(stderr, "usage: matcha_g6_example [N >= 2 [t_end, a multiple of 1/16]]\n");
    return 2;
  }
  b.m = malloc(sizeof(double) * b.n);
  b.t = calloc(b.n, sizeof(double));
  b.dt = malloc(sizeof(double) * b.n);
  b.pot = malloc(sizeof(double) * b.n);
  b.x = malloc(sizeof(double[3]) * b.n);
  b.v = malloc(sizeof(double[3]) * b.n);
  b.a = calloc(b.n, sizeof(double[3]));
  b.j = calloc(b.n, sizeof(double[3]));
  b.a2 = calloc(b.n, sizeof(double[3]));
  b.xp = malloc(sizeof(double[3]) * b.n);
  b.vp = malloc(sizeof(double[3]) * b.n);
  double(*acc)[3] = malloc(sizeof(double[3]) * b.n), (*jerk)[3] = malloc(sizeof(double[3]) * b.n);
  double* potBlock = malloc(sizeof(double) * b.n);
  int* list = calloc(b.n, sizeof(int));
  if (!b.m || !b.t || !b.dt || !b.pot || !b.x || !b.v || !b.a || !b.j || !b.a2 || !b.xp || !b.vp || !acc || !jerk ||
      !potBlock || !list) {
    fprintf(stderr, "matcha_g6_example: out of memory\n");
    return 1;
  }
  example_plummer(b.n, 2008, b.m, b.x, b.v);

  G6(g6_open(CLUSTER));
  if (g6_getnjmax(CLUSTER) < b.n) {
    fprintf(stderr, "matcha_g6_example: %d bodies exceed the j-memory (%d)\n", b.n, g6_getnjmax(CLUSTER));
    return 1;
  }
  /* t = 0: every body in the j-memory, forces on all of them, the first steps from |a| / |jerk|. */
  for (int k = 0; k < b.n; ++k) {
    b.dt[k] = DT_MAX;
    send(&b, k);
    list[k] = k;
    for (int d = 0; d < 3; ++d) {
      b.xp[k][d] = b.x[k][d];
      b.vp[k][d] = b.v[k][d];
    }
  }
  G6(g6_set_ti(CLUSTER, 0.0));
  forces(&b, list, b.n, b.a, b.j, b.pot);
  const double e0 = energy(&b);
  for (int k = 0; k < b.n; ++k) {
    b.dt[k] = powerOfTwoBelow(ETA_START * norm(b.a[k]) / norm(b.j[k]));
    send(&b, k);
  }

  long blockSteps = 0, particleSteps = 0;
  double time = 0.0;
  while (time < tEnd) {
    /* The next block: the bodies whose next time is the earliest. */
    double next = INFINITY;
    for (int k = 0; k < b.n; ++k) next = fmin(next, b.t[k] + b.dt[k]);
    int count = 0;
    for (int k = 0; k < b.n; ++k) {
      if (b.t[k] + b.dt[k] == next) list[count++] = k;
    }
    /* Predict the block on the host, in double, as GRAPE programs do. */
    for (int i = 0; i < count; ++i) {
      const int k = list[i];
      const double h = next - b.t[k];
      for (int d = 0; d < 3; ++d) {
        b.xp[i][d] = b.x[k][d] + h * (b.v[k][d] + h * (b.a[k][d] / 2 + h * (b.j[k][d] / 6 + h * b.a2[k][d] / 24)));
        b.vp[i][d] = b.v[k][d] + h * (b.a[k][d] + h * (b.j[k][d] / 2 + h * b.a2[k][d] / 6));
      }
    }
    G6(g6_set_ti(CLUSTER, next));
    forces(&b, list, count, acc, jerk, potBlock);
    /* Correct (Hermite), choose the next steps (Aarseth's criterion, powers of two that divide the time), send. */
    for (int i = 0; i < count; ++i) {
      const int k = list[i];
      const double h = b.dt[k];
      double a2[3], a3[3];
      for (int d = 0; d < 3; ++d) {
        const double da = b.a[k][d] - acc[i][d];
        a2[d] = (-6.0 * da - h * (4.0 * b.j[k][d] + 2.0 * jerk[i][d])) / (h * h);
        a3[d] = (12.0 * da + 6.0 * h * (b.j[k][d] + jerk[i][d])) / (h * h * h);
        /* From the 3rd-order Taylor series: the corrector's a2 and a3 replace the old snap the predictor used. */
        b.x[k][d] += h * (b.v[k][d] + h * (b.a[k][d] / 2 + h * (b.j[k][d] / 6 + h * (a2[d] / 24 + h * a3[d] / 120))));
        b.v[k][d] += h * (b.a[k][d] + h * (b.j[k][d] / 2 + h * (a2[d] / 6 + h * a3[d] / 24)));
        b.a[k][d] = acc[i][d];
        b.j[k][d] = jerk[i][d];
        b.a2[k][d] = a2[d] + h * a3[d];
      }
      b.t[k] = next;
      const double na = norm(b.a[k]), nj = norm(b.j[k]), na2 = norm(b.a2[k]), na3 = norm(a3);
      double dt = powerOfTwoBelow(sqrt(ETA * (na * na2 + nj * nj) / (nj * na3 + na2 * na2)));
      if (dt > 2.0 * h) dt = 2.0 * h;
      while (fmod(next, dt) != 0.0) dt *= 0.5;
      b.dt[k] = dt;
      send(&b, k);
    }
    time = next;
    ++blockSteps;
    particleSteps += count;
  }

  /* Every body is at t_end (a multiple of every step): one more force call gives the potential energy. */
  for (int k = 0; k < b.n; ++k) {
    list[k] = k;
    for (int d = 0; d < 3; ++d) {
      b.xp[k][d] = b.x[k][d];
      b.vp[k][d] = b.v[k][d];
    }
  }
  G6(g6_set_ti(CLUSTER, tEnd));
  forces(&b, list, b.n, acc, jerk, b.pot);
  const double e1 = energy(&b), error = fabs((e1 - e0) / e0);
  printf("matcha_g6_example: %s\n", matcha_g6_engine(CLUSTER));
  printf("matcha_g6_example: N = %d, eps = 1/256, eta = %.2f, t = 0 to %g in %ld block steps (%ld particle steps)\n",
         b.n, ETA, tEnd, blockSteps, particleSteps);
  printf("matcha_g6_example: E(0) = %.12f, E(t_end) = %.12f, |dE/E| = %.2e\n", e0, e1, error);
  G6(g6_close(CLUSTER));
  if (!(error < 1e-5)) {
    fprintf(stderr, "matcha_g6_example: the energy error exceeds 1e-5\n");
    return 1;
  }
  return 0;
}
