// SPDX-License-Identifier: MIT
#include "matcha/integrator/diagnostics.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include <Eigen/Geometry>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>

namespace matcha::integrator {

Diagnostics measureDiagnostics(const Particles& p, double time) {
  // Partial sums over fixed blocks of bodies, combined in a fixed tree (deterministic reduce): the same totals
  // whatever the number of threads.
  struct Sums {
    double mass = 0.0, twiceKinetic = 0.0, twicePotential = 0.0;
    Eigen::Vector3d momentum = Eigen::Vector3d::Zero();
    Eigen::Vector3d angularMomentum = Eigen::Vector3d::Zero();
    Eigen::Vector3d weightedPosition = Eigen::Vector3d::Zero();
  };
  const Sums sums = tbb::parallel_deterministic_reduce(
      tbb::blocked_range<std::size_t>(0, p.size(), 16384), Sums{},
      [&](const tbb::blocked_range<std::size_t>& block, Sums s) {
        for (std::size_t i = block.begin(); i != block.end(); ++i) {
          const double m = p.mass[i];
          const Eigen::Vector3d x(p.x[i], p.y[i], p.z[i]);
          const Eigen::Vector3d v(p.vx[i], p.vy[i], p.vz[i]);
          s.mass += m;
          s.twiceKinetic += m * v.squaredNorm();
          // pot_i already sums over all j != i, so the pair energy -G m_i m_j / r_ij is counted twice: hence 1/2.
          s.twicePotential += m * p.pot[i];
          s.momentum += m * v;
          s.angularMomentum += m * x.cross(v);
          s.weightedPosition += m * x;
        }
        return s;
      },
      [](Sums a, const Sums& b) {
        a.mass += b.mass;
        a.twiceKinetic += b.twiceKinetic;
        a.twicePotential += b.twicePotential;
        a.momentum += b.momentum;
        a.angularMomentum += b.angularMomentum;
        a.weightedPosition += b.weightedPosition;
        return a;
      });
  Diagnostics d;
  d.time = time;
  d.mass = sums.mass;
  d.momentum = sums.momentum;
  d.angularMomentum = sums.angularMomentum;
  d.kinetic = 0.5 * sums.twiceKinetic;
  d.potential = 0.5 * sums.twicePotential;
  d.total = d.kinetic + d.potential;
  d.virialRatio =
      d.potential != 0.0 ? 2.0 * d.kinetic / std::abs(d.potential) : std::numeric_limits<double>::quiet_NaN();
  if (d.mass > 0.0) d.centreOfMass = sums.weightedPosition / d.mass;
  return d;
}

double relativeEnergyError(double energy, double initialEnergy) {
  const double difference = std::abs(energy - initialEnergy);
  return initialEnergy != 0.0 ? difference / std::abs(initialEnergy) : difference;
}

namespace {
// Every column is one space plus 17 characters (sign, 1.9 digits, 'e', exponent sign and up to 3 exponent digits), so
// the header lines up with the numbers and the file reads as whitespace-separated columns.
constexpr const char* kNumberFormat = " %+17.9e";
constexpr const char* kNameFormat = " %17s";
constexpr const char* kColumns[] = {"time", "E", "|dE/E|", "T", "W", "2T/|W|", "|P|", "|L|", "|dL/L|", "|x_cm|"};
}  // namespace

std::string diagnosticsHeader() {
  std::string line = "#";
  char buffer[64];
  for (const char* name : kColumns) {
    std::snprintf(buffer, sizeof buffer, kNameFormat, name);
    line += buffer;
  }
  return line;
}

std::string formatDiagnostics(const Diagnostics& current, const Diagnostics& initial) {
  const double angularMomentumChange = (current.angularMomentum - initial.angularMomentum).norm();
  const double initialAngularMomentum = initial.angularMomentum.norm();
  const double values[] = {
      current.time,
      current.total,
      relativeEnergyError(current.total, initial.total),
      current.kinetic,
      current.potential,
      current.virialRatio,
      current.momentum.norm(),
      current.angularMomentum.norm(),
      initialAngularMomentum != 0.0 ? angularMomentumChange / initialAngularMomentum : angularMomentumChange,
      current.centreOfMass.norm(),
  };
  static_assert(std::size(values) == std::size(kColumns), "one value per header column");
  // A leading space stands where the header has its '#', so the columns line up.
  std::string line = " ";
  char buffer[64];
  for (double value : values) {
    std::snprintf(buffer, sizeof buffer, kNumberFormat, value);
    line += buffer;
  }
  return line;
}

}  // namespace matcha::integrator
