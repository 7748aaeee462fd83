// SPDX-License-Identifier: MIT
// ParticleMesh::setDensityReduction on either backend: a mesh that deposits part of a system and sums its grid with the
// other parts' solves for the whole system. Header-only (gtest), for tests/mesh (FFTW) and tests/gpu (cuFFT).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "matcha/core/params.hpp"
#include "matcha/core/particles.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "matcha/testing/generators.hpp"

namespace matcha::testing {

/// `bodies` (ids 0 .. N-1, inside the box of `params`) split into two parts by id parity, as two ranks would hold
/// them. The odd part's mesh records its deposited grid at each pass; the even part's adds it (the reduction of a
/// two-rank run) and must then give the even bodies the whole system's long range, as one mesh of all bodies does, to
/// the rounding of the grid's sums (`bound`, of the rms acceleration and potential); a part without bodies still
/// reduces once a pass and solves. Potentials too: their self term takes the summed grid's mass.
inline void expectSummedGridsSolveTheWholeSystem(const Particles& bodies, const mesh::MeshParams& params,
                                                 double bound) {
  Particles even, odd;
  for (const bool wantEven : {true, false}) {
    Particles& part = wantEven ? even : odd;
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      if ((bodies.id[i] % 2 == 0) != wantEven) continue;
      part.resize(part.size() + 1);
      const std::size_t k = part.size() - 1;
      part.x[k] = bodies.x[i];
      part.y[k] = bodies.y[i];
      part.z[k] = bodies.z[i];
      part.mass[k] = bodies.mass[i];
      part.id[k] = bodies.id[i];
    }
  }
  const auto zeroForces = [](Particles& p) {
    for (std::vector<double>* array : {&p.ax, &p.ay, &p.az, &p.pot}) array->assign(p.size(), 0.0);
  };
  zeroForces(even);
  zeroForces(odd);
  Particles all = bodies;
  zeroForces(all);
  const GravityParams gravity;
  mesh::ParticleMesh whole(params);
  whole.addLongRange(all.sources(), gravity, all.forces());

  std::vector<std::vector<double>> oddGrids;
  mesh::ParticleMesh oddMesh(params);
  oddMesh.setDensityReduction([&](std::span<double> grid) { oddGrids.emplace_back(grid.begin(), grid.end()); });
  oddMesh.addLongRange(odd.sources(), gravity, odd.forces());
  const std::size_t passes = params.interlace ? 2 : 1;
  ASSERT_EQ(oddGrids.size(), passes) << "one reduction a pass";

  std::size_t pass = 0;
  mesh::ParticleMesh evenMesh(params);
  evenMesh.setDensityReduction([&](std::span<double> grid) {
    ASSERT_LT(pass, oddGrids.size());
    ASSERT_EQ(grid.size(), oddGrids[pass].size());
    for (std::size_t k = 0; k < grid.size(); ++k) grid[k] += oddGrids[pass][k];
    ++pass;
  });
  evenMesh.addLongRange(even.sources(), gravity, even.forces());
  EXPECT_EQ(pass, passes);

  double accelerationSquares = 0.0, potentialSquares = 0.0, worstAcceleration = 0.0, worstPotential = 0.0;
  for (std::size_t k = 0; k < even.size(); ++k) {
    const std::size_t i = even.id[k];  // `all` keeps the input's order: ids 0 .. N-1 at their indices
    ASSERT_EQ(all.id[i], even.id[k]);
    accelerationSquares += all.ax[i] * all.ax[i] + all.ay[i] * all.ay[i] + all.az[i] * all.az[i];
    potentialSquares += all.pot[i] * all.pot[i];
    worstAcceleration =
        std::max(worstAcceleration, std::hypot(even.ax[k] - all.ax[i], even.ay[k] - all.ay[i], even.az[k] - all.az[i]));
    worstPotential = std::max(worstPotential, std::abs(even.pot[k] - all.pot[i]));
  }
  const double count = static_cast<double>(even.size());
  const double acceleration = worstAcceleration / std::sqrt(accelerationSquares / count);
  const double potential = worstPotential / std::sqrt(potentialSquares / count);
  std::printf(
      "summed grids (%s, %d^3): the even part against one mesh of all bodies, worst %.2e of the rms pull, "
      "%.2e of the rms potential\n",
      mesh::toString(params.backend).c_str(), params.grid, acceleration, potential);
  EXPECT_LE(acceleration, bound);
  EXPECT_LE(potential, bound);

  // A part without bodies takes part: it deposits nothing, reduces once a pass and solves.
  std::size_t emptyPasses = 0;
  mesh::ParticleMesh emptyMesh(params);
  emptyMesh.setDensityReduction([&](std::span<double> /*grid*/) { ++emptyPasses; });
  Particles none;
  emptyMesh.addLongRange(none.sources(), gravity, none.forces());
  EXPECT_EQ(emptyPasses, passes);
}

/// expectSummedGridsSolveTheWholeSystem on `backend` for a clustered box of 4500 bodies (side 2, seed `seed`) on a 24^3
/// mesh, interlaced and not, to 1e-12 of the rms: the check each backend's test runs.
inline void expectSummedGridsSolveTheWholeSystem(std::uint64_t seed, mesh::MeshBackend backend) {
  const double L = 2.0;
  Particles bodies = clumpyBox(seed, L, 1500, 3000);
  wrapIntoBox(bodies, L);
  for (const bool interlace : {true, false}) {
    SCOPED_TRACE(interlace ? "interlaced" : "one pass");
    mesh::MeshParams params;
    params.grid = 24;
    params.boxSize = L;
    params.interlace = interlace;
    params.backend = backend;
    expectSummedGridsSolveTheWholeSystem(bodies, params, 1e-12);
  }
}

}  // namespace matcha::testing
