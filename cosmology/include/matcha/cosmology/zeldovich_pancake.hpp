// SPDX-License-Identifier: MIT
// Two validation problems of comoving runs with an exact answer (issue 16): the Zel'dovich pancake and the constant
// comoving volume. Their initial conditions, their analytic solutions, and the measurement of a snapshot against them.
//
// Both live in Einstein-de Sitter (Omega_m = 1, Omega_Lambda = 0), in the units and conventions of
// initial_conditions.hpp (GADGET's): lengths in Mpc/h, masses in 1e10 M_sun/h, velocities in km/s stored as
// u = v / sqrt(a) with v = a dx/dt the peculiar velocity of the comoving position x; one body per grid point
// p = (px, py, pz) at q = p L / n, id = (px n + py) n + pz, mass Omega_m rho_crit L^3 / n^3 = kCriticalDensity L^3 /
// n^3, positions wrapped into [0, L).
//
// The pancake: one plane wave along x whose wavelength is the box, k = 2 pi / L. Body q moves along x only:
//   x(q, a) = q - (D(a) / D(a_c)) sin(k q_x) / k,     y = q_y,  z = q_z,
// D the linear growing mode, D = a in Einstein-de Sitter, a_c = 1 / (1 + z_c). Then dx/dq_x = 1 - (a / a_c)
// cos(k q_x) first vanishes at q_x = 0 when a = a_c: the bodies around q_x = 0 (and x = 0) meet there, the caustic.
//
// Why this is exact until then (Zel'dovich 1970; Efstathiou et al. 1985 use it as a code test): write
// x = q + psi(q, t) in one dimension. The comoving equation of motion is d2x/dt2 + 2 H dx/dt = g with
// g = -a^-2 dPhi/dx, Phi the peculiar potential of comoving_steps.hpp (lap_r Phi = 4 pi G (rho - rho_mean), lap_r =
// lap_x / a^2), so dg/dx = -4 pi G rho_mean delta, rho_mean(t) the physical mean density. Mass conservation while the
// map q -> x is one-to-one gives 1 + delta = 1 / (dx/dq) = 1 / (1 + psi'), so
// dg/dq = (dg/dx)(dx/dq) = -4 pi G rho_mean ((1 + psi') delta) = 4 pi G rho_mean psi'. Hence g = 4 pi G rho_mean psi
// (no constant: psi here is odd about q = 0 and the mean acceleration of a periodic box is zero) and
//   d2psi/dt2 + 2 H dpsi/dt = 4 pi G rho_mean psi,
// the linear growth equation with no approximation made: psi = D(t) psi_0(q) solves it exactly, for any amplitude,
// until two sheets cross (dx/dq = 0) and 1 + delta = 1 / (dx/dq) stops holding. In Einstein-de Sitter the growing
// mode is D = a (the decaying one, a^(-3/2), is absent from these initial conditions).
//
// Velocities: dx/dt = (dD/dt / D(a_c)) psi_0 with dD/dt = da/dt = a H(a), H(a) = 100 a^(-3/2) km/s per Mpc/h (H0 = 100
// in GADGET's units, the factor h living in the length unit). So
//   v = a dx/dt = 100 sqrt(a) / a_c * psi_0,     u = v / sqrt(a) = -100 (1 + z_c) sin(k q_x) / k   [km/s],
// with psi_0 = -sin(k q_x) / k in Mpc/h: GADGET's stored velocity u of a body does not change with time in
// Einstein-de Sitter; its peculiar velocity grows as sqrt(a).
//
// The peak velocity at a is the largest |u| over q, 100 (1 + z_c) / k (at q_x = L/4 and 3L/4), independent of a; the
// largest |v| is sqrt(a) times it. A velocity error is reported over the peak |u|, which is the same ratio as the
// error in v over the peak |v| at that a (both scale by sqrt(a)).
//
// The constant comoving volume (unperturbed): the bodies on the plain grid at rest. Every body's acceleration is zero
// by symmetry (an unperturbed lattice's force vanishes at each lattice point), so x = q and u = 0 at all a: any
// displacement a run produces is its error (force errors of the lattice, round-off, the integration of the Hubble
// drag on nothing).
#pragma once

#include <cstddef>

#include "matcha/core/particles.hpp"

namespace matcha::cosmology {

/// The largest grid side a pancake takes: 1024^3 ~ 1.07e9 bodies, below io's 2^32 bodies per snapshot.
inline constexpr int kMaxPancakeGrid = 1024;

/// What the pancake (or the unperturbed grid) is. Einstein-de Sitter: Omega_m = 1, Omega_Lambda = 0.
struct ZeldovichPancakeParams {
  double boxSize = 64.0;         ///< L, the periodic cube's side and the wave's wavelength, Mpc/h: finite and > 0
  int grid = 32;                 ///< n: n^3 bodies, one per grid point, in [2, kMaxPancakeGrid]
  double startRedshift = 100.0;  ///< z of the initial conditions: finite, > z_c (> -1 when unperturbed)
  double causticRedshift = 1.0;  ///< z_c where the first caustic forms: finite, > -1 (not used when unperturbed)
  double hubbleParam = 0.7;      ///< h, only written to the file's header (no result depends on it): finite, > 0
  bool unperturbed = false;      ///< the plain grid at rest (the constant comoving volume test) instead of the wave

  double startScaleFactor() const { return 1.0 / (1.0 + startRedshift); }
  double causticScaleFactor() const { return 1.0 / (1.0 + causticRedshift); }
  /// k = 2 pi / L, h/Mpc.
  double wavenumber() const;
  /// L / n, Mpc/h.
  double spacing() const { return boxSize / grid; }

  /// Throws InputError, one line naming the parameter as its command-line option: --box not finite or <= 0, --grid
  /// outside [2, kMaxPancakeGrid], --z-start not finite or <= -1, and without `unperturbed` --z-caustic not finite or
  /// <= -1 and --z-start not above --z-caustic; --h not finite or <= 0. The solution and the comparison below check
  /// only what they use (box, grid, z_caustic): a snapshot's measurement knows neither z_start nor h.
  void validate() const;
};

/// The analytic state of one body along x.
struct PancakeState {
  double x = 0;  ///< comoving position, wrapped into [0, L), Mpc/h
  double u = 0;  ///< GADGET's velocity u = v / sqrt(a), km/s
};

/// The pancake's body with Lagrangian coordinate qx (Mpc/h, any real; the solution is periodic in it) at scale factor
/// a: x = qx - (a / a_c) sin(k qx) / k wrapped into [0, L), u = -100 (1 + z_c) sin(k qx) / k (the file comment). With
/// `unperturbed`: x = qx wrapped, u = 0. Checks box, grid, z_c as validate() does.
/// @throws InputError unless a is finite and 0 < a <= a_c (1 + 1e-9), the tolerance taking a snapshot at the caustic
///         whose a was rounded (any finite a > 0 when unperturbed): after the caustic the solution is multi-valued.
PancakeState pancakeSolution(const ZeldovichPancakeParams& params, double qx, double scaleFactor);

/// The largest |u| over all bodies, 100 (1 + z_c) / k km/s, the same at every a (0 when unperturbed). Checks box,
/// grid, z_c as validate() does.
double pancakePeakVelocity(const ZeldovichPancakeParams& params);

/// The n^3 bodies at the start redshift: on the grid, displaced and moving along x by pancakeSolution (at rest on the
/// grid when unperturbed); ids and masses as the file comment; accelerations and potentials zero. Validates params.
/// Allocates the bodies (Particles' 13 doubles and an id each).
Particles makeZeldovichPancake(const ZeldovichPancakeParams& params);

/// The largest value and the 99th percentile (the smallest value that 99% of the bodies do not exceed) of an error.
struct ErrorSummary {
  double max = 0;
  double percentile99 = 0;
};

/// A snapshot against the analytic solution, every error a ratio to a stated scale so that the two problems read
/// alike: the pancake's are fractions of the wavelength and of the peak velocity, the unperturbed grid's are in grid
/// spacings and in km/s.
struct PancakeErrors {
  bool unperturbed = false;
  std::size_t numBodies = 0;
  double scaleFactor = 0;    ///< a of the snapshot
  double growthRatio = 0;    ///< D(a) / D(a_c) = a / a_c, the wave's amplitude in units of the caustic's; 0 unperturbed
  double spacing = 0;        ///< L / n, Mpc/h
  double positionScale = 0;  ///< L (the wavelength) for the pancake, L / n (the grid spacing) when unperturbed; Mpc/h
  double velocityScale = 0;  ///< the peak |u| (pancakePeakVelocity) for the pancake, 1 km/s when unperturbed
  ErrorSummary position;     ///< |x - x_exact| (the shorter way round the box) / positionScale
  ErrorSummary velocity;     ///< |u_x - u_exact| / velocityScale
  ErrorSummary transverse;   ///< max(|y - q_y|, |z - q_z|) (the shorter way round) / spacing, for either problem
  double transverseVelocity = 0;  ///< max over bodies of max(|u_y|, |u_z|) / velocityScale
};

/// Compares bodies (a snapshot's, in any order) with the analytic solution at scale factor `scaleFactor`: each body's
/// Lagrangian point q comes from its id (id = (px n + py) n + pz), its x and u_x are compared with pancakeSolution, its
/// y and z with q_y and q_z, and its u_y, u_z with 0. Positions are compared modulo L, so wrapped or unwrapped
/// coordinates both work. Reads only positions, velocities and ids. Checks box, grid, z_c as validate() does; allocates
/// 3 N doubles and N bits.
/// @throws InputError (one line) when the body count is not n^3, an id is outside [0, n^3) or repeats, a position or
///         velocity is not finite, or the scale factor is refused as by pancakeSolution.
PancakeErrors comparePancake(const Particles& particles, double scaleFactor, const ZeldovichPancakeParams& params);

}  // namespace matcha::cosmology
