// SPDX-License-Identifier: MIT
// The particle mesh over K ranks (issue 19): mesh::SlabMesh (slabs; the bodies travel to the slabs their windows
// reach) against the replicated mesh (every rank a ParticleMesh of the whole grid, the deposits summed over the ranks
// with MPI_Allreduce), both on FFTW (--backend fftw, the hosts' cores) or both on cuFFT (--backend cufft, each rank on
// its host's GPU local rank mod the GPUs, the ranks sharing them where there are fewer; exit 77 without one), on a box
// of clumps (`matcha ic clumps`, 32 clumps in a 20% background) split along the Hilbert curve into K equal ranges, as
// the domain decomposition splits a box. Run under mpirun (or alone, K = 1); rank 0 prints one row: each mesh's call
// (the median over the repeats of the slowest rank's), the slab mesh's phases on its slowest rank, the slabs a body
// reaches, the largest rank's mesh memory, and how far the two meshes' pulls lie apart.
//
//   mpirun -np 4 bench_slab_mesh -n 4194304 --grid 256 --threads 4 --repeat 5 [--backend cufft]
#include <mpi.h>
#include <tbb/global_control.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "matcha/core/particles.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/gpu/detail/cuda_bridge.hpp"
#include "matcha/ic/periodic_boxes.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "matcha/mesh/slab_mesh.hpp"
#include "matcha/tree/space_filling_curve.hpp"

namespace {

using namespace matcha;

/// This rank's range of the clumps' bodies along the Hilbert curve: every rank makes the same box and keeps its Kth.
Particles myShare(std::size_t n, int rank, int ranks) {
  ic::ClumpsParams params;
  params.numBodies = n;
  params.seed = 7;
  Particles all = ic::makeClumps(params);
  std::vector<std::uint64_t> keys;
  tree::computeHilbertKeys(all.sources(), Cube{{0, 0, 0}, params.boxSize}, keys);
  all.permute(tree::sortByKey(keys));
  const std::size_t first = n * static_cast<std::size_t>(rank) / static_cast<std::size_t>(ranks);
  const std::size_t last = n * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(ranks);
  Particles mine(last - first);
  for (std::size_t k = 0; k < mine.size(); ++k) {
    mine.x[k] = all.x[first + k];
    mine.y[k] = all.y[first + k];
    mine.z[k] = all.z[first + k];
    mine.mass[k] = all.mass[first + k];
  }
  return mine;
}

double maxOverRanks(double value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

/// Times call(true) `repeat` times after one untimed call(false) (first touches, FFTW's first runs): the median over
/// the calls of the slowest rank's seconds.
template <class Call>
double timeCalls(int repeat, Call call) {
  call(false);
  std::vector<double> seconds;
  for (int r = 0; r < repeat; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const Stopwatch clock;
    call(true);
    seconds.push_back(maxOverRanks(clock.seconds()));
  }
  return median(seconds);
}

int run(int argc, char** argv) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  CLI::App app{"The particle mesh in slabs over the ranks against the replicated mesh"};
  std::size_t n = std::size_t{1} << 20;
  int grid = 128, threads = 1, repeat = 3;
  std::string gradient = "fourier", backend = "fftw", transposes = "auto";
  bool header = false;
  app.add_option("-n", n, "bodies in all")->check(CLI::Range(std::size_t{1}, std::size_t{1} << 31));
  app.add_option("--grid", grid, "mesh points per side")->check(CLI::Range(mesh::kMinGrid, mesh::kMaxGrid));
  app.add_option("--threads", threads, "TBB threads per rank")->check(CLI::Range(1, 1024));
  app.add_option("--repeat", repeat, "timed calls per mesh")->check(CLI::Range(1, 100));
  app.add_option("--gradient", gradient, "fourier or fd4")->check(CLI::IsMember({"fourier", "fd4"}));
  app.add_option("--backend", backend, "fftw or cufft")->check(CLI::IsMember({"fftw", "cufft"}));
  app.add_option("--transposes", transposes, "cufft: auto (device to device on one host) or host")
      ->check(CLI::IsMember({"auto", "host"}));
  app.add_flag("--header", header, "print the table's header first");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return rank == 0 ? app.exit(error) : (error.get_exit_code() == 0 ? 0 : 1);
  }
  tbb::global_control control(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));

  mesh::MeshParams params;
  params.boxSize = 1.0;
  params.grid = grid;
  params.gradient = gradient == "fd4" ? mesh::MeshGradient::finiteDifference : mesh::MeshGradient::fourier;
  if (backend == "cufft") {
    // The query alone (device_query.cu), not gpu::queryCudaDevice, whose object file links every engine in.
    const gpu::CudaDeviceInfo device = gpu::detail::queryCudaDeviceImpl();
    if (!device.available) {
      if (rank == 0) std::printf("bench_slab_mesh: no CUDA device, skipped: %s\n", device.description.c_str());
      return 77;
    }
    MPI_Comm host;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
    int hostRank = 0;
    MPI_Comm_rank(host, &hostRank);
    MPI_Comm_free(&host);
    params.backend = mesh::MeshBackend::cufft;
    params.device = hostRank % device.deviceCount;
  }
  const GravityParams gravity;
  Particles slabbed = myShare(n, rank, ranks);
  Particles replicated = slabbed;

  mesh::SlabMesh slabs(params, MPI_COMM_WORLD,
                       transposes == "host" ? mesh::SlabTransposes::throughHost : mesh::SlabTransposes::automatic);
  const std::string meshName = backend + (slabs.directTransposes() ? " direct" : "");
  mesh::SlabMeshStats slowest;
  double slowestSeconds = -1;
  const double slabSeconds = timeCalls(repeat, [&](bool timed) {
    std::fill(slabbed.ax.begin(), slabbed.ax.end(), 0.0);
    std::fill(slabbed.ay.begin(), slabbed.ay.end(), 0.0);
    std::fill(slabbed.az.begin(), slabbed.az.end(), 0.0);
    std::fill(slabbed.pot.begin(), slabbed.pot.end(), 0.0);
    slabs.addLongRange(slabbed.sources(), gravity, slabbed.forces());
    const mesh::SlabMeshStats stats = slabs.lastStats();
    if (timed && stats.totalSeconds > slowestSeconds) slowestSeconds = stats.totalSeconds, slowest = stats;
  });
  // The slowest rank's phases (of its slowest call), and the largest rank's memory.
  double phases[8] = {slowest.exchangeSeconds,  slowest.depositSeconds,     slowest.fftSeconds,
                      slowest.greenSeconds,     slowest.interpolateSeconds, slowest.totalSeconds,
                      slowest.transposeSeconds, slowest.transposeMpiSeconds};
  struct {
    double seconds;
    int rank;
  } mineSlowest{slowestSeconds, rank}, slowestRank{};
  MPI_Allreduce(&mineSlowest, &slowestRank, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
  MPI_Bcast(phases, 8, MPI_DOUBLE, slowestRank.rank, MPI_COMM_WORLD);
  double counts[2] = {double(slowest.bodiesSent), double(slabbed.size())};
  MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  // Host and device (cuFFT) memory together.
  const double slabHeld = maxOverRanks(double(slowest.heldBytes + slowest.deviceBytes));

  mesh::ParticleMesh whole(params);
  whole.setDensityReduction([](std::span<double> values) {
    MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  });
  const double replicatedSeconds = timeCalls(repeat, [&](bool) {
    std::fill(replicated.ax.begin(), replicated.ax.end(), 0.0);
    std::fill(replicated.ay.begin(), replicated.ay.end(), 0.0);
    std::fill(replicated.az.begin(), replicated.az.end(), 0.0);
    std::fill(replicated.pot.begin(), replicated.pot.end(), 0.0);
    whole.addLongRange(replicated.sources(), gravity, replicated.forces());
  });
  const double replicatedHeld = maxOverRanks(double(params.backend == mesh::MeshBackend::cufft
                                                        ? mesh::meshDeviceMemoryBytes(params, replicated.size())
                                                        : mesh::meshMemoryBytes(params, replicated.size())));

  double sums[2] = {0, 0};  // sum |a|^2, max |a_slab - a_replicated|
  for (std::size_t i = 0; i < slabbed.size(); ++i) {
    sums[0] +=
        replicated.ax[i] * replicated.ax[i] + replicated.ay[i] * replicated.ay[i] + replicated.az[i] * replicated.az[i];
    sums[1] = std::max(sums[1], std::hypot(slabbed.ax[i] - replicated.ax[i], slabbed.ay[i] - replicated.ay[i],
                                           slabbed.az[i] - replicated.az[i]));
  }
  MPI_Allreduce(MPI_IN_PLACE, &sums[0], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &sums[1], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double rms = std::sqrt(sums[0] / double(n));

  if (rank == 0) {
    if (header) {
      std::printf(
          "| ranks x threads | N | mesh | slabs (ms) | replicated (ms) | exchange | deposit | FFT | Green | "
          "transpose (MPI) | interpolate "
          "| slabs a body a routing | slab MB / rank | replicated MB / rank | max diff / rms |\n"
          "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
    }
    // FFTW routes the bodies at each pass, cuFFT once a call.
    const int routings = params.interlace && params.backend == mesh::MeshBackend::fftw ? 2 : 1;
    std::printf(
        "| %d x %d | %zu | %d^3 %s %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f (%.1f) | %.1f | %.3f | %.0f | "
        "%.0f | %.1e |\n",
        ranks, threads, n, grid, gradient.c_str(), meshName.c_str(), 1e3 * slabSeconds, 1e3 * replicatedSeconds,
        1e3 * phases[0], 1e3 * phases[1], 1e3 * phases[2], 1e3 * phases[3], 1e3 * phases[6], 1e3 * phases[7],
        1e3 * phases[4], counts[0] / (routings * counts[1]), slabHeld / 1048576.0, replicatedHeld / 1048576.0,
        sums[1] / rms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    status = run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_slab_mesh: %s\n", error.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
