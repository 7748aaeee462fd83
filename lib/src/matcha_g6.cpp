// SPDX-License-Identifier: MIT
// libmatcha_g6 (include/matcha_g6.h): the GRAPE-6 API on matcha's Hermite engines (core/hermite_engine.hpp). A
// cluster is one Hermite engine; g6_set_j_particle hands each particle to it (the engine buffers them on the host until
// the next prediction), g6calc_firsthalf predicts (only when the time, nj or a j-particle changed since the last
// prediction) and launches, g6calc_lasthalf finishes and unpacks.
#include "matcha_g6.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "c_boundary.hpp"
#include "matcha/core/hermite_engine.hpp"
#include "matcha/gpu/engine_factory.hpp"

namespace {

using matcha::InputError;
using matcha::lib::EngineError;
using matcha::lib::Failure;

constexpr int kMaxClusters = 64;
constexpr long long kDefaultPipes = 256;
constexpr long long kDefaultNjMax = 4194304;

/// A g6 call on a cluster that is not open (MATCHA_G6_ERROR_NOT_OPEN).
class NotOpenError : public matcha::Error {
 public:
  using Error::Error;
};
/// g6calc_lasthalf without a matching firsthalf (MATCHA_G6_ERROR_NO_CALC).
class NoCalcError : public matcha::Error {
 public:
  using Error::Error;
};

struct Cluster {
  std::unique_ptr<matcha::HermiteEngine> engine;
  std::string engineName;
  std::size_t njmax = 0;
  std::size_t addressesSet = 0;  ///< one past the highest address set: nj may not exceed it
  double ti = 0.0;
  // The last prediction: repeated only when the time, nj or a j-particle changed.
  bool predicted = false;
  double predictedTime = 0.0;
  int predictedNj = 0;
  bool jChanged = true;
  // The calc in flight: copies of the i-particles (the caller may reuse its arrays after firsthalf) and the results.
  bool pending = false;
  int pendingNi = 0;
  std::vector<std::int64_t> ids;
  std::vector<double> pos, vel, acc, jerk, pot, nearestDistance2;
  std::vector<std::int64_t> nearestId;
};

struct State {
  std::mutex mutex;
  std::array<std::unique_ptr<Cluster>, kMaxClusters> clusters;
};

State& state() {
  static State instance;
  return instance;
}

thread_local std::string lastError;

int codeOf(Failure failure) {
  switch (failure) {
    case Failure::argument:
      return MATCHA_G6_ERROR_ARGUMENT;
    case Failure::engine:
      return MATCHA_G6_ERROR_ENGINE;
    case Failure::device:
      return MATCHA_G6_ERROR_DEVICE;
    case Failure::memory:
      return MATCHA_G6_ERROR_MEMORY;
    case Failure::internal:
      break;
  }
  return MATCHA_G6_ERROR_INTERNAL;
}

/// Runs `body` under the library's lock; the return code and the thread's last error come from what it threw.
template <class Body>
int guarded(const char* call, Body&& body) {
  Failure failure = Failure::internal;
  std::string message;
  int code = MATCHA_G6_OK;
  const bool ok = matcha::lib::runGuarded(
      [&] {
        try {
          const std::lock_guard<std::mutex> lock(state().mutex);
          body();
        } catch (const NotOpenError& error) {
          code = MATCHA_G6_ERROR_NOT_OPEN;
          message = error.what();
        } catch (const NoCalcError& error) {
          code = MATCHA_G6_ERROR_NO_CALC;
          message = error.what();
        }
      },
      failure, message);
  if (!ok) code = codeOf(failure);
  lastError = code == MATCHA_G6_OK ? std::string() : std::string(call) + ": " + message;
  return code;
}

void requireClusterId(int clusterid) {
  if (clusterid < 0 || clusterid >= kMaxClusters) {
    throw InputError("clusterid " + std::to_string(clusterid) + " outside 0.." + std::to_string(kMaxClusters - 1));
  }
}

Cluster& openCluster(int clusterid) {
  requireClusterId(clusterid);
  Cluster* cluster = state().clusters[clusterid].get();
  if (cluster == nullptr) throw NotOpenError("cluster " + std::to_string(clusterid) + " is not open (g6_open)");
  return *cluster;
}

void requireFinite(const double* values, int count, const char* what) {
  for (int k = 0; k < count; ++k) {
    if (!std::isfinite(values[k])) throw InputError(std::string(what) + " is not finite");
  }
}

void requireNotNull(const void* array, const char* what) {
  if (array == nullptr) throw InputError(std::string(what) + " is null");
}

/// Drops a calc in flight, waiting for the engine so that it can take the next one.
void dropPending(Cluster& cluster) {
  if (!cluster.pending) return;
  cluster.pending = false;
  cluster.engine->finishForces();
}

int openG6(int clusterid) {
  return guarded("g6_open", [&] {
    requireClusterId(clusterid);
    auto cluster = std::make_unique<Cluster>();
    cluster->njmax = static_cast<std::size_t>(
        matcha::lib::integerFromEnvironment("MATCHA_G6_NJMAX", kDefaultNjMax, std::numeric_limits<int>::max()));
    matcha::lib::integerFromEnvironment("MATCHA_G6_NPIPES", kDefaultPipes, 1 << 20);  // refused here, not later
    const matcha::EngineKind kind = matcha::lib::engineKindFromEnvironment();
    try {
      cluster->engine = matcha::gpu::makeHermiteEngine(kind);
    } catch (const matcha::Error& error) {
      throw EngineError(error.what());
    }
    cluster->engineName = cluster->engine->name();
    state().clusters[clusterid] = std::move(cluster);  // an open cluster is replaced: a fresh one
  });
}

int closeG6(int clusterid) {
  return guarded("g6_close", [&] {
    openCluster(clusterid);
    state().clusters[clusterid].reset();
  });
}

int npipes() {
  int pipes = static_cast<int>(kDefaultPipes);
  // A malformed MATCHA_G6_NPIPES is reported by g6_open; here it gives the default.
  guarded("g6_npipes", [&] {
    pipes = static_cast<int>(matcha::lib::integerFromEnvironment("MATCHA_G6_NPIPES", kDefaultPipes, 1 << 20));
  });
  return pipes;
}

int setUnit(const char* call) {
  return guarded(call, [] {});
}

int setTime(int clusterid, double ti) {
  return guarded("g6_set_ti", [&] {
    Cluster& cluster = openCluster(clusterid);
    if (!std::isfinite(ti)) throw InputError("ti is not finite");
    cluster.ti = ti;
  });
}

int setJParticle(int clusterid, int address, int index, double tj, double mass, const double* a2by18,
                 const double* a1by6, const double* aby2, const double* v, const double* x) {
  return guarded("g6_set_j_particle", [&] {
    Cluster& cluster = openCluster(clusterid);
    if (address < 0 || std::size_t(address) >= cluster.njmax) {
      throw InputError("address " + std::to_string(address) + " outside 0.." + std::to_string(cluster.njmax - 1) +
                       " (g6_getnjmax)");
    }
    for (const auto& [array, name] : {std::pair{a2by18, "a2by18"}, std::pair{a1by6, "a1by6"}, std::pair{aby2, "aby2"},
                                      std::pair{v, "v"}, std::pair{x, "x"}}) {
      requireNotNull(array, name);
      requireFinite(array, 3, name);
    }
    requireFinite(&tj, 1, "tj");
    requireFinite(&mass, 1, "mass");
    matcha::JParticle p;
    p.time = tj;
    p.mass = mass;
    p.id = index;
    for (int d = 0; d < 3; ++d) {  // GRAPE-6's scaled derivatives back to acceleration, jerk and snap
      p.pos[d] = x[d];
      p.vel[d] = v[d];
      p.acc[d] = 2.0 * aby2[d];
      p.jerk[d] = 6.0 * a1by6[d];
      p.snap[d] = 18.0 * a2by18[d];
    }
    matcha::HermiteEngine& engine = *cluster.engine;
    if (std::size_t(address) >= engine.capacity()) {
      // Grow by doubling (up to njmax): programs fill the j-memory one address at a time.
      engine.reserve(std::min(cluster.njmax, std::max<std::size_t>(std::size_t(address) + 1, 2 * engine.capacity())));
    }
    const auto slot = static_cast<std::uint32_t>(address);
    engine.setJParticles({&slot, 1}, {&p, 1});
    cluster.addressesSet = std::max(cluster.addressesSet, std::size_t(address) + 1);
    cluster.jChanged = true;
  });
}

int firstHalf(int clusterid, int nj, int ni, const int* index, const double (*xi)[3], const double (*vi)[3],
              double eps2) {
  return guarded("g6calc_firsthalf", [&] {
    Cluster& cluster = openCluster(clusterid);
    if (ni < 0 || nj < 0) {
      throw InputError("negative count (ni = " + std::to_string(ni) + ", nj = " + std::to_string(nj) + ")");
    }
    matcha::HermiteEngine& engine = *cluster.engine;
    if (std::size_t(nj) > cluster.addressesSet) {
      throw InputError("nj = " + std::to_string(nj) + " exceeds the j-particles set (addresses 0.." +
                       std::to_string(static_cast<long long>(cluster.addressesSet) - 1) + ")");
    }
    if (!(eps2 >= 0.0) || !std::isfinite(eps2)) throw InputError("eps2 must be finite and >= 0");
    if (ni > 0) {
      requireNotNull(index, "index");
      requireNotNull(xi, "xi");
      requireNotNull(vi, "vi");
      requireFinite(&xi[0][0], 3 * ni, "an i-particle position");
      requireFinite(&vi[0][0], 3 * ni, "an i-particle velocity");
    }
    dropPending(cluster);  // a firsthalf after a firsthalf: GRAPE-6 restarts the calculation
    if (!cluster.predicted || cluster.jChanged || cluster.predictedTime != cluster.ti || cluster.predictedNj != nj) {
      engine.predict(cluster.ti, std::size_t(nj));
      cluster.predicted = true;
      cluster.jChanged = false;
      cluster.predictedTime = cluster.ti;
      cluster.predictedNj = nj;
    }
    const std::size_t n = std::size_t(ni);
    cluster.ids.assign(index, index + n);
    cluster.pos.assign(n > 0 ? &xi[0][0] : nullptr, n > 0 ? &xi[0][0] + 3 * n : nullptr);
    cluster.vel.assign(n > 0 ? &vi[0][0] : nullptr, n > 0 ? &vi[0][0] + 3 * n : nullptr);
    cluster.acc.resize(3 * n);
    cluster.jerk.resize(3 * n);
    cluster.pot.resize(n);
    cluster.nearestId.resize(n);
    cluster.nearestDistance2.resize(n);
    engine.launchForces({cluster.ids.data(), cluster.pos.data(), cluster.vel.data(), n}, eps2,
                        {cluster.acc.data(), cluster.jerk.data(), cluster.pot.data(), cluster.nearestId.data(),
                         cluster.nearestDistance2.data(), n});
    cluster.pending = true;
    cluster.pendingNi = ni;
  });
}

int lastHalf(const char* call, int clusterid, int ni, double (*acc)[3], double (*jerk)[3], double* pot, int* nnbindex) {
  return guarded(call, [&] {
    Cluster& cluster = openCluster(clusterid);
    if (!cluster.pending) throw NoCalcError("no g6calc_firsthalf to finish on cluster " + std::to_string(clusterid));
    if (ni != cluster.pendingNi) {
      dropPending(cluster);
      throw NoCalcError("ni = " + std::to_string(ni) + " differs from the firsthalf's " +
                        std::to_string(cluster.pendingNi) + " (the calc is dropped)");
    }
    const bool complete = ni == 0 || (acc != nullptr && jerk != nullptr && pot != nullptr);
    dropPending(cluster);  // waits for the engine's results
    if (!complete) throw InputError("acc, jerk or pot is null");
    const std::size_t n = std::size_t(ni);
    for (std::size_t i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) {
        acc[i][d] = cluster.acc[3 * i + d];
        jerk[i][d] = cluster.jerk[3 * i + d];
      }
      pot[i] = cluster.pot[i];
    }
    if (nnbindex != nullptr) {
      for (std::size_t i = 0; i < n; ++i) nnbindex[i] = static_cast<int>(cluster.nearestId[i]);
    }
  });
}

/// g6_initialize_jp_buffer, g6_flush_jp_buffer: accepted on an open cluster.
int acceptOnOpen(const char* call, int clusterid) {
  return guarded(call, [&] { openCluster(clusterid); });
}

int reset(const char* call, int clusterid) {
  return guarded(call, [&] { dropPending(openCluster(clusterid)); });
}

int njmax(int clusterid) {
  int value = 0;
  const int status = guarded("g6_getnjmax", [&] { value = static_cast<int>(openCluster(clusterid).njmax); });
  return status == MATCHA_G6_OK ? value : status;
}

/// Fortran: every argument by reference. A null pointer for a scalar is an argument error, never a crash.
template <class T>
bool present(const T* p) {
  return p != nullptr;
}
int nullScalar(const char* call) {
  return guarded(call, [] { throw InputError("a scalar argument is null"); });
}

}  // namespace

extern "C" {

int g6_open(int clusterid) { return openG6(clusterid); }
int g6_close(int clusterid) { return closeG6(clusterid); }
int g6_npipes(void) { return npipes(); }
int g6_set_tunit(int) { return setUnit("g6_set_tunit"); }
int g6_set_xunit(int) { return setUnit("g6_set_xunit"); }
int g6_set_ti(int clusterid, double ti) { return setTime(clusterid, ti); }
int g6_set_j_particle(int clusterid, int address, int index, double tj, double, double mass, double a2by18[3],
                      double a1by6[3], double aby2[3], double v[3], double x[3]) {
  return setJParticle(clusterid, address, index, tj, mass, a2by18, a1by6, aby2, v, x);
}
int g6calc_firsthalf(int clusterid, int nj, int ni, int index[], double xi[][3], double vi[][3], double[][3],
                     double[][3], double[], double eps2, double[]) {
  return firstHalf(clusterid, nj, ni, index, xi, vi, eps2);
}
int g6calc_lasthalf(int clusterid, int, int ni, int[], double[][3], double[][3], double, double[], double acc[][3],
                    double jerk[][3], double pot[]) {
  return lastHalf("g6calc_lasthalf", clusterid, ni, acc, jerk, pot, nullptr);
}
int g6calc_lasthalf2(int clusterid, int, int ni, int[], double[][3], double[][3], double, double[], double acc[][3],
                     double jerk[][3], double pot[], int nnbindex[]) {
  if (nnbindex == nullptr && ni > 0) {
    return guarded("g6calc_lasthalf2", [] { throw InputError("nnbindex is null"); });
  }
  return lastHalf("g6calc_lasthalf2", clusterid, ni, acc, jerk, pot, nnbindex);
}
int g6_initialize_jp_buffer(int clusterid, int size) {
  if (size < 0) return guarded("g6_initialize_jp_buffer", [] { throw InputError("negative buffer size"); });
  return acceptOnOpen("g6_initialize_jp_buffer", clusterid);
}
int g6_flush_jp_buffer(int clusterid) { return acceptOnOpen("g6_flush_jp_buffer", clusterid); }
int g6_reset(int clusterid) { return reset("g6_reset", clusterid); }
int g6_reset_fofpga(int clusterid) { return reset("g6_reset_fofpga", clusterid); }
int g6_getnjmax(int clusterid) { return njmax(clusterid); }

int g6_open_(int* clusterid) { return present(clusterid) ? openG6(*clusterid) : nullScalar("g6_open_"); }
int g6_close_(int* clusterid) { return present(clusterid) ? closeG6(*clusterid) : nullScalar("g6_close_"); }
int g6_npipes_(void) { return npipes(); }
int g6_set_tunit_(int*) { return setUnit("g6_set_tunit_"); }
int g6_set_xunit_(int*) { return setUnit("g6_set_xunit_"); }
int g6_set_ti_(int* clusterid, double* ti) {
  return present(clusterid) && present(ti) ? setTime(*clusterid, *ti) : nullScalar("g6_set_ti_");
}
int g6_set_j_particle_(int* clusterid, int* address, int* index, double* tj, double*, double* mass, double a2by18[3],
                       double a1by6[3], double aby2[3], double v[3], double x[3]) {
  if (!present(clusterid) || !present(address) || !present(index) || !present(tj) || !present(mass)) {
    return nullScalar("g6_set_j_particle_");
  }
  return setJParticle(*clusterid, *address, *index, *tj, *mass, a2by18, a1by6, aby2, v, x);
}
int g6calc_firsthalf_(int* clusterid, int* nj, int* ni, int index[], double xi[][3], double vi[][3], double[][3],
                      double[][3], double[], double* eps2, double[]) {
  if (!present(clusterid) || !present(nj) || !present(ni) || !present(eps2)) return nullScalar("g6calc_firsthalf_");
  return firstHalf(*clusterid, *nj, *ni, index, xi, vi, *eps2);
}
int g6calc_lasthalf_(int* clusterid, int* nj, int* ni, int index[], double xi[][3], double vi[][3], double* eps2,
                     double h2[], double acc[][3], double jerk[][3], double pot[]) {
  if (!present(clusterid) || !present(nj) || !present(ni)) return nullScalar("g6calc_lasthalf_");
  return g6calc_lasthalf(*clusterid, *nj, *ni, index, xi, vi, present(eps2) ? *eps2 : 0.0, h2, acc, jerk, pot);
}
int g6calc_lasthalf2_(int* clusterid, int* nj, int* ni, int index[], double xi[][3], double vi[][3], double* eps2,
                      double h2[], double acc[][3], double jerk[][3], double pot[], int nnbindex[]) {
  if (!present(clusterid) || !present(nj) || !present(ni)) return nullScalar("g6calc_lasthalf2_");
  return g6calc_lasthalf2(*clusterid, *nj, *ni, index, xi, vi, present(eps2) ? *eps2 : 0.0, h2, acc, jerk, pot,
                          nnbindex);
}
int g6_initialize_jp_buffer_(int* clusterid, int* size) {
  return present(clusterid) && present(size) ? g6_initialize_jp_buffer(*clusterid, *size)
                                             : nullScalar("g6_initialize_jp_buffer_");
}
int g6_flush_jp_buffer_(int* clusterid) {
  return present(clusterid) ? g6_flush_jp_buffer(*clusterid) : nullScalar("g6_flush_jp_buffer_");
}
int g6_reset_(int* clusterid) { return present(clusterid) ? g6_reset(*clusterid) : nullScalar("g6_reset_"); }
int g6_reset_fofpga_(int* clusterid) {
  return present(clusterid) ? g6_reset_fofpga(*clusterid) : nullScalar("g6_reset_fofpga_");
}
int g6_getnjmax_(int* clusterid) { return present(clusterid) ? g6_getnjmax(*clusterid) : nullScalar("g6_getnjmax_"); }

const char* matcha_g6_last_error(void) { return lastError.c_str(); }

const char* matcha_g6_engine(int clusterid) {
  const char* name = nullptr;
  guarded("matcha_g6_engine", [&] { name = openCluster(clusterid).engineName.c_str(); });
  return name;
}

const char* matcha_g6_version(void) { return MATCHA_G6_VERSION; }

}  // extern "C"
