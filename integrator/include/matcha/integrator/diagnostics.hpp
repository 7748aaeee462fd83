// SPDX-License-Identifier: MIT
// Conserved quantities and the virial ratio of the current state (DESIGN.md §5 physics checks).
#pragma once

#include <Eigen/Core>
#include <string>

#include "matcha/core/particles.hpp"

namespace matcha::integrator {

/// Totals of one state. Vectors are about the origin of the coordinates.
struct Diagnostics {
  double time = 0.0;         ///< simulation time the state belongs to (copied from the caller)
  double kinetic = 0.0;      ///< T = 1/2 sum m v^2
  double potential = 0.0;    ///< W = 1/2 sum m pot (pot from the last force call; G and softening included)
  double total = 0.0;        ///< E = T + W
  double virialRatio = 0.0;  ///< 2T/|W|; 1 in virial equilibrium; NaN when W = 0 (e.g. before the first force call)
  Eigen::Vector3d momentum = Eigen::Vector3d::Zero();         ///< P = sum m v
  Eigen::Vector3d angularMomentum = Eigen::Vector3d::Zero();  ///< L = sum m x cross v
  Eigen::Vector3d centreOfMass = Eigen::Vector3d::Zero();     ///< sum m x / M (zero when M = 0)
  double mass = 0.0;                                          ///< M = sum m
};

/// Measures the totals of the current state in one parallel pass over the bodies (sums over fixed blocks in index
/// order, combined deterministically: the same values on any number of threads; a reordered state gives the same
/// values up to rounding). Does not allocate.
/// @param p     in: positions, velocities, masses and the potentials of the last force call
/// @param time  in: stored in the result as is
Diagnostics measureDiagnostics(const Particles& p, double time);

/// |E - E0| / |E0|, or |E - E0| when E0 = 0 (a relative error is then meaningless).
double relativeEnergyError(double energy, double initialEnergy);

/// Column names of formatDiagnostics, one line without a newline, starting with '#':
///   # time E |dE/E| T W 2T/|W| |P| |L| |dL/L| |x_cm|
std::string diagnosticsHeader();

/// One line (no newline) of fixed-width columns in scientific notation matching diagnosticsHeader():
/// time, E, |E - E0|/|E0|, T, W, 2T/|W|, |P|, |L|, |L - L0|/|L0| (|L - L0| when L0 = 0), |x_cm|.
/// @param current  in: the state to print
/// @param initial  in: the reference state (usually t = 0) for the energy and angular-momentum errors
std::string formatDiagnostics(const Diagnostics& current, const Diagnostics& initial);

}  // namespace matcha::integrator
