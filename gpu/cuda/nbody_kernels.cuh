// SPDX-License-Identifier: MIT
// The CUDA kernels of the near-field engine (DESIGN.md §3): the tiled all-pairs kernel for direct summation (GPU
// Gems 3 ch. 31, with kirin's splitting of the j-range over several blocks when there are too few i-bodies to fill
// the GPU), the group x list kernel that evaluates an InteractionPlan, and two helpers. Included only by the .cu
// files that instantiate them; every pair goes through matcha/core/pair_interaction.hpp.
//
// Data layout and precision (the Chamomile scheme, seeds/hamada-iitaka-2007):
//  - Bodies and cells live on the device as the host has them: structure-of-arrays doubles (x, y, z, mass). No
//    float copy with a global origin is kept: a float position relative to a global origin has already lost the
//    digits that matter for a close pair far from that origin. Instead every tile is converted while it is staged
//    in shared memory: float(x_j - c) with the difference taken in double, c the centre of the i-bodies' group (plan)
//    or box (direct). That is exactly the CPU twin's rounding, so GPU and CPU float engines agree to accumulation
//    order, and a close pair keeps ~7 significant digits of its separation wherever the group sits in the box. The
//    cost is 32 instead of 16 bytes per staged source and ~25 instructions per source (index, 4 loads, 3 double
//    subtractions, 4 conversions, one shared store), spread over the i-bodies that share the tile (up to 128 in a
//    plan's warp task, 512-1024 in the direct kernel's block). Uploading double positions once per call and
//    converting per group costs the same PCIe bytes as a float4 copy plus a double correction per group, keeps one
//    copy of the data, and gives the CPU twin's numbers. The direct kernel's blocks are 128-1024 consecutive bodies
//    (the shape's rows), so its float accuracy depends on how compact they are: the direct solver puts bodies in
//    Hilbert order first (blocks that never jump across the box), and direct plans evaluate close and strong pairs
//    again in double (pair_interaction.hpp: closePairThreshold).
//  - Each thread sums a tile's pairs in float registers and adds the tile sums into double accumulators (when its
//    share of a tile is under 32 pairs, q >= 4, it first collects ~128 terms in a float "bag"): the float error is
//    that of 32..256-term sums whatever the list length, and the double sum of the partial sums does not grow with it
//    (Chamomile's per-J-BAG partial sums).
//  - The inner loop uses accumulatePairInteractionUnchecked (no per-pair select) and the tile is evaluated again,
//    with the checked accumulatePairInteraction, only for a thread whose tile held a zero-distance pair (its own
//    body, a coincident body: singular when eps = 0) or, in direct plans, a close or strong pair: a few tiles per
//    i-body in direct summation, about one tile per group in a plan (evaluateTile).
//  - With eps > 0 every pair counts, a body's own pair too (-m_i/eps to the potential, exactly 0 to the
//    acceleration), so coincident distinct bodies feel each other's softened potential; the self pair's term is taken
//    out once per body, in double, where the body's potential is stored (pair_interaction.hpp: selfPairPotential).
//  - Direct summation also adds up what each body's float partial sums summed; a body whose sums cancelled (its |a|
//    a small fraction of that, pair_interaction.hpp: floatSumCancelled) is summed again, whole, in double by
//    sumCancelledBodiesInDoubleKernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "dependent_launch.cuh"
#include "matcha/core/pair_interaction.hpp"

namespace matcha::gpu::detail {

template <class Real>
struct Packed4;
template <>
struct Packed4<float> {
  using type = float4;
};
template <>
struct Packed4<double> {
  using type = double4_16a;
};

/// Positions and masses on the device, structure of arrays (index space of the host SourceView or CellMultipoles).
struct DeviceSoA {
  const double* x;
  const double* y;
  const double* z;
  const double* mass;
};

/// Traceless quadrupoles of the cells, structure of arrays (CellMultipoles).
struct DeviceQuadrupoles {
  const double* xx;
  const double* yy;
  const double* zz;
  const double* xy;
  const double* xz;
  const double* yz;
  const double* trace;
};

/// Where kernels write: one double per body and component, index space of the sources.
struct DeviceForces {
  double* ax;
  double* ay;
  double* az;
  double* pot;
};

/// A massless source far away pads partial tiles: it adds exactly zero (its mass is 0 and 1/r stays finite, even
/// squared and cubed) and, unlike a pad at the origin, never looks like a zero-distance pair to the fast path.
inline constexpr float kPadCoordinate = 1.0e12f;

/// Terms per float partial sum before it is flushed into the double accumulator (Chamomile's bag; the CPU twin's
/// tile is also 128 bodies). A thread whose tile share has at least kMinFlushTerms terms flushes after every tile
/// (no bag: 16 fewer registers for 4 i-bodies, which buys occupancy); smaller shares (q >= 4) collect a bag of
/// kBagTerms first, so that the conversions and double adds stay rare.
inline constexpr int kBagTerms = 128;
/// Longest float partial sum of the direct kernel (DirectShape::subTiles).
inline constexpr int kDirectPartialSumTerms = 64;
inline constexpr int kMinFlushTerms = 32;
__host__ __device__ constexpr int flushInterval(int termsPerTile) {
  return termsPerTile >= kMinFlushTerms ? 1 : (kBagTerms + termsPerTile - 1) / termsPerTile;
}

// ---------------------------------------------------------------------------------------------------------------
// Shared pieces

/// Per-thread accumulators for kBodies i-bodies: float partial sums of the current tile, the current bag, and the
/// wide total (DESIGN.md §3). For Real = double the tile sums go straight into the total.
///
/// kSharedTotals = 0: the totals live in registers (the direct kernel, most plan tasks). kSharedTotals = n > 0 (plan
/// tasks of 4 bodies per thread): the first n components (3 without the potential, 4 with it) live in the warp's
/// slice of shared memory, `sharedTotal` pointing at this lane's first slot, and reach the registers only at the end
/// (loadSharedTotals). A double total is two registers, and 4 bodies per thread need 24-32 of them beside the pair
/// loop's: at the plan kernel's 96 registers the compiler then evaluated those tasks' pairs one after the other, each
/// waiting on the last (Nsight Compute on the H200: 6.7 cycles per issued instruction against ~2.5 in the 64-row
/// tasks' loop); with shared totals it interleaves the 4 bodies' pairs. Components beyond n are never written, as a
/// register total nobody reads would be dropped by the compiler.
template <class Real, int kBodies, int kSharedTotals = 0>
struct Accumulators {
  static constexpr int kTotals = kSharedTotals > 0 ? kSharedTotals : 4;  ///< components summed in double
  double total[4][kBodies];
  double* sharedTotal = nullptr;  ///< kSharedTotals > 0: slot (c, k) at sharedTotal[(c * kBodies + k) * 32]
  __device__ __forceinline__ double& totalAt(int c, int k) {
    if constexpr (kSharedTotals > 0) {
      return sharedTotal[(c * kBodies + k) * 32];
    } else {
      return total[c][k];
    }
  }
  /// Copies the shared totals into `total` (nothing to do for register totals); the rest of `total` is 0.
  __device__ __forceinline__ void loadSharedTotals() {
    if constexpr (kSharedTotals > 0) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
#pragma unroll
        for (int k = 0; k < kBodies; ++k) total[c][k] = c < kTotals ? totalAt(c, k) : 0.0;
      }
    }
  }
  Real bag[4][kBodies];
  Real tile[4][kBodies];
  /// What the float partial sums added into `total` summed, |x| + |y| + |z| of each (pair_interaction.hpp:
  /// floatSumCancelled); kept by the callers that pass kTrackMagnitude, dead code for the others.
  Real floatMagnitude[kBodies];

  __device__ __forceinline__ void clearAll() {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
      for (int k = 0; k < kBodies; ++k) {
        if (c < kTotals) totalAt(c, k) = 0.0;
        bag[c][k] = Real(0);
      }
    }
#pragma unroll
    for (int k = 0; k < kBodies; ++k) floatMagnitude[k] = Real(0);
  }
  /// floatMagnitude += |x| + |y| + |z| of the partial sums `sums` (tile or bag), about to be added into `total`.
  __device__ __forceinline__ void addMagnitudeOf(const Real (&sums)[4][kBodies]) {
#pragma unroll
    for (int k = 0; k < kBodies; ++k) floatMagnitude[k] += fabs(sums[0][k]) + fabs(sums[1][k]) + fabs(sums[2][k]);
  }
  __device__ __forceinline__ void clearTile() {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
      for (int k = 0; k < kBodies; ++k) tile[c][k] = Real(0);
    }
  }
  __device__ __forceinline__ void addTileToBag() {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
      for (int k = 0; k < kBodies; ++k) bag[c][k] += tile[c][k];
    }
  }
  template <bool kTrackMagnitude = false>
  __device__ __forceinline__ void flushBag() {
    if constexpr (kTrackMagnitude) addMagnitudeOf(bag);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
      for (int k = 0; k < kBodies; ++k) {
        if (c < kTotals) totalAt(c, k) += static_cast<double>(bag[c][k]);
        bag[c][k] = Real(0);
      }
    }
  }
  /// reduceOverLanes for a number of lanes known at run time (a power of two <= 32).
  __device__ __forceinline__ void reduceOverLanes(int lanes) {
#pragma unroll 1
    for (int offset = lanes / 2; offset > 0; offset /= 2) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
#pragma unroll
        for (int k = 0; k < kBodies; ++k) total[c][k] += __shfl_xor_sync(0xffffffffu, total[c][k], offset);
      }
    }
  }
  /// Sums the totals over the `kLanes` consecutive lanes that share each body (kLanes a power of two <= 32).
  template <int kLanes>
  __device__ __forceinline__ void reduceOverLanes() {
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset /= 2) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
#pragma unroll
        for (int k = 0; k < kBodies; ++k) total[c][k] += __shfl_xor_sync(0xffffffffu, total[c][k], offset);
      }
    }
  }
};

/// How a tile's near pairs are treated (InteractionPlan::accurateNearPairs).
template <bool kAccurate>
struct NearPairRule {
  static constexpr bool accurate = kAccurate;  ///< float: close and strong pairs again in double (closePairThreshold)
  double eps2Double;                           ///< eps^2 for the pairs evaluated in double
};

/// The r^2 + eps^2 at or below which a pair of body (xi, yi, zi) needs the second look of evaluateTile. Double keeps
/// 1e-16 of the distance from the centre: only the zero-distance pairs (singular when eps = 0) matter there.
template <class Real, class Rule>
__device__ __forceinline__ Real nearPairThreshold(Real xi, Real yi, Real zi, Real eps2) {
  if constexpr (std::is_same_v<Real, float> && Rule::accurate) {
    return closePairThreshold(xi, yi, zi, eps2);
  } else {
    return eps2;
  }
}

/// The fast path over a tile's share: clears acc.tile and sums `kEntries` sources, every kStride-th one from
/// `first`, against the thread's bodies with accumulatePairInteractionUnchecked. With kMins = 1 or kBodies it also
/// keeps the smallest r^2 + eps^2 over the thread's bodies or per body (one FMNMX per pair; a ?: select would cost a
/// compare and a select), for evaluateTile's near-pair search; with kMins = 0 it keeps nothing else.
template <class Real, int kBodies, int kEntries, int kStride, int kUnroll, int kMins, int kSharedTotals = 0>
__device__ __forceinline__ void sumTilePairs(const typename Packed4<Real>::type* tile, int first,
                                             const Real (&xi)[kBodies], const Real (&yi)[kBodies],
                                             const Real (&zi)[kBodies], Real eps2,
                                             Accumulators<Real, kBodies, kSharedTotals>& acc,
                                             Real (&minSoftenedR2)[kMins > 0 ? kMins : 1]) {
  acc.clearTile();
#pragma unroll
  for (int k = 0; k < kMins; ++k) minSoftenedR2[k] = Real(3.0e38);
#pragma unroll kUnroll
  for (int j = 0; j < kEntries; ++j) {
    const auto source = tile[first + j * kStride];
#pragma unroll
    for (int k = 0; k < kBodies; ++k) {
      const Real softenedR2 =
          accumulatePairInteractionUnchecked<Real>(source.x - xi[k], source.y - yi[k], source.z - zi[k], source.w, eps2,
                                                   acc.tile[0][k], acc.tile[1][k], acc.tile[2][k], acc.tile[3][k]);
      if constexpr (kMins > 0) {
        Real& minimum = minSoftenedR2[kMins == 1 ? 0 : k];
        minimum = fmin(minimum, softenedR2);
      }
    }
  }
}

/// A tile for which the caller has shown that no pair is at zero distance, close or strong for any of the thread's
/// bodies (softenedR2LowerBound for the direct kernel, the warp's near-source vote for plans): the fast path alone.
/// It leaves out the FMNMX per pair that evaluateTile needs to find such pairs, one of the ~15 instructions an
/// interaction issues, and gives the same sums as evaluateTile would (that tile would not be evaluated again).
template <class Real, int kBodies, int kEntries, int kStride, int kUnroll, int kSharedTotals = 0>
__device__ __forceinline__ void evaluateFarTile(const typename Packed4<Real>::type* tile, int first,
                                                const Real (&xi)[kBodies], const Real (&yi)[kBodies],
                                                const Real (&zi)[kBodies], Real eps2,
                                                Accumulators<Real, kBodies, kSharedTotals>& acc) {
  Real noMinimum[1];
  sumTilePairs<Real, kBodies, kEntries, kStride, kUnroll, 0>(tile, first, xi, yi, zi, eps2, acc, noMinimum);
}

/// Evaluates `kEntries` sources of the shared-memory tile, every kStride-th one starting at `first`, against the
/// thread's kBodies i-bodies. The fast path (accumulatePairInteractionUnchecked) keeps the smallest r^2 + eps^2 with
/// one FMNMX per pair: per body (kPerBodyMin; registers permitting) or over all the thread's bodies. A body whose
/// tile held a zero-distance pair, or with `rule.accurate` in float a close or strong pair, gets this tile again:
///  - accurate: the close, strong and zero-distance pairs in double, with separations and masses from
///    `exactSource(slot, k, source, dx, dy, dz, mass)` (x_j - x_i and m_j in double for tile slot `slot` and the
///    thread's k-th body), straight into its double total; the other pairs again in float;
///  - otherwise: in the working precision with the checked accumulatePairInteraction (which skips the singular pairs
///    of eps = 0 and otherwise gives the fast path's sums).
/// In practice that is the tile holding the body itself (the self pair) and, rarely, one more.
template <class Real, int kBodies, int kEntries, int kStride, int kUnroll, bool kPerBodyMin, class Rule,
          class ExactSource, int kSharedTotals = 0>
__device__ __forceinline__ void evaluateTile(const typename Packed4<Real>::type* tile, int first,
                                             const Real (&xi)[kBodies], const Real (&yi)[kBodies],
                                             const Real (&zi)[kBodies], Real eps2, const Rule& rule,
                                             Accumulators<Real, kBodies, kSharedTotals>& acc,
                                             const ExactSource& exactSource) {
  constexpr int kMins = kPerBodyMin ? kBodies : 1;
  Real minSoftenedR2[kMins];
  sumTilePairs<Real, kBodies, kEntries, kStride, kUnroll, kMins>(tile, first, xi, yi, zi, eps2, acc, minSoftenedR2);
  constexpr bool accurate = std::is_same_v<Real, float> && Rule::accurate;
  const auto thresholdOf = [&](int k) { return nearPairThreshold<Real, Rule>(xi[k], yi[k], zi[k], eps2); };
  if constexpr (!kPerBodyMin) {
    Real largestThreshold = thresholdOf(0);
#pragma unroll
    for (int k = 1; k < kBodies; ++k) largestThreshold = fmax(largestThreshold, thresholdOf(k));
    if (minSoftenedR2[0] > largestThreshold) return;  // the common case (NaN falls through)
  }

#pragma unroll
  for (int k = 0; k < kBodies; ++k) {
    Real minOfBody = minSoftenedR2[kPerBodyMin ? k : 0];
    if constexpr (!kPerBodyMin) {  // rare: which of the thread's bodies had the near pair?
      minOfBody = Real(3.0e38);
#pragma unroll 1
      for (int j = 0; j < kEntries; ++j) {
        const auto source = tile[first + j * kStride];
        const Real dx = source.x - xi[k], dy = source.y - yi[k], dz = source.z - zi[k];
        minOfBody = fmin(minOfBody, dx * dx + (dy * dy + (dz * dz + eps2)));
      }
    }
    if (minOfBody > thresholdOf(k)) continue;
    acc.tile[0][k] = acc.tile[1][k] = acc.tile[2][k] = acc.tile[3][k] = Real(0);
    if constexpr (accurate) {
      // The near pairs in double, the others again in float (the same float values as the fast path gave).
      const Real threshold = thresholdOf(k);
      double ax = 0.0, ay = 0.0, az = 0.0, pot = 0.0;
#pragma unroll 1
      for (int j = 0; j < kEntries; ++j) {
        const int slot = first + j * kStride;
        const auto source = tile[slot];
        const Real dx = source.x - xi[k], dy = source.y - yi[k], dz = source.z - zi[k];
        if (dx * dx + (dy * dy + (dz * dz + eps2)) <= threshold) {
          double exactDx, exactDy, exactDz, mass;
          exactSource(slot, k, source, exactDx, exactDy, exactDz, mass);
          accumulatePairInteraction<double>(exactDx, exactDy, exactDz, mass, rule.eps2Double, ax, ay, az, pot);
        } else {
          accumulatePairInteraction<Real>(dx, dy, dz, source.w, eps2, acc.tile[0][k], acc.tile[1][k], acc.tile[2][k],
                                          acc.tile[3][k]);
        }
      }
      acc.totalAt(0, k) += ax;
      acc.totalAt(1, k) += ay;
      acc.totalAt(2, k) += az;
      if (acc.kTotals > 3) acc.totalAt(3, k) += pot;
    } else {
#pragma unroll 1
      for (int j = 0; j < kEntries; ++j) {
        const auto source = tile[first + j * kStride];
        accumulatePairInteraction<Real>(source.x - xi[k], source.y - yi[k], source.z - zi[k], source.w, eps2,
                                        acc.tile[0][k], acc.tile[1][k], acc.tile[2][k], acc.tile[3][k]);
      }
    }
  }
}

/// A lower bound of r^2 + eps^2, as accumulatePairInteractionUnchecked rounds it, for body (xi, yi, zi) and every
/// staged source whose coordinates lie in box = {min x, min y, min z, max x, max y, max z} (the same centre; the box
/// rounded outwards). Rounding is monotone: a source with x_j >= min x has fl(x_j - x_i) >= fl(min x - x_i), so each
/// |dx| is at least the gap computed here, and the fused sum of squares of larger terms is not smaller. The caller
/// still leaves a relative margin (kFarTileMargin) in case the compiler contracts the two sums differently.
template <class Real>
__device__ __forceinline__ Real softenedR2LowerBound(const Real* box, Real xi, Real yi, Real zi, Real eps2) {
  const Real gx = fmax(fmax(box[0] - xi, xi - box[3]), Real(0));
  const Real gy = fmax(fmax(box[1] - yi, yi - box[4]), Real(0));
  const Real gz = fmax(fmax(box[2] - zi, zi - box[5]), Real(0));
  return gx * gx + (gy * gy + (gz * gz + eps2));
}
/// A tile is far for a body when its lower bound times this still exceeds the body's near-pair threshold.
template <class Real>
inline constexpr Real kFarTileMargin = Real(1.0 - 1.0e-5);

/// Evaluates the quadrupole cells of a shared-memory tile (three vectors per cell: centre of mass and mass, then
/// (qxx, qyy, qzz, trace), then (qxy, qxz, qyz, -)) against the thread's i-bodies. Cells pass the opening criterion, so
/// none is close to an i-body and no pair needs a second look.
template <class Real, int kBodies, int kEntries, int kStride, int kUnroll, int kSharedTotals = 0>
__device__ __forceinline__ void evaluateQuadrupoleTile(const typename Packed4<Real>::type* cellTile, int first,
                                                       const Real (&xi)[kBodies], const Real (&yi)[kBodies],
                                                       const Real (&zi)[kBodies], Real eps2,
                                                       Accumulators<Real, kBodies, kSharedTotals>& acc) {
  acc.clearTile();
#pragma unroll kUnroll
  for (int j = 0; j < kEntries; ++j) {
    const int slot = first + j * kStride;
    const auto centre = cellTile[3 * slot];
    const auto diagonal = cellTile[3 * slot + 1];
    const auto offDiagonal = cellTile[3 * slot + 2];
    const Quadrupole<Real> q{diagonal.x,    diagonal.y,    diagonal.z, offDiagonal.x,
                             offDiagonal.y, offDiagonal.z, diagonal.w};
#pragma unroll
    for (int k = 0; k < kBodies; ++k) {
      accumulateQuadrupoleInteraction<Real>(centre.x - xi[k], centre.y - yi[k], centre.z - zi[k], centre.w, q, eps2,
                                            acc.tile[0][k], acc.tile[1][k], acc.tile[2][k], acc.tile[3][k]);
    }
  }
}

/// The periodic short range (GravityParams::periodic) of a tile of point masses: every separation at its nearest
/// image and the erfc-truncated pair, checked (accumulateTruncatedPairInteraction's selects skip the zero-distance
/// pairs of eps = 0 and the pairs beyond the cut), as the CPU engine's evaluateGroupPeriodic does per pair. No
/// near-pair search and no second look: the checked pair is needed for the cut anyway, and periodic plans are tree
/// plans. kWrap = false: the caller has shown that no separation of the tile lies beyond half a box
/// (runPlanTask: wrapFreeLimit), where nearestImage returns it unchanged, so the six compares and selects per pair
/// that it costs are left out with the same sums.
template <class Real, int kBodies, int kEntries, int kStride, int kUnroll, bool kWrap = true, int kSharedTotals = 0>
__device__ __forceinline__ void evaluatePeriodicTile(const typename Packed4<Real>::type* tile, int first,
                                                     const Real (&xi)[kBodies], const Real (&yi)[kBodies],
                                                     const Real (&zi)[kBodies], Real eps2, Real box, Real invTwoSplit,
                                                     Real cutoff2, Accumulators<Real, kBodies, kSharedTotals>& acc) {
  acc.clearTile();
#pragma unroll kUnroll
  for (int j = 0; j < kEntries; ++j) {
    const auto source = tile[first + j * kStride];
#pragma unroll
    for (int k = 0; k < kBodies; ++k) {
      const Real dx = source.x - xi[k], dy = source.y - yi[k], dz = source.z - zi[k];
      accumulateTruncatedPairInteraction<Real>(kWrap ? nearestImage(dx, box) : dx, kWrap ? nearestImage(dy, box) : dy,
                                               kWrap ? nearestImage(dz, box) : dz, source.w, eps2, invTwoSplit, cutoff2,
                                               acc.tile[0][k], acc.tile[1][k], acc.tile[2][k], acc.tile[3][k]);
    }
  }
}

/// evaluateQuadrupoleTile for the periodic short range: each cell at its nearest image, monopole + quadrupole times
/// the truncation factors at its centre of mass (accumulateTruncatedQuadrupoleInteraction, as the CPU engine).
/// kWrap as for evaluatePeriodicTile.
template <class Real, int kBodies, int kEntries, int kStride, int kUnroll, bool kWrap = true, int kSharedTotals = 0>
__device__ __forceinline__ void evaluatePeriodicQuadrupoleTile(const typename Packed4<Real>::type* cellTile, int first,
                                                               const Real (&xi)[kBodies], const Real (&yi)[kBodies],
                                                               const Real (&zi)[kBodies], Real eps2, Real box,
                                                               Real invTwoSplit,
                                                               Accumulators<Real, kBodies, kSharedTotals>& acc) {
  acc.clearTile();
#pragma unroll kUnroll
  for (int j = 0; j < kEntries; ++j) {
    const int slot = first + j * kStride;
    const auto centre = cellTile[3 * slot];
    const auto diagonal = cellTile[3 * slot + 1];
    const auto offDiagonal = cellTile[3 * slot + 2];
    const Quadrupole<Real> q{diagonal.x,    diagonal.y,    diagonal.z, offDiagonal.x,
                             offDiagonal.y, offDiagonal.z, diagonal.w};
#pragma unroll
    for (int k = 0; k < kBodies; ++k) {
      const Real dx = centre.x - xi[k], dy = centre.y - yi[k], dz = centre.z - zi[k];
      accumulateTruncatedQuadrupoleInteraction<Real>(
          kWrap ? nearestImage(dx, box) : dx, kWrap ? nearestImage(dy, box) : dy, kWrap ? nearestImage(dz, box) : dz,
          centre.w, q, eps2, invTwoSplit, acc.tile[0][k], acc.tile[1][k], acc.tile[2][k], acc.tile[3][k]);
    }
  }
}

/// evaluatePeriodicTile and evaluatePeriodicQuadrupoleTile over every `stride`-th entry of a kTile-entry tile from
/// `first`, the stride known at run time (a power of two <= kTile / 2, so that the entries come in pairs): the plan
/// kernels' tasks of one body per thread shared by 2-32 threads in one loop each instead of one per kind
/// (mergesSmallTaskKinds). The same entries in the same order, so the same sums as the kinds' own loops.
template <class Real, int kTile, bool kWrap, int kSharedTotals>
__device__ __forceinline__ void evaluatePeriodicTileStrided(const typename Packed4<Real>::type* tile, int first,
                                                            int stride, const Real (&xi)[1], const Real (&yi)[1],
                                                            const Real (&zi)[1], Real eps2, Real box, Real invTwoSplit,
                                                            Real cutoff2, Accumulators<Real, 1, kSharedTotals>& acc) {
  acc.clearTile();
  const auto pair = [&](int slot) {
    const auto source = tile[slot];
    const Real dx = source.x - xi[0], dy = source.y - yi[0], dz = source.z - zi[0];
    accumulateTruncatedPairInteraction<Real>(kWrap ? nearestImage(dx, box) : dx, kWrap ? nearestImage(dy, box) : dy,
                                             kWrap ? nearestImage(dz, box) : dz, source.w, eps2, invTwoSplit, cutoff2,
                                             acc.tile[0][0], acc.tile[1][0], acc.tile[2][0], acc.tile[3][0]);
  };
#pragma unroll 1
  for (int slot = first; slot < kTile; slot += 2 * stride) {
    pair(slot);
    pair(slot + stride);
  }
}

template <class Real, int kTile, bool kWrap, int kSharedTotals>
__device__ __forceinline__ void evaluatePeriodicQuadrupoleTileStrided(const typename Packed4<Real>::type* cellTile,
                                                                      int first, int stride, const Real (&xi)[1],
                                                                      const Real (&yi)[1], const Real (&zi)[1],
                                                                      Real eps2, Real box, Real invTwoSplit,
                                                                      Accumulators<Real, 1, kSharedTotals>& acc) {
  acc.clearTile();
  const auto cell = [&](int slot) {
    const auto centre = cellTile[3 * slot];
    const auto diagonal = cellTile[3 * slot + 1];
    const auto offDiagonal = cellTile[3 * slot + 2];
    const Quadrupole<Real> q{diagonal.x,    diagonal.y,    diagonal.z, offDiagonal.x,
                             offDiagonal.y, offDiagonal.z, diagonal.w};
    const Real dx = centre.x - xi[0], dy = centre.y - yi[0], dz = centre.z - zi[0];
    accumulateTruncatedQuadrupoleInteraction<Real>(
        kWrap ? nearestImage(dx, box) : dx, kWrap ? nearestImage(dy, box) : dy, kWrap ? nearestImage(dz, box) : dz,
        centre.w, q, eps2, invTwoSplit, acc.tile[0][0], acc.tile[1][0], acc.tile[2][0], acc.tile[3][0]);
  };
#pragma unroll 1
  for (int slot = first; slot < kTile; slot += 2 * stride) {
    cell(slot);
    cell(slot + stride);
  }
}

/// Adds the tile sums into the bag and flushes the bag every `flushTiles` tiles, a count known at run time
/// (flushInterval of the entries a thread takes per tile); with 1 the bag holds one tile's sums exactly, and the totals
/// get accumulateTile's bits.
template <class Real, int kBodies, int kSharedTotals>
__device__ __forceinline__ void accumulateTileEvery(Accumulators<Real, kBodies, kSharedTotals>& acc, int& tilesInBag,
                                                    int flushTiles) {
  acc.addTileToBag();
  if (++tilesInBag == flushTiles) {
    acc.flushBag();
    tilesInBag = 0;
  }
}

/// Adds the tile sums into the bag and flushes the bag every kFlushTiles tiles (Real = double: straight into the
/// total). kTrackMagnitude (float): also adds what each float partial sum going into the total summed into
/// acc.floatMagnitude.
template <class Real, int kBodies, int kFlushTiles, bool kTrackMagnitude = false, int kSharedTotals = 0>
__device__ __forceinline__ void accumulateTile(Accumulators<Real, kBodies, kSharedTotals>& acc, int& tilesInBag) {
  constexpr bool kTrack = kTrackMagnitude && std::is_same_v<Real, float>;
  if constexpr (std::is_same_v<Real, double> || kFlushTiles == 1) {
    if constexpr (kTrack) acc.addMagnitudeOf(acc.tile);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
#pragma unroll
      for (int k = 0; k < kBodies; ++k) {
        if (c < acc.kTotals) acc.totalAt(c, k) += static_cast<double>(acc.tile[c][k]);
      }
    }
  } else {
    acc.addTileToBag();
    if (++tilesInBag == kFlushTiles) {
      acc.template flushBag<kTrack>();
      tilesInBag = 0;
    }
  }
}

/// One staged source: position relative to the centre (difference in double, then rounded) and mass. kPeriodic: the
/// difference at its nearest image in a box of side boxSize, in double before the rounding, as the CPU engine packs it.
template <class Real, bool kPeriodic = false>
__device__ __forceinline__ typename Packed4<Real>::type makeRelativeSource(bool valid, double x, double y, double z,
                                                                           double mass, double cx, double cy, double cz,
                                                                           double boxSize = 0.0) {
  using Vec = typename Packed4<Real>::type;
  if (!valid) return Vec{Real(kPadCoordinate), Real(kPadCoordinate), Real(kPadCoordinate), Real(0)};
  double dx = x - cx, dy = y - cy, dz = z - cz;
  if constexpr (kPeriodic) {
    dx = nearestImage(dx, boxSize);
    dy = nearestImage(dy, boxSize);
    dz = nearestImage(dz, boxSize);
  }
  return Vec{static_cast<Real>(dx), static_cast<Real>(dy), static_cast<Real>(dz), static_cast<Real>(mass)};
}

/// A box coordinate relative to the centre in the working precision, rounded down (minima) or up (maxima), so that
/// the rounded box still holds every source staged by makeRelativeSource.
template <class Real>
__device__ __forceinline__ Real roundOutwards(double relative, bool up) {
  if constexpr (std::is_same_v<Real, float>) {
    return up ? __double2float_ru(relative) : __double2float_rd(relative);
  } else {
    return relative;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Direct summation: the tiled all-pairs kernel

/// Compile-time shape of a direct-kernel variant (STYLE.md habit 6): kThreads per block, kBodiesPerThread i-bodies
/// per thread (register blocking: one shared-memory load serves them all), kThreadsPerBody threads sharing each
/// i-body's row (GPU Gems §31.4 q), kTile sources per shared-memory tile (p).
template <int kThreads, int kBodiesPerThread, int kThreadsPerBody, int kTile>
struct DirectShape {
  static constexpr int threads = kThreads;
  static constexpr int bodiesPerThread = kBodiesPerThread;
  static constexpr int threadsPerBody = kThreadsPerBody;
  static constexpr int tile = kTile;
  static constexpr int rowsPerPass = kThreads / kThreadsPerBody;
  static constexpr int rows = rowsPerPass * kBodiesPerThread;       ///< i-bodies per block
  static constexpr int entriesPerThread = kTile / kThreadsPerBody;  ///< pairs per tile, thread and i-body
  static constexpr int loadsPerThread = (kTile + kThreads - 1) / kThreads;
  /// A thread's share of a tile is summed in float partial sums of at most kDirectPartialSumTerms pairs, each added
  /// into the double total. In Hilbert order the tiles next to a body hold its neighbours, whose large terms pull the
  /// same way, and the rounding of a long float sum of them grows as its length^1.5. E_max at N = 2^17 on an H100
  /// (auto shape, p = 256), before the cancellation rule (floatSumCancelled): 2.9e-6 with 256-term sums (one seed),
  /// 1.2e-6..2.4e-6 with 128 (four seeds), 0.75e-6..1.8e-6 with 64 (seven of eight seeds; one gave 5.3e-6), which
  /// costs 3.5% at N = 2^20.
  static constexpr int subTiles =
      entriesPerThread > kDirectPartialSumTerms ? entriesPerThread / kDirectPartialSumTerms : 1;
  static constexpr int entriesPerSubTile = entriesPerThread / subTiles;
  static constexpr int flushTiles = flushInterval(entriesPerSubTile);
  static constexpr int unroll = kBodiesPerThread >= 8 ? 2 : (kBodiesPerThread >= 4 ? 4 : 8);
  /// Resident blocks per SM the registers must allow (float), for the shapes where a bound beats the compiler's own
  /// choice: the largest that ptxas fits without spilling (96 registers for 128-thread blocks of 2 i-bodies per
  /// thread, 128 for 4 i-bodies). T128/I2/p256 at 96 registers ran 1.2% faster than at 117; T128/I4/p256 at 128
  /// registers 2.5% slower than at 167 (H100, N = 2^20), so it keeps the compiler's choice.
  static constexpr int minBlocksFloat = [] {
    if (kThreadsPerBody != 1) return 1;
    if (kThreads == 128 && kBodiesPerThread == 2 && kTile == 256) return 5;
    if (kThreads == 128 && kBodiesPerThread == 4 && kTile <= 128) return 4;
    if (kThreads == 256 && kBodiesPerThread == 4 && kTile == 256) return 2;
    return 1;
  }();

  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
  static_assert(kThreadsPerBody >= 1 && kThreadsPerBody <= 32 && (kThreadsPerBody & (kThreadsPerBody - 1)) == 0,
                "threads per body: a power of two within one warp");
  static_assert(kTile % 32 == 0, "tile: whole warps of sources");
  static_assert(kTile % kThreads == 0 || kThreads % kTile == 0, "tile and block must divide one another");
  static_assert(kTile % kThreadsPerBody == 0, "each thread of a body takes the same number of tile entries");
  static_assert(kBodiesPerThread >= 1 && kBodiesPerThread <= 8, "1..8 i-bodies per thread");
  static_assert(entriesPerThread % subTiles == 0, "a tile share splits into equal partial sums");
};

template <class Real>
struct DirectArgs {
  DeviceSoA sources;
  std::uint32_t numBodies;
  std::uint32_t tilesPerSplit;  ///< j-tiles per block along gridDim.y
  Real eps2;
  double eps2Double;        ///< for the pairs evaluated again in double
  double inverseSoftening;  ///< pair_interaction.hpp: inverseSoftening(eps2Double), from the host
  double G;
  DeviceForces out;         ///< written (times G) when gridDim.y == 1
  double4_16a* partial;     ///< [split * numBodies + i], sums without G, when gridDim.y > 1
  const double* tileBoxes;  ///< 6 per j-tile: min x, y, z, max x, y, z of its bodies (tileBoxesKernel)
  /// float only (null for double): what body i's float partial sums summed, [split * numBodies + i] when
  /// gridDim.y > 1, and the bodies whose float sums cancelled (floatSumCancelled) when gridDim.y == 1, as a
  /// CancelledBodies list.
  float* partialMagnitude;
  std::uint32_t* cancelledBodies;
};

/// A list of body indices on the device: list[0] counts them, list[1 ..] holds them (capacity numBodies + 1).
__device__ __forceinline__ void appendToBodyList(std::uint32_t* list, std::uint32_t i) {
  list[1 + atomicAdd(list, 1u)] = i;
}

/// Mean position of the block's i-bodies; every thread gets it. `sum`/`count` hold the thread's own on entry.
/// The mean, not the middle of the bounding box: for bodies in random order a block spans the whole system and its
/// box centre is set by the outermost few bodies, several length units from the dense core, which would put the core
/// bodies' float coordinates (and their close-pair test) at that distance; the mean stays near the core.
template <int kThreads>
__device__ __forceinline__ void blockMeanPosition(double (&sum)[3], double count, double (*scratch)[4],
                                                  double (&centre)[3]) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
    for (int d = 0; d < 3; ++d) sum[d] += __shfl_xor_sync(0xffffffffu, sum[d], offset);
    count += __shfl_xor_sync(0xffffffffu, count, offset);
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
#pragma unroll
    for (int d = 0; d < 3; ++d) scratch[warp][d] = sum[d];
    scratch[warp][3] = count;
  }
  __syncthreads();
  double total[4] = {0.0, 0.0, 0.0, 0.0};
  for (int w = 0; w < kThreads / 32; ++w) {
#pragma unroll
    for (int d = 0; d < 4; ++d) total[d] += scratch[w][d];
  }
#pragma unroll
  for (int d = 0; d < 3; ++d) centre[d] = total[3] > 0.0 ? total[d] / total[3] : 0.0;
}

/// Block (blockIdx.x, blockIdx.y): i-bodies [blockIdx.x * rows, + rows) against j-tiles
/// [blockIdx.y * tilesPerSplit, + tilesPerSplit). Writes G * sum to `out` (one split) or the sum to `partial`.
/// kPotential = false: accelerations only; out.pot is not written, and the compiler drops the potential's sums.
template <class Real, class Shape, bool kPotential>
__global__ void __launch_bounds__(Shape::threads, std::is_same_v<Real, float> ? Shape::minBlocksFloat : 1)
    directKernel(const DirectArgs<Real> args) {
  using Vec = typename Packed4<Real>::type;
  constexpr int kI = Shape::bodiesPerThread;
  constexpr int kQ = Shape::threadsPerBody;
  constexpr int kLoads = Shape::loadsPerThread;
  __shared__ Vec tile[Shape::tile];
  __shared__ double scratch[Shape::threads / 32][4];
  __shared__ Real tileBox[6];  ///< the staged tile's bounding box, relative to the centre, rounded outwards
  allowDependentLaunch();

  const std::uint32_t numBodies = args.numBodies;
  const std::uint32_t firstRow = blockIdx.x * Shape::rows;
  const int slice = threadIdx.x % kQ;
  const int rowInPass = threadIdx.x / kQ;

  // The block's centre: the mean position of its i-bodies, in double.
  double xd[kI], yd[kI], zd[kI];
  double sum[3] = {0.0, 0.0, 0.0}, count = 0.0;
#pragma unroll
  for (int k = 0; k < kI; ++k) {
    const std::uint32_t i = firstRow + rowInPass + k * Shape::rowsPerPass;
    const bool valid = i < numBodies;
    xd[k] = valid ? args.sources.x[i] : 0.0;
    yd[k] = valid ? args.sources.y[i] : 0.0;
    zd[k] = valid ? args.sources.z[i] : 0.0;
    sum[0] += xd[k];
    sum[1] += yd[k];
    sum[2] += zd[k];
    count += valid ? 1.0 : 0.0;
  }
  double centre[3];
  blockMeanPosition<Shape::threads>(sum, count, scratch, centre);
  Real xi[kI], yi[kI], zi[kI];
#pragma unroll
  for (int k = 0; k < kI; ++k) {
    xi[k] = static_cast<Real>(xd[k] - centre[0]);
    yi[k] = static_cast<Real>(yd[k] - centre[1]);
    zi[k] = static_cast<Real>(zd[k] - centre[2]);
  }
  waitForPreviousKernel();  // tileBoxesKernel

  const std::uint32_t numTiles = (numBodies + Shape::tile - 1) / Shape::tile;
  const std::uint32_t firstTile = blockIdx.y * args.tilesPerSplit;
  const std::uint32_t lastTile = min(numTiles, firstTile + args.tilesPerSplit);

  // Threads 0-5 stage one coordinate of the tile's bounding box each: minima rounded down, maxima up.
  const int boxSlot = threadIdx.x < 6 ? threadIdx.x : 0;
  const double boxCentre = boxSlot % 3 == 0 ? centre[0] : (boxSlot % 3 == 1 ? centre[1] : centre[2]);
  double boxBound = 0.0;

  // Register prefetch of the next tile's sources, so their global loads overlap the current tile's arithmetic.
  double px[kLoads], py[kLoads], pz[kLoads], pm[kLoads];
  bool pvalid[kLoads];
  const auto load = [&](std::uint32_t t) {
    if (threadIdx.x < 6) boxBound = args.tileBoxes[6 * std::size_t(t) + boxSlot];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int slot = threadIdx.x + l * Shape::threads;
      const std::uint32_t j = t * Shape::tile + slot;
      pvalid[l] = slot < Shape::tile && j < numBodies;
      if (pvalid[l]) {
        px[l] = args.sources.x[j];
        py[l] = args.sources.y[j];
        pz[l] = args.sources.z[j];
        pm[l] = args.sources.mass[j];
      }
    }
  };
  const auto stage = [&]() {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int slot = threadIdx.x + l * Shape::threads;
      if (slot < Shape::tile) {
        tile[slot] = makeRelativeSource<Real>(pvalid[l], px[l], py[l], pz[l], pm[l], centre[0], centre[1], centre[2]);
      }
    }
    if (threadIdx.x < 6) tileBox[boxSlot] = roundOutwards<Real>(boxBound - boxCentre, boxSlot >= 3);
  };

  Accumulators<Real, kI> acc;
  acc.clearAll();
  int tilesInBag = 0;
  const Real eps2 = args.eps2;
  const NearPairRule<true> rule{args.eps2Double};  // direct summation: the Chamomile-level accuracy
  if (firstTile < lastTile) load(firstTile);
  for (std::uint32_t t = firstTile; t < lastTile; ++t) {
    // Two barriers per tile: a second tile buffer (one barrier) measured no faster with T128/I2 and 3% slower with
    // T256/I4 (a spill), H100.
    __syncthreads();  // everyone is done reading the previous tile
    stage();
    __syncthreads();
    if (t + 1 < lastTile) load(t + 1);
    const auto exactSource = [&](int slot, int k, const Vec& source, double& dx, double& dy, double& dz, double& mass) {
      const std::uint32_t j = t * Shape::tile + slot;
      const std::uint32_t i = firstRow + rowInPass + k * Shape::rowsPerPass;
      if (j < numBodies && i < numBodies) {
        dx = args.sources.x[j] - args.sources.x[i];
        dy = args.sources.y[j] - args.sources.y[i];
        dz = args.sources.z[j] - args.sources.z[i];
        mass = args.sources.mass[j];
      } else {  // padding: far away and massless
        dx = static_cast<double>(source.x - xi[k]);
        dy = static_cast<double>(source.y - yi[k]);
        dz = static_cast<double>(source.z - zi[k]);
        mass = 0.0;
      }
    };
    // Most tiles lie well away from every body of the warp: they need no search for near pairs.
    bool far = true;
#pragma unroll
    for (int k = 0; k < kI; ++k) {
      far = far && softenedR2LowerBound<Real>(tileBox, xi[k], yi[k], zi[k], eps2) * kFarTileMargin<Real> >
                       nearPairThreshold<Real, decltype(rule)>(xi[k], yi[k], zi[k], eps2);
    }
    if (__all_sync(0xffffffffu, far)) {
#pragma unroll
      for (int part = 0; part < Shape::subTiles; ++part) {
        evaluateFarTile<Real, kI, Shape::entriesPerSubTile, kQ, Shape::unroll>(
            tile, slice + part * Shape::entriesPerSubTile * kQ, xi, yi, zi, eps2, acc);
        accumulateTile<Real, kI, Shape::flushTiles, true>(acc, tilesInBag);
      }
    } else {
#pragma unroll
      for (int part = 0; part < Shape::subTiles; ++part) {
        evaluateTile<Real, kI, Shape::entriesPerSubTile, kQ, Shape::unroll, true>(
            tile, slice + part * Shape::entriesPerSubTile * kQ, xi, yi, zi, eps2, rule, acc, exactSource);
        accumulateTile<Real, kI, Shape::flushTiles, true>(acc, tilesInBag);
      }
    }
  }
  constexpr bool kIsFloat = std::is_same_v<Real, float>;
  if constexpr (kIsFloat && Shape::flushTiles > 1) acc.template flushBag<true>();
  acc.template reduceOverLanes<kQ>();
  if constexpr (kIsFloat) {
#pragma unroll
    for (int offset = kQ / 2; offset > 0; offset /= 2) {
#pragma unroll
      for (int k = 0; k < kI; ++k) acc.floatMagnitude[k] += __shfl_xor_sync(0xffffffffu, acc.floatMagnitude[k], offset);
    }
  }

  if (slice != 0) return;  // no barrier follows
#pragma unroll
  for (int k = 0; k < kI; ++k) {
    const std::uint32_t i = firstRow + rowInPass + k * Shape::rowsPerPass;
    if (i >= numBodies) continue;
    if constexpr (kPotential) {
      // The body's own pair, counted when eps > 0, comes out once: in split 0, whichever split held it (the splits'
      // sums are added).
      if (blockIdx.y == 0) acc.total[3][k] += args.sources.mass[i] * args.inverseSoftening;
    }
    if (gridDim.y == 1) {
      args.out.ax[i] = args.G * acc.total[0][k];
      args.out.ay[i] = args.G * acc.total[1][k];
      args.out.az[i] = args.G * acc.total[2][k];
      if constexpr (kPotential) args.out.pot[i] = args.G * acc.total[3][k];
      if (kIsFloat && floatSumCancelled(acc.total[0][k], acc.total[1][k], acc.total[2][k], acc.floatMagnitude[k])) {
        appendToBodyList(args.cancelledBodies, i);
      }
    } else {
      args.partial[std::size_t(blockIdx.y) * numBodies + i] =
          double4_16a{acc.total[0][k], acc.total[1][k], acc.total[2][k], kPotential ? acc.total[3][k] : 0.0};
      if constexpr (kIsFloat) args.partialMagnitude[std::size_t(blockIdx.y) * numBodies + i] = acc.floatMagnitude[k];
    }
  }
}

/// boxes[6 t ..] = {min x, min y, min z, max x, max y, max z} of bodies [t * tile, (t + 1) * tile) (one warp per
/// tile, grid-stride): the direct kernel's far-tile test.
__global__ void tileBoxesKernel(DeviceSoA sources, std::uint32_t numBodies, std::uint32_t tile, double* boxes);

/// out[i] = G * sum over splits of partial[s * numBodies + i], splits added in order (deterministic). With
/// `partialMagnitude` (float sums), also appends the bodies whose float sums cancelled to `cancelledBodies`.
__global__ void combineSplitsKernel(const double4_16a* partial, const float* partialMagnitude, std::uint32_t numSplits,
                                    std::uint32_t numBodies, double G, DeviceForces out,
                                    std::uint32_t* cancelledBodies);

/// Overwrites out[i] with G times the direct sum over every source in double, for each body i of the list
/// `cancelledBodies` (appendToBodyList): the second, double evaluation of floatSumCancelled. One block per listed
/// body (grid-stride); its threads split the sources.
inline constexpr int kCancelledSumThreads = 1024;  ///< short per-thread chains: the sum is latency-bound
__global__ void __launch_bounds__(kCancelledSumThreads)
    sumCancelledBodiesInDoubleKernel(DeviceSoA sources, std::uint32_t numBodies, const std::uint32_t* cancelledBodies,
                                     double eps2, double G, DeviceForces out);

// ---------------------------------------------------------------------------------------------------------------
// Group x list: evaluating an InteractionPlan

/// Warp tasks. A group's bodies are cut into chunks; each chunk is one warp task of one of these kinds, chosen on
/// the host so that small groups still fill the warp (q threads per body) and big groups are split.
struct PlanTaskKind {
  int threadsPerBody;  ///< q
  int bodiesPerThread;
  constexpr int rows() const { return 32 / threadsPerBody * bodiesPerThread; }
};
inline constexpr int kNumPlanTaskKinds = 8;
/// rows: 128, 64, 32, 16, 8, 4, 2, 1. Keeping 2 bodies per thread in the tasks of 2..32 rows (q doubled: two
/// independent chains per thread, one shared load per two pairs) ran 2-15% slower on the Plummer 2^20 plans (H100).
inline constexpr PlanTaskKind kPlanTaskKinds[kNumPlanTaskKinds] = {{1, 4}, {1, 2}, {1, 1},  {2, 1},
                                                                   {4, 1}, {8, 1}, {16, 1}, {32, 1}};

/// The first task kind a plan kernel runs: the kinds before it are not compiled in, and the host cuts groups into
/// the others (cuda_engine.cu: forEachWarpTask). Tasks of 4 bodies per thread (kind 0, 128 rows) keep their double
/// totals in shared memory (planTotalsShared), and their pair loops, with 4 bodies per source (one shared load per
/// 4 pairs), interleave well. Float plans run them: with quadrupole cells and in periodic plans they ran 2-4% faster
/// than 64-row tasks from the start; with monopole cells they did once the kernel had 128 registers (kPlanMinBlocks
/// in plan_kernels.cu; at 96 they ran 5-15% slower). Double plans leave them out (registers).
template <class Real>
__host__ __device__ constexpr int firstPlanTaskKind() {
  return std::is_same_v<Real, float> ? 0 : 1;
}

/// Whether a plan kernel runs its task kinds of one body per thread (kinds 2-7: 1-32 threads per body) in one
/// instantiation, the threads per body known at run time (runPlanTask with kQ = 0), instead of one per kind: periodic
/// quadrupole plans.
/// Their kernel's eight kinds, each with its truncated pair and cell loops (wrapped and not), came to ~13,400
/// instructions (210 KB of code; the periodic monopole kernel 6,700), and its warps, running different kinds side by
/// side, stalled on instruction fetch: 0.92 cycles per issued instruction against 0.04 in the monopole kernel (Nsight
/// Compute on the H200, the periodic plan of a Plummer sphere in a box at 2^20).
template <bool kQuadrupole, bool kPeriodic>
__host__ __device__ constexpr bool mergesSmallTaskKinds() {
  return kQuadrupole && kPeriodic;
}
static_assert(kPlanTaskKinds[2].threadsPerBody == 1 && kPlanTaskKinds[3].threadsPerBody == 2 &&
                  kPlanTaskKinds[4].threadsPerBody == 4 && kPlanTaskKinds[5].threadsPerBody == 8 &&
                  kPlanTaskKinds[6].threadsPerBody == 16 && kPlanTaskKinds[7].threadsPerBody == 32 &&
                  kPlanTaskKinds[2].bodiesPerThread == 1 && kPlanTaskKinds[7].bodiesPerThread == 1,
              "the merged kinds: 2^(kind - 2) threads per body (planKernel), one body per thread");

/// Doubles of shared memory per lane for the totals of 4-bodies-per-thread tasks: 4 components for each body.
inline constexpr int kPlanTotalsPerLane = 16;

/// Whether a task of `bodiesPerThread` bodies per thread keeps its double totals in the warp's shared memory
/// (Accumulators says why): tasks of 4 bodies per thread, and float tasks of 2 with the potential in open monopole and
/// periodic quadrupole plans. Measured with 96 registers and 64-row tasks as the largest monopole kind (Plummer 2^20,
/// theta 0.5, H200, ms a launch): monopole ncrit 256 3.53 -> 3.39, ncrit 1024 5.19 -> 5.05, periodic quadrupole
/// 9.48 -> 9.31; the open quadrupole (7.30 -> 7.35) and periodic monopole (5.46 -> 5.55) plans and every plan without
/// the potential (12 registers of totals, not 16) were as fast or faster with the totals in registers.
template <class Real, bool kPotential, bool kQuadrupole, bool kPeriodic>
__host__ __device__ constexpr bool planTotalsShared(int bodiesPerThread) {
  return bodiesPerThread == 4 ||
         (std::is_same_v<Real, float> && kPotential && bodiesPerThread == 2 && kQuadrupole == kPeriodic);
}

template <class Real>
struct PlanArgs {
  DeviceSoA sources;
  DeviceSoA cells;
  DeviceQuadrupoles quadrupoles;  ///< null pointers when the cells are monopoles (the kernel's kQuadrupole is false)
  const uint4* tasks;             ///< {group, first i-body, number of i-bodies, kind}, most expensive first
  std::uint32_t numTasks;
  std::uint32_t* taskCounter;  ///< zero at launch; warps take tasks from it
  const double* groupCentres;  ///< 3 per group
  /// Per group, where its list lies: {first j-body in expandedBodies, number of j-bodies, first cell in cellList,
  /// number of cells}.
  const uint4* groupLists;
  const std::uint32_t* expandedBodies;  ///< body ranges of every list, expanded to body indices
  const std::uint32_t* cellList;
  Real eps2;
  double eps2Double;        ///< for the pairs evaluated again in double
  double inverseSoftening;  ///< pair_interaction.hpp: inverseSoftening(eps2Double), from the host
  double G;
  DeviceForces out;
  /// The periodic short range (kernels with kPeriodic): GravityParams::periodic's box, 1 / (2 r_s) and r_cut^2.
  double boxSize;
  Real box;
  Real invTwoSplit;
  Real cutoff2;
};

/// One warp task: rows i-bodies of group `task.x` starting at body `task.y`, against the group's whole list, in
/// tiles of kTile sources staged in this warp's slice of shared memory: first its bodies (and its cells, when they
/// are monopoles) as point masses, then, with kQuadrupole, its cells as quadrupoles. kPeriodic: the periodic TreePM
/// short range (every position at its nearest image relative to the group centre, then every separation again at its
/// nearest image, the erfc-truncated pair and cell), a compile-time flag so that the open kernels stay as they are.
/// kQ = 0: one body per thread, shared by `runtimeQ` threads (1..32), a number known at run time: the task kinds of
/// mergesSmallTaskKinds in one instantiation.
template <class Real, bool kQuadrupole, bool kAccurateNearPairs, bool kPotential, int kTile, int kQ, int kI,
          bool kPeriodic = false>
__device__ __forceinline__ void runPlanTask(const PlanArgs<Real>& args, const uint4 task,
                                            typename Packed4<Real>::type* tile, typename Packed4<Real>::type* cellTile,
                                            double* warpTotals, int lane, int runtimeQ = 0) {
  using Vec = typename Packed4<Real>::type;
  constexpr bool kRuntimeQ = kQ == 0;
  static_assert(!kRuntimeQ || (kI == 1 && kPeriodic && kTile % 64 == 0),
                "threads per body at run time: periodic tasks of one body per thread, tiles of whole pairs of warps");
  const int q = kRuntimeQ ? runtimeQ : kQ;
  const int rowsPerPass = 32 / q;
  constexpr int kLoads = kTile / 32;
  constexpr int kEntries = kTile / (kRuntimeQ ? 1 : kQ);  // with kRuntimeQ: the most, at q = 1
  [[maybe_unused]] const int flushTiles = kRuntimeQ ? flushInterval(kTile / q) : flushInterval(kEntries);
  constexpr int kFlushTiles = kRuntimeQ ? 0 : flushInterval(kEntries);  // 0: flushTiles, at run time
  // How many sources of a tile each loop takes per iteration. Unrolled code is large (a kernel instantiates up to
  // eight task kinds, each with its near, far, cell and periodic loops: mergesSmallTaskKinds), and warps running
  // different kinds share the instruction cache: the cell and truncated loops (35-90 instructions per interaction) at
  // 4-8 sources per iteration stalled on instruction fetch (Nsight Compute on the H200: 0.85 cycles per issued
  // instruction for the quadrupole plan, 7.4 for the periodic one; the quadrupole plan 0.12 unrolled 1-2). The pair
  // loops of the 128-row kind ran 5-7% faster at 2 than at 4 sources (ncrit 256-1024 acceleration-only plans), those of
  // the smaller kinds 2-4% slower at 4 than at 8. With the potential the 128-row kind's ran faster at 4 (monopole
  // cells, 128 registers: ncrit 256 3.33 -> 3.23 ms, ncrit 1024 4.89 -> 4.69; quadrupole 7.30 -> 7.22, 9.59 -> 9.47).
  constexpr int kUnroll = kI >= 4 ? (kPotential ? 4 : 2) : 8;
  constexpr int kLongUnroll = kI >= 4 ? 1 : 2;
  const std::uint32_t group = task.x;
  const std::uint32_t firstBody = task.y;
  const std::uint32_t numRows = task.z;
  const int slice = lane % q;
  const int rowInPass = lane / q;

  const double cx = args.groupCentres[3 * group + 0];
  const double cy = args.groupCentres[3 * group + 1];
  const double cz = args.groupCentres[3 * group + 2];
  const uint4 list = args.groupLists[group];
  const std::uint32_t bodyBase = list.x;
  const std::uint32_t numListBodies = list.y;
  const std::uint32_t cellBase = list.z;
  const std::uint32_t numListCells = list.w;
  // Point-mass entries: the list bodies, then the cells when they are monopoles.
  const std::uint32_t numPointEntries = numListBodies + (kQuadrupole ? 0 : numListCells);

  Real xi[kI], yi[kI], zi[kI];
#pragma unroll
  for (int k = 0; k < kI; ++k) {
    const std::uint32_t row = rowInPass + k * rowsPerPass;
    const std::uint32_t i = firstBody + row;
    const bool valid = row < numRows;
    if constexpr (kPeriodic) {
      xi[k] = valid ? static_cast<Real>(nearestImage(args.sources.x[i] - cx, args.boxSize)) : Real(0);
      yi[k] = valid ? static_cast<Real>(nearestImage(args.sources.y[i] - cy, args.boxSize)) : Real(0);
      zi[k] = valid ? static_cast<Real>(nearestImage(args.sources.z[i] - cz, args.boxSize)) : Real(0);
    } else {
      xi[k] = valid ? static_cast<Real>(args.sources.x[i] - cx) : Real(0);
      yi[k] = valid ? static_cast<Real>(args.sources.y[i] - cy) : Real(0);
      zi[k] = valid ? static_cast<Real>(args.sources.z[i] - cz) : Real(0);
    }
  }

  // Periodic plans: a staged source (nearest image relative to the group centre c) whose coordinates all lie within
  // wrapFreeLimit of c is within half a box of every body of the task on every axis (|s - b| <= |s| + |b| < L/2, the
  // factor 0.9999 leaving ~1e-4 L for the float rounding), so nearestImage would return its separations unchanged: a
  // tile of such sources (a warp vote while it is staged) skips the per-pair wrap. With r_cut and cells much smaller
  // than the box that is every tile; small boxes (r_cut near L/2) keep the wrap where it matters.
  Real wrapFreeLimit = Real(0);
  if constexpr (kPeriodic) {
    Real extent = Real(0);
#pragma unroll
    for (int k = 0; k < kI; ++k) extent = fmax(extent, fmax(fabs(xi[k]), fmax(fabs(yi[k]), fabs(zi[k]))));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      extent = fmax(extent, __shfl_xor_sync(0xffffffffu, extent, offset));
    }
    wrapFreeLimit = (Real(0.5) * args.box - extent) * Real(0.9999);
  }
  const auto needsWrap = [&](bool valid, const Vec& source) {
    return valid && fmax(fabs(source.x), fmax(fabs(source.y), fabs(source.z))) > wrapFreeLimit;
  };

  // Near sources: those within nearRadius of the group centre, where R is the task's largest |x_i - c|. Only they
  // can be at zero distance from one of its bodies (or, in accurate plans, closer than a body's closePairThreshold,
  // whose largest value is eps^2 + max(24 eps^2, R^2 / 16^2)); the 1e-4 covers the rounding of the distances. A
  // tile with none is evaluated without the near-pair search (evaluateFarTile). Worth its ~10 instructions per lane
  // and tile only where a lane's share of a tile is long.
  constexpr bool kFarTiles = kEntries * kI >= 16 && !kPeriodic;
  // A tree plan with eps > 0 needs no search at all. Its only near pairs are those at zero distance, where the fast
  // path's r^2 + eps^2 is eps^2, as the checked pair's is: no pull and -m/eps, the same terms to the rounding of the
  // other pairs' r^2. The search found near sources in a quarter of the 128-row tasks' tiles (the bodies of
  // neighbouring leaves lie within R), and each tile holding the task's own bodies was evaluated again at three
  // times a tile's cost: 6-7% of the instructions of the plan kernel (Plummer 2^20, ncrit 256, Nsight Compute on the
  // H200). Accurate plans (direct summation onto a subsample) still look for their close and strong pairs.
  const bool searchNearPairs = kAccurateNearPairs || !(args.eps2 > Real(0));
  Real nearRadius2 = Real(0);
  if constexpr (kFarTiles) {
    Real radius2 = Real(0);
#pragma unroll
    for (int k = 0; k < kI; ++k) radius2 = fmax(radius2, xi[k] * xi[k] + yi[k] * yi[k] + zi[k] * zi[k]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      radius2 = fmax(radius2, __shfl_xor_sync(0xffffffffu, radius2, offset));
    }
    const Real radius = sqrt(radius2);
    constexpr Real kCloseRatio = Real(1.0 / kCloseSeparationRatio);
    const Real reach = kAccurateNearPairs && std::is_same_v<Real, float>
                           ? sqrt(fmax(Real(kStrongPairSoftenings * kStrongPairSoftenings - 1) * args.eps2,
                                       radius2 * (kCloseRatio * kCloseRatio)))
                           : Real(0);
    nearRadius2 = (radius + reach) * (radius + reach) * Real(1.0001) + Real(1.0e-30);
  }

  // Where point-mass entry e lives: a body index, or a cell id (flag set).
  const auto pointEntry = [&](std::uint32_t e, bool& isCell) -> std::uint32_t {
    isCell = e >= numListBodies;
    return isCell ? args.cellList[cellBase + (e - numListBodies)] : args.expandedBodies[bodyBase + e];
  };

  // Two-stage register prefetch: while the warp evaluates tile t, the sources of tile t + 1 are in flight, from
  // indices loaded one tile earlier still, and the indices of tile t + 2. Loading an index and then its source
  // back to back would stall the warp on the index at every tile (the list is a gather).
  double px[kLoads], py[kLoads], pz[kLoads], pm[kLoads];
  bool pvalid[kLoads];
  // Whether an entry is a cell follows from its position in the list, so it is worked out again where the source is
  // loaded: folding a flag into the loaded index made the warp wait for the index's global load right there, a tile
  // early (Nsight Compute on the H200: a third of the plan kernel's long-scoreboard stalls).
  std::uint32_t nextEntries[kLoads];
  const auto loadIndices = [&](std::uint32_t t) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const std::uint32_t e = t * kTile + lane + 32 * l;
      bool isCell = false;
      nextEntries[l] = e < numPointEntries ? pointEntry(e, isCell) : 0u;
    }
  };
  const auto loadSources = [&](std::uint32_t t) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const std::uint32_t e = t * kTile + lane + 32 * l;
      pvalid[l] = e < numPointEntries;
      if (pvalid[l]) {
        const DeviceSoA& from = e >= numListBodies ? args.cells : args.sources;
        const std::uint32_t index = nextEntries[l];
        px[l] = from.x[index];
        py[l] = from.y[index];
        pz[l] = from.z[index];
        pm[l] = from.mass[index];
      }
    }
  };

  static_assert(kI * 4 <= kPlanTotalsPerLane, "the warp's shared totals hold 4 components per body");
  constexpr bool kShared = planTotalsShared<Real, kPotential, kQuadrupole, kPeriodic>(kI);
  Accumulators<Real, kI, kShared ? (kPotential ? 4 : 3) : 0> acc;
  acc.sharedTotal = warpTotals + lane;
  acc.clearAll();
  int tilesInBag = 0;
  const NearPairRule<kAccurateNearPairs> rule{args.eps2Double};
  const std::uint32_t numTiles = (numPointEntries + kTile - 1) / kTile;
  if (numTiles > 0) {
    loadIndices(0);
    loadSources(0);
  }
  if (numTiles > 1) loadIndices(1);
  for (std::uint32_t t = 0; t < numTiles; ++t) {
    __syncwarp();  // the warp is done reading the previous tile (or the previous task's last one)
    bool nearSource = false, wrapSource = false;
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const Vec source =
          makeRelativeSource<Real, kPeriodic>(pvalid[l], px[l], py[l], pz[l], pm[l], cx, cy, cz, args.boxSize);
      tile[lane + 32 * l] = source;
      if constexpr (kFarTiles) {
        nearSource = nearSource || source.x * source.x + source.y * source.y + source.z * source.z <= nearRadius2;
      }
      if constexpr (kPeriodic) wrapSource = wrapSource || needsWrap(pvalid[l], source);
    }
    const bool nearTile = searchNearPairs && (!kFarTiles || __any_sync(0xffffffffu, nearSource));
    const bool wrapTile = kPeriodic && __any_sync(0xffffffffu, wrapSource);
    __syncwarp();
    if (t + 1 < numTiles) loadSources(t + 1);
    if (t + 2 < numTiles) loadIndices(t + 2);
    const auto exactSource = [&](int slot, int k, const Vec& source, double& dx, double& dy, double& dz, double& mass) {
      const std::uint32_t e = t * kTile + slot;
      const std::uint32_t row = rowInPass + k * rowsPerPass;
      if (e < numPointEntries && row < numRows) {
        bool isCell;
        const std::uint32_t index = pointEntry(e, isCell);
        const DeviceSoA& from = isCell ? args.cells : args.sources;
        const std::uint32_t i = firstBody + row;
        dx = from.x[index] - args.sources.x[i];
        dy = from.y[index] - args.sources.y[i];
        dz = from.z[index] - args.sources.z[i];
        mass = from.mass[index];
      } else {  // padding (far away and massless), or a row without a body
        dx = static_cast<double>(source.x - xi[k]);
        dy = static_cast<double>(source.y - yi[k]);
        dz = static_cast<double>(source.z - zi[k]);
        mass = 0.0;
      }
    };
    if constexpr (kRuntimeQ) {
      if (wrapTile) {
        evaluatePeriodicTileStrided<Real, kTile, true>(tile, slice, q, xi, yi, zi, args.eps2, args.box,
                                                       args.invTwoSplit, args.cutoff2, acc);
      } else {
        evaluatePeriodicTileStrided<Real, kTile, false>(tile, slice, q, xi, yi, zi, args.eps2, args.box,
                                                        args.invTwoSplit, args.cutoff2, acc);
      }
    } else if constexpr (kPeriodic) {
      if (wrapTile) {
        evaluatePeriodicTile<Real, kI, kEntries, kQ, kLongUnroll, true>(tile, slice, xi, yi, zi, args.eps2, args.box,
                                                                        args.invTwoSplit, args.cutoff2, acc);
      } else {
        evaluatePeriodicTile<Real, kI, kEntries, kQ, kLongUnroll, false>(tile, slice, xi, yi, zi, args.eps2, args.box,
                                                                         args.invTwoSplit, args.cutoff2, acc);
      }
    } else if (nearTile) {
      evaluateTile<Real, kI, kEntries, kQ, kUnroll, false>(tile, slice, xi, yi, zi, args.eps2, rule, acc, exactSource);
    } else {
      evaluateFarTile<Real, kI, kEntries, kQ, kUnroll>(tile, slice, xi, yi, zi, args.eps2, acc);
    }
    if constexpr (kRuntimeQ) {
      accumulateTileEvery(acc, tilesInBag, flushTiles);
    } else {
      accumulateTile<Real, kI, kFlushTiles>(acc, tilesInBag);
    }
  }

  if constexpr (kQuadrupole) {
    // Cells as quadrupoles: each lane stages kLoads cells per tile (centre of mass relative to the group centre).
    // The cell ids of the next tile are loaded a tile ahead (the cells' own eleven values are not: registers).
    const std::uint32_t numCellTiles = (numListCells + kTile - 1) / kTile;
    std::uint32_t cellIds[kLoads];
    const auto loadCellIds = [&](std::uint32_t t) {
#pragma unroll
      for (int l = 0; l < kLoads; ++l) {
        const std::uint32_t e = t * kTile + lane + 32 * l;
        cellIds[l] = e < numListCells ? args.cellList[cellBase + e] : 0u;
      }
    };
    if (numCellTiles > 0) loadCellIds(0);
    for (std::uint32_t t = 0; t < numCellTiles; ++t) {
      __syncwarp();
      bool wrapCell = false;
#pragma unroll
      for (int l = 0; l < kLoads; ++l) {
        const int slot = lane + 32 * l;
        const std::uint32_t e = t * kTile + slot;
        Vec centre{Real(kPadCoordinate), Real(kPadCoordinate), Real(kPadCoordinate), Real(0)};
        Vec diagonal{Real(0), Real(0), Real(0), Real(0)}, offDiagonal{Real(0), Real(0), Real(0), Real(0)};
        if (e < numListCells) {
          const std::uint32_t c = cellIds[l];
          centre = makeRelativeSource<Real, kPeriodic>(true, args.cells.x[c], args.cells.y[c], args.cells.z[c],
                                                       args.cells.mass[c], cx, cy, cz, args.boxSize);
          const DeviceQuadrupoles& q = args.quadrupoles;
          diagonal = Vec{static_cast<Real>(q.xx[c]), static_cast<Real>(q.yy[c]), static_cast<Real>(q.zz[c]),
                         static_cast<Real>(q.trace[c])};
          offDiagonal =
              Vec{static_cast<Real>(q.xy[c]), static_cast<Real>(q.xz[c]), static_cast<Real>(q.yz[c]), Real(0)};
          if constexpr (kPeriodic) wrapCell = wrapCell || needsWrap(true, centre);
        }
        cellTile[3 * slot] = centre;
        cellTile[3 * slot + 1] = diagonal;
        cellTile[3 * slot + 2] = offDiagonal;
      }
      if (t + 1 < numCellTiles) loadCellIds(t + 1);
      const bool wrapTile = kPeriodic && __any_sync(0xffffffffu, wrapCell);
      __syncwarp();
      if constexpr (kRuntimeQ) {
        if (wrapTile) {
          evaluatePeriodicQuadrupoleTileStrided<Real, kTile, true>(cellTile, slice, q, xi, yi, zi, args.eps2, args.box,
                                                                   args.invTwoSplit, acc);
        } else {
          evaluatePeriodicQuadrupoleTileStrided<Real, kTile, false>(cellTile, slice, q, xi, yi, zi, args.eps2, args.box,
                                                                    args.invTwoSplit, acc);
        }
      } else if constexpr (kPeriodic) {
        if (wrapTile) {
          evaluatePeriodicQuadrupoleTile<Real, kI, kEntries, kQ, kLongUnroll, true>(
              cellTile, slice, xi, yi, zi, args.eps2, args.box, args.invTwoSplit, acc);
        } else {
          evaluatePeriodicQuadrupoleTile<Real, kI, kEntries, kQ, kLongUnroll, false>(
              cellTile, slice, xi, yi, zi, args.eps2, args.box, args.invTwoSplit, acc);
        }
      } else {
        evaluateQuadrupoleTile<Real, kI, kEntries, kQ, kLongUnroll>(cellTile, slice, xi, yi, zi, args.eps2, acc);
      }
      if constexpr (kRuntimeQ) {
        accumulateTileEvery(acc, tilesInBag, flushTiles);
      } else {
        accumulateTile<Real, kI, kFlushTiles>(acc, tilesInBag);
      }
    }
  }
  if constexpr (kRuntimeQ) {
    if (flushTiles > 1) acc.flushBag();
  } else if constexpr (!std::is_same_v<Real, double> && kFlushTiles > 1) {
    acc.flushBag();
  }
  acc.loadSharedTotals();
  if constexpr (kRuntimeQ) {
    acc.reduceOverLanes(q);
  } else {
    acc.template reduceOverLanes<kQ>();
  }

  if (slice == 0) {
#pragma unroll
    for (int k = 0; k < kI; ++k) {
      const std::uint32_t row = rowInPass + k * rowsPerPass;
      if (row >= numRows) continue;
      const std::uint32_t i = firstBody + row;
      args.out.ax[i] = args.G * acc.total[0][k];
      args.out.ay[i] = args.G * acc.total[1][k];
      args.out.az[i] = args.G * acc.total[2][k];
      if constexpr (kPotential) {
        // The list holds the body itself once; its pair, counted when eps > 0, comes out here.
        args.out.pot[i] = args.G * (acc.total[3][k] + args.sources.mass[i] * args.inverseSoftening);
      }
    }
  }
}

/// Persistent kernel: each warp takes the next task (most expensive first, so the tail is short) until none is
/// left. Warps are independent: no block-wide barrier, each warp has its own tiles of shared memory. The task kinds
/// before firstPlanTaskKind are not compiled in.
/// kMinBlocks: resident blocks per SM the register allocation must allow (occupancy: the inner loop's dependency
/// chains need about 5 warps per scheduler to keep issuing every cycle).
/// kPotential = false: accelerations only (out.pot is not written). kPeriodic: the periodic short range (runPlanTask).
template <class Real, bool kQuadrupole, bool kAccurateNearPairs, bool kPotential, int kTile, int kWarps, int kMinBlocks,
          bool kPeriodic = false>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) planKernel(const PlanArgs<Real> args) {
  static_assert(!(kPeriodic && kAccurateNearPairs), "periodic plans are tree plans (no second pass in double)");
  static_assert(kTile % 32 == 0 && kTile >= 32, "warp tile: whole multiples of 32 sources");
  using Vec = typename Packed4<Real>::type;
  __shared__ Vec tiles[kWarps][kTile];
  __shared__ Vec cellTiles[kWarps][kQuadrupole ? 3 * kTile : 1];
  constexpr bool kFourBodyTasks = firstPlanTaskKind<Real>() == 0;
  constexpr bool kSharedTotals = kFourBodyTasks || planTotalsShared<Real, kPotential, kQuadrupole, kPeriodic>(2);
  __shared__ double totals[kWarps][kSharedTotals ? kPlanTotalsPerLane * 32 : 1];  // runPlanTask's (planTotalsShared)
  Vec* tile = tiles[threadIdx.x / 32];
  Vec* cellTile = cellTiles[threadIdx.x / 32];
  double* warpTotals = totals[threadIdx.x / 32];
  const int lane = threadIdx.x % 32;
  for (;;) {
    std::uint32_t taskIndex = 0;
    if (lane == 0) taskIndex = atomicAdd(args.taskCounter, 1u);
    taskIndex = __shfl_sync(0xffffffffu, taskIndex, 0);
    if (taskIndex >= args.numTasks) return;
    const uint4 task = args.tasks[taskIndex];
    if constexpr (mergesSmallTaskKinds<kQuadrupole, kPeriodic>()) {
      if (task.w >= 2) {
        runPlanTask<Real, kQuadrupole, kAccurateNearPairs, kPotential, kTile, 0, 1, kPeriodic>(
            args, task, tile, cellTile, warpTotals, lane, 1 << (task.w - 2));
        continue;
      }
    }
    switch (task.w) {
      case 0:
        if constexpr (kFourBodyTasks) {
          runPlanTask<Real, kQuadrupole, kAccurateNearPairs, kPotential, kTile, 1, 4, kPeriodic>(
              args, task, tile, cellTile, warpTotals, lane);
        }
        break;
      case 1:
        runPlanTask<Real, kQuadrupole, kAccurateNearPairs, kPotential, kTile, 1, 2, kPeriodic>(
            args, task, tile, cellTile, warpTotals, lane);
        break;
      case 2:
        runPlanTask<Real, kQuadrupole, kAccurateNearPairs, kPotential, kTile, 1, 1, kPeriodic>(
            args, task, tile, cellTile, warpTotals, lane);
        break;
      case 3:
        runPlanTask<Real, kQuadrupole, kAccurateNearPairs, kPotential, kTile, 2, 1, kPeriodic>(
            args, task, tile, cellTile, warpTotals, lane);
        break;
      case 4:
        runPlanTask<Real, kQuadrupole, kAccurateNearPairs, kPotential, kTile, 4, 1, kPeriodic>(
            args, task, tile, cellTile, warpTotals, lane);
        break;
      case 5:
        runPlanTask<Real, kQuadrupole, kAccurateNearPairs, kPotential, kTile, 8, 1, kPeriodic>(
            args, task, tile, cellTile, warpTotals, lane);
        break;
      case 6:
        runPlanTask<Real, kQuadrupole, kAccurateNearPairs, kPotential, kTile, 16, 1, kPeriodic>(
            args, task, tile, cellTile, warpTotals, lane);
        break;
      default:
        runPlanTask<Real, kQuadrupole, kAccurateNearPairs, kPotential, kTile, 32, 1, kPeriodic>(
            args, task, tile, cellTile, warpTotals, lane);
        break;
    }
  }
}

/// Expands every group's body ranges into body indices: expanded[groupLists[g].x + k] = k-th j-body of group g.
/// One warp per group (grid-stride).
__global__ void expandBodyRangesKernel(const uint2* bodyRanges, const std::uint32_t* bodyRangeOffsets,
                                       const uint4* groupLists, std::uint32_t numGroups, std::uint32_t* expanded);

}  // namespace matcha::gpu::detail
