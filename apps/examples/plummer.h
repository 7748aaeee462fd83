/* SPDX-License-Identifier: MIT */
/* A Plummer sphere for the C examples (Aarseth, Henon & Wielen 1974), in N-body units (G = M = 1, E = -1/4), from a
 * seeded generator of its own so that a run can be repeated. Header-only, C99. */
#ifndef MATCHA_EXAMPLES_PLUMMER_H
#define MATCHA_EXAMPLES_PLUMMER_H

#include <math.h>
#include <stdint.h>

/* Uniform in [0, 1) from a 64-bit xorshift state (never 0). */
static double example_uniform(uint64_t* state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return (double)(*state >> 11) * (1.0 / 9007199254740992.0);
}

/* A random direction times `length` into v[3]. */
static void example_isotropic(uint64_t* state, double length, double v[3]) {
  const double z = 2.0 * example_uniform(state) - 1.0, phi = 6.283185307179586 * example_uniform(state);
  const double s = sqrt(1.0 - z * z);
  v[0] = length * s * cos(phi);
  v[1] = length * s * sin(phi);
  v[2] = length * z;
}

/* n bodies of mass 1/n: positions x[n][3] and velocities v[n][3], centre of mass at rest at the origin. Radii cut at
 * 99.9% of the mass (no stray body at thousands of scale radii); lengths scaled by 3 pi / 16 and velocities by its
 * inverse square root, which gives E = -1/4. */
static void example_plummer(int n, uint64_t seed, double m[], double x[][3], double v[][3]) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
  const double scale = 3.0 * 3.141592653589793 / 16.0;
  double cm[2][3] = {{0, 0, 0}, {0, 0, 0}};
  for (int k = 0; k < n; ++k) {
    const double fraction = 0.999 * example_uniform(&state) + 1e-12;
    const double r = 1.0 / sqrt(pow(fraction, -2.0 / 3.0) - 1.0);
    double q = 0.0, g = 1.0;
    while (g > q * q * pow(1.0 - q * q, 3.5)) { /* von Neumann rejection for q = v / v_escape */
      q = example_uniform(&state);
      g = 0.1 * example_uniform(&state);
    }
    const double speed = q * sqrt(2.0) * pow(1.0 + r * r, -0.25);
    m[k] = 1.0 / n;
    example_isotropic(&state, r * scale, x[k]);
    example_isotropic(&state, speed / sqrt(scale), v[k]);
    for (int d = 0; d < 3; ++d) {
      cm[0][d] += m[k] * x[k][d];
      cm[1][d] += m[k] * v[k][d];
    }
  }
  for (int k = 0; k < n; ++k) {
    for (int d = 0; d < 3; ++d) {
      x[k][d] -= cm[0][d];
      v[k][d] -= cm[1][d];
    }
  }
}

#endif /* MATCHA_EXAMPLES_PLUMMER_H */
