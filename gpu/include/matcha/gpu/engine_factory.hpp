// SPDX-License-Identifier: MIT
// Chooses a near-field engine at run time (DESIGN.md §2): CUDA when asked for or when `auto` finds a device,
// otherwise the CPU engine.
#pragma once

#include <memory>
#include <string>

#include "matcha/core/hermite_engine.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/core/params.hpp"
#include "matcha/gpu/cpu_engine.hpp"

namespace matcha::gpu {

/// What the CUDA runtime reports; `available` is false in a build without CUDA or on a machine without a device.
struct CudaDeviceInfo {
  bool available = false;
  std::string description;    ///< "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 1980 MHz, 79 GiB)" or why there is none
  std::string name;           ///< "NVIDIA H100 80GB HBM3"
  int computeCapability = 0;  ///< 10 * major + minor, e.g. 90
  int numSMs = 0;
  int clockMHz = 0;        ///< peak SM clock the driver reports (the boost clock; sustained clocks can be lower)
  int memoryClockMHz = 0;  ///< peak memory clock
  double memoryGiB = 0.0;
  int fp32LanesPerSM = 0;  ///< FP32 instructions one SM issues per clock: 128 from sm_86 on (H100), 64 on sm_80
  int fp64LanesPerSM = 0;  ///< FP64 lanes per SM: 64 on sm_80/sm_90 (A100, H100, H200), 2 on consumer parts
  int deviceCount = 0;     ///< CUDA devices this process sees (the others are taken to be like device 0)
};

/// Queries device 0. Never throws; a missing driver or device is reported in `description`.
CudaDeviceInfo queryCudaDevice();

/// Issue slots per monopole interaction (with potential) in DESIGN.md §4's floor: "about 13 FP32 instructions and
/// one reciprocal square root", taken as 13 in all, which gives the document's ~2.5e12/s on an H100 (132 SMs,
/// 1.98 GHz). It is the GPU Gems count without the potential and without the self-term rule.
inline constexpr double kDesignInstructionsPerInteraction = 13.0;

/// Issue slots per interaction counted in the SASS of the float kernels' inner loop (sm_90, nvcc 13.0; cuobjdump
/// -sass of the direct kernel T128/I4/q1/p128, bench/RESULTS.md): 3 FADD (r_ij), 3 FFMA (r^2 + eps^2), 1 MUFU.RSQ,
/// 3 FMUL, 3 FFMA (acceleration), 1 FADD (potential), 1 FMNMX (the zero-distance check of the fast path) = 15, plus
/// one LDS.128 per source shared by the thread's 4 i-bodies (0.25) and the loop's add, compare and branch spread
/// over 16 interactions (0.25): 248 instructions per 16 interactions. Nsight Compute counts 15.7 per interaction for
/// the whole kernel (tile staging, barriers, flushes included). Kept as the divisor of the benchmarks' issue% so that
/// runs stay comparable: since tiles away from every body of a warp skip the FMNMX (evaluateFarTile), the loop of
/// T128/I2/q1/p256 issues 15.1 there and Nsight Compute counts 15.35 per interaction for that kernel.
inline constexpr double kSassInstructionsPerInteraction = 15.5;

/// FP64 instructions per interaction of the double direct kernel's inner loop, counted the same way (T128/I2/q1/p128:
/// 493 instructions per 16 interactions): 4 DADD, 6 DFMA and 3 DMUL of the pair, 1 DMUL and 4 DFMA of the two
/// Newton steps of the reciprocal square root, 2 DMUL (y^2 twice) and 1 DSETP of the zero-distance check = 21; the
/// ~10 other instructions (MUFU.RSQ64H, selects, LDS) issue beside them. The FP64 pipe (64 lanes per SM on sm_90,
/// half the issue rate) is the bottleneck.
inline constexpr double kSassFp64InstructionsPerInteraction = 21.0;

/// The FP32 issue floor of DESIGN.md §4: numSMs x fp32LanesPerSM x clock / instructionsPerInteraction, the
/// interactions/s no kernel can beat when each interaction takes that many issue slots. 0 without a device.
double fp32FloorInteractionsPerSecond(const CudaDeviceInfo& device,
                                      double instructionsPerInteraction = kDesignInstructionsPerInteraction);

/// The same for double precision: numSMs x fp64LanesPerSM x clock / fp64InstructionsPerInteraction.
double fp64FloorInteractionsPerSecond(const CudaDeviceInfo& device,
                                      double fp64InstructionsPerInteraction = kSassFp64InstructionsPerInteraction);

/// True when this binary contains the CUDA engine.
bool cudaEngineBuilt();

struct EngineChoice {
  std::unique_ptr<NearFieldEngine> engine;
  std::string reason;  ///< one line saying what was chosen and why, for the run log
  bool onGpu = false;  ///< the CUDA engine (for cost rules: a direct sum there is ~1000x cheaper than on the CPU)
};

/// Lengths the float engines evaluate: eps and the extent of the bodies (largest side of their bounding box) up to
/// kMaxFloatLength. A quadrupole cell's terms grow as M length^4 in float (3.4e38 at most) and eps^2 as length^2:
/// past 2^30 (1.07e9) they overflow to inf and the forces to NaN (measured: a Plummer sphere scaled by 1e10 gave NaN
/// for 699 of 4096 bodies with quadrupole cells, eps = 1e20 NaN everywhere).
inline constexpr double kMaxFloatLength = 0x1p30;
/// The largest G times the total mass the float engines evaluate (requireFloatRange).
inline constexpr double kMaxFloatMass = 0x1p60;

/// Refuses, up front, inputs whose float evaluation would overflow: InputError (one line, giving the limit) when
/// eps or the bodies' extent exceeds kMaxFloatLength, a periodic box's side is below 1 / kMaxFloatLength, or G times
/// the total mass exceeds kMaxFloatMass (or is not finite). Gravity is scale-free, so such a run can be rescaled:
/// lengths by s, velocities by 1/sqrt(s) and times by s^1.5 at fixed G and masses.
void requireFloatRange(const Particles& bodies, const GravityParams& gravity);

/// requireFloatRange of a system known by its extent (the largest side of its bounding box) and total mass: a system
/// spread over several processes, each knowing its own share.
void requireFloatRange(double extent, double totalMass, const GravityParams& gravity);

/// `cpu`: the float CPU engine. `cuda`: the CUDA engine, or InputError when none can be used. `automatic`: CUDA when
/// built and a device is present (and the engine starts on it), else CPU. `reason` names the GPU. The CUDA engine
/// runs on device `device` (an ordinal below CudaDeviceInfo::deviceCount: the ranks of a host each take one).
EngineChoice makeEngine(EngineKind kind, int device = 0);

/// The CUDA engine in `precision` on device 0, for tools that need one precision (compare's GPU double reference).
/// @throws InputError when this build has no CUDA engine or the machine no device; CudaError when it fails to start
std::unique_ptr<NearFieldEngine> makeCudaEngine(Precision precision);

/// The Hermite engine (core/hermite_engine.hpp) for `kind`: `cpu` the double CPU engine (HermiteCpuEngine); `cuda` the
/// CUDA Hermite engine, or InputError (one line) when this build has none or the machine no device; `automatic` CUDA
/// when built and a device is present (and the engine starts on it), else CPU. `reason`, when not null, receives one
/// line saying which engine was chosen and why, for a run log. The CUDA engine runs on device `device` (the ranks of a
/// host each take one).
std::unique_ptr<HermiteEngine> makeHermiteEngine(EngineKind kind, std::string* reason = nullptr, int device = 0);

}  // namespace matcha::gpu
