// SPDX-License-Identifier: MIT
// libmatcha_force (include/matcha_force.h): the CUNBODY-1 force call on matcha's direct summation.
//
// matcha_force reuses the engines' tuned float direct summation (NearFieldEngine::evaluatePlan with a direct plan,
// accurateNearPairs: the Chamomile-level path) rather than a kernel of its own. The engines sum bodies of one
// SourceView, so the call builds one: the i-particles first, with mass 0 (they pull nothing, and their own -m_i/eps
// self term is 0), then the j-particles; the plan's groups are blocks of i-particles, each with the one list
// [ni, ni + nj), so no i-particle is summed over the other i-particles. The i-particles are put in Morton order first:
// the float engines take coordinates relative to each block's centre, and compact blocks keep the pairs that need a
// second pass in double few (gpu/cpu_engine.hpp: makeDirectPlan).
// matcha_force_jerk loads the j-particles into a Hermite engine at time 0 and asks for one force call.
#include "matcha_force.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "c_boundary.hpp"
#include "matcha/core/hermite_engine.hpp"
#include "matcha/core/near_field_engine.hpp"
#include "matcha/gpu/cpu_engine.hpp"
#include "matcha/gpu/engine_factory.hpp"

namespace {

using matcha::BodyRange;
using matcha::InputError;
using matcha::lib::EngineError;
using matcha::lib::Failure;

/// Everything the library keeps between calls, guarded by `mutex`.
struct State {
  std::mutex mutex;
  std::unique_ptr<matcha::NearFieldEngine> engine;
  bool onGpu = false;
  std::unique_ptr<matcha::HermiteEngine> hermite;
  std::string engineNames;  ///< what matcha_force_engine returns
  // Scratch, reused across calls.
  std::vector<double> x, y, z, mass, ax, ay, az;
  std::vector<std::uint32_t> order;
  std::vector<std::uint64_t> keys;
  std::vector<matcha::JParticle> particles;
  std::vector<std::uint32_t> addresses;
  std::vector<double> acc, jerk, pot;
};

State& state() {
  static State instance;
  return instance;
}

thread_local std::string lastError;

int codeOf(Failure failure) {
  switch (failure) {
    case Failure::argument:
      return MATCHA_FORCE_ERROR_ARGUMENT;
    case Failure::engine:
      return MATCHA_FORCE_ERROR_ENGINE;
    case Failure::device:
      return MATCHA_FORCE_ERROR_DEVICE;
    case Failure::memory:
      return MATCHA_FORCE_ERROR_MEMORY;
    case Failure::internal:
      break;
  }
  return MATCHA_FORCE_ERROR_INTERNAL;
}

/// Runs `body` under the library's lock; the return code and the thread's last error come from what it threw.
template <class Body>
int guarded(const char* call, Body&& body) {
  Failure failure = Failure::internal;
  std::string message;
  const bool ok = matcha::lib::runGuarded(
      [&] {
        const std::lock_guard<std::mutex> lock(state().mutex);
        body();
      },
      failure, message);
  lastError = ok ? std::string() : std::string(call) + ": " + message;
  return ok ? MATCHA_FORCE_OK : codeOf(failure);
}

/// The engines, made at the first call that needs them (MATCHA_ENGINE read then).
matcha::NearFieldEngine& forceEngine(State& s) {
  if (s.engine == nullptr) {
    const matcha::EngineKind kind = matcha::lib::engineKindFromEnvironment();
    try {
      matcha::gpu::EngineChoice choice = matcha::gpu::makeEngine(kind);
      s.engine = std::move(choice.engine);
      s.onGpu = choice.onGpu;
    } catch (const matcha::Error& error) {  // cuda without a device, or a device that fails to start
      throw EngineError(error.what());
    }
  }
  return *s.engine;
}

matcha::HermiteEngine& hermiteEngine(State& s) {
  if (s.hermite == nullptr) {
    const matcha::EngineKind kind = matcha::lib::engineKindFromEnvironment();
    try {
      s.hermite = matcha::gpu::makeHermiteEngine(kind);
    } catch (const matcha::Error& error) {
      throw EngineError(error.what());
    }
  }
  return *s.hermite;
}

void requireCounts(int ni, int nj) {
  if (ni < 0 || nj < 0) {
    throw InputError("negative particle count (ni = " + std::to_string(ni) + ", nj = " + std::to_string(nj) + ")");
  }
}

void requireArray(const void* array, int count, const char* name) {
  if (array == nullptr && count > 0) throw InputError(std::string(name) + " is null");
}

/// Every coordinate finite and within the float engines' range (gpu/engine_factory.hpp: kMaxFloatLength); `what`
/// names the array in the message.
void requireVectors(const double (*v)[3], int count, const char* what, bool positions) {
  for (int k = 0; k < count; ++k) {
    for (int d = 0; d < 3; ++d) {
      if (!std::isfinite(v[k][d])) {
        throw InputError(std::string(what) + "[" + std::to_string(k) + "][" + std::to_string(d) + "] is not finite");
      }
      if (positions && std::abs(v[k][d]) > 0.5 * matcha::gpu::kMaxFloatLength) {
        throw InputError(std::string(what) + "[" + std::to_string(k) + "][" + std::to_string(d) +
                         "] lies beyond 2^29 length units, outside the float engines' range: rescale the lengths");
      }
    }
  }
}

void requireMasses(const double* m, int count) {
  for (int k = 0; k < count; ++k) {
    if (!std::isfinite(m[k])) throw InputError("mj[" + std::to_string(k) + "] is not finite");
  }
}

void requireSoftening(double eps2) {
  if (!(eps2 >= 0.0) || !std::isfinite(eps2)) throw InputError("eps2 must be finite and >= 0");
  if (eps2 > matcha::gpu::kMaxFloatLength * matcha::gpu::kMaxFloatLength) {
    throw InputError("eps2 exceeds 2^60, outside the float engines' range: rescale the lengths");
  }
}

/// 21 bits of each coordinate interleaved (Morton order) over the i-particles' bounding box.
std::uint64_t mortonKey(const double* x, const double* lo, double scale) {
  std::uint64_t key = 0;
  for (int d = 0; d < 3; ++d) {
    auto cell = static_cast<std::uint64_t>(std::min(2097151.0, std::max(0.0, (x[d] - lo[d]) * scale)));
    // Spread the 21 bits to every third position.
    cell = (cell | cell << 32) & 0x1f00000000ffffULL;
    cell = (cell | cell << 16) & 0x1f0000ff0000ffULL;
    cell = (cell | cell << 8) & 0x100f00f00f00f00fULL;
    cell = (cell | cell << 4) & 0x10c30c30c30c30c3ULL;
    cell = (cell | cell << 2) & 0x1249249249249249ULL;
    key |= cell << d;
  }
  return key;
}

/// s.order: the i-particles in Morton order.
void orderAlongACurve(State& s, const double (*xi)[3], int ni) {
  double lo[3], hi[3];
  for (int d = 0; d < 3; ++d) {
    lo[d] = hi[d] = xi[0][d];
    for (int k = 1; k < ni; ++k) {
      lo[d] = std::min(lo[d], xi[k][d]);
      hi[d] = std::max(hi[d], xi[k][d]);
    }
  }
  const double side = std::max({hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]});
  const double scale = side > 0.0 ? 2097151.0 / side : 0.0;
  s.keys.resize(ni);
  s.order.resize(ni);
  for (int k = 0; k < ni; ++k) s.keys[k] = mortonKey(xi[k], lo, scale);
  std::iota(s.order.begin(), s.order.end(), 0u);
  std::sort(s.order.begin(), s.order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return s.keys[a] < s.keys[b] || (s.keys[a] == s.keys[b] && a < b);
  });
}

void computeForces(const double (*xj)[3], const double* mj, const double (*xi)[3], double eps2, double (*a)[3], int ni,
                   int nj) {
  State& s = state();
  if (nj == 0) {  // nothing pulls
    for (int i = 0; i < ni; ++i) a[i][0] = a[i][1] = a[i][2] = 0.0;
    return;
  }
  matcha::NearFieldEngine& engine = forceEngine(s);
  const std::size_t total = std::size_t(ni) + std::size_t(nj);
  for (auto* array : {&s.x, &s.y, &s.z, &s.mass, &s.ax, &s.ay, &s.az}) array->resize(total);
  orderAlongACurve(s, xi, ni);
  for (int k = 0; k < ni; ++k) {
    const std::uint32_t i = s.order[k];
    s.x[k] = xi[i][0];
    s.y[k] = xi[i][1];
    s.z[k] = xi[i][2];
    s.mass[k] = 0.0;
  }
  for (int j = 0; j < nj; ++j) {
    s.x[ni + j] = xj[j][0];
    s.y[ni + j] = xj[j][1];
    s.z[ni + j] = xj[j][2];
    s.mass[ni + j] = mj[j];
  }
  const matcha::SourceView sources{s.x.data(), s.y.data(), s.z.data(), s.mass.data(), total};
  const matcha::ForceView out{s.ax.data(), s.ay.data(), s.az.data(), nullptr, total};
  matcha::GravityParams gravity;
  gravity.G = 1.0;
  gravity.eps = std::sqrt(eps2);
  // i-blocks of the engines' own direct-summation blocks: 64 bodies on the CPU, 256 on the GPU (its direct kernel's
  // rows). The GPU's plan kernel expands each group's list into j indices, so the groups of one call are capped at
  // 2^27 list entries (512 MiB), and bigger calls run in batches.
  const std::uint32_t blockSize = s.onGpu ? 256u : 64u;
  const std::size_t groupsPerBatch = std::max<std::size_t>(1, (std::size_t{1} << 27) / std::size_t(nj));
  const std::size_t batch = groupsPerBatch * blockSize;
  const BodyRange list{static_cast<std::uint32_t>(ni), static_cast<std::uint32_t>(total)};
  for (std::size_t first = 0; first < std::size_t(ni); first += batch) {
    const BodyRange targets{static_cast<std::uint32_t>(first),
                            static_cast<std::uint32_t>(std::min<std::size_t>(ni, first + batch))};
    const matcha::InteractionPlan plan = matcha::gpu::makeDirectPlan(sources, blockSize, targets, list);
    engine.evaluatePlan(sources, matcha::CellMultipoles{}, plan, gravity, out);
  }
  for (int k = 0; k < ni; ++k) {
    const std::uint32_t i = s.order[k];
    a[i][0] = s.ax[k];
    a[i][1] = s.ay[k];
    a[i][2] = s.az[k];
  }
}

void computeForcesAndJerks(const double (*xj)[3], const double (*vj)[3], const double* mj, const double (*xi)[3],
                           const double (*vi)[3], double eps2, double (*a)[3], double (*jerk)[3], double* pot, int ni,
                           int nj) {
  State& s = state();
  matcha::HermiteEngine& engine = hermiteEngine(s);
  if (engine.capacity() < std::size_t(nj)) engine.reserve(std::size_t(nj));
  s.particles.resize(nj);
  s.addresses.resize(nj);
  for (int j = 0; j < nj; ++j) {
    matcha::JParticle& p = s.particles[j];
    p = matcha::JParticle{};
    p.mass = mj[j];
    p.id = j;
    for (int d = 0; d < 3; ++d) {
      p.pos[d] = xj[j][d];
      p.vel[d] = vj[j][d];
    }
    s.addresses[j] = static_cast<std::uint32_t>(j);
  }
  engine.setJParticles(s.addresses, s.particles);
  engine.predict(0.0, std::size_t(nj));  // every j at its own time 0: the prediction is the identity
  s.acc.resize(3 * std::size_t(ni));
  s.jerk.resize(3 * std::size_t(ni));
  s.pot.resize(ni);
  // No ids: the i-particles are not j-particles, and nothing is skipped but the coincident pairs of eps2 = 0.
  const matcha::IBlockView block{nullptr, ni > 0 ? &xi[0][0] : nullptr, ni > 0 ? &vi[0][0] : nullptr, std::size_t(ni)};
  engine.launchForces(
      block, eps2,
      {s.acc.data(), s.jerk.data(), pot != nullptr ? s.pot.data() : nullptr, nullptr, nullptr, std::size_t(ni)});
  engine.finishForces();
  // Written only now, so that a failure leaves the caller's arrays untouched.
  if (ni > 0) {
    std::memcpy(&a[0][0], s.acc.data(), 3 * std::size_t(ni) * sizeof(double));
    std::memcpy(&jerk[0][0], s.jerk.data(), 3 * std::size_t(ni) * sizeof(double));
    if (pot != nullptr) std::memcpy(pot, s.pot.data(), std::size_t(ni) * sizeof(double));
  }
}

}  // namespace

extern "C" {

int matcha_force(const double xj[][3], const double mj[], const double xi[][3], double eps2, double a[][3], int ni,
                 int nj) {
  return guarded("matcha_force", [&] {
    requireCounts(ni, nj);
    requireArray(xj, nj, "xj");
    requireArray(mj, nj, "mj");
    requireArray(xi, ni, "xi");
    requireArray(a, ni, "a");
    requireSoftening(eps2);
    requireVectors(xj, nj, "xj", true);
    requireMasses(mj, nj);
    requireVectors(xi, ni, "xi", true);
    if (ni > 0) computeForces(xj, mj, xi, eps2, a, ni, nj);
  });
}

int matcha_force_jerk(const double xj[][3], const double vj[][3], const double mj[], const double xi[][3],
                      const double vi[][3], double eps2, double a[][3], double jerk[][3], double pot[], int ni,
                      int nj) {
  return guarded("matcha_force_jerk", [&] {
    requireCounts(ni, nj);
    requireArray(xj, nj, "xj");
    requireArray(vj, nj, "vj");
    requireArray(mj, nj, "mj");
    requireArray(xi, ni, "xi");
    requireArray(vi, ni, "vi");
    requireArray(a, ni, "a");
    requireArray(jerk, ni, "jerk");
    requireSoftening(eps2);
    requireVectors(xj, nj, "xj", true);
    requireVectors(vj, nj, "vj", false);
    requireMasses(mj, nj);
    requireVectors(xi, ni, "xi", true);
    requireVectors(vi, ni, "vi", false);
    if (ni > 0) computeForcesAndJerks(xj, vj, mj, xi, vi, eps2, a, jerk, pot, ni, nj);
  });
}

const char* matcha_force_last_error(void) { return lastError.c_str(); }

const char* matcha_force_engine(void) {
  const int status = guarded("matcha_force_engine", [&] {
    State& s = state();
    s.engineNames = forceEngine(s).name() + "; jerk: " + hermiteEngine(s).name();
  });
  return status == MATCHA_FORCE_OK ? state().engineNames.c_str() : nullptr;
}

const char* matcha_force_version(void) { return MATCHA_FORCE_VERSION; }

int matcha_force_close(void) {
  return guarded("matcha_force_close", [&] {
    State& s = state();
    s.engine.reset();
    s.hermite.reset();
    s.onGpu = false;
    s.engineNames.clear();
  });
}

}  // extern "C"
