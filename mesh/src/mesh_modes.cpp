// SPDX-License-Identifier: MIT
#include "mesh_modes.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "matcha/mesh/mesh_kernels.hpp"

namespace matcha::mesh::detail {

ModeTables::ModeTables(const MeshParams& params) {
  const int n = params.grid;
  const int windowOrder = params.assignment == MassAssignment::cic ? 2 : 3;
  greenAxis_.resize(n);
  modeSquared_.resize(n);
  derivativeWavenumber_.resize(n);
  for (int i = 0; i < n; ++i) {
    const int m = signedMode(i, n);
    greenAxis_[i] = greenAxisFactor(m, n, params.aSmooth, windowOrder);
    modeSquared_[i] = static_cast<double>(m) * m;
    derivativeWavenumber_[i] = 2.0 * std::numbers::pi * derivativeMode(i, n) / params.boxSize;
  }
}

void ModeTables::applyGreen(std::complex<double>* row, std::size_t half, int x, int y, double scale) const {
  const double gxy = scale * greenAxis_[x] * greenAxis_[y];
  const double m2xy = modeSquared_[x] + modeSquared_[y];
  for (std::size_t z = 0; z < half; ++z) row[z] *= greenMultiplier(gxy, m2xy, greenAxis_[z], modeSquared_[z]);
}

void ModeTables::differentiate(const std::complex<double>* phi, std::complex<double>* pull, std::size_t half, int x,
                               int y, int axis) const {
  for (std::size_t z = 0; z < half; ++z) {
    const int index = axis == 0 ? x : (axis == 1 ? y : static_cast<int>(z));
    const double k = derivativeWavenumber_[index];
    pull[z] = {k * phi[z].imag(), -k * phi[z].real()};  // -i k (re + i im)
  }
}

std::size_t firstNonFinitePosition(const SourceView& s) {
  return tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, s.count, 1 << 14), s.count,
      [&](const tbb::blocked_range<std::size_t>& r, std::size_t first) {
        for (std::size_t i = r.begin(); i != r.end() && i < first; ++i) {
          if (!(std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && std::isfinite(s.z[i]))) return i;
        }
        return first;
      },
      [](std::size_t a, std::size_t b) { return std::min(a, b); });
}

void addSelfPotentials(const SourceView& s, const MeshParams& params, double G, double totalMass, double* pot) {
  const double rs = params.splitRadius(), L = params.boxSize;
  const double kernelIntegral = shortRangeKernelIntegral(rs, params.cutoffRadius());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, s.count, 4096), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) {
      pot[i] += selfPotentialCorrection(G, s.mass[i], totalMass, rs, L, kernelIntegral);
    }
  });
}

}  // namespace matcha::mesh::detail
