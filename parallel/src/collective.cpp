// SPDX-License-Identifier: MIT
#include "matcha/parallel/collective.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "matcha/core/errors.hpp"

namespace matcha::parallel {

int rankOf(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int numRanksOf(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

void checkOnEveryRank(const std::function<void()>& check, MPI_Comm comm) {
  const int rank = rankOf(comm);
  const int numRanks = numRanksOf(comm);
  std::string message;
  int kind = 0;  // 0: passed, 1: InputError, 2: another matcha::Error
  try {
    check();
  } catch (const InputError& error) {
    message = error.what();
    kind = 1;
  } catch (const Error& error) {
    message = error.what();
    kind = 2;
  }
  // The lowest failing rank speaks for all: one message, the same on every rank.
  int failing = kind != 0 ? rank : numRanks;
  MPI_Allreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, comm);
  if (failing == numRanks) return;
  int header[2] = {kind, static_cast<int>(message.size())};
  MPI_Bcast(header, 2, MPI_INT, failing, comm);
  std::vector<char> text(message.begin(), message.end());
  text.resize(static_cast<std::size_t>(header[1]));
  MPI_Bcast(text.data(), header[1], MPI_CHAR, failing, comm);
  const std::string shared =
      (numRanks > 1 ? "rank " + std::to_string(failing) + ": " : std::string()) + std::string(text.begin(), text.end());
  if (header[0] == 1) throw InputError(shared);
  throw Error(shared);
}

double maxOverRanks(double value, MPI_Comm comm) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, comm);
  return value;
}

void sumOverRanks(std::span<double> values, MPI_Comm comm) {
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  for (std::size_t first = 0; first < values.size(); first += kPiece) {
    const std::size_t count = std::min(kPiece, values.size() - first);
    MPI_Allreduce(MPI_IN_PLACE, values.data() + first, static_cast<int>(count), MPI_DOUBLE, MPI_SUM, comm);
  }
}

void sumInRankOrder(std::span<double> running, const std::function<void(std::span<double>)>& add, MPI_Comm comm) {
  const int rank = rankOf(comm);
  const int numRanks = numRanksOf(comm);
  const auto count = static_cast<int>(running.size());
  constexpr int kTag = 7301;
  if (rank > 0) MPI_Recv(running.data(), count, MPI_DOUBLE, rank - 1, kTag, comm, MPI_STATUS_IGNORE);
  add(running);
  if (rank + 1 < numRanks) MPI_Send(running.data(), count, MPI_DOUBLE, rank + 1, kTag, comm);
  MPI_Bcast(running.data(), count, MPI_DOUBLE, numRanks - 1, comm);
}

}  // namespace matcha::parallel
