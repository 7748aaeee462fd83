// SPDX-License-Identifier: MIT
// The unit system. matcha works in N-body units (Heggie & Mathieu 1986): G = 1, total mass M = 1, total energy
// E = -1/4, so the virial radius is 1 and the crossing time is 2*sqrt(2). Physical units are an interpretation:
// choose M and the virial radius, and every other unit follows from G. The conversion factors below are written to
// snapshots' /Units group in GADGET's spelling; 1.0 means "dimensionless N-body units".
#pragma once

namespace matcha {

struct UnitSystem {
  double lengthInCm = 1.0;             ///< one length unit in cm (1: dimensionless)
  double massInGram = 1.0;             ///< one mass unit in g (1: dimensionless)
  double velocityInCmPerS = 1.0;       ///< one velocity unit in cm/s (1: dimensionless)
  double gravitationalConstant = 1.0;  ///< G in these units
};

}  // namespace matcha
