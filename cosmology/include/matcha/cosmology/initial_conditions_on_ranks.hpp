// SPDX-License-Identifier: MIT
// Cosmological initial conditions made in shares over the MPI ranks of a distributed run (issue 19): each rank makes
// the bodies of its own x planes of the grid, on a mesh::SlabFourierGrid, so that no rank holds the whole field or all
// the bodies: a 1024^3 start (1.07e9 bodies, ~120 GB made whole) spread over the hosts of its ranks, as N-GenIC and
// 2LPTic make theirs. The arithmetic is makeCosmologicalIcs' (initial_conditions.hpp,
// cosmology/src/lagrangian_fields.hpp): the same modes (each one's random numbers hashed from the seed and its
// wavenumbers, whichever rank draws it), the same displacements and velocities, to the rounding of FFTW-MPI's
// transforms against FFTW's. Built only with MATCHA_MPI.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>

#include "matcha/cosmology/initial_conditions.hpp"

namespace matcha::cosmology {

/// Collective over `comm`: this rank's share of makeCosmologicalIcs(params, power), the bodies of the grid points
/// whose x plane px is this rank's (FFTW-MPI's slab: blocks of ceil(n/K) planes in rank order, so the last ranks may
/// have none when K does not divide n), in the one-rank order: grid point (px, py, pz) with id (px n + py) n + pz.
/// `power` is called on every rank, from TBB's workers, and must be the same function everywhere. Validates params
/// (InputError, alike on every rank).
CosmologicalIcs makeCosmologicalIcShare(const CosmologicalIcParams& params, const std::function<double(double)>& power,
                                        MPI_Comm comm);

/// Bytes makeCosmologicalIcShare holds at its peak on one of `numRanks` ranks: the share's bodies and modes, and one
/// slab of the Fourier grid (1LPT) or four (2LPT), each ceil(n/K) planes. For a memory check before any work.
std::size_t cosmologicalIcShareBytes(const CosmologicalIcParams& params, int numRanks);

}  // namespace matcha::cosmology
