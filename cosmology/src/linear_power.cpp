// SPDX-License-Identifier: MIT
#include "matcha/cosmology/linear_power.hpp"

#include <algorithm>
#include <boost/math/interpolators/cubic_hermite.hpp>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <numbers>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "matcha/core/errors.hpp"
#include "quadrature.hpp"

namespace matcha::cosmology {

namespace {

using detail::formatNumber;

constexpr double kPi = std::numbers::pi;
constexpr double kE = std::numbers::e;

/// Below this k (h/Mpc) every EH98 transfer function is 1 to double precision (1 - T ~ k^2 there), and the
/// (beta / k s)^3 terms of the full form would overflow.
constexpr double kTransferUnityWavenumber = 1e-20;

/// sigma(R)'s quadrature: the window in x = kR outside which sigma^2 gains ~1e-10 relative for n_s ~ 1 (W^2 ~
/// 4.5 x^-4 at large x against the slowly rising k^3 P; k^3 P ~ k^(3 + n_s) at small x), and the relative tolerance
/// per panel.
constexpr double kSigmaMinKR = 1e-4;
constexpr double kSigmaMaxKR = 1e3;
constexpr double kSigmaTolerance = 1e-11;

void requireFinite(double value, const char* name) {
  if (!std::isfinite(value)) {
    throw InputError(std::string("linear power: ") + name + " must be finite (got " + formatNumber(value) + ")");
  }
}

void requirePositive(double value, const char* name) {
  requireFinite(value, name);  // first: an ordered comparison with NaN raises FE_INVALID (SIGFPE in trapping tests)
  if (!(value > 0.0)) {
    throw InputError(std::string("linear power: ") + name + " must be > 0 (got " + formatNumber(value) + ")");
  }
}

/// The spherical top hat's window W(x) = 3 (sin x - x cos x) / x^3; its Taylor series below x = 0.1, where the
/// difference loses ~2 log10(1/x) digits (the next term, x^10 / 1.3e8, is below 1e-18 there).
double topHatWindow(double x) {
  if (x < 0.1) {
    const double x2 = x * x;
    return 1.0 + x2 * (-1.0 / 10.0 + x2 * (1.0 / 280.0 + x2 * (-1.0 / 15120.0 + x2 / 1330560.0)));
  }
  return 3.0 * (std::sin(x) - x * std::cos(x)) / (x * x * x);
}

}  // namespace

// ------------------------------------------------------------------------------------------------- Eisenstein & Hu

void EisensteinHuParams::validate() const {
  requirePositive(omegaMatter, "Omega_m");
  requirePositive(omegaBaryon, "Omega_b");
  if (!(omegaBaryon < omegaMatter)) {
    throw InputError("linear power: Omega_b = " + formatNumber(omegaBaryon) +
                     " must be < Omega_m = " + formatNumber(omegaMatter));
  }
  requirePositive(hubbleParam, "h");
  requirePositive(cmbTemperature, "T_CMB");
}

EisensteinHuTransfer::EisensteinHuTransfer(const EisensteinHuParams& params) : params_(params) {
  params_.validate();
  const double h = params_.hubbleParam;
  const double wm = params_.omegaMatter * h * h;  // Omega_0 h^2
  const double wb = params_.omegaBaryon * h * h;  // Omega_b h^2
  omegaMatterH2_ = wm;
  baryonFraction_ = params_.omegaBaryon / params_.omegaMatter;
  cdmFraction_ = 1.0 - baryonFraction_;
  thetaCmb_ = params_.cmbTemperature / 2.7;
  const double theta2 = thetaCmb_ * thetaCmb_;
  const double theta4 = theta2 * theta2;

  // Equality (its 1 + z) and its wavenumber, the drag epoch, the baryon-to-photon momentum ratios R there.
  const double equalityRedshift = 2.50e4 * wm / theta4;
  equalityWavenumber_ = 7.46e-2 * wm / theta2;
  const double dragB1 = 0.313 * std::pow(wm, -0.419) * (1.0 + 0.607 * std::pow(wm, 0.674));
  const double dragB2 = 0.238 * std::pow(wm, 0.223);
  const double dragRedshift =
      1291.0 * std::pow(wm, 0.251) / (1.0 + 0.659 * std::pow(wm, 0.828)) * (1.0 + dragB1 * std::pow(wb, dragB2));
  const auto momentumRatio = [&](double redshift) { return 31.5 * wb / theta4 * (1e3 / redshift); };
  const double dragR = momentumRatio(dragRedshift);
  const double equalityR = momentumRatio(equalityRedshift);
  soundHorizon_ = 2.0 / (3.0 * equalityWavenumber_) * std::sqrt(6.0 / equalityR) *
                  std::log((std::sqrt(1.0 + dragR) + std::sqrt(dragR + equalityR)) / (1.0 + std::sqrt(equalityR)));
  silkWavenumber_ = 1.6 * std::pow(wb, 0.52) * std::pow(wm, 0.73) * (1.0 + std::pow(10.4 * wm, -0.95));

  // CDM: the suppression alpha_c and the log shift beta_c.
  const double alphaA1 = std::pow(46.9 * wm, 0.670) * (1.0 + std::pow(32.1 * wm, -0.532));
  const double alphaA2 = std::pow(12.0 * wm, 0.424) * (1.0 + std::pow(45.0 * wm, -0.582));
  alphaCdm_ = std::pow(alphaA1, -baryonFraction_) * std::pow(alphaA2, -std::pow(baryonFraction_, 3));
  const double betaB1 = 0.944 / (1.0 + std::pow(458.0 * wm, -0.708));
  const double betaB2 = std::pow(0.395 * wm, -0.0266);
  betaCdm_ = 1.0 / (1.0 + betaB1 * (std::pow(cdmFraction_, betaB2) - 1.0));

  // Baryons: the amplitude alpha_b of their acoustic term, its damping onset beta_b, the node shift beta_node.
  const double y = equalityRedshift / (1.0 + dragRedshift);
  const double sqrtOnePlusY = std::sqrt(1.0 + y);
  const double growthG =
      y * (-6.0 * sqrtOnePlusY + (2.0 + 3.0 * y) * std::log((sqrtOnePlusY + 1.0) / (sqrtOnePlusY - 1.0)));
  alphaBaryon_ = 2.07 * equalityWavenumber_ * soundHorizon_ * std::pow(1.0 + dragR, -0.75) * growthG;
  betaBaryon_ = 0.5 + baryonFraction_ + (3.0 - 2.0 * baryonFraction_) * std::sqrt((17.2 * wm) * (17.2 * wm) + 1.0);
  betaNode_ = 8.41 * std::pow(wm, 0.435);

  // The no-wiggle form's approximate sound horizon (eq. 26) and the asymptotic suppression alpha_Gamma.
  soundHorizonFit_ = 44.5 * std::log(9.83 / wm) / std::sqrt(1.0 + 10.0 * std::pow(wb, 0.75));
  alphaGamma_ = 1.0 - 0.328 * std::log(431.0 * wm) * baryonFraction_ +
                0.38 * std::log(22.3 * wm) * baryonFraction_ * baryonFraction_;
}

double EisensteinHuTransfer::withWiggles(double wavenumber) const {
  if (wavenumber < kTransferUnityWavenumber) return 1.0;
  const double k = wavenumber * params_.hubbleParam;  // Mpc^-1, the paper's unit
  const double q = k / (13.41 * equalityWavenumber_);
  const double ks = k * soundHorizon_;
  // T0~(k, alpha, beta), the pressureless shape with a log shift beta and a suppression alpha.
  const auto shape = [&](double alpha, double beta) {
    const double logarithm = std::log(kE + 1.8 * beta * q);
    const double c = 14.2 / alpha + 386.0 / (1.0 + 69.9 * std::pow(q, 1.08));
    return logarithm / (logarithm + c * q * q);
  };
  const double interpolation = 1.0 / (1.0 + std::pow(ks / 5.4, 4));
  const double cdm = interpolation * shape(1.0, betaCdm_) + (1.0 - interpolation) * shape(alphaCdm_, betaCdm_);

  const double shiftedHorizon = soundHorizon_ / std::cbrt(1.0 + std::pow(betaNode_ / ks, 3));
  const double x = k * shiftedHorizon;
  const double baryon =
      (shape(1.0, 1.0) / (1.0 + (ks / 5.2) * (ks / 5.2)) +
       alphaBaryon_ / (1.0 + std::pow(betaBaryon_ / ks, 3)) * std::exp(-std::pow(k / silkWavenumber_, 1.4))) *
      std::sin(x) / x;
  return baryonFraction_ * baryon + cdmFraction_ * cdm;
}

double EisensteinHuTransfer::noWiggle(double wavenumber) const {
  const double k = wavenumber * params_.hubbleParam;  // Mpc^-1
  const double gammaEffective = params_.omegaMatter * params_.hubbleParam *
                                (alphaGamma_ + (1.0 - alphaGamma_) / (1.0 + std::pow(0.43 * k * soundHorizonFit_, 4)));
  const double q = wavenumber * thetaCmb_ * thetaCmb_ / gammaEffective;  // k in h/Mpc here, as in the paper
  const double logarithm = std::log(2.0 * kE + 1.8 * q);
  const double c = 14.2 + 731.0 / (1.0 + 62.5 * q);
  return logarithm / (logarithm + c * q * q);
}

void LinearPowerParams::validate() const {
  transfer.validate();
  requireFinite(spectralIndex, "n_s");
  requirePositive(sigma8, "sigma_8");
}

// ---------------------------------------------------------------------------------------------------------- tables

namespace {

/// The whitespace-separated fields of a line, comments ('#' onwards) removed.
std::vector<std::string_view> splitFields(std::string_view line) {
  line = line.substr(0, line.find('#'));
  std::vector<std::string_view> fields;
  constexpr std::string_view kSpace = " \t\r\v\f";
  std::size_t begin = line.find_first_not_of(kSpace);
  while (begin != std::string_view::npos) {
    const std::size_t end = line.find_first_of(kSpace, begin);
    fields.push_back(line.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    begin = line.find_first_not_of(kSpace, end == std::string_view::npos ? line.size() : end);
  }
  return fields;
}

/// The whole field as a double, or nullopt (from_chars: locale-independent, "nan" and "inf" parse as such).
std::optional<double> parseNumber(std::string_view field) {
  double value = 0.0;
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (error != std::errc() || end != field.data() + field.size()) return std::nullopt;
  return value;
}

}  // namespace

PowerTable readPowerTable(const std::filesystem::path& path) {
  const std::string name = "power-spectrum table '" + path.string() + "'";
  std::error_code error;
  if (!std::filesystem::exists(path, error)) throw InputError(name + ": no such file");
  if (std::filesystem::is_directory(path, error)) throw InputError(name + ": is a directory, not a file");
  std::ifstream file(path);
  if (!file) throw InputError(name + ": cannot be opened");

  PowerTable table;
  std::string line;
  for (std::size_t lineNumber = 1; std::getline(file, line); ++lineNumber) {
    const std::vector<std::string_view> fields = splitFields(line);
    if (fields.empty()) continue;
    const std::string where = name + " line " + std::to_string(lineNumber) + ": ";
    const std::optional<double> k = fields.size() == 2 ? parseNumber(fields[0]) : std::nullopt;
    const std::optional<double> p = fields.size() == 2 ? parseNumber(fields[1]) : std::nullopt;
    if (!k || !p) {
      std::string shown = line.substr(0, line.find('#'));
      while (!shown.empty() && std::string_view(" \t\r").find(shown.back()) != std::string_view::npos) shown.pop_back();
      if (shown.size() > 60) shown = shown.substr(0, 60) + "...";
      throw InputError(where + "expected two numbers, k [h/Mpc] and P(k) [(Mpc/h)^3], got '" + shown + "'");
    }
    if (!std::isfinite(*k) || !std::isfinite(*p)) throw InputError(where + "a value is not finite");
    if (!(*k > 0.0)) throw InputError(where + "k = " + formatNumber(*k) + " must be > 0");
    if (!(*p > 0.0)) throw InputError(where + "P(k) = " + formatNumber(*p) + " must be > 0");
    if (!table.wavenumbers.empty() && !(*k > table.wavenumbers.back())) {
      throw InputError(where + "k = " + formatNumber(*k) + " does not exceed the previous row's " +
                       formatNumber(table.wavenumbers.back()) + " (k must increase)");
    }
    table.wavenumbers.push_back(*k);
    table.powers.push_back(*p);
  }
  if (file.bad()) throw InputError(name + ": reading failed");
  if (table.wavenumbers.empty()) throw InputError(name + ": no data rows");
  if (table.wavenumbers.size() < 2) throw InputError(name + ": one data row; at least 2 are needed");
  return table;
}

// ------------------------------------------------------------------------------------------- LinearPowerSpectrum

LinearPowerSpectrum::LinearPowerSpectrum(std::function<double(double)> shape, double minWavenumber,
                                         double maxWavenumber, std::vector<double> nodeLogWavenumbers)
    : shape_(std::move(shape)),
      minWavenumber_(minWavenumber),
      maxWavenumber_(maxWavenumber),
      nodeLogWavenumbers_(std::move(nodeLogWavenumbers)) {}

LinearPowerSpectrum LinearPowerSpectrum::eisensteinHu(const LinearPowerParams& params) {
  params.validate();
  const EisensteinHuTransfer transfer(params.transfer);
  const double spectralIndex = params.spectralIndex;
  std::function<double(double)> shape;
  if (params.form == TransferForm::withWiggles) {
    shape = [transfer, spectralIndex](double k) {
      const double t = transfer.withWiggles(k);
      return std::pow(k, spectralIndex) * t * t;
    };
  } else {
    shape = [transfer, spectralIndex](double k) {
      const double t = transfer.noWiggle(k);
      return std::pow(k, spectralIndex) * t * t;
    };
  }
  LinearPowerSpectrum spectrum(std::move(shape), 0.0, std::numeric_limits<double>::infinity(), {});
  spectrum.normalise(params.sigma8);
  return spectrum;
}

LinearPowerSpectrum LinearPowerSpectrum::fromTable(const std::filesystem::path& path, std::optional<double> sigma8) {
  if (sigma8) requirePositive(*sigma8, "sigma_8");
  PowerTable table = readPowerTable(path);
  const std::size_t n = table.wavenumbers.size();
  std::vector<double> x(n), y(n), slope(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::log(table.wavenumbers[i]);
    y[i] = std::log(table.powers[i]);
  }
  // Three-point slopes on the uneven grid (exact for quadratics), one-sided at the ends; the chord for 2 rows.
  if (n == 2) {
    slope[0] = slope[1] = (y[1] - y[0]) / (x[1] - x[0]);
  } else {
    const auto threePoint = [&](std::size_t i0, std::size_t at) {
      const double h0 = x[i0 + 1] - x[i0];
      const double h1 = x[i0 + 2] - x[i0 + 1];
      const double d0 = (y[i0 + 1] - y[i0]) / h0;
      const double d1 = (y[i0 + 2] - y[i0 + 1]) / h1;
      // The derivative at x[at] of the parabola through the three points.
      if (at == i0) return d0 - h0 * (d1 - d0) / (h0 + h1);
      if (at == i0 + 1) return (h1 * d0 + h0 * d1) / (h0 + h1);
      return d1 + h1 * (d1 - d0) / (h0 + h1);
    };
    slope[0] = threePoint(0, 0);
    for (std::size_t i = 1; i + 1 < n; ++i) slope[i] = threePoint(i - 1, i);
    slope[n - 1] = threePoint(n - 3, n - 1);
  }
  const double firstLog = x.front();
  const double lastLog = x.back();
  std::vector<double> nodes = x;
  boost::math::interpolators::cubic_hermite interpolant(std::move(x), std::move(y), std::move(slope));
  auto shape = [interpolant, firstLog, lastLog](double k) {
    const double logK = std::log(k);
    if (!(logK >= firstLog && logK <= lastLog)) return 0.0;
    return std::exp(interpolant(logK));
  };
  LinearPowerSpectrum spectrum(std::move(shape), table.wavenumbers.front(), table.wavenumbers.back(), std::move(nodes));
  spectrum.amplitude_ = 1.0;
  spectrum.sigma8_ = std::sqrt(spectrum.sigmaSquared(kSigma8Radius));
  if (sigma8) spectrum.normalise(*sigma8);
  return spectrum;
}

double LinearPowerSpectrum::power(double wavenumber) const {
  // isnan first: an ordered comparison with NaN raises FE_INVALID (SIGFPE in trapping tests).
  if (std::isnan(wavenumber) || wavenumber < 0.0) {
    throw InputError("linear power: k must be >= 0 (got " + formatNumber(wavenumber) + ")");
  }
  if (wavenumber == 0.0) return 0.0;
  return amplitude_ * shape_(wavenumber);
}

double LinearPowerSpectrum::sigmaSquared(double radius) const {
  // Panels in ln k: at most 0.5 wide, at most a quarter period of W^2 (pi/2 in kR) where W oscillates, and ending
  // at a table's rows, so that every panel's integrand is smooth and tanh-sinh converges in a few levels.
  const double lower = std::max(kSigmaMinKR / radius, minWavenumber_);
  const double upper = std::min(kSigmaMaxKR / radius, maxWavenumber_);
  if (!(lower < upper)) return 0.0;
  std::vector<double> breaks;
  for (double k = lower; k < upper; k = std::min(k * std::exp(0.5), k + 0.5 * kPi / radius)) {
    breaks.push_back(std::log(k));
  }
  const double firstBreak = breaks.front();
  const double lastBreak = std::log(upper);
  breaks.push_back(lastBreak);
  for (const double node : nodeLogWavenumbers_) {
    if (node > firstBreak && node < lastBreak) breaks.push_back(node);
  }
  std::sort(breaks.begin(), breaks.end());
  breaks.erase(std::unique(breaks.begin(), breaks.end()), breaks.end());

  const auto integrand = [&](double logK) {
    const double k = std::min(std::max(std::exp(logK), lower), upper);  // exp(log k) may round past the ends
    const double window = topHatWindow(k * radius);
    return k * k * k * shape_(k) * window * window;
  };
  double sum = 0.0;
  for (std::size_t i = 0; i + 1 < breaks.size(); ++i) {
    sum += detail::integrate(integrand, breaks[i], breaks[i + 1], kSigmaTolerance, "sigma(R)");
  }
  return amplitude_ * sum / (2.0 * kPi * kPi);
}

double LinearPowerSpectrum::sigma(double radius) const {
  requirePositive(radius, "the radius R of sigma(R)");
  return std::sqrt(sigmaSquared(radius));
}

void LinearPowerSpectrum::normalise(double sigma8) {
  amplitude_ = 1.0;
  const double unnormalised = sigmaSquared(kSigma8Radius);
  if (!(unnormalised > 0.0)) {
    throw InputError("linear power: sigma_8 cannot be set: the spectrum has no power within 1e-4 < k R < 1e3");
  }
  amplitude_ = sigma8 * sigma8 / unnormalised;
  sigma8_ = sigma8;
}

}  // namespace matcha::cosmology
