// SPDX-License-Identifier: MIT
// The j-parallel Hermite engine (parallel/distributed_hermite_engine.hpp) on K ranks against the CPU Hermite engine
// holding every j-particle in one process: forces, jerks, potentials and nearest neighbours of i-blocks (bodies that
// are j-particles too, strangers, every body), after slots were replaced and predicted further, with fewer slots than
// ranks, and the same bits on every rank; errors on one rank that stop all; and the Hermite integrator driven by it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/hermite_predictor.hpp"
#include "matcha/gpu/hermite_cpu_engine.hpp"
#include "matcha/integrator/diagnostics.hpp"
#include "matcha/integrator/hermite.hpp"
#include "matcha/parallel/distributed_hermite_engine.hpp"
#include "mpi_testing.hpp"

namespace matcha::parallel {
namespace {

using testing::worldRank;
using testing::worldSize;

/// A uniform number in [lo, hi) from 53 bits of the generator: the same sequence on every rank (std's distributions
/// are the library's choice; these are ours).
double uniform(std::mt19937_64& rng, double lo, double hi) { return lo + (hi - lo) * double(rng() >> 11) * 0x1p-53; }

/// The id of the j-particle in slot s: not the slot, so that a slot reported as an id shows.
std::int64_t idOfSlot(std::size_t s) { return 5000 + 3 * static_cast<std::int64_t>(s); }

/// A Plummer sphere's bodies as j-particles at their own times in [-1/16, 0), with accelerations, jerks and snaps of
/// plausible size (random: the predictor only needs them to be there), in slots 0..n-1.
std::vector<JParticle> makeJParticles(std::size_t n, std::uint64_t seed) {
  const Particles p = matcha::testing::plummer(n, seed);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<JParticle> j(n);
  for (std::size_t s = 0; s < n; ++s) {
    JParticle& q = j[s];
    q.time = -uniform(rng, 0.0, 0.0625);
    q.mass = p.mass[s];
    const double pos[3] = {p.x[s], p.y[s], p.z[s]}, vel[3] = {p.vx[s], p.vy[s], p.vz[s]};
    for (int d = 0; d < 3; ++d) {
      q.pos[d] = pos[d];
      q.vel[d] = vel[d];
      q.acc[d] = uniform(rng, -1.0, 1.0);
      q.jerk[d] = uniform(rng, -3.0, 3.0);
      q.snap[d] = uniform(rng, -10.0, 10.0);
    }
    q.id = idOfSlot(s);
  }
  return j;
}

/// j-particle q predicted to `time`, as the engines predict it.
void predicted(const JParticle& q, double time, double pos[3], double vel[3]) {
  for (int d = 0; d < 3; ++d) {
    predictCoordinate(time - q.time, q.pos[d], q.vel[d], q.acc[d], q.jerk[d], q.snap[d], pos[d], vel[d]);
  }
}

/// An i-block with its storage.
struct Block {
  std::vector<std::int64_t> id;
  std::vector<double> pos, vel;

  void add(std::int64_t i, const double p[3], const double v[3]) {
    id.push_back(i);
    pos.insert(pos.end(), p, p + 3);
    vel.insert(vel.end(), v, v + 3);
  }
  IBlockView view() const { return {id.data(), pos.data(), vel.data(), id.size()}; }
};

/// Every slot below numJ at `time`, exactly where the engines predict it: the self pair has r = 0, so only the id
/// keeps the i-particle's own j-copy out of its potential and its nearest neighbour.
Block everyBody(const std::vector<JParticle>& j, std::size_t numJ, double time) {
  Block block;
  for (std::size_t s = 0; s < numJ; ++s) {
    double p[3], v[3];
    predicted(j[s], time, p, v);
    block.add(j[s].id, p, v);
  }
  return block;
}

/// `count` bodies drawn from the slots below numJ (their ids, their predicted state moved by up to 1e-3) and
/// `strangers` with ids no j-particle has, inside the sphere.
Block randomBlock(const std::vector<JParticle>& j, std::size_t numJ, double time, std::size_t count,
                  std::size_t strangers, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Block block;
  for (std::size_t k = 0; k < count; ++k) {
    const std::size_t s = static_cast<std::size_t>(rng() % numJ);
    double p[3], v[3];
    predicted(j[s], time, p, v);
    for (int d = 0; d < 3; ++d) {
      p[d] += uniform(rng, -1e-3, 1e-3);
      v[d] += uniform(rng, -1e-3, 1e-3);
    }
    block.add(j[s].id, p, v);
  }
  for (std::size_t k = 0; k < strangers; ++k) {
    double p[3], v[3];
    for (int d = 0; d < 3; ++d) {
      p[d] = uniform(rng, -1.0, 1.0);
      v[d] = uniform(rng, -0.5, 0.5);
    }
    block.add(-1000 - static_cast<std::int64_t>(k), p, v);
  }
  return block;
}

/// One force call's results.
struct Results {
  std::vector<double> acc, jerk, pot, nearest2;
  std::vector<std::int64_t> nearestId;

  /// The raw bytes, in a fixed order: what "the same bits" means.
  std::vector<unsigned char> bytes() const {
    std::vector<unsigned char> out;
    auto append = [&](const void* data, std::size_t size) {
      const auto* b = static_cast<const unsigned char*>(data);
      out.insert(out.end(), b, b + size);
    };
    append(acc.data(), acc.size() * sizeof(double));
    append(jerk.data(), jerk.size() * sizeof(double));
    append(pot.data(), pot.size() * sizeof(double));
    append(nearest2.data(), nearest2.size() * sizeof(double));
    append(nearestId.data(), nearestId.size() * sizeof(std::int64_t));
    return out;
  }
};

/// Every array of a force call on `engine` (from its last predict). The arrays start as NaN and 77: a result left
/// unwritten shows.
Results forces(HermiteEngine& engine, const Block& block, double eps2) {
  const std::size_t n = block.id.size();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Results r{std::vector<double>(3 * n, nan), std::vector<double>(3 * n, nan), std::vector<double>(n, nan),
            std::vector<double>(n, nan), std::vector<std::int64_t>(n, 77)};
  engine.launchForces(block.view(), eps2,
                      {r.acc.data(), r.jerk.data(), r.pot.data(), r.nearestId.data(), r.nearest2.data(), n});
  engine.finishForces();
  return r;
}

/// The engines under test on this rank: the rank's CPU engine behind the distributed one, and the one-process
/// reference with every slot (each rank has its own, and all compute the same).
struct Engines {
  gpu::HermiteCpuEngine local;
  DistributedHermiteEngine distributed{local, MPI_COMM_WORLD};
  gpu::HermiteCpuEngine reference;

  void reserve(std::size_t capacity) {
    distributed.reserve(capacity);
    reference.reserve(capacity);
  }
  void set(std::span<const std::uint32_t> addresses, std::span<const JParticle> particles) {
    distributed.setJParticles(addresses, particles);
    reference.setJParticles(addresses, particles);
  }
  void setAll(const std::vector<JParticle>& j) {
    std::vector<std::uint32_t> addresses(j.size());
    for (std::size_t s = 0; s < j.size(); ++s) addresses[s] = static_cast<std::uint32_t>(s);
    set(addresses, j);
  }
  void predict(double time, std::size_t numJ) {
    distributed.predict(time, numJ);
    reference.predict(time, numJ);
  }
};

/// The sums of the magnitudes of the terms of each i-particle's acceleration, jerk and potential from slots [0, numJ)
/// (self skipped by id, s2 = 0 skipped): the scale of the rounding error of any order of summation.
struct TermScales {
  std::vector<double> acc, jerk, pot;
};

TermScales termScales(const std::vector<JParticle>& j, std::size_t numJ, double time, const Block& block, double eps2) {
  const std::size_t n = block.id.size();
  TermScales scale{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (std::size_t s = 0; s < numJ; ++s) {
    double pj[3], vj[3];
    predicted(j[s], time, pj, vj);
    for (std::size_t i = 0; i < n; ++i) {
      if (block.id[i] == j[s].id) continue;
      double r2 = 0.0, v2 = 0.0;
      for (int d = 0; d < 3; ++d) {
        const double r = pj[d] - block.pos[3 * i + d], v = vj[d] - block.vel[3 * i + d];
        r2 += r * r;
        v2 += v * v;
      }
      const double s2 = r2 + eps2;
      if (s2 == 0.0) continue;
      const double s1 = std::sqrt(s2);
      // |m r / s^3| <= m / s2, and |m (v / s^3 - 3 (r.v) r / s^5)| <= 4 m |v| / s^3.
      scale.acc[i] += j[s].mass / s2;
      scale.jerk[i] += 4.0 * j[s].mass * std::sqrt(v2) / (s2 * s1);
      scale.pot[i] += j[s].mass / s1;
    }
  }
  return scale;
}

// Both engines compute every pair in double from the same predicted coordinates (the same predictor, the same pair
// function); only the order of the sums differs (each rank sums its own slots, SIMD lanes and all, then the ranks are
// added). Any order of summing n terms errs by at most (n - 1) u sum |term| (u = 2^-53; Higham, Accuracy and Stability,
// 4.2), 1.1e-13 sum |term| at n = 1000, so two orders differ by at most 2.2e-13 of it: bound 1e-12 sum |term|. A slot
// lost or counted twice moves a sum by about sum |term| / N, 1e-3 of it, nine orders above the bound.
constexpr double kSumTolerance = 1e-12;

/// The distributed results against the reference, component by component against each sum's term scale; nearest
/// ids equal and never the i-particle itself, distances equal to rounding. Prints the largest relative differences.
void expectAgreement(const Results& got, const Results& want, const TermScales& scale, const Block& block,
                     const char* what) {
  const std::size_t n = block.id.size();
  ASSERT_EQ(got.acc.size(), 3 * n);
  double worstAcc = 0.0, worstJerk = 0.0, worstPot = 0.0, worstAccNorm = 0.0;
  int failures = 0;
  for (std::size_t i = 0; i < n && failures < 10; ++i) {
    double diff2 = 0.0, norm2 = 0.0;
    for (int d = 0; d < 3; ++d) {
      const double da = std::abs(got.acc[3 * i + d] - want.acc[3 * i + d]);
      const double dj = std::abs(got.jerk[3 * i + d] - want.jerk[3 * i + d]);
      worstAcc = std::max(worstAcc, scale.acc[i] > 0 ? da / scale.acc[i] : da);
      worstJerk = std::max(worstJerk, scale.jerk[i] > 0 ? dj / scale.jerk[i] : dj);
      diff2 += da * da;
      norm2 += want.acc[3 * i + d] * want.acc[3 * i + d];
      if (!(da <= kSumTolerance * scale.acc[i]) || !(dj <= kSumTolerance * scale.jerk[i])) {
        ADD_FAILURE() << what << ": i-particle " << i << " (id " << block.id[i] << ") component " << d << ": acc "
                      << got.acc[3 * i + d] << " vs " << want.acc[3 * i + d] << ", jerk " << got.jerk[3 * i + d]
                      << " vs " << want.jerk[3 * i + d];
        ++failures;
      }
    }
    if (norm2 > 0) worstAccNorm = std::max(worstAccNorm, std::sqrt(diff2 / norm2));
    const double dp = std::abs(got.pot[i] - want.pot[i]);
    worstPot = std::max(worstPot, scale.pot[i] > 0 ? dp / scale.pot[i] : dp);
    if (!(dp <= kSumTolerance * scale.pot[i])) {
      ADD_FAILURE() << what << ": i-particle " << i << " pot " << got.pot[i] << " vs " << want.pot[i];
      ++failures;
    }
    if (got.nearestId[i] != want.nearestId[i] || got.nearestId[i] == block.id[i]) {
      ADD_FAILURE() << what << ": i-particle " << i << " (id " << block.id[i] << ") nearest " << got.nearestId[i]
                    << " vs " << want.nearestId[i];
      ++failures;
    }
    // The same pair's |r|^2 from the same coordinates; a vector lane and the scalar tail may round it apart by an ulp.
    if (std::isinf(want.nearest2[i])) {
      EXPECT_EQ(got.nearest2[i], want.nearest2[i]) << what << ": i-particle " << i;
    } else {
      EXPECT_DOUBLE_EQ(got.nearest2[i], want.nearest2[i]) << what << ": i-particle " << i;
    }
  }
  if (worldRank() == 0) {
    std::printf(
        "[ hermite  ] %s, %d ranks, %zu i: largest |diff| / sum|term|: acc %.2e jerk %.2e pot %.2e; largest "
        "|da| / |a| %.2e\n",
        what, worldSize(), n, worstAcc, worstJerk, worstPot, worstAccNorm);
  }
}

/// With one rank the distributed engine is its local engine: the reference's bits exactly.
void expectBitsOnOneRank(const Results& got, const Results& want, const char* what) {
  if (worldSize() != 1) return;
  EXPECT_TRUE(got.bytes() == want.bytes()) << what << ": one rank must pass the calls straight through";
}

/// Whether every rank holds the same bytes (each rank's gathered and compared with rank 0's, on every rank).
bool sameOnEveryRank(const std::vector<unsigned char>& bytes) {
  const std::vector<unsigned char> all = testing::allGather(bytes, MPI_BYTE);
  if (all.size() != bytes.size() * static_cast<std::size_t>(worldSize())) return false;
  for (int r = 1; r < worldSize(); ++r) {
    if (std::memcmp(all.data(), all.data() + r * bytes.size(), bytes.size()) != 0) return false;
  }
  return true;
}

TEST(DistributedHermite, ForcesMatchOneProcessEngine) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 1001;  // not a multiple of 2 or 4: the ranks' shares differ by one
  const std::vector<JParticle> j = makeJParticles(n, seed);
  Engines e;
  e.reserve(n);
  EXPECT_EQ(e.distributed.capacity(), n);
  e.setAll(j);
  const double time = 0.0;
  e.predict(time, n);
  if (worldSize() > 1) {
    EXPECT_EQ(e.distributed.name(), e.local.name() + " over " + std::to_string(worldSize()) + " ranks (j-parallel)");
  } else {
    EXPECT_EQ(e.distributed.name(), e.local.name());
  }

  const double eps2 = 1.0 / (64.0 * 64.0);
  const Block some = randomBlock(j, n, time, 150, 20, seed + 1);
  const Results got = forces(e.distributed, some, eps2);
  const Results want = forces(e.reference, some, eps2);
  expectAgreement(got, want, termScales(j, n, time, some, eps2), some, "random block of 170, eps 1/64");
  expectBitsOnOneRank(got, want, "random block");

  // Without softening: the self pair would be the nearest at r = 0 and its potential infinite; the id keeps it out.
  const Block all = everyBody(j, n, time);
  const Results gotAll = forces(e.distributed, all, 0.0);
  const Results wantAll = forces(e.reference, all, 0.0);
  expectAgreement(gotAll, wantAll, termScales(j, n, time, all, 0.0), all, "every body, eps 0");
  expectBitsOnOneRank(gotAll, wantAll, "every body");
  const Results gotAllSoft = forces(e.distributed, all, eps2);
  expectAgreement(gotAllSoft, forces(e.reference, all, eps2), termScales(j, n, time, all, eps2), all,
                  "every body, eps 1/64");

  // Only accelerations and potentials asked for, without velocities: those arrays written, with the same bits as the
  // full call's (jerks are still summed inside, of bodies at rest); the others left alone.
  const std::size_t m = some.id.size();
  std::vector<double> acc(3 * m, -1.0), pot(m, -1.0);
  e.distributed.launchForces({some.id.data(), some.pos.data(), nullptr, m}, eps2,
                             {acc.data(), nullptr, pot.data(), nullptr, nullptr, m});
  e.distributed.finishForces();
  EXPECT_TRUE(std::memcmp(acc.data(), got.acc.data(), acc.size() * sizeof(double)) == 0);
  EXPECT_TRUE(std::memcmp(pot.data(), got.pot.data(), pot.size() * sizeof(double)) == 0);
}

TEST(DistributedHermite, EveryRankGetsTheSameBits) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 777;
  const std::vector<JParticle> j = makeJParticles(n, seed);
  Engines e;
  e.reserve(n);
  e.setAll(j);
  e.predict(0.0, n);
  const Block all = everyBody(j, n, 0.0);
  const double eps2 = 1e-4;
  const Results whole = forces(e.distributed, all, eps2);
  EXPECT_TRUE(sameOnEveryRank(whole.bytes())) << "the ranks' results differ";
  // In several gather messages (n / 7 + 1 of them, and one per i-particle): the same bits as in one.
  for (const std::size_t records : {std::size_t{7}, std::size_t{1}, n}) {
    e.distributed.setRecordsPerMessage(records);
    const Results pieces = forces(e.distributed, all, eps2);
    EXPECT_TRUE(pieces.bytes() == whole.bytes()) << records << " records per message";
    EXPECT_TRUE(sameOnEveryRank(pieces.bytes())) << records << " records per message";
  }
  EXPECT_THROW(e.distributed.setRecordsPerMessage(0), InputError);
  // An empty block still takes part in the gather (every rank's status), and returns nothing.
  const Results none = forces(e.distributed, Block{}, eps2);
  EXPECT_TRUE(none.acc.empty());
}

TEST(DistributedHermite, UpdatedSlotsPredictedLaterStillMatch) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t n = 513;
  std::vector<JParticle> j = makeJParticles(n, seed);
  Engines e;
  e.reserve(n);
  e.setAll(j);
  e.predict(0.0, n);
  const double eps2 = 1.0 / (128.0 * 128.0);
  const Block before = everyBody(j, n, 0.0);
  const Results first = forces(e.distributed, before, eps2);

  // A block step's worth of new states, in an order that is not the slots', on every rank's share, with new times,
  // positions, velocities and snaps; then all predicted to a later time, where the snap matters.
  const std::vector<std::uint32_t> updated = {512, 3, 0, 257, 1, 2, 100, 255};
  std::vector<JParticle> fresh;
  std::mt19937_64 rng(seed + 7);
  for (const std::uint32_t s : updated) {
    JParticle q = j[s];
    q.time = 0.03125;
    for (int d = 0; d < 3; ++d) {
      q.pos[d] += uniform(rng, -0.2, 0.2);
      q.vel[d] += uniform(rng, -0.2, 0.2);
      q.snap[d] = uniform(rng, -50.0, 50.0);
    }
    j[s] = q;
    fresh.push_back(q);
  }
  e.set(updated, fresh);
  const double later = 0.0625;
  e.predict(later, n);
  const Block all = everyBody(j, n, later);
  const Results got = forces(e.distributed, all, eps2);
  const Results want = forces(e.reference, all, eps2);
  expectAgreement(got, want, termScales(j, n, later, all, eps2), all, "8 slots replaced, predicted to 1/16");
  expectBitsOnOneRank(got, want, "slots replaced");
  // The test saw the update: the forces moved.
  EXPECT_FALSE(got.bytes() == first.bytes());
  // A fresh block through the same engine at the same prediction.
  const Block some = randomBlock(j, n, later, 64, 5, seed + 3);
  expectAgreement(forces(e.distributed, some, eps2), forces(e.reference, some, eps2),
                  termScales(j, n, later, some, eps2), some, "random block after the update");
}

TEST(DistributedHermite, FewerSlotsThanRanksAndBelowTheCapacity) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const std::size_t capacity = 64;
  const std::vector<JParticle> j = makeJParticles(capacity, seed);
  Engines e;
  e.reserve(capacity);
  e.setAll(j);
  const double eps2 = 1e-3;
  // numJ 1 on 4 ranks: three ranks without a slot; 0: no rank has one (no neighbour anywhere).
  for (const std::size_t numJ : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5},
                                 std::size_t{13}, std::size_t{63}, capacity}) {
    e.predict(0.01, numJ);
    const Block block = randomBlock(j, capacity, 0.01, 12, 3, seed + numJ);
    const Results got = forces(e.distributed, block, eps2);
    const Results want = forces(e.reference, block, eps2);
    const std::string what = "numJ " + std::to_string(numJ) + " of " + std::to_string(capacity);
    expectAgreement(got, want, termScales(j, numJ, 0.01, block, eps2), block, what.c_str());
    expectBitsOnOneRank(got, want, what.c_str());
    if (numJ == 0) {
      for (std::size_t i = 0; i < block.id.size(); ++i) {
        EXPECT_EQ(got.acc[3 * i], 0.0);
        EXPECT_EQ(got.pot[i], 0.0);
        EXPECT_EQ(got.nearestId[i], -1);
        EXPECT_EQ(got.nearest2[i], std::numeric_limits<double>::infinity());
      }
    }
  }

  // Shrunk and grown again: the slots between hold zero-mass particles at the origin (id 0), as the CPU engine's new
  // slots do, not what the larger memory held there. They are everyone's nearest neighbour near the centre.
  // 9: on 2 and 4 ranks some rank keeps a slot beyond it (global 9 on 2 ranks; 9, 10 and 11 on 4).
  e.reserve(9);
  EXPECT_EQ(e.distributed.capacity(), 9u);
  EXPECT_THROW(e.distributed.predict(0.0, 10), InputError);
  e.reserve(13);
  e.predict(0.02, 13);
  std::vector<JParticle> seen(j.begin(), j.begin() + 13);
  for (std::size_t s = 9; s < 13; ++s) seen[s] = JParticle{};
  Block nearOrigin;
  for (int k = 0; k < 5; ++k) {
    const double p[3] = {1e-3 * k, -2e-3, 1e-3}, v[3] = {0.0, 0.1, 0.0};
    nearOrigin.add(-1 - k, p, v);
  }
  const Results got = forces(e.distributed, nearOrigin, eps2);
  const Results want = forces(e.reference, nearOrigin, eps2);
  expectAgreement(got, want, termScales(seen, 13, 0.02, nearOrigin, eps2), nearOrigin, "shrunk to 9, grown to 13");
  for (std::size_t i = 0; i < nearOrigin.id.size(); ++i) EXPECT_EQ(got.nearestId[i], 0) << "a zero slot is nearest";
}

/// A rank's engine that fails on one rank: reserve with an InputError, or finishForces with a CudaError (a kernel
/// that failed), as a device might.
class FailingOnOneRank final : public HermiteEngine {
 public:
  enum class When { never, reserve, finish };
  FailingOnOneRank(int failingRank, When when) : fails_(worldRank() == failingRank), when_(when) {}
  void stopFailing() { when_ = When::never; }

  std::string name() const override { return "failing"; }
  void reserve(std::size_t capacity) override {
    if (fails_ && when_ == When::reserve) throw InputError("this device cannot hold " + std::to_string(capacity));
    engine_.reserve(capacity);
  }
  std::size_t capacity() const override { return engine_.capacity(); }
  void setJParticles(std::span<const std::uint32_t> a, std::span<const JParticle> p) override {
    engine_.setJParticles(a, p);
  }
  void predict(double time, std::size_t numJ) override { engine_.predict(time, numJ); }
  void launchForces(const IBlockView& block, double eps2, const HermiteForceView& out) override {
    engine_.launchForces(block, eps2, out);
  }
  void finishForces() override {
    engine_.finishForces();
    if (fails_ && when_ == When::finish) throw CudaError("the force kernel failed");
  }

 private:
  bool fails_;
  When when_;
  gpu::HermiteCpuEngine engine_;
};

TEST(DistributedHermite, ErrorOnOneRankStopsEveryRank) {
  const int last = worldSize() - 1;
  const std::string prefix = worldSize() > 1 ? "rank " + std::to_string(last) + ": " : "";
  {
    FailingOnOneRank local(last, FailingOnOneRank::When::reserve);
    DistributedHermiteEngine engine(local, MPI_COMM_WORLD);
    std::string message;
    try {
      engine.reserve(100);
    } catch (const InputError& error) {
      message = error.what();
    }
    EXPECT_EQ(message, prefix + "this device cannot hold " + std::to_string((100 + worldSize() - 1) / worldSize()));
  }
  {
    FailingOnOneRank local(last, FailingOnOneRank::When::finish);
    DistributedHermiteEngine engine(local, MPI_COMM_WORLD);
    const std::vector<JParticle> j = makeJParticles(40, 11);
    engine.reserve(40);
    std::vector<std::uint32_t> addresses(40);
    for (std::uint32_t s = 0; s < 40; ++s) addresses[s] = s;
    engine.setJParticles(addresses, j);
    engine.predict(0.0, 40);
    const Block block = everyBody(j, 40, 0.0);
    std::string message;
    bool inputError = false;
    try {
      forces(engine, block, 1e-4);
    } catch (const InputError&) {
      inputError = true;
    } catch (const Error& error) {
      message = error.what();
    }
    EXPECT_FALSE(inputError);
    EXPECT_EQ(message, prefix + "the force kernel failed");
    // The error was reported once: the next call goes through (the engine here has recovered).
    local.stopFailing();
    gpu::HermiteCpuEngine reference;
    reference.reserve(40);
    reference.setJParticles(addresses, j);
    reference.predict(0.0, 40);
    engine.predict(0.0, 40);
    expectAgreement(forces(engine, block, 1e-4), forces(reference, block, 1e-4), termScales(j, 40, 0.0, block, 1e-4),
                    block, "after an error");

    // Bad arguments: refused on every rank alike, before anything is sent.
    const JParticle one{};
    const std::uint32_t outside = 40;
    EXPECT_THROW(engine.setJParticles({&outside, 1}, {&one, 1}), InputError);
    EXPECT_THROW(engine.predict(0.0, 41), InputError);
    EXPECT_THROW(engine.predict(std::numeric_limits<double>::infinity(), 40), InputError);
    EXPECT_THROW(engine.finishForces(), InputError);
    std::vector<double> acc(3);
    EXPECT_THROW(engine.launchForces(block.view(), -1.0, {acc.data(), nullptr, nullptr, nullptr, nullptr, 40}),
                 InputError);
    EXPECT_THROW(engine.launchForces(block.view(), 0.0, {acc.data(), nullptr, nullptr, nullptr, nullptr, 1}),
                 InputError);
  }
}

/// The bytes of an integrator's state between steps: positions, velocities, accelerations, potentials, jerks, each
/// body's time and step, and the block count.
std::vector<unsigned char> stateBytes(const Particles& p, const integrator::HermiteIntegrator& hermite) {
  std::vector<unsigned char> out;
  auto append = [&](const void* data, std::size_t size) {
    const auto* b = static_cast<const unsigned char*>(data);
    out.insert(out.end(), b, b + size);
  };
  for (const std::vector<double>* a : {&p.x, &p.y, &p.z, &p.vx, &p.vy, &p.vz, &p.ax, &p.ay, &p.az, &p.pot}) {
    append(a->data(), a->size() * sizeof(double));
  }
  append(hermite.jerk().data(), hermite.jerk().size() * sizeof(double));
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double t = hermite.bodyTime(i), dt = hermite.bodyStep(i);
    append(&t, sizeof t);
    append(&dt, sizeof dt);
  }
  const std::uint64_t blocks = hermite.counters().blockSteps;
  append(&blocks, sizeof blocks);
  return out;
}

// The Hermite integrator on every rank over all bodies, forces from the distributed engine, against the same
// integrator on the one-process engine: the trajectories part only by the rounding of the sums' order (and grow
// apart like any two N-body trajectories, far below the bound over 1/8 of a time unit), and every rank's state is the
// same bits, step after step, which the replicated integrators need to take the same blocks.
TEST(DistributedHermite, IntegratorOnRanksMatchesOneProcess) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const Particles initial = matcha::testing::plummer(256, seed);
  const double eps = 1.0 / 64.0, tEnd = 0.125;
  integrator::HermiteParams params;
  params.maxStep = 0.0625;

  Particles p = initial;
  gpu::HermiteCpuEngine local;
  DistributedHermiteEngine engine(local, MPI_COMM_WORLD);
  integrator::HermiteIntegrator hermite(engine, params, 1.0, eps);
  hermite.initialize(p);
  const double e0 = integrator::measureDiagnostics(p, 0.0).total;
  bool sameEveryStep = true;
  while (hermite.time() < tEnd) {
    hermite.step(p);
    // After every step: a rank that strayed would take other blocks from then on.
    sameEveryStep = sameOnEveryRank(stateBytes(p, hermite)) && sameEveryStep;
  }
  hermite.measurePotentials(p);
  const double e1 = integrator::measureDiagnostics(p, tEnd).total;

  Particles q = initial;
  gpu::HermiteCpuEngine one;
  integrator::HermiteIntegrator reference(one, params, 1.0, eps);
  reference.initialize(q);
  while (reference.time() < tEnd) reference.step(q);
  reference.measurePotentials(q);
  const double e1Reference = integrator::measureDiagnostics(q, tEnd).total;

  double worstPosition = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    worstPosition =
        std::max({worstPosition, std::abs(p.x[i] - q.x[i]), std::abs(p.y[i] - q.y[i]), std::abs(p.z[i] - q.z[i])});
  }
  if (worldRank() == 0) {
    std::printf(
        "[ hermite  ] Plummer 256 to t = 1/8 on %d ranks: %llu block steps (one process %llu), |dE/E| %.3e (one "
        "process %.3e), energies differ by %.2e relative, positions by %.2e\n",
        worldSize(), (unsigned long long)hermite.counters().blockSteps,
        (unsigned long long)reference.counters().blockSteps, std::abs((e1 - e0) / e0),
        std::abs((e1Reference - e0) / e0), std::abs((e1 - e1Reference) / e1Reference), worstPosition);
  }
  EXPECT_GT(hermite.counters().blockSteps, 20u) << "too few block steps to test anything";
  EXPECT_NEAR(e1, e1Reference, 1e-10 * std::abs(e1Reference));
  EXPECT_LT(worstPosition, 1e-10);
  EXPECT_TRUE(sameEveryStep) << "the ranks' states parted during the run";
  EXPECT_TRUE(sameOnEveryRank(stateBytes(p, hermite))) << "the ranks' final states differ";
  if (worldSize() == 1) {
    EXPECT_TRUE(stateBytes(p, hermite) == stateBytes(q, reference)) << "one rank must be the local engine, bit for bit";
  }
}

}  // namespace
}  // namespace matcha::parallel
