// SPDX-License-Identifier: MIT
// The opening criterion (MAC), written once for the tree walk's reference, the engines' check of reused lists (CPU
// and CUDA) and the tests (STYLE.md habit 2). A host-device header: nothing here allocates.
#pragma once

#include <cmath>

#include "matcha/core/host_device.hpp"

namespace matcha {

/// The opening radius of a cell: r_open = 2 h / theta + |com - centre|, where h is the half edge of the smallest cube
/// about the cell's geometric centre that holds all its bodies (the cell's own half side while none has left it) and
/// |com - centre| the offset of its centre of mass (Barnes 1994; GADGET's and Bonsai's r_crit): the offset keeps a
/// cell whose mass sits in one corner from being accepted by a group just beyond that corner (Salmon & Warren 1994).
MATCHA_HOST_DEVICE inline double openingRadius(double halfExtent, double theta, double comOffset) {
  return 2.0 * halfExtent / theta + comOffset;
}

/// Squared distance from point p to the axis-aligned box (centre c, half extents h); 0 inside the box.
MATCHA_HOST_DEVICE inline double distanceToBox2(double px, double py, double pz, double cx, double cy, double cz,
                                                double hx, double hy, double hz) {
  const double dx = largerOf(0.0, std::fabs(px - cx) - hx);
  const double dy = largerOf(0.0, std::fabs(py - cy) - hy);
  const double dz = largerOf(0.0, std::fabs(pz - cz) - hz);
  return dx * dx + dy * dy + dz * dz;
}

/// Squared distance from point p to the nearest periodic image of the box (centre c, half extents h) in a cube of side
/// L: each axis's offset |p - c| folded into [0, L/2] first. For p and c within the cube, |p - c| < L.
MATCHA_HOST_DEVICE inline double periodicGapToBox(double offset, double half, double boxSize) {
  offset = std::fabs(offset);
  return largerOf(0.0, smallerOf(offset, boxSize - offset) - half);
}
MATCHA_HOST_DEVICE inline double periodicDistanceToBox2(double px, double py, double pz, double cx, double cy,
                                                        double cz, double hx, double hy, double hz, double boxSize) {
  const double dx = periodicGapToBox(px - cx, hx, boxSize);
  const double dy = periodicGapToBox(py - cy, hy, boxSize);
  const double dz = periodicGapToBox(pz - cz, hz, boxSize);
  return dx * dx + dy * dy + dz * dz;
}

/// Whether a cell (centre of mass at squared distance `distance2` from a group's box, opening radius r_open, mass M,
/// all its bodies within b_max of its centre of mass) may stand in for its bodies in that group's list:
///  - the theta test: the box lies outside the sphere of radius r_open around the centre of mass, and
///  - the relative test (GADGET's, on top of theta; off when `tolerance` is +inf): the leading truncated term
///    M b_max^p / d^(p+2) at the box's nearest point, p = 3 for quadrupole cells and 2 for monopoles, is at most
///    `tolerance` = alpha |a|_min / G (tree/groups.hpp: setRelativeTolerances).
/// A cell holding any of the group's own bodies is never accepted; that is the caller's test (body ranges).
MATCHA_HOST_DEVICE inline bool passesOpeningCriterion(double distance2, double openingRadius, double mass, double bmax,
                                                      double tolerance, bool quadrupole) {
  if (!(distance2 > openingRadius * openingRadius)) return false;
  if (std::isinf(tolerance)) return true;
  // M b^p / d^(p+2) <= tolerance, multiplied out.
  const double b2 = bmax * bmax;
  if (quadrupole) return mass * b2 * bmax <= tolerance * distance2 * distance2 * std::sqrt(distance2);
  return mass * b2 <= tolerance * distance2 * distance2;
}

}  // namespace matcha
