/* SPDX-License-Identifier: MIT */
/*
 * libmatcha_g6: the GRAPE-6 library's C and Fortran API (the g6 calls as kirin's appendix lists them; Belleman,
 * Bedorf & Portegies Zwart 2008) on matcha's Hermite engines, so that a program written for GRAPE-6 (kira, NBODY6's
 * GPU variants, Makino's GRAPE treecode) links against this library with no code changes.
 *
 * The model, as on GRAPE-6: a "cluster" (clusterid, 0..63 here) holds j-memory of up to g6_getnjmax() particles,
 * each stored at an address with its state at its own time (g6_set_j_particle). g6_set_ti sets the time the
 * j-particles are predicted to; g6calc_firsthalf starts the forces on ni i-particles (positions and velocities the
 * host has already predicted to that time) from the j-particles at addresses [0, nj), and g6calc_lasthalf returns
 * acceleration, jerk and potential (g6calc_lasthalf2 also the nearest neighbour). G = 1: masses include G.
 *
 * What matcha does with each argument:
 *  - the j-particles live on the engine (on the GPU when there is one), are predicted there in double
 *    (x + v dt + aby2 dt^2 + a1by6 dt^3 + (3/4) a2by18 dt^4, and the velocity likewise: a2by18 is the 2nd derivative
 *    of the acceleration over 18, a1by6 the jerk over 6, aby2 the acceleration over 2, GRAPE-6's scaling) and summed
 *    in float pairs on double-single coordinates with double sums on the GPU, in double on the CPU;
 *  - `index` (set_j_particle) and `index[]` (calc) name particles: a j-particle with the same index as an i-particle
 *    is skipped for it (its own term); indices need not be addresses. With eps2 = 0 a pair at zero distance is skipped
 *    too (never NaN); with eps2 > 0 a distinct particle at the same point counts (potential -m/eps, no pull);
 *  - the nearest neighbour (g6calc_lasthalf2) is the j-particle at the smallest distance |x_j - x_i| other than the
 *    i-particle itself, reported by its index; of equal distances the lowest address wins (on the GPU distances are
 *    compared in float: j-particles within ~1e-7 of each other in distance count as equal); -1 when nj has no
 *    other particle;
 *  - dtj (the j-particle's time step), aold, j6old and phiold (old forces, which GRAPE-6 used to scale its fixed-point
 *    accumulators) and h2 (the neighbour-sphere radius, for neighbour lists, which this library does not provide) are
 *    accepted and ignored: floating-point sums need no scaling. They may be null.
 *  - g6_set_tunit and g6_set_xunit (the fixed-point units of time, 2^-tunit, and position, 2^-xunit, of GRAPE-6's
 *    64-bit predictor) are accepted and ignored: times and positions are doubles on the host and in the predictor
 *    (53 bits relative to each value, where the fixed point had 64 bits relative to the box; float pairs then take
 *    differences to ~2^-48 of the coordinates, better than GRAPE-6's pipelines did);
 *  - g6_initialize_jp_buffer and g6_flush_jp_buffer (DMA buffering of set_j_particle) are accepted: j-particles are
 *    always buffered on the host and sent at the next calc's prediction, so there is nothing to flush;
 *  - g6_reset and g6_reset_fofpga (hardware resets) drop a calc in flight and keep the j-memory.
 *
 * Engine: chosen at g6_open by the environment variable MATCHA_ENGINE (auto, cpu or cuda; default auto: the CUDA
 * engine when built and a GPU is present, else the CPU engine); matcha_g6_engine(clusterid) names it.
 * Environment: MATCHA_G6_NPIPES (default 256) is what g6_npipes() returns: the i-block size programs use (GRAPE-6
 * had 48; more keeps a GPU busier, and any ni is accepted whatever it says). MATCHA_G6_NJMAX (default 4194304) is
 * g6_getnjmax(): the j-memory grows with the addresses used, up to this.
 *
 * Return values: every call returns int, 0 on success and a negative MATCHA_G6_ERROR_* code on failure, with
 * matcha_g6_last_error() saying why in one line. (GRAPE-6's own header declares some of these void; a program
 * compiled against that header ignores the value, which is compatible with every C and Fortran ABI in use.) GRAPE-6
 * programs test g6calc_lasthalf's value for nonzero, so an error there reaches them. Nothing here calls exit() or lets
 * a C++ exception escape.
 * Threads: any call from any thread; the library serialises them. One calc (firsthalf to lasthalf) per cluster at a
 * time; the last error is per thread.
 *
 * Fortran: each call has an underscore variant taking every argument by pointer (g6_open_(int* id), ...), as GRAPE-6
 * had, for gfortran's and ifort's default name mangling. Arrays double (*)[3] are x(3, n) in Fortran.
 */
#ifndef MATCHA_G6_H
#define MATCHA_G6_H

/* Exported from the shared library whatever the visibility its code is compiled with. */
#if defined(__GNUC__)
#define MATCHA_G6_API __attribute__((visibility("default")))
#else
#define MATCHA_G6_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MATCHA_G6_VERSION_MAJOR 1
#define MATCHA_G6_VERSION_MINOR 0
#define MATCHA_G6_VERSION_PATCH 0
#define MATCHA_G6_VERSION "1.0.0"

#define MATCHA_G6_OK 0
#define MATCHA_G6_ERROR_ARGUMENT                                                                                     \
  (-1)                                /* clusterid outside 0..63, a null array, a negative count, an address outside \
                                         0..njmax-1, nj above the j-memory, eps2 < 0, a value that is not finite */
#define MATCHA_G6_ERROR_NOT_OPEN (-2) /* the cluster was not opened (g6_open) or is closed */
#define MATCHA_G6_ERROR_NO_CALC (-3)  /* g6calc_lasthalf without g6calc_firsthalf, or with another ni */
#define MATCHA_G6_ERROR_ENGINE                                                                                        \
  (-4)                                /* MATCHA_ENGINE or a MATCHA_G6_* variable is malformed, or the engine it names \
                                         cannot run here (cuda without a GPU) */
#define MATCHA_G6_ERROR_DEVICE (-5)   /* the GPU failed (a CUDA error) */
#define MATCHA_G6_ERROR_MEMORY (-6)   /* host or device memory ran out */
#define MATCHA_G6_ERROR_INTERNAL (-7) /* a bug in matcha (please report the message) */

/* Opens cluster `clusterid`: an engine and empty j-memory (an open cluster is opened afresh). */
MATCHA_G6_API int g6_open(int clusterid);
/* Closes it and frees its engine and memory. */
MATCHA_G6_API int g6_close(int clusterid);
/* The i-block size to use (MATCHA_G6_NPIPES, default 256): programs send firsthalf/lasthalf this many at a time. */
MATCHA_G6_API int g6_npipes(void);
/* Fixed-point units of GRAPE-6 (time 2^-newtunit, position 2^-newxunit): accepted and ignored, returns 0. */
MATCHA_G6_API int g6_set_tunit(int newtunit);
MATCHA_G6_API int g6_set_xunit(int newxunit);
/* The time the j-particles are predicted to for the next calc. */
MATCHA_G6_API int g6_set_ti(int clusterid, double ti);
/*
 * Stores particle `index` at j-memory `address` (0 <= address < g6_getnjmax()) with its state at its time tj:
 * mass, a2by18 (d^2a/dt^2 / 18), a1by6 (jerk / 6), aby2 (acceleration / 2), v and x (3 doubles each, read). dtj is
 * ignored. Takes effect at the next g6calc_firsthalf.
 */
MATCHA_G6_API int g6_set_j_particle(int clusterid, int address, int index, double tj, double dtj, double mass,
                                    double a2by18[3], double a1by6[3], double aby2[3], double v[3], double x[3]);
/*
 * Starts the forces on ni i-particles (index[ni], xi[ni][3], vi[ni][3], read and copied: the caller may reuse them)
 * from the j-particles at addresses [0, nj) predicted to the time of g6_set_ti, with softening eps2 >= 0. aold, j6old,
 * phiold and h2 are ignored (may be null). Returns before the forces are done (on the GPU).
 */
MATCHA_G6_API int g6calc_firsthalf(int clusterid, int nj, int ni, int index[], double xi[][3], double vi[][3],
                                   double aold[][3], double j6old[][3], double phiold[], double eps2, double h2[]);
/*
 * Waits for the forces of the last g6calc_firsthalf (same clusterid and ni; the other inputs are not read again) and
 * writes acc[ni][3], jerk[ni][3] and pot[ni]. Returns 0, or a negative code (nothing written).
 */
MATCHA_G6_API int g6calc_lasthalf(int clusterid, int nj, int ni, int index[], double xi[][3], double vi[][3],
                                  double eps2, double h2[], double acc[][3], double jerk[][3], double pot[]);
/* g6calc_lasthalf and the nearest neighbour's index in nnbindex[ni] (-1: none). */
MATCHA_G6_API int g6calc_lasthalf2(int clusterid, int nj, int ni, int index[], double xi[][3], double vi[][3],
                                   double eps2, double h2[], double acc[][3], double jerk[][3], double pot[],
                                   int nnbindex[]);
/* DMA buffering of g6_set_j_particle on GRAPE-6 (size: particles per buffer, >= 0): accepted, returns 0. */
MATCHA_G6_API int g6_initialize_jp_buffer(int clusterid, int size);
MATCHA_G6_API int g6_flush_jp_buffer(int clusterid);
/* Hardware resets on GRAPE-6: drop a calc in flight, keep the j-memory; return 0. */
MATCHA_G6_API int g6_reset(int clusterid);
MATCHA_G6_API int g6_reset_fofpga(int clusterid);
/* The most j-particles the cluster holds (MATCHA_G6_NJMAX, default 4194304), or a negative code. */
MATCHA_G6_API int g6_getnjmax(int clusterid);

/* Fortran-callable variants: the same calls with every argument by pointer. */
MATCHA_G6_API int g6_open_(int* clusterid);
MATCHA_G6_API int g6_close_(int* clusterid);
MATCHA_G6_API int g6_npipes_(void);
MATCHA_G6_API int g6_set_tunit_(int* newtunit);
MATCHA_G6_API int g6_set_xunit_(int* newxunit);
MATCHA_G6_API int g6_set_ti_(int* clusterid, double* ti);
MATCHA_G6_API int g6_set_j_particle_(int* clusterid, int* address, int* index, double* tj, double* dtj, double* mass,
                                     double a2by18[3], double a1by6[3], double aby2[3], double v[3], double x[3]);
MATCHA_G6_API int g6calc_firsthalf_(int* clusterid, int* nj, int* ni, int index[], double xi[][3], double vi[][3],
                                    double aold[][3], double j6old[][3], double phiold[], double* eps2, double h2[]);
MATCHA_G6_API int g6calc_lasthalf_(int* clusterid, int* nj, int* ni, int index[], double xi[][3], double vi[][3],
                                   double* eps2, double h2[], double acc[][3], double jerk[][3], double pot[]);
MATCHA_G6_API int g6calc_lasthalf2_(int* clusterid, int* nj, int* ni, int index[], double xi[][3], double vi[][3],
                                    double* eps2, double h2[], double acc[][3], double jerk[][3], double pot[],
                                    int nnbindex[]);
MATCHA_G6_API int g6_initialize_jp_buffer_(int* clusterid, int* size);
MATCHA_G6_API int g6_flush_jp_buffer_(int* clusterid);
MATCHA_G6_API int g6_reset_(int* clusterid);
MATCHA_G6_API int g6_reset_fofpga_(int* clusterid);
MATCHA_G6_API int g6_getnjmax_(int* clusterid);

/* matcha's additions (not GRAPE-6's). */
/* The calling thread's last error as one line ("" after a success); valid until its next call. */
MATCHA_G6_API const char* matcha_g6_last_error(void);
/* The engine of an open cluster, e.g. "cuda-hermite (NVIDIA H200, ...)"; NULL when it is not open. Valid until the
 * cluster is closed or opened again. */
MATCHA_G6_API const char* matcha_g6_engine(int clusterid);
/* MATCHA_G6_VERSION, from the library itself. */
MATCHA_G6_API const char* matcha_g6_version(void);

#ifdef __cplusplus
}
#endif

#endif /* MATCHA_G6_H */
