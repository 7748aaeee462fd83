// SPDX-License-Identifier: MIT
#include "matcha/parallel/distributed_direct_solver.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/parallel/collective.hpp"

namespace matcha::parallel {

DistributedDirectSolver::DistributedDirectSolver(HermiteEngine& engine, const GravityParams& gravity, MPI_Comm comm)
    : engine_(engine), gravity_(gravity), comm_(comm) {
  gravity_.validate();
  if (gravity_.periodic.enabled()) {
    throw InputError("direct summation over the ranks has open boundaries only (a periodic box takes the tree)");
  }
}

ForceReport DistributedDirectSolver::computeForces(Particles& particles) {
  const Stopwatch clock;
  ForceReport report;
  const int numRanks = numRanksOf(comm_);
  const std::size_t mine = particles.size();

  // Every rank's positions and masses (and ids, for the self-skip), in rank order, on every rank.
  Stopwatch exchange;
  std::vector<int> counts(static_cast<std::size_t>(numRanks)), offsets(static_cast<std::size_t>(numRanks), 0);
  const int count = static_cast<int>(mine);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_);
  std::partial_sum(counts.begin(), counts.end() - 1, offsets.begin() + 1);
  const std::size_t total = static_cast<std::size_t>(offsets.back()) + static_cast<std::size_t>(counts.back());
  // One record a body: x, y, z, G m, id (as a double's bits: ids are 64-bit and exact).
  std::vector<double> local(5 * mine), all(5 * total);
  for (std::size_t i = 0; i < mine; ++i) {
    const std::uint64_t id = particles.id[i];
    double idBits = 0.0;
    static_assert(sizeof idBits == sizeof id);
    std::memcpy(&idBits, &id, sizeof id);
    const double record[5] = {particles.x[i], particles.y[i], particles.z[i], gravity_.G * particles.mass[i], idBits};
    std::copy(record, record + 5, local.begin() + static_cast<std::ptrdiff_t>(5 * i));
  }
  std::vector<int> recordCounts(counts.size()), recordOffsets(offsets.size());
  for (std::size_t r = 0; r < counts.size(); ++r) {
    recordCounts[r] = 5 * counts[r];
    recordOffsets[r] = 5 * offsets[r];
  }
  MPI_Allgatherv(local.data(), 5 * count, MPI_DOUBLE, all.data(), recordCounts.data(), recordOffsets.data(), MPI_DOUBLE,
                 comm_);
  sources_.assign(total, JParticle{});
  for (std::size_t j = 0; j < total; ++j) {
    const double* record = &all[5 * j];
    JParticle& source = sources_[j];
    source.mass = record[3];
    std::copy(record, record + 3, source.pos);
    std::uint64_t id = 0;
    std::memcpy(&id, &record[4], sizeof id);
    source.id = static_cast<std::int64_t>(id);
  }
  report.timings[Phase::exchange] = exchange.seconds();

  // The sources at time 0 with no velocity: "predicted" to time 0 they are where they are.
  Stopwatch kernels;
  if (engine_.capacity() < total) engine_.reserve(total);
  addresses_.resize(total);
  std::iota(addresses_.begin(), addresses_.end(), 0u);
  engine_.setJParticles(addresses_, sources_);
  engine_.predict(0.0, total);
  targetIds_.resize(mine);
  targetPos_.resize(3 * mine);
  targetVel_.assign(3 * mine, 0.0);
  acc_.resize(3 * mine);
  pot_.resize(mine);
  for (std::size_t i = 0; i < mine; ++i) {
    targetIds_[i] = static_cast<std::int64_t>(particles.id[i]);
    targetPos_[3 * i] = particles.x[i];
    targetPos_[3 * i + 1] = particles.y[i];
    targetPos_[3 * i + 2] = particles.z[i];
  }
  const ForceView out = forcesToWrite(particles);
  const IBlockView block{targetIds_.data(), targetPos_.data(), targetVel_.data(), mine};
  const HermiteForceView results{acc_.data(), nullptr, out.pot != nullptr ? pot_.data() : nullptr,
                                 nullptr,     nullptr, mine};
  engine_.launchForces(block, gravity_.eps * gravity_.eps, results);
  engine_.finishForces();
  for (std::size_t i = 0; i < mine; ++i) {
    particles.ax[i] = acc_[3 * i];
    particles.ay[i] = acc_[3 * i + 1];
    particles.az[i] = acc_[3 * i + 2];
    if (out.pot != nullptr) particles.pot[i] = pot_[i];
  }
  clearUnwantedPotentials(particles);
  report.timings[Phase::kernels] = kernels.seconds();
  report.counts.bodyBody = static_cast<std::uint64_t>(mine) * static_cast<std::uint64_t>(total);
  report.timings.totalSeconds = clock.seconds();
  return report;
}

void DistributedDirectSolver::setSoftening(double eps) { gravity_ = gravity_.withSoftening(eps); }

std::string DistributedDirectSolver::describe() const {
  return "direct summation over " + std::to_string(numRanksOf(comm_)) + " ranks (every rank's bodies sent to all, " +
         "each rank's pulled by all on " + engine_.name() + ")";
}

}  // namespace matcha::parallel
