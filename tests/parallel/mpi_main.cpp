// SPDX-License-Identifier: MIT
// GoogleTest main for the MPI tests: MPI initialised around the run, rank 0 alone prints, and each rank's TBB threads
// capped at its share of the cores (the tests run oversubscribed: 4 ranks on 2 cores).
#include <gtest/gtest.h>
#include <mpi.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0, numRanks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &numRanks);
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  // Each rank its share of the cores, as `matcha` gives it under mpirun; MATCHA_TEST_RANK_THREADS sets another number
  // (ctest's parallel_threads.np2: two threads a rank, so that the local walk runs beside the exchange).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const char* given = std::getenv("MATCHA_TEST_RANK_THREADS");
  const int rankThreads = given != nullptr ? std::max(1, std::atoi(given)) : std::max(1, cores / numRanks);
  const tbb::global_control threads(tbb::global_control::max_allowed_parallelism,
                                    static_cast<std::size_t>(rankThreads));
  int failed = RUN_ALL_TESTS();
  // Every rank's verdict: a test that failed on rank 3 alone must fail the run that rank 0 reports.
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && failed != 0) std::fprintf(stderr, "some rank failed a test\n");
  MPI_Finalize();
  return failed;
}
