// SPDX-License-Identifier: MIT
#include "matcha/cosmology/zeldovich_pancake.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/cosmology/initial_conditions.hpp"
#include "quadrature.hpp"

namespace matcha::cosmology {

namespace {

using detail::formatNumber;

/// A snapshot written at the caustic records a = a_c up to the rounding of 1/(1 + z_c) and of the run's time line
/// (which takes a to within 1e-9 in ln a of an output as that output): such an a is the caustic's.
constexpr double kCausticTolerance = 1e-9;

/// The shorter signed way from b to a round a circle of circumference L.
double periodicDifference(double a, double b, double boxSize) {
  const double d = a - b;
  return d - boxSize * std::round(d / boxSize);
}

/// The grid point p = (px, py, pz) of body id = (px n + py) n + pz; the caller has checked id < n^3.
struct GridPoint {
  std::uint64_t px, py, pz;
};
GridPoint gridPoint(std::uint64_t id, std::uint64_t n) { return {id / (n * n), (id / n) % n, id % n}; }

/// The 99th percentile (the value at rank ceil(0.99 N) of the ascending order) and the largest value; reorders.
ErrorSummary summarise(std::vector<double>& errors) {
  ErrorSummary summary;
  if (errors.empty()) return summary;
  const std::size_t rank = (errors.size() * 99 + 99) / 100 - 1;  // ceil(0.99 N) - 1, in [0, N)
  std::nth_element(errors.begin(), errors.begin() + static_cast<std::ptrdiff_t>(rank), errors.end());
  summary.percentile99 = errors[rank];
  summary.max = *std::max_element(errors.begin() + static_cast<std::ptrdiff_t>(rank), errors.end());
  return summary;
}

/// The checks of validate() on what the solution uses (box, grid, z_c): a snapshot's comparison knows no z_start.
void checkSolutionParams(const ZeldovichPancakeParams& params) {
  if (!(std::isfinite(params.boxSize) && params.boxSize > 0)) {
    throw InputError("--box must be a finite number > 0 (Mpc/h) (got " + formatNumber(params.boxSize) + ")");
  }
  if (params.grid < 2 || params.grid > kMaxPancakeGrid) {
    throw InputError("--grid must be 2 to " + std::to_string(kMaxPancakeGrid) + " bodies per side (got " +
                     std::to_string(params.grid) + ")");
  }
  if (!params.unperturbed && !(std::isfinite(params.causticRedshift) && params.causticRedshift > -1)) {
    throw InputError("--z-caustic must be a finite number > -1 (got " + formatNumber(params.causticRedshift) + ")");
  }
}

/// Throws InputError unless a is a scale factor the solution holds at (the header's contract).
void checkScaleFactor(const ZeldovichPancakeParams& params, double scaleFactor) {
  if (!(std::isfinite(scaleFactor) && scaleFactor > 0)) {
    throw InputError("pancake: the scale factor must be a finite number > 0 (got " + formatNumber(scaleFactor) + ")");
  }
  const double caustic = params.causticScaleFactor();
  if (!params.unperturbed && scaleFactor > caustic * (1.0 + kCausticTolerance)) {
    throw InputError("pancake: the scale factor " + formatNumber(scaleFactor) +
                     " (z = " + formatNumber(1.0 / scaleFactor - 1.0) + ") is past the caustic's " +
                     formatNumber(caustic) + " (--z-caustic " + formatNumber(params.causticRedshift) +
                     "), where the Zel'dovich solution stops holding");
  }
}

}  // namespace

double ZeldovichPancakeParams::wavenumber() const { return 2.0 * std::numbers::pi / boxSize; }

void ZeldovichPancakeParams::validate() const {
  checkSolutionParams(*this);
  if (!(std::isfinite(startRedshift) && startRedshift > -1)) {
    throw InputError("--z-start must be a finite number > -1 (got " + formatNumber(startRedshift) + ")");
  }
  if (!unperturbed && !(startRedshift > causticRedshift)) {
    throw InputError("--z-start must be above --z-caustic: the pancake starts before its caustic (got " +
                     formatNumber(startRedshift) + " <= " + formatNumber(causticRedshift) + ")");
  }
  if (!(std::isfinite(hubbleParam) && hubbleParam > 0)) {
    throw InputError("--h must be a finite number > 0 (got " + formatNumber(hubbleParam) + ")");
  }
}

PancakeState pancakeSolution(const ZeldovichPancakeParams& params, double qx, double scaleFactor) {
  checkSolutionParams(params);
  checkScaleFactor(params, scaleFactor);
  if (params.unperturbed) return {wrapIntoBox(qx, params.boxSize), 0.0};
  const double k = params.wavenumber();
  // psi_0 = -sin(k q) / k, the displacement at the caustic; D(a) / D(a_c) = a / a_c in Einstein-de Sitter.
  const double psi0 = -std::sin(k * qx) / k;
  const double growthRatio = scaleFactor / params.causticScaleFactor();
  // u = a^(3/2) dx/dt = a^(3/2) (a H(a) / a_c) psi_0 = (H0 / a_c) psi_0 with H = H0 a^(-3/2): constant in time.
  const double u = kHubbleKmPerSPerMpcOverH / params.causticScaleFactor() * psi0;
  return {wrapIntoBox(qx + growthRatio * psi0, params.boxSize), u};
}

double pancakePeakVelocity(const ZeldovichPancakeParams& params) {
  checkSolutionParams(params);
  if (params.unperturbed) return 0.0;
  return kHubbleKmPerSPerMpcOverH / params.causticScaleFactor() / params.wavenumber();
}

Particles makeZeldovichPancake(const ZeldovichPancakeParams& params) {
  params.validate();
  const auto n = static_cast<std::size_t>(params.grid);
  const double spacing = params.spacing();
  const double a = params.startScaleFactor();
  const double mass = kCriticalDensity * std::pow(spacing, 3);  // Omega_m = 1
  // One solution per x plane: every body of the plane shares it.
  std::vector<PancakeState> planes(n);
  for (std::size_t px = 0; px < n; ++px) planes[px] = pancakeSolution(params, static_cast<double>(px) * spacing, a);
  Particles bodies(n * n * n);
  for (std::size_t px = 0; px < n; ++px) {
    for (std::size_t py = 0; py < n; ++py) {
      for (std::size_t pz = 0; pz < n; ++pz) {
        const std::size_t body = (px * n + py) * n + pz;
        bodies.x[body] = planes[px].x;
        bodies.y[body] = static_cast<double>(py) * spacing;
        bodies.z[body] = static_cast<double>(pz) * spacing;
        bodies.vx[body] = planes[px].u;
        bodies.mass[body] = mass;
        bodies.id[body] = body;
      }
    }
  }
  return bodies;
}

PancakeErrors comparePancake(const Particles& particles, double scaleFactor, const ZeldovichPancakeParams& params) {
  checkSolutionParams(params);
  checkScaleFactor(params, scaleFactor);
  const auto n = static_cast<std::uint64_t>(params.grid);
  const std::uint64_t expected = n * n * n;
  const std::size_t count = particles.size();
  if (count != expected) {
    throw InputError("pancake: " + std::to_string(count) + " bodies, but a grid of " + std::to_string(n) + "^3 has " +
                     std::to_string(expected));
  }
  const double boxSize = params.boxSize;
  const double spacing = params.spacing();
  PancakeErrors errors;
  errors.unperturbed = params.unperturbed;
  errors.numBodies = count;
  errors.scaleFactor = scaleFactor;
  errors.growthRatio = params.unperturbed ? 0.0 : scaleFactor / params.causticScaleFactor();
  errors.spacing = spacing;
  errors.positionScale = params.unperturbed ? spacing : boxSize;
  errors.velocityScale = params.unperturbed ? 1.0 : pancakePeakVelocity(params);

  // The solution depends on q_x alone: one per x plane.
  std::vector<PancakeState> planes(static_cast<std::size_t>(n));
  for (std::uint64_t px = 0; px < n; ++px) {
    planes[px] = pancakeSolution(params, static_cast<double>(px) * spacing, scaleFactor);
  }
  std::vector<double> position(count), velocity(count), transverse(count);
  std::vector<bool> seen(count, false);
  double transverseVelocity = 0.0;
  for (std::size_t b = 0; b < count; ++b) {
    const std::uint64_t id = particles.id[b];
    if (id >= expected) {
      throw InputError("pancake: body " + std::to_string(b) + " has id " + std::to_string(id) +
                       ", outside the grid's 0 to " + std::to_string(expected - 1));
    }
    if (seen[id]) throw InputError("pancake: id " + std::to_string(id) + " appears twice");
    seen[id] = true;
    for (const double value :
         {particles.x[b], particles.y[b], particles.z[b], particles.vx[b], particles.vy[b], particles.vz[b]}) {
      if (!std::isfinite(value)) {
        throw InputError("pancake: body " + std::to_string(b) + " (id " + std::to_string(id) +
                         ") has a position or velocity that is not finite");
      }
    }
    const GridPoint p = gridPoint(id, n);
    const PancakeState& exact = planes[p.px];
    position[b] = std::abs(periodicDifference(particles.x[b], exact.x, boxSize)) / errors.positionScale;
    velocity[b] = std::abs(particles.vx[b] - exact.u) / errors.velocityScale;
    const double dy = periodicDifference(particles.y[b], static_cast<double>(p.py) * spacing, boxSize);
    const double dz = periodicDifference(particles.z[b], static_cast<double>(p.pz) * spacing, boxSize);
    transverse[b] = std::max(std::abs(dy), std::abs(dz)) / spacing;
    transverseVelocity = std::max({transverseVelocity, std::abs(particles.vy[b]), std::abs(particles.vz[b])});
  }
  errors.position = summarise(position);
  errors.velocity = summarise(velocity);
  errors.transverse = summarise(transverse);
  errors.transverseVelocity = transverseVelocity / errors.velocityScale;
  return errors;
}

}  // namespace matcha::cosmology
