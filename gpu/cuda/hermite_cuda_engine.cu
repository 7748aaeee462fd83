// SPDX-License-Identifier: MIT
// The CUDA Hermite engine: the predictor, force and combine kernels and their host code (hermite_cuda_engine.hpp says
// what lives where). The HermiteCpuEngine (gpu/src/hermite_cpu_engine.cpp) is its twin and its test oracle.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_check.cuh"
#include "device_memory.cuh"
#include "matcha/core/errors.hpp"
#include "matcha/core/hermite_predictor.hpp"
#include "matcha/core/pair_interaction.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"
#include "matcha/gpu/detail/hermite_checks.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"
#include "matcha/gpu/hermite_cuda_engine.hpp"

namespace matcha::gpu {

namespace detail {
namespace {

/// Threads per block of the force kernel, and j-slots per shared-memory tile (each thread stages one).
constexpr int kThreads = 128;
/// Longest float partial sum of one thread before it goes into the double accumulators (the direct kernel's 64).
constexpr int kPartialSumTerms = 64;
/// The predicted j-memory is padded to whole tiles with massless slots this far away: they add exactly nothing, and a
/// nearest neighbour found among them (only when there are no real slots) is reported as none.
constexpr float kPadCoordinate = 1.0e12f;
/// Keys of the pad slots and of i-particles whose id no slot has (never equal to a slot's key).
constexpr std::uint32_t kPadKey = 0xFFFFFFFEu;
constexpr std::uint32_t kNoKey = 0xFFFFFFFFu;
constexpr std::uint32_t kNoSlot = 0xFFFFFFFFu;

/// One i-particle's sums (final, or one split's share), 64 bytes.
struct alignas(16) HermiteSums {
  double acc[3];
  double jerk[3];
  double pot;
  float nearest2;             ///< unsoftened |r|^2 of the nearest other slot (+inf: none yet)
  std::uint32_t nearestSlot;  ///< kNoSlot: none
};
static_assert(sizeof(HermiteSums) == 64, "HermiteSums is copied as 64-byte records");

struct ForceArgs {
  const float4* posHi;  ///< (hi x, hi y, hi z, mass) per slot, padded to whole tiles
  const float4* posLo;  ///< (lo x, lo y, lo z, key bits)
  const float4* vel;    ///< (vx, vy, vz, 0)
  const double* iPos;   ///< 3 per i-particle, predicted by the caller
  const double* iVel;
  const std::uint32_t* iKey;
  std::uint32_t numI;
  std::uint32_t numTiles;
  std::uint32_t tilesPerSplit;
  float eps2;
  HermiteSums* out;  ///< numSplits == 1: the results; else the partial sums, [split * numI + i]
};

/// Takes `other` when it is nearer, or as near and at a lower slot: the lowest slot of equal distances wins, the
/// rule of the CPU twin's in-order scan.
__device__ __forceinline__ void keepNearer(float& nearest2, std::uint32_t& slot, float other2, std::uint32_t other) {
  if (other2 < nearest2 || (other2 == nearest2 && other < slot)) {
    nearest2 = other2;
    slot = other;
  }
}

/// kQ threads per i-particle (consecutive lanes), kThreads / kQ i-particles per block; blockIdx.y is the split of the
/// j-range. Every thread stages one slot per tile and takes part in every barrier; only the store is guarded.
template <int kQ, bool kNearest>
__global__ void __launch_bounds__(kThreads) hermiteForceKernel(ForceArgs args) {
  static_assert(kThreads % kQ == 0 && 32 % kQ == 0, "the threads of an i-particle share a warp");
  constexpr int kIPerBlock = kThreads / kQ;
  // Slots of one tile per partial sum: each thread takes every kQ-th, so kPartialSumTerms of its own.
  constexpr int kSubTile = kPartialSumTerms * kQ < kThreads ? kPartialSumTerms * kQ : kThreads;
  __shared__ float4 sharedHi[kThreads], sharedLo[kThreads], sharedVel[kThreads];

  const int lane = threadIdx.x % kQ;
  const std::uint32_t i = blockIdx.x * kIPerBlock + threadIdx.x / kQ;
  const bool active = i < args.numI;
  const std::uint32_t iRead = active ? i : 0;  // idle threads compute a copy of i-particle 0 and store nothing
  float xiHi[3], xiLo[3], vi[3];
#pragma unroll
  for (int d = 0; d < 3; ++d) {
    const double x = args.iPos[3 * iRead + d];
    xiHi[d] = static_cast<float>(x);
    xiLo[d] = static_cast<float>(x - static_cast<double>(xiHi[d]));
    vi[d] = static_cast<float>(args.iVel[3 * iRead + d]);
  }
  const std::uint32_t keyI = args.iKey[iRead];
  const float eps2 = args.eps2;

  double total[7] = {0, 0, 0, 0, 0, 0, 0};
  float nearest2 = __int_as_float(0x7f800000);  // +inf
  std::uint32_t nearestSlot = kNoSlot;
  const std::uint32_t firstTile = blockIdx.y * args.tilesPerSplit;
  const std::uint32_t lastTile = min(firstTile + args.tilesPerSplit, args.numTiles);
  for (std::uint32_t tile = firstTile; tile < lastTile; ++tile) {
    const std::uint32_t base = tile * kThreads;
    __syncthreads();  // the previous tile is read by everyone
    sharedHi[threadIdx.x] = args.posHi[base + threadIdx.x];
    sharedLo[threadIdx.x] = args.posLo[base + threadIdx.x];
    sharedVel[threadIdx.x] = args.vel[base + threadIdx.x];
    __syncthreads();
#pragma unroll
    for (int sub = 0; sub < kThreads; sub += kSubTile) {
      float part[7] = {0, 0, 0, 0, 0, 0, 0};
#pragma unroll 4
      for (int k = sub + lane; k < sub + kSubTile; k += kQ) {
        const float4 hi = sharedHi[k], lo = sharedLo[k], v = sharedVel[k];
        // Double-single difference: the hi parts of a close pair subtract exactly, the lo parts carry the rest.
        const float dx = (hi.x - xiHi[0]) + (lo.x - xiLo[0]);
        const float dy = (hi.y - xiHi[1]) + (lo.y - xiLo[1]);
        const float dz = (hi.z - xiHi[2]) + (lo.z - xiLo[2]);
        const bool self = __float_as_uint(lo.w) == keyI;  // the i-particle's own j-copy: mass 0, nobody's neighbour
        const float r2 =
            accumulateJerkPairInteraction<float>(dx, dy, dz, v.x - vi[0], v.y - vi[1], v.z - vi[2], self ? 0.0f : hi.w,
                                                 eps2, part[0], part[1], part[2], part[3], part[4], part[5], part[6]);
        if constexpr (kNearest) {
          if (!self && r2 < nearest2) {  // slots in increasing order: strictly nearer keeps the lowest slot
            nearest2 = r2;
            nearestSlot = base + k;
          }
        }
      }
#pragma unroll
      for (int c = 0; c < 7; ++c) total[c] += static_cast<double>(part[c]);
    }
  }
  if constexpr (kQ > 1) {
#pragma unroll
    for (int offset = kQ / 2; offset > 0; offset /= 2) {
#pragma unroll
      for (int c = 0; c < 7; ++c) total[c] += __shfl_xor_sync(0xffffffffu, total[c], offset);
      if constexpr (kNearest) {
        const float other2 = __shfl_xor_sync(0xffffffffu, nearest2, offset);
        const std::uint32_t other = __shfl_xor_sync(0xffffffffu, nearestSlot, offset);
        keepNearer(nearest2, nearestSlot, other2, other);
      }
    }
  }
  if (active && lane == 0) {
    HermiteSums sums;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      sums.acc[d] = total[d];
      sums.jerk[d] = total[3 + d];
    }
    sums.pot = total[6];
    sums.nearest2 = nearest2;
    sums.nearestSlot = nearestSlot;
    args.out[std::size_t(blockIdx.y) * args.numI + i] = sums;
  }
}

/// Adds the splits' partial sums of each i-particle in split order (so in j order), nearest neighbours likewise.
__global__ void combineHermiteSplitsKernel(const HermiteSums* partial, std::uint32_t numSplits, std::uint32_t numI,
                                           HermiteSums* out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= numI) return;
  HermiteSums sums = partial[i];
  for (std::uint32_t s = 1; s < numSplits; ++s) {
    const HermiteSums p = partial[std::size_t(s) * numI + i];
#pragma unroll
    for (int d = 0; d < 3; ++d) {
      sums.acc[d] += p.acc[d];
      sums.jerk[d] += p.jerk[d];
    }
    sums.pot += p.pot;
    keepNearer(sums.nearest2, sums.nearestSlot, p.nearest2, p.nearestSlot);
  }
  out[i] = sums;
}

/// Writes the collected slots into the j-memory (the host made the addresses distinct).
__global__ void scatterSlotsKernel(const JParticle* staged, const std::uint32_t* addresses, const std::uint32_t* keys,
                                   std::uint32_t count, JParticle* slots, std::uint32_t* slotKeys) {
  const std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= count) return;
  slots[addresses[k]] = staged[k];
  slotKeys[addresses[k]] = keys[k];
}

/// Predicts slots [0, numJ) to `time` in double and writes them as the force kernel reads them; [numJ, numPadded)
/// become pads.
__global__ void predictSlotsKernel(const JParticle* slots, const std::uint32_t* slotKeys, std::uint32_t numJ,
                                   std::uint32_t numPadded, double time, float4* posHi, float4* posLo, float4* vel) {
  const std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= numPadded) return;
  if (k >= numJ) {
    posHi[k] = make_float4(kPadCoordinate, kPadCoordinate, kPadCoordinate, 0.0f);
    posLo[k] = make_float4(0.0f, 0.0f, 0.0f, __uint_as_float(kPadKey));
    vel[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return;
  }
  const JParticle& p = slots[k];
  const double dt = time - p.time;
  float hi[3], lo[3], v[3];
#pragma unroll
  for (int d = 0; d < 3; ++d) {
    double x = 0.0, u = 0.0;
    predictCoordinate(dt, p.pos[d], p.vel[d], p.acc[d], p.jerk[d], p.snap[d], x, u);
    hi[d] = static_cast<float>(x);
    lo[d] = static_cast<float>(x - static_cast<double>(hi[d]));
    v[d] = static_cast<float>(u);
  }
  posHi[k] = make_float4(hi[0], hi[1], hi[2], static_cast<float>(p.mass));
  posLo[k] = make_float4(lo[0], lo[1], lo[2], __uint_as_float(slotKeys[k]));
  vel[k] = make_float4(v[0], v[1], v[2], 0.0f);
}

using ForceKernel = void (*)(ForceArgs);

ForceKernel forceKernel(std::uint32_t threadsPerI, bool nearest) {
  if (threadsPerI == 4) return nearest ? hermiteForceKernel<4, true> : hermiteForceKernel<4, false>;
  return nearest ? hermiteForceKernel<1, true> : hermiteForceKernel<1, false>;
}

std::size_t paddedSlots(std::size_t numJ) { return (numJ + kThreads - 1) / kThreads * kThreads; }

}  // namespace

std::unique_ptr<HermiteEngine> makeHermiteCudaEngineImpl(int device) {
  HermiteCudaConfig config;
  config.device = device;
  return std::make_unique<HermiteCudaEngine>(config);
}

}  // namespace detail

using detail::DeviceBuffer;
using detail::HermiteSums;
using detail::PinnedBuffer;

struct HermiteCudaEngine::Impl {
  explicit Impl(const HermiteCudaConfig& c) : config(c) {
    if (config.threadsPerI != 0 && config.threadsPerI != 1 && config.threadsPerI != 4) {
      throw InputError("HermiteCudaConfig::threadsPerI must be 0 (automatic), 1 or 4, not " +
                       std::to_string(config.threadsPerI));
    }
    selectDevice();
    cudaDeviceProp props{};
    MATCHA_CUDA_CHECK(cudaGetDeviceProperties(&props, config.device));
    numSMs = props.multiProcessorCount;
    deviceName = props.name;
  }

  void selectDevice() const { MATCHA_CUDA_CHECK(cudaSetDevice(config.device)); }

  int blocksPerSM(detail::ForceKernel kernel) {
    for (const auto& [known, blocks] : occupancy) {
      if (known == kernel) return blocks;
    }
    int blocks = 0;
    MATCHA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, detail::kThreads, 0));
    occupancy.emplace_back(kernel, std::max(blocks, 1));
    return occupancy.back().second;
  }

  void check(const char* kernelName) { MATCHA_CUDA_CHECK_LAUNCH(kernelName, config.synchronizeAfterLaunch); }

  /// The 32-bit key of an id: assigned on first sight, kept for the engine's life, so that a slot's key and an
  /// i-particle's key are equal exactly when their ids are.
  std::uint32_t keyOf(std::int64_t id) {
    const auto [found, inserted] = keys.try_emplace(id, static_cast<std::uint32_t>(keys.size()));
    if (inserted && keys.size() >= detail::kPadKey) {
      keys.erase(found);
      throw InputError("the CUDA Hermite engine tells at most 2^32 - 2 distinct particle ids apart");
    }
    return found->second;
  }

  HermiteCudaConfig config;
  int numSMs = 0;
  std::string deviceName;
  detail::CudaStream stream;
  detail::CudaEvent uploaded, kernelsStart, kernelsStop, done;
  std::vector<std::pair<detail::ForceKernel, int>> occupancy;

  // j-memory on the device: capacity() slots (`allocated` >= capacity of them allocated).
  std::size_t capacity = 0, allocated = 0;
  DeviceBuffer<JParticle> slots;
  DeviceBuffer<std::uint32_t> slotKeys;
  DeviceBuffer<float4> posHi, posLo, vel;  // predicted, padded to whole tiles

  // Slots set since the last predict, one entry per address (stagedIndex[address] points at it, or kNoSlot).
  std::vector<JParticle> stagedParticles;
  std::vector<std::uint32_t> stagedAddresses, stagedKeys, stagedIndex;
  PinnedBuffer<JParticle> pinnedParticles;
  PinnedBuffer<std::uint32_t> pinnedAddresses, pinnedKeys;
  DeviceBuffer<JParticle> deviceStaged;
  DeviceBuffer<std::uint32_t> deviceAddresses, deviceKeys;
  bool uploadInFlight = false;

  std::unordered_map<std::int64_t, std::uint32_t> keys;
  std::vector<std::int64_t> slotIds;       ///< capacity entries: the id last set in each slot
  std::vector<std::int64_t> predictedIds;  ///< the ids of slots [0, numPredicted) at the last predict
  std::size_t numPredicted = 0;

  // The force call in flight.
  PinnedBuffer<double> hostIPos, hostIVel;
  PinnedBuffer<std::uint32_t> hostIKeys;
  PinnedBuffer<HermiteSums> hostSums;
  DeviceBuffer<double> deviceIPos, deviceIVel;
  DeviceBuffer<std::uint32_t> deviceIKeys;
  DeviceBuffer<HermiteSums> partial, sums;
  bool launched = false;
  bool kernelsRan = false;
  HermiteForceView pending;
  HermiteCudaCallStats pendingStats, stats;
};

HermiteCudaEngine::HermiteCudaEngine(const HermiteCudaConfig& config) : impl_(std::make_unique<Impl>(config)) {}

HermiteCudaEngine::~HermiteCudaEngine() = default;

std::string HermiteCudaEngine::name() const {
  return "cuda-hermite (" + impl_->deviceName + ", float pairs on double-single coordinates, double sums)";
}

std::size_t HermiteCudaEngine::capacity() const { return impl_->capacity; }

const HermiteCudaCallStats& HermiteCudaEngine::lastCallStats() const { return impl_->stats; }

void HermiteCudaEngine::reserve(std::size_t capacity) {
  Impl& m = *impl_;
  detail::checkHermiteCapacity(capacity);
  m.selectDevice();
  if (capacity > m.allocated) {
    // Slots, keys and the predicted copy (padded), with the 1/8 slack DeviceBuffer adds; refuse up front rather than
    // fail in the middle of the copies.
    const std::size_t grown = capacity + capacity / 8;
    const double bytes =
        double(grown) * (sizeof(JParticle) + sizeof(std::uint32_t)) + 3.0 * 16.0 * double(detail::paddedSlots(grown));
    std::size_t freeBytes = 0, totalBytes = 0;
    MATCHA_CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    if (bytes > 0.9 * double(freeBytes)) {
      char text[200];
      std::snprintf(text, sizeof text, "a Hermite j-memory of %zu slots needs %.0f MiB on the GPU; %.0f MiB are free",
                    capacity, bytes / (1 << 20), double(freeBytes) / (1 << 20));
      throw InputError(text);
    }
    m.stream.synchronize();  // nothing may still read the old buffers
    DeviceBuffer<JParticle> slots;
    DeviceBuffer<std::uint32_t> keys;
    slots.reserve(grown);
    keys.reserve(grown);
    if (m.capacity > 0) {
      MATCHA_CUDA_CHECK(
          cudaMemcpy(slots.data(), m.slots.data(), m.capacity * sizeof(JParticle), cudaMemcpyDeviceToDevice));
      MATCHA_CUDA_CHECK(
          cudaMemcpy(keys.data(), m.slotKeys.data(), m.capacity * sizeof(std::uint32_t), cudaMemcpyDeviceToDevice));
    }
    m.slots = std::move(slots);
    m.slotKeys = std::move(keys);
    m.allocated = grown;
  }
  if (capacity > m.capacity) {
    // New slots hold what a default JParticle holds (mass 0 at the origin, id 0), as on the CPU twin, also where a
    // shrink left older particles in the memory.
    m.stream.synchronize();
    const std::size_t added = capacity - m.capacity;
    MATCHA_CUDA_CHECK(cudaMemset(m.slots.data() + m.capacity, 0, added * sizeof(JParticle)));
    const std::vector<std::uint32_t> defaultKeys(added, m.keyOf(JParticle{}.id));
    MATCHA_CUDA_CHECK(cudaMemcpy(m.slotKeys.data() + m.capacity, defaultKeys.data(), added * sizeof(std::uint32_t),
                                 cudaMemcpyHostToDevice));
  }
  // Shrinking keeps the memory; the slots beyond the new size are forgotten, staged writes to them dropped.
  if (capacity < m.capacity) {
    std::size_t kept = 0;
    for (std::size_t k = 0; k < m.stagedAddresses.size(); ++k) {
      if (m.stagedAddresses[k] >= capacity) continue;
      m.stagedParticles[kept] = m.stagedParticles[k];
      m.stagedAddresses[kept] = m.stagedAddresses[k];
      m.stagedKeys[kept] = m.stagedKeys[k];
      m.stagedIndex[m.stagedAddresses[kept]] = static_cast<std::uint32_t>(kept);
      ++kept;
    }
    m.stagedParticles.resize(kept);
    m.stagedAddresses.resize(kept);
    m.stagedKeys.resize(kept);
    m.numPredicted = std::min(m.numPredicted, capacity);
    m.predictedIds.resize(m.numPredicted);
  }
  m.slotIds.resize(capacity, 0);
  m.stagedIndex.resize(capacity, detail::kNoSlot);
  m.capacity = capacity;
}

void HermiteCudaEngine::setJParticles(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles) {
  Impl& m = *impl_;
  detail::checkHermiteSlots(addresses, particles, m.capacity);
  for (std::size_t k = 0; k < addresses.size(); ++k) {
    const std::uint32_t address = addresses[k];
    const std::uint32_t key = m.keyOf(particles[k].id);
    m.slotIds[address] = particles[k].id;
    std::uint32_t& index = m.stagedIndex[address];
    if (index == detail::kNoSlot) {
      index = static_cast<std::uint32_t>(m.stagedAddresses.size());
      m.stagedParticles.push_back(particles[k]);
      m.stagedAddresses.push_back(address);
      m.stagedKeys.push_back(key);
    } else {
      m.stagedParticles[index] = particles[k];  // the last write to a slot wins, as on the CPU
      m.stagedKeys[index] = key;
    }
  }
}

void HermiteCudaEngine::predict(double time, std::size_t numJ) {
  Impl& m = *impl_;
  detail::checkHermitePrediction(time, numJ, m.capacity);
  m.selectDevice();
  cudaStream_t stream = m.stream.get();
  const std::size_t numStaged = m.stagedAddresses.size();
  if (numStaged > 0) {
    if (m.uploadInFlight) m.uploaded.synchronize();  // the pinned buffers of the last upload are free again
    m.pinnedParticles.reserve(numStaged);
    m.pinnedAddresses.reserve(numStaged);
    m.pinnedKeys.reserve(numStaged);
    std::memcpy(m.pinnedParticles.data(), m.stagedParticles.data(), numStaged * sizeof(JParticle));
    std::memcpy(m.pinnedAddresses.data(), m.stagedAddresses.data(), numStaged * sizeof(std::uint32_t));
    std::memcpy(m.pinnedKeys.data(), m.stagedKeys.data(), numStaged * sizeof(std::uint32_t));
    m.deviceStaged.reserve(numStaged);
    m.deviceAddresses.reserve(numStaged);
    m.deviceKeys.reserve(numStaged);
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(m.deviceStaged.data(), m.pinnedParticles.data(), numStaged * sizeof(JParticle),
                                      cudaMemcpyHostToDevice, stream));
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(m.deviceAddresses.data(), m.pinnedAddresses.data(),
                                      numStaged * sizeof(std::uint32_t), cudaMemcpyHostToDevice, stream));
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(m.deviceKeys.data(), m.pinnedKeys.data(), numStaged * sizeof(std::uint32_t),
                                      cudaMemcpyHostToDevice, stream));
    m.uploaded.record(stream);
    m.uploadInFlight = true;
    const auto blocks = static_cast<unsigned>((numStaged + 255) / 256);
    detail::scatterSlotsKernel<<<blocks, 256, 0, stream>>>(m.deviceStaged.data(), m.deviceAddresses.data(),
                                                           m.deviceKeys.data(), static_cast<std::uint32_t>(numStaged),
                                                           m.slots.data(), m.slotKeys.data());
    m.check("scatterSlotsKernel");
    for (const std::uint32_t address : m.stagedAddresses) m.stagedIndex[address] = detail::kNoSlot;
    m.stagedParticles.clear();
    m.stagedAddresses.clear();
    m.stagedKeys.clear();
  }
  const std::size_t padded = detail::paddedSlots(numJ);
  if (padded > 0) {
    m.posHi.reserve(padded);
    m.posLo.reserve(padded);
    m.vel.reserve(padded);
    const auto blocks = static_cast<unsigned>((padded + 255) / 256);
    detail::predictSlotsKernel<<<blocks, 256, 0, stream>>>(
        m.slots.data(), m.slotKeys.data(), static_cast<std::uint32_t>(numJ), static_cast<std::uint32_t>(padded), time,
        m.posHi.data(), m.posLo.data(), m.vel.data());
    m.check("predictSlotsKernel");
  }
  m.predictedIds.assign(m.slotIds.begin(), m.slotIds.begin() + static_cast<std::ptrdiff_t>(numJ));
  m.numPredicted = numJ;
}

void HermiteCudaEngine::launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) {
  Impl& m = *impl_;
  detail::checkHermiteLaunch(block, eps2, out, m.launched);
  const std::size_t numI = block.count;
  m.pending = out;
  m.pendingStats = HermiteCudaCallStats{};
  m.kernelsRan = false;
  if (numI == 0 || m.numPredicted == 0) {  // nothing to sum: finishForces writes the empty sums
    m.launched = true;
    return;
  }
  m.selectDevice();
  cudaStream_t stream = m.stream.get();
  m.hostIPos.reserve(3 * numI);
  m.hostIVel.reserve(3 * numI);
  m.hostIKeys.reserve(numI);
  std::memcpy(m.hostIPos.data(), block.pos, 3 * numI * sizeof(double));
  if (block.vel != nullptr) {
    std::memcpy(m.hostIVel.data(), block.vel, 3 * numI * sizeof(double));
  } else {
    std::fill(m.hostIVel.data(), m.hostIVel.data() + 3 * numI, 0.0);
  }
  for (std::size_t i = 0; i < numI; ++i) {
    std::uint32_t key = detail::kNoKey;
    if (block.id != nullptr) {
      const auto found = m.keys.find(block.id[i]);
      if (found != m.keys.end()) key = found->second;
    }
    m.hostIKeys[i] = key;
  }
  m.deviceIPos.reserve(3 * numI);
  m.deviceIVel.reserve(3 * numI);
  m.deviceIKeys.reserve(numI);
  MATCHA_CUDA_CHECK(cudaMemcpyAsync(m.deviceIPos.data(), m.hostIPos.data(), 3 * numI * sizeof(double),
                                    cudaMemcpyHostToDevice, stream));
  MATCHA_CUDA_CHECK(cudaMemcpyAsync(m.deviceIVel.data(), m.hostIVel.data(), 3 * numI * sizeof(double),
                                    cudaMemcpyHostToDevice, stream));
  MATCHA_CUDA_CHECK(cudaMemcpyAsync(m.deviceIKeys.data(), m.hostIKeys.data(), numI * sizeof(std::uint32_t),
                                    cudaMemcpyHostToDevice, stream));

  // The shape: 4 threads per i-particle while the i-blocks of 1 would not give every SM a block, then enough splits
  // of the j-range that the grid fills every SM twice over (kirin §3.2), each split at least one tile.
  const auto numTiles = static_cast<std::uint32_t>(detail::paddedSlots(m.numPredicted) / detail::kThreads);
  const std::uint32_t threadsPerI =
      m.config.threadsPerI != 0 ? m.config.threadsPerI
                                : ((numI + detail::kThreads - 1) / detail::kThreads < std::size_t(m.numSMs) ? 4u : 1u);
  const bool nearest = out.nearestId != nullptr || out.nearestDistance2 != nullptr;
  const detail::ForceKernel kernel = detail::forceKernel(threadsPerI, nearest);
  const std::size_t iPerBlock = detail::kThreads / threadsPerI;
  const auto iBlocks = static_cast<std::uint32_t>((numI + iPerBlock - 1) / iPerBlock);
  std::uint32_t splits = m.config.numSplits;
  if (splits == 0) {
    const double wanted = 2.0 * m.numSMs * m.blocksPerSM(kernel) / iBlocks;
    splits = static_cast<std::uint32_t>(std::clamp(std::ceil(wanted), 1.0, 65535.0));
  }
  splits = std::min(splits, numTiles);
  const std::uint32_t tilesPerSplit = (numTiles + splits - 1) / splits;
  splits = (numTiles + tilesPerSplit - 1) / tilesPerSplit;

  m.sums.reserve(numI);
  if (splits > 1) m.partial.reserve(std::size_t(splits) * numI);
  HermiteSums* const target = splits > 1 ? m.partial.data() : m.sums.data();
  if (m.config.poisonDeviceOutputs) {
    MATCHA_CUDA_CHECK(cudaMemsetAsync(m.sums.data(), 0xFF, numI * sizeof(HermiteSums), stream));
    if (splits > 1) {
      MATCHA_CUDA_CHECK(
          cudaMemsetAsync(m.partial.data(), 0xFF, std::size_t(splits) * numI * sizeof(HermiteSums), stream));
    }
  }
  detail::ForceArgs args{};
  args.posHi = m.posHi.data();
  args.posLo = m.posLo.data();
  args.vel = m.vel.data();
  args.iPos = m.deviceIPos.data();
  args.iVel = m.deviceIVel.data();
  args.iKey = m.deviceIKeys.data();
  args.numI = static_cast<std::uint32_t>(numI);
  args.numTiles = numTiles;
  args.tilesPerSplit = tilesPerSplit;
  args.eps2 = static_cast<float>(eps2);
  args.out = target;
  m.kernelsStart.record(stream);
  kernel<<<dim3(iBlocks, splits), detail::kThreads, 0, stream>>>(args);
  m.check("hermiteForceKernel");
  if (splits > 1) {
    detail::combineHermiteSplitsKernel<<<(args.numI + 255) / 256, 256, 0, stream>>>(m.partial.data(), splits, args.numI,
                                                                                    m.sums.data());
    m.check("combineHermiteSplitsKernel");
  }
  m.kernelsStop.record(stream);
  m.hostSums.reserve(numI);
  MATCHA_CUDA_CHECK(
      cudaMemcpyAsync(m.hostSums.data(), m.sums.data(), numI * sizeof(HermiteSums), cudaMemcpyDeviceToHost, stream));
  m.done.record(stream);
  m.kernelsRan = true;
  m.launched = true;
  m.pendingStats.numSplits = splits;
  m.pendingStats.threadsPerI = threadsPerI;
  m.pendingStats.interactions = std::uint64_t(numI) * m.numPredicted;
}

void HermiteCudaEngine::finishForces() {
  Impl& m = *impl_;
  if (!m.launched) throw InputError("finishForces without a launchForces");
  m.launched = false;
  const HermiteForceView& out = m.pending;
  if (!m.kernelsRan) {
    for (std::size_t i = 0; i < out.count; ++i) {
      for (int d = 0; d < 3; ++d) {
        if (out.acc != nullptr) out.acc[3 * i + d] = 0.0;
        if (out.jerk != nullptr) out.jerk[3 * i + d] = 0.0;
      }
      if (out.pot != nullptr) out.pot[i] = 0.0;
      if (out.nearestId != nullptr) out.nearestId[i] = -1;
      if (out.nearestDistance2 != nullptr) out.nearestDistance2[i] = std::numeric_limits<double>::infinity();
    }
    m.stats = m.pendingStats;
    return;
  }
  m.selectDevice();
  m.done.synchronize();
  m.pendingStats.kernelMilliseconds = m.kernelsStop.millisecondsSince(m.kernelsStart);
  for (std::size_t i = 0; i < out.count; ++i) {
    const HermiteSums& s = m.hostSums[i];
    for (int d = 0; d < 3; ++d) {
      if (out.acc != nullptr) out.acc[3 * i + d] = s.acc[d];
      if (out.jerk != nullptr) out.jerk[3 * i + d] = s.jerk[d];
    }
    if (out.pot != nullptr) out.pot[i] = s.pot;
    // A pad (or nothing) found nearest means no slot was: report none.
    const bool found = s.nearestSlot < m.numPredicted;
    if (out.nearestId != nullptr) out.nearestId[i] = found ? m.predictedIds[s.nearestSlot] : -1;
    if (out.nearestDistance2 != nullptr) {
      out.nearestDistance2[i] = found ? double(s.nearest2) : std::numeric_limits<double>::infinity();
    }
  }
  m.stats = m.pendingStats;
}

}  // namespace matcha::gpu
