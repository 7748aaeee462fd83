// SPDX-License-Identifier: MIT
// The samplers behind ic/'s generators (private to ic/): uniform deviates from raw std::mt19937_64 draws, isotropic
// directions, and one body of a Plummer or Hernquist sphere in its own units (G = M = a = 1), drawn from the sphere's
// isotropic distribution function. makePlummer and makeClumps share them, so a Plummer sphere is sampled one way only.
#pragma once

#include <cstddef>
#include <random>

#include "matcha/core/particles.hpp"

namespace matcha::ic::detail {

/// Uniform deviate in the open interval (0, 1) from one raw 64-bit draw: the top 52 bits, offset by half a step, so
/// the result is one of 2^52 equally spaced midpoints in [2^-53, 1 - 2^-53], all exactly representable. The interval
/// is open because both ends are singular for the radius formulas (X = 0 and, without a cut, X = 1).
double uniformOpen(std::mt19937_64& engine);

/// Writes a vector of length `length` in a direction drawn isotropically from two deviates (AHW 1974 eqs. for
/// x, y, z: z uniform in [-length, length], azimuth uniform).
void isotropicVector(double length, std::mt19937_64& engine, double& x, double& y, double& z);

/// Radius (scale radius a = 1) enclosing the mass fraction exp(logMassFraction) of a Plummer sphere:
/// (X^(-2/3) - 1)^(-1/2) with X that fraction. Written with expm1 of the logarithm because near X = 1 the difference
/// X^(-2/3) - 1 would cancel to exactly 0 (an infinite radius) in the direct form.
double plummerRadiusFromLogMass(double logMassFraction);

/// Position and velocity of one body.
struct PhasePoint {
  double x = 0.0, y = 0.0, z = 0.0;
  double vx = 0.0, vy = 0.0, vz = 0.0;

  /// Writes this point as body i of `p`, positions times `length` and velocities times `speed` (the model's units).
  void storeScaled(Particles& p, std::size_t i, double length, double speed) const {
    p.x[i] = x * length;
    p.y[i] = y * length;
    p.z[i] = z * length;
    p.vx[i] = vx * speed;
    p.vy[i] = vy * speed;
    p.vz[i] = vz * speed;
  }
};

/// One body of a Plummer sphere in units G = M = a = 1 (M: the mass of the untruncated sphere), sampled as Aarseth,
/// Henon & Wielen (1974, A&A 37, 183) with the deviates in the order makePlummer documents: the radius from the
/// cumulative mass exp(logMassCut) X1 (so no body lies beyond the radius enclosing the mass fraction
/// exp(logMassCut)), the velocity from the untruncated sphere's isotropic distribution function at that radius.
PhasePoint samplePlummerBody(double logMassCut, std::mt19937_64& engine);

/// Cumulative mass fraction of the untruncated Plummer sphere within r scale radii: r^3 / (1 + r^2)^(3/2).
double plummerMassFraction(double radius);

/// One body of a Hernquist (1990, ApJ 356, 359) sphere in units G = M = a = 1 (M: the mass of the untruncated
/// sphere, density M a / (2 pi r (r + a)^3), potential -G M / (r + a)), truncated at `massFraction` of M (in (0, 1]):
///   - radius from the cumulative mass m(r) / M = r^2 / (1 + r)^2 = massFraction X1, i.e. r = s / (1 - s) with
///     s = sqrt(massFraction X1), and an isotropic direction (X2, X3);
///   - speed from the untruncated sphere's isotropic distribution function f(E) (Hernquist 1990 eq. 17) at that
///     radius, by rejection: the speed density is proportional to v^2 f(psi - v^2 / 2), psi = 1 / (1 + r); with
///     w = v^2 / 2 and f(eps) proportional to B(sqrt eps) (1 - eps)^(-5/2), where
///     B(q) = 3 asin q + q sqrt(1 - q^2) (1 - 2 q^2) (8 q^4 - 8 q^2 - 3) rises from 0 to 3 pi / 2 (B'(q) =
///     128 q^4 (1 - q^2)^(3/2)), the density in w is bounded by B(sqrt psi) sqrt(w) (delta + w)^(-5/2), delta =
///     r / (1 + r). That envelope is sampled exactly (w = delta s / (1 - s) with s = psi X^(2/3)) and the draw kept
///     when X' B(sqrt psi) < B(sqrt(psi - w)). The share of draws kept falls from ~100% at the centre to 36% at
///     r = a and 19% at 20 a (where f ~ eps^(5/2)); a body costs ~0.3 us, a Plummer body ~0.2 us;
///   - an isotropic velocity direction.
PhasePoint sampleHernquistBody(double massFraction, std::mt19937_64& engine);

/// Cumulative mass fraction of the untruncated Hernquist sphere within r scale radii: r^2 / (1 + r)^2.
double hernquistMassFraction(double radius);

}  // namespace matcha::ic::detail
