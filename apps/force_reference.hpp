// SPDX-License-Identifier: MIT
// Exact forces on a few target bodies, the oracle that `matcha compare` and `matcha run --force-check` measure the
// solver against: direct summation in double (CPU oracle or CUDA engine), or Ewald summation with a periodic box.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/force_error.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::app {

/// Accelerations of the targets, in the order the targets were given.
struct TargetForces {
  std::vector<double> ax, ay, az;
  AccelerationSet view() const { return {ax, ay, az}; }
};

/// The double-precision direct-summation engine the errors are measured against: `cpu-double` (the CPU oracle),
/// `gpu-double` (the CUDA engine in double, far faster at large N; InputError where there is none) or `auto`
/// (gpu-double when the CUDA engine is built and a device is present, else cpu-double). `used` gets the kind.
std::unique_ptr<NearFieldEngine> makeReferenceEngine(const std::string& choice, std::string& used);

/// Where the periodic reference runs, for `choice` as makeReferenceEngine takes it: "ewald-gpu-double" (gpu-double,
/// or auto with a usable GPU) or "ewald-cpu-double". InputError for gpu-double without a GPU.
std::string ewaldReferenceKind(const std::string& choice);

/// The accelerations `bodies` hold for each of `targets` (indices into the bodies).
TargetForces gatherTargets(const Particles& bodies, std::span<const std::uint32_t> targets);

/// The forces on `targets` (distinct indices into the bodies) from all N bodies, by direct summation on `engine`:
/// K x N pairs for K targets (every body: plain evaluateDirect), which is what makes N = 2^22 feasible.
TargetForces directOnTargets(NearFieldEngine& engine, const Particles& bodies, std::span<const std::uint32_t> targets,
                             const GravityParams& gravity);

/// The periodic forces on `targets` from all N bodies in a box of side `box`: Ewald summation in double
/// (gpu/ewald.hpp; alpha L = 6 and both sums cut at exp(-4.5^2) = 1.6e-9, far below TreePM's 1e-4 errors), on the GPU
/// or the CPU as `kind` (ewaldReferenceKind) says.
TargetForces ewaldOnTargets(const Particles& bodies, std::span<const std::uint32_t> targets,
                            const GravityParams& gravity, double box, const std::string& kind);

/// `count` distinct indices in [0, numBodies), uniformly at random from `seed` (Floyd's algorithm: O(count) work and
/// memory whatever numBodies), in increasing order. count <= numBodies.
std::vector<std::uint32_t> drawTargets(std::size_t numBodies, std::size_t count, std::uint64_t seed);

/// `matcha run --force-check K`: after the last step on each tree (where a tree reused over several steps is least
/// accurate; with reuse off, every step), the accelerations of K bodies drawn at random, a fresh draw each time,
/// against the exact ones: direct summation in double (the GPU's when there is one), or Ewald summation in a periodic
/// box. The error percentiles go to the log and to summary.json; the time to the output column, not to the steps
/// (the reference shares the GPU with the next step's kernels, which may slow that step a little). On several ranks
/// rank 0 measures the gathered bodies (distributed_run.cpp).
class ForceCheck {
 public:
  ForceCheck(std::size_t sample, const GravityParams& gravity, double box, std::uint64_t seed);

  /// Measures the forces `p` holds after `step`; returns the log line.
  std::string operator()(const Particles& p, double time, std::uint64_t step);

  /// summary.json's "force_checks": the sample, the reference, every check and the worst of each percentile.
  nlohmann::json json() const;

 private:
  std::size_t sample_;
  GravityParams gravity_;
  double box_;
  std::uint64_t seed_;
  std::string kind_;
  std::unique_ptr<NearFieldEngine> oracle_;
  nlohmann::json checks_ = nlohmann::json::array();
  nlohmann::json worst_ = nlohmann::json::object();
};

/// The bodies the errors are measured on (the targets), by id: `matcha compare` and `matcha tune` number the bodies
/// 0..N-1 in input order, so an id is also an index into slotOfId however the tree solver reorders the bodies.
struct Sample {
  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
  std::size_t numTargets = 0;
  std::vector<std::uint32_t> slotOfId;  ///< per id: the target's slot in [0, numTargets), or kNone

  bool all() const { return numTargets == slotOfId.size(); }
};

/// `numTargets` of the ids 0..numBodies-1 drawn at random from `seed` (0: every body, in id order).
Sample drawSample(std::size_t numBodies, std::size_t numTargets, std::uint64_t seed);

/// The sample's targets as indices into `bodies` as they are now (the solver may have reordered them), by slot.
/// The bodies' ids must be 0..N-1.
std::vector<std::uint32_t> targetIndices(const Particles& bodies, const Sample& sample);

}  // namespace matcha::app
