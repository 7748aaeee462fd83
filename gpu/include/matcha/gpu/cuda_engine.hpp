// SPDX-License-Identifier: MIT
// The CUDA near-field engine (DESIGN.md §3): the CpuEngine's twin on the GPU. No CUDA type appears here (STYLE.md
// habit 6); the implementation lives in gpu/cuda/*.cu behind a pimpl, and this header is only usable in a build with
// CUDA (MATCHA_HAVE_CUDA). Plain C++ that merely wants "the GPU if there is one" goes through makeEngine() instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "matcha/core/near_field_engine.hpp"
#include "matcha/gpu/cpu_engine.hpp"

namespace matcha::gpu {

/// Shape of the tiled all-pairs kernel (GPU Gems 3 ch. 31). Only the shapes compiled into the engine are accepted
/// (CudaEngine::supportedDirectConfigs). The defaults are a good all-round shape; with CudaKernelConfig::autoDirect
/// (the default) the engine picks the fastest shape measured on an H100 for each N instead (bench/RESULTS.md).
struct CudaDirectConfig {
  std::uint32_t threadsPerBlock = 128;
  std::uint32_t bodiesPerThread = 4;  ///< i-bodies per thread (register blocking)
  std::uint32_t threadsPerBody = 1;   ///< q: threads sharing one i-body's row (GPU Gems §31.4), power of two <= 8
  std::uint32_t tileSize = 128;       ///< p: sources per shared-memory tile
  /// Blocks the j-range is split over (kirin: fills the GPU when there are few i-bodies); 0 = chosen per call so
  /// that the grid fills the GPU.
  std::uint32_t numSplits = 0;

  std::uint32_t bodiesPerBlock() const { return threadsPerBlock / threadsPerBody * bodiesPerThread; }
  std::string label() const;  ///< "T128/I4/q1/p128"
  bool sameShape(const CudaDirectConfig& other) const;
};

/// Engine settings.
struct CudaKernelConfig {
  /// Direct-summation shape; when `autoDirect` is set, evaluateDirect picks the shape by N instead (see
  /// CudaEngine::directConfigFor) and only `direct.numSplits` is used.
  CudaDirectConfig direct;
  bool autoDirect = true;
  std::uint32_t planTileSize = 64;      ///< sources per warp tile in the group x list kernel (32, 64 or 128)
  int device = 0;                       ///< CUDA device ordinal
  bool poisonDeviceOutputs = false;     ///< tests: fill device outputs with NaN before each call
  bool synchronizeAfterLaunch = false;  ///< debug: wait for and check every kernel right after its launch
  /// Periodic calls download their forces through the page-locked staging buffers in pieces of this many bytes (at
  /// most 64 MiB), arrays of at least one piece; tests set a few KiB so that small calls take that path.
  std::size_t stagedDownloadPieceBytes = std::size_t{16} << 20;
  /// The longest warp task of a group x list launch, as a fraction of one resident warp's share of the launch's
  /// work: a longer task of one thread per body is cut into tasks of fewer rows (the same sums: bit for bit with
  /// monopole cells, to float rounding with quadrupoles). 0: no cut.
  double longestTaskShare = 0.5;
};

/// Bytes and timings of the last evaluatePlan/evaluateDirect call.
struct CudaCallStats {
  double kernelMilliseconds = 0.0;    ///< CUDA-event time from the first to the last kernel of the call
  double totalMilliseconds = 0.0;     ///< CUDA-event time of the whole call: uploads, kernels, downloads
  double uploadMilliseconds = 0.0;    ///< from the call's start to its first kernel (the copies to the device)
  double downloadMilliseconds = 0.0;  ///< from its last kernel to its end (the copies back)
  std::uint64_t bytesToDevice = 0;
  std::uint64_t bytesFromDevice = 0;
  /// Bytes the same plan would have needed as packed float4 lists (16 bytes per list entry per group), instead of
  /// index ranges into device-resident bodies and cells (DESIGN.md §4); 0 for direct summation.
  std::uint64_t packedListBytes = 0;
  std::uint64_t numTasks = 0;   ///< warp tasks (plan) or thread blocks (direct)
  std::uint32_t numSplits = 0;  ///< direct summation: blocks per i-block along j
  /// Float direct summation: bodies whose float sums cancelled and were summed again in double (pair_interaction.hpp:
  /// floatSumCancelled).
  std::uint32_t bodiesSummedInDouble = 0;
  std::string kernel;  ///< which variant ran, e.g. "direct T128/I4/q1/p128 x2 splits"
};

class CudaEngine final : public NearFieldEngine {
 public:
  /// float32: float pair arithmetic relative to each group's (block's) centre, per-tile partial sums added in
  /// double (Chamomile). float64: all in double (the GPU direct-summation reference). Selects `config.device`,
  /// creates a stream and events; allocates device memory lazily, growing it as calls need.
  /// @throws CudaError when the device cannot be used; InputError for an unsupported configuration
  explicit CudaEngine(Precision precision = Precision::float32, const CudaKernelConfig& config = {});
  ~CudaEngine() override;
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  /// "cuda-float (NVIDIA H100 80GB HBM3)".
  std::string name() const override;

  /// As NearFieldEngine::evaluatePlan. Uploads the sources, cells and plan (index lists), runs the group x list
  /// kernel, downloads the outputs of the plan's groups only. Synchronous: returns when `out` is written.
  InteractionCounts evaluatePlan(const SourceView& sources, const CellMultipoles& cells, const InteractionPlan& plan,
                                 const GravityParams& gravity, const ForceView& out) override;
  /// With gravity.periodic enabled: the periodic TreePM short range, as the CPU engine evaluates it (nearest images,
  /// erfc-truncated pairs and cells), in float only (the double engine throws InputError: no such kernels).
  bool periodicShortRange() const override;
  /// As NearFieldEngine::evaluatePlanBatch: the sources and cells go over once per call (with its first batch, which
  /// may hold no groups); each batch's lists, kernels and outputs as evaluatePlan's, except the groups whose warp tasks
  /// the one plan of the whole call might cut into fewer rows (longer than CudaKernelConfig::longestTaskShare of a
  /// warp's share of the cost so far): those wait for the call's last batch, when the whole cost is known, so that
  /// every group runs the one plan's tasks and gets its bits. Synchronous, as evaluatePlan.
  InteractionCounts evaluatePlanBatch(const SourceView& sources, const CellMultipoles& cells,
                                      const InteractionPlan& batch, const GravityParams& gravity, const ForceView& out,
                                      PlanBatch where) override;
  /// True: the kernels and copies run on the GPU, the host thread mostly waits for them.
  bool evaluatesOnDevice() const override { return true; }
  /// True: a pipelined call's last batch adds PlanBatch::addend as each batch's landed outputs are copied out of the
  /// staging, mostly while the GPU runs the batches after (a call in one batch adds it after its download).
  bool addsForceAddend() const override { return true; }

  /// Resident lists (NearFieldEngine): the topology, masses and lists stay on the device; each launch uploads the
  /// positions, gathers them into the tree's order, refits every cell level by level (core/cell_refit.hpp), boxes
  /// the groups, checks every list entry against the opening criterion (core/opening_criterion.hpp) and runs the
  /// group x list kernel over warp tasks, longest first when all groups are evaluated (a subset's tasks, a streamed
  /// batch's or a repair's, run in group order). launchResident returns once the work is queued. The engine keeps a
  /// copy of the bodies in the caller's order (BodyUpdate) and advances it on the device, in double, with each
  /// product and sum rounded on its own as the host's leapfrog rounds them.
  void setTree(const TreeTopology& topology, const SourceView& bodies) override;
  void setLists(const InteractionPlan& plan) override;
  void dropLists() override;
  void launchResident(const SourceView& bodies, const GravityParams& gravity, const ForceView& out,
                      std::span<const std::uint32_t> groups, const BodyUpdate& update) override;
  ResidentResult finishResident() override;
  void discardResident() override;
  bool advancesBodies() const override { return true; }
  bool checksBalls() const override { return true; }
  DriftCheck driftResident(const SourceView& bodies, const BodyUpdate& update, std::uint32_t maxOutside) override;
  /// As NearFieldEngine::predictsTrees: the prediction's kernels, the key sort and the gather run on the engine's
  /// stream within the launch (a few ms at 2^24 bodies), the copies back on a stream of their own.
  bool predictsTrees() const override { return true; }
  bool takeTreePrediction(const PredictedTreeView& out) override;

  /// As NearFieldEngine::sortKeys: CUB's radix sort on a stream of the device's highest priority, from kMinSortKeys
  /// keys on (at 2^16 the device took 0.28 ms against the host's 3.3 on the H200 machine, bench_cuda keysort/; smaller
  /// sorts, which a few thousand bodies' trees make, are left on the host unmeasured).
  bool sortKeys(std::span<const std::uint64_t> keys, int keyBits, std::span<std::uint64_t> sorted,
                std::span<std::uint32_t> order) override;
  static constexpr std::size_t kMinSortKeys = std::size_t{1} << 16;
  /// Page-locked host memory (ordinary memory where the host will not lock more): sortKeys copies keys, sorted keys
  /// and order that lie in it directly, without staging them through its own buffers on the host's cores.
  std::pmr::memory_resource* transferMemory() override;

  /// As NearFieldEngine::evaluateDirect, with the tiled all-pairs kernel. Synchronous.
  InteractionCounts evaluateDirect(const SourceView& sources, const GravityParams& gravity,
                                   const ForceView& out) override;

  /// The last call's upload, kernel and download times, from its CUDA events.
  EngineTimings lastTimings() const override;

  /// CUDA-event time of the last call's kernels (for benchmarks).
  double lastKernelMilliseconds() const;
  const CudaCallStats& lastCallStats() const;

  Precision precision() const;
  const CudaKernelConfig& config() const;
  /// @throws InputError for a shape or tile size that is not compiled in
  void setConfig(const CudaKernelConfig& config);

  /// The direct shape evaluateDirect uses for `numBodies` when CudaKernelConfig::autoDirect is set.
  CudaDirectConfig directConfigFor(std::size_t numBodies) const;

  /// Shapes compiled into the engine for `precision` (numSplits = 0).
  static std::vector<CudaDirectConfig> supportedDirectConfigs(Precision precision);
  static std::vector<std::uint32_t> supportedPlanTileSizes(Precision precision);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::gpu
