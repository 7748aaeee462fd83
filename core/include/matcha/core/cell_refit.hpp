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
// Adds the traceless quadrupole of mass m at offset d from the expansion centre, m (3 d d^T - |d|^2 I), and its
// second-moment trace m |d|^2 (q[6]).
MATCHA_HOST_DEVICE inline void addPointQuadrupole(double m, double dx, double dy, double dz, double (&q)[7]) {
  const double d2 = dx * dx + dy * dy + dz * dz;
  q[6] += m * d2;
  q[0] += m * (3.0 * dx * dx - d2);
  q[1] += m * (3.0 * dy * dy - d2);
  q[2] += m * (3.0 * dz * dz - d2);
  q[3] += m * 3.0 * dx * dy;
  q[4] += m * 3.0 * dx * dz;
  q[5] += m * 3.0 * dy * dz;
}
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

  double q[7] = {0, 0, 0, 0, 0, 0, 0};
  double halfExtent = cells.halfSide[cell];
  double bmax = 0.0;
  const double offset = std::sqrt((comX - cx) * (comX - cx) + (comY - cy) * (comY - cy) + (comZ - cz) * (comZ - cz));
  if (leaf) {
    double bmax2 = 0.0;
    for (std::uint32_t i = first; i < last; ++i) {
      const double dx = bodies.x[i] - comX, dy = bodies.y[i] - comY, dz = bodies.z[i] - comZ;
      if (quadrupole) detail::addPointQuadrupole(bodies.mass[i], dx, dy, dz, q);
      const double r = bodies.radius != nullptr ? double(bodies.radius[i]) : 0.0;
      const double outside =
          std::fmax(std::fabs(bodies.x[i] - cx), std::fmax(std::fabs(bodies.y[i] - cy), std::fabs(bodies.z[i] - cz)));
      halfExtent = std::fmax(halfExtent, outside + r);
      const double reach = std::sqrt(dx * dx + dy * dy + dz * dz) + r;
      bmax2 = std::fmax(bmax2, reach * reach);
    }
    bmax = std::sqrt(bmax2);
  } else {
    double fromChildren = 0.0;
    for (std::uint32_t c = firstChild; c < lastChild; ++c) {
      const double dx = cells.x[c] - comX, dy = cells.y[c] - comY, dz = cells.z[c] - comZ;
      if (quadrupole) {
        // The parallel-axis theorem: Q = sum_c Q_c + m_c (3 d_c d_c^T - |d_c|^2 I), d_c = com_c - com.
        detail::addPointQuadrupole(cells.mass[c], dx, dy, dz, q);
        for (int k = 0; k < 7; ++k) q[k] += cells.quadrupole[k][c];
      }
      const double childOffset =
          std::fmax(std::fabs(cells.centre[3 * c] - cx),
                    std::fmax(std::fabs(cells.centre[3 * c + 1] - cy), std::fabs(cells.centre[3 * c + 2] - cz)));
      halfExtent = std::fmax(halfExtent, childOffset + cells.halfExtent[c]);
      fromChildren = std::fmax(fromChildren, cells.bmax[c] + std::sqrt(dx * dx + dy * dy + dz * dz));
    }
    // The corner bound: the cube's centre is `offset` away and the corners of the cube widened to h sqrt(3) h
    // beyond that.
    bmax = std::fmin(offset + std::sqrt(3.0) * halfExtent, fromChildren);
  }

  cells.mass[cell] = mass;
  cells.x[cell] = comX;
  cells.y[cell] = comY;
  cells.z[cell] = comZ;
  if (quadrupole) {
    for (int k = 0; k < 7; ++k) cells.quadrupole[k][cell] = q[k];
  }
  cells.halfExtent[cell] = halfExtent;
  cells.bmax[cell] = bmax;
  cells.openingRadius[cell] = openingRadius(halfExtent, theta, offset) + 2.0 * comSpread;
  if (cells.comSpread != nullptr) cells.comSpread[cell] = comSpread;
}

}  // namespace matcha
