// SPDX-License-Identifier: MIT
#include "matcha/cosmology/initial_conditions.hpp"

#include <cmath>
#include <memory>
#include <string>

#include "lagrangian_fields.hpp"
#include "matcha/core/errors.hpp"
#include "matcha/mesh/fourier_grid.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "quadrature.hpp"

namespace matcha::cosmology {

using detail::Complex;
using detail::formatNumber;
using detail::halfModes;

namespace detail {

StartFactors startFactors(const CosmologicalIcParams& params) {
  // The growth at the start, H0 = 100 km/s per Mpc/h so that H comes out in GADGET's velocity per length.
  const Background background(params.cosmology, kHubbleKmPerSPerMpcOverH);
  StartFactors factors;
  IcGrowth& growth = factors.growth;
  const double a = params.scaleFactor();
  growth.scaleFactor = a;
  growth.growthRatio = background.growthFactorRatio(a);
  growth.growthFactor = background.growthFactor(a);
  growth.growthRate = background.growthRate(a);
  growth.hubble = background.hubble(a);
  const double todayGrowth = background.growthFactor(1.0);
  if (params.lptOrder == 2) {
    growth.secondOrder = background.secondOrderGrowthFactor(a);
    growth.secondOrderRate = background.secondOrderGrowthRate(a);
  }
  const double cellVolume = std::pow(params.boxSize / params.grid, 3);
  growth.particleMass = params.cosmology.omegaMatter * kCriticalDensity * cellVolume;
  // modes are the z = 0 field; phi1 belongs to delta / D1(1), so Psi1 = -D1(a) grad phi1 = -(D1(a)/D1(1)) grad
  // phi1[delta_0], and phi2, quadratic in phi1, carries 1 / D1(1)^2.
  factors.firstFactor = growth.growthRatio;
  factors.secondFactor = growth.secondOrder / (todayGrowth * todayGrowth);
  // u = v / sqrt(a), v = a H f Psi.
  factors.velocityFactor = a * growth.hubble / std::sqrt(a);
  return factors;
}

}  // namespace detail

void CosmologicalIcParams::validate() const {
  if (!(std::isfinite(boxSize) && boxSize > 0)) {
    throw InputError("--box must be a finite number > 0 (Mpc/h) (got " + formatNumber(boxSize) + ")");
  }
  mesh::requireFftFriendlyGrid(grid, "--grid");
  if (!(std::isfinite(startRedshift) && startRedshift > 0)) {
    throw InputError("--z-start must be a finite number > 0 (got " + formatNumber(startRedshift) + ")");
  }
  if (lptOrder != 1 && lptOrder != 2) {
    throw InputError("--lpt must be 1 (Zel'dovich) or 2 (2LPT) (got " + std::to_string(lptOrder) + ")");
  }
  cosmology.validate();
}

DensityModes gaussianDensityModes(const CosmologicalIcParams& params, const std::function<double(double)>& power) {
  params.validate();
  const int n = params.grid;
  DensityModes modes{n, params.boxSize, std::vector<Complex>(static_cast<std::size_t>(n) * n * halfModes(n))};
  const auto index = [n](int mx, int my, int mz) {
    return (static_cast<std::size_t>(mx) * n + static_cast<std::size_t>(my)) * halfModes(n) +
           static_cast<std::size_t>(mz);
  };
  detail::fillDensityModes(modes.values.data(), 0, n, params, index, power);
  return modes;
}

CosmologicalIcs makeCosmologicalIcs(const CosmologicalIcParams& params, const DensityModes& modes) {
  params.validate();
  const int n = params.grid;
  const double boxSize = params.boxSize;
  if (modes.grid != n || modes.boxSize != boxSize ||
      modes.values.size() != static_cast<std::size_t>(n) * n * halfModes(n)) {
    throw InputError("cosmological initial conditions: the density modes are for another grid or box");
  }
  return detail::lagrangianBodies<mesh::FourierGrid>(params, modes.values.data(),
                                                     [n] { return std::make_unique<mesh::FourierGrid>(n); });
}

CosmologicalIcs makeCosmologicalIcs(const CosmologicalIcParams& params, const std::function<double(double)>& power) {
  return makeCosmologicalIcs(params, gaussianDensityModes(params, power));
}

std::size_t cosmologicalIcBytes(const CosmologicalIcParams& params) {
  const auto n = static_cast<std::size_t>(params.grid);
  const std::size_t bodies = n * n * n * (13 * sizeof(double) + sizeof(std::uint64_t));
  const std::size_t modes = n * n * (n / 2 + 1) * sizeof(Complex);
  const std::size_t grids = (params.lptOrder == 2 ? 4 : 1) * mesh::fourierGridBytes(params.grid);
  return bodies + modes + grids;
}

}  // namespace matcha::cosmology
