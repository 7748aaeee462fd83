// SPDX-License-Identifier: MIT
// The argument checks every Hermite engine makes (core/hermite_engine.hpp), written once for the CPU and CUDA engines:
// each throws InputError with a one-line message naming the call. Defined in gpu/src/hermite_cpu_engine.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "matcha/core/hermite_engine.hpp"

namespace matcha::gpu::detail {

/// reserve: capacity <= kMaxHermiteSlots.
void checkHermiteCapacity(std::size_t capacity);
/// setJParticles: spans of one length, every address below `capacity`.
void checkHermiteSlots(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles,
                       std::size_t capacity);
/// predict: numJ <= capacity, a finite time.
void checkHermitePrediction(double time, std::size_t numJ, std::size_t capacity);
/// launchForces: eps2 finite and >= 0, as many results as i-particles, positions (and velocities when jerks are
/// asked for), fewer than 2^31 i-particles, no launch still unfinished.
void checkHermiteLaunch(const IBlockView& block, double eps2, const HermiteForceView& out, bool launched);

}  // namespace matcha::gpu::detail
