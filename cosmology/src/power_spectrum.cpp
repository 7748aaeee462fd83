// SPDX-License-Identifier: MIT
#include "matcha/cosmology/power_spectrum.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <limits>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>

#include "matcha/core/errors.hpp"
#include "matcha/core/params.hpp"
#include "matcha/mesh/mass_mesh.hpp"
#include "matcha/mesh/mesh_kernels.hpp"

namespace matcha::cosmology {
namespace {

/// Bodies per block of the sums over bodies, and x planes per block of the sums over modes: fixed sizes, so that the
/// partial sums, added in block order, give the same bits whatever the threads.
constexpr std::size_t kBodyBlock = std::size_t{1} << 14;
constexpr int kMaxPlaneBlocks = 64;

std::string shortest(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  return text.str();
}

/// The shells in units of k_F (|m|): edges[j] to edges[j + 1], the last edge n/2 (k_N).
struct Shells {
  PowerBinning binning;
  double width;        ///< linear: in |m|
  double perDecade;    ///< logarithmic
  double nyquistMode;  ///< n / 2
  int count;

  Shells(const PowerSpectrumParams& p)
      : binning(p.binning), width(p.binWidth), perDecade(p.binsPerDecade), nyquistMode(0.5 * p.grid) {
    const double span =
        binning == PowerBinning::linear ? (nyquistMode - 1.0) / width : perDecade * std::log10(nyquistMode);
    count = std::max(1, static_cast<int>(std::ceil(span)));
  }

  /// The shell of a mode with 1 <= |m| <= n/2.
  int of(double modeNorm) const {
    const double position =
        binning == PowerBinning::linear ? (modeNorm - 1.0) / width : perDecade * std::log10(modeNorm);
    return std::clamp(static_cast<int>(position), 0, count - 1);  // n/2 itself closes the last shell
  }

  double edge(int j) const {
    const double e = binning == PowerBinning::linear ? 1.0 + j * width : std::pow(10.0, j / perDecade);
    return std::min(e, nyquistMode);
  }
};

/// Per shell: twice the modes (a stored coefficient is half a mode on the planes that hold both k and -k), and the
/// matching sums of |m| and of the measured quantities (NumSums of them per mode, already divided by W^2).
template <std::size_t NumSums>
struct ShellSums {
  std::vector<std::uint64_t> halfModes;
  std::vector<double> modeNorm;
  std::vector<std::array<double, NumSums>> sums;
  explicit ShellSums(int count)
      : halfModes(count, 0), modeNorm(count, 0.0), sums(count, std::array<double, NumSums>{}) {}
};

/// Sums `perMode(index, mx, my, mz)` / W(k)^2 (an array of NumSums values) over the independent modes of each shell,
/// from k_F to k_N (0 < |m| <= n/2), in fixed blocks of x planes added in block order: the same bits whatever the
/// threads. The one loop over modes of the power spectrum and of the growth.
template <std::size_t NumSums, class PerMode>
ShellSums<NumSums> sumOverShells(const PowerSpectrumParams& params, const Shells& shells, const PerMode& perMode) {
  const int n = params.grid;
  const int windowOrder = params.assignment == mesh::MassAssignment::cic ? 2 : 3;
  std::vector<double> windowAxis(n);  // W^2 along one axis per index
  std::vector<int> modeAxis(n);       // the signed mode per index
  for (int i = 0; i < n; ++i) {
    modeAxis[i] = mesh::signedMode(i, n);
    windowAxis[i] = mesh::windowSquared<double>(modeAxis[i], n, windowOrder);
  }
  const std::size_t half = static_cast<std::size_t>(n) / 2 + 1;
  const bool evenGrid = n % 2 == 0;
  const double nyquistSquared = 0.25 * static_cast<double>(n) * n;  // |m|^2 <= (n/2)^2

  const int numBlocks = std::min(n, kMaxPlaneBlocks);
  std::vector<ShellSums<NumSums>> partial(numBlocks, ShellSums<NumSums>(shells.count));
  tbb::parallel_for(0, numBlocks, [&](int block) {
    ShellSums<NumSums>& out = partial[block];
    const int firstPlane = static_cast<int>(static_cast<long long>(block) * n / numBlocks);
    const int lastPlane = static_cast<int>(static_cast<long long>(block + 1) * n / numBlocks);
    for (int ix = firstPlane; ix < lastPlane; ++ix) {
      const int mx = modeAxis[ix];
      const bool selfPairedX = ix == 0 || (evenGrid && 2 * ix == n);
      for (int iy = 0; iy < n; ++iy) {
        const int my = modeAxis[iy];
        const bool selfPairedXY = selfPairedX && (iy == 0 || (evenGrid && 2 * iy == n));
        const double m2xy = static_cast<double>(mx) * mx + static_cast<double>(my) * my;
        const double windowXY = windowAxis[ix] * windowAxis[iy];
        const std::size_t row = (static_cast<std::size_t>(ix) * n + iy) * half;
        for (std::size_t iz = 0; iz < half; ++iz) {
          const int mz = static_cast<int>(iz);
          const double m2 = m2xy + static_cast<double>(mz) * mz;
          if (m2 == 0.0 || m2 > nyquistSquared) continue;
          // The planes mz = 0 and mz = n/2 hold k and -k both: half a mode each, unless the coefficient is its own
          // partner. Between them a stored coefficient stands for the pair.
          const bool edgePlane = iz == 0 || (evenGrid && 2 * iz == static_cast<std::size_t>(n));
          const std::uint64_t halfModes = edgePlane && !selfPairedXY ? 1 : 2;
          const double modeNorm = std::sqrt(m2);
          const int shell = shells.of(modeNorm);
          out.halfModes[shell] += halfModes;
          out.modeNorm[shell] += static_cast<double>(halfModes) * modeNorm;
          const double window = windowXY * windowAxis[iz];
          const std::array<double, NumSums> values = perMode(row + iz, mx, my, mz);
          for (std::size_t q = 0; q < NumSums; ++q) {
            out.sums[shell][q] += static_cast<double>(halfModes) * values[q] / window;
          }
        }
      }
    }
  });

  ShellSums<NumSums> total(shells.count);
  for (const ShellSums<NumSums>& block : partial) {
    for (int j = 0; j < shells.count; ++j) {
      total.halfModes[j] += block.halfModes[j];
      total.modeNorm[j] += block.modeNorm[j];
      for (std::size_t q = 0; q < NumSums; ++q) total.sums[j][q] += block.sums[j][q];
    }
  }
  return total;
}

struct BodySums {
  double mass = 0, massSquared = 0;
};

/// Sum m and sum m^2 in fixed blocks; throws for the first body with a non-finite position or a bad mass.
BodySums sumBodies(const SourceView& bodies) {
  const std::size_t count = bodies.count;
  const std::size_t numBlocks = (count + kBodyBlock - 1) / kBodyBlock;
  std::vector<BodySums> partial(numBlocks);
  std::vector<std::size_t> firstBad(numBlocks, count);
  tbb::parallel_for(std::size_t{0}, numBlocks, [&](std::size_t b) {
    const std::size_t first = b * kBodyBlock, last = std::min(count, first + kBodyBlock);
    BodySums sums;
    for (std::size_t i = first; i < last; ++i) {
      const double m = bodies.mass[i];
      if (!(std::isfinite(bodies.x[i]) && std::isfinite(bodies.y[i]) && std::isfinite(bodies.z[i]) &&
            std::isfinite(m) && m > 0.0)) {
        firstBad[b] = i;
        break;
      }
      sums.mass += m;
      sums.massSquared += m * m;
    }
    partial[b] = sums;
  });
  const std::size_t bad = *std::min_element(firstBad.begin(), firstBad.end());
  if (bad < count) {
    const bool position =
        !(std::isfinite(bodies.x[bad]) && std::isfinite(bodies.y[bad]) && std::isfinite(bodies.z[bad]));
    throw InputError("power spectrum: body " + std::to_string(bad) +
                     (position
                          ? " has a non-finite position"
                          : " has a mass that is not a finite number > 0 (got " + shortest(bodies.mass[bad]) + ")"));
  }
  BodySums total;
  for (const BodySums& sums : partial) {
    total.mass += sums.mass;
    total.massSquared += sums.massSquared;
  }
  if (!(std::isfinite(total.mass) && std::isfinite(total.massSquared))) {
    throw InputError("power spectrum: the sum of the masses (or of their squares) overflows");
  }
  return total;
}

}  // namespace

void PowerSpectrumParams::validate() const {
  requireFinite(boxSize, "the box size");
  if (!(boxSize > 0)) throw InputError("the box size must be > 0 (got " + shortest(boxSize) + ")");
  mesh::requireFftFriendlyGrid(grid, "the grid");
  if (binning == PowerBinning::linear) {
    if (!(std::isfinite(binWidth) && binWidth > 0)) {
      throw InputError("the bin width must be a finite number > 0 of k_F (got " + shortest(binWidth) + ")");
    }
    if ((0.5 * grid - 1.0) / binWidth > kMaxLinearBins) {
      throw InputError("a bin width of " + shortest(binWidth) + " k_F makes more than " +
                       std::to_string(kMaxLinearBins) + " bins on a grid of " + std::to_string(grid) +
                       "; widen the bins");
    }
  } else if (binsPerDecade < 1 || binsPerDecade > kMaxBinsPerDecade) {
    throw InputError("logarithmic bins must number 1 to " + std::to_string(kMaxBinsPerDecade) + " per decade (got " +
                     std::to_string(binsPerDecade) + ")");
  }
}

std::size_t powerSpectrumMemoryBytes(const PowerSpectrumParams& params, std::size_t numBodies) {
  const std::size_t meshes = params.interlace ? 2 : 1;
  return meshes * (mesh::massMeshBytes(params.grid) + numBodies * sizeof(std::uint32_t));
}

int defaultPowerSpectrumGrid(std::size_t numBodies) {
  const long long wanted = std::max<long long>(mesh::meshPointsForSpacing(numBodies, 2), mesh::kMinGrid);
  if (wanted > mesh::kMaxGrid) {
    throw InputError("the default grid for " + std::to_string(numBodies) +
                     " bodies, 2 N^(1/3) = " + std::to_string(wanted) + ", exceeds " + std::to_string(mesh::kMaxGrid) +
                     " points per side; choose a grid");
  }
  return mesh::fftFriendlyGridSize(static_cast<int>(wanted));
}

namespace {

/// The mean |k| of a shell's modes, its edges and its number of modes from the sums.
template <class Bin, std::size_t NumSums>
Bin shellBin(const ShellSums<NumSums>& total, const Shells& shells, int j, double fundamental) {
  Bin bin;
  bin.kLow = fundamental * shells.edge(j);
  bin.kHigh = fundamental * shells.edge(j + 1);
  bin.k = fundamental * total.modeNorm[j] / static_cast<double>(total.halfModes[j]);
  bin.numModes = total.halfModes[j] / 2;
  return bin;
}

}  // namespace

MeshDensity::MeshDensity(const SourceView& bodies, const PowerSpectrumParams& params) : params_(params) {
  // Every check before the mesh is allocated.
  params.validate();
  if (bodies.count == 0) throw InputError("power spectrum: no bodies");
  if (bodies.count > std::numeric_limits<std::uint32_t>::max()) {
    throw InputError("power spectrum: at most 2^32 - 1 bodies (got " + std::to_string(bodies.count) + ")");
  }
  const BodySums sums = sumBodies(bodies);
  numBodies_ = bodies.count;
  totalMass_ = sums.mass;
  const double L = params.boxSize;
  shotNoise_ = L * L * L * sums.massSquared * (1.0 / (sums.mass * sums.mass));
  // M delta_k = F(m) for m != 0 (F: the mass mesh's transform, M the total mass): rho_mean is M / n^3 per point.
  mesh_.emplace(params.grid, L);
  mesh_->depositAndTransform(bodies, params.assignment, 0.0);
  if (params.interlace) {
    shifted_.emplace(params.grid, L);
    shifted_->depositAndTransform(bodies, params.assignment, 0.5);
  }
}

std::complex<double> MeshDensity::mode(std::size_t index, int mx, int my, int mz) const {
  const std::complex<double> value = mesh_->spectrum()[index];
  if (!shifted_) return value;
  // The shifted deposit sampled the field at p - h/2: its modes carry exp(-i k.(1,1,1) h/2), undone here; the odd
  // aliases then enter with opposite signs and cancel in the mean.
  const double phase = std::numbers::pi * static_cast<double>(mx + my + mz) / params_.grid;
  return 0.5 * (value + shifted_->spectrum()[index] * std::polar(1.0, phase));
}

PowerSpectrum measurePowerSpectrum(const SourceView& bodies, const PowerSpectrumParams& params) {
  const MeshDensity density(bodies, params);
  const Shells shells(params);
  const ShellSums<1> total = sumOverShells<1>(params, shells, [&](std::size_t index, int mx, int my, int mz) {
    return std::array<double, 1>{std::norm(density.mode(index, mx, my, mz))};
  });

  const double L = params.boxSize;
  PowerSpectrum result;
  result.fundamental = 2.0 * std::numbers::pi / L;
  result.nyquist = std::numbers::pi * params.grid / L;
  result.numBodies = density.numBodies();
  result.totalMass = density.totalMass();
  result.shotNoise = density.shotNoise();
  result.shotNoiseSubtracted = params.subtractShotNoise;
  const double volume = L * L * L;
  const double invMassSquared = 1.0 / (density.totalMass() * density.totalMass());
  for (int j = 0; j < shells.count; ++j) {
    if (total.halfModes[j] == 0) continue;
    PowerBin bin = shellBin<PowerBin>(total, shells, j, result.fundamental);
    bin.power = volume * invMassSquared * total.sums[j][0] / static_cast<double>(total.halfModes[j]);
    if (params.subtractShotNoise) bin.power -= result.shotNoise;
    result.bins.push_back(bin);
  }
  return result;
}

double GrowthBin::correlation() const { return crossPower / std::sqrt(startPower * endPower); }

GrowthSpectrum measureGrowth(const MeshDensity& start, const MeshDensity& end) {
  const PowerSpectrumParams& params = start.params();
  const PowerSpectrumParams& other = end.params();
  // Mode by mode means the same modes, window and shells: anything else would compare different quantities.
  if (params.grid != other.grid || params.boxSize != other.boxSize || params.assignment != other.assignment ||
      params.interlace != other.interlace || params.binning != other.binning || params.binWidth != other.binWidth ||
      params.binsPerDecade != other.binsPerDecade) {
    throw InputError(
        "growth: the two snapshots' densities must be measured on the same mesh (box, grid, window, "
        "interlacing) and in the same bins");
  }
  const Shells shells(params);
  const ShellSums<3> total = sumOverShells<3>(params, shells, [&](std::size_t index, int mx, int my, int mz) {
    const std::complex<double> s = start.mode(index, mx, my, mz);
    const std::complex<double> e = end.mode(index, mx, my, mz);
    return std::array<double, 3>{std::norm(s), std::norm(e), (e * std::conj(s)).real()};
  });

  const double L = params.boxSize;
  GrowthSpectrum result;
  result.fundamental = 2.0 * std::numbers::pi / L;
  result.nyquist = std::numbers::pi * params.grid / L;
  const double volume = L * L * L;
  const double massStart = start.totalMass(), massEnd = end.totalMass();
  for (int j = 0; j < shells.count; ++j) {
    if (total.halfModes[j] == 0) continue;
    GrowthBin bin = shellBin<GrowthBin>(total, shells, j, result.fundamental);
    const double perMode = volume / static_cast<double>(total.halfModes[j]);
    bin.startPower = perMode * total.sums[j][0] / (massStart * massStart);
    bin.endPower = perMode * total.sums[j][1] / (massEnd * massEnd);
    bin.crossPower = perMode * total.sums[j][2] / (massStart * massEnd);
    result.bins.push_back(bin);
  }
  return result;
}

}  // namespace matcha::cosmology
