// SPDX-License-Identifier: MIT
// The homogeneous background of a Lambda-CDM universe (issue 16): expansion rate, cosmic time, linear and
// second-order growth factors, and the leapfrog's drift and kick factors in comoving coordinates.
//
// The model holds pressureless matter, a cosmological constant and curvature, Omega_k = 1 - Omega_m - Omega_Lambda.
// Radiation (photons and massless neutrinos, Omega_r ~ 9e-5) is ignored: it would add Omega_r / (Omega_m a) ~
// 3e-4 (1 + z) to E(a)^2 relative, 1% at z ~ 30 and 3% at z ~ 100 (half that in H). N-body codes commonly drop it for
// runs that start at z <~ 100; starts at higher redshift would need it added here.
//
// Units: the caller passes H0 in its own unit of inverse time, and every time-like result (t, drift and kick factors)
// comes back in the inverse of that unit. In N-body units with G = 1 and the critical density rho_crit = 1,
// H0 = sqrt(8 pi / 3). Scale factors are normalised to a = 1 today.
#pragma once

namespace matcha::cosmology {

/// The parameters of a Lambda-CDM background. Defaults: Planck 2018 (TT,TE,EE+lowE+lensing+BAO, Table 2 col. 6).
struct CosmologyParams {
  double omegaMatter = 0.3111;  ///< Omega_m today, CDM plus baryons: finite and > 0
  double omegaLambda = 0.6889;  ///< Omega_Lambda today: finite, of either sign
  double hubbleParam = 0.6766;  ///< h = H0 / (100 km/s/Mpc): finite and > 0 (used to convert H0 to physical units)
  /// Largest scale factor the background serves, >= 1: runs stop at or before it. E(a)^2 must stay positive on
  /// (0, maxScaleFactor], so a model that recollapses before it is refused.
  double maxScaleFactor = 1.0;

  /// Omega_k = 1 - Omega_m - Omega_Lambda.
  double omegaCurvature() const { return 1.0 - omegaMatter - omegaLambda; }

  /// Throws InputError (one line, naming the parameter) unless every field is finite and in range, and E(a)^2 > 0
  /// on all of (0, maxScaleFactor]: a model with E(a)^2 <= 0 somewhere in (0, 1) has no big bang (it bounced), one
  /// with E(a)^2 <= 0 in [1, maxScaleFactor] recollapses (or stalls) before maxScaleFactor.
  void validate() const;
};

/// 100 km/s/Mpc times h, in s^-1: the H0 to pass to Background after converting seconds to the caller's time unit
/// (multiply by the time unit in seconds). The megaparsec is 1e3 kpc of core/units.hpp (IAU 2015).
/// @throws InputError unless hubbleParam is finite and > 0
double hubbleTodayPerSecond(double hubbleParam);

/// z = 1/a - 1. @throws InputError unless a is finite and > 0
double redshiftFromScaleFactor(double scaleFactor);
/// a = 1/(1 + z). @throws InputError unless z is finite and > -1
double scaleFactorFromRedshift(double redshift);

/// The background functions of one cosmology, for scale factors a in (0, maxScaleFactor]. Every member taking a
/// scale factor throws InputError for a outside that range (a <= 0, NaN and a > maxScaleFactor included).
///
/// All results are computed when asked for, from closed forms, tanh-sinh quadrature (Boost.Math, relative tolerance
/// 1e-13) and, for the second-order growth, an ODE integration (Boost.Odeint, Bulirsch-Stoer, tolerance 1e-13):
/// there is no table and no interpolation error. Measured costs on one core: E, H and Omega_m(a) a few ns; t, D1,
/// f1, drift and kick 1-6 microseconds; D2 and f2 50-80 microseconds. Callers ask a handful of times per step or once
/// per initial-conditions run, so nothing is cached (a table in ln a would trade this exactness for speed no caller
/// needs). The object is immutable and thread-safe.
///
/// The quadratures substitute a' = a w^2 (t, D1), a = w^2 (kick) and a = w^-2 (drift), so that every integrand is
/// smooth and bounded, including at a -> 0, and write it with P(a) = a^3 E(a)^2 = Omega_m + Omega_k a + Omega_Lambda
/// a^3, which neither overflows nor cancels as a -> 0. A quadrature or ODE that misses its tolerance (only
/// near-stalling models with E^2 ~ 0 can) throws NumericalError.
class Background {
 public:
  /// @param params       in: the cosmology; validated here (InputError as CosmologyParams::validate)
  /// @param hubbleToday  in: H0 in the caller's unit of inverse time, finite and > 0 (else InputError)
  Background(const CosmologyParams& params, double hubbleToday);

  const CosmologyParams& params() const { return params_; }
  /// H0, in the caller's unit of inverse time.
  double hubbleToday() const { return hubbleToday_; }

  /// E(a) = H(a) / H0 = sqrt(Omega_m a^-3 + Omega_k a^-2 + Omega_Lambda). Overflows to inf for a below ~1e-205,
  /// where H itself exceeds the double range; every other member stays finite there.
  double expansionRate(double scaleFactor) const;
  /// H(a) = H0 E(a), in the caller's unit of inverse time.
  double hubble(double scaleFactor) const;
  /// Omega_m(a) = Omega_m a^-3 / E(a)^2: 1 at a -> 0, Omega_m at a = 1.
  double omegaMatterAt(double scaleFactor) const;

  /// Cosmic time since the big bang, t(a) = integral_0^a da' / (a' H(a')), in the caller's unit of time.
  /// Einstein-de Sitter: t = (2/3) a^(3/2) / H0.
  double cosmicTime(double scaleFactor) const;

  /// Linear growing mode D1(a) = (5/2) Omega_m E(a) integral_0^a da' / (a' E(a'))^3 (Heath 1977), exact for matter,
  /// curvature and Lambda. Normalised so that D1 -> a as a -> 0 (not to 1 today: use growthFactorRatio for that).
  double growthFactor(double scaleFactor) const;
  /// D1(a) / D1(referenceScaleFactor): e.g. growthFactorRatio(a) scales a z = 0 linear power spectrum's amplitude
  /// (its square scales the power) back to scale factor a.
  double growthFactorRatio(double scaleFactor, double referenceScaleFactor = 1.0) const;
  /// f1 = dln D1 / dln a, in closed form from D1: 1 in Einstein-de Sitter, ~Omega_m(a)^0.55 in flat Lambda-CDM.
  double growthRate(double scaleFactor) const;

  /// Second-order (2LPT) growth factor D2(a): the growing solution of
  ///   D2'' + (2 + dln H / dln a) D2' - (3/2) Omega_m(a) D2 = -(3/2) Omega_m(a) D1^2     (' = d / dln a)
  /// with D2 -> -(3/7) D1^2 as a -> 0 (Bouchet et al. 1995; Scoccimarro 1998). Sign convention: D2 is negative,
  /// D2 ~ -(3/7) D1^2 Omega_m(a)^(-1/143) in flat Lambda-CDM, exactly -(3/7) a^2 in Einstein-de Sitter; the 2LPT
  /// displacement is then x = q - D1 grad(phi1) + D2 grad(phi2) with phi2 sourced by +sum(phi1_ii phi1_jj - phi1_ij^2)
  /// (the convention of 2LPTic).
  ///
  /// Integrated in ln a together with D1 from a_start = 1e-6 a, starting from the exact D1(a_start), f1(a_start)
  /// and D2 = -(3/7) D1^2: the start's O(a_start) error enters D2(a) only through the growing homogeneous mode,
  /// suppressed by a further factor a_start / a, i.e. ~1e-12 relative.
  double secondOrderGrowthFactor(double scaleFactor) const;
  /// f2 = dln D2 / dln a: 2 in Einstein-de Sitter, ~2 Omega_m(a)^(6/11) in flat Lambda-CDM.
  double secondOrderGrowthRate(double scaleFactor) const;

  /// The leapfrog's drift factor from a1 to a2 in comoving coordinates with momenta p = a^2 dx/dt:
  /// integral dt / a^2 = integral_a1^a2 da / (a^3 H(a)), in the caller's unit of time. Negative for a2 < a1; both
  /// scale factors in (0, maxScaleFactor]. Einstein-de Sitter: (2 / H0) (a1^-1/2 - a2^-1/2).
  double driftFactor(double scaleFactor1, double scaleFactor2) const;
  /// The kick factor from a1 to a2: integral dt / a = integral_a1^a2 da / (a^2 H(a)), in the caller's unit of time.
  /// Negative for a2 < a1. Einstein-de Sitter: (2 / H0) (a2^1/2 - a1^1/2).
  double kickFactor(double scaleFactor1, double scaleFactor2) const;

 private:
  struct GrowthState;  // D1, D2 and their log-derivatives from one ODE integration
  GrowthState integrateGrowth(double scaleFactor) const;
  /// P(a) = a^3 E(a)^2 = Omega_m + Omega_k a + Omega_Lambda a^3.
  double cubicExpansion(double scaleFactor) const;
  void checkScaleFactor(double scaleFactor, const char* what) const;

  CosmologyParams params_;
  double hubbleToday_;
};

}  // namespace matcha::cosmology
