// SPDX-License-Identifier: MIT
// Tests of matcha::io snapshots: bit-exact round trips, the GADGET layout, atomic writes (a throwing hook and a
// SIGKILLed writer), and one test per kind of bad input. Malformed files are made by writing a good snapshot and
// editing it with the HDF5 C API. Random cases print their seed; set MATCHA_TEST_SEED to replay one.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/version.hpp"
#include "matcha/io/snapshot.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/scratch_dir.hpp"

namespace fs = std::filesystem;
using matcha::InputError;
using matcha::IoError;
using matcha::Particles;
using matcha::io::CosmologyHeader;
using matcha::io::readSnapshot;
using matcha::io::Snapshot;
using matcha::io::SnapshotMetadata;
using matcha::io::SnapshotWriteOptions;
using matcha::io::writeSnapshot;

namespace {

using matcha::testing::ScratchDir;

/// A fresh seed (MATCHA_TEST_SEED replays one), recorded in the XML report and printed for the log.
std::uint64_t testSeed() {
  const std::uint64_t seed = matcha::testing::freshSeed();
  std::cout << "[ seed     ] " << matcha::testing::seedTrace(seed) << "\n";
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

/// A double that stresses precision: 1 plus a few ulps, negatives, wide exponents, subnormals, signed zero.
double awkwardValue(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  switch (rng() % 7) {
    case 0:
      return 1.0 + std::ldexp(static_cast<double>(1 + rng() % 1000), -52);
    case 1:
      return -(1.0 + std::ldexp(static_cast<double>(1 + rng() % 1000), -52));
    case 2:
      return std::ldexp(unit(rng), static_cast<int>(rng() % 1200) - 600);
    case 3:
      return std::numeric_limits<double>::denorm_min() * static_cast<double>(rng() % 1000);
    case 4:
      return (rng() % 2 == 0) ? 0.0 : -0.0;
    case 5:
      return std::nextafter(1e300, 0.0) * unit(rng);
    default:
      return unit(rng) * 1e3;
  }
}

/// N bodies with awkward values everywhere, positive masses and unique ids spread over the uint64 range.
Particles randomParticles(std::size_t count, std::mt19937_64& rng) {
  Particles p(count);
  const std::uint64_t idMask = rng();
  for (std::size_t i = 0; i < count; ++i) {
    for (auto* array : {&p.x, &p.y, &p.z, &p.vx, &p.vy, &p.vz, &p.ax, &p.ay, &p.az, &p.pot}) {
      (*array)[i] = awkwardValue(rng);
    }
    std::uniform_real_distribution<double> half(0.5, 1.0);
    p.mass[i] = std::ldexp(half(rng), static_cast<int>(rng() % 200) - 100);
    p.id[i] = (static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull) ^ idMask;  // odd multiplier: a bijection
  }
  return p;
}

/// A small, plain snapshot for the bad-input tests: bodies 0..N-1 with ids 0..N-1.
Particles simpleParticles(std::size_t count) {
  Particles p(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto v = static_cast<double>(i);
    p.x[i] = v;
    p.y[i] = -v;
    p.z[i] = 0.5 * v;
    p.vx[i] = 0.1 * v;
    p.vy[i] = 0.2;
    p.vz[i] = -0.3;
    p.mass[i] = 1.0 / static_cast<double>(count);
    p.id[i] = i;
  }
  return p;
}

void expectBitEqual(const std::vector<double>& expected, const std::vector<double>& actual, const char* name) {
  ASSERT_EQ(expected.size(), actual.size()) << name;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint64_t>(expected[i]), std::bit_cast<std::uint64_t>(actual[i]))
        << name << "[" << i << "]: expected " << expected[i] << ", read " << actual[i];
  }
}

void expectSameParticles(const Particles& expected, const Particles& actual, bool withForces = true) {
  ASSERT_EQ(expected.size(), actual.size());
  expectBitEqual(expected.x, actual.x, "x");
  expectBitEqual(expected.y, actual.y, "y");
  expectBitEqual(expected.z, actual.z, "z");
  expectBitEqual(expected.vx, actual.vx, "vx");
  expectBitEqual(expected.vy, actual.vy, "vy");
  expectBitEqual(expected.vz, actual.vz, "vz");
  expectBitEqual(expected.mass, actual.mass, "mass");
  EXPECT_EQ(expected.id, actual.id);
  if (withForces) {
    expectBitEqual(expected.ax, actual.ax, "ax");
    expectBitEqual(expected.ay, actual.ay, "ay");
    expectBitEqual(expected.az, actual.az, "az");
    expectBitEqual(expected.pot, actual.pot, "pot");
  }
}

/// Runs `action`, which must throw exactly E; returns the message (empty after a recorded failure).
template <class E, class F>
std::string messageOf(F&& action) {
  try {
    action();
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw the wrong exception type: " << error.what();
    return {};
  }
  ADD_FAILURE() << "threw nothing";
  return {};
}

/// The message is one line and mentions every fragment.
void expectOneLineMentioning(const std::string& message, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(message.find('\n'), std::string::npos) << "message spans lines: " << message;
  EXPECT_FALSE(message.empty());
  for (const auto& fragment : fragments) {
    EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' missing from: " << message;
  }
}

template <class E>
std::string readError(const fs::path& path) {
  return messageOf<E>([&] { readSnapshot(path); });
}

// --- small HDF5 helpers for inspecting and breaking files -------------------------------------------------------

/// Owns an HDF5 id in the tests.
class H5 {
 public:
  H5(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {
    if (id_ < 0) throw std::runtime_error("HDF5 call failed in a test helper");
  }
  ~H5() { closer_(id_); }
  H5(const H5&) = delete;
  H5& operator=(const H5&) = delete;
  operator hid_t() const { return id_; }  // NOLINT: convenient in C calls

 private:
  hid_t id_;
  herr_t (*closer_)(hid_t);
};

void ok(herr_t status) {
  if (status < 0) throw std::runtime_error("HDF5 call failed in a test helper");
}

/// Opens `path` read-write, hands the file to `edit`, closes it.
template <class F>
void editFile(const fs::path& path, F&& edit) {
  H5 file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  edit(static_cast<hid_t>(file));
}

/// Replaces (or creates) dataset `name` with a `rows` x `columns` one (columns 0: 1-D) of `fileType` holding `data`.
void replaceDataset(hid_t file, const std::string& name, hsize_t rows, hsize_t columns, hid_t fileType, hid_t memType,
                    const void* data) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0) ok(H5Ldelete(file, name.c_str(), H5P_DEFAULT));
  const std::array<hsize_t, 2> dims{rows, columns};
  H5 space(H5Screate_simple(columns == 0 ? 1 : 2, dims.data(), nullptr), H5Sclose);
  H5 dataset(H5Dcreate2(file, name.c_str(), fileType, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (rows > 0) ok(H5Dwrite(dataset, memType, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

void deleteLink(hid_t file, const char* name) { ok(H5Ldelete(file, name, H5P_DEFAULT)); }

void writeHeaderAttribute(hid_t file, const char* name, hid_t memType, const void* data) {
  H5 header(H5Gopen2(file, "Header", H5P_DEFAULT), H5Gclose);
  H5 attribute(H5Aopen(header, name, H5P_DEFAULT), H5Aclose);
  ok(H5Awrite(attribute, memType, data));
}

bool linkExists(const fs::path& path, const char* name) {
  H5 file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  return H5Lexists(file, name, H5P_DEFAULT) > 0;
}

/// Class, size and sign of an attribute's stored type, and its element count.
struct AttributeShape {
  H5T_class_t typeClass;
  std::size_t size;
  H5T_sign_t sign;
  hssize_t count;
};

AttributeShape attributeShape(hid_t loc, const char* name) {
  H5 attribute(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  H5 type(H5Aget_type(attribute), H5Tclose);
  H5 space(H5Aget_space(attribute), H5Sclose);
  const H5T_class_t typeClass = H5Tget_class(type);
  return {typeClass, H5Tget_size(type), typeClass == H5T_INTEGER ? H5Tget_sign(type) : H5T_SGN_ERROR,
          H5Sget_simple_extent_npoints(space)};
}

template <class T>
std::vector<T> readAttribute(hid_t loc, const char* name, hid_t memType) {
  H5 attribute(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  H5 space(H5Aget_space(attribute), H5Sclose);
  std::vector<T> values(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
  ok(H5Aread(attribute, memType, values.data()));
  return values;
}

SnapshotMetadata someMetadata() {
  SnapshotMetadata meta;
  meta.time = 0.375;
  meta.parameters = {{"theta", "0.5"}, {"ncrit", "64"}, {"solver", "tree"}};
  return meta;
}

/// A good snapshot of `count` simple bodies at dir/name.
fs::path writeGood(const ScratchDir& dir, const std::string& name = "good.h5", std::size_t count = 5) {
  const fs::path path = dir / name;
  writeSnapshot(path, simpleParticles(count), someMetadata());
  return path;
}

// ================================================================================================================
// Round trips
// ================================================================================================================

class SnapshotRoundTrip : public ::testing::TestWithParam<std::size_t> {};

TEST_P(SnapshotRoundTrip, RandomParticlesAreBitExact) {
  std::mt19937_64 rng(testSeed());
  const std::size_t count = GetParam();
  ScratchDir dir;
  const Particles particles = randomParticles(count, rng);
  SnapshotMetadata meta;
  meta.time = awkwardValue(rng);
  meta.units = {3.0856775814913673e21, 1.988409870698051e43, 1e5, 43009.1727};
  meta.parameters = {{"theta", "0.7"}, {"ncrit", "64"},   {"eps", "0.0078125"}, {"solver", "tree"},
                     {"t_end", "-3"},  {"big", "1e+300"}, {"ic", "plummer.h5"}, {"a", "1.0000000000000002"}};
  const fs::path path = dir / "snap_000.h5";
  writeSnapshot(path, particles, meta);

  const Snapshot read = readSnapshot(path);
  expectSameParticles(particles, read.particles);
  EXPECT_EQ(std::bit_cast<std::uint64_t>(meta.time), std::bit_cast<std::uint64_t>(read.time));
  EXPECT_EQ(meta.parameters, read.parameters);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"snap_000.h5"});  // no temporary file left
}

// 100003 rows cross the writer's and reader's 65536-row transfer blocks.
INSTANTIATE_TEST_SUITE_P(Sizes, SnapshotRoundTrip, ::testing::Values(1, 7, 1000, 100003));

TEST(SnapshotParameters, TypedByContentKeptInOrderAndReadBackAsCanonicalText) {
  ScratchDir dir;
  SnapshotMetadata meta;
  // Deliberately not in name order: the file keeps creation order.
  meta.parameters = {{"zeta", "12"},
                     {"alpha", "+7"},
                     {"mid", "1e-3"},
                     {"text", "plummer run"},
                     {"huge", "123456789012345678901234"},
                     {"nanword", "nan"},
                     {"empty", ""},
                     {"negative", "-2.5"},
                     {"unit", "1.5x"},
                     {"utf8", "\xce\xb8=0.5"}};
  const fs::path path = dir / "params.h5";
  writeSnapshot(path, simpleParticles(2), meta);

  {
    H5 file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    H5 group(H5Gopen2(file, "Parameters", H5P_DEFAULT), H5Gclose);
    const auto zeta = attributeShape(group, "zeta");
    EXPECT_EQ(zeta.typeClass, H5T_INTEGER);
    EXPECT_EQ(zeta.size, 8u);
    EXPECT_EQ(zeta.sign, H5T_SGN_2);
    EXPECT_EQ(readAttribute<std::int64_t>(group, "zeta", H5T_NATIVE_INT64), std::vector<std::int64_t>{12});
    EXPECT_EQ(attributeShape(group, "mid").typeClass, H5T_FLOAT);
    EXPECT_EQ(readAttribute<double>(group, "mid", H5T_NATIVE_DOUBLE), std::vector<double>{1e-3});
    EXPECT_EQ(attributeShape(group, "huge").typeClass, H5T_FLOAT);
    EXPECT_EQ(attributeShape(group, "text").typeClass, H5T_STRING);
    EXPECT_EQ(attributeShape(group, "nanword").typeClass, H5T_STRING);
    EXPECT_EQ(attributeShape(group, "unit").typeClass, H5T_STRING);
  }

  const std::vector<std::pair<std::string, std::string>> expected = {{"zeta", "12"},
                                                                     {"alpha", "7"},
                                                                     {"mid", "0.001"},
                                                                     {"text", "plummer run"},
                                                                     {"huge", "1.2345678901234569e+23"},
                                                                     {"nanword", "nan"},
                                                                     {"empty", ""},
                                                                     {"negative", "-2.5"},
                                                                     {"unit", "1.5x"},
                                                                     {"utf8", "\xce\xb8=0.5"}};
  EXPECT_EQ(readSnapshot(path).parameters, expected);
}

TEST(SnapshotWrite, WithoutForcesOmitsDatasetsAndReadsZeros) {
  std::mt19937_64 rng(testSeed());
  ScratchDir dir;
  const Particles particles = randomParticles(9, rng);
  SnapshotWriteOptions options;
  options.includeForces = false;
  const fs::path path = dir / "ic.h5";
  writeSnapshot(path, particles, {}, options);
  EXPECT_FALSE(linkExists(path, "PartType1/Potential"));
  EXPECT_FALSE(linkExists(path, "PartType1/Acceleration"));

  const Snapshot read = readSnapshot(path);
  expectSameParticles(particles, read.particles, false);
  for (const auto* array : {&read.particles.ax, &read.particles.ay, &read.particles.az, &read.particles.pot}) {
    EXPECT_EQ(*array, std::vector<double>(9, 0.0));
  }
  EXPECT_EQ(read.time, 0.0);
  EXPECT_TRUE(read.parameters.empty());
}

TEST(SnapshotWrite, ProgressHookSeesEveryDatasetInOrder) {
  ScratchDir dir;
  std::vector<std::string> seen;
  SnapshotWriteOptions options;
  options.afterDataset = [&](std::string_view name) { seen.emplace_back(name); };
  writeSnapshot(dir / "s.h5", simpleParticles(3), {}, options);
  EXPECT_EQ(seen, (std::vector<std::string>{"PartType1/Coordinates", "PartType1/Velocities", "PartType1/Masses",
                                            "PartType1/ParticleIDs", "PartType1/Potential", "PartType1/Acceleration"}));
}

TEST(SnapshotWrite, SecondWriteReplacesTheFile) {
  std::mt19937_64 rng(testSeed());
  ScratchDir dir;
  const fs::path path = dir / "snap.h5";
  writeSnapshot(path, randomParticles(50, rng), someMetadata());
  const Particles second = randomParticles(20, rng);
  writeSnapshot(path, second, someMetadata());
  expectSameParticles(second, readSnapshot(path).particles);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"snap.h5"});
}

// A cosmological state's /Header Redshift, Omega0, OmegaLambda and HubbleParam read back; a Newtonian one writes
// GADGET's neutral 0, 0, 0, 1 and reads back without a cosmology.
TEST(SnapshotWrite, CosmologyHeaderRoundTrips) {
  std::mt19937_64 rng(testSeed());
  ScratchDir dir;
  SnapshotMetadata meta = someMetadata();
  meta.cosmology = CosmologyHeader{49.0, 0.3, 0.7, 0.6774};
  writeSnapshot(dir / "cosmo.h5", randomParticles(10, rng), meta);
  const Snapshot cosmo = readSnapshot(dir / "cosmo.h5");
  ASSERT_TRUE(cosmo.cosmology.has_value());
  EXPECT_EQ(cosmo.cosmology->redshift, 49.0);
  EXPECT_EQ(cosmo.cosmology->omega0, 0.3);
  EXPECT_EQ(cosmo.cosmology->omegaLambda, 0.7);
  EXPECT_EQ(cosmo.cosmology->hubbleParam, 0.6774);
  writeSnapshot(dir / "plain.h5", randomParticles(10, rng), someMetadata());
  EXPECT_FALSE(readSnapshot(dir / "plain.h5").cosmology.has_value());
}

// ================================================================================================================
// Layout
// ================================================================================================================

// The default units are N-body units read as 1 kpc and 1e10 Msun, with the velocity unit that makes G = 1: a GADGET
// reader that takes /Units at their word computes G = 1 from them (UnitTime = UnitLength / UnitVelocity), so times and
// velocities in yt come out right. The step of a last good state goes to /Header Step.
TEST(SnapshotLayout, DefaultUnitsMakeGOne) {
  ScratchDir dir;
  SnapshotMetadata meta;
  meta.step = 42;
  const fs::path path = dir / "units.h5";
  writeSnapshot(path, simpleParticles(3), meta);
  H5 file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  H5 units(H5Gopen2(file, "Units", H5P_DEFAULT), H5Gclose);
  const double length = readAttribute<double>(units, "UnitLength_in_cm", H5T_NATIVE_DOUBLE).at(0);
  const double mass = readAttribute<double>(units, "UnitMass_in_g", H5T_NATIVE_DOUBLE).at(0);
  const double velocity = readAttribute<double>(units, "UnitVelocity_in_cm_per_s", H5T_NATIVE_DOUBLE).at(0);
  const double time = readAttribute<double>(units, "UnitTime_in_s", H5T_NATIVE_DOUBLE).at(0);
  EXPECT_EQ(length, 3.0856775814913673e21);  // 1 kpc
  EXPECT_EQ(mass, 1.988409870698051e43);     // 1e10 Msun
  EXPECT_NEAR(velocity / 1e5, 207.3865, 1e-4) << "km/s";
  EXPECT_NEAR(time, length / velocity, 1e-12 * time);
  EXPECT_NEAR(6.67430e-8 * mass * time * time / (length * length * length), 1.0, 1e-12) << "G in these units";
  EXPECT_EQ(readAttribute<double>(units, "GravitationalConstant", H5T_NATIVE_DOUBLE), std::vector<double>{1.0});
  H5 header(H5Gopen2(file, "Header", H5P_DEFAULT), H5Gclose);
  EXPECT_EQ(readAttribute<std::uint64_t>(header, "Step", H5T_NATIVE_UINT64), std::vector<std::uint64_t>{42});
  EXPECT_EQ(readAttribute<double>(header, "BoxSize", H5T_NATIVE_DOUBLE), std::vector<double>{4.0});
}

TEST(SnapshotRead, UnitsReadBackWhenTheFileGivesThem) {
  ScratchDir dir;
  SnapshotMetadata meta;
  meta.units.lengthInCm = 3.0856775814913673e18;  // 1 pc
  meta.units.massInGram = 1.988409870698051e33;   // 1 Msun
  meta.units.velocityInCmPerS = 6.558e4;
  const fs::path path = dir / "units.h5";
  writeSnapshot(path, simpleParticles(3), meta);
  const Snapshot read = readSnapshot(path);
  ASSERT_TRUE(read.units.has_value());
  EXPECT_EQ(read.units->lengthInCm, meta.units.lengthInCm);
  EXPECT_EQ(read.units->massInGram, meta.units.massInGram);
  EXPECT_EQ(read.units->velocityInCmPerS, meta.units.velocityInCmPerS);
  EXPECT_EQ(read.units->gravitationalConstant, 1.0);
  // A group without its velocity unit says nothing usable: no units (and the file still reads).
  {
    H5 file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    H5 units(H5Gopen2(file, "Units", H5P_DEFAULT), H5Gclose);
    ASSERT_GE(H5Adelete(units, "UnitVelocity_in_cm_per_s"), 0);
  }
  EXPECT_FALSE(readSnapshot(path).units.has_value());
  {
    H5 file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_GE(H5Ldelete(file, "Units", H5P_DEFAULT), 0);
  }
  EXPECT_FALSE(readSnapshot(path).units.has_value());
}

TEST(SnapshotLayout, HeaderUnitsAndDatasetsFollowGadget) {
  ScratchDir dir;
  SnapshotMetadata meta = someMetadata();
  meta.units = {3.0856775814913673e21, 1.988409870698051e43, 1e5, 43009.1727};
  const fs::path path = dir / "layout.h5";
  writeSnapshot(path, simpleParticles(11), meta);

  H5 file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  {
    H5 header(H5Gopen2(file, "Header", H5P_DEFAULT), H5Gclose);
    for (const char* name : {"NumPart_ThisFile", "NumPart_Total", "NumPart_Total_HighWord"}) {
      const auto shape = attributeShape(header, name);
      EXPECT_EQ(shape.typeClass, H5T_INTEGER) << name;
      EXPECT_EQ(shape.size, 4u) << name;
      EXPECT_EQ(shape.sign, H5T_SGN_NONE) << name;
      EXPECT_EQ(shape.count, 6) << name;
    }
    EXPECT_EQ(readAttribute<std::uint32_t>(header, "NumPart_ThisFile", H5T_NATIVE_UINT32),
              (std::vector<std::uint32_t>{0, 11, 0, 0, 0, 0}));
    EXPECT_EQ(readAttribute<std::uint32_t>(header, "NumPart_Total", H5T_NATIVE_UINT32),
              (std::vector<std::uint32_t>{0, 11, 0, 0, 0, 0}));
    EXPECT_EQ(readAttribute<std::uint32_t>(header, "NumPart_Total_HighWord", H5T_NATIVE_UINT32),
              std::vector<std::uint32_t>(6, 0));
    EXPECT_EQ(readAttribute<double>(header, "MassTable", H5T_NATIVE_DOUBLE), std::vector<double>(6, 0.0));
    EXPECT_EQ(readAttribute<double>(header, "Time", H5T_NATIVE_DOUBLE), std::vector<double>{0.375});
    EXPECT_EQ(readAttribute<double>(header, "Redshift", H5T_NATIVE_DOUBLE), std::vector<double>{0.0});
    // Not periodic: the side of the origin-centred cube that holds the bodies (x up to 10 here), so that yt's
    // "unitary" unit is defined.
    EXPECT_EQ(readAttribute<double>(header, "BoxSize", H5T_NATIVE_DOUBLE), std::vector<double>{20.0});
    EXPECT_EQ(H5Aexists(header, "Step"), 0) << "Step is written only when the metadata carry one";
    EXPECT_EQ(readAttribute<double>(header, "Omega0", H5T_NATIVE_DOUBLE), std::vector<double>{0.0});
    EXPECT_EQ(readAttribute<double>(header, "OmegaLambda", H5T_NATIVE_DOUBLE), std::vector<double>{0.0});
    EXPECT_EQ(readAttribute<double>(header, "HubbleParam", H5T_NATIVE_DOUBLE), std::vector<double>{1.0});
    const auto numFiles = attributeShape(header, "NumFilesPerSnapshot");
    EXPECT_EQ(numFiles.typeClass, H5T_INTEGER);
    EXPECT_EQ(numFiles.size, 4u);
    EXPECT_EQ(readAttribute<std::int32_t>(header, "NumFilesPerSnapshot", H5T_NATIVE_INT32),
              std::vector<std::int32_t>{1});
    // yt takes these for another code's files.
    EXPECT_EQ(H5Aexists(header, "Code"), 0);
    EXPECT_EQ(H5Lexists(file, "Constants", H5P_DEFAULT), 0);
  }
  {
    H5 units(H5Gopen2(file, "Units", H5P_DEFAULT), H5Gclose);
    EXPECT_EQ(readAttribute<double>(units, "UnitLength_in_cm", H5T_NATIVE_DOUBLE),
              std::vector<double>{3.0856775814913673e21});
    EXPECT_EQ(readAttribute<double>(units, "UnitMass_in_g", H5T_NATIVE_DOUBLE),
              std::vector<double>{1.988409870698051e43});
    EXPECT_EQ(readAttribute<double>(units, "UnitVelocity_in_cm_per_s", H5T_NATIVE_DOUBLE), std::vector<double>{1e5});
    EXPECT_EQ(readAttribute<double>(units, "UnitTime_in_s", H5T_NATIVE_DOUBLE),
              std::vector<double>{3.0856775814913673e21 / 1e5});
    EXPECT_EQ(readAttribute<double>(units, "GravitationalConstant", H5T_NATIVE_DOUBLE),
              std::vector<double>{43009.1727});
  }
  struct Expected {
    const char* name;
    int rank;
    H5T_class_t typeClass;
    std::size_t size;
  };
  for (const Expected& e : {Expected{"PartType1/Coordinates", 2, H5T_FLOAT, 8},
                            {"PartType1/Velocities", 2, H5T_FLOAT, 8},
                            {"PartType1/Masses", 1, H5T_FLOAT, 8},
                            {"PartType1/ParticleIDs", 1, H5T_INTEGER, 8},
                            {"PartType1/Potential", 1, H5T_FLOAT, 8},
                            {"PartType1/Acceleration", 2, H5T_FLOAT, 8}}) {
    H5 dataset(H5Dopen2(file, e.name, H5P_DEFAULT), H5Dclose);
    H5 type(H5Dget_type(dataset), H5Tclose);
    H5 space(H5Dget_space(dataset), H5Sclose);
    EXPECT_EQ(H5Tget_class(type), e.typeClass) << e.name;
    EXPECT_EQ(H5Tget_size(type), e.size) << e.name;
    if (e.typeClass == H5T_INTEGER) {
      EXPECT_EQ(H5Tget_sign(type), H5T_SGN_NONE) << e.name;  // ParticleIDs: uint64
    }
    ASSERT_EQ(H5Sget_simple_extent_ndims(space), e.rank) << e.name;
    std::array<hsize_t, 2> dims{};
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    EXPECT_EQ(dims[0], 11u) << e.name;
    if (e.rank == 2) {
      EXPECT_EQ(dims[1], 3u) << e.name;
    }
  }
}

TEST(SnapshotLayout, H5dumpShowsHeaderAndPartType1) {
  if (std::system("command -v h5dump > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "h5dump is not on PATH (install hdf5-tools to run this check)";
  }
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::string command = "h5dump -H '" + path.string() + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr) output += buffer.data();
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("NumPart_ThisFile"), std::string::npos) << output;
  EXPECT_NE(output.find("PartType1"), std::string::npos) << output;
  EXPECT_NE(output.find("Parameters"), std::string::npos) << output;
}

// ================================================================================================================
// Atomic writes
// ================================================================================================================

TEST(SnapshotAtomic, ThrowingHookKeepsTheOldFileAndRemovesTheTemporary) {
  std::mt19937_64 rng(testSeed());
  ScratchDir dir;
  const fs::path path = dir / "snap.h5";
  const Particles original = randomParticles(100, rng);
  writeSnapshot(path, original, someMetadata());

  SnapshotWriteOptions options;
  options.afterDataset = [](std::string_view) { throw std::runtime_error("injected fault"); };
  const std::string message =
      messageOf<IoError>([&] { writeSnapshot(path, randomParticles(40, rng), someMetadata(), options); });
  expectOneLineMentioning(message, {"injected fault", path.string()});

  const Snapshot read = readSnapshot(path);
  expectSameParticles(original, read.particles);
  EXPECT_EQ(read.time, someMetadata().time);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"snap.h5"});
}

TEST(SnapshotAtomic, KilledWriterLeavesTheOldFileIntact) {
  std::mt19937_64 rng(testSeed());
  ScratchDir dir;
  const fs::path path = dir / "snap.h5";
  const Particles original = randomParticles(1000, rng);
  writeSnapshot(path, original, someMetadata());
  const Particles replacement = randomParticles(2000, rng);

  std::cout.flush();
  std::fflush(nullptr);  // the child must not repeat buffered output
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << "fork failed";
  if (child == 0) {
    int written = 0;
    SnapshotWriteOptions options;
    options.afterDataset = [&](std::string_view) {
      if (++written == 2) std::raise(SIGKILL);
    };
    try {
      writeSnapshot(path, replacement, someMetadata(), options);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(3);  // the hook should have killed us
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  const Snapshot read = readSnapshot(path);
  expectSameParticles(original, read.particles);
  // The dead writer's temporary file may remain; it must not be the target, and a new write still works.
  for (const auto& name : dir.entries()) {
    if (name != "snap.h5") {
      EXPECT_EQ(name.rfind(".snap.h5.tmp-", 0), 0u) << name;
    }
  }
  writeSnapshot(path, replacement, someMetadata());
  expectSameParticles(replacement, readSnapshot(path).particles);
}

// ================================================================================================================
// Write errors
// ================================================================================================================

TEST(SnapshotWriteErrors, ZeroBodiesIsInputError) {
  ScratchDir dir;
  const fs::path path = dir / "empty.h5";
  expectOneLineMentioning(messageOf<InputError>([&] { writeSnapshot(path, Particles{}, {}); }), {"no bodies"});
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SnapshotWriteErrors, DuplicateParameterNameIsInputError) {
  ScratchDir dir;
  SnapshotMetadata meta;
  meta.parameters = {{"theta", "0.5"}, {"theta", "0.7"}};
  expectOneLineMentioning(messageOf<InputError>([&] { writeSnapshot(dir / "p.h5", simpleParticles(2), meta); }),
                          {"theta", "twice"});
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SnapshotWriteErrors, MissingDirectoryIsIoError) {
  ScratchDir dir;
  const fs::path path = dir / "no-such-dir" / "snap.h5";
  expectOneLineMentioning(messageOf<IoError>([&] { writeSnapshot(path, simpleParticles(2), {}); }),
                          {"cannot write snapshot", path.string()});
  EXPECT_TRUE(dir.entries().empty());
}

// ================================================================================================================
// Bad input: each asserts the exception type and a one-line message that names the problem
// ================================================================================================================

TEST(SnapshotReadErrors, MissingFileIsIoError) {
  ScratchDir dir;
  const fs::path path = dir / "absent.h5";
  expectOneLineMentioning(readError<IoError>(path), {path.string(), "no such file"});
}

TEST(SnapshotReadErrors, DirectoryIsIoError) {
  ScratchDir dir;
  expectOneLineMentioning(readError<IoError>(dir.path()), {"directory"});
}

TEST(SnapshotReadErrors, GarbageBytesAreInputError) {
  ScratchDir dir;
  const fs::path path = dir / "garbage.h5";
  {
    std::ofstream out(path, std::ios::binary);
    std::mt19937_64 rng(7);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>(rng() & 0xff));
  }
  expectOneLineMentioning(readError<InputError>(path), {path.string(), "not an HDF5 file"});
}

TEST(SnapshotReadErrors, TruncatedFileIsIoError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir, "truncated.h5", 1000);
  fs::resize_file(path, fs::file_size(path) / 2);
  expectOneLineMentioning(readError<IoError>(path), {path.string(), "truncated"});
}

TEST(SnapshotReadErrors, MissingPartType1IsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  editFile(path, [](hid_t file) { deleteLink(file, "PartType1"); });
  expectOneLineMentioning(readError<InputError>(path), {"missing group /PartType1"});
}

TEST(SnapshotReadErrors, MissingCoordinatesIsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  editFile(path, [](hid_t file) { deleteLink(file, "PartType1/Coordinates"); });
  expectOneLineMentioning(readError<InputError>(path), {"missing dataset PartType1/Coordinates"});
}

TEST(SnapshotReadErrors, MissingVelocitiesIsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  editFile(path, [](hid_t file) { deleteLink(file, "PartType1/Velocities"); });
  expectOneLineMentioning(readError<InputError>(path), {"missing dataset PartType1/Velocities"});
}

TEST(SnapshotReadErrors, WrongShapeIsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::vector<double> values(5 * 2, 0.25);
  editFile(path, [&](hid_t file) {
    replaceDataset(file, "PartType1/Coordinates", 5, 2, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values.data());
  });
  expectOneLineMentioning(readError<InputError>(path), {"PartType1/Coordinates", "shape 5 x 2", "N x 3"});
}

TEST(SnapshotReadErrors, WrongRankIsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::vector<double> values(5 * 3, 0.25);
  editFile(path, [&](hid_t file) {
    replaceDataset(file, "PartType1/Masses", 5, 3, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values.data());
  });
  expectOneLineMentioning(readError<InputError>(path), {"PartType1/Masses", "shape 5 x 3", "expected N"});
}

TEST(SnapshotReadErrors, LengthMismatchIsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::vector<double> values(4 * 3, 0.25);
  editFile(path, [&](hid_t file) {
    replaceDataset(file, "PartType1/Velocities", 4, 3, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values.data());
  });
  expectOneLineMentioning(readError<InputError>(path), {"PartType1/Velocities has 4 rows", "Coordinates has 5"});
}

TEST(SnapshotReadErrors, NanCoordinateIsInputError) {
  ScratchDir dir;
  Particles p = simpleParticles(5);
  p.y[3] = std::numeric_limits<double>::quiet_NaN();
  const fs::path path = dir / "nan.h5";
  writeSnapshot(path, p, {});  // the writer records what it is given
  expectOneLineMentioning(readError<InputError>(path), {"PartType1/Coordinates", "NaN", "body 3"});
}

TEST(SnapshotReadErrors, InfVelocityIsInputError) {
  ScratchDir dir;
  Particles p = simpleParticles(5);
  p.vz[1] = -std::numeric_limits<double>::infinity();
  const fs::path path = dir / "inf.h5";
  writeSnapshot(path, p, {});
  expectOneLineMentioning(readError<InputError>(path), {"PartType1/Velocities", "infinite", "body 1"});
}

TEST(SnapshotReadErrors, NanPotentialIsInputError) {
  ScratchDir dir;
  Particles p = simpleParticles(5);
  p.pot[4] = std::numeric_limits<double>::quiet_NaN();
  const fs::path path = dir / "nanpot.h5";
  writeSnapshot(path, p, {});
  expectOneLineMentioning(readError<InputError>(path), {"PartType1/Potential", "NaN", "body 4"});
}

TEST(SnapshotReadErrors, ZeroMassIsInputError) {
  ScratchDir dir;
  Particles p = simpleParticles(5);
  p.mass[2] = 0.0;
  const fs::path path = dir / "zeromass.h5";
  writeSnapshot(path, p, {});
  expectOneLineMentioning(readError<InputError>(path), {"PartType1/Masses", "mass <= 0", "body 2"});
}

TEST(SnapshotReadErrors, NegativeMassIsInputError) {
  ScratchDir dir;
  Particles p = simpleParticles(5);
  p.mass[0] = -1.0;
  const fs::path path = dir / "negmass.h5";
  writeSnapshot(path, p, {});
  expectOneLineMentioning(readError<InputError>(path), {"mass <= 0", "body 0"});
}

TEST(SnapshotReadErrors, DuplicateIdsAreInputError) {
  ScratchDir dir;
  Particles p = simpleParticles(5);
  p.id[4] = 1;
  const fs::path path = dir / "dupid.h5";
  writeSnapshot(path, p, {});
  expectOneLineMentioning(readError<InputError>(path), {"ParticleIDs", "repeats ParticleID 1"});
}

TEST(SnapshotReadErrors, FloatIdsAreInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::vector<double> ids{0, 1, 2, 3, 4};
  editFile(path, [&](hid_t file) {
    replaceDataset(file, "PartType1/ParticleIDs", 5, 0, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, ids.data());
  });
  expectOneLineMentioning(readError<InputError>(path), {"ParticleIDs", "integers"});
}

TEST(SnapshotReadErrors, NegativeIdsAreInputErrorNotZero) {
  // HDF5 converts a negative signed id to 0 when it is read as uint64: the reader must look before converting.
  ScratchDir dir;
  const fs::path path = writeGood(dir, "negid.h5");
  const std::vector<std::int64_t> ids64{10, 11, -3, 13, 14};
  editFile(path, [&](hid_t file) {
    replaceDataset(file, "PartType1/ParticleIDs", 5, 0, H5T_STD_I64LE, H5T_NATIVE_INT64, ids64.data());
  });
  expectOneLineMentioning(readError<InputError>(path),
                          {"negid.h5", "PartType1/ParticleIDs", "negative ParticleID (-3)", "body 2"});
  const std::vector<std::int32_t> ids32{-1, 1, 2, 3, 4};
  editFile(path, [&](hid_t file) {
    replaceDataset(file, "PartType1/ParticleIDs", 5, 0, H5T_STD_I32LE, H5T_NATIVE_INT32, ids32.data());
  });
  expectOneLineMentioning(readError<InputError>(path), {"negative ParticleID (-1)", "body 0"});
}

TEST(SnapshotReadErrors, MassTableThatDisagreesWithMassesIsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir, "masstable.h5");  // 5 bodies of mass 0.2
  const std::array<double, 6> wrong{0.0, 0.25, 0.0, 0.0, 0.0, 0.0};
  editFile(path, [&](hid_t file) { writeHeaderAttribute(file, "MassTable", H5T_NATIVE_DOUBLE, wrong.data()); });
  expectOneLineMentioning(readError<InputError>(path),
                          {"masstable.h5", "MassTable[1] = 0.25", "PartType1/Masses has 0.2", "body 0"});
  // Agreeing (to float rounding: Masses stored as float) is fine.
  const std::array<double, 6> agreeing{0.0, 0.2, 0.0, 0.0, 0.0, 0.0};
  const std::vector<float> masses(5, 0.2f);
  editFile(path, [&](hid_t file) {
    writeHeaderAttribute(file, "MassTable", H5T_NATIVE_DOUBLE, agreeing.data());
    replaceDataset(file, "PartType1/Masses", 5, 0, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, masses.data());
  });
  EXPECT_EQ(readSnapshot(path).particles.mass, std::vector<double>(5, static_cast<double>(0.2f)));
}

TEST(SnapshotReadErrors, ZeroBodiesIsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  editFile(path, [](hid_t file) {
    replaceDataset(file, "PartType1/Coordinates", 0, 3, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, nullptr);
    replaceDataset(file, "PartType1/Velocities", 0, 3, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, nullptr);
    replaceDataset(file, "PartType1/Masses", 0, 0, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, nullptr);
  });
  expectOneLineMentioning(readError<InputError>(path), {"no bodies"});
}

TEST(SnapshotReadErrors, NoMassesAndZeroMassTableIsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  editFile(path, [](hid_t file) { deleteLink(file, "PartType1/Masses"); });
  expectOneLineMentioning(readError<InputError>(path), {"Masses", "MassTable[1]"});
}

TEST(SnapshotReadErrors, OtherParticleTypesAreInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::array<std::uint32_t, 6> numPart{3, 5, 0, 0, 0, 0};
  editFile(path,
           [&](hid_t file) { writeHeaderAttribute(file, "NumPart_ThisFile", H5T_NATIVE_UINT32, numPart.data()); });
  expectOneLineMentioning(readError<InputError>(path), {"NumPart_ThisFile[0]", "PartType1 only"});
}

TEST(SnapshotReadErrors, HeaderCountMismatchIsInputError) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::array<std::uint32_t, 6> numPart{0, 6, 0, 0, 0, 0};
  editFile(path,
           [&](hid_t file) { writeHeaderAttribute(file, "NumPart_ThisFile", H5T_NATIVE_UINT32, numPart.data()); });
  expectOneLineMentioning(readError<InputError>(path), {"NumPart_ThisFile[1] = 6", "5 rows"});
}

// Totals that say rows or files are missing, a file count below one and a periodic flag that is neither 0 nor 1 were
// read without a word before.
TEST(SnapshotReadErrors, HeaderTotalsFileCountAndPeriodicFlagAreChecked) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::array<std::uint32_t, 6> total{0, 1000, 0, 0, 0, 0};
  editFile(path, [&](hid_t file) { writeHeaderAttribute(file, "NumPart_Total", H5T_NATIVE_UINT32, total.data()); });
  expectOneLineMentioning(readError<InputError>(path), {"NumPart_Total[1]", "1000", "5 rows"});

  const fs::path high = writeGood(dir, "high.hdf5");
  const std::array<std::uint32_t, 6> highWord{0, 1, 0, 0, 0, 0};
  editFile(high, [&](hid_t file) {
    writeHeaderAttribute(file, "NumPart_Total_HighWord", H5T_NATIVE_UINT32, highWord.data());
  });
  expectOneLineMentioning(readError<InputError>(high), {"NumPart_Total[1]", "4294967301"});

  for (const std::int32_t files : {0, -1}) {
    const fs::path path2 = writeGood(dir, "files.hdf5");
    editFile(path2, [&](hid_t file) { writeHeaderAttribute(file, "NumFilesPerSnapshot", H5T_NATIVE_INT32, &files); });
    expectOneLineMentioning(readError<InputError>(path2), {"NumFilesPerSnapshot"});
  }
  for (const std::int32_t flag : {2, -1}) {
    const fs::path path3 = writeGood(dir, "flag.hdf5");
    editFile(path3, [&](hid_t file) { writeHeaderAttribute(file, "MatchaPeriodic", H5T_NATIVE_INT32, &flag); });
    expectOneLineMentioning(readError<InputError>(path3), {"MatchaPeriodic"});
  }
}

// ================================================================================================================
// Multi-file snapshots (GADGET's NumFilesPerSnapshot: one file per rank of a distributed run)
// ================================================================================================================

/// Bodies [first, first + count) of `all`.
Particles sliceOf(const Particles& all, std::size_t first, std::size_t count) {
  Particles part(count);
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t i = first + k;
    for (auto [to, from] :
         {std::pair{&part.x, &all.x}, std::pair{&part.y, &all.y}, std::pair{&part.z, &all.z},
          std::pair{&part.vx, &all.vx}, std::pair{&part.vy, &all.vy}, std::pair{&part.vz, &all.vz},
          std::pair{&part.mass, &all.mass}, std::pair{&part.ax, &all.ax}, std::pair{&part.ay, &all.ay},
          std::pair{&part.az, &all.az}, std::pair{&part.pot, &all.pot}}) {
      (*to)[k] = (*from)[i];
    }
    part.id[k] = all.id[i];
  }
  return part;
}

/// `all` as a set of files of `sizes` bodies each, in order, under the one-file name dir/name; returns that name.
fs::path writeSet(const ScratchDir& dir, const Particles& all, const std::vector<std::size_t>& sizes,
                  const SnapshotMetadata& meta, const std::string& name = "set.hdf5") {
  const fs::path path = dir / name;
  std::size_t first = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    SnapshotWriteOptions options;
    options.filePart =
        SnapshotWriteOptions::FilePart{static_cast<int>(k), static_cast<int>(sizes.size()), all.size(), 500.0};
    writeSnapshot(matcha::io::multiFilePath(path, static_cast<int>(k)), sliceOf(all, first, sizes[k]), meta, options);
    first += sizes[k];
  }
  return path;
}

TEST(SnapshotMultiFile, ReadsTheWholeFromAnyFileOrTheSetsName) {
  EXPECT_EQ(matcha::io::multiFilePath("out/snapshot_003.hdf5", 2), fs::path("out/snapshot_003.2.hdf5"));
  std::mt19937_64 rng(testSeed());
  ScratchDir dir;
  const Particles all = randomParticles(23, rng);
  const fs::path set = writeSet(dir, all, {9, 0, 14}, someMetadata());
  std::vector<std::string> files = dir.entries();
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"set.0.hdf5", "set.1.hdf5", "set.2.hdf5"}));
  for (const fs::path& path : {set, dir / "set.0.hdf5", dir / "set.2.hdf5"}) {
    SCOPED_TRACE(path.string());
    const Snapshot read = readSnapshot(path);
    expectSameParticles(all, read.particles);
    EXPECT_EQ(read.time, 0.375);
    EXPECT_EQ(read.parameters, someMetadata().parameters);
    EXPECT_EQ(matcha::io::inspectSnapshot(path).numBodies, 23u);
  }
  // GADGET's header: this file's bodies, the set's total, the set's size; every file the BoxSize of the set's largest
  // coordinate (500), not its own (file 1 holds no bodies).
  H5 file(H5Fopen((dir / "set.1.hdf5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  H5 header(H5Gopen2(file, "Header", H5P_DEFAULT), H5Gclose);
  EXPECT_EQ(readAttribute<std::uint32_t>(header, "NumPart_ThisFile", H5T_NATIVE_UINT32),
            (std::vector<std::uint32_t>{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(readAttribute<std::uint32_t>(header, "NumPart_Total", H5T_NATIVE_UINT32),
            (std::vector<std::uint32_t>{0, 23, 0, 0, 0, 0}));
  EXPECT_EQ(readAttribute<std::int32_t>(header, "NumFilesPerSnapshot", H5T_NATIVE_INT32), std::vector<std::int32_t>{3});
  EXPECT_EQ(readAttribute<double>(header, "BoxSize", H5T_NATIVE_DOUBLE), std::vector<double>{1e3});
}

// A set with a file missing, files of two different writes, a body in two files, too few bodies, or a file whose name
// does not say its place: one line naming the file, never a silently wrong system.
TEST(SnapshotMultiFile, MissingMixedOrOverlappingFilesAreErrors) {
  std::mt19937_64 rng(testSeed());
  ScratchDir dir;
  const Particles all = randomParticles(12, rng);
  const fs::path missing = writeSet(dir, all, {4, 4, 4}, someMetadata(), "missing.hdf5");
  fs::remove(dir / "missing.1.hdf5");
  expectOneLineMentioning(readError<IoError>(missing), {"file 1 of the set", "missing.1.hdf5", "no such file"});

  const fs::path mixed = writeSet(dir, all, {4, 4, 4}, someMetadata(), "mixed.hdf5");
  SnapshotMetadata later = someMetadata();
  later.time = 0.5;
  SnapshotWriteOptions options;
  options.filePart = SnapshotWriteOptions::FilePart{2, 3, 12, 500.0};
  writeSnapshot(dir / "mixed.2.hdf5", sliceOf(all, 8, 4), later, options);
  expectOneLineMentioning(readError<InputError>(mixed), {"file 2 of the set", "different snapshots"});

  const fs::path twice = writeSet(dir, all, {4, 4, 4}, someMetadata(), "twice.hdf5");
  writeSnapshot(dir / "twice.2.hdf5", sliceOf(all, 0, 4), someMetadata(), options);
  expectOneLineMentioning(readError<InputError>(twice), {"ParticleID", "two files"});

  const fs::path few = writeSet(dir, all, {4, 4, 4}, someMetadata(), "few.hdf5");
  writeSnapshot(dir / "few.2.hdf5", sliceOf(all, 8, 3), someMetadata(), options);
  expectOneLineMentioning(readError<InputError>(few), {"hold 11 bodies", "NumPart_Total says 12"});

  writeSet(dir, all, {6, 6}, someMetadata(), "renamed.hdf5");
  fs::rename(dir / "renamed.0.hdf5", dir / "renamed-first.hdf5");
  expectOneLineMentioning(readError<InputError>(dir / "renamed-first.hdf5"), {"NumFilesPerSnapshot", "NAME.K"});
}

TEST(SnapshotMultiFile, WriterChecksThePart) {
  ScratchDir dir;
  const Particles some = simpleParticles(5);
  for (const auto& [part, fragment] :
       {std::pair{SnapshotWriteOptions::FilePart{3, 3, 10, 0}, "file 3 of a snapshot of 3"},
        std::pair{SnapshotWriteOptions::FilePart{0, 2, 4, 0}, "5 bodies in one file of a snapshot of 4"},
        std::pair{SnapshotWriteOptions::FilePart{0, 2, 0, 0}, "no bodies"}}) {
    SnapshotWriteOptions options;
    options.filePart = part;
    const Particles bodies = part.totalBodies == 0 ? Particles{} : some;
    expectOneLineMentioning(
        messageOf<InputError>([&] { writeSnapshot(dir / "part.hdf5", bodies, someMetadata(), options); }), {fragment});
  }
  EXPECT_TRUE(dir.entries().empty());
}

// ================================================================================================================
// Accepted variants (foreign initial conditions)
// ================================================================================================================

TEST(SnapshotReadVariants, EqualMassesFromMassTableWithoutMassesDataset) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::array<double, 6> massTable{0.0, 0.25, 0.0, 0.0, 0.0, 0.0};
  editFile(path, [&](hid_t file) {
    deleteLink(file, "PartType1/Masses");
    writeHeaderAttribute(file, "MassTable", H5T_NATIVE_DOUBLE, massTable.data());
  });
  const Snapshot read = readSnapshot(path);
  EXPECT_EQ(read.particles.mass, std::vector<double>(5, 0.25));
  EXPECT_EQ(read.particles.x, simpleParticles(5).x);
  EXPECT_EQ(read.particles.vy, simpleParticles(5).vy);
}

TEST(SnapshotHeader, RecordsTheBuildThatWroteIt) {
  ScratchDir dir;
  const Snapshot read = readSnapshot(writeGood(dir));
  EXPECT_EQ(read.matchaVersion, matcha::kVersion);
  EXPECT_EQ(read.matchaGitCommit, matcha::kGitCommit);
  EXPECT_FALSE(read.matchaVersion.empty());
  EXPECT_FALSE(linkExists(dir / "good.h5", "Code")) << "no SWIFT-style /Code group (DESIGN.md section 7)";
}

TEST(SnapshotInspect, GivesCountAndTimeWithoutTheBodies) {
  ScratchDir dir;
  const fs::path path = writeGood(dir, "inspect.h5", 7);  // Time 0.375
  const matcha::io::SnapshotInfo info = matcha::io::inspectSnapshot(path);
  EXPECT_EQ(info.numBodies, 7u);
  EXPECT_EQ(info.time, 0.375);
  EXPECT_THROW(matcha::io::inspectSnapshot(dir / "missing.h5"), IoError);
  editFile(path, [](hid_t file) { deleteLink(file, "PartType1/Coordinates"); });
  expectOneLineMentioning(messageOf<InputError>([&] { matcha::io::inspectSnapshot(path); }),
                          {"inspect.h5", "Coordinates"});
}

TEST(SnapshotReadVariants, FloatCoordinatesAreConverted) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const Particles p = simpleParticles(5);
  std::vector<float> coordinates;
  for (std::size_t i = 0; i < 5; ++i) {
    for (double v : {p.x[i] + 0.1, p.y[i], p.z[i]}) coordinates.push_back(static_cast<float>(v));
  }
  editFile(path, [&](hid_t file) {
    replaceDataset(file, "PartType1/Coordinates", 5, 3, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, coordinates.data());
  });
  const Snapshot read = readSnapshot(path);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(read.particles.x[i], static_cast<double>(coordinates[3 * i + 0]));
    EXPECT_EQ(read.particles.y[i], static_cast<double>(coordinates[3 * i + 1]));
    EXPECT_EQ(read.particles.z[i], static_cast<double>(coordinates[3 * i + 2]));
  }
}

TEST(SnapshotReadVariants, MissingIdsAreNumberedFromZero) {
  ScratchDir dir;
  Particles p = simpleParticles(5);
  for (auto& id : p.id) id += 100;
  const fs::path path = dir / "noids.h5";
  writeSnapshot(path, p, {});
  editFile(path, [](hid_t file) { deleteLink(file, "PartType1/ParticleIDs"); });
  EXPECT_EQ(readSnapshot(path).particles.id, (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
}

TEST(SnapshotReadVariants, Int32IdsAndNoHeaderAreAccepted) {
  ScratchDir dir;
  const fs::path path = writeGood(dir);
  const std::vector<std::int32_t> ids{10, 11, 12, 13, 14};
  editFile(path, [&](hid_t file) {
    replaceDataset(file, "PartType1/ParticleIDs", 5, 0, H5T_STD_I32LE, H5T_NATIVE_INT32, ids.data());
    deleteLink(file, "Header");
  });
  const Snapshot read = readSnapshot(path);
  EXPECT_EQ(read.particles.id, (std::vector<std::uint64_t>{10, 11, 12, 13, 14}));
  EXPECT_EQ(read.time, 0.0);
}

}  // namespace
