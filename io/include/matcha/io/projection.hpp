// SPDX-License-Identifier: MIT
// Projected (column) density maps of the bodies: what `matcha render` draws. A projection along an axis looks down
// that axis onto the plane of the other two, in the cyclic order that keeps the picture right-handed (yt's
// convention): along z the map shows (x, y), along x it shows (y, z), along y it shows (z, x); the first is the
// horizontal coordinate u (increasing to the right), the second the vertical coordinate v (increasing upwards), and
// the projection axis points out of the picture, towards the viewer.
//
// The map is the surface density Sigma = mass / area on a square grid of pixels, deposited with cloud-in-cell (CIC)
// weights: each body is a uniform square of one pixel's size centred on it, shared between the (at most) four pixels
// it overlaps in proportion to the overlap. CIC rather than nearest-grid-point because it does not jump when a body
// crosses a pixel edge (smoother maps, no aliasing of lattice-like inputs) at the same cost. A body whose square
// reaches past the field's edge deposits only the part inside: the map holds exactly the mass of the squares' parts
// inside the field.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "matcha/core/particles.hpp"

namespace matcha::io {

/// The axis a projection looks along.
enum class ProjectionAxis { x, y, z };

/// "x", "y" or "z".
std::string toString(ProjectionAxis axis);

/// The indices (0 = x, 1 = y, 2 = z) of the map's horizontal (u) and vertical (v) coordinates: (1, 2) along x,
/// (2, 0) along y, (0, 1) along z.
std::array<int, 2> planeAxes(ProjectionAxis axis);

/// What part of the projected plane a map covers.
struct ProjectionView {
  ProjectionAxis axis = ProjectionAxis::z;  ///< the line of sight
  /// The field's centre in 3D (length units); only its two components in the plane matter.
  std::array<double, 3> centre{0.0, 0.0, 0.0};
  double width = 1.0;  ///< side of the square field (length units), > 0 and finite
  int pixels = 1024;   ///< pixels along each side, kMinPixels to kMaxPixels
};

/// Limits of ProjectionView::pixels: 16 is the least that can still show a structure; 16384^2 doubles are 2 GiB.
inline constexpr int kMinPixels = 16;
inline constexpr int kMaxPixels = 16384;

/// A surface density map: `pixels` x `pixels` values of Sigma (mass / length^2), row by row from the bottom
/// (smallest v) up, each row from left (smallest u) to right: sigma[row * pixels + column]. Pixel (column, row)
/// covers u in [u0 + column h, u0 + (column + 1) h), v likewise, with h = width / pixels and (u0, v0) the field's
/// lower-left corner, centre - width / 2.
struct SurfaceDensityMap {
  ProjectionView view;
  std::vector<double> sigma;
  std::size_t numBodiesInField = 0;  ///< bodies that deposited some mass (their squares overlap the field)
  double pixelSide() const { return view.width / view.pixels; }
  double at(int column, int row) const {
    return sigma[static_cast<std::size_t>(row) * static_cast<std::size_t>(view.pixels) +
                 static_cast<std::size_t>(column)];
  }
};

/// Throws InputError (one line) unless view.pixels is in [kMinPixels, kMaxPixels], view.width is finite, at least
/// smallestResolvableWidth and at most 1e150 a pixel, and every centre component is finite.
void validateView(const ProjectionView& view);

/// The smallest width a map of `pixels` around `centre` resolves: pixels of at least 1e-150 (their area, whose inverse
/// scales the masses, stays a normal double) and 1e-12 of the centre's largest coordinate (else neighbouring pixels
/// fall on the same positions in double).
double smallestResolvableWidth(int pixels, const std::array<double, 3>& centre);

/// Deposits `bodies` onto the map of `view` with CIC weights (see the file comment). Parallel over bodies (TBB)
/// without atomics: up to 16 equal slabs of bodies each fill a map of their own, added up pixel by pixel in a fixed
/// order, so the result is the same, to the bit, whatever the number of threads (the slab count depends on N and the
/// pixels: fewer slabs for maps beyond 2048 pixels, one from 5793 on, to bound their memory to 512 MiB).
/// In: bodies (positions and masses, `count` of each; masses are not checked; bodies that are not finite or far away
/// deposit nothing), view (validated first).
/// Out: a new map. Allocates the map (pixels^2 doubles) and one more such map per slab after the first.
/// Throws InputError for a bad view (validateView).
SurfaceDensityMap depositSurfaceDensity(const SourceView& bodies, const ProjectionView& view);

/// The centre of mass of `bodies` (parallel, deterministic reduction). Throws InputError when there are no bodies or
/// the total mass is not > 0.
std::array<double, 3> centreOfMass(const SourceView& bodies);

/// The side of the smallest square, centred on `centre` in the plane of `axis`, that holds at least `massFraction`
/// of the total mass in projection (a body counts as inside when its projected position is; the square's half side
/// is the mass-weighted quantile of max(|u - u_c|, |v - v_c|)), found to a relative precision of 1e-6 by a few
/// parallel histogram passes (no sort, no allocation per body). All that mass at one point gives 0 or a width below
/// the smallest normal double: the caller decides what to show (smallestResolvableWidth).
/// Throws InputError when massFraction is not in (0, 1], there are no bodies or the total mass is not > 0.
double enclosingWidth(const SourceView& bodies, ProjectionAxis axis, const std::array<double, 3>& centre,
                      double massFraction);

}  // namespace matcha::io
