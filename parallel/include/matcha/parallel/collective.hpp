// SPDX-License-Identifier: MIT
// Errors that every rank agrees on: a check that fails on one rank must stop the run on all of them with one message,
// not leave the others waiting forever in the next collective call.
#pragma once

#include <mpi.h>

#include <functional>
#include <span>
#include <string>

namespace matcha::parallel {

/// Runs `check` on this rank, then, collectively over `comm`, throws on every rank when it threw matcha::Error on any:
/// the lowest failing rank's message, as an InputError when that error was one (else as matcha::Error), prefixed with
/// "rank r: " where there is more than one rank. An exception that is not a matcha::Error propagates on its own rank
/// only (a bug: the run then ends by mpirun's abort). Collective: every rank of `comm` must call it.
void checkOnEveryRank(const std::function<void()>& check, MPI_Comm comm);

/// Sums `values` over the ranks of `comm`, in place on every rank (MPI_Allreduce, in pieces of at most 2^30 values
/// for MPI's int counts): a particle mesh replicated on every rank sums its deposits so (mesh/:
/// ParticleMesh::setDensityReduction). Collective.
void sumOverRanks(std::span<double> values, MPI_Comm comm);

/// The largest of every rank's `value`, on every rank (MPI_Allreduce): the slowest rank's time of a stage. Collective.
double maxOverRanks(double value, MPI_Comm comm);

/// Sums that the ranks continue in turn, in rank order, so that they round as one process's loop over every rank's
/// terms in that order would, bit for bit (MPI_Allreduce adds in an order of MPI's choosing): rank 0 calls add on
/// `running` as given, each later rank on the running sums the rank before passed on, and every rank returns with the
/// last rank's. K - 1 messages in a chain, then a broadcast: for a few sums, once (a generated start's centre of
/// mass), not for every step. Collective.
void sumInRankOrder(std::span<double> running, const std::function<void(std::span<double>)>& add, MPI_Comm comm);

/// This rank's index and the number of ranks in `comm`.
int rankOf(MPI_Comm comm);
int numRanksOf(MPI_Comm comm);

}  // namespace matcha::parallel
