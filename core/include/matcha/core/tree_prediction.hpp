// SPDX-License-Identifier: MIT
// What a tree built for later calls needs of each body (tree/TreeSolver's reuse, README "Reuse across steps"): the
// centre and radius of the ball around its predicted path, the lowest |a| it reaches over the tree's calls, and its
// Morton key in the tree's root cube. Written once for the host (tree/) and the CUDA engine (gpu/), which makes the
// same inputs on its device from its own copy of the bodies: both round every product and sum on its own (no fused
// multiply-add), so the two give the same bits and a run builds the same trees whichever side predicted them.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "matcha/core/host_device.hpp"

namespace matcha {

namespace detail {

// Each product, quotient and sum rounded on its own: nvcc would otherwise fuse a * b + c, which the host does not.
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double addRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double subRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double mulRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double divRn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double sqrtRn(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE float nextFloatUp(float a) {
#if defined(__CUDA_ARCH__)
  return nextafterf(a, __int_as_float(0x7f800000));
#else
  return std::nextafter(a, std::numeric_limits<float>::infinity());
#endif
}
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE float nextFloatDown(float a) {
#if defined(__CUDA_ARCH__)
  return nextafterf(a, 0.0f);
#else
  return std::nextafter(a, 0.0f);
#endif
}

}  // namespace detail

/// The calls a tree built now will serve, `first` .. `last` calls from now (call 0 being the bodies as they are), and
/// the room its balls leave for the acceleration to change: predictionRoom in tree/tree_solver.hpp.
struct PredictionWindow {
  double first = 0.0;
  double last = 0.0;
  double room = 0.0;
  /// first (first + 1) / 2 and last (last + 1) / 2: the second difference's weights at the two ends.
  double firstWeight = 0.0;
  double lastWeight = 0.0;
};

/// The window of calls [first, last] with its weights, computed once on the host (both sides use these values).
inline PredictionWindow makePredictionWindow(double first, double last, double room) {
  return {first, last, room, first * (first + 1.0) / 2.0, last * (last + 1.0) / 2.0};
}

/// A body's ball over the window, from its position x and its last two displacements (d1 = x - x_previous, and the one
/// before it): call k is at x + k d1 + k (k + 1) / 2 (d1 - d1_before), exact for a leapfrog step under constant
/// acceleration. The ball's centre is the midpoint of the first and last positions; its radius holds half the chord
/// and room |d1 - d1_before|, rounded up to a float with a relative margin for the rounding of the midpoint.
MATCHA_HOST_DEVICE inline float predictBall(const double x[3], const double displacement[3],
                                            const double displacementBefore[3], const PredictionWindow& window,
                                            double centre[3]) {
  using namespace detail;
  double chord2 = 0.0, sag2 = 0.0;
  for (int d = 0; d < 3; ++d) {
    const double secondDifference = subRn(displacement[d], displacementBefore[d]);
    const double start =
        addRn(addRn(x[d], mulRn(window.first, displacement[d])), mulRn(window.firstWeight, secondDifference));
    const double finish =
        addRn(addRn(x[d], mulRn(window.last, displacement[d])), mulRn(window.lastWeight, secondDifference));
    const double chord = subRn(finish, start);
    chord2 = addRn(chord2, mulRn(chord, chord));
    sag2 = addRn(sag2, mulRn(secondDifference, secondDifference));
    centre[d] = mulRn(0.5, addRn(start, finish));
  }
  const double ball = addRn(mulRn(0.5, sqrtRn(chord2)), mulRn(window.room, sqrtRn(sag2)));
  return nextFloatUp(static_cast<float>(mulRn(ball, 1.0 + 1e-6)));
}

/// The motion a leapfrog announced into this call and the call before (core/particles.hpp: BodyAdvance): the drift
/// into this call used the velocity the body has now; the drift before it used that velocity less this interval's
/// kicks, made with the accelerations of the call before.
struct AnnouncedMotion {
  double driftIn = 0.0;
  double kicksIn = 0.0;  ///< firstKick + secondKick of the motion into this call
  double driftBefore = 0.0;
};

/// The last two displacements of a body whose motion was announced, from its velocity v and the acceleration a the
/// kicks into this call used.
MATCHA_HOST_DEVICE inline void announcedDisplacements(const double v[3], const double a[3],
                                                      const AnnouncedMotion& motion, double displacement[3],
                                                      double displacementBefore[3]) {
  using namespace detail;
  for (int d = 0; d < 3; ++d) {
    displacement[d] = mulRn(v[d], motion.driftIn);
    displacementBefore[d] = mulRn(subRn(v[d], mulRn(a[d], motion.kicksIn)), motion.driftBefore);
  }
}

/// The smallest |a| a body reaches over the next `age` calls if its acceleration a keeps changing at its last rate,
/// previous - earlier (the accelerations of the last two calls, as floats; `rateKnown` false: |a| itself), rounded
/// down to a float: the minimum of |a + rate t| over 0 <= t <= age.
MATCHA_HOST_DEVICE inline float lowestAcceleration(const double a[3], const float previous[3], const float earlier[3],
                                                   bool rateKnown, double age) {
  using namespace detail;
  const double now2 = addRn(addRn(mulRn(a[0], a[0]), mulRn(a[1], a[1])), mulRn(a[2], a[2]));
  double lowest2 = now2;
  if (rateKnown && now2 > 0.0) {
    double rate[3];
    for (int d = 0; d < 3; ++d) rate[d] = subRn(double(previous[d]), double(earlier[d]));
    const double rate2 = addRn(addRn(mulRn(rate[0], rate[0]), mulRn(rate[1], rate[1])), mulRn(rate[2], rate[2]));
    const double along = addRn(addRn(mulRn(a[0], rate[0]), mulRn(a[1], rate[1])), mulRn(a[2], rate[2]));
    // |a + rate t|^2 is a parabola in t: its lowest point, kept within the calls to come.
    double t = 0.0;
    if (rate2 > 0.0) {
      t = divRn(-along, rate2);
      t = t < 0.0 ? 0.0 : (age < t ? age : t);
    }
    double atT2 = 0.0;
    for (int d = 0; d < 3; ++d) {
      const double component = addRn(a[d], mulRn(rate[d], t));
      atT2 = addRn(atT2, mulRn(component, component));
    }
    lowest2 = atT2 < now2 ? atT2 : now2;
  }
  const double lowest = sqrtRn(lowest2);
  float rounded = static_cast<float>(lowest);
  if (double(rounded) > lowest) rounded = detail::nextFloatDown(rounded);
  return rounded;
}

/// Bits per dimension of a Morton key; 3 x 21 = 63 bits, so a key fits in uint64 and the deepest cell is 2^-21 of the
/// root cube.
inline constexpr int kMaxLevel = 21;

/// An axis-aligned cube: the root cell of the octree.
struct Cube {
  double lo[3] = {0, 0, 0};  ///< lower corner
  double side = 1.0;         ///< edge length, > 0
};

/// The smallest cube around the extent [lo, hi] of the bodies, widened by a relative margin so that no body sits
/// exactly on the upper face (its integer coordinate stays below 2^21).
MATCHA_HOST_DEVICE inline Cube cubeAroundExtent(const double lo[3], const double hi[3]) {
  using namespace detail;
  double side = 0.0;
  for (int d = 0; d < 3; ++d) {
    const double extent = subRn(hi[d], lo[d]);
    side = extent > side ? extent : side;
  }
  // A single body (or coincident bodies) has zero extent; any positive side works.
  if (side <= 0.0) side = 1.0;
  side = mulRn(side, 1.0 + 1e-6);
  Cube cube;
  cube.side = side;
  for (int d = 0; d < 3; ++d) cube.lo[d] = subRn(mulRn(0.5, addRn(lo[d], hi[d])), mulRn(0.5, side));
  return cube;
}

/// The integer cell coordinate at level kMaxLevel of a coordinate in a cube whose lower corner is at `lo`, with
/// scale = 2^21 / side: clamped into [0, 2^21 - 1], then truncated (the floor of the non-negative value left).
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE std::uint32_t keyCell(double coordinate, double lo, double scale) {
  constexpr double kCells = double(1u << kMaxLevel);
  const double cell = detail::mulRn(detail::subRn(coordinate, lo), scale);
  return static_cast<std::uint32_t>(cell < 0.0 ? 0.0 : (kCells - 1.0 < cell ? kCells - 1.0 : cell));
}

/// 2^21 / side, the scale of keyCell.
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE double keyScale(const Cube& cube) {
  return detail::divRn(double(1u << kMaxLevel), cube.side);
}

}  // namespace matcha
