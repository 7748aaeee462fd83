// SPDX-License-Identifier: MIT
// The particle mesh in slabs over the ranks (mesh::SlabMesh) against the one-process ParticleMesh on all the bodies:
// every window, gradient and interlacing choice, bodies split by x into domains that do not line up with the slabs
// (one across the periodic wrap), dealt out in turn (every rank's bodies reach every slab) and with a rank left
// without bodies; and a non-finite position on one rank, which stops every rank with the same message. Each on both
// backends: FFTW-MPI on the cores, and cuFFT on the GPU (the ranks sharing device 0; skipped without one, and run by
// ctest's parallel_cufft.npK, labelled gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/gpu/engine_factory.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "matcha/mesh/slab_mesh.hpp"
#include "mpi_testing.hpp"

namespace matcha::parallel {
namespace {

using mesh::MassAssignment;
using mesh::MeshGradient;
using testing::worldRank;
using testing::worldSize;

constexpr double kBox = 2.0;

/// Four Plummer clumps in a uniform background, wrapped into the box: some clumps straddle the faces, so that the
/// domains' patches meet the periodic wrap.
Particles clumpyBodies(std::uint64_t seed) {
  Particles p = matcha::testing::clumpyBox(seed, kBox, 512, 2048);
  wrapIntoBox(p, kBox);
  return p;
}

/// How the bodies go to the ranks: by x into equal domains shifted by a third of a domain (so that the last one
/// wraps across x = 0), dealt out in turn (every rank's bodies span the box), or with rank 0 left empty.
enum class Split { domains, dealt, firstEmpty };

std::string splitName(Split split) {
  return split == Split::domains ? "domains" : (split == Split::dealt ? "dealt" : "first-empty");
}

std::vector<std::uint32_t> bodiesOf(const Particles& all, Split split, int rank, int ranks) {
  std::vector<std::uint32_t> mine;
  for (std::size_t i = 0; i < all.size(); ++i) {
    int owner = static_cast<int>(i % ranks);
    if (split == Split::domains) {
      const double shifted = all.x[i] / kBox + 1.0 / (3.0 * ranks);
      owner = static_cast<int>((shifted - std::floor(shifted)) * ranks) % ranks;
    } else if (split == Split::firstEmpty && ranks > 1) {
      owner = 1 + static_cast<int>(i % (ranks - 1));
    }
    if (owner == rank) mine.push_back(static_cast<std::uint32_t>(i));
  }
  return mine;
}

struct MeshCase {
  MassAssignment assignment;
  MeshGradient gradient;
  bool interlace;
  mesh::MeshBackend backend = mesh::MeshBackend::fftw;
  mesh::SlabTransposes transposes = mesh::SlabTransposes::automatic;
};

std::string caseName(const ::testing::TestParamInfo<MeshCase>& info) {
  return mesh::toString(info.param.assignment) + "_" + mesh::toString(info.param.gradient) +
         (info.param.interlace ? "_interlaced" : "_single") +
         (info.param.transposes == mesh::SlabTransposes::throughHost ? "_through_host" : "");
}

class SlabMeshTest : public ::testing::TestWithParam<MeshCase> {
 protected:
  void SetUp() override {
    if (GetParam().backend == mesh::MeshBackend::cufft) {
      const gpu::CudaDeviceInfo device = gpu::queryCudaDevice();  // the same answer on every rank of one host
      if (!device.available) GTEST_SKIP() << "no CUDA device, GPU test skipped: " << device.description;
    }
  }
  bool onGpu() const { return GetParam().backend == mesh::MeshBackend::cufft; }

  mesh::MeshParams params() const {
    mesh::MeshParams p;
    p.boxSize = kBox;
    p.grid = 32;
    p.assignment = GetParam().assignment;
    p.gradient = GetParam().gradient;
    p.interlace = GetParam().interlace;
    p.backend = GetParam().backend;
    return p;
  }
};

// Each rank's bodies' long-range pull and potential equal ParticleMesh's (FFTW's, on the CPU) on all the bodies, to
// the rounding of the deposit's order, the window sums split over slabs and the distributed transforms: 1e-12 of the
// rms (measured ~1e-15); on one rank, bit for bit. On cuFFT, 1e-9, the bound the whole-grid cuFFT mesh keeps against
// FFTW's (cuFFT's sums and the deposit's atomics round otherwise), with the transposes from device to device or
// through the host; a call without potentials gives the same pull.
TEST_P(SlabMeshTest, MatchesTheWholeMeshOnEveryRank) {
  const std::uint64_t seed = testing::sharedSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const Particles all = clumpyBodies(seed);
  GravityParams gravity;
  gravity.G = 1.3;
  Particles whole = all;
  mesh::MeshParams reference = params();
  reference.backend = mesh::MeshBackend::fftw;
  mesh::ParticleMesh(reference).addLongRange(whole.sources(), gravity, whole.forces());
  const double tolerance = onGpu() ? 1e-9 : 1e-12;
  double rmsPull = 0.0, rmsPot = 0.0;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    rmsPull += whole.ax[i] * whole.ax[i] + whole.ay[i] * whole.ay[i] + whole.az[i] * whole.az[i];
    rmsPot += whole.pot[i] * whole.pot[i];
  }
  rmsPull = std::sqrt(rmsPull / double(whole.size()));
  rmsPot = std::sqrt(rmsPot / double(whole.size()));

  mesh::SlabMesh slabs(params(), MPI_COMM_WORLD, GetParam().transposes);
  // The ranks of one host (all of a test's) copy their transposes' blocks from device to device, unless told not to.
  EXPECT_EQ(slabs.directTransposes(),
            onGpu() && worldSize() > 1 && GetParam().transposes == mesh::SlabTransposes::automatic);
  for (const Split split : {Split::domains, Split::dealt, Split::firstEmpty}) {
    SCOPED_TRACE(splitName(split));
    const std::vector<std::uint32_t> mine = bodiesOf(all, split, worldRank(), worldSize());
    Particles local(mine.size());
    for (std::size_t k = 0; k < mine.size(); ++k) {
      local.x[k] = all.x[mine[k]];
      local.y[k] = all.y[mine[k]];
      local.z[k] = all.z[mine[k]];
      local.mass[k] = all.mass[mine[k]];
    }
    slabs.addLongRange(local.sources(), gravity, local.forces());
    double worstPull = 0.0, worstPot = 0.0;
    for (std::size_t k = 0; k < mine.size(); ++k) {
      const std::size_t i = mine[k];
      worstPull = std::max(worstPull,
                           std::hypot(local.ax[k] - whole.ax[i], local.ay[k] - whole.ay[i], local.az[k] - whole.az[i]));
      worstPot = std::max(worstPot, std::abs(local.pot[k] - whole.pot[i]));
    }
    MPI_Allreduce(MPI_IN_PLACE, &worstPull, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &worstPot, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const mesh::SlabMeshStats stats = slabs.lastStats();
    // FFTW routes the bodies at each pass; cuFFT once a call, to the slabs either pass's window reaches.
    const int routings = GetParam().interlace && !onGpu() ? 2 : 1;
    EXPECT_GE(stats.bodiesSent, routings * mine.size()) << "every body goes to at least one slab a routing";
    EXPECT_LE(stats.bodiesSent, 2 * routings * mine.size()) << "a slab of 8 or more planes: at most two per body";
    long long counts[3] = {stats.slabPlanes, static_cast<long long>(stats.bodiesSent),
                           static_cast<long long>(stats.bodiesReceived)};
    MPI_Allreduce(MPI_IN_PLACE, counts, 3, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (worldRank() == 0) {
      std::printf("[ slabs ] %d ranks, %s: pull max %.2e, potential max %.2e of the rms; %.3f slabs a body a routing\n",
                  worldSize(), splitName(split).c_str(), worstPull / rmsPull, worstPot / rmsPot,
                  double(counts[1]) / double(routings * all.size()));
    }
    EXPECT_LE(worstPull, tolerance * rmsPull);
    EXPECT_LE(worstPot, tolerance * rmsPot);
    EXPECT_EQ(counts[0], 32) << "the slabs cover the mesh once";
    EXPECT_EQ(counts[1], counts[2]) << "every body sent is received";
    if (worldSize() == 1 && !onGpu()) {
      EXPECT_EQ(worstPull, 0.0) << "one rank: ParticleMesh's arithmetic in its order";
      EXPECT_EQ(worstPot, 0.0);
    }
    if (onGpu()) {
      EXPECT_GT(stats.deviceBytes, 0u);
      EXPECT_GT(stats.transposeSeconds, 0.0);
      // Without potentials (the Fourier gradient then skips the potential's transform): the same pull.
      Particles pullOnly = local;
      std::fill(pullOnly.ax.begin(), pullOnly.ax.end(), 0.0);
      std::fill(pullOnly.ay.begin(), pullOnly.ay.end(), 0.0);
      std::fill(pullOnly.az.begin(), pullOnly.az.end(), 0.0);
      ForceView out = pullOnly.forces();
      out.pot = nullptr;
      slabs.addLongRange(pullOnly.sources(), gravity, out);
      double worstAgain = 0.0;
      for (std::size_t k = 0; k < mine.size(); ++k) {
        const std::size_t i = mine[k];
        worstAgain = std::max(worstAgain, std::hypot(pullOnly.ax[k] - whole.ax[i], pullOnly.ay[k] - whole.ay[i],
                                                     pullOnly.az[k] - whole.az[i]));
      }
      MPI_Allreduce(MPI_IN_PLACE, &worstAgain, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      EXPECT_LE(worstAgain, tolerance * rmsPull) << "without potentials";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, SlabMeshTest,
                         ::testing::Values(MeshCase{MassAssignment::tsc, MeshGradient::fourier, true},
                                           MeshCase{MassAssignment::cic, MeshGradient::fourier, false},
                                           MeshCase{MassAssignment::tsc, MeshGradient::finiteDifference, false},
                                           MeshCase{MassAssignment::cic, MeshGradient::finiteDifference, true}),
                         caseName);
INSTANTIATE_TEST_SUITE_P(
    Cufft, SlabMeshTest,
    ::testing::Values(MeshCase{MassAssignment::tsc, MeshGradient::fourier, true, mesh::MeshBackend::cufft},
                      MeshCase{MassAssignment::cic, MeshGradient::fourier, false, mesh::MeshBackend::cufft},
                      MeshCase{MassAssignment::tsc, MeshGradient::finiteDifference, false, mesh::MeshBackend::cufft},
                      MeshCase{MassAssignment::cic, MeshGradient::finiteDifference, true, mesh::MeshBackend::cufft},
                      MeshCase{MassAssignment::tsc, MeshGradient::fourier, true, mesh::MeshBackend::cufft,
                               mesh::SlabTransposes::throughHost},
                      MeshCase{MassAssignment::cic, MeshGradient::finiteDifference, false, mesh::MeshBackend::cufft,
                               mesh::SlabTransposes::throughHost}),
    caseName);

// A non-finite position on the last rank stops every rank with one message naming the rank and the body, before any
// exchange: no rank waits for another.
TEST(SlabMesh, NonFinitePositionStopsEveryRank) {
  mesh::MeshParams params;
  params.boxSize = kBox;
  params.grid = 16;
  mesh::SlabMesh slabs(params, MPI_COMM_WORLD);
  Particles local(5);
  for (std::size_t i = 0; i < local.size(); ++i) {
    local.x[i] = local.y[i] = local.z[i] = 0.1 * double(i + 1);
    local.mass[i] = 1.0;
  }
  if (worldRank() == worldSize() - 1) local.y[3] = std::nan("");
  const std::string expected =
      "particle mesh: body 3 of rank " + std::to_string(worldSize() - 1) + " has a non-finite position";
  try {
    slabs.addLongRange(local.sources(), GravityParams{}, local.forces());
    ADD_FAILURE() << "no error";
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()), expected);
  }
  // The mesh stays usable: the next call, with finite positions, runs on every rank.
  if (worldRank() == worldSize() - 1) local.y[3] = 0.4;
  EXPECT_NO_THROW(slabs.addLongRange(local.sources(), GravityParams{}, local.forces()));
}

// Bad parameters fail on every rank alike, before the communicator is used.
TEST(SlabMesh, BadParametersFailOnEveryRank) {
  mesh::MeshParams params;
  params.boxSize = -1.0;
  EXPECT_THROW(mesh::SlabMesh(params, MPI_COMM_WORLD), InputError);
}

}  // namespace
}  // namespace matcha::parallel
