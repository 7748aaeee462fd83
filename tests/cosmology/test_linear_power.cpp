// SPDX-License-Identifier: MIT
// Tests of the linear power spectra: the Eisenstein & Hu (1998) transfer functions against an independent numpy
// implementation (reference/eisenstein_hu_reference.py) and against the paper's own approximations (the sound horizon
// fit, the acoustic peak position), the wiggles' shape, sigma_8 normalisation against a trapezoid written here, the
// round trip of a table, and every bad-table and bad-parameter error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/cosmology/linear_power.hpp"
#include "matcha/testing/relative_error.hpp"
#include "matcha/testing/scratch_dir.hpp"
#include "matcha/testing/test_environment.hpp"

namespace {

using matcha::InputError;
using matcha::cosmology::EisensteinHuParams;
using matcha::cosmology::EisensteinHuTransfer;
using matcha::cosmology::LinearPowerParams;
using matcha::cosmology::LinearPowerSpectrum;
using matcha::cosmology::TransferForm;
using matcha::testing::ScratchDir;

[[maybe_unused]] const auto* const kTraps = matcha::testing::trapFloatingPointInEveryTest();

EisensteinHuParams cosmology(double omegaMatter, double omegaBaryon, double hubbleParam) {
  EisensteinHuParams params;
  params.omegaMatter = omegaMatter;
  params.omegaBaryon = omegaBaryon;
  params.hubbleParam = hubbleParam;
  return params;
}

/// n + 1 points log-spaced from first to last, both included.
std::vector<double> logSpaced(double first, double last, int n) {
  std::vector<double> points(n + 1);
  for (int i = 0; i <= n; ++i) points[i] = first * std::pow(last / first, static_cast<double>(i) / n);
  return points;
}

// ------------------------------------------------------------------------------------------- Eisenstein & Hu

TEST(EisensteinHu, MatchesIndependentImplementation) {
  // Printed by reference/eisenstein_hu_reference.py for Omega_m 0.3, Omega_b 0.05, h 0.7, T_CMB 2.7255:
  // {k [h/Mpc], T with wiggles, T no-wiggle}.
  struct Row {
    double k, withWiggles, noWiggle;
  };
  const std::vector<Row> rows = {
      {0.0001, 0.9999068707401224, 0.9998993855712853},     {0.001, 0.9922532209419216, 0.9920736865527328},
      {0.01, 0.7798740343657613, 0.7861277068751104},       {0.02, 0.5812440107531087, 0.5837940694418234},
      {0.05, 0.2676973400674973, 0.27493507661448113},      {0.1, 0.12860740382656308, 0.1312002290453043},
      {0.15, 0.07913815814609071, 0.07908700984347672},     {0.2, 0.05410435866051211, 0.053640202473976974},
      {0.3, 0.02983194884507606, 0.029996173418756704},     {0.5, 0.013817715814045523, 0.013801121393296062},
      {1.0, 0.004587867256782948, 0.004553190078835265},    {3.0, 0.0007266924979174879, 0.0007180997792432117},
      {10.0, 8.776769571355506e-05, 8.670980493171401e-05}, {100.0, 1.3115184526852468e-06, 1.294283898086945e-06},
  };
  EisensteinHuParams params = cosmology(0.3, 0.05, 0.7);
  params.cmbTemperature = 2.7255;
  const EisensteinHuTransfer transfer(params);
  EXPECT_RELATIVE(transfer.soundHorizon(), 148.00504025862907, 1e-13);
  EXPECT_RELATIVE(transfer.soundHorizonFit(), 146.97253393026043, 1e-13);
  for (const Row& row : rows) {
    SCOPED_TRACE("k = " + std::to_string(row.k));
    EXPECT_RELATIVE(transfer.withWiggles(row.k), row.withWiggles, 1e-12);
    EXPECT_RELATIVE(transfer.noWiggle(row.k), row.noWiggle, 1e-12);
  }
}

TEST(EisensteinHu, TendsToOneOnLargeScalesAndFallsOnSmallOnes) {
  const EisensteinHuTransfer transfer(EisensteinHuParams{});
  for (const double k : {0.0, 1e-30, 1e-20, 1e-12, 1e-7}) {
    EXPECT_NEAR(transfer.withWiggles(k), 1.0, 1e-8) << "k = " << k;
    EXPECT_NEAR(transfer.noWiggle(k), 1.0, 1e-8) << "k = " << k;
  }
  double previous = 1.0;
  for (const double k : logSpaced(1e-6, 1e4, 400)) {
    const double t = transfer.noWiggle(k);
    EXPECT_LT(t, previous) << "k = " << k;
    EXPECT_GT(t, 0.0) << "k = " << k;
    EXPECT_GT(transfer.withWiggles(k), 0.0) << "k = " << k;
    previous = t;
  }
}

TEST(EisensteinHu, SoundHorizonFitAgreesWithTheFullFormula) {
  // EH98 give eq. 26 as a ~2% approximation of eq. 6; on this grid of Omega_m h^2 and Omega_b h^2 the two differ by
  // at most 2.3% (at Omega_m h^2 = 0.5, Omega_b h^2 = 0.015) and by 0.1-1.8% elsewhere.
  const double h = 0.7;
  for (const double wm : {0.05, 0.1, 0.14, 0.2, 0.3, 0.5}) {
    for (const double wb : {0.015, 0.0224, 0.03, 0.04}) {
      const EisensteinHuTransfer transfer(cosmology(wm / (h * h), wb / (h * h), h));
      EXPECT_RELATIVE(transfer.soundHorizonFit(), transfer.soundHorizon(), 0.025)
          << "Omega_m h^2 " << wm << ", Omega_b h^2 " << wb;
    }
  }
}

TEST(EisensteinHu, WigglesOscillateAroundTheNoWiggleShape) {
  const EisensteinHuParams params;  // Planck 2018: Omega_b / Omega_m = 0.158
  const EisensteinHuTransfer transfer(params);
  std::vector<double> ratios;
  const std::vector<double> wavenumbers = logSpaced(0.05, 0.3, 2000);
  for (const double k : wavenumbers) ratios.push_back(transfer.withWiggles(k) / transfer.noWiggle(k));
  int signChanges = 0;
  double largest = 0.0;
  double smallest = 2.0;
  double logMean = 0.0;
  for (std::size_t i = 0; i < ratios.size(); ++i) {
    if (i > 0 && (ratios[i] - 1.0) * (ratios[i - 1] - 1.0) < 0.0) ++signChanges;
    largest = std::max(largest, ratios[i]);
    smallest = std::min(smallest, ratios[i]);
    logMean += ratios[i] / static_cast<double>(ratios.size());  // log-spaced: the mean over ln k
  }
  EXPECT_GE(signChanges, 6);  // 3-4 oscillations between k = 0.05 and 0.3 h/Mpc
  EXPECT_GT(largest - 1.0, 0.01);
  EXPECT_LT(largest - 1.0, 0.08);
  EXPECT_GT(1.0 - smallest, 0.01);
  EXPECT_LT(1.0 - smallest, 0.08);
  EXPECT_NEAR(logMean, 1.0, 0.005);

  // The first maximum of the ratio sits at EH98's estimate of the first acoustic peak, 2.5 pi (1 + 0.217 Omega_m h^2)
  // / s (eq. 25), in h/Mpc: an independent check of the sound horizon and of the oscillation's phase.
  const double h = params.hubbleParam;
  const double peakEstimate =
      2.5 * std::numbers::pi * (1.0 + 0.217 * params.omegaMatter * h * h) / transfer.soundHorizon() / h;
  std::size_t firstMaximum = 0;
  for (std::size_t i = 1; i + 1 < ratios.size() && firstMaximum == 0; ++i) {
    if (ratios[i] > ratios[i - 1] && ratios[i] > ratios[i + 1]) firstMaximum = i;
  }
  ASSERT_GT(firstMaximum, 0u);
  EXPECT_RELATIVE(wavenumbers[firstMaximum], peakEstimate, 0.05);

  // No oscillation in the no-wiggle shape: its logarithmic slope falls monotonically, the full form's does not.
  const std::vector<double> grid = logSpaced(1e-3, 10.0, 3000);
  int noWiggleRises = 0;
  int withWigglesRises = 0;
  double noWiggleSlope = 0.0;
  double withWigglesSlope = 0.0;
  for (std::size_t i = 1; i < grid.size(); ++i) {
    const double dlnk = std::log(grid[i] / grid[i - 1]);
    const double slope1 = std::log(transfer.noWiggle(grid[i]) / transfer.noWiggle(grid[i - 1])) / dlnk;
    const double slope2 = std::log(transfer.withWiggles(grid[i]) / transfer.withWiggles(grid[i - 1])) / dlnk;
    if (i > 1 && slope1 > noWiggleSlope) ++noWiggleRises;
    if (i > 1 && slope2 > withWigglesSlope) ++withWigglesRises;
    noWiggleSlope = slope1;
    withWigglesSlope = slope2;
  }
  EXPECT_EQ(noWiggleRises, 0);
  EXPECT_GT(withWigglesRises, 100);
}

// ---------------------------------------------------------------------------------------------------- sigma_8

/// sigma(R) by the trapezoidal rule in ln k over [1e-6, 1e4] h/Mpc on 4e5 intervals, with the top hat written
/// directly: a different rule, range and window code from the library's.
double sigmaByTrapezoid(const LinearPowerSpectrum& spectrum, double radius) {
  const int intervals = 400000;
  const double lower = std::log(1e-6);
  const double upper = std::log(1e4);
  const double step = (upper - lower) / intervals;
  double sum = 0.0;
  for (int i = 0; i <= intervals; ++i) {
    const double k = std::exp(lower + i * step);
    const double x = k * radius;
    const double window = x < 1e-3 ? 1.0 - x * x / 10.0 : 3.0 * (std::sin(x) - x * std::cos(x)) / (x * x * x);
    const double value = k * k * k * spectrum.power(k) * window * window;
    sum += (i == 0 || i == intervals) ? 0.5 * value : value;
  }
  return std::sqrt(sum * step / (2.0 * std::numbers::pi * std::numbers::pi));
}

TEST(LinearPower, Sigma8NormalisationMatchesIndependentTrapezoid) {
  for (const TransferForm form : {TransferForm::withWiggles, TransferForm::noWiggle}) {
    for (const double sigma8 : {0.81, 0.6}) {
      LinearPowerParams params;
      params.form = form;
      params.sigma8 = sigma8;
      const LinearPowerSpectrum spectrum = LinearPowerSpectrum::eisensteinHu(params);
      SCOPED_TRACE("form " + std::to_string(static_cast<int>(form)) + ", sigma8 " + std::to_string(sigma8));
      EXPECT_EQ(spectrum.sigma8(), sigma8);
      EXPECT_RELATIVE(spectrum.sigma(8.0), sigma8, 1e-10);
      EXPECT_RELATIVE(sigmaByTrapezoid(spectrum, 8.0), sigma8, 1e-4);
      EXPECT_RELATIVE(spectrum.sigma(20.0), sigmaByTrapezoid(spectrum, 20.0), 1e-4);
      EXPECT_GT(spectrum.sigma(4.0), spectrum.sigma(8.0));
      EXPECT_GT(spectrum.sigma(8.0), spectrum.sigma(16.0));
    }
  }
}

TEST(LinearPower, ShapeIsPowerLawTimesTransferSquared) {
  LinearPowerParams params;
  params.spectralIndex = 0.95;
  const LinearPowerSpectrum spectrum = LinearPowerSpectrum::eisensteinHu(params);
  const EisensteinHuTransfer transfer(params.transfer);
  const double k0 = 0.05;
  for (const double k : {1e-4, 0.01, 0.2, 3.0}) {
    const double expected = std::pow(k / k0, 0.95) * std::pow(transfer.withWiggles(k) / transfer.withWiggles(k0), 2);
    EXPECT_RELATIVE(spectrum.power(k) / spectrum.power(k0), expected, 1e-13) << "k = " << k;
  }
  EXPECT_EQ(spectrum.power(0.0), 0.0);
  EXPECT_EQ(spectrum.minWavenumber(), 0.0);
  EXPECT_EQ(spectrum.maxWavenumber(), std::numeric_limits<double>::infinity());
  // Doubling sigma_8 quadruples the power.
  params.sigma8 *= 2.0;
  EXPECT_RELATIVE(LinearPowerSpectrum::eisensteinHu(params).power(0.1), 4.0 * spectrum.power(0.1), 1e-12);
}

// ------------------------------------------------------------------------------------------------------ tables

/// Writes k, P rows of `spectrum` at `wavenumbers`, with a header comment, a blank line, a trailing comment, tabs
/// and CR-LF line ends, as Boltzmann codes and editors leave them.
void writeTable(const std::filesystem::path& path, const LinearPowerSpectrum& spectrum,
                const std::vector<double>& wavenumbers) {
  std::ofstream file(path, std::ios::binary);
  file << "# k [h/Mpc]   P(k) [(Mpc/h)^3]   written by test_linear_power\r\n\r\n" << std::setprecision(17);
  for (std::size_t i = 0; i < wavenumbers.size(); ++i) {
    file << wavenumbers[i] << (i % 2 == 0 ? "\t" : "   ") << spectrum.power(wavenumbers[i]);
    file << (i == 3 ? "  # a comment after a row\r\n" : "\r\n");
  }
}

TEST(LinearPower, TableRoundTripInterpolatesWithinTolerance) {
  ScratchDir scratch("matcha-cosmology");
  LinearPowerParams params;
  params.sigma8 = 0.8;
  const LinearPowerSpectrum original = LinearPowerSpectrum::eisensteinHu(params);
  const std::vector<double> wavenumbers = logSpaced(1e-5, 1e3, 800);  // 100 rows per decade
  const std::filesystem::path path = scratch / "pk.dat";
  writeTable(path, original, wavenumbers);

  const LinearPowerSpectrum table = LinearPowerSpectrum::fromTable(path);
  EXPECT_EQ(table.minWavenumber(), wavenumbers.front());
  EXPECT_EQ(table.maxWavenumber(), wavenumbers.back());
  double worstMidpoint = 0.0;
  for (std::size_t i = 0; i < wavenumbers.size(); ++i) {
    EXPECT_RELATIVE(table.power(wavenumbers[i]), original.power(wavenumbers[i]), 1e-13) << "row " << i;
    if (i + 1 < wavenumbers.size()) {
      const double midpoint = std::sqrt(wavenumbers[i] * wavenumbers[i + 1]);
      worstMidpoint =
          std::max(worstMidpoint, matcha::testing::relativeError(table.power(midpoint), original.power(midpoint)));
    }
  }
  EXPECT_LT(worstMidpoint, 1e-4);
  EXPECT_GT(worstMidpoint, 0.0);  // it is an interpolation, not a copy of the model
  // The table's own amplitude is kept and its sigma_8 reported: the model's, up to interpolation.
  EXPECT_RELATIVE(table.sigma8(), 0.8, 1e-5);
  EXPECT_RELATIVE(table.sigma(8.0), table.sigma8(), 1e-12);
  // Outside the table there is no power.
  EXPECT_EQ(table.power(0.999 * wavenumbers.front()), 0.0);
  EXPECT_EQ(table.power(1.001 * wavenumbers.back()), 0.0);
  EXPECT_EQ(table.power(0.0), 0.0);

  // Uneven rows (spacings alternating 0.6 and 1.4 times 1/100 decade, as adaptive Boltzmann-code outputs are): the
  // slopes must weigh the two sides by their widths to keep the same accuracy.
  std::vector<double> uneven = {1e-5};
  while (uneven.back() < 1e3) uneven.push_back(uneven.back() * std::pow(10.0, (uneven.size() % 2 ? 0.6 : 1.4) / 100));
  writeTable(scratch / "uneven.dat", original, uneven);
  const LinearPowerSpectrum unevenTable = LinearPowerSpectrum::fromTable(scratch / "uneven.dat");
  double worstUneven = 0.0;
  for (std::size_t i = 0; i + 1 < uneven.size(); ++i) {
    const double midpoint = std::sqrt(uneven[i] * uneven[i + 1]);
    worstUneven =
        std::max(worstUneven, matcha::testing::relativeError(unevenTable.power(midpoint), original.power(midpoint)));
  }
  EXPECT_LT(worstUneven, 1e-4);

  // Rescaled to another sigma_8: every P scales by the square of the ratio.
  const LinearPowerSpectrum rescaled = LinearPowerSpectrum::fromTable(path, 0.9);
  EXPECT_EQ(rescaled.sigma8(), 0.9);
  EXPECT_RELATIVE(rescaled.sigma(8.0), 0.9, 1e-10);
  for (const double k : {1e-4, 0.1, 0.123, 10.0}) {
    EXPECT_RELATIVE(rescaled.power(k), table.power(k) * std::pow(0.9 / table.sigma8(), 2), 1e-12) << "k = " << k;
  }
}

TEST(LinearPower, NarrowTableCountsOnlyItsOwnRange) {
  // A table covering 0.01 <= k <= 1 h/Mpc: sigma_8 integrates over that range alone (P = 0 outside).
  ScratchDir scratch("matcha-cosmology");
  const LinearPowerSpectrum original = LinearPowerSpectrum::eisensteinHu(LinearPowerParams{});
  const std::filesystem::path path = scratch / "narrow.dat";
  writeTable(path, original, logSpaced(0.01, 1.0, 400));
  const LinearPowerSpectrum table = LinearPowerSpectrum::fromTable(path);
  const double lower = std::log(0.01);
  const double upper = std::log(1.0);
  const int intervals = 200000;
  double sum = 0.0;
  for (int i = 0; i <= intervals; ++i) {
    const double k = std::exp(lower + (upper - lower) * i / intervals);
    const double x = 8.0 * k;
    const double window = 3.0 * (std::sin(x) - x * std::cos(x)) / (x * x * x);
    sum += (i == 0 || i == intervals ? 0.5 : 1.0) * k * k * k * original.power(k) * window * window;
  }
  const double expected = std::sqrt(sum * (upper - lower) / intervals / (2.0 * std::numbers::pi * std::numbers::pi));
  EXPECT_RELATIVE(table.sigma8(), expected, 1e-5);
  EXPECT_LT(table.sigma8(), original.sigma8());
}

/// Runs `call`, expecting an InputError whose message is one line and contains every fragment.
void expectOneLineInputError(const std::function<void()>& call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "no InputError; expected one mentioning '" << fragments.front() << "'";
  } catch (const InputError& error) {
    const std::string message = error.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << message;
    }
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message: " << message;
  }
}

TEST(LinearPower, BadTablesThrowOneLineErrorsNamingFileAndLine) {
  ScratchDir scratch("matcha-cosmology");
  struct Case {
    std::string name, content;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"empty.dat", "", {"no data rows"}},
      {"comments.dat", "# k P\n\n   # nothing else\n", {"no data rows"}},
      {"one_row.dat", "# k P\n0.1 100\n", {"one data row"}},
      {"unsorted.dat", "0.1 100\n0.2 90\n0.15 95\n", {"line 3", "k = 0.15 does not exceed", "0.2"}},
      {"repeated.dat", "0.1 100\n0.1 90\n", {"line 2", "does not exceed"}},
      {"negative_power.dat", "# header\n0.1 100\n0.2 -90\n", {"line 3", "P(k) = -90 must be > 0"}},
      {"zero_power.dat", "0.1 0\n0.2 90\n", {"line 1", "P(k) = 0 must be > 0"}},
      {"zero_k.dat", "0 100\n0.2 90\n", {"line 1", "k = 0 must be > 0"}},
      {"negative_k.dat", "-0.1 100\n0.2 90\n", {"line 1", "k = -0.1 must be > 0"}},
      {"text.dat", "0.1 100\n0.2 abc\n", {"line 2", "expected two numbers", "'0.2 abc'"}},
      {"trailing_junk.dat", "0.1 100\n0.2 90x\n", {"line 2", "expected two numbers"}},
      {"nan.dat", "0.1 100\n0.2 nan\n", {"line 2", "not finite"}},
      {"inf.dat", "0.1 100\ninf 90\n", {"line 2", "not finite"}},
      {"three_columns.dat", "0.1 100 5\n0.2 90 5\n", {"line 1", "expected two numbers"}},
      {"one_column.dat", "0.1\n0.2\n", {"line 1", "expected two numbers"}},
      {"comma.dat", "0.1,100\n0.2,90\n", {"line 1", "expected two numbers"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::filesystem::path path = scratch / c.name;
    std::ofstream(path) << c.content;
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back("power-spectrum table '" + path.string() + "'");
    expectOneLineInputError([&] { matcha::cosmology::readPowerTable(path); }, fragments);
    expectOneLineInputError([&] { LinearPowerSpectrum::fromTable(path); }, fragments);
  }
  expectOneLineInputError([&] { LinearPowerSpectrum::fromTable(scratch / "missing.dat"); },
                          {"missing.dat", "no such file"});
  expectOneLineInputError([&] { LinearPowerSpectrum::fromTable(scratch.path()); }, {"is a directory"});
}

TEST(LinearPower, BadParametersThrowOneLineErrors) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    EisensteinHuParams params;
    std::string fragment;
  };
  std::vector<Case> cases = {
      {cosmology(0.0, 0.05, 0.7), "Omega_m must be > 0"},    {cosmology(nan, 0.05, 0.7), "Omega_m must be finite"},
      {cosmology(0.3, 0.0, 0.7), "Omega_b must be > 0"},     {cosmology(0.3, -0.01, 0.7), "Omega_b must be > 0"},
      {cosmology(0.3, 0.3, 0.7), "must be < Omega_m = 0.3"}, {cosmology(0.3, inf, 0.7), "Omega_b must be finite"},
      {cosmology(0.3, 0.05, 0.0), "h must be > 0"},          {cosmology(0.3, 0.05, nan), "h must be finite"},
  };
  for (const double temperature : {0.0, -2.7, nan}) {
    EisensteinHuParams params = cosmology(0.3, 0.05, 0.7);
    params.cmbTemperature = temperature;
    cases.push_back({params, "T_CMB must be"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fragment);
    expectOneLineInputError([&] { c.params.validate(); }, {c.fragment});
    expectOneLineInputError([&] { EisensteinHuTransfer{c.params}; }, {c.fragment});
    LinearPowerParams params;
    params.transfer = c.params;
    expectOneLineInputError([&] { LinearPowerSpectrum::eisensteinHu(params); }, {c.fragment});
  }
  for (const double spectralIndex : {nan, inf}) {
    LinearPowerParams params;
    params.spectralIndex = spectralIndex;
    expectOneLineInputError([&] { LinearPowerSpectrum::eisensteinHu(params); }, {"n_s must be finite"});
  }
  for (const double sigma8 : {0.0, -0.8, nan}) {
    LinearPowerParams params;
    params.sigma8 = sigma8;
    expectOneLineInputError([&] { LinearPowerSpectrum::eisensteinHu(params); }, {"sigma_8 must be"});
    expectOneLineInputError([&] { LinearPowerSpectrum::fromTable("never-read.dat", sigma8); }, {"sigma_8 must be"});
  }
  const LinearPowerSpectrum spectrum = LinearPowerSpectrum::eisensteinHu(LinearPowerParams{});
  expectOneLineInputError([&] { spectrum.power(-0.1); }, {"k must be >= 0"});
  expectOneLineInputError([&] { spectrum.power(nan); }, {"k must be >= 0"});
  expectOneLineInputError([&] { spectrum.sigma(0.0); }, {"radius"});
  expectOneLineInputError([&] { spectrum.sigma(nan); }, {"radius"});
}

}  // namespace
