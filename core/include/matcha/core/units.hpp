// SPDX-License-Identifier: MIT
// The unit system. matcha works in N-body units (Heggie & Mathieu 1986): G = 1, total mass M = 1, total energy
// E = -1/4, so the virial radius is 1 and the crossing time is 2*sqrt(2). Physical units are an interpretation:
// choose a length and a mass unit, and the velocity and time units follow from G = 1. Snapshots' /Units group
// records one such interpretation in GADGET's spelling, so that GADGET readers (yt, pynbody) get units in which
// G = 1 holds: by default 1 kpc and 1e10 solar masses, hence a velocity unit of sqrt(G M / L) = 207.4 km/s and a
// time unit of L / V = 4.714 Myr. A Plummer sphere of mass 1 and virial radius 1 is then a 1e10 Msun galaxy of
// virial radius 1 kpc. Any other choice of length and mass is as valid (the run does not depend on it).
#pragma once

#include <cmath>

namespace matcha {

/// Newton's constant in cgs (CODATA 2018), the kiloparsec in cm (IAU 2015: 1 au = 149597870700 m, 1 pc = 648000 / pi
/// au) and the nominal solar mass in g (IAU 2015 B3: GM_sun = 1.3271244e26 cm^3/s^2 divided by G).
inline constexpr double kGravitationalConstantCgs = 6.67430e-8;
inline constexpr double kKiloparsecInCm = 3.0856775814913673e21;
inline constexpr double kSolarMassInGram = 1.988409870698051e33;

/// The velocity unit, in cm/s, that makes G = 1 for the given length and mass units: sqrt(G_cgs M / L).
inline double velocityUnitForUnitG(double lengthInCm, double massInGram) {
  return std::sqrt(kGravitationalConstantCgs * massInGram / lengthInCm);
}

struct UnitSystem {
  double lengthInCm = kKiloparsecInCm;          ///< one length unit in cm (default 1 kpc)
  double massInGram = 1e10 * kSolarMassInGram;  ///< one mass unit in g (default 1e10 Msun)
  /// one velocity unit in cm/s: by default the one that makes G = 1 (2.0739e7 cm/s = 207.4 km/s)
  double velocityInCmPerS = velocityUnitForUnitG(kKiloparsecInCm, 1e10 * kSolarMassInGram);
  double gravitationalConstant = 1.0;  ///< G in these units
};

}  // namespace matcha
