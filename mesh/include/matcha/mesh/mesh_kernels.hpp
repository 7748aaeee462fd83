// SPDX-License-Identifier: MIT
// The particle mesh's arithmetic per body and per mode, written once as host-device inline functions (STYLE.md
// habit 2) so that the CPU engine (particle_mesh.cpp, TBB + FFTW) and its CUDA twin (mesh/cuda/gpu_mesh.cu, cuFFT)
// compute the same numbers. Nothing here knows the FFT library, allocates or loops over a grid.
//
// The contract a twin must keep (the CPU engine's, particle_mesh.hpp):
//  - Mesh: n^3 points per box of side L, point p = (px, py, pz) at p h, h = L / n. Real grids are stored padded for an
//    in-place real-to-complex transform, as FFTW and cuFFT both lay them out: index (px n + py) P + pz with
//    P = 2 (n/2 + 1); the transform of a real grid is its first n n (n/2 + 1) complex values, index
//    (mx n + my) (n/2 + 1) + mz, row-major with z fastest; the forward transform is unnormalised with exp(-i k.x),
//    the inverse unnormalised with exp(+i k.x).
//  - Modes: index i along x or y stands for the signed mode m = i for i <= n/2 and i - n above (along z only
//    i <= n/2 is stored), k = 2 pi m / L.
//  - Steps: (1) deposit each body's mass with its window (cicWeights / tscWeights of its meshCoordinate along each
//    axis, weights multiplied, indices wrapped); (2) forward transform; (3) multiply mode m by
//    greenScale(G, L) * W(mx) W(my) W(mz) / |m|^2 (0 for m = 0), W = greenAxisFactor: the potential's transform,
//    already normalised for the inverse transform; (4a) spectral differentiation: per component d, the copy times
//    -i 2 pi m_d / L (m_d = derivativeMode: 0 at the Nyquist plane) and an inverse transform gives a_d at the mesh
//    points, and the uncopied spectrum the potential; or (4b) finite differences: one inverse transform gives the
//    potential and fdGradientWeights the pull; (5) interpolate at each body with the same window as (1). The
//    potential then gets selfPotentialCorrection.
//  - Deposits add in a fixed order (particle_mesh.cpp: chunks of planes in two phases) so that a run does not
//    depend on the thread count; a GPU twin with atomics is reproducible only to rounding.
#pragma once

#include <cmath>

#include "matcha/core/host_device.hpp"

namespace matcha::mesh {

/// Most mesh points one body touches along one axis (TSC: 3).
inline constexpr int kMaxWindowSupport = 3;
/// Most mesh points the finite-difference pull of one body reads along its axis: the window plus 2 on each side.
inline constexpr int kMaxGradientSupport = kMaxWindowSupport + 4;

/// One body's weights along one axis: mesh points first, first + 1, ..., first + support - 1, not yet wrapped (first
/// may be -1, the last n). The weights sum to 1 (to rounding); unused entries are 0.
template <class T>
struct AxisWeights {
  int first;
  T w[kMaxWindowSupport];
};

namespace detail {
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T floorOf(T x) {
#if defined(__CUDA_ARCH__)
  return floor(x);
#else
  return std::floor(x);
#endif
}
}  // namespace detail

/// A coordinate in mesh units, u = x / h reduced into [0, n): bodies may lie anywhere, in any image of the box.
/// Reduced through x / L so that a body many boxes away keeps the digits Ewald's phases keep (gpu/ewald.hpp). x / L
/// minus its floor can round up to 1 for a tiny negative x, which lands on u = n: that is point 0 again.
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T meshCoordinate(T x, T invBoxSize, int n) {
  T t = x * invBoxSize;
  t -= detail::floorOf(t);
  const T u = t * T(n);
  return u >= T(n) ? u - T(n) : u;
}

/// Wraps a mesh index from [-n, 2n) into [0, n).
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE int wrapMeshIndex(int i, int n) { return i < 0 ? i + n : (i >= n ? i - n : i); }

/// Cloud in cell: the linear window of width h, points floor(u) and floor(u) + 1. u in [0, n).
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE AxisWeights<T> cicWeights(T u) {
  const T base = detail::floorOf(u);
  const T f = u - base;
  return {static_cast<int>(base), {T(1) - f, f, T(0)}};
}

/// Triangular shaped cloud: the quadratic window of width 3h around the nearest point p, points p - 1, p, p + 1, with
/// d = u - p in [-1/2, 1/2): (1/2 - d)^2 / 2, 3/4 - d^2, (1/2 + d)^2 / 2. u in [0, n).
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE AxisWeights<T> tscWeights(T u) {
  const T nearest = detail::floorOf(u + T(0.5));
  const T d = u - nearest;
  const T below = T(0.5) - d, above = T(0.5) + d;
  return {static_cast<int>(nearest) - 1, {T(0.5) * below * below, T(0.75) - d * d, T(0.5) * above * above}};
}

/// The window of `Support` points per axis: 2 is CIC (cicWeights), 3 is TSC (tscWeights).
template <int Support, class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE AxisWeights<T> windowWeights(T u) {
  static_assert(Support == 2 || Support == 3, "CIC (2) or TSC (3)");
  if constexpr (Support == 2) {
    return cicWeights(u);
  } else {
    return tscWeights(u);
  }
}

/// meshCoordinate moved by `offset` cells (in [0, 1): 1/2 for the interlaced pass), wrapped again into [0, n).
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T shiftedMeshCoordinate(T x, T invBoxSize, int n, T offset) {
  const T u = meshCoordinate(x, invBoxSize, n) + offset;
  return u >= T(n) ? u - T(n) : u;
}

/// Where the real grid's point (x, y, z) lives in the padded in-place layout: (x n + y) P + z, P = 2 (n/2 + 1).
struct MeshLayout {
  int n;
  unsigned long long padded;  ///< P: reals per row
  MATCHA_HOST_DEVICE MATCHA_FORCEINLINE unsigned long long realIndex(int x, int y, int z) const {
    return (static_cast<unsigned long long>(x) * static_cast<unsigned long long>(n) +
            static_cast<unsigned long long>(y)) *
               padded +
           static_cast<unsigned long long>(z);
  }
};

/// The x planes a grid holds: planes first .. first + count - 1 of the mesh, stored from the grid's first plane on.
/// The default is every plane from 0 on (a whole grid); a distributed mesh's slab (slab_mesh.hpp) holds its own
/// planes, and a body's window that reaches past them adds (or reads) its part on them alone.
struct PlaneRange {
  int first = 0;
  int count = 0x7fffffff;
  MATCHA_HOST_DEVICE MATCHA_FORCEINLINE bool holds(int x) const { return x >= first && x - first < count; }
};

/// One body's window along the three axes, its points already wrapped into [0, n). The same for deposit and
/// interpolation, on both engines.
template <int Support, class T>
struct BodyWindow {
  AxisWeights<T> w[3];
  int index[3][Support];

  /// offset: added to the body's mesh coordinates (0, or 1/2 for the interlaced pass).
  MATCHA_HOST_DEVICE MATCHA_FORCEINLINE BodyWindow(T x, T y, T z, T invBoxSize, int n, T offset) {
    const T position[3] = {x, y, z};
    for (int d = 0; d < 3; ++d) {
      w[d] = windowWeights<Support>(shiftedMeshCoordinate(position[d], invBoxSize, n, offset));
      for (int k = 0; k < Support; ++k) index[d][k] = wrapMeshIndex(w[d].first + k, n);
    }
  }
};

/// Adds mass times the body's window to the grid through add(pointer, value): a plain += on the CPU engine (whose
/// chunks never write one point at once), an atomic add on the GPU. Only on the planes the grid holds.
template <int Support, class T, class Add>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void depositBody(T* rho, const MeshLayout& layout,
                                                       const BodyWindow<Support, T>& window, T mass, Add add,
                                                       PlaneRange planes = {}) {
  for (int a = 0; a < Support; ++a) {
    if (!planes.holds(window.index[0][a])) continue;
    const T mx = mass * window.w[0].w[a];
    for (int b = 0; b < Support; ++b) {
      const T mxy = mx * window.w[1].w[b];
      T* row = rho + layout.realIndex(window.index[0][a] - planes.first, window.index[1][b], 0);
      for (int c = 0; c < Support; ++c) add(row + window.index[2][c], mxy * window.w[2].w[c]);
    }
  }
}

/// The window-weighted sum of `field` around the body: the interpolation back, the deposit's transpose. Over the
/// planes the grid holds: a slab's share of the sum (the shares of all slabs add up to the whole grid's sum).
template <int Support, class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T gatherBody(const T* field, const MeshLayout& layout,
                                                   const BodyWindow<Support, T>& window, PlaneRange planes = {}) {
  T sum = 0;
  for (int a = 0; a < Support; ++a) {
    if (!planes.holds(window.index[0][a])) continue;
    T sumYz = 0;
    for (int b = 0; b < Support; ++b) {
      const T* row = field + layout.realIndex(window.index[0][a] - planes.first, window.index[1][b], 0);
      T sumZ = 0;
      for (int c = 0; c < Support; ++c) sumZ += window.w[2].w[c] * row[window.index[2][c]];
      sumYz += window.w[1].w[b] * sumZ;
    }
    sum += window.w[0].w[a] * sumYz;
  }
  return sum;
}

/// The signed mode of index i along an axis of n points: i for i <= n/2, i - n above.
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE int signedMode(int i, int n) { return 2 * i <= n ? i : i - n; }

/// The mode spectral differentiation multiplies by: signedMode, except 0 at the Nyquist index n/2 of an even n. A real
/// field's Nyquist coefficient pairs with itself, so i k times it has no real counterpart; keeping it would make the
/// pull's spectrum non-Hermitian, and dropping it keeps the derivative odd, which zeroes the self-pull and conserves
/// momentum (the tests check both).
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE int derivativeMode(int i, int n) { return (2 * i == n) ? 0 : signedMode(i, n); }

/// The square of one axis's factor of the window's Fourier transform, W(k)^2 with W(k) = sinc(k h / 2)^p,
/// k = 2 pi m / L, p = 2 for CIC and 3 for TSC (windowOrder): what the deposit multiplies a mode by, along one axis
/// (aliases aside), and so what the force (greenAxisFactor) and a measured power spectrum divide by. 1 at m = 0; for
/// |m| <= n/2 it lies in [(2/pi)^(2p), 1].
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T windowSquared(int m, int n, int windowOrder) {
  constexpr T kPi = T(3.14159265358979323846);
  if (m == 0) return T(1);
  const T halfKh = kPi * T(m) / T(n);  // k h / 2
#if defined(__CUDA_ARCH__)
  const T sinc = sin(halfKh) / halfKh;
#else
  const T sinc = std::sin(halfKh) / halfKh;
#endif
  T window2 = T(1);
  for (int k = 0; k < 2 * windowOrder; ++k) window2 *= sinc;
  return window2;
}

/// One axis's factor of the long-range Green's function, deconvolved by the window of deposit and interpolation:
///   exp(-k^2 r_s^2) / W(k)^2,   W(k) = sinc(k h / 2)^p,   k = 2 pi m / L, r_s = aSmooth h,
/// p = 2 for CIC and 3 for TSC (windowOrder). exp(-k^2 r_s^2) factorises over the axes, and so does W, so a mode's
/// factor is the product of three of these (times greenScale / |m|^2). At the Nyquist mode of TSC W^2 is (2/pi)^6 per
/// axis, a gain of 15 that the Gaussian (exp(-pi^2 aSmooth^2) = 2e-7 at aSmooth 1.25) more than offsets.
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T greenAxisFactor(int m, int n, T aSmooth, int windowOrder) {
  constexpr T kPi = T(3.14159265358979323846);
  if (m == 0) return T(1);
  const T kRs = T(2) * (kPi * T(m) / T(n)) * aSmooth;
#if defined(__CUDA_ARCH__)
  const T gauss = exp(-kRs * kRs);
#else
  const T gauss = std::exp(-kRs * kRs);
#endif
  return gauss / windowSquared<T>(m, n, windowOrder);
}

/// The constant of the mode multiplier: -(4 pi G / L^3) exp(-k^2 r_s^2) / k^2 with k^2 = (2 pi / L)^2 |m|^2 is
/// greenScale * (product of the axis Gaussians) / |m|^2, and the 1/L^3 also normalises the unnormalised inverse
/// transform of a deposit of masses (not densities): phi(x_p) = (1/L^3) sum_k phi_k exp(i k.x_p).
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T greenScale(T G, T boxSize) {
  constexpr T kPi = T(3.14159265358979323846);
  return -G / (kPi * boxSize);
}

/// The pull of the finite-difference variant along one axis: the four-point central difference of the potential
/// (GADGET-2's), dphi/dx(p) = [ (2/3) (phi(p+1) - phi(p-1)) - (1/12) (phi(p+2) - phi(p-2)) ] / h, interpolated with
/// the body's window w, is sum_q c_q phi(q) over q = w.first - 2 + k, k in [0, support + 4); this returns c_k (the
/// window convolved with the difference stencil), times invCell = 1 / h. The body's pull is -sum_q c_q phi(q) times
/// the other two axes' window weights.
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void fdGradientWeights(const AxisWeights<T>& w, int support, T invCell,
                                                             T (&c)[kMaxGradientSupport]) {
  for (int k = 0; k < kMaxGradientSupport; ++k) c[k] = T(0);
  const T near = T(2.0 / 3.0) * invCell, far = T(1.0 / 12.0) * invCell;
  for (int j = 0; j < support; ++j) {
    // w_j at point first + j contributes to the differences that read first + j -+ 1 and first + j -+ 2; with the
    // offset of 2 in c, point first + j + s sits at c[j + 2 + s].
    c[j + 3] += near * w.w[j];
    c[j + 1] -= near * w.w[j];
    c[j + 4] -= far * w.w[j];
    c[j + 0] += far * w.w[j];
  }
}

/// The finite-difference pull's gradient (grad phi, before the minus sign) and the potential of a body from the
/// potential on the mesh, in one pass over the (Support + 4)^3 points around it; over the planes the grid holds, as
/// gatherBody.
template <int Support, class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE void gatherFiniteDifference(const T* phi, const MeshLayout& layout,
                                                                  const BodyWindow<Support, T>& window, T invCell,
                                                                  T (&gradient)[3], T& potential,
                                                                  PlaneRange planes = {}) {
  constexpr int D = Support + 4;
  // Per axis: the window's weights over the D points first - 2 .. first + Support + 1 (0 outside the window), the
  // difference weights over the same points, and the points wrapped.
  T w[3][D], c[3][D];
  int index[3][D];
  for (int d = 0; d < 3; ++d) {
    T cd[kMaxGradientSupport];
    fdGradientWeights(window.w[d], Support, invCell, cd);
    for (int k = 0; k < D; ++k) {
      w[d][k] = (k >= 2 && k < Support + 2) ? window.w[d].w[k - 2] : T(0);
      c[d][k] = cd[k];
      index[d][k] = wrapMeshIndex(window.w[d].first - 2 + k, layout.n);
    }
  }
  T gx = 0, gy = 0, gz = 0, pot = 0;
  for (int a = 0; a < D; ++a) {
    if (!planes.holds(index[0][a])) continue;
    T windowSum = 0, gySum = 0, gzSum = 0;  // windowSum serves the potential and the pull along x
    for (int b = 0; b < D; ++b) {
      const T* row = phi + layout.realIndex(index[0][a] - planes.first, index[1][b], 0);
      T wz = 0, cz = 0;
      for (int k = 2; k < Support + 2; ++k) wz += w[2][k] * row[index[2][k]];
      for (int k = 0; k < D; ++k) cz += c[2][k] * row[index[2][k]];
      windowSum += w[1][b] * wz;
      gySum += c[1][b] * wz;
      gzSum += w[1][b] * cz;
    }
    gx += c[0][a] * windowSum;
    gy += w[0][a] * gySum;
    gz += w[0][a] * gzSum;
    pot += w[0][a] * windowSum;
  }
  gradient[0] = gx;
  gradient[1] = gy;
  gradient[2] = gz;
  potential = pot;
}

/// The multiplier of one mode in the Green's function step: gxy = greenScale W(mx) W(my) and m2xy = mx^2 + my^2 per
/// row, gz = W(mz), m2z = mz^2; 0 for the k = 0 mode (the neutralising background).
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T greenMultiplier(T gxy, T m2xy, T gz, T m2z) {
  const T m2 = m2xy + m2z;
  return m2 > 0 ? gxy * gz / m2 : T(0);
}

/// The integral of the short-range potential kernel over the sphere the short range covers,
///   S = int_0^r_cut 4 pi r erfc(r / 2 r_s) dr = 16 pi r_s^2 [1/4 - T(x_c)],   x_c = r_cut / 2 r_s,
///   T(x) = int_x^inf t erfc(t) dt = erfc(x) (1/4 - x^2 / 2) + x exp(-x^2) / (2 sqrt(pi)),
/// 4 pi r_s^2 (1 - 4 T) in all: the whole space would give 4 pi r_s^2; the cut at 5.5 r_s leaves out 1.9e-4 of it.
inline double shortRangeKernelIntegral(double splitRadius, double cutoffRadius) {
  const double x = cutoffRadius / (2.0 * splitRadius);
  const double tail =
      std::erfc(x) * (0.25 - 0.5 * x * x) + x * std::exp(-x * x) * 0.28209479177387814;  // 1/(2 sqrt pi)
  return 4.0 * 3.14159265358979323846 * splitRadius * splitRadius * (1.0 - 4.0 * tail);
}

/// The constant that makes mesh + short range the periodic potential of gpu/ewald.hpp, for body i:
///   G m_i / (sqrt(pi) r_s) + G (M / L^3) S          (M the total mass, S = shortRangeKernelIntegral)
///  - The mesh gives body i the potential of its own Gaussian cloud at its centre, -G m_i psi_L(0), with psi_L the
///    long-range Green's function; the periodic self term of Ewald's convention is psi_L(0) - 1/(sqrt(pi) r_s) -
///    4 pi r_s^2 / L^3 (up to erfc(L / 2 r_s) of further images, below 1e-13 for r_cut <= L/2), so the first term
///    puts the self term right.
///  - The neutralising background acts through the short-range kernel too: the mesh drops k = 0, and the background's
///    share of the short-range sum, -G (M / L^3) times the kernel's integral, must be added back. Taking the integral
///    over the sphere within r_cut rather than all space (4 pi r_s^2; the second half of the first point's constant)
///    also stands in for the pairs beyond r_cut that the short range leaves out, at the mean density: exact for a
///    uniform distribution (a lattice's potential was off by 3e-4 without it), and it moves a lone body by only
///    G m S_tail / L^3 (1e-6 of its potential at 32^3).
/// A lone body then gets +2.8372975 G m / L, and mesh + short range = Ewald up to the mesh's and the cut's errors.
template <class T>
MATCHA_HOST_DEVICE MATCHA_FORCEINLINE T selfPotentialCorrection(T G, T massI, T totalMass, T splitRadius, T boxSize,
                                                                T kernelIntegral) {
  constexpr T kInvSqrtPi = T(0.56418958354775628);
  return G * (massI * kInvSqrtPi / splitRadius + kernelIntegral * totalMass / (boxSize * boxSize * boxSize));
}

}  // namespace matcha::mesh
