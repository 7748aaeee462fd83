/* SPDX-License-Identifier: MIT */
/*
 * libmatcha_force: the CUNBODY-1 force call (Hamada & Iitaka 2007, "The Chamomile Scheme") on matcha's engines.
 *
 * matcha_force(xj, mj, xi, eps2, a, ni, nj) has the semantics of the paper's force(xj, mj, xi, eps2, a, ni, nj):
 *   a[i] = sum over j of m_j (x_j - x_i) / (|x_j - x_i|^2 + eps2)^(3/2),   G = 1,
 * for i-particles and j-particles that are independent sets of any size (ni = 1 and nj = 1 included). A j at the same
 * point as an i is skipped when eps2 = 0 (its pull is 0/0); with eps2 > 0 it counts (and pulls with exactly 0).
 * The i-particles are not j-particles: to leave out a particle's own term, pass it in both sets with eps2 = 0 (its own
 * term is then the skipped coincident pair), or use matcha_g6.h, which skips by index.
 *
 * Engine: the CUDA engine when this library was built with CUDA and the machine has a GPU, the CPU engine otherwise;
 * the environment variable MATCHA_ENGINE (auto, cpu or cuda; read at the first call after loading or after
 * matcha_force_close) overrides the choice, and matcha_force_engine() names the engine in use.
 * Precision: matcha_force is matcha's float direct summation (float pairs relative to each i-block's centre, float
 * partial sums of at most 64-128 terms added in double, close pairs and cancelling sums again in double): the
 * Chamomile-level accuracy of the paper's Table 2 (README "C libraries" gives E_max against a double host).
 * matcha_force_jerk runs the Hermite engine: float pairs on double-single coordinates, double sums on the GPU, double
 * precision throughout on the CPU.
 *
 * Threads: every call may be made from any thread; the library serialises them (one call computes at a time, using
 * all cores or the GPU). matcha_force_last_error() reports the last failure of the calling thread.
 * Nothing here calls exit() or lets a C++ exception escape: every failure is a return code and a message.
 */
#ifndef MATCHA_FORCE_H
#define MATCHA_FORCE_H

/* Exported from the shared library whatever the visibility its code is compiled with. */
#if defined(__GNUC__)
#define MATCHA_FORCE_API __attribute__((visibility("default")))
#else
#define MATCHA_FORCE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this C API (not of matcha): the major number changes when a call changes incompatibly. */
#define MATCHA_FORCE_VERSION_MAJOR 1
#define MATCHA_FORCE_VERSION_MINOR 0
#define MATCHA_FORCE_VERSION_PATCH 0
#define MATCHA_FORCE_VERSION "1.0.0"

/* Return codes. */
#define MATCHA_FORCE_OK 0
#define MATCHA_FORCE_ERROR_ARGUMENT                                                \
  (-1) /* a null array, a negative count, eps2 < 0, a value that is not finite, or \
          coordinates beyond 2^30 length units (float range) */
#define MATCHA_FORCE_ERROR_ENGINE                                                                                      \
  (-2)                                   /* MATCHA_ENGINE is not auto, cpu or cuda, or names an engine that cannot run \
                                            here (cuda without a GPU) */
#define MATCHA_FORCE_ERROR_DEVICE (-3)   /* the GPU failed during the call (a CUDA error) */
#define MATCHA_FORCE_ERROR_MEMORY (-4)   /* host or device memory ran out */
#define MATCHA_FORCE_ERROR_INTERNAL (-5) /* a bug in matcha (please report the message) */

/*
 * Accelerations of ni i-particles from nj j-particles, G = 1 (the paper's force()).
 *   xj  in   nj positions             mj in  nj masses
 *   xi  in   ni positions             eps2 in squared softening length, >= 0
 *   a   out  ni accelerations, overwritten on success (untouched on failure)
 * Arrays may be null only when their count is 0. Returns MATCHA_FORCE_OK or an error code above.
 */
MATCHA_FORCE_API int matcha_force(const double xj[][3], const double mj[], const double xi[][3], double eps2,
                                  double a[][3], int ni, int nj);

/*
 * Accelerations, jerks (time derivatives of the accelerations) and potentials of ni i-particles from nj j-particles,
 * G = 1, as a 4th-order Hermite integrator needs them:
 *   a    += m_j r / s^3,   jerk += m_j (v / s^3 - 3 (r.v) r / s^5),   pot -= m_j / s,
 *   r = x_j - x_i, v = v_j - v_i, s^2 = |r|^2 + eps2; a j at the same point as an i is skipped when eps2 = 0.
 *   xj, vj, mj  in   nj positions, velocities, masses
 *   xi, vi      in   ni positions, velocities
 *   a, jerk     out  ni vectors each, overwritten on success
 *   pot         out  ni potentials, overwritten on success; may be null (not computed)
 */
MATCHA_FORCE_API int matcha_force_jerk(const double xj[][3], const double vj[][3], const double mj[],
                                       const double xi[][3], const double vi[][3], double eps2, double a[][3],
                                       double jerk[][3], double pot[], int ni, int nj);

/* The calling thread's last error as one line ("" when its last call succeeded); valid until its next call. */
MATCHA_FORCE_API const char* matcha_force_last_error(void);

/* The engine the calls use, e.g. "cpu-float (16 threads)" or "cuda-float (NVIDIA H200 ...)", choosing it now if no
 * call has yet; NULL when it cannot be chosen (matcha_force_last_error() says why). The string stays valid until
 * matcha_force_close(). */
MATCHA_FORCE_API const char* matcha_force_engine(void);

/* MATCHA_FORCE_VERSION, from the library itself (to compare with the header a program was compiled against). */
MATCHA_FORCE_API const char* matcha_force_version(void);

/* Releases the engines and their memory (the GPU's included); the next call chooses an engine again, reading
 * MATCHA_ENGINE anew. Returns MATCHA_FORCE_OK. */
MATCHA_FORCE_API int matcha_force_close(void);

#ifdef __cplusplus
}
#endif

#endif /* MATCHA_FORCE_H */
