// SPDX-License-Identifier: MIT
#include "ordered_deposit.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "matcha/core/errors.hpp"

namespace matcha::mesh::detail {
namespace {

/// The deposit bins bodies by mesh plane in at most this many blocks of consecutive bodies (each block counts and
/// scatters its own bodies): the count table is blocks x chunks, a few megabytes at most.
constexpr std::size_t kMaxBinBlocks = 256;
constexpr std::size_t kMinBinBlockSize = std::size_t{1} << 14;

/// Planes per deposit chunk, at least: a body writes the planes from its home plane (its window's first) to home +
/// support - 1, so a chunk of >= support - 1 = 2 planes (TSC) between two chunks of one phase keeps their writes apart.
constexpr int kMinChunkPlanes = 2;

constexpr int support(MassAssignment assignment) { return assignment == MassAssignment::cic ? 2 : 3; }

}  // namespace

OrderedDeposit::OrderedDeposit(int n, double boxSize, std::string owner)
    : n_(n), invBox_(1.0 / boxSize), owner_(std::move(owner)) {
  // An even number of chunks of >= kMinChunkPlanes planes: chunks of one parity never write one plane, around the
  // periodic wrap too.
  numChunks_ = 2 * std::max(1, n / (2 * kMinChunkPlanes));
  chunkOfPlane_.resize(n);
  for (int c = 0; c < numChunks_; ++c) {
    const int first = static_cast<int>(static_cast<long long>(c) * n / numChunks_);
    const int last = static_cast<int>(static_cast<long long>(c + 1) * n / numChunks_);
    for (int plane = first; plane < last; ++plane) chunkOfPlane_[plane] = c;
  }
}

template <MassAssignment A>
int OrderedDeposit::homeChunk(const SourceView& s, std::size_t i, double offset) const {
  const AxisWeights<double> w = windowWeights<support(A)>(shiftedMeshCoordinate(s.x[i], invBox_, n_, offset));
  return chunkOfPlane_[wrapMeshIndex(w.first, n_)];
}

/// Groups the bodies by deposit chunk (a stable counting sort: blocks of consecutive bodies count, then scatter into
/// their own ranges), so that each chunk lists its bodies in body order whatever the threads.
template <MassAssignment A>
void OrderedDeposit::bin(const SourceView& s, double offset) {
  const std::size_t count = s.count;
  const std::size_t numBlocks =
      std::clamp<std::size_t>((count + kMinBinBlockSize - 1) / kMinBinBlockSize, 1, kMaxBinBlocks);
  const std::size_t blockSize = (count + numBlocks - 1) / numBlocks;
  const auto chunks = static_cast<std::size_t>(numChunks_);
  binCursor_.assign(numBlocks * chunks, 0);
  firstBad_.assign(numBlocks, count);
  tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t b) {
    const std::size_t first = b * blockSize, last = std::min(count, first + blockSize);
    std::size_t* counts = &binCursor_[b * chunks];
    for (std::size_t i = first; i < last; ++i) {
      if (!(std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && std::isfinite(s.z[i]))) {
        firstBad_[b] = std::min(firstBad_[b], i);
        continue;
      }
      ++counts[homeChunk<A>(s, i, offset)];
    }
  });
  const std::size_t bad = *std::min_element(firstBad_.begin(), firstBad_.end());
  if (bad < count) {
    throw InputError(owner_ + ": body " + std::to_string(bad) + " has a non-finite position");
  }
  chunkStart_.assign(chunks + 1, 0);
  std::size_t running = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    chunkStart_[c] = running;
    for (std::size_t b = 0; b < numBlocks; ++b) {
      const std::size_t blockCount = binCursor_[b * chunks + c];
      binCursor_[b * chunks + c] = running;
      running += blockCount;
    }
  }
  chunkStart_[chunks] = running;
  if (order_.size() < count) order_.resize(count);
  tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t b) {
    const std::size_t first = b * blockSize, last = std::min(count, first + blockSize);
    std::size_t* cursor = &binCursor_[b * chunks];
    for (std::size_t i = first; i < last; ++i)
      order_[cursor[homeChunk<A>(s, i, offset)]++] = static_cast<std::uint32_t>(i);
  });
}

/// Masses onto the mesh: the chunks of even index in parallel, then the odd ones; each chunk adds its bodies in
/// order. On a slab (planes.count < n) only the parts of the windows on its planes: a subset of each body's writes, so
/// chunks of one parity still never write one point at once.
template <MassAssignment A>
void OrderedDeposit::depositBinned(const SourceView& s, double offset, double* rho, PlaneRange planes) const {
  const MeshLayout meshLayout = layout();
  const std::size_t plane = static_cast<std::size_t>(n_) * meshLayout.padded;
  tbb::parallel_for(tbb::blocked_range<int>(0, planes.count), [&](const tbb::blocked_range<int>& r) {
    std::fill(rho + r.begin() * plane, rho + r.end() * plane, 0.0);
  });
  for (int phase = 0; phase < 2; ++phase) {
    tbb::parallel_for(0, numChunks_ / 2, [&](int pair) {
      const auto c = static_cast<std::size_t>(2 * pair + phase);
      for (std::size_t k = chunkStart_[c]; k < chunkStart_[c + 1]; ++k) {
        const std::size_t i = order_[k];
        const BodyWindow<support(A), double> window(s.x[i], s.y[i], s.z[i], invBox_, n_, offset);
        depositBody(
            rho, meshLayout, window, s.mass[i], [](double* point, double value) { *point += value; }, planes);
      }
    });
  }
}

void OrderedDeposit::deposit(const SourceView& bodies, MassAssignment assignment, double offset, double* rho) {
  deposit(bodies, assignment, offset, rho, PlaneRange{0, n_});
}

void OrderedDeposit::deposit(const SourceView& bodies, MassAssignment assignment, double offset, double* rho,
                             PlaneRange planes) {
  MATCHA_ASSERT(planes.first >= 0 && planes.count >= 0 && planes.count <= n_ - planes.first,
                "OrderedDeposit: planes outside the mesh");
  if (assignment == MassAssignment::cic) {
    bin<MassAssignment::cic>(bodies, offset);
    depositBinned<MassAssignment::cic>(bodies, offset, rho, planes);
  } else {
    bin<MassAssignment::tsc>(bodies, offset);
    depositBinned<MassAssignment::tsc>(bodies, offset, rho, planes);
  }
}

}  // namespace matcha::mesh::detail
