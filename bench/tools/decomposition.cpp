// SPDX-License-Identifier: MIT
// The steady decomposition's stages on K ranks (issue 19), without the tree: each rank makes its share of a Plummer
// sphere (bodies [r N / K, (r + 1) N / K) of makePlummerRange, scattered as a run starts), the first calls move them
// into their key ranges, then each repeat drifts every body by dt v (a leapfrog step's drift; weights of one) and
// decomposes again, as a run's steady calls do. Rank 0 prints the median over the repeats of the slowest rank's
// stages (parallel::DecompositionStats) and the bodies a rank sent. bench/RESULTS.md, 2026-12-06 (39th session).
//
//   mpirun -np 2 decomposition [N (2^22)] [repeats (7)] [dt (1/128)] [threads a rank (all)]
#include <mpi.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "matcha/ic/plummer.hpp"
#include "matcha/parallel/collective.hpp"
#include "matcha/parallel/domain_decomposition.hpp"

using namespace matcha;

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::size_t{1} << 22;
  const int repeats = std::max(1, argc > 2 ? std::atoi(argv[2]) : 7);
  const double dt = argc > 3 ? std::atof(argv[3]) : 1.0 / 128.0;
  const int threads = argc > 4 ? std::atoi(argv[4]) : int(std::thread::hardware_concurrency());
  const tbb::global_control cores(tbb::global_control::max_allowed_parallelism, std::max(1, threads));
  const int rank = parallel::rankOf(MPI_COMM_WORLD), ranks = parallel::numRanksOf(MPI_COMM_WORLD);

  ic::PlummerParams plummer;
  plummer.numBodies = n;
  plummer.seed = 7;
  const std::size_t first = n * std::size_t(rank) / std::size_t(ranks);
  const std::size_t last = n * std::size_t(rank + 1) / std::size_t(ranks);
  Particles bodies = ic::makePlummerRange(plummer, first, last - first);
  parallel::DecompositionBuffers buffers;
  std::vector<double> weights;
  parallel::DecompositionStats stats;
  for (int call = 0; call < 2; ++call) {  // the first calls: every body into its key range, every buffer grown
    parallel::decompose(bodies, &weights, MPI_COMM_WORLD, &stats, nullptr, &buffers);
  }
  std::vector<double> total, checks, keys, split, moves, exchange, sent;
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      bodies.x[i] += dt * bodies.vx[i];
      bodies.y[i] += dt * bodies.vy[i];
      bodies.z[i] += dt * bodies.vz[i];
    }
    MPI_Barrier(MPI_COMM_WORLD);
    parallel::decompose(bodies, &weights, MPI_COMM_WORLD, &stats, nullptr, &buffers);
    const double sum = stats.checkSeconds + stats.keySeconds + stats.splitSeconds + stats.moveSeconds;
    total.push_back(parallel::maxOverRanks(sum, MPI_COMM_WORLD));
    checks.push_back(parallel::maxOverRanks(stats.checkSeconds, MPI_COMM_WORLD));
    keys.push_back(parallel::maxOverRanks(stats.keySeconds, MPI_COMM_WORLD));
    split.push_back(parallel::maxOverRanks(stats.splitSeconds, MPI_COMM_WORLD));
    moves.push_back(parallel::maxOverRanks(stats.moveSeconds, MPI_COMM_WORLD));
    exchange.push_back(parallel::maxOverRanks(stats.moveExchangeSeconds, MPI_COMM_WORLD));
    sent.push_back(parallel::maxOverRanks(double(stats.bodiesSent), MPI_COMM_WORLD));
  }
  if (rank == 0) {
    std::printf(
        "N %zu on %d ranks of %d threads, drift %g: median of %d steady calls, slowest rank, ms: decomposition %.2f "
        "(checks %.2f, cube and keys %.2f, splitter search %.2f, moves %.2f of which MPI %.2f); %.0f bodies sent\n",
        n, ranks, threads, dt, repeats, 1e3 * median(total), 1e3 * median(checks), 1e3 * median(keys),
        1e3 * median(split), 1e3 * median(moves), 1e3 * median(exchange), median(sent));
  }
  MPI_Finalize();
  return 0;
}
