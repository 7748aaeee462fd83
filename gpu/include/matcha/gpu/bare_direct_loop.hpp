// SPDX-License-Identifier: MIT
// The measuring stick for the engine's direct kernel (bench/RESULTS.md): the tiled all-pairs loop of GPU Gems 3
// ch. 31 and nothing else. Float positions relative to one centre, one float sum per thread and j-range split, the
// self pair left in the loop (so eps must be > 0), no partial sums in double, no near-pair, zero-distance or
// cancellation rules. Its inner loop is the 13 issue slots per interaction of DESIGN.md §4 plus the shared loads, so
// its rate on a GPU is what that GPU's issue rate allows a float interaction; the engine's direct kernel carries the
// accuracy work on top and is measured against it. It calls the same pair function as the engine
// (pair_interaction.hpp: accumulatePairInteractionUnchecked).
//
// Not a solver: a float sum over up to N / splits terms is good to ~1e-5 relative, and the splits are added with
// float atomics (in no fixed order). Only usable in a build with CUDA (MATCHA_HAVE_CUDA), like cuda_engine.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"

namespace matcha::gpu {

/// Threads per block, i-bodies per thread (register blocking) and sources per shared-memory tile.
struct BareLoopShape {
  std::uint32_t threadsPerBlock = 128;
  std::uint32_t bodiesPerThread = 8;
  std::uint32_t tileSize = 256;
  std::string label() const;  ///< "T128/I8/p256"
};

/// What the last BareDirectLoop::evaluate did.
struct BareLoopStats {
  double kernelMilliseconds = 0.0;  ///< CUDA-event time of the kernel alone
  std::uint32_t numSplits = 0;      ///< j-range splits (blocks per i-block)
  std::uint64_t interactions = 0;   ///< N^2: every pair, the self pairs included
};

class BareDirectLoop {
 public:
  /// Selects `device`, creates a stream and events; device memory is allocated on the first call and grown later.
  /// @throws CudaError when the device cannot be used
  explicit BareDirectLoop(int device = 0);
  ~BareDirectLoop();
  BareDirectLoop(const BareDirectLoop&) = delete;
  BareDirectLoop& operator=(const BareDirectLoop&) = delete;

  /// The shapes compiled in: the fastest of a sweep on an H100 (bench/RESULTS.md).
  static std::vector<BareLoopShape> supportedShapes();

  /// out = G * sum over every source j != i (accelerations; potentials too unless out.pot is null). Uploads the
  /// sources, runs the loop, downloads; synchronous. The self pair's -m_i/eps is taken out of the potential on the
  /// host.
  /// @throws InputError for a shape not compiled in, eps == 0, or out.count != sources.count
  BareLoopStats evaluate(const BareLoopShape& shape, const SourceView& sources, const GravityParams& gravity,
                         const ForceView& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace matcha::gpu
