// SPDX-License-Identifier: MIT
// The CUDA engine: device buffers, uploads, task lists, launches and downloads around the kernels of
// nbody_kernels.cuh. The CpuEngine (gpu/src/cpu_engine.cpp) is its twin and its test oracle.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_check.cuh"
#include "device_memory.cuh"
#include "kernel_variants.cuh"
#include "key_sort.cuh"
#include "matcha/core/errors.hpp"
#include "matcha/gpu/cuda_engine.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"
#include "matcha/gpu/detail/host_copy.hpp"
#include "resident_kernels.cuh"
#include "staged_copy.cuh"
#include "tree_prediction.cuh"

namespace matcha::gpu {

// ---------------------------------------------------------------------------------------------------------------
// Errors

namespace detail {

void throwCudaError(cudaError_t status, const char* expression, const char* file, int line) {
  cudaGetLastError();  // reset a non-sticky error so that it does not resurface in the next check
  char text[512];
  std::snprintf(text, sizeof text, "CUDA error: %s failed at %s:%d: %s (%s)", expression, file, line,
                cudaGetErrorString(status), cudaGetErrorName(status));
  throw CudaError(text);
}

void checkLaunch(const char* kernelName, bool synchronize, const char* file, int line) {
  const cudaError_t launchStatus = cudaGetLastError();
  if (launchStatus != cudaSuccess) {
    throwCudaError(launchStatus, (std::string("launch of ") + kernelName).c_str(), file, line);
  }
  if (synchronize) {
    const cudaError_t runStatus = cudaDeviceSynchronize();
    if (runStatus != cudaSuccess) throwCudaError(runStatus, (std::string("run of ") + kernelName).c_str(), file, line);
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------------------------
// Configuration

std::string CudaDirectConfig::label() const {
  char text[64];
  std::snprintf(text, sizeof text, "T%u/I%u/q%u/p%u", threadsPerBlock, bodiesPerThread, threadsPerBody, tileSize);
  return text;
}

bool CudaDirectConfig::sameShape(const CudaDirectConfig& other) const {
  return threadsPerBlock == other.threadsPerBlock && bodiesPerThread == other.bodiesPerThread &&
         threadsPerBody == other.threadsPerBody && tileSize == other.tileSize;
}

namespace {

using detail::DeviceBuffer;
using detail::PinnedBuffer;

template <class Real>
std::vector<CudaDirectConfig> directConfigsOf() {
  std::vector<CudaDirectConfig> configs;
  for (const auto& variant : detail::directVariants<Real>()) {
    if (!variant.potential) continue;  // every shape is also compiled without the potential
    CudaDirectConfig config;
    config.threadsPerBlock = static_cast<std::uint32_t>(variant.threads);
    config.bodiesPerThread = static_cast<std::uint32_t>(variant.bodiesPerThread);
    config.threadsPerBody = static_cast<std::uint32_t>(variant.threadsPerBody);
    config.tileSize = static_cast<std::uint32_t>(variant.tile);
    config.numSplits = 0;
    configs.push_back(config);
  }
  return configs;
}

template <class Real>
std::vector<std::uint32_t> planTileSizesOf() {
  std::vector<std::uint32_t> sizes;
  for (const auto& variant : detail::planVariants<Real>()) {
    const auto tile = static_cast<std::uint32_t>(variant.tile);
    if (std::find(sizes.begin(), sizes.end(), tile) == sizes.end()) sizes.push_back(tile);
  }
  return sizes;
}

/// The compiled kernel of this shape; `potential` false: the one that leaves the potential out.
template <class Real>
const detail::DirectVariant<Real>* findDirectVariant(const CudaDirectConfig& config, bool potential = true) {
  for (const auto& variant : detail::directVariants<Real>()) {
    if (variant.potential == potential && std::uint32_t(variant.threads) == config.threadsPerBlock &&
        std::uint32_t(variant.bodiesPerThread) == config.bodiesPerThread &&
        std::uint32_t(variant.threadsPerBody) == config.threadsPerBody &&
        std::uint32_t(variant.tile) == config.tileSize) {
      return &variant;
    }
  }
  return nullptr;
}

template <class Real>
const detail::PlanVariant<Real>* findPlanVariant(std::uint32_t tile, bool quadrupole, bool accurate = false,
                                                 bool potential = true, bool periodic = false) {
  for (const auto& variant : detail::planVariants<Real>()) {
    if (std::uint32_t(variant.tile) == tile && variant.quadrupole == quadrupole && variant.accurate == accurate &&
        variant.potential == potential && variant.periodic == periodic) {
      return &variant;
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------------------
// Splitting groups into warp tasks

/// Cost model of one warp task per list entry, in issue slots: staging the entry (index, 4 loads, 3 subtractions in
/// double, 4 conversions, one shared store) plus ~16 per pair interaction for each row the task's kind provides,
/// used or not. Chooses, for a group of n bodies, the chunks that minimise the summed cost: one kind whose rows
/// cover n, or several smaller chunks (each streams the whole list again).
///
/// The staging is charged 80, twice its ~40 instructions: a further chunk also costs its task's fixed work (the
/// group's centre and list descriptor, the near-source radius, the flushes and the reduction over lanes) and, for the
/// kinds of 1 body per thread, one shared load per pair. Measured against 40 (Plummer 2^20, theta 0.5, p64, H200, two
/// calls, ms a launch with / without the potential): monopole ncrit 64 3.15 / 2.95 -> 3.08 / 2.87, ncrit 256 3.20 /
/// 3.03 -> 3.17-3.18 / 3.01 (69.8 -> 70.2-70.3% of the FP32 floor), ncrit 1024 unchanged; quadrupole ncrit 64 7.35 /
/// 7.08 -> 7.22 / 6.96, ncrit 256 unchanged, ncrit 1024 9.39-9.45 / 9.08-9.11 -> 9.50-9.53 / 9.09-9.14. 20 and 160
/// were worse, 120 and a pair cost that grows as bodies per thread fall (15 + 2 / bodies) about the same as 80.
constexpr double kStageCost = 80.0;
constexpr double kPairCost = 16.5;
/// A quadrupole cell costs about this many point-mass list entries (staging 10 values, ~35 instructions per pair).
constexpr double kQuadrupoleEntryWeight = 2.2;

double taskCostPerEntry(int kind) { return kStageCost + kPairCost * detail::kPlanTaskKinds[kind].rows(); }

/// best[n]: the first chunk's kind of the cheapest decomposition of n bodies (n <= kMaxDecomposed).
constexpr std::uint32_t kMaxDecomposed = 256;

/// Groups a core takes at a time when a launch builds the warp tasks of a subset of the groups (launchResident).
constexpr std::size_t kSubsetGroupsPerChunk = 256;

struct ChunkTable {
  std::array<int, kMaxDecomposed + 1> firstKind{};

  explicit ChunkTable(int firstAllowedKind) {
    std::array<double, kMaxDecomposed + 1> cost{};
    cost[0] = 0.0;
    for (std::uint32_t n = 1; n <= kMaxDecomposed; ++n) {
      cost[n] = std::numeric_limits<double>::infinity();
      for (int kind = firstAllowedKind; kind < detail::kNumPlanTaskKinds; ++kind) {
        const auto rows = static_cast<std::uint32_t>(detail::kPlanTaskKinds[kind].rows());
        const double c = taskCostPerEntry(kind) + cost[n > rows ? n - rows : 0];
        if (c < cost[n]) {
          cost[n] = c;
          firstKind[n] = kind;
        }
      }
    }
  }
};

/// The cheapest cuts for plans whose tasks start at kind 0 and at kind 1 (detail::firstPlanTaskKind).
const ChunkTable& chunkTable(int firstKind) {
  static const ChunkTable tables[2] = {ChunkTable(0), ChunkTable(1)};
  return tables[firstKind];
}

/// Calls emit(firstBody, rows, kind) for each warp task of a group evaluated by a plan kernel in Real: the cheapest cut
/// of its bodies into the task kinds that kernel runs (ChunkTable), the largest kind repeated for groups beyond
/// kMaxDecomposed bodies.
template <class Real, class Emit>
void forEachWarpTask(BodyRange group, Emit&& emit) {
  const int largestKind = detail::firstPlanTaskKind<Real>();
  const ChunkTable& table = chunkTable(largestKind);
  const auto largestRows = static_cast<std::uint32_t>(detail::kPlanTaskKinds[largestKind].rows());
  std::uint32_t first = group.first;
  std::uint32_t remaining = group.size();
  while (remaining > kMaxDecomposed) {
    emit(first, largestRows, largestKind);
    first += largestRows;
    remaining -= largestRows;
  }
  while (remaining > 0) {
    const int kind = table.firstKind[remaining];
    const std::uint32_t rows = std::min<std::uint32_t>(remaining, detail::kPlanTaskKinds[kind].rows());
    emit(first, rows, kind);
    first += rows;
    remaining -= rows;
  }
}

/// Task kinds 0 .. kOneThreadPerBodyKinds - 1 give each row a thread of its own (128, 64 and 32 rows): each body's
/// sum runs over the same tiles in the same order in any of them, so they give the same sums: bit for bit with
/// monopole cells, to float rounding with quadrupole cells (their loops are unrolled differently, and the compiler
/// fuses the quadrupole terms' products differently: relative 1e-7 at most on the H200).
constexpr int kOneThreadPerBodyKinds = 3;
static_assert(detail::kPlanTaskKinds[kOneThreadPerBodyKinds - 1].threadsPerBody == 1 &&
                  detail::kPlanTaskKinds[kOneThreadPerBodyKinds].threadsPerBody > 1,
              "the kinds of one thread per body come first");

/// Whether forEachBalancedWarpTask cuts a task of `kind` over a list of `entries` (listEntries) at `longest`.
bool cutsTask(int kind, double entries, double longest) {
  return kind < kOneThreadPerBodyKinds - 1 && entries * taskCostPerEntry(kind) > longest;
}

/// forEachWarpTask, with every task of one thread per body whose cost (entries x taskCostPerEntry) exceeds `longest`
/// cut into tasks of 64 or 32 rows. The groups with the longest lists (the densest places, and the relative test's
/// smallest tolerances) hold tasks as long as a warp's share of the whole launch: started first (longest first) they
/// still ran alone at the end. At 2^20 with reused lists (Plummer, theta 1.0, ncrit 1024, nleaf 16, alpha 2e-3,
/// reuse 3) a step's kernels took 13.6 ms on the H200 before the cut and 8.9 after; at 2^22 and beyond a warp's share
/// is larger than any task, and nothing is cut.
template <class Real, class Emit>
void forEachBalancedWarpTask(BodyRange group, double entries, double longest, Emit&& emit) {
  forEachWarpTask<Real>(group, [&](std::uint32_t first, std::uint32_t rows, int kind) {
    int piece = kind;
    while (cutsTask(piece, entries, longest)) ++piece;
    if (piece == kind) {
      emit(first, rows, kind);
      return;
    }
    const auto pieceRows = static_cast<std::uint32_t>(detail::kPlanTaskKinds[piece].rows());
    for (std::uint32_t done = 0; done < rows; done += pieceRows) {
      emit(first + done, std::min(pieceRows, rows - done), piece);
    }
  });
}

/// A group's list in the cost model's units (forEachBalancedWarpTask's `entries`): its j-bodies, and its cells, a
/// quadrupole cell counting kQuadrupoleEntryWeight.
double listEntries(std::uint64_t listBodies, std::uint64_t listCells, bool quadrupole) {
  return double(listBodies) + double(listCells) * (quadrupole ? kQuadrupoleEntryWeight : 1.0);
}

/// Adds a group's uncut tasks' cost to `total`, task by task: a plan's total cost, from which the cut of its long
/// tasks follows (longestTaskCost), is this sum over its groups in order.
template <class Real>
void addGroupCost(double& total, BodyRange group, double entries) {
  forEachWarpTask<Real>(group,
                        [&](std::uint32_t, std::uint32_t, int kind) { total += entries * taskCostPerEntry(kind); });
}

/// Whether forEachBalancedWarpTask cuts any of a group's tasks at `longest`.
template <class Real>
bool cutsAnyTask(BodyRange group, double entries, double longest) {
  bool cut = false;
  forEachWarpTask<Real>(group,
                        [&](std::uint32_t, std::uint32_t, int kind) { cut = cut || cutsTask(kind, entries, longest); });
  return cut;
}

/// j-bodies in group g's list, from its ranges.
std::uint64_t listBodiesOf(const InteractionPlan& plan, std::size_t g, std::size_t numBodies) {
  std::uint64_t count = 0;
  for (std::uint32_t r = plan.bodyListOffsets[g]; r < plan.bodyListOffsets[g + 1]; ++r) {
    const BodyRange range = plan.bodyList[r];
    MATCHA_ASSERT(range.first <= range.last && range.last <= numBodies, "plan body range outside the sources");
    count += range.size();
  }
  return count;
}

/// How evaluatePlanIn takes a plan that is part of a call's batches (CudaEngine::evaluatePlanBatch); the defaults
/// take a whole plan.
struct PlanPart {
  bool uploadBodies = true;  ///< false: the call's sources and cells are on the device already
  /// Per group: evaluate it in this launch (null: every group); the lists of the others go over unused.
  const std::vector<std::uint8_t>* now = nullptr;
  /// Where forEachBalancedWarpTask cuts; NaN: longestTaskCost of the plan's own cost, as for a whole plan.
  double longestTask = std::numeric_limits<double>::quiet_NaN();
  /// A batch of a call in the pipeline of CudaEngine::evaluatePlanBatch: its lists go over on the copy stream into
  /// the next of two sets of list buffers while the kernels of the batch before run, its kernels queue behind them,
  /// and the call returns without waiting; nothing is downloaded (the call's last batch downloads every batch's
  /// groups at once) and the outputs are not poisoned (earlier batches' are in them).
  bool pipelined = false;
};

/// The device and page-locked buffers of one plan's lists and warp tasks. The engine keeps two: a pipelined batch
/// fills one while the kernels of the batch before read the other (PlanPart::pipelined), and launches its kernels on
/// the set's own stream, so that they start on the SMs the batch before's last warp tasks leave idle.
struct PlanListBuffers {
  DeviceBuffer<double> groupCentres;
  DeviceBuffer<uint2> bodyRanges;
  DeviceBuffer<std::uint32_t> bodyRangeOffsets, cellList, expandedBodies, taskCounter;
  DeviceBuffer<uint4> tasks, groupLists;
  PinnedBuffer<uint4> hostGroupLists, hostTasks;
  detail::CudaStream kernels;  ///< a pipelined batch's kernels
  detail::CudaEvent uploaded;  ///< recorded after the lists' copies: the page-locked arrays may be written again
  detail::CudaEvent consumed;  ///< recorded after the kernels that read them: the device arrays may be written again
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// The engine

struct CudaEngine::Impl {
  /// Selects the device before any other member touches the runtime.
  struct DeviceSelection {
    explicit DeviceSelection(int device) {
      int count = 0;
      MATCHA_CUDA_CHECK(cudaGetDeviceCount(&count));
      if (device < 0 || device >= count) {
        char text[128];
        std::snprintf(text, sizeof text, "CUDA error: device %d requested, but %d device(s) present", device, count);
        throw CudaError(text);
      }
      MATCHA_CUDA_CHECK(cudaSetDevice(device));
      // A host thread waiting for the device sleeps instead of spinning: the tree solver builds the next tree on
      // every core while a call waits for its kernels (cudaDeviceScheduleAuto spins when the cores outnumber the
      // contexts). Flags can be set only before the device's context starts; a second engine finds them set.
      const cudaError_t flags = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync);
      if (flags == cudaErrorSetOnActiveProcess) {
        (void)cudaGetLastError();
      } else {
        MATCHA_CUDA_CHECK(flags);
      }
      cudaDeviceProp props{};
      MATCHA_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
      name = props.name;
      numSMs = props.multiProcessorCount;
    }
    std::string name;
    int numSMs = 0;
  };

  Impl(Precision precision_, const CudaKernelConfig& config_)
      : precision(precision_), config(config_), selection(config_.device) {
    validate(config);
  }

  void validate(const CudaKernelConfig& candidate) const {
    const bool isFloat = precision == Precision::float32;
    const bool directOk = isFloat ? findDirectVariant<float>(candidate.direct) != nullptr
                                  : findDirectVariant<double>(candidate.direct) != nullptr;
    if (!candidate.autoDirect && !directOk) {
      std::string list;
      for (const auto& c : CudaEngine::supportedDirectConfigs(precision)) list.append(" ").append(c.label());
      throw InputError("CUDA direct kernel shape " + candidate.direct.label() +
                       " is not compiled in; available:" + list);
    }
    const bool planOk = isFloat ? findPlanVariant<float>(candidate.planTileSize, false) != nullptr
                                : findPlanVariant<double>(candidate.planTileSize, false) != nullptr;
    if (!(candidate.longestTaskShare >= 0.0) || !std::isfinite(candidate.longestTaskShare)) {
      throw InputError("CUDA longestTaskShare must be a finite number >= 0 (got " +
                       std::to_string(candidate.longestTaskShare) + ")");
    }
    if (!planOk) {
      std::string list;
      for (auto tile : CudaEngine::supportedPlanTileSizes(precision)) list.append(" ").append(std::to_string(tile));
      throw InputError("CUDA plan tile size " + std::to_string(candidate.planTileSize) +
                       " is not compiled in; available:" + list);
    }
  }

  /// The cost (taskCostPerEntry units) above which forEachBalancedWarpTask cuts a task: config.longestTaskShare of
  /// one resident warp's share of `totalCost`.
  template <class Variant>
  double longestTaskCost(double totalCost, const Variant& variant) {
    if (!(config.longestTaskShare > 0.0)) return std::numeric_limits<double>::infinity();
    const double warps =
        double(selection.numSMs) * blocksPerSM(variant.kernel, variant.threads) * (variant.threads / 32);
    return config.longestTaskShare * totalCost / std::max(1.0, warps);
  }

  int blocksPerSM(const void* kernel, int threads) {
    auto found = occupancy.find(kernel);
    if (found != occupancy.end()) return found->second;
    int blocks = 0;
    MATCHA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0));
    blocks = std::max(blocks, 1);
    occupancy.emplace(kernel, blocks);
    return blocks;
  }

  void selectDevice() { MATCHA_CUDA_CHECK(cudaSetDevice(config.device)); }

  void uploadSources(const SourceView& sources, bool staged = false, cudaStream_t on = nullptr) {
    const std::size_t n = sources.count;
    for (auto* buffer : {&sourceX, &sourceY, &sourceZ, &sourceMass}) buffer->reserve(n);
    uploadArray(sourceX.data(), sources.x, n, staged, on);
    uploadArray(sourceY.data(), sources.y, n, staged, on);
    uploadArray(sourceZ.data(), sources.z, n, staged, on);
    uploadArray(sourceMass.data(), sources.mass, n, staged, on);
  }

  /// Bodies and cells (with their quadrupoles) to the device; `staged`: through the page-locked staging buffers
  /// (uploadArray), on stream `on` (null: the engine's stream).
  void uploadSourcesAndCells(const SourceView& sources, const CellMultipoles& cells, bool staged = false,
                             cudaStream_t on = nullptr) {
    uploadSources(sources, staged, on);
    const std::size_t numCells = cells.size();
    for (auto* buffer : {&cellX, &cellY, &cellZ, &cellMass}) buffer->reserve(std::max<std::size_t>(numCells, 1));
    uploadArray(cellX.data(), cells.x.data(), numCells, staged, on);
    uploadArray(cellY.data(), cells.y.data(), numCells, staged, on);
    uploadArray(cellZ.data(), cells.z.data(), numCells, staged, on);
    uploadArray(cellMass.data(), cells.mass.data(), numCells, staged, on);
    if (cells.hasQuadrupole) {
      const std::array<const std::vector<double>*, 7> hostQ{&cells.qxx, &cells.qyy, &cells.qzz,  &cells.qxy,
                                                            &cells.qxz, &cells.qyz, &cells.trace};
      for (int c = 0; c < 7; ++c) {
        MATCHA_ASSERT(hostQ[c]->size() == numCells, "cell quadrupoles malformed");
        cellQuadrupole[c].reserve(std::max<std::size_t>(numCells, 1));
        uploadArray(cellQuadrupole[c].data(), hostQ[c]->data(), numCells, staged, on);
      }
    }
  }

  /// copyToDevice, or with `staged` uploadFromHost (large arrays through the page-locked staging buffers, on all
  /// cores, while the DMA of the piece before runs), on stream `on` (null: the engine's stream). Staged: only for
  /// calls with nothing else in flight on that stream.
  template <class T>
  void uploadArray(T* device, const T* host, std::size_t count, bool staged, cudaStream_t on = nullptr) {
    if (staged) {
      uploadFromHost(device, host, count, on);
    } else {
      copyToDevice(device, host, count, on);
    }
  }

  template <class T>
  void copyToDevice(T* device, const T* host, std::size_t count, cudaStream_t on = nullptr) {
    if (count == 0) return;
    MATCHA_CUDA_CHECK(
        cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, on != nullptr ? on : stream.get()));
    stats.bytesToDevice += count * sizeof(T);
  }

  template <class T>
  void copyOnDevice(T* to, const T* from, std::size_t count) {
    if (count == 0) return;
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(to, from, count * sizeof(T), cudaMemcpyDeviceToDevice, stream.get()));
  }

  template <class T>
  void copyToHost(T* host, const T* device, std::size_t count) {
    if (count == 0) return;
    MATCHA_CUDA_CHECK(cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, stream.get()));
    stats.bytesFromDevice += count * sizeof(T);
  }

  /// Room for n bodies' outputs; with `poison` and CudaKernelConfig::poisonDeviceOutputs, NaN in every one.
  void reserveOutputs(std::size_t n, bool poison = true) {
    for (auto* buffer : {&outX, &outY, &outZ, &outPot}) buffer->reserve(n);
    if (poison && config.poisonDeviceOutputs) {
      for (auto* buffer : {&outX, &outY, &outZ, &outPot}) {
        MATCHA_CUDA_CHECK(cudaMemsetAsync(buffer->data(), 0xff, n * sizeof(double), stream.get()));  // NaN
      }
    }
  }

  /// The device outputs; without a potential (ForceView::pot null) pot is null, and the kernels leave it out.
  detail::DeviceForces deviceForces(const ForceView& out) {
    return {outX.data(), outY.data(), outZ.data(), out.pot != nullptr ? outPot.data() : nullptr};
  }

  /// The outputs of bodies [first, first + count) into `out`; `staged`: through the page-locked staging buffers
  /// (downloadStaged), returning when they are in `out`.
  void downloadRange(const ForceView& out, std::size_t first, std::size_t count, bool staged = false) {
    double* to[4] = {out.ax, out.ay, out.az, out.pot};
    const double* from[4] = {outX.data(), outY.data(), outZ.data(), outPot.data()};
    for (int c = 0; c < (out.pot != nullptr ? 4 : 3); ++c) {
      if (staged && count * sizeof(double) >= config.stagedDownloadPieceBytes) {
        downloadStaged(to[c] + first, from[c] + first, count * sizeof(double));
      } else {
        copyToHost(to[c] + first, from[c] + first, count);
      }
    }
  }

  void finishCall() {
    stop.record(stream.get());
    stream.synchronize();
    stats.kernelMilliseconds = kernelsStop.millisecondsSince(kernelsStart);
    stats.uploadMilliseconds = kernelsStart.millisecondsSince(start);
    stats.downloadMilliseconds = stop.millisecondsSince(kernelsStop);
    stats.totalMilliseconds = stop.millisecondsSince(start);
  }

  std::uint32_t chooseSplits(std::uint32_t rowBlocks, std::uint32_t numTiles, int blocksPerSm) const {
    // Blocks all carry the same work, so the grid runs best when it fills every SM (at least one full wave of
    // resident blocks) and gives each SM the same number of blocks; splitting the j-range (kirin) multiplies the
    // blocks without changing the work. Small cost per split: a partial-sum write and its combination.
    const double numSMs = selection.numSMs;
    const double capacity = numSMs * blocksPerSm;
    double bestScore = -1.0;
    std::uint32_t best = 1;
    const std::uint32_t maxSplits = std::min<std::uint32_t>(std::max<std::uint32_t>(1, numTiles / 2), 65535u);
    for (std::uint32_t wanted = 1; wanted <= std::min<std::uint32_t>(maxSplits, 256); ++wanted) {
      const std::uint32_t tilesPerSplit = (numTiles + wanted - 1) / wanted;
      const std::uint32_t splits = (numTiles + tilesPerSplit - 1) / tilesPerSplit;
      if (splits != wanted) continue;
      const double blocks = double(rowBlocks) * splits;
      const double fill = std::min(1.0, blocks / capacity);
      const double balance = blocks / (numSMs * std::ceil(blocks / numSMs));
      const double evenSplits = double(numTiles) / (double(splits) * tilesPerSplit);
      const double score = fill * balance * evenSplits * (1.0 - 0.002 * splits);
      if (score > bestScore + 1e-9) {
        bestScore = score;
        best = splits;
      }
    }
    return best;
  }

  template <class Real>
  InteractionCounts evaluateDirectIn(const SourceView& sources, const GravityParams& gravity, const ForceView& out) {
    drainPipeline();  // a pipelined call stopped half way (an exception in its walk) may still use the streams
    const std::size_t n = sources.count;
    const CudaDirectConfig shape = config.autoDirect ? directConfigForSize(n) : config.direct;
    const detail::DirectVariant<Real>* variant = findDirectVariant<Real>(shape, out.pot != nullptr);
    MATCHA_ASSERT(variant != nullptr, "direct shape " + shape.label() + " not compiled in");
    const auto numBodies = static_cast<std::uint32_t>(n);
    const std::uint32_t rowBlocks = (numBodies + variant->rows - 1) / variant->rows;
    const std::uint32_t numTiles = (numBodies + variant->tile - 1) / variant->tile;
    std::uint32_t splits = config.direct.numSplits != 0
                               ? std::min(config.direct.numSplits, numTiles)
                               : chooseSplits(rowBlocks, numTiles, blocksPerSM(variant->kernel, variant->threads));
    const std::uint32_t tilesPerSplit = (numTiles + splits - 1) / splits;
    splits = (numTiles + tilesPerSplit - 1) / tilesPerSplit;

    start.record(stream.get());
    uploadSources(sources);
    reserveOutputs(n);
    if (splits > 1) partial.reserve(std::size_t(splits) * n);
    tileBoxes.reserve(6 * std::size_t(numTiles));
    constexpr bool kIsFloat = std::is_same_v<Real, float>;
    if constexpr (kIsFloat) {
      if (splits > 1) partialMagnitude.reserve(std::size_t(splits) * n);
      cancelledBodies.reserve(n + 1);
      MATCHA_CUDA_CHECK(cudaMemsetAsync(cancelledBodies.data(), 0, sizeof(std::uint32_t), stream.get()));
    }

    detail::DirectArgs<Real> args{};
    args.sources = {sourceX.data(), sourceY.data(), sourceZ.data(), sourceMass.data()};
    args.numBodies = numBodies;
    args.tilesPerSplit = tilesPerSplit;
    args.eps2 = static_cast<Real>(gravity.eps2());
    args.eps2Double = gravity.eps2();
    args.inverseSoftening = inverseSoftening(gravity.eps2());
    args.G = gravity.G;
    args.out = deviceForces(out);
    args.partial = splits > 1 ? partial.data() : nullptr;
    args.tileBoxes = tileBoxes.data();
    args.partialMagnitude = kIsFloat && splits > 1 ? partialMagnitude.data() : nullptr;
    args.cancelledBodies = kIsFloat ? cancelledBodies.data() : nullptr;

    kernelsStart.record(stream.get());
    detail::launchTileBoxes(args.sources, numBodies, variant->tile, tileBoxes.data(), stream.get());
    MATCHA_CUDA_CHECK_LAUNCH("tileBoxesKernel", config.synchronizeAfterLaunch);
    variant->launch(dim3(rowBlocks, splits), stream.get(), args);
    MATCHA_CUDA_CHECK_LAUNCH("directKernel", config.synchronizeAfterLaunch);
    if (splits > 1) {
      detail::launchCombineSplits(partial.data(), args.partialMagnitude, splits, numBodies, gravity.G, args.out,
                                  args.cancelledBodies, stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("combineSplitsKernel", config.synchronizeAfterLaunch);
    }
    if constexpr (kIsFloat) {
      detail::launchSumCancelledBodiesInDouble(args.sources, numBodies, cancelledBodies.data(), gravity.eps2(),
                                               gravity.G, args.out, selection.numSMs, stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("sumCancelledBodiesInDoubleKernel", config.synchronizeAfterLaunch);
    }
    kernelsStop.record(stream.get());
    downloadRange(out, 0, n);
    hostCancelledCount.reserve(1);
    hostCancelledCount.data()[0] = 0;
    if constexpr (kIsFloat) copyToHost(hostCancelledCount.data(), cancelledBodies.data(), 1);
    finishCall();
    stats.bodiesSummedInDouble = hostCancelledCount.data()[0];
    stats.numTasks = std::uint64_t(rowBlocks) * splits;
    stats.numSplits = splits;
    stats.kernel =
        std::string("direct ").append(shape.label()).append(" x").append(std::to_string(splits)).append(" splits");
    if (!variant->potential) stats.kernel.append(", accelerations only");
    const auto n64 = static_cast<std::uint64_t>(n);
    return {n64 * n64, 0};
  }

  /// The plan kernel that evaluates a plan (InteractionPlan::accurateNearPairs or not; its cells quadrupoles or not)
  /// or resident lists (no accurate near pairs) with `gravity`, writing out.pot or not.
  template <class Real>
  const detail::PlanVariant<Real>* planVariantFor(bool accurateNearPairs, bool quadrupole, const GravityParams& gravity,
                                                  const ForceView& out) const {
    // Accurate near pairs matter in float only; those plans (direct sums) have their own tile-64 kernels. The periodic
    // short range has kernels of one tile size (kernel_variants.cuh says why), in float (CudaEngine::evaluatePlan).
    const bool accurate = accurateNearPairs && std::is_same_v<Real, float>;
    const bool periodic = gravity.periodic.enabled();
    MATCHA_ASSERT(!(periodic && accurateNearPairs), "periodic plans are tree plans (no second pass in double)");
    const std::uint32_t tile =
        periodic ? std::uint32_t(detail::kPeriodicPlanTile) : (accurate ? 64u : config.planTileSize);
    const detail::PlanVariant<Real>* variant =
        findPlanVariant<Real>(tile, quadrupole, accurate, out.pot != nullptr, periodic);
    MATCHA_ASSERT(variant != nullptr, "plan tile size not compiled in");
    return variant;
  }

  /// The periodic short range's parameters of the plan kernels (kPeriodic variants).
  template <class Real>
  static void setPeriodicArgs(const PeriodicSplit& split, detail::PlanArgs<Real>& args) {
    args.boxSize = split.boxSize;
    args.box = static_cast<Real>(split.boxSize);
    args.invTwoSplit = static_cast<Real>(0.5 / split.splitRadius);
    args.cutoff2 = static_cast<Real>(split.cutoffRadius * split.cutoffRadius);
  }

  template <class Real>
  InteractionCounts evaluatePlanIn(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                                   const GravityParams& gravity, const ForceView& out, const PlanPart& part = {}) {
    const std::size_t numGroups = plan.numGroups();
    const std::size_t numBodies = sources.count;
    const std::size_t numCells = cells.size();
    const bool quadrupole = cells.hasQuadrupole;
    const bool periodic = gravity.periodic.enabled();
    const detail::PlanVariant<Real>* variant = planVariantFor<Real>(plan.accurateNearPairs, quadrupole, gravity, out);
    const auto now = [&](std::size_t g) { return part.now == nullptr || (*part.now)[g] != 0; };
    // A pipelined batch takes the set the batch before did not; its page-locked arrays are written once their last
    // copies are done (those of the batch before that).
    PlanListBuffers& lists = planLists[part.pipelined ? batches.nextLists : 0];
    if (part.pipelined) {
      batches.nextLists ^= 1;
    } else {
      drainPipeline();
    }
    lists.uploaded.synchronize();
    PinnedBuffer<uint4>& hostGroupLists = lists.hostGroupLists;
    PinnedBuffer<uint4>& hostTasks = lists.hostTasks;
    // The kernels index bodies and cells with 32-bit integers, kept below 2^31 as setTree keeps them.
    MATCHA_ASSERT(numBodies < (std::size_t{1} << 31) && numCells < (std::size_t{1} << 31),
                  "more than 2^31 bodies or cells in one plan");

    // Per-group list descriptors (expanded bodies, cells), interaction counts and warp tasks, straight into pinned
    // memory. The passes over groups that touch their lists and tasks run on all cores, in blocks of groups, writing
    // what one pass in group order writes: on one core they took 22 ms of a 2^24 periodic call (48k groups, H200 host).
    hostGroupLists.reserve(numGroups);
    std::uint64_t bodyBody = 0, bodyCell = 0, packedBytes = 0;
    std::uint32_t listBodies = 0;
    double totalCost = 0.0;
    const auto entriesOf = [&](std::size_t g) {
      return listEntries(hostGroupLists[g].y, hostGroupLists[g].w, quadrupole);
    };
    double longestTask = std::numeric_limits<double>::infinity();
    const auto forEachTask = [&](std::size_t g, auto&& emit) {
      forEachBalancedWarpTask<Real>(plan.groups[g], entriesOf(g), longestTask, emit);
    };
    const auto bucketOf = [](double cost) {
      if (cost < 1.0) return 0;
      return std::min(kNumBuckets - 1, 1 + static_cast<int>(std::log2(cost)));
    };
    const std::size_t numGroupBlocks = (numGroups + kGroupsPerBlock - 1) / kGroupsPerBlock;
    const auto forEachBlock = [&](auto&& body) {
      detail::parallelForEach(numGroupBlocks, [&](std::size_t block) {
        body(block, block * kGroupsPerBlock, std::min(numGroups, (block + 1) * kGroupsPerBlock));
      });
    };
    groupListBodies.resize(numGroups);
    forEachBlock([&](std::size_t, std::size_t first, std::size_t last) {
      for (std::size_t g = first; g < last; ++g) {
        const BodyRange group = plan.groups[g];
        MATCHA_ASSERT(group.first <= group.last && group.last <= numBodies, "plan group outside the sources");
        groupListBodies[g] = listBodiesOf(plan, g, numBodies);
      }
    });
    // In group order: the list offsets and the cost are sums whose rounding the batches' record repeats
    // (evaluatePlanBatchIn).
    for (std::size_t g = 0; g < numGroups; ++g) {
      const BodyRange group = plan.groups[g];
      const std::uint64_t groupListCells = plan.numListCells(g);
      MATCHA_ASSERT(std::uint64_t(listBodies) + groupListBodies[g] <= std::numeric_limits<std::uint32_t>::max(),
                    "plan batch too large for 32-bit list offsets");
      hostGroupLists[g] = uint4{listBodies, static_cast<std::uint32_t>(groupListBodies[g]), plan.cellListOffsets[g],
                                static_cast<std::uint32_t>(groupListCells)};
      listBodies += static_cast<std::uint32_t>(groupListBodies[g]);
      addGroupCost<Real>(totalCost, group, entriesOf(g));
      if (!now(g)) continue;
      bodyBody += group.size() * groupListBodies[g];
      bodyCell += group.size() * groupListCells;
      packedBytes += 16 * groupListBodies[g] + (quadrupole ? 40 : 16) * groupListCells;  // float4, or 10 floats
    }
    longestTask = std::isnan(part.longestTask) ? longestTaskCost(totalCost, *variant) : part.longestTask;

    // Most expensive tasks first (longest-processing-time order, by powers of two of the cost): the warps that
    // take the last tasks finish at about the same time. Each block's tasks are counted by bucket; a bucket's tasks
    // then lie block after block, so each block writes its own from its offsets, in the order of one pass.
    blockBucketTasks.assign(numGroupBlocks * kNumBuckets, 0);
    forEachBlock([&](std::size_t block, std::size_t first, std::size_t last) {
      std::uint64_t* counts = &blockBucketTasks[block * kNumBuckets];
      for (std::size_t g = first; g < last; ++g) {
        if (!now(g)) continue;
        const double entries = entriesOf(g);
        forEachTask(
            g, [&](std::uint32_t, std::uint32_t, int kind) { ++counts[bucketOf(entries * taskCostPerEntry(kind))]; });
      }
    });
    std::uint64_t numTasks = 0;
    for (int b = kNumBuckets - 1; b >= 0; --b) {
      for (std::size_t block = 0; block < numGroupBlocks; ++block) {
        std::uint64_t& slot = blockBucketTasks[block * kNumBuckets + b];
        const std::uint64_t count = slot;
        slot = numTasks;  // now where the block's tasks of this bucket start
        numTasks += count;
      }
    }
    MATCHA_ASSERT(numTasks <= std::numeric_limits<std::uint32_t>::max(), "too many warp tasks");
    hostTasks.reserve(std::max<std::uint64_t>(numTasks, 1));
    forEachBlock([&](std::size_t block, std::size_t first, std::size_t last) {
      std::uint64_t* next = &blockBucketTasks[block * kNumBuckets];
      for (std::size_t g = first; g < last; ++g) {
        if (!now(g)) continue;
        const double entries = entriesOf(g);
        forEachTask(g, [&](std::uint32_t firstRow, std::uint32_t rows, int kind) {
          hostTasks[next[bucketOf(entries * taskCostPerEntry(kind))]++] =
              uint4{static_cast<unsigned>(g), firstRow, rows, static_cast<unsigned>(kind)};
        });
      }
    });

    // A pipelined batch's copies run on the copy stream once the kernels that read its set last are done, and its
    // kernels on the stream once its copies are: the kernels of the batch before run meanwhile.
    const cudaStream_t copies = part.pipelined ? copyStream.get() : stream.get();
    const cudaStream_t launches = part.pipelined ? lists.kernels.get() : stream.get();
    if (!part.pipelined || !batches.started) start.record(stream.get());
    if (part.pipelined) {
      // The first batch's copies (and so every kernel) after what the call queued on the stream (the outputs' poison).
      if (!batches.started) MATCHA_CUDA_CHECK(cudaStreamWaitEvent(copies, start.get(), 0));
      batches.started = true;
      MATCHA_CUDA_CHECK(cudaStreamWaitEvent(copies, lists.consumed.get(), 0));
    }
    // A periodic call (a tree's first call: the calls after take the resident lists, tree/periodic_tree_solver.hpp)
    // sends its bodies, cells and lists, ~1.3 GB at 2^24, through the page-locked staging buffers: from pageable
    // memory they took 122-213 ms on the H200 (6-10 GB/s). So does an open-boundary plan on an engine that has never
    // held resident lists (a rank of the distributed solver: its lists took 185 ms a call at 2^24 bodies a rank on the
    // 2-GPU H200 machine). Other plans beside resident lists keep the direct copies: they may run beside resident
    // launches, whose DMA a staged piece would wait behind (the periodic solver never launches its lists beside a
    // plan).
    const bool staged = periodic || !res.hasTree;
    if (part.uploadBodies) uploadSourcesAndCells(sources, cells, staged, copies);
    lists.groupCentres.reserve(3 * numGroups);
    uploadArray(lists.groupCentres.data(), plan.groupCentres.data(), 3 * numGroups, staged, copies);
    lists.bodyRanges.reserve(std::max<std::size_t>(plan.bodyList.size(), 1));
    static_assert(sizeof(BodyRange) == sizeof(uint2), "BodyRange must match uint2 for the upload");
    uploadArray(lists.bodyRanges.data(), reinterpret_cast<const uint2*>(plan.bodyList.data()), plan.bodyList.size(),
                staged, copies);
    lists.bodyRangeOffsets.reserve(numGroups + 1);
    uploadArray(lists.bodyRangeOffsets.data(), plan.bodyListOffsets.data(), numGroups + 1, staged, copies);
    lists.cellList.reserve(std::max<std::size_t>(plan.cellList.size(), 1));
    uploadArray(lists.cellList.data(), plan.cellList.data(), plan.cellList.size(), staged, copies);
    lists.groupLists.reserve(numGroups);
    copyToDevice(lists.groupLists.data(), hostGroupLists.data(), numGroups, copies);
    lists.tasks.reserve(std::max<std::uint64_t>(numTasks, 1));
    copyToDevice(lists.tasks.data(), hostTasks.data(), numTasks, copies);
    if (part.pipelined) {
      lists.uploaded.record(copies);
      MATCHA_CUDA_CHECK(cudaStreamWaitEvent(launches, lists.uploaded.get(), 0));
    }
    DeviceBuffer<std::uint32_t>& expanded = part.pipelined ? lists.expandedBodies : expandedBodies;
    DeviceBuffer<std::uint32_t>& counter = part.pipelined ? lists.taskCounter : taskCounter;
    expanded.reserve(std::max<std::uint32_t>(listBodies, 1));
    counter.reserve(1);
    MATCHA_CUDA_CHECK(cudaMemsetAsync(counter.data(), 0, sizeof(std::uint32_t), launches));
    reserveOutputs(numBodies, !part.pipelined);

    detail::PlanArgs<Real> args{};
    args.sources = {sourceX.data(), sourceY.data(), sourceZ.data(), sourceMass.data()};
    args.cells = {cellX.data(), cellY.data(), cellZ.data(), cellMass.data()};
    if (quadrupole) {
      args.quadrupoles = {cellQuadrupole[0].data(), cellQuadrupole[1].data(), cellQuadrupole[2].data(),
                          cellQuadrupole[3].data(), cellQuadrupole[4].data(), cellQuadrupole[5].data(),
                          cellQuadrupole[6].data()};
    }
    args.tasks = lists.tasks.data();
    args.numTasks = static_cast<std::uint32_t>(numTasks);
    args.taskCounter = counter.data();
    args.groupCentres = lists.groupCentres.data();
    args.groupLists = lists.groupLists.data();
    args.expandedBodies = expanded.data();
    args.cellList = lists.cellList.data();
    args.eps2 = static_cast<Real>(gravity.eps2());
    args.eps2Double = gravity.eps2();
    args.inverseSoftening = inverseSoftening(gravity.eps2());
    args.G = gravity.G;
    args.out = deviceForces(out);
    if (periodic) setPeriodicArgs(gravity.periodic, args);

    const auto warpsPerBlock = static_cast<std::uint64_t>(variant->threads / 32);
    const auto numBlocks = static_cast<unsigned>(std::max<std::uint64_t>(
        1, std::min<std::uint64_t>(std::uint64_t(selection.numSMs) * blocksPerSM(variant->kernel, variant->threads),
                                   (numTasks + warpsPerBlock - 1) / warpsPerBlock)));
    if (!part.pipelined || !batches.kernelsStarted) kernelsStart.record(launches);
    if (listBodies > 0) {
      detail::launchExpandBodyRanges(lists.bodyRanges.data(), lists.bodyRangeOffsets.data(), lists.groupLists.data(),
                                     static_cast<std::uint32_t>(numGroups), expanded.data(), launches);
      MATCHA_CUDA_CHECK_LAUNCH("expandBodyRangesKernel", config.synchronizeAfterLaunch);
    }
    if (numTasks > 0) {
      variant->launch(numBlocks, launches, args);
      MATCHA_CUDA_CHECK_LAUNCH("planKernel", config.synchronizeAfterLaunch);
    }
    if (!part.pipelined) kernelsStop.record(stream.get());

    // Download only the plan's groups (other outputs stay untouched), merged into runs of consecutive bodies; a
    // pipelined batch's wait for the call's last batch.
    if (!part.pipelined) runs.clear();
    const std::size_t runsBefore = runs.size();
    for (std::size_t g = 0; g < numGroups; ++g) {
      if (plan.groups[g].size() > 0 && now(g)) runs.push_back(plan.groups[g]);
    }
    if (part.pipelined) {
      lists.consumed.record(launches);
      queueBatchDownload(runsBefore, numBodies, out.pot != nullptr, lists.consumed);
      batches.kernelsStarted = true;
      batches.numTasks += numTasks;
      batches.packedListBytes += packedBytes;
      return {bodyBody, bodyCell};
    }
    downloadRuns(out, staged);
    finishCall();
    stats.numTasks = numTasks;
    stats.numSplits = 0;
    stats.packedListBytes = packedBytes;
    char text[128];
    std::snprintf(text, sizeof text, "plan %s%s p%d (%llu warp tasks, %u blocks)%s", periodic ? "periodic " : "",
                  quadrupole ? "quad" : "mono", variant->tile, static_cast<unsigned long long>(numTasks), numBlocks,
                  variant->potential ? "" : ", accelerations only");
    stats.kernel = text;
    return {bodyBody, bodyCell};
  }

  /// Waits for whatever a pipelined call that stopped half way (an exception in its caller's walk) left queued: its
  /// copies and both list sets' kernels, which read the sources, cells and lists a new call is about to overwrite.
  /// Idle streams return at once.
  void drainPipeline() {
    copyStream.synchronize();
    for (PlanListBuffers& set : planLists) set.kernels.synchronize();
    outputCopies.synchronize();
  }

  /// A pipelined batch's outputs, runs[firstRun..] (its groups evaluated now, merged into runs of consecutive bodies),
  /// come over on `outputCopies` once `kernelsDone` (its kernels) is, into the outputs' page-locked staging
  /// (res.hostForces), while the batches after it run. Run by run: a span across a deferred group would copy its
  /// outputs before its kernels, and the deferred groups' span the other batches' again. copyLandedOutputs copies
  /// them out.
  void queueBatchDownload(std::size_t firstRun, std::size_t numBodies, bool potentials,
                          const detail::CudaEvent& kernelsDone) {
    const auto byFirst = [](BodyRange a, BodyRange b) { return a.first < b.first; };
    std::sort(runs.begin() + static_cast<std::ptrdiff_t>(firstRun), runs.end(), byFirst);
    const std::size_t batchStart = landing.runs.size();
    for (std::size_t k = firstRun; k < runs.size(); ++k) {
      if (landing.runs.size() > batchStart && runs[k].first <= landing.runs.back().last) {
        landing.runs.back().last = std::max(landing.runs.back().last, runs[k].last);
      } else {
        landing.runs.push_back(runs[k]);
      }
    }
    landing.ends.push_back(landing.runs.size());
    if (landing.ends.size() > landing.landed.size()) landing.landed.emplace_back();
    if (landing.ends.size() == 1) {
      // The call's first copies: nothing else uses the staging now (the resident launch that does is done before a
      // call's batches start, tree/periodic_tree_solver.hpp), so it may grow.
      MATCHA_ASSERT(!res.launched, "a pipelined call's downloads beside a resident launch");
      res.hostForces.reserve(4 * std::max<std::size_t>(numBodies, 1));
      landing.numBodies = numBodies;
    }
    MATCHA_ASSERT(landing.numBodies == numBodies, "a pipelined call's batches with different bodies");
    MATCHA_CUDA_CHECK(cudaStreamWaitEvent(outputCopies.get(), kernelsDone.get(), 0));
    const double* from[4] = {outX.data(), outY.data(), outZ.data(), outPot.data()};
    for (std::size_t k = batchStart; k < landing.runs.size(); ++k) {
      const BodyRange run = landing.runs[k];
      for (int c = 0; c < (potentials ? 4 : 3); ++c) {
        MATCHA_CUDA_CHECK(cudaMemcpyAsync(res.hostForces.data() + c * numBodies + run.first, from[c] + run.first,
                                          run.size() * sizeof(double), cudaMemcpyDeviceToHost, outputCopies.get()));
        landing.bytes += run.size() * sizeof(double);
      }
    }
    landing.landed[landing.ends.size() - 1].record(outputCopies.get());
  }

  /// Copies each pipelined batch's runs out of the staging into `out` as its copies land (on all cores), while the GPU
  /// runs the batches after it, adding `addend` where given (PlanBatch::addend); then forgets the batches.
  void copyLandedOutputs(const ForceView& out, const ForceAddend* addend) {
    const std::size_t n = landing.numBodies;
    double* to[4] = {out.ax, out.ay, out.az, out.pot};
    const double* added[4] = {nullptr, nullptr, nullptr, nullptr};
    if (addend != nullptr) {
      added[0] = addend->ax;
      added[1] = addend->ay;
      added[2] = addend->az;
      added[3] = addend->pot;
    }
    const int components = out.pot != nullptr ? 4 : 3;
    constexpr std::uint32_t kPieceBodies = 1u << 16;
    std::vector<BodyRange>& pieces = landing.pieces;
    std::size_t batchStart = 0;
    for (std::size_t b = 0; b < landing.ends.size(); ++b) {
      pieces.clear();
      for (std::size_t k = batchStart; k < landing.ends[b]; ++k) {
        for (std::uint32_t first = landing.runs[k].first; first < landing.runs[k].last; first += kPieceBodies) {
          pieces.push_back(BodyRange{first, std::min(landing.runs[k].last, first + kPieceBodies)});
        }
      }
      batchStart = landing.ends[b];
      landing.landed[b].synchronize();
      detail::parallelForEach(pieces.size(), [&](std::size_t p) {
        const BodyRange piece = pieces[p];
        for (int c = 0; c < components; ++c) {
          const double* landed = res.hostForces.data() + c * n;
          if (added[c] == nullptr) {
            std::memcpy(to[c] + piece.first, landed + piece.first, piece.size() * sizeof(double));
            continue;
          }
          // The other part's pass over the bodies after the call, folded into this copy: one read of the outputs'
          // memory fewer, and the add runs under the GPU's last kernels, not after them.
          for (std::uint32_t i = piece.first; i < piece.last; ++i) to[c][i] = landed[i] + added[c][i];
        }
      });
    }
    stats.bytesFromDevice += landing.bytes;
    landing.clear();
  }

  /// Downloads the outputs of the bodies in `runs` (group ranges in any order), merged into runs of consecutive
  /// bodies.
  void downloadRuns(const ForceView& out, bool staged) {
    if (!std::is_sorted(runs.begin(), runs.end(), [](BodyRange a, BodyRange b) { return a.first < b.first; })) {
      std::sort(runs.begin(), runs.end(), [](BodyRange a, BodyRange b) { return a.first < b.first; });
    }
    std::size_t k = 0;
    while (k < runs.size()) {
      const std::uint32_t first = runs[k].first;
      std::uint32_t last = runs[k].last;
      for (++k; k < runs.size() && runs[k].first <= last; ++k) last = std::max(last, runs[k].last);
      downloadRange(out, first, last - first, staged);
    }
  }

  /// evaluatePlanBatch's record of the batches of the call in progress.
  struct PlanBatches {
    bool bodiesOnDevice = false;   ///< the call's sources and cells went over, with its first batch or ahead of it
    std::size_t groupsBefore = 0;  ///< the call's groups in its batches before this one
    double totalCost = 0.0;        ///< the cost of the call's groups so far, summed as evaluatePlanIn sums a plan's
    InteractionPlan deferred;      ///< groups held back for the call's last batch (evaluatePlanBatchIn)
    std::vector<std::uint8_t> now;
    // The pipeline (PlanPart::pipelined): the call's start and first kernel recorded, the list set the next batch
    // takes, and the warp tasks and packed list bytes of the batches so far. Their groups' runs wait in `runs`.
    bool started = false;
    bool kernelsStarted = false;
    int nextLists = 0;
    std::uint64_t numTasks = 0;
    std::uint64_t packedListBytes = 0;
    std::uint64_t bytesToDevice = 0;
  };

  /// out += addend over the bodies of `plan`'s groups, on all cores (PlanBatch::addend, a call of one batch).
  static void addToGroups(const InteractionPlan& plan, const ForceAddend& addend, const ForceView& out) {
    detail::parallelForEach(plan.numGroups(), [&](std::size_t g) {
      addForceAddend(addend, out, plan.groups[g].first, plan.groups[g].last);
    });
  }

  /// CudaEngine::evaluatePlanBatch. The one plan of the call's groups would cut the tasks longer than
  /// longestTaskCost(the whole call's cost) into tasks of fewer rows (forEachBalancedWarpTask), which changes the
  /// rounding of quadrupole cells' sums. The cost is summed here batch by batch in the one plan's order, and it only
  /// grows: a group none of whose tasks the bound of the cost so far cuts is not cut in the one plan either, and is
  /// evaluated with its batch, uncut. The others (the longest lists of the first, small batches, mostly) wait for the
  /// call's last batch, when the whole cost, and with it the one plan's cut, is known.
  template <class Real>
  InteractionCounts evaluatePlanBatchIn(const SourceView& sources, const CellMultipoles& cells,
                                        const InteractionPlan& batch, const GravityParams& gravity,
                                        const ForceView& out, PlanBatch where) {
    PlanBatches& b = batches;
    MATCHA_ASSERT(where.addend == nullptr || (where.last && where.addend->count == out.count &&
                                              (out.pot == nullptr || where.addend->pot != nullptr)),
                  "CudaEngine::evaluatePlanBatch: an addend off the last batch or short of the outputs");
    if (where.first) {
      drainPipeline();
      stream.synchronize();
      b.bodiesOnDevice = false;
      b.groupsBefore = 0;
      b.totalCost = 0.0;
      b.deferred.clear();
      b.started = false;
      b.kernelsStarted = false;
      b.numTasks = 0;
      b.packedListBytes = 0;
      b.bytesToDevice = 0;
      runs.clear();
      landing.clear();
    }
    if (where.last && b.groupsBefore == 0) {
      // Every group of the call is in this batch (the ones before, if any, were empty: the bodies and cells went over
      // while the caller walked): the one plan itself, its tasks cut as evaluatePlan cuts them, in one launch.
      PlanPart whole;
      whole.uploadBodies = !b.bodiesOnDevice;
      const InteractionCounts counts = evaluatePlanIn<Real>(sources, cells, batch, gravity, out, whole);
      b.bodiesOnDevice = true;
      if (where.addend != nullptr) addToGroups(batch, *where.addend, out);
      return counts;
    }
    if (batch.numGroups() == 0 && !where.last) {
      // An empty batch ahead of the lists: the bodies and cells go over now, while the caller walks.
      if (!b.bodiesOnDevice) {
        start.record(stream.get());
        reserveOutputs(sources.count);  // poisoned once a call, before any batch writes
        uploadSourcesAndCells(sources, cells, true);
        stop.record(stream.get());
        stream.synchronize();
        b.bodiesOnDevice = true;
        b.bytesToDevice += stats.bytesToDevice;
        stats.uploadMilliseconds = stats.totalMilliseconds = stop.millisecondsSince(start);
      }
      return {};
    }
    b.groupsBefore += batch.numGroups();
    const bool quadrupole = cells.hasQuadrupole;
    const detail::PlanVariant<Real>* variant = planVariantFor<Real>(batch.accurateNearPairs, quadrupole, gravity, out);
    const std::size_t numGroups = batch.numGroups();
    std::vector<double> entries(numGroups);
    for (std::size_t g = 0; g < numGroups; ++g) {
      entries[g] = listEntries(listBodiesOf(batch, g, sources.count), batch.numListCells(g), quadrupole);
      addGroupCost<Real>(b.totalCost, batch.groups[g], entries[g]);
    }
    const double bound = longestTaskCost(b.totalCost, *variant);
    b.now.assign(numGroups, 1);
    for (std::size_t g = 0; g < numGroups; ++g) {
      if (!cutsAnyTask<Real>(batch.groups[g], entries[g], bound)) continue;
      b.now[g] = 0;
      appendGroups(batch, g, g + 1, b.deferred);
    }
    // Each batch's kernels queue behind the batch before's (PlanPart::pipelined) and the call waits only at its
    // last batch, for the downloads of every batch's groups: the GPU runs while the caller walks the next batch.
    PlanPart part;
    part.uploadBodies = !b.bodiesOnDevice;
    part.now = &b.now;
    part.longestTask = std::numeric_limits<double>::infinity();
    part.pipelined = true;
    if (part.uploadBodies) reserveOutputs(sources.count);  // poisoned once a call, before any batch writes
    InteractionCounts counts = evaluatePlanIn<Real>(sources, cells, batch, gravity, out, part);
    b.bodiesOnDevice = true;
    if (where.last && b.deferred.numGroups() > 0) {
      counts += evaluatePlanIn<Real>(sources, cells, b.deferred, gravity, out,
                                     PlanPart{false, nullptr, longestTaskCost(b.totalCost, *variant), true});
      b.deferred.clear();
    }
    b.bytesToDevice += stats.bytesToDevice;
    stats.bytesToDevice = 0;
    if (where.last) {
      // The downloads on the stream, after the last kernels of both sets' streams.
      for (PlanListBuffers& lists : planLists) {
        MATCHA_CUDA_CHECK(cudaStreamWaitEvent(stream.get(), lists.consumed.get(), 0));
      }
      kernelsStop.record(stream.get());
      // Each batch's outputs came over as its kernels ended (queueBatchDownload): at 2^24 bodies the call waited
      // ~18 ms after its last kernels for a download of all of them (H200).
      copyLandedOutputs(out, where.addend);
      finishCall();
      copyStream.synchronize();
      stats.bytesToDevice = b.bytesToDevice;
      stats.numTasks = b.numTasks;
      stats.packedListBytes = b.packedListBytes;
      char text[160];
      std::snprintf(text, sizeof text, "plan %s%s p%d (%llu warp tasks in batches)%s",
                    gravity.periodic.enabled() ? "periodic " : "", quadrupole ? "quad" : "mono", variant->tile,
                    static_cast<unsigned long long>(b.numTasks), variant->potential ? "" : ", accelerations only");
      stats.kernel = text;
    }
    return counts;
  }

  CudaDirectConfig directConfigForSize(std::size_t numBodies) const {
    // Measured on an H100 (bench/RESULTS.md): once N fills the GPU, 128 threads with 2 i-bodies each and 256-source
    // tiles, 256-body blocks: with the near-pair pass it is 3-4% faster than T256/I4/p256 (1024-body blocks), and
    // its smaller blocks put each body's float origin nearer (E_max 1.6e-6..3.7e-6 in Morton order against
    // 2.0e-6..5.5e-6); below 2^17, 2 bodies per thread shared by q threads (GPU Gems §31.4) plus the j-splits keep
    // every SM busy: q = 2 from 2^15 (at 2^16: 65.7% of the floor, q = 4 61.9%), q = 4 below (at 2^14: 50.8%, q = 2
    // 47.3%; with the launches overlapped, dependent_launch.cuh, two runs each, H100).
    CudaDirectConfig shape;
    shape.numSplits = config.direct.numSplits;
    if (precision == Precision::float64) {
      shape.bodiesPerThread = 2;
      return shape;
    }
    if (numBodies >= (std::size_t{1} << 17)) {
      shape.threadsPerBlock = 128;
      shape.bodiesPerThread = 2;
      shape.tileSize = 256;
    } else if (numBodies >= (std::size_t{1} << 15)) {
      shape.bodiesPerThread = 2;
      shape.threadsPerBody = 2;
    } else {
      shape.bodiesPerThread = 2;
      shape.threadsPerBody = 4;
    }
    return shape;
  }

  // -------------------------------------------------------------------------------------------------------------
  // Resident lists

  /// The tree, masses, lists and tasks kept between launches, and the buffers of one launch. Separate from the
  /// buffers of evaluatePlan and evaluateDirect, which may run in between (direct potentials at a run's outputs).
  struct ResidentTree {
    bool hasTree = false;
    bool refitted = false;  ///< a launch since setTree refitted the cells (BodyMotion::unchanged may skip the refit)
    std::vector<std::uint32_t> levelOffsets;
    std::vector<BodyRange> groups;  ///< host copy, for the downloads of a subset
    bool gathered = false;          ///< the caller's order differs from the tree's
    bool quadrupole = true;
    double theta = 0.5;
    std::uint32_t numBodies = 0, numCells = 0, numGroups = 0;
    DeviceBuffer<uint2> cellBodies, groupBodies;
    DeviceBuffer<std::uint32_t> firstChild, order;
    DeviceBuffer<std::uint8_t> numChildren;
    DeviceBuffer<double> cellCentre, cellHalfSide, tolerance;
    DeviceBuffer<double> x, y, z, mass, callerX, callerY, callerZ;
    /// The masses in the caller's order where it differs from the tree's (gathered): a tree prediction reads them.
    DeviceBuffer<double> callerMass;
    DeviceBuffer<double> cellX, cellY, cellZ, cellMass, halfExtent, bmax, openingRadius;
    std::array<DeviceBuffer<double>, 7> quadrupole7;
    DeviceBuffer<double> groupCentre, groupHalf;
    DeviceBuffer<double> outX, outY, outZ, outPot, callerOutX, callerOutY, callerOutZ, callerOutPot;
    // The engine's copy of the caller's bodies (BodyUpdate), in the caller's order whatever the tree: positions in
    // callerX/Y/Z, velocities in callerVX/VY/VZ, the last launches' accelerations in callerOutX/Y/Z. It outlives
    // setTree; a launch that moves the bodies without velocities ends it.
    bool mirror = false;
    DeviceBuffer<double> callerVX, callerVY, callerVZ;
    // A drifted launch's kicked bodies and their velocities (3 x count), and its placed bodies and their places.
    DeviceBuffer<std::uint32_t> kickedIds, placedIds;
    DeviceBuffer<double> kickedVelocities, placedPoints;
    PinnedBuffer<std::uint32_t> hostKickedIds;
    /// The balls of the last launch with BodyUpdate::ballRadius (driftResident): centres and radii, caller's order.
    bool ballsKept = false;
    DeviceBuffer<double> ballX, ballY, ballZ;
    DeviceBuffer<float> ballRadius;
    DeviceBuffer<std::uint32_t> outsideIds, outsideCount;
    PinnedBuffer<std::uint32_t> hostOutside;  ///< the count, then the ids
    bool driftedBefore = false;               ///< driftResident moved the copy for the next launch
    /// driftResident took its sample before the caller drifted its positions (BodyUpdate::positionsPending): the
    /// launch that follows compares it at its finish.
    bool sampleAwaitsCaller = false;
    /// A launch with BodyMotion::advanced copies these many of the copy's positions back, and finishResident compares
    /// them with the caller's, bit for bit: a host that rounds its leapfrog differently shows at once.
    static constexpr std::uint32_t kSampleBodies = 64;
    DeviceBuffer<double> sample;
    PinnedBuffer<double> hostSample;
    bool sampleTaken = false;
    SourceView sampleAgainst;  ///< the caller's bodies, read when the launch is finished
    // Lists: cells and expanded bodies in two arenas, a descriptor per group; replaced lists leave garbage behind
    // until the next tree.
    DeviceBuffer<std::uint32_t> cellArena, bodyArena;
    std::uint64_t cellTop = 0, bodyTop = 0;
    DeviceBuffer<uint4> groupLists;
    DeviceBuffer<uint2> stagingRanges;
    DeviceBuffer<std::uint32_t> stagingRangeOffsets, stagingCellOffsets, stagingIds, counts, bodyOffsets;
    DeviceBuffer<char> scratch;
    PinnedBuffer<std::uint32_t> hostCounts;
    detail::CudaEvent countsFree;  ///< recorded after the copies out of hostCounts
    // Warp tasks: fixed by the groups' sizes, ordered by cost whenever lists change.
    DeviceBuffer<uint4> tasks, sortedTasks, subsetTasks;
    DeviceBuffer<std::uint32_t> taskKeys, sortedKeys, subsetGroups, taskCounter;
    std::uint32_t numTasks = 0;
    bool tasksSorted = false;
    /// The cost above which the last whole launch on this tree cut a task (forEachBalancedWarpTask); launches of a
    /// subset of the groups cut theirs the same way (none before the tree's first whole launch).
    double longestTask = std::numeric_limits<double>::infinity();
    std::vector<uint4> hostTasks, hostSubsetTasks, hostSortedSubsetTasks;
    std::vector<double> hostSubsetCosts;
    std::vector<std::uint32_t> subsetOrder;
    std::vector<std::vector<uint4>> chunkTasks;  ///< a subset's tasks, built a chunk of groups a core
    std::vector<std::vector<double>> chunkCosts;
    // The check's results.
    DeviceBuffer<std::uint32_t> failedFlags, failedList, failedCount;
    PinnedBuffer<std::uint32_t> hostFailed;
    // The launch in flight.
    bool launched = false;
    ForceView out;
    std::vector<std::uint32_t> subset;
    std::vector<BodyRange> subsetRuns;  ///< the subset's bodies as runs of adjacent groups (tree order)
    /// Per run {first, count, offset into the packed outputs}, on the host (3 per run) and the device, and the packed
    /// outputs (4 per body of the subset) where the tree's order is the caller's.
    std::vector<std::uint32_t> hostPackedRuns;
    std::vector<uint4> hostPackingRuns;  ///< the same runs as the device takes them
    DeviceBuffer<uint4> packedRuns;
    DeviceBuffer<double> packedForces;
    std::size_t numPacked = 0;
    // Page-locked staging: the caller's arrays are copied in (or out) on all cores and moved by DMA at full PCIe
    // speed; a pageable copy runs at a fifth of it and blocks the host until the device is done.
    PinnedBuffer<double> hostPositions;  ///< 3 n
    /// 4 n: all outputs in the caller's order, or a subset's in the tree's order when the caller's order differs.
    PinnedBuffer<double> hostForces;
    detail::StagedCopier staging{kStagingPiece};  ///< large uploads (lists, trees) and periodic downloads
    InteractionCounts counts64;
    std::vector<std::uint64_t> listBodies, listCells;  ///< per group, for the interaction counts
    detail::CudaEvent start, kernelsStart, kernelsStop, stop;
    /// Recorded after each output's copy into hostForces (a whole launch): finishResident copies one component out
    /// while the next still comes over.
    std::array<detail::CudaEvent, 4> forceCopied;
  };

  template <class T>
  void uploadVector(DeviceBuffer<T>& buffer, const std::vector<T>& values) {
    buffer.reserve(std::max<std::size_t>(values.size(), 1));
    copyToDevice(buffer.data(), values.data(), values.size());
  }

  /// For setTree, with nothing in flight: large arrays through the page-locked staging buffers (uploadStaged), small
  /// ones directly. A new tree's topology, order and masses are ~150 MB at 2^22 bodies; copied from pageable memory
  /// they ran at a fifth of the bus's speed with the GPU idle, as the first call on each tree waits for them. (Not for
  /// setLists, which may run beside a launch: a third staged piece would wait for the DMA queued behind its kernels.)
  template <class T>
  void uploadTreeVector(DeviceBuffer<T>& buffer, const std::vector<T>& values) {
    buffer.reserve(std::max<std::size_t>(values.size(), 1));
    uploadFromHost(buffer.data(), values.data(), values.size());
  }

  /// Uploads of at least this many bytes go through the page-locked staging buffers (uploadFromHost).
  static constexpr std::size_t kStagedBytes = std::size_t{1} << 20;
  /// The staging buffers' piece: large enough that a piece's DMA runs at the bus's speed, small enough that the host
  /// copy of one overlaps the DMA of the next.
  static constexpr std::size_t kStagingPiece = std::size_t{64} << 20;

  template <class T>
  void uploadFromHost(T* device, const T* host, std::size_t count, cudaStream_t on = nullptr) {
    if (count * sizeof(T) >= kStagedBytes) {
      uploadStaged(device, host, count * sizeof(T), on);
    } else {
      copyToDevice(device, host, count, on);
    }
  }

  /// Copies `bytes` from host memory to the device through the two page-locked staging buffers in turns: the host
  /// fills one (on all cores) while the DMA of the other runs. Returns when the last piece is queued. On stream `on`
  /// (null: the engine's stream).
  void uploadStaged(void* device, const void* host, std::size_t bytes, cudaStream_t on = nullptr) {
    res.staging.upload(device, host, bytes, on != nullptr ? on : stream.get());
    stats.bytesToDevice += bytes;
  }

  /// Copies `bytes` from the device to host memory through the two page-locked staging buffers in turns: the DMA of
  /// one piece runs while the host copies the one before it out (on all cores). A DMA into pageable memory runs at
  /// 6-10 GB/s on the H200's host (a periodic call's 512 MB of forces at 2^24 took 50-90 ms). Returns when every
  /// byte is in host memory (the stream is then idle).
  void downloadStaged(void* host, const void* device, std::size_t bytes) {
    // Smaller pieces than uploads' (16 MiB by default): the host copy of the last piece is not overlapped (~1 ms).
    res.staging.download(host, device, bytes, stream.get(), config.stagedDownloadPieceBytes);
    stats.bytesFromDevice += bytes;
  }

  void setTree(const TreeTopology& topology, const SourceView& bodies) {
    static_assert(sizeof(BodyRange) == sizeof(uint2), "BodyRange must match uint2 for the upload");
    drainPipeline();  // as evaluateDirectIn
    ResidentTree& r = res;
    const std::size_t n = topology.numBodies();
    MATCHA_ASSERT(bodies.count == n, "setTree: the tree and the bodies differ in number");
    MATCHA_ASSERT(n < (std::size_t{1} << 31) && topology.numCells() < (std::size_t{1} << 31),
                  "more than 2^31 bodies or cells");
    MATCHA_ASSERT(topology.relativeTolerance.size() == topology.numGroups(), "setTree: a tolerance per group needed");
    // stats stay the last evaluation's (lastCallStats): the periodic solver hands a tree over after evaluating it.
    if (n != r.numBodies) r.mirror = false;
    r.ballsKept = false;  // balls are a tree's: its first launch gives them
    r.driftedBefore = false;
    r.sampleAwaitsCaller = false;
    r.numBodies = static_cast<std::uint32_t>(n);
    r.numCells = static_cast<std::uint32_t>(topology.numCells());
    r.numGroups = static_cast<std::uint32_t>(topology.numGroups());
    r.levelOffsets = topology.levelOffsets;
    r.groups = topology.groups;
    r.gathered = !topology.order.empty();
    r.quadrupole = topology.multipole == MultipoleOrder::quadrupole;
    r.theta = topology.theta;
    r.cellBodies.reserve(r.numCells);
    uploadFromHost(r.cellBodies.data(), reinterpret_cast<const uint2*>(topology.cellBodies.data()), r.numCells);
    r.groupBodies.reserve(r.numGroups);
    uploadFromHost(r.groupBodies.data(), reinterpret_cast<const uint2*>(topology.groups.data()), r.numGroups);
    uploadTreeVector(r.firstChild, topology.firstChild);
    uploadTreeVector(r.numChildren, topology.numChildren);
    uploadTreeVector(r.cellCentre, topology.cellCentre);
    uploadTreeVector(r.cellHalfSide, topology.cellHalfSide);
    uploadTreeVector(r.tolerance, topology.relativeTolerance);
    if (r.gathered) uploadTreeVector(r.order, topology.order);
    // Masses in the tree's order.
    for (auto* buffer : {&r.x, &r.y, &r.z, &r.mass, &r.outX, &r.outY, &r.outZ, &r.outPot}) buffer->reserve(n);
    if (r.gathered) {
      for (auto* buffer :
           {&r.callerX, &r.callerY, &r.callerZ, &r.callerOutX, &r.callerOutY, &r.callerOutZ, &r.callerOutPot}) {
        buffer->reserve(n);
      }
      // The masses through the position gather, from callerMass, which keeps them in the caller's order for tree
      // predictions (callerX may hold the engine's copy of the bodies); y and z land in scratch the first launch
      // overwrites.
      r.callerMass.reserve(n);
      uploadFromHost(r.callerMass.data(), bodies.mass, n);
      detail::launchGatherPositions(r.callerMass.data(), r.callerMass.data(), r.callerMass.data(), r.order.data(),
                                    r.numBodies, r.mass.data(), r.y.data(), r.z.data(), stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("gatherPositionsKernel", config.synchronizeAfterLaunch);
    } else {
      uploadFromHost(r.mass.data(), bodies.mass, n);
    }
    for (auto* buffer : {&r.cellX, &r.cellY, &r.cellZ, &r.cellMass, &r.halfExtent, &r.bmax, &r.openingRadius}) {
      buffer->reserve(r.numCells);
    }
    for (auto& buffer : r.quadrupole7) buffer.reserve(r.quadrupole ? r.numCells : 1);
    for (auto* buffer : {&r.groupCentre, &r.groupHalf}) buffer->reserve(3 * std::size_t{r.numGroups});
    r.groupLists.reserve(r.numGroups);
    // Lists start empty: a group without one has no cells and no bodies.
    MATCHA_CUDA_CHECK(cudaMemsetAsync(r.groupLists.data(), 0, r.numGroups * sizeof(uint4), stream.get()));
    r.cellTop = r.bodyTop = 0;
    r.failedFlags.reserve(r.numGroups);
    r.failedList.reserve(r.numGroups);
    r.failedCount.reserve(1);
    r.hostFailed.reserve(std::size_t{r.numGroups} + 1);
    r.listBodies.assign(r.numGroups, 0);
    r.listCells.assign(r.numGroups, 0);
    // The warp tasks come with the lists (launchResidentIn): the longest are cut by the lists' lengths.
    r.numTasks = 0;
    r.longestTask = std::numeric_limits<double>::infinity();
    r.tasksSorted = false;
    r.taskCounter.reserve(1);
    r.hasTree = true;
    r.refitted = false;
    stream.synchronize();  // treeTasks goes out of scope
  }

  void dropLists() {
    MATCHA_ASSERT(res.hasTree, "dropLists before setTree");
    MATCHA_CUDA_CHECK(cudaMemsetAsync(res.groupLists.data(), 0, res.numGroups * sizeof(uint4), stream.get()));
    res.cellTop = res.bodyTop = 0;
    std::fill(res.listBodies.begin(), res.listBodies.end(), 0);
    std::fill(res.listCells.begin(), res.listCells.end(), 0);
    res.tasksSorted = false;
  }

  /// Grows an arena to hold `needed` entries, keeping its first `used`.
  void growArena(DeviceBuffer<std::uint32_t>& arena, std::uint64_t used, std::uint64_t needed) {
    if (needed <= arena.capacity()) return;
    MATCHA_ASSERT(needed < (std::uint64_t{1} << 32), "resident lists exceed 2^32 entries");
    DeviceBuffer<std::uint32_t> bigger;
    bigger.reserve(needed + needed / 4);
    if (used > 0) {
      MATCHA_CUDA_CHECK(cudaMemcpyAsync(bigger.data(), arena.data(), used * sizeof(std::uint32_t),
                                        cudaMemcpyDeviceToDevice, stream.get()));
    }
    stream.synchronize();
    arena = std::move(bigger);
  }

  void setLists(const InteractionPlan& plan) {
    ResidentTree& r = res;
    MATCHA_ASSERT(r.hasTree, "setLists before setTree");
    MATCHA_ASSERT(plan.groupIds.size() == plan.numGroups(), "setLists needs a group id per list");
    const auto numLists = static_cast<std::uint32_t>(plan.numGroups());
    if (numLists == 0) return;
    // Cells straight into the arena; ranges, offsets, ids and the lists' places in the body arena to staging; then, on
    // the device, the expansion of the ranges into the body arena and the descriptors.
    MATCHA_ASSERT(r.cellTop + plan.cellList.size() < (std::uint64_t{1} << 32), "resident lists exceed 2^32 cells");
    growArena(r.cellArena, r.cellTop, r.cellTop + plan.cellList.size() + 1);
    uploadStaged(r.cellArena.data() + r.cellTop, plan.cellList.data(), plan.cellList.size() * sizeof(std::uint32_t));
    r.stagingRanges.reserve(std::max<std::size_t>(plan.bodyList.size(), 1));
    uploadStaged(r.stagingRanges.data(), plan.bodyList.data(), plan.bodyList.size() * sizeof(BodyRange));
    uploadVector(r.stagingRangeOffsets, plan.bodyListOffsets);
    uploadVector(r.stagingCellOffsets, plan.cellListOffsets);
    uploadVector(r.stagingIds, plan.groupIds);
    // Each list's j-bodies, as the walk counted them, laid end to end in the body arena (64-bit sums: the arena is
    // indexed in 32 bits, which the solver's maxBatchEntries keeps it within).
    MATCHA_ASSERT(plan.listBodyCounts.size() == numLists, "setLists needs the walk's j-body count per list");
    r.countsFree.synchronize();  // the last setLists' copies out of hostCounts are done
    r.hostCounts.reserve(2 * std::size_t{numLists});
    std::uint64_t total = 0;
    for (std::uint32_t k = 0; k < numLists; ++k) {
      r.hostCounts.data()[k] = plan.listBodyCounts[k];
      MATCHA_ASSERT(r.bodyTop + total < (std::uint64_t{1} << 32), "resident lists exceed 2^32 j-bodies");
      r.hostCounts.data()[numLists + k] = static_cast<std::uint32_t>(total);
      total += plan.listBodyCounts[k];
    }
    MATCHA_ASSERT(r.bodyTop + total < (std::uint64_t{1} << 32), "resident lists exceed 2^32 j-bodies");
    r.counts.reserve(numLists);
    r.bodyOffsets.reserve(numLists);
    copyToDevice(r.counts.data(), r.hostCounts.data(), numLists);
    copyToDevice(r.bodyOffsets.data(), r.hostCounts.data() + numLists, numLists);
    growArena(r.bodyArena, r.bodyTop, r.bodyTop + total + 1);
    detail::InstallArgs args{};
    args.numLists = numLists;
    args.groupIds = r.stagingIds.data();
    args.ranges = r.stagingRanges.data();
    args.rangeOffsets = r.stagingRangeOffsets.data();
    args.cellOffsets = r.stagingCellOffsets.data();
    args.counts = r.counts.data();
    args.bodyOffsets = r.bodyOffsets.data();
    args.bodyTop = static_cast<std::uint32_t>(r.bodyTop);
    args.cellTop = static_cast<std::uint32_t>(r.cellTop);
    args.bodyArena = r.bodyArena.data();
    args.groupLists = r.groupLists.data();
    detail::launchInstallLists(args, stream.get());
    MATCHA_CUDA_CHECK_LAUNCH("installListsKernel", config.synchronizeAfterLaunch);
    r.cellTop += plan.cellList.size();
    r.bodyTop += total;
    for (std::uint32_t k = 0; k < numLists; ++k) {
      const std::uint32_t g = plan.groupIds[k];
      MATCHA_ASSERT(g < r.numGroups, "setLists: group id outside the tree");
      r.listCells[g] = plan.cellListOffsets[k + 1] - plan.cellListOffsets[k];
      r.listBodies[g] = plan.listBodyCounts[k];
    }
    r.tasksSorted = false;
    // The next call refills hostCounts once these copies are done (countsFree). Not waiting here lets a solver hand
    // over a batch's lists while the engine still evaluates the batch before.
    r.countsFree.record(stream.get());
  }

  /// Copies a sample of the engine's copy of the bodies (ResidentTree::kSampleBodies of them) to the host, for
  /// finishResident to compare with `caller`'s, bit for bit.
  void sampleCopy(const SourceView& caller) {
    ResidentTree& r = res;
    const std::uint32_t count = std::min(ResidentTree::kSampleBodies, r.numBodies);
    r.sample.reserve(3 * std::size_t{ResidentTree::kSampleBodies});
    r.hostSample.reserve(3 * std::size_t{ResidentTree::kSampleBodies});
    detail::launchSamplePositions(r.callerX.data(), r.callerY.data(), r.callerZ.data(), r.numBodies, count,
                                  r.sample.data(), stream.get());
    MATCHA_CUDA_CHECK_LAUNCH("samplePositionsKernel", config.synchronizeAfterLaunch);
    copyToHost(r.hostSample.data(), r.sample.data(), 3 * std::size_t{count});
    r.sampleTaken = true;
    r.sampleAgainst = caller;
  }

  /// A drifted launch's kicked bodies' velocities (every body's at a long-range step's start) to the device, through
  /// the page-locked staging; returns how many of them go through the kicked list (0 where every body was kicked).
  std::uint32_t uploadKicked(const BodyUpdate& update) {
    ResidentTree& r = res;
    const std::uint32_t n = r.numBodies;
    std::uint32_t numKicked = 0;
    if (update.kickedAll) {
      r.hostPositions.reserve(3 * std::size_t{n});
      const double* from[3] = {update.vx, update.vy, update.vz};
      double* onDevice[3] = {r.callerVX.data(), r.callerVY.data(), r.callerVZ.data()};
      for (int d = 0; d < 3; ++d) {
        double* slot = r.hostPositions.data() + std::size_t(d) * n;
        detail::parallelCopy(slot, from[d], n * sizeof(double));
        copyToDevice(onDevice[d], slot, n);
      }
    } else {
      numKicked = static_cast<std::uint32_t>(update.kicked.size());
      r.hostPositions.reserve(3 * std::max<std::size_t>(numKicked, 1));
      r.hostKickedIds.reserve(std::max<std::size_t>(numKicked, 1));
      const double* const from[3] = {update.vx, update.vy, update.vz};
      if (numKicked > 0) {
        detail::gatherTriples(r.hostPositions.data(), from, update.kicked);
        detail::parallelCopy(r.hostKickedIds.data(), update.kicked.data(), numKicked * sizeof(std::uint32_t));
      }
      r.kickedVelocities.reserve(3 * std::max<std::size_t>(numKicked, 1));
      r.kickedIds.reserve(std::max<std::size_t>(numKicked, 1));
      copyToDevice(r.kickedIds.data(), r.hostKickedIds.data(), numKicked);
      copyToDevice(r.kickedVelocities.data(), r.hostPositions.data(), 3 * std::size_t{numKicked});
    }
    return numKicked;
  }

  /// BodyUpdate::drift on the copy: the kicked bodies' velocities (uploadKicked) in, then the drift, the wrap and the
  /// paths continued.
  void driftCopy(const BodyDrift& drift, std::uint32_t numKicked) {
    ResidentTree& r = res;
    detail::launchScatterVelocities(r.kickedIds.data(), r.kickedVelocities.data(), numKicked, r.callerVX.data(),
                                    r.callerVY.data(), r.callerVZ.data(), stream.get());
    MATCHA_CUDA_CHECK_LAUNCH("scatterVelocitiesKernel", config.synchronizeAfterLaunch);
    const detail::DriftedBodies bodiesToDrift{r.callerX.data(),  r.callerY.data(),  r.callerZ.data(),
                                              r.callerVX.data(), r.callerVY.data(), r.callerVZ.data(),
                                              r.x.data(),        r.y.data(),        r.z.data()};
    detail::launchDriftBodies(bodiesToDrift, r.numBodies, drift, stream.get());
    MATCHA_CUDA_CHECK_LAUNCH("driftBodiesKernel", config.synchronizeAfterLaunch);
  }

  /// Whether the sample sampleCopy took (copied to the host: after a synchronization) differs from the caller's
  /// positions it was taken against, bit for bit.
  bool sampleDiffers() {
    ResidentTree& r = res;
    const std::uint32_t count = std::min(ResidentTree::kSampleBodies, r.numBodies);
    const double* caller[3] = {r.sampleAgainst.x, r.sampleAgainst.y, r.sampleAgainst.z};
    for (std::uint32_t k = 0; k < count; ++k) {
      const std::uint32_t i = detail::sampleIndex(k, r.numBodies, count);
      for (int d = 0; d < 3; ++d) {
        const double device = r.hostSample.data()[std::size_t(d) * count + k];
        if (std::memcmp(&device, caller[d] + i, sizeof(double)) != 0) return true;
      }
    }
    return false;
  }

  DriftCheck driftResident(const SourceView& bodies, const BodyUpdate& update, std::uint32_t maxOutside) {
    ResidentTree& r = res;
    MATCHA_ASSERT(update.motion == BodyMotion::drifted && !update.driftedBefore,
                  "driftResident takes the update of a drifted launch");
    MATCHA_ASSERT(r.mirror && r.refitted && !r.gathered && r.ballsKept && !r.driftedBefore,
                  "driftResident without the bodies' copy, their balls and a launch before on this tree");
    const std::uint32_t n = r.numBodies;
    driftCopy(update.drift, uploadKicked(update));
    sampleCopy(bodies);
    r.outsideIds.reserve(std::max<std::uint32_t>(maxOutside, 1));
    r.outsideCount.reserve(1);
    r.hostOutside.reserve(std::size_t{maxOutside} + 1);
    MATCHA_CUDA_CHECK(cudaMemsetAsync(r.outsideCount.data(), 0, sizeof(std::uint32_t), stream.get()));
    const detail::BallsOfBodies balls{r.callerX.data(), r.callerY.data(), r.callerZ.data(),   r.ballX.data(),
                                      r.ballY.data(),   r.ballZ.data(),   r.ballRadius.data()};
    detail::launchBodiesOutsideBalls(balls, n, update.drift.boxSize, maxOutside, r.outsideIds.data(),
                                     r.outsideCount.data(), stream.get());
    MATCHA_CUDA_CHECK_LAUNCH("bodiesOutsideBallsKernel", config.synchronizeAfterLaunch);
    copyToHost(r.hostOutside.data(), r.outsideCount.data(), 1);
    copyToHost(r.hostOutside.data() + 1, r.outsideIds.data(), maxOutside);
    stream.synchronize();
    r.sampleTaken = false;
    r.sampleAwaitsCaller = update.positionsPending;
    DriftCheck check;
    check.mismatch = !update.positionsPending && sampleDiffers();
    if (check.mismatch) {
      r.mirror = false;  // the next launch gives the positions
      r.ballsKept = false;
      return check;
    }
    check.numOutside = r.hostOutside.data()[0];
    if (check.numOutside <= maxOutside) {
      check.outside.assign(r.hostOutside.data() + 1, r.hostOutside.data() + 1 + check.numOutside);
      std::sort(check.outside.begin(), check.outside.end());
    }
    r.driftedBefore = true;
    return check;
  }

  template <class Real>
  void launchResidentIn(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                        std::span<const std::uint32_t> groups, const BodyUpdate& update) {
    drainPipeline();  // as evaluateDirectIn
    ResidentTree& r = res;
    const std::uint32_t n = r.numBodies;
    const bool all = groups.empty();
    const BodyMotion motion = update.motion;
    const bool advance = motion == BodyMotion::advanced;
    const bool drifted = motion == BodyMotion::drifted;
    MATCHA_ASSERT(!advance || r.mirror, "launchResident: BodyMotion::advanced without the bodies' velocities");
    // A drifted launch continues each path from the last launch's positions, in the tree's order (x, y, z).
    MATCHA_ASSERT(!drifted || (r.mirror && r.refitted && !r.gathered),
                  "launchResident: BodyMotion::drifted without the bodies' copy and a launch before on this tree");
    const bool upload = motion == BodyMotion::moved || (motion == BodyMotion::unchanged && !r.refitted);
    const bool refitNeeded = upload || advance || drifted;
    if (motion == BodyMotion::moved) r.mirror = update.vx != nullptr;
    // Positions go to the caller's order first where the tree's differs or the engine keeps its copy of the bodies.
    const bool inCallerOrder = r.gathered || r.mirror;
    if (r.mirror) {
      for (auto* buffer : {&r.callerX, &r.callerY, &r.callerZ, &r.callerVX, &r.callerVY, &r.callerVZ, &r.callerOutX,
                           &r.callerOutY, &r.callerOutZ}) {
        buffer->reserve(n);  // allocated once: a copy kept since an earlier tree is in them already
      }
    }
    stats = CudaCallStats{};
    r.start.record(stream.get());
    // The sample driftResident took before the caller drifted its positions, compared at this launch's finish.
    r.sampleTaken = motion == BodyMotion::drifted && update.driftedBefore && r.sampleAwaitsCaller;
    r.sampleAwaitsCaller = false;
    if (motion != BodyMotion::drifted) r.driftedBefore = false;
    if (upload) {
      // Positions (and velocities to keep), through page-locked staging: each coordinate goes over (asynchronously)
      // while the next is staged.
      const bool velocities = motion == BodyMotion::moved && r.mirror;
      const bool balls = velocities && update.ballRadius != nullptr;
      // The radii (floats) after the six arrays, in as many doubles as they fill.
      const std::size_t radiusSlots = balls ? (std::size_t{n} + 1) / 2 : 0;
      r.hostPositions.reserve((velocities ? 6 : 3) * std::size_t{n} + radiusSlots);
      double* staged = r.hostPositions.data();
      const double* arrays[6] = {bodies.x, bodies.y, bodies.z, update.vx, update.vy, update.vz};
      double* onDevice[6] = {inCallerOrder ? r.callerX.data() : r.x.data(),
                             inCallerOrder ? r.callerY.data() : r.y.data(),
                             inCallerOrder ? r.callerZ.data() : r.z.data(),
                             r.callerVX.data(),
                             r.callerVY.data(),
                             r.callerVZ.data()};
      for (int d = 0; d < (velocities ? 6 : 3); ++d) {
        double* slot = staged + std::size_t(d) * n;
        detail::parallelCopy(slot, arrays[d], n * sizeof(double));
        copyToDevice(onDevice[d], slot, n);
      }
      // The balls about these positions, for driftResident until the next launch that moves the bodies.
      r.ballsKept = balls;
      if (balls) {
        for (auto* buffer : {&r.ballX, &r.ballY, &r.ballZ}) buffer->reserve(n);
        r.ballRadius.reserve(n);
        copyOnDevice(r.ballX.data(), r.callerX.data(), n);
        copyOnDevice(r.ballY.data(), r.callerY.data(), n);
        copyOnDevice(r.ballZ.data(), r.callerZ.data(), n);
        auto* radii = reinterpret_cast<float*>(staged + 6 * std::size_t{n});
        detail::parallelCopy(radii, update.ballRadius, n * sizeof(float));
        copyToDevice(r.ballRadius.data(), radii, n);
      }
    }
    std::uint32_t numKicked = 0, numPlaced = 0;
    MATCHA_ASSERT(!drifted || update.driftedBefore == r.driftedBefore,
                  "launchResident: BodyMotion::drifted says driftResident ran when it did not, or not when it did");
    if (drifted && !update.driftedBefore) numKicked = uploadKicked(update);
    if (drifted) {
      // The placed bodies' places.
      numPlaced = static_cast<std::uint32_t>(update.placed.size());
      r.placedIds.reserve(std::max<std::size_t>(numPlaced, 1));
      r.placedPoints.reserve(3 * std::max<std::size_t>(numPlaced, 1));
      copyToDevice(r.placedIds.data(), update.placed.data(), numPlaced);
      copyToDevice(r.placedPoints.data(), update.placedPoints, 3 * std::size_t{numPlaced});
    }
    // Periodic lists (NearFieldEngine: the periodic solver's reuse) take evaluatePlan's periodic kernel and no check.
    const bool periodic = gravity.periodic.enabled();
    const detail::PlanVariant<Real>* variant = planVariantFor<Real>(false, r.quadrupole, gravity, out);
    // Tasks: all groups' in longest-first order (sorted again after lists changed), or those of a few groups.
    std::uint32_t numTasks = r.numTasks;
    const uint4* taskList = r.sortedTasks.data();
    if (!all) {
      // Longest first, as the whole tree's tasks are sorted on the device: the kernel takes tasks in order, and a
      // long task taken last leaves the GPU idle but for it (a solver's batch is a few waves of tasks).
      const double cellWeight = r.quadrupole ? kQuadrupoleEntryWeight : 1.0;
      // Tasks whose bodies need no forces (block time steps: none ends its step here) are left out; where the tree's
      // order is the caller's, the rows are the bodies.
      const bool someRows = update.timeBin != nullptr && !r.gathered;
      const auto anyActive = [&](std::uint32_t first, std::uint32_t rows) {
        for (std::uint32_t i = first; i < first + rows; ++i) {
          if (update.timeBin[i] >= update.lowestActiveBin) return true;
        }
        return false;
      };
      // On every core, in chunks of groups joined in the groups' order, then sorted there (the order is unique: the
      // same tasks in the same places as one core's loop and stable sort gave). Late in a comoving box nearly every
      // step is such a subset, and the GPU waits while the host scans the bins and sorts the tasks.
      const std::size_t numChunks = (groups.size() + kSubsetGroupsPerChunk - 1) / kSubsetGroupsPerChunk;
      if (r.chunkTasks.size() < numChunks) {
        r.chunkTasks.resize(numChunks);
        r.chunkCosts.resize(numChunks);
      }
      detail::parallelForEach(numChunks, [&](std::size_t c) {
        std::vector<uint4>& tasksOfChunk = r.chunkTasks[c];
        std::vector<double>& costsOfChunk = r.chunkCosts[c];
        tasksOfChunk.clear();
        costsOfChunk.clear();
        const std::size_t end = std::min(groups.size(), (c + 1) * kSubsetGroupsPerChunk);
        for (std::size_t k = c * kSubsetGroupsPerChunk; k < end; ++k) {
          const std::uint32_t g = groups[k];
          MATCHA_ASSERT(g < r.numGroups, "launchResident: group id outside the tree");
          const double entries = double(r.listBodies[g]) + double(r.listCells[g]) * cellWeight;
          // Cut as in the last whole launch: a group whose lists did not change gets the same sums.
          forEachBalancedWarpTask<Real>(r.groups[g], entries, r.longestTask,
                                        [&](std::uint32_t first, std::uint32_t rows, int kind) {
                                          if (someRows && !anyActive(first, rows)) return;
                                          tasksOfChunk.push_back(uint4{g, first, rows, static_cast<unsigned>(kind)});
                                          costsOfChunk.push_back(entries * taskCostPerEntry(kind));
                                        });
        }
      });
      r.hostSubsetTasks.clear();
      r.hostSubsetCosts.clear();
      for (std::size_t c = 0; c < numChunks; ++c) {
        r.hostSubsetTasks.insert(r.hostSubsetTasks.end(), r.chunkTasks[c].begin(), r.chunkTasks[c].end());
        r.hostSubsetCosts.insert(r.hostSubsetCosts.end(), r.chunkCosts[c].begin(), r.chunkCosts[c].end());
      }
      detail::orderLongestFirst(r.hostSubsetCosts, r.subsetOrder);
      r.hostSortedSubsetTasks.resize(r.hostSubsetTasks.size());
      for (std::size_t k = 0; k < r.subsetOrder.size(); ++k) {
        r.hostSortedSubsetTasks[k] = r.hostSubsetTasks[r.subsetOrder[k]];
      }
      r.hostSubsetTasks.swap(r.hostSortedSubsetTasks);
      numTasks = static_cast<std::uint32_t>(r.hostSubsetTasks.size());
      uploadVector(r.subsetTasks, r.hostSubsetTasks);
      r.subsetGroups.reserve(groups.size());
      copyToDevice(r.subsetGroups.data(), groups.data(), groups.size());
      taskList = r.subsetTasks.data();
    }
    r.kernelsStart.record(stream.get());
    if (advance) {
      const detail::MirrorBodies mirror{r.callerX.data(),    r.callerY.data(),    r.callerZ.data(),
                                        r.callerVX.data(),   r.callerVY.data(),   r.callerVZ.data(),
                                        r.callerOutX.data(), r.callerOutY.data(), r.callerOutZ.data()};
      detail::launchAdvanceBodies(mirror, n, update.advance, stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("advanceBodiesKernel", config.synchronizeAfterLaunch);
      sampleCopy(bodies);
      if (update.prediction != nullptr) {
        // The next tree's inputs, from the copy as this launch moved it and the accelerations of the launches before,
        // which the kernels below replace.
        const TreePredictionRequest& request = *update.prediction;
        const bool rateKnown = request.earlierAx != nullptr;
        if (rateKnown) {
          const float* earlier[3] = {request.earlierAx, request.earlierAy, request.earlierAz};
          for (int d = 0; d < 3; ++d) {
            uploadFromHost(treePredictor.earlierAcceleration(d, n), earlier[d], n);
          }
        }
        detail::PredictionBodies predicted;
        predicted.x = r.callerX.data();
        predicted.y = r.callerY.data();
        predicted.z = r.callerZ.data();
        predicted.vx = r.callerVX.data();
        predicted.vy = r.callerVY.data();
        predicted.vz = r.callerVZ.data();
        predicted.ax = r.callerOutX.data();
        predicted.ay = r.callerOutY.data();
        predicted.az = r.callerOutZ.data();
        predicted.mass = r.gathered ? r.callerMass.data() : r.mass.data();
        predicted.count = n;
        treePredictor.enqueue(predicted, request, rateKnown, stream.get());
      }
    }
    if (drifted) {
      if (!update.driftedBefore) {
        driftCopy(update.drift, numKicked);
        sampleCopy(bodies);  // the caller's positions in the box, against the copy's
      }
      r.driftedBefore = false;
      detail::launchPlaceBodies(r.placedIds.data(), r.placedPoints.data(), numPlaced, r.x.data(), r.y.data(),
                                r.z.data(), stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("placeBodiesKernel", config.synchronizeAfterLaunch);
    }
    MATCHA_ASSERT(update.prediction == nullptr || advance, "a tree prediction asked of a launch that does not advance");
    if (refitNeeded && inCallerOrder && !drifted) {
      if (r.gathered) {
        detail::launchGatherPositions(r.callerX.data(), r.callerY.data(), r.callerZ.data(), r.order.data(), n,
                                      r.x.data(), r.y.data(), r.z.data(), stream.get());
        MATCHA_CUDA_CHECK_LAUNCH("gatherPositionsKernel", config.synchronizeAfterLaunch);
      } else {
        copyOnDevice(r.x.data(), r.callerX.data(), n);
        copyOnDevice(r.y.data(), r.callerY.data(), n);
        copyOnDevice(r.z.data(), r.callerZ.data(), n);
      }
    }
    if (all && !r.tasksSorted) {
      // The groups' warp tasks for their current lists, the longest cut (forEachBalancedWarpTask), then ordered by
      // cost on the device.
      const double cellWeight = r.quadrupole ? kQuadrupoleEntryWeight : 1.0;
      const auto entriesOf = [&](std::uint32_t g) {
        return double(r.listBodies[g]) + double(r.listCells[g]) * cellWeight;
      };
      double totalCost = 0.0;
      for (std::uint32_t g = 0; g < r.numGroups; ++g) {
        forEachWarpTask<Real>(r.groups[g], [&](std::uint32_t, std::uint32_t, int kind) {
          totalCost += entriesOf(g) * taskCostPerEntry(kind);
        });
      }
      const double longest = longestTaskCost(totalCost, *variant);
      r.longestTask = longest;
      r.hostTasks.clear();
      for (std::uint32_t g = 0; g < r.numGroups; ++g) {
        forEachBalancedWarpTask<Real>(r.groups[g], entriesOf(g), longest,
                                      [&](std::uint32_t first, std::uint32_t rows, int kind) {
                                        r.hostTasks.push_back(uint4{g, first, rows, static_cast<unsigned>(kind)});
                                      });
      }
      MATCHA_ASSERT(r.hostTasks.size() <= std::numeric_limits<std::uint32_t>::max(), "too many warp tasks");
      r.numTasks = static_cast<std::uint32_t>(r.hostTasks.size());
      numTasks = r.numTasks;
      uploadVector(r.tasks, r.hostTasks);
      for (auto* buffer : {&r.taskKeys, &r.sortedKeys}) buffer->reserve(std::max<std::uint32_t>(r.numTasks, 1));
      r.sortedTasks.reserve(std::max<std::uint32_t>(r.numTasks, 1));
      detail::TaskCostModel model{};
      model.cellWeight = r.quadrupole ? kQuadrupoleEntryWeight : 1.0;
      for (int kind = 0; kind < detail::kNumPlanTaskKinds; ++kind) model.costPerEntry[kind] = taskCostPerEntry(kind);
      detail::launchTaskKeys(r.tasks.data(), r.numTasks, r.groupLists.data(), model, r.taskKeys.data(), stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("taskKeysKernel", config.synchronizeAfterLaunch);
      const std::size_t sortBytes = detail::sortTasksScratchBytes(r.numTasks);
      r.scratch.reserve(std::max<std::size_t>(sortBytes, 1));
      detail::sortTasks(r.scratch.data(), sortBytes, r.taskKeys.data(), r.sortedKeys.data(), r.tasks.data(),
                        r.sortedTasks.data(), r.numTasks, stream.get());
      r.tasksSorted = true;
      taskList = r.sortedTasks.data();  // reserved anew above
    }
    // Refit, deepest level first.
    const RefitBodies refitBodies{r.x.data(), r.y.data(), r.z.data(), r.mass.data(), nullptr};
    RefitCells refit;
    refit.bodies = nullptr;
    refit.firstChild = r.firstChild.data();
    refit.numChildren = r.numChildren.data();
    refit.centre = r.cellCentre.data();
    refit.halfSide = r.cellHalfSide.data();
    refit.mass = r.cellMass.data();
    refit.x = r.cellX.data();
    refit.y = r.cellY.data();
    refit.z = r.cellZ.data();
    if (r.quadrupole) {
      for (int k = 0; k < 7; ++k) refit.quadrupole[k] = r.quadrupole7[k].data();
    }
    refit.halfExtent = r.halfExtent.data();
    refit.bmax = r.bmax.data();
    refit.openingRadius = r.openingRadius.data();
    refit.bodies = reinterpret_cast<const BodyRange*>(r.cellBodies.data());
    if (refitNeeded) {
      for (int level = static_cast<int>(r.levelOffsets.size()) - 2; level >= 0; --level) {
        detail::launchRefitLevel(refitBodies, refit, r.levelOffsets[level], r.levelOffsets[level + 1], r.theta,
                                 stream.get());
        MATCHA_CUDA_CHECK_LAUNCH("refitLevelKernel", config.synchronizeAfterLaunch);
      }
      detail::launchGroupBoxes(r.x.data(), r.y.data(), r.z.data(), r.groupBodies.data(), r.numGroups,
                               r.groupCentre.data(), r.groupHalf.data(), stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("groupBoxesKernel", config.synchronizeAfterLaunch);
      r.refitted = true;
    }
    // The check.
    MATCHA_CUDA_CHECK(cudaMemsetAsync(r.failedFlags.data(), 0, r.numGroups * sizeof(std::uint32_t), stream.get()));
    MATCHA_CUDA_CHECK(cudaMemsetAsync(r.failedCount.data(), 0, sizeof(std::uint32_t), stream.get()));
    detail::CheckArgs check{};
    check.groups = all ? nullptr : r.subsetGroups.data();
    check.numGroups = all ? r.numGroups : static_cast<std::uint32_t>(groups.size());
    check.groupLists = r.groupLists.data();
    check.cellList = r.cellArena.data();
    check.cellBodies = r.cellBodies.data();
    check.groupBodies = r.groupBodies.data();
    check.cellX = r.cellX.data();
    check.cellY = r.cellY.data();
    check.cellZ = r.cellZ.data();
    check.cellMass = r.cellMass.data();
    check.openingRadius = r.openingRadius.data();
    check.bmax = r.bmax.data();
    check.groupCentres = r.groupCentre.data();
    check.groupHalves = r.groupHalf.data();
    check.tolerance = r.tolerance.data();
    check.failedFlags = r.failedFlags.data();
    check.failedList = r.failedList.data();
    check.failedCount = r.failedCount.data();
    if (!periodic) {
      detail::launchCheckLists(check, r.quadrupole, stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("checkListsKernel", config.synchronizeAfterLaunch);
    }
    // The group x list kernel.
    if (config.poisonDeviceOutputs) {
      for (auto* buffer : {&r.outX, &r.outY, &r.outZ, &r.outPot}) {
        MATCHA_CUDA_CHECK(cudaMemsetAsync(buffer->data(), 0xff, n * sizeof(double), stream.get()));
      }
    }
    MATCHA_CUDA_CHECK(cudaMemsetAsync(r.taskCounter.data(), 0, sizeof(std::uint32_t), stream.get()));
    detail::PlanArgs<Real> args{};
    args.sources = {r.x.data(), r.y.data(), r.z.data(), r.mass.data()};
    args.cells = {r.cellX.data(), r.cellY.data(), r.cellZ.data(), r.cellMass.data()};
    if (r.quadrupole) {
      args.quadrupoles = {r.quadrupole7[0].data(), r.quadrupole7[1].data(), r.quadrupole7[2].data(),
                          r.quadrupole7[3].data(), r.quadrupole7[4].data(), r.quadrupole7[5].data(),
                          r.quadrupole7[6].data()};
    }
    args.tasks = taskList;
    args.numTasks = numTasks;
    args.taskCounter = r.taskCounter.data();
    args.groupCentres = r.groupCentre.data();
    args.groupLists = r.groupLists.data();
    args.expandedBodies = r.bodyArena.data();
    args.cellList = r.cellArena.data();
    args.eps2 = static_cast<Real>(gravity.eps2());
    args.eps2Double = gravity.eps2();
    args.inverseSoftening = inverseSoftening(gravity.eps2());
    args.G = gravity.G;
    args.out = {r.outX.data(), r.outY.data(), r.outZ.data(), out.pot != nullptr ? r.outPot.data() : nullptr};
    if (periodic) setPeriodicArgs(gravity.periodic, args);
    const auto warpsPerBlock = static_cast<std::uint64_t>(variant->threads / 32);
    const auto numBlocks = static_cast<unsigned>(std::max<std::uint64_t>(
        1, std::min<std::uint64_t>(std::uint64_t(selection.numSMs) * blocksPerSM(variant->kernel, variant->threads),
                                   (numTasks + warpsPerBlock - 1) / warpsPerBlock)));
    if (numTasks > 0) {
      variant->launch(numBlocks, stream.get(), args);
      MATCHA_CUDA_CHECK_LAUNCH("planKernel", config.synchronizeAfterLaunch);
    }
    // Outputs back: all of them (scattered into the caller's order on the device), or a subset's, one copy per run of
    // groups whose bodies are adjacent: a streamed batch is one run, where a copy per group (4 x 1.5 million pageable
    // copies at 2^28 bodies) took 48 s.
    r.subsetRuns.clear();
    if (!all) {
      for (const std::uint32_t g : groups) {
        const BodyRange range = r.groups[g];
        if (!r.subsetRuns.empty() && r.subsetRuns.back().last == range.first) {
          r.subsetRuns.back().last = range.last;
        } else {
          r.subsetRuns.push_back(range);
        }
      }
    }
    const bool packed = !all && !r.gathered;
    if (packed) {
      // The subset's outputs packed on the device: one copy per component back (one per run took ~18 ms a call at
      // 2^24 bodies, thousands of runs, on the H200).
      std::vector<uint4>& packing = r.hostPackingRuns;
      packing.resize(r.subsetRuns.size());
      r.hostPackedRuns.resize(3 * r.subsetRuns.size());
      std::size_t offset = 0;
      for (std::size_t k = 0; k < r.subsetRuns.size(); ++k) {
        const BodyRange range = r.subsetRuns[k];
        packing[k] = uint4{range.first, range.size(), static_cast<unsigned>(offset), 0u};
        r.hostPackedRuns[3 * k] = range.first;
        r.hostPackedRuns[3 * k + 1] = range.size();
        r.hostPackedRuns[3 * k + 2] = static_cast<std::uint32_t>(offset);
        offset += range.size();
      }
      r.numPacked = offset;
      uploadVector(r.packedRuns, packing);
      r.packedForces.reserve(std::max<std::size_t>(4 * offset, 1));
      detail::launchPackRuns(args.out, r.packedRuns.data(), static_cast<std::uint32_t>(packing.size()),
                             r.packedForces.data(), offset, stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("packRunsKernel", config.synchronizeAfterLaunch);
    }
    if (r.gathered && (all || r.mirror)) {
      // Into the caller's order: the outputs of a whole launch, and every launch's accelerations for the engine's copy
      // of the bodies (a subset's scatter rewrites the other bodies with what they hold).
      const detail::DeviceForces callerOut{r.callerOutX.data(), r.callerOutY.data(), r.callerOutZ.data(),
                                           all && out.pot != nullptr ? r.callerOutPot.data() : nullptr};
      detail::launchScatterForces(args.out, r.order.data(), n, callerOut, stream.get());
      MATCHA_CUDA_CHECK_LAUNCH("scatterForcesKernel", config.synchronizeAfterLaunch);
    } else if (r.mirror) {
      copyOnDevice(r.callerOutX.data(), r.outX.data(), n);
      copyOnDevice(r.callerOutY.data(), r.outY.data(), n);
      copyOnDevice(r.callerOutZ.data(), r.outZ.data(), n);
    }
    r.kernelsStop.record(stream.get());
    if (all) {
      // Into page-locked staging; finishResident copies them out on all cores.
      const double* from[4] = {
          r.gathered ? r.callerOutX.data() : r.outX.data(), r.gathered ? r.callerOutY.data() : r.outY.data(),
          r.gathered ? r.callerOutZ.data() : r.outZ.data(), r.gathered ? r.callerOutPot.data() : r.outPot.data()};
      r.hostForces.reserve(4 * std::size_t{n});
      for (int c = 0; c < (out.pot != nullptr ? 4 : 3); ++c) {
        copyToHost(r.hostForces.data() + static_cast<std::size_t>(c) * n, from[c], n);
        r.forceCopied[c].record(stream.get());
      }
    } else {
      // A subset's outputs, in the tree's order, into page-locked staging too: a copy into pageable memory would hold
      // the host until the kernels are done, and the solver walks the next batch meanwhile.
      r.hostForces.reserve(4 * std::size_t{n});
      for (int c = 0; packed && c < (out.pot != nullptr ? 4 : 3); ++c) {
        copyToHost(r.hostForces.data() + c * r.numPacked, r.packedForces.data() + c * r.numPacked, r.numPacked);
      }
      // In the caller's other order (a repair's few groups): run by run, into their places in the tree's order.
      for (std::size_t k = 0; !packed && k < r.subsetRuns.size(); ++k) {
        const BodyRange range = r.subsetRuns[k];
        for (int c = 0; c < 4; ++c) {
          if (c == 3 && out.pot == nullptr) continue;
          const double* from = (c == 0 ? r.outX : c == 1 ? r.outY : c == 2 ? r.outZ : r.outPot).data();
          copyToHost(r.hostForces.data() + static_cast<std::size_t>(c) * n + range.first, from + range.first,
                     range.size());
        }
      }
    }
    copyToHost(r.hostFailed.data(), r.failedCount.data(), 1);
    copyToHost(r.hostFailed.data() + 1, r.failedList.data(), check.numGroups);  // at most the groups checked
    r.stop.record(stream.get());
    r.launched = true;
    r.out = out;
    r.subset.assign(groups.begin(), groups.end());
    // Interactions, from the list lengths kept at setLists.
    r.counts64 = {};
    const auto addGroup = [&](std::uint32_t g) {
      const std::uint64_t targets = r.groups[g].size();
      r.counts64.bodyBody += targets * r.listBodies[g];
      r.counts64.bodyCell += targets * r.listCells[g];
    };
    if (all) {
      for (std::uint32_t g = 0; g < r.numGroups; ++g) addGroup(g);
    } else {
      // The rows of the tasks launched: those that hold no body in need of a force were left out.
      for (const uint4& task : r.hostSubsetTasks) {
        r.counts64.bodyBody += std::uint64_t{task.z} * r.listBodies[task.x];
        r.counts64.bodyCell += std::uint64_t{task.z} * r.listCells[task.x];
      }
    }
    stats.numTasks = numTasks;
    char text[128];
    std::snprintf(text, sizeof text, "resident plan %s%s p%d (%u warp tasks, %u blocks)%s", periodic ? "periodic " : "",
                  r.quadrupole ? "quad" : "mono", variant->tile, numTasks, numBlocks,
                  variant->potential ? "" : ", accelerations only");
    stats.kernel = text;
  }

  void discardResident() {
    ResidentTree& r = res;
    if (!r.launched) return;
    r.launched = false;
    r.sampleTaken = false;
    r.stop.synchronize();
    // The copy was advanced for a call that did not come as announced: it may no longer be the caller's bodies.
    r.mirror = false;
    r.driftedBefore = false;
    r.sampleAwaitsCaller = false;
  }

  ResidentResult finishResident() {
    ResidentTree& r = res;
    MATCHA_ASSERT(r.launched, "finishResident without a launch");
    r.launched = false;
    if (r.subset.empty()) {
      const std::size_t n = r.numBodies;
      double* to[4] = {r.out.ax, r.out.ay, r.out.az, r.out.pot};
      for (int c = 0; c < (r.out.pot != nullptr ? 4 : 3); ++c) {
        r.forceCopied[c].synchronize();
        detail::parallelCopy(to[c], r.hostForces.data() + static_cast<std::size_t>(c) * n, n * sizeof(double));
      }
    }
    r.stop.synchronize();
    if (r.subset.empty()) {
      // Copied out above, component by component.
    } else if (!r.gathered) {
      double* to[4] = {r.out.ax, r.out.ay, r.out.az, r.out.pot};
      for (int c = 0; c < (r.out.pot != nullptr ? 4 : 3); ++c) {
        detail::scatterRuns(to[c], r.hostForces.data() + c * r.numPacked, r.hostPackedRuns.data(), r.subsetRuns.size());
      }
    } else {
      const std::uint32_t n = r.numBodies;
      // The order is kept on the device only; fetch what the subset needs, run by run (the CUDA engine owns no thread
      // pool; a repair's subset is few bodies).
      std::vector<std::uint32_t> order;
      for (const BodyRange range : r.subsetRuns) {
        order.resize(range.size());
        MATCHA_CUDA_CHECK(cudaMemcpy(order.data(), r.order.data() + range.first, range.size() * sizeof(std::uint32_t),
                                     cudaMemcpyDeviceToHost));
        for (std::uint32_t i = range.first; i < range.last; ++i) {
          const std::uint32_t j = order[i - range.first];
          r.out.ax[j] = r.hostForces.data()[i];
          r.out.ay[j] = r.hostForces.data()[std::size_t{n} + i];
          r.out.az[j] = r.hostForces.data()[2 * std::size_t{n} + i];
          if (r.out.pot != nullptr) r.out.pot[j] = r.hostForces.data()[3 * std::size_t{n} + i];
        }
      }
    }
    ResidentResult result;
    if (r.sampleTaken) {
      r.sampleTaken = false;
      result.advanceMismatch = sampleDiffers();
      if (result.advanceMismatch) r.mirror = false;
    }
    result.counts = r.counts64;
    const std::uint32_t numFailed = r.hostFailed.data()[0];
    result.failedGroups.assign(r.hostFailed.data() + 1, r.hostFailed.data() + 1 + numFailed);
    std::sort(result.failedGroups.begin(), result.failedGroups.end());
    stats.kernelMilliseconds = r.kernelsStop.millisecondsSince(r.kernelsStart);
    stats.uploadMilliseconds = r.kernelsStart.millisecondsSince(r.start);
    stats.downloadMilliseconds = r.stop.millisecondsSince(r.kernelsStop);
    stats.totalMilliseconds = r.stop.millisecondsSince(r.start);
    result.timings = {1e-3 * stats.uploadMilliseconds, 1e-3 * stats.kernelMilliseconds,
                      1e-3 * stats.downloadMilliseconds};
    return result;
  }

  static constexpr int kNumBuckets = 64;
  /// Groups per block of evaluatePlanIn's passes on all cores.
  static constexpr std::size_t kGroupsPerBlock = 256;

  Precision precision;
  CudaKernelConfig config;
  DeviceSelection selection;
  detail::CudaStream stream;
  detail::CudaStream copyStream;  ///< a pipelined batch's list copies (PlanPart::pipelined)
  // Declared after `selection`: their events and staging buffers belong to the engine's device (created on the
  // runtime's default device, they failed every staged upload of an engine on another: cudaEventRecord on its
  // stream, an invalid resource handle, rank 1 of 2 on the 2-GPU H200 machine).
  PlanBatches batches;
  ResidentTree res;
  detail::DeviceKeySorter keySorter{config.device};
  detail::PageLockedMemoryResource pageLocked;  ///< transferMemory's
  detail::TreePredictor treePredictor{config.device};
  detail::CudaEvent start, kernelsStart, kernelsStop, stop;
  std::unordered_map<const void*, int> occupancy;
  CudaCallStats stats;

  DeviceBuffer<double> sourceX, sourceY, sourceZ, sourceMass;

  DeviceBuffer<double> cellX, cellY, cellZ, cellMass;
  std::array<DeviceBuffer<double>, 7> cellQuadrupole;  ///< xx, yy, zz, xy, xz, yz, trace
  DeviceBuffer<double> outX, outY, outZ, outPot;
  DeviceBuffer<double4_16a> partial;
  DeviceBuffer<double> tileBoxes;               ///< 6 per j-tile of the direct kernel
  DeviceBuffer<float> partialMagnitude;         ///< float direct sums: DirectArgs::partialMagnitude
  DeviceBuffer<std::uint32_t> cancelledBodies;  ///< float direct sums: count, then bodies (appendToBodyList)
  PinnedBuffer<std::uint32_t> hostCancelledCount;
  std::array<PlanListBuffers, 2> planLists;  ///< evaluatePlanIn's lists; pipelined batches take them in turns
  DeviceBuffer<std::uint32_t> expandedBodies, taskCounter;  ///< evaluatePlanIn's (a pipelined batch: its set's)
  std::vector<std::uint64_t> groupListBodies;               ///< evaluatePlanIn: each group's list's j-bodies
  std::vector<std::uint64_t> blockBucketTasks;  ///< evaluatePlanIn: tasks per block of groups and cost bucket
  std::vector<BodyRange> runs;
  /// The pipeline's downloads (queueBatchDownload): each batch's runs, where they end, and an event per batch recorded
  /// once its copies land (a deque: events stay put as it grows, and are kept for the next calls).
  struct LandingOutputs {
    std::vector<BodyRange> runs;
    std::vector<std::size_t> ends;
    std::deque<detail::CudaEvent> landed;
    std::vector<BodyRange> pieces;  ///< copyLandedOutputs': a batch's runs cut for the cores
    std::size_t numBodies = 0;
    std::uint64_t bytes = 0;
    void clear() {
      runs.clear();
      ends.clear();
      numBodies = 0;
      bytes = 0;
    }
  };
  LandingOutputs landing;
  detail::CudaStream outputCopies;  ///< the pipeline's downloads, beside the kernels of the batches after
};

CudaEngine::CudaEngine(Precision precision, const CudaKernelConfig& config)
    : impl_(std::make_unique<Impl>(precision, config)) {}

CudaEngine::~CudaEngine() = default;

std::string CudaEngine::name() const {
  return std::string(impl_->precision == Precision::float32 ? "cuda-float" : "cuda-double") + " (" +
         impl_->selection.name + ")";
}

namespace {

/// What evaluatePlan and evaluatePlanBatch require of their arguments.
void requireValidPlanCall(const SourceView& sources, const InteractionPlan& plan, const GravityParams& gravity,
                          const ForceView& out, Precision precision) {
  MATCHA_ASSERT(plan.groupCentres.size() == 3 * plan.numGroups(), "plan has no centre for some group");
  MATCHA_ASSERT(plan.cellListOffsets.size() == plan.numGroups() + 1, "plan cell offsets malformed");
  MATCHA_ASSERT(plan.bodyListOffsets.size() == plan.numGroups() + 1, "plan body offsets malformed");
  MATCHA_ASSERT(plan.cellListOffsets.back() == plan.cellList.size(), "plan cell list size differs from its offsets");
  MATCHA_ASSERT(plan.bodyListOffsets.back() == plan.bodyList.size(), "plan body list size differs from its offsets");
  MATCHA_ASSERT(out.count == sources.count, "output size differs from source count");
  MATCHA_ASSERT(sources.count < (std::size_t{1} << 32), "too many bodies for 32-bit indices");
  if (gravity.periodic.enabled() && precision != Precision::float32) {
    throw InputError(
        "the CUDA engine's periodic short range runs in float only (its double precision serves direct sums)");
  }
}

}  // namespace

InteractionCounts CudaEngine::evaluatePlan(const SourceView& sources, const CellMultipoles& cells,
                                           const InteractionPlan& plan, const GravityParams& gravity,
                                           const ForceView& out) {
  requireValidPlanCall(sources, plan, gravity, out, impl_->precision);
  impl_->stats = CudaCallStats{};
  if (plan.numGroups() == 0) return {};
  impl_->selectDevice();
  if (impl_->precision == Precision::float32) return impl_->evaluatePlanIn<float>(sources, cells, plan, gravity, out);
  return impl_->evaluatePlanIn<double>(sources, cells, plan, gravity, out);
}

InteractionCounts CudaEngine::evaluatePlanBatch(const SourceView& sources, const CellMultipoles& cells,
                                                const InteractionPlan& batch, const GravityParams& gravity,
                                                const ForceView& out, PlanBatch where) {
  requireValidPlanCall(sources, batch, gravity, out, impl_->precision);
  impl_->stats = CudaCallStats{};
  impl_->selectDevice();
  if (impl_->precision == Precision::float32) {
    return impl_->evaluatePlanBatchIn<float>(sources, cells, batch, gravity, out, where);
  }
  return impl_->evaluatePlanBatchIn<double>(sources, cells, batch, gravity, out, where);
}

void CudaEngine::setTree(const TreeTopology& topology, const SourceView& bodies) {
  impl_->selectDevice();
  impl_->setTree(topology, bodies);
}

void CudaEngine::setLists(const InteractionPlan& plan) {
  impl_->selectDevice();
  impl_->setLists(plan);
}

void CudaEngine::dropLists() {
  impl_->selectDevice();
  impl_->dropLists();
}

void CudaEngine::launchResident(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                                std::span<const std::uint32_t> groups, const BodyUpdate& update) {
  if (gravity.periodic.enabled() && impl_->precision != Precision::float32) {
    throw InputError(
        "the CUDA engine's periodic short range runs in float only (its double precision serves direct sums)");
  }
  MATCHA_ASSERT(impl_->res.hasTree, "launchResident before setTree");
  MATCHA_ASSERT(!impl_->res.launched, "launchResident while a launch is in flight");
  MATCHA_ASSERT(bodies.count == impl_->res.numBodies && out.count == bodies.count,
                "launchResident: the tree and the bodies differ in number");
  impl_->selectDevice();
  if (impl_->precision == Precision::float32) {
    impl_->launchResidentIn<float>(bodies, gravity, out, groups, update);
  } else {
    impl_->launchResidentIn<double>(bodies, gravity, out, groups, update);
  }
}

DriftCheck CudaEngine::driftResident(const SourceView& bodies, const BodyUpdate& update, std::uint32_t maxOutside) {
  MATCHA_ASSERT(impl_->res.hasTree, "driftResident before setTree");
  MATCHA_ASSERT(!impl_->res.launched, "driftResident while a launch is in flight");
  MATCHA_ASSERT(bodies.count == impl_->res.numBodies, "driftResident: the tree and the bodies differ in number");
  impl_->selectDevice();
  return impl_->driftResident(bodies, update, maxOutside);
}

ResidentResult CudaEngine::finishResident() {
  impl_->selectDevice();
  return impl_->finishResident();
}

void CudaEngine::discardResident() {
  impl_->selectDevice();
  impl_->discardResident();
}

InteractionCounts CudaEngine::evaluateDirect(const SourceView& sources, const GravityParams& gravity,
                                             const ForceView& out) {
  MATCHA_ASSERT(out.count == sources.count, "direct summation output size differs from source count");
  MATCHA_ASSERT(sources.count < (std::size_t{1} << 32), "too many bodies for 32-bit indices");
  impl_->stats = CudaCallStats{};
  if (sources.count == 0) return {};
  impl_->selectDevice();
  if (impl_->precision == Precision::float32) return impl_->evaluateDirectIn<float>(sources, gravity, out);
  return impl_->evaluateDirectIn<double>(sources, gravity, out);
}

EngineTimings CudaEngine::lastTimings() const {
  const CudaCallStats& stats = impl_->stats;
  return {1e-3 * stats.uploadMilliseconds, 1e-3 * stats.kernelMilliseconds, 1e-3 * stats.downloadMilliseconds};
}

double CudaEngine::lastKernelMilliseconds() const { return impl_->stats.kernelMilliseconds; }

const CudaCallStats& CudaEngine::lastCallStats() const { return impl_->stats; }

Precision CudaEngine::precision() const { return impl_->precision; }

bool CudaEngine::takeTreePrediction(const PredictedTreeView& out) { return impl_->treePredictor.take(out); }

bool CudaEngine::sortKeys(std::span<const std::uint64_t> keys, int keyBits, std::span<std::uint64_t> sorted,
                          std::span<std::uint32_t> order) {
  if (keys.size() < kMinSortKeys) return false;
  impl_->keySorter.sort(keys, keyBits, sorted, order);
  return true;
}

std::pmr::memory_resource* CudaEngine::transferMemory() { return &impl_->pageLocked; }

bool CudaEngine::periodicShortRange() const { return impl_->precision == Precision::float32; }

const CudaKernelConfig& CudaEngine::config() const { return impl_->config; }

void CudaEngine::setConfig(const CudaKernelConfig& config) {
  if (config.device != impl_->config.device) throw InputError("CudaEngine::setConfig cannot change the device");
  impl_->validate(config);
  impl_->config = config;
}

CudaDirectConfig CudaEngine::directConfigFor(std::size_t numBodies) const {
  return impl_->directConfigForSize(numBodies);
}

std::vector<CudaDirectConfig> CudaEngine::supportedDirectConfigs(Precision precision) {
  return precision == Precision::float32 ? directConfigsOf<float>() : directConfigsOf<double>();
}

std::vector<std::uint32_t> CudaEngine::supportedPlanTileSizes(Precision precision) {
  return precision == Precision::float32 ? planTileSizesOf<float>() : planTileSizesOf<double>();
}

// ---------------------------------------------------------------------------------------------------------------
// The seam used by engine_factory.cpp

namespace detail {

bool cudaEngineCompiledIn() { return true; }

std::unique_ptr<NearFieldEngine> makeCudaEngineImpl(Precision precision, int device) {
  CudaKernelConfig config;
  config.device = device;
  return std::make_unique<CudaEngine>(precision, config);
}

}  // namespace detail

}  // namespace matcha::gpu
