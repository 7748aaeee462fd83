// SPDX-License-Identifier: MIT
#include "matcha/gpu/hermite_cpu_engine.hpp"

#include <tbb/blocked_range.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <limits>
#include <new>

#include "matcha/core/errors.hpp"
#include "matcha/core/hermite_predictor.hpp"
#include "matcha/core/pair_interaction.hpp"

namespace matcha::gpu {

namespace {

// j-slots per SIMD pass: the pass leaves each pair's |r|^2 in a small buffer that the nearest-neighbour scan reads
// next, so the vectorised pair loop carries no index reduction.
constexpr std::size_t kTile = 256;

/// The predicted j-particles as the pair loop reads them.
struct PredictedJ {
  const double *x, *y, *z, *vx, *vy, *vz, *mass;
  const std::int64_t* id;
  std::size_t count;
};

struct IResult {
  double acc[3] = {0, 0, 0};
  double jerk[3] = {0, 0, 0};
  double pot = 0;
  double nearest2 = std::numeric_limits<double>::infinity();
  std::int64_t nearestSlot = -1;
};

// Compiled for AVX-512, AVX2 and the baseline, picked at load time (as gpu/src/cpu_engine.cpp's pair loops).
__attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default"))) IResult sumOverJ(
    const PredictedJ& j, const double* xi, const double* vi, bool skipById, std::int64_t idi, double eps2) {
  IResult result;
  double ax = 0, ay = 0, az = 0, jx = 0, jy = 0, jz = 0, pot = 0;
  double r2s[kTile];
  for (std::size_t tile = 0; tile < j.count; tile += kTile) {
    const std::size_t end = tile + kTile < j.count ? tile + kTile : j.count;
#pragma omp simd reduction(+ : ax, ay, az, jx, jy, jz, pot)
    for (std::size_t k = tile; k < end; ++k) {
      // The i-particle's own j-copy adds nothing and is nobody's neighbour (skip by id, hermite_engine.hpp).
      const bool self = skipById && j.id[k] == idi;
      const double r2 = accumulateJerkPairInteraction<double>(
          j.x[k] - xi[0], j.y[k] - xi[1], j.z[k] - xi[2], j.vx[k] - vi[0], j.vy[k] - vi[1], j.vz[k] - vi[2],
          self ? 0.0 : j.mass[k], eps2, ax, ay, az, jx, jy, jz, pot);
      r2s[k - tile] = self ? std::numeric_limits<double>::infinity() : r2;
    }
    // Strictly smaller: of equal distances the lowest slot wins (the CUDA engine keeps the same rule).
    for (std::size_t k = tile; k < end; ++k) {
      if (r2s[k - tile] < result.nearest2) {
        result.nearest2 = r2s[k - tile];
        result.nearestSlot = static_cast<std::int64_t>(k);
      }
    }
  }
  result.acc[0] = ax;
  result.acc[1] = ay;
  result.acc[2] = az;
  result.jerk[0] = jx;
  result.jerk[1] = jy;
  result.jerk[2] = jz;
  result.pot = pot;
  return result;
}

}  // namespace

std::string HermiteCpuEngine::name() const {
  return "cpu-hermite (" + std::to_string(tbb::info::default_concurrency()) + " threads, double)";
}

void HermiteCpuEngine::reserve(std::size_t capacity) {
  if (capacity > kMaxHermiteSlots) {
    throw InputError("Hermite j-memory of " + std::to_string(capacity) + " slots exceeds the limit of " +
                     std::to_string(kMaxHermiteSlots));
  }
  try {
    slots_.resize(capacity);
  } catch (const std::bad_alloc&) {
    throw InputError("Hermite j-memory of " + std::to_string(capacity) + " slots does not fit in host memory");
  }
  if (numPredicted_ > capacity) numPredicted_ = capacity;
}

void HermiteCpuEngine::setJParticles(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles) {
  if (addresses.size() != particles.size()) {
    throw InputError("setJParticles: " + std::to_string(addresses.size()) + " addresses for " +
                     std::to_string(particles.size()) + " particles");
  }
  for (const std::uint32_t address : addresses) {
    if (address >= slots_.size()) {
      throw InputError("setJParticles: address " + std::to_string(address) + " outside the j-memory of " +
                       std::to_string(slots_.size()) + " slots");
    }
  }
  for (std::size_t k = 0; k < addresses.size(); ++k) slots_[addresses[k]] = particles[k];
}

void HermiteCpuEngine::predict(double time, std::size_t numJ) {
  if (numJ > slots_.size()) {
    throw InputError("predict: " + std::to_string(numJ) + " j-particles asked for, the j-memory holds " +
                     std::to_string(slots_.size()));
  }
  if (!std::isfinite(time)) throw InputError("predict: the time is not finite");
  for (auto* array : {&x_, &y_, &z_, &vx_, &vy_, &vz_, &mass_}) array->resize(numJ);
  id_.resize(numJ);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, numJ, 1024), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t k = r.begin(); k != r.end(); ++k) {
      const JParticle& p = slots_[k];
      const double dt = time - p.time;
      double* const position[3] = {&x_[k], &y_[k], &z_[k]};
      double* const velocity[3] = {&vx_[k], &vy_[k], &vz_[k]};
      for (int d = 0; d < 3; ++d) {
        predictCoordinate(dt, p.pos[d], p.vel[d], p.acc[d], p.jerk[d], p.snap[d], *position[d], *velocity[d]);
      }
      mass_[k] = p.mass;
      id_[k] = p.id;
    }
  });
  numPredicted_ = numJ;
}

void HermiteCpuEngine::launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) {
  if (!(eps2 >= 0.0) || !std::isfinite(eps2)) throw InputError("launchForces: eps2 must be finite and >= 0");
  if (block.count != out.count) {
    throw InputError("launchForces: " + std::to_string(block.count) + " i-particles but room for " +
                     std::to_string(out.count) + " results");
  }
  if (block.count > 0 && block.pos == nullptr) throw InputError("launchForces: no i-particle positions");
  if (block.count > 0 && block.vel == nullptr && out.jerk != nullptr) {
    throw InputError("launchForces: jerks asked for without i-particle velocities");
  }
  if (launched_) throw InputError("launchForces: the previous launch was not finished");
  const PredictedJ j{x_.data(),  y_.data(),    z_.data(),  vx_.data(),   vy_.data(),
                     vz_.data(), mass_.data(), id_.data(), numPredicted_};
  const double zero[3] = {0.0, 0.0, 0.0};
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, block.count, 4), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) {
      const bool skipById = block.id != nullptr;
      const IResult result = sumOverJ(j, block.pos + 3 * i, block.vel != nullptr ? block.vel + 3 * i : zero, skipById,
                                      skipById ? block.id[i] : 0, eps2);
      for (int d = 0; d < 3; ++d) {
        if (out.acc != nullptr) out.acc[3 * i + d] = result.acc[d];
        if (out.jerk != nullptr) out.jerk[3 * i + d] = result.jerk[d];
      }
      if (out.pot != nullptr) out.pot[i] = result.pot;
      if (out.nearestId != nullptr) out.nearestId[i] = result.nearestSlot < 0 ? -1 : id_[result.nearestSlot];
      if (out.nearestDistance2 != nullptr) out.nearestDistance2[i] = result.nearest2;
    }
  });
  launched_ = true;
}

void HermiteCpuEngine::finishForces() {
  if (!launched_) throw InputError("finishForces without a launchForces");
  launched_ = false;
}

}  // namespace matcha::gpu
