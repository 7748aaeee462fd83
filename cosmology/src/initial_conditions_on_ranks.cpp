// SPDX-License-Identifier: MIT
#include "matcha/cosmology/initial_conditions_on_ranks.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "lagrangian_fields.hpp"
#include "matcha/mesh/slab_fourier_grid.hpp"

namespace matcha::cosmology {

CosmologicalIcs makeCosmologicalIcShare(const CosmologicalIcParams& params, const std::function<double(double)>& power,
                                        MPI_Comm comm) {
  params.validate();
  const int n = params.grid;
  const auto makeGrid = [n, comm] { return std::make_unique<mesh::SlabFourierGrid>(n, comm); };
  // The modes of this rank's rows, in its grids' transposed layout (every grid of one n over one communicator splits
  // alike): each drawn by the rank that holds it, none sent.
  const mesh::SlabShare share = mesh::slabShareOf(n, comm);
  std::vector<detail::Complex> modes(share.localModes());
  detail::fillDensityModes(
      modes.data(), share.firstModeRow, share.modeRows, params,
      [&share](int mx, int my, int mz) { return share.spectrumIndex(mx, my, mz); }, power);
  return detail::lagrangianBodies<mesh::SlabFourierGrid>(params, modes.data(), makeGrid);
}

std::size_t cosmologicalIcShareBytes(const CosmologicalIcParams& params, int numRanks) {
  const auto n = static_cast<std::size_t>(params.grid);
  const auto ranks = static_cast<std::size_t>(std::max(numRanks, 1));
  const std::size_t planes = (n + ranks - 1) / ranks;
  const std::size_t bodies = planes * n * n * (13 * sizeof(double) + sizeof(std::uint64_t));
  const std::size_t modes = planes * n * (n / 2 + 1) * sizeof(detail::Complex);
  const std::size_t grids = (params.lptOrder == 2 ? 4 : 1) * mesh::slabFourierGridBytes(params.grid, numRanks);
  return bodies + modes + grids;
}

}  // namespace matcha::cosmology
