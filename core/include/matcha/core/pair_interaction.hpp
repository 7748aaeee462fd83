// SPDX-License-Identifier: MIT
// The physics of one softened pair interaction, written once for the CPU engines, the CPU oracle and the CUDA
// kernels (DESIGN.md §3). Everything here is a host-device inline template; nothing allocates or branches on data
// except through selects that compilers turn into blends.
#pragma once

#include <cmath>

#include "matcha/core/host_device.hpp"

namespace matcha {

/// 1/sqrt(x) in the precision of T; on the GPU the hardware reciprocal square root.
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T reciprocalSqrt(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) {
    return rsqrtf(x);
  } else {
    return rsqrt(x);
  }
#else
  return T(1) / std::sqrt(x);
#endif
}

/// Adds the pull of source j on target i:
///   a_i += m_j r_ij / (|r_ij|^2 + eps^2)^{3/2},   phi_i -= m_j / sqrt(|r_ij|^2 + eps^2),   r_ij = x_j - x_i.
/// G is applied by the caller once per target, not per pair.
///
/// A pair at zero separation contributes nothing: that is the self term, which must be skipped explicitly because
/// with eps = 0 it is 0/0 (DESIGN.md §3), and with eps > 0 it would add a spurious -m_i/eps to the potential.
/// The zero-distance argument of the square root is replaced by 1 before the division so that vectorised lanes
/// never divide by zero (tests trap floating-point exceptions). Two distinct bodies at exactly the same point are
/// treated the same way: their force on each other is zero either way, and their -m/eps potential term is dropped.
///
/// @param dx,dy,dz  in: x_j - x_i
/// @param massJ     in: m_j (0 for padding; padding then adds exactly nothing)
/// @param eps2      in: squared Plummer softening length
/// @param ax,ay,az,pot  in/out: accumulated, never overwritten
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void accumulatePairInteraction(T dx, T dy, T dz, T massJ, T eps2, T& ax, T& ay,
                                                                     T& az, T& pot) {
  const T r2 = dx * dx + dy * dy + dz * dz;
  const bool separated = r2 > T(0);
  const T softenedR2 = separated ? r2 + eps2 : T(1);
  const T invR = separated ? reciprocalSqrt(softenedR2) : T(0);
  const T massInvR = massJ * invR;
  const T massInvR3 = massInvR * invR * invR;
  ax += massInvR3 * dx;
  ay += massInvR3 * dy;
  az += massInvR3 * dz;
  pot -= massInvR;
}

/// Floating-point operations per monopole interaction in the two conventions the literature uses: 20 (GPU Gems 3
/// ch. 31, acceleration only) and 38 (Chamomile / kirin, counting the reciprocal square root as several flops).
inline constexpr double kFlopsPerInteractionGpuGems = 20.0;
inline constexpr double kFlopsPerInteractionChamomile = 38.0;

}  // namespace matcha
