// SPDX-License-Identifier: MIT
// The upward pass for one cell, written once for the tree's build on the CPU (tree/octree.cpp), the engines' refit of
// a reused tree to moved bodies (the CPU engine's loop and the CUDA refit kernel) and the tests (STYLE.md habits 2
// and 3). A host-device header: plain arrays in, plain arrays out, nothing allocated.
#pragma once

#include <cmath>
#include <cstdint>

#include "matcha/core/host_device.hpp"
#include "matcha/core/interaction_plan.hpp"
#include "matcha/core/opening_criterion.hpp"

namespace matcha {

/// The bodies a refit reads, structure of arrays in the tree's order.
struct RefitBodies {
  const double* x = nullptr;
  const double* y = nullptr;
  const double* z = nullptr;
  const double* mass = nullptr;
  /// Optional: body i may lie anywhere within radius[i] of (x, y, z)[i] (the tree solver builds a tree for the
  /// positions a few steps ahead, each body a ball around its predicted path); null for exact positions.
  const float* radius = nullptr;
};

/// The cells a refit reads (topology, geometric cubes) and writes (everything else), one entry per cell.
struct RefitCells {
  // In: topology and geometry.
  const BodyRange* bodies = nullptr;  ///< the cell's bodies
  const std::uint32_t* firstChild = nullptr;
  const std::uint8_t* numChildren = nullptr;  ///< 0 for a leaf
  const double* centre = nullptr;             ///< 3 per cell: the geometric centre of the cell's cube
  const double* halfSide = nullptr;
  // Out.
  double* mass = nullptr;
  double* x = nullptr;  ///< centre of mass (the cube's centre for a massless cell)
  double* y = nullptr;
  double* z = nullptr;
  /// Traceless quadrupole about the centre of mass, xx yy zz xy xz yz, and the trace sum m |d|^2
  /// (interaction_plan.hpp: CellMultipoles); all null for monopole cells.
  double* quadrupole[7] = {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  double* halfExtent = nullptr;     ///< h: half edge of the smallest cube about `centre` holding every body (ball)
  double* bmax = nullptr;           ///< radius about the centre of mass holding every body (ball)
  double* openingRadius = nullptr;  ///< r_open = 2 h / theta + |com - centre| (+ 2 comSpread, see below)
  /// Optional (with RefitBodies::radius): how far the true centre of mass can lie from the one computed, the
  /// mass-weighted mean ball radius. The opening radius then adds it twice: once because the distance to a group
  /// can shrink by it, once because the offset |com - centre| can grow by it.
  double* comSpread = nullptr;
};

namespace detail {
/// The traceless quadrupole m (3 d d^T - |d|^2 I) of masses m at offsets d from the expansion centre, summed, and the
/// second-moment trace m |d|^2. Named members rather than an array of seven: the compiler keeps these in registers
/// through a leaf's loop, where it kept an array on the stack and each body's sums waited on the stores of the last
/// (perf on the 2-core build machine: 15% of the refit's samples on the first use of a reloaded sum).
struct QuadrupoleSum {
  double xx = 0.0, yy = 0.0, zz = 0.0, xy = 0.0, xz = 0.0, yz = 0.0, trace = 0.0;

  MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void addPoint(double m, double dx, double dy, double dz) {
    const double d2 = dx * dx + dy * dy + dz * dz;
    trace += m * d2;
    xx += m * (3.0 * dx * dx - d2);
    yy += m * (3.0 * dy * dy - d2);
    zz += m * (3.0 * dz * dz - d2);
    xy += m * 3.0 * dx * dy;
    xz += m * 3.0 * dx * dz;
    yz += m * 3.0 * dy * dz;
  }
  /// Adds the seven sums of cell c, in the order of RefitCells::quadrupole.
  MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void addCell(double* const (&cell)[7], std::uint32_t c) {
    xx += cell[0][c];
    yy += cell[1][c];
    zz += cell[2][c];
    xy += cell[3][c];
    xz += cell[4][c];
    yz += cell[5][c];
    trace += cell[6][c];
  }
  MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void store(double* const (&cell)[7], std::uint32_t c) const {
    cell[0][c] = xx;
    cell[1][c] = yy;
    cell[2][c] = zz;
    cell[3][c] = xy;
    cell[4][c] = xz;
    cell[5][c] = yz;
    cell[6][c] = trace;
  }
};
}  // namespace detail

/// Refits `cell` from its bodies (a leaf) or from its children, which must be refitted already (so a pass runs level
/// by level from the deepest). Sums are in double and in index order, so the result does not depend on how the
/// cells of a level are spread over threads. The bound b_max of a parent is the smaller of its children's bound
/// (b_max,c + |com_c - com|) and the distance to the farthest corner of its cube widened to h.
MATCHA_HOST_DEVICE inline void refitCell(const RefitBodies& bodies, const RefitCells& cells, std::uint32_t cell,
                                         double theta) {
  const std::uint32_t first = cells.bodies[cell].first, last = cells.bodies[cell].last;
  const std::uint32_t firstChild = cells.firstChild[cell];
  const std::uint32_t lastChild = firstChild + cells.numChildren[cell];
  const bool leaf = cells.numChildren[cell] == 0;
  const double cx = cells.centre[3 * cell], cy = cells.centre[3 * cell + 1], cz = cells.centre[3 * cell + 2];
  const bool quadrupole = cells.quadrupole[0] != nullptr;

  double mass = 0.0, mx = 0.0, my = 0.0, mz = 0.0, spread = 0.0;
  if (leaf) {
    for (std::uint32_t i = first; i < last; ++i) {
      const double m = bodies.mass[i];
      mass += m;
      mx += m * bodies.x[i];
      my += m * bodies.y[i];
      mz += m * bodies.z[i];
      if (bodies.radius != nullptr) spread += m * bodies.radius[i];
    }
  } else {
    for (std::uint32_t c = firstChild; c < lastChild; ++c) {
      const double m = cells.mass[c];
      mass += m;
      mx += m * cells.x[c];
      my += m * cells.y[c];
      mz += m * cells.z[c];
      if (cells.comSpread != nullptr) spread += m * cells.comSpread[c];
    }
  }
  // A cell of massless bodies (test particles) sits at its geometric centre and pulls with nothing.
  const double comX = mass > 0.0 ? mx / mass : cx;
  const double comY = mass > 0.0 ? my / mass : cy;
  const double comZ = mass > 0.0 ? mz / mass : cz;
  const double comSpread = mass > 0.0 ? spread / mass : 0.0;

  detail::QuadrupoleSum q;
  double halfExtent = cells.halfSide[cell];
  double bmax = 0.0;
  const double offset = std::sqrt((comX - cx) * (comX - cx) + (comY - cy) * (comY - cy) + (comZ - cz) * (comZ - cz));
  if (leaf) {
    double bmax2 = 0.0;
    for (std::uint32_t i = first; i < last; ++i) {
      const double dx = bodies.x[i] - comX, dy = bodies.y[i] - comY, dz = bodies.z[i] - comZ;
      if (quadrupole) q.addPoint(bodies.mass[i], dx, dy, dz);
      const double r = bodies.radius != nullptr ? double(bodies.radius[i]) : 0.0;
      const double outside =
          largerOf(std::fabs(bodies.x[i] - cx), largerOf(std::fabs(bodies.y[i] - cy), std::fabs(bodies.z[i] - cz)));
      halfExtent = largerOf(halfExtent, outside + r);
      const double reach = std::sqrt(dx * dx + dy * dy + dz * dz) + r;
      bmax2 = largerOf(bmax2, reach * reach);
    }
    bmax = std::sqrt(bmax2);
  } else {
    double fromChildren = 0.0;
    for (std::uint32_t c = firstChild; c < lastChild; ++c) {
      const double dx = cells.x[c] - comX, dy = cells.y[c] - comY, dz = cells.z[c] - comZ;
      if (quadrupole) {
        // The parallel-axis theorem: Q = sum_c Q_c + m_c (3 d_c d_c^T - |d_c|^2 I), d_c = com_c - com.
        q.addPoint(cells.mass[c], dx, dy, dz);
        q.addCell(cells.quadrupole, c);
      }
      const double childOffset =
          largerOf(std::fabs(cells.centre[3 * c] - cx),
                   largerOf(std::fabs(cells.centre[3 * c + 1] - cy), std::fabs(cells.centre[3 * c + 2] - cz)));
      halfExtent = largerOf(halfExtent, childOffset + cells.halfExtent[c]);
      fromChildren = largerOf(fromChildren, cells.bmax[c] + std::sqrt(dx * dx + dy * dy + dz * dz));
    }
    // The corner bound: the cube's centre is `offset` away and the corners of the cube widened to h sqrt(3) h
    // beyond that.
    bmax = smallerOf(offset + std::sqrt(3.0) * halfExtent, fromChildren);
  }

  cells.mass[cell] = mass;
  cells.x[cell] = comX;
  cells.y[cell] = comY;
  cells.z[cell] = comZ;
  if (quadrupole) q.store(cells.quadrupole, cell);
  cells.halfExtent[cell] = halfExtent;
  cells.bmax[cell] = bmax;
  cells.openingRadius[cell] = openingRadius(halfExtent, theta, offset) + 2.0 * comSpread;
  if (cells.comSpread != nullptr) cells.comSpread[cell] = comSpread;
}

}  // namespace matcha
