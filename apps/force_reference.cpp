// SPDX-License-Identifier: MIT
#include "force_reference.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <unordered_set>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/gpu/ewald.hpp"

namespace matcha::app {

namespace {

/// alpha L = 6 and both sums cut at exp(-4.5^2) = 1.6e-9: a 20th of the default's wave vectors (gpu/ewald.hpp); the
/// cost is then N x 1,330 wave vectors plus targets x N nearest images.
const gpu::EwaldParams kReferenceEwald{1.0, 6.0, 4.5};

TargetForces sized(std::size_t count) {
  TargetForces forces;
  for (auto* component : {&forces.ax, &forces.ay, &forces.az}) component->resize(count);
  return forces;
}

}  // namespace

std::unique_ptr<NearFieldEngine> makeReferenceEngine(const std::string& choice, std::string& used) {
  if (choice == "cpu-double") {
    used = "cpu-double";
    return std::make_unique<gpu::CpuEngine>(gpu::Precision::float64);
  }
  if (choice == "gpu-double" || (gpu::cudaEngineBuilt() && gpu::queryCudaDevice().available)) {
    used = "gpu-double";
    try {
      return gpu::makeCudaEngine(gpu::Precision::float64);
    } catch (const InputError& error) {
      throw InputError(std::string("--reference gpu-double: ") + error.what());
    }
  }
  used = "cpu-double";
  return std::make_unique<gpu::CpuEngine>(gpu::Precision::float64);
}

std::string ewaldReferenceKind(const std::string& choice) {
  const bool gpu = gpu::cudaEngineBuilt() && gpu::queryCudaDevice().available;
  if (choice == "gpu-double" && !gpu) {
    throw InputError("--reference gpu-double: no usable CUDA device for the Ewald sum (" +
                     gpu::queryCudaDevice().description + ")");
  }
  return choice == "gpu-double" || (choice == "auto" && gpu) ? "ewald-gpu-double" : "ewald-cpu-double";
}

TargetForces gatherTargets(const Particles& bodies, std::span<const std::uint32_t> targets) {
  TargetForces forces = sized(targets.size());
  for (std::size_t k = 0; k < targets.size(); ++k) {
    forces.ax[k] = bodies.ax[targets[k]];
    forces.ay[k] = bodies.ay[targets[k]];
    forces.az[k] = bodies.az[targets[k]];
  }
  return forces;
}

TargetForces directOnTargets(NearFieldEngine& engine, const Particles& bodies, std::span<const std::uint32_t> targets,
                             const GravityParams& gravity) {
  Particles copy = bodies;
  if (targets.size() == bodies.size()) {
    engine.evaluateDirect(copy.sources(), gravity, copy.forces());
    return gatherTargets(copy, targets);
  }
  // Targets first, kept in the bodies' order: after the tree's Morton sort that makes each block of targets as
  // compact as the sample allows, and so the float engine's coordinates relative to the block centre as precise.
  constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> slotOf(copy.size(), kNone);
  for (std::size_t k = 0; k < targets.size(); ++k) {
    MATCHA_ASSERT(targets[k] < copy.size() && slotOf[targets[k]] == kNone, "targets must be distinct body indices");
    slotOf[targets[k]] = static_cast<std::uint32_t>(k);
  }
  std::vector<std::uint32_t> order;
  order.reserve(copy.size());
  for (const bool target : {true, false}) {
    for (std::uint32_t i = 0; i < copy.size(); ++i) {
      if ((slotOf[i] != kNone) == target) order.push_back(i);
    }
  }
  copy.permute(order);
  constexpr std::uint32_t kBlockSize = 256;
  // The CUDA engine expands every group's body ranges into 4-byte indices: at most 2^28 list entries per call keeps
  // that at 1 GiB and within its 32-bit offsets.
  constexpr std::uint64_t kMaxListEntries = std::uint64_t{1} << 28;
  const std::uint64_t blocksPerCall = std::max<std::uint64_t>(1, kMaxListEntries / copy.size());
  const auto numTargets = static_cast<std::uint32_t>(targets.size());
  const auto targetsPerCall =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(numTargets, blocksPerCall * kBlockSize));
  for (std::uint32_t first = 0; first < numTargets;) {
    const std::uint32_t last = first + std::min(targetsPerCall, numTargets - first);
    const InteractionPlan plan = gpu::makeDirectPlan(copy.sources(), kBlockSize, BodyRange{first, last});
    engine.evaluatePlan(copy.sources(), CellMultipoles{}, plan, gravity, copy.forces());
    first = last;
  }
  TargetForces forces = sized(targets.size());
  for (std::uint32_t j = 0; j < numTargets; ++j) {
    const std::uint32_t slot = slotOf[order[j]];
    forces.ax[slot] = copy.ax[j];
    forces.ay[slot] = copy.ay[j];
    forces.az[slot] = copy.az[j];
  }
  return forces;
}

TargetForces ewaldOnTargets(const Particles& bodies, std::span<const std::uint32_t> targets,
                            const GravityParams& gravity, double box, const std::string& kind) {
  TargetForces forces = sized(targets.size());
  gpu::EwaldParams ewald = kReferenceEwald;
  ewald.boxSize = box;
  const ForceView out{forces.ax.data(), forces.ay.data(), forces.az.data(), nullptr, targets.size()};
  if (kind == "ewald-gpu-double") {
    gpu::evaluateEwaldOnGpu(bodies.sources(), gravity, ewald, targets, out);
  } else {
    gpu::evaluateEwald(bodies.sources(), gravity, ewald, targets, out);
  }
  return forces;
}

std::vector<std::uint32_t> drawTargets(std::size_t numBodies, std::size_t count, std::uint64_t seed) {
  MATCHA_ASSERT(count <= numBodies && numBodies <= std::numeric_limits<std::uint32_t>::max() + std::size_t{1},
                "more targets than bodies");
  std::mt19937_64 random(seed);
  std::unordered_set<std::uint32_t> chosen;
  chosen.reserve(count);
  for (std::size_t j = numBodies - count; j < numBodies; ++j) {
    const auto t = static_cast<std::uint32_t>(std::uniform_int_distribution<std::size_t>(0, j)(random));
    chosen.insert(chosen.count(t) != 0 ? static_cast<std::uint32_t>(j) : t);
  }
  std::vector<std::uint32_t> targets(chosen.begin(), chosen.end());
  std::sort(targets.begin(), targets.end());
  return targets;
}

Sample drawSample(std::size_t numBodies, std::size_t numTargets, std::uint64_t seed) {
  Sample sample;
  sample.numTargets = numTargets == 0 ? numBodies : numTargets;
  sample.slotOfId.assign(numBodies, Sample::kNone);
  if (sample.all()) {
    std::iota(sample.slotOfId.begin(), sample.slotOfId.end(), 0u);
    return sample;
  }
  std::vector<std::uint32_t> ids(numBodies), chosen;
  std::iota(ids.begin(), ids.end(), 0u);
  std::mt19937_64 random(seed);
  std::sample(ids.begin(), ids.end(), std::back_inserter(chosen), numTargets, random);
  for (std::size_t k = 0; k < chosen.size(); ++k) sample.slotOfId[chosen[k]] = static_cast<std::uint32_t>(k);
  return sample;
}

std::vector<std::uint32_t> targetIndices(const Particles& bodies, const Sample& sample) {
  std::vector<std::uint32_t> targets(sample.numTargets);
  for (std::uint32_t i = 0; i < bodies.size(); ++i) {
    const std::uint32_t slot = sample.slotOfId[bodies.id[i]];
    if (slot != Sample::kNone) targets[slot] = i;
  }
  return targets;
}

ForceCheck::ForceCheck(std::size_t sample, const GravityParams& gravity, double box, std::uint64_t seed)
    : sample_(sample), gravity_(gravity), box_(box), seed_(seed) {
  if (box_ > 0.0) {
    kind_ = ewaldReferenceKind("auto");
  } else {
    oracle_ = makeReferenceEngine("auto", kind_);
  }
}

std::string ForceCheck::operator()(const Particles& p, double time, std::uint64_t step) {
  const Stopwatch clock;
  const std::vector<std::uint32_t> targets = drawTargets(p.size(), std::min(sample_, p.size()), seed_ ^ step);
  const TargetForces exact =
      box_ > 0.0 ? ewaldOnTargets(p, targets, gravity_, box_, kind_) : directOnTargets(*oracle_, p, targets, gravity_);
  const ForceErrorStats error = summariseForceErrors(gatherTargets(p, targets).view(), exact.view());
  const double seconds = clock.seconds();
  checks_.push_back({{"step", step},
                     {"time", time},
                     {"median", error.median},
                     {"p90", error.p90},
                     {"p99", error.p99},
                     {"max", error.max},
                     {"seconds", seconds}});
  for (const char* key : {"median", "p90", "p99", "max"}) {
    worst_[key] = std::max(worst_.value(key, 0.0), checks_.back()[key].get<double>());
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "# force check after step %llu (t = %.6g): |a - a_exact| / |a_exact| median "
                "%.3e, 90%% %.3e, 99%% %.3e, max %.3e on %zu bodies (%s, %.2f s)",
                static_cast<unsigned long long>(step), time, error.median, error.p90, error.p99, error.max,
                targets.size(), kind_.c_str(), seconds);
  return line;
}

nlohmann::json ForceCheck::json() const {
  return {{"sample", sample_}, {"reference", kind_}, {"count", checks_.size()}, {"worst", worst_}, {"checks", checks_}};
}

}  // namespace matcha::app
