// SPDX-License-Identifier: MIT
// The j-particle predictor of the Hermite engines (hermite_engine.hpp), written once for the CPU engine and the CUDA
// predictor kernel (STYLE.md habit 2). Host-device, no allocation.
#pragma once

#include "matcha/core/host_device.hpp"

namespace matcha {

/// Taylor series of one coordinate from its time t_j to t_j + dt, in Horner form:
///   x_p = x + dt (v + dt (a/2 + dt (j/6 + dt s/24)))
///   v_p = v + dt (a + dt (j/2 + dt s/6))
/// 4th order in the position and 3rd in the velocity with the snap s; with s = 0 the predictor of Makino & Aarseth
/// (1992), 3rd and 2nd order. GRAPE-6 takes the same terms as a/2, j/6 and s/18 (g6_set_j_particle's aby2, a1by6 and
/// a2by18), which is why lib/ multiplies them back before they reach an engine.
///
/// @param dt   in: prediction time minus the particle's own time (any sign)
/// @param x..s in: position, velocity, acceleration, jerk and snap at the particle's time
/// @param predictedX,predictedV  out: overwritten
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void predictCoordinate(T dt, T x, T v, T a, T j, T s, T& predictedX,
                                                             T& predictedV) {
  constexpr T kHalf = T(0.5), kSixth = T(1) / T(6), kTwentyFourth = T(1) / T(24);
  predictedX = x + dt * (v + dt * (kHalf * a + dt * (kSixth * j + dt * (kTwentyFourth * s))));
  predictedV = v + dt * (a + dt * (kHalf * j + dt * (kSixth * s)));
}

}  // namespace matcha
