// SPDX-License-Identifier: MIT
#include "memory_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/hermite_engine.hpp"
#include "matcha/gpu/memory_model.hpp"
#include "matcha/integrator/run_loop.hpp"
#include "matcha/mesh/particle_mesh.hpp"
#include "matcha/tree/memory_estimate.hpp"

namespace matcha::app {

namespace {

/// The program itself: code, the C++, TBB and HDF5 runtimes, thread stacks (17 MB resident for a run of 1000 bodies).
constexpr std::uint64_t kProgramBytes = std::uint64_t{16} << 20;

/// A bound on what the estimate allocates per body on top of the bodies (keys, sort buffers, tree-order copies, the
/// tree, accelerations and balls; its peak measured at 156 bytes per body on a Plummer sphere of 2^20), for
/// requireBodiesFit.
constexpr std::uint64_t kEstimateBytesPerBody = 200;

constexpr std::uint64_t kUnknown = std::numeric_limits<std::uint64_t>::max();

std::string gib(std::uint64_t bytes) {
  char text[32];
  const double value = double(bytes) / double(std::uint64_t{1} << 30);
  std::snprintf(text, sizeof text, value < 10.0 ? "%.2f GiB" : "%.1f GiB", value);
  return text;
}

}  // namespace

std::string formatBytes(std::uint64_t bytes) {
  if (bytes >= (std::uint64_t{1} << 30)) return gib(bytes);
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / double(std::uint64_t{1} << 20));
  return text;
}

namespace {

std::string mib(std::uint64_t bytes) {
  if (bytes == 0) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", double(bytes) / double(std::uint64_t{1} << 20));
  return text;
}

/// The number in the first line of `path`, or kUnknown when the file is missing or holds no number ("max").
std::uint64_t readNumber(const std::string& path) {
  std::ifstream file(path);
  std::uint64_t value = 0;
  if (!(file >> value)) return kUnknown;
  return value;
}

/// The value of `key` in a "key value" file (memory.stat), or 0.
std::uint64_t readKey(const std::string& path, const std::string& key) {
  std::ifstream file(path);
  std::string name;
  std::uint64_t value = 0;
  while (file >> name >> value) {
    if (name == key) return value;
  }
  return 0;
}

/// kB of MemAvailable in /proc/meminfo, in bytes; kUnknown when absent.
std::uint64_t memAvailable() {
  std::ifstream file("/proc/meminfo");
  std::string line;
  while (std::getline(file, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) return std::strtoull(line.c_str() + 13, nullptr, 10) * 1024;
  }
  return kUnknown;
}

/// What this process's memory cgroup still allows: its limit less its usage, page cache (reclaimable) not counted
/// as used. cgroup v2 (memory.max) and v1 (memory.limit_in_bytes); kUnknown without a limit.
std::uint64_t cgroupAvailable() {
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  std::vector<std::string> directories;
  while (std::getline(self, line)) {
    if (line.rfind("0::", 0) == 0) {
      directories.push_back("/sys/fs/cgroup" + line.substr(3));
    } else if (const std::size_t at = line.find(":memory:"); at != std::string::npos) {
      directories.push_back("/sys/fs/cgroup/memory" + line.substr(at + 8));
    }
  }
  // Inside a container the paths in /proc/self/cgroup may not exist under /sys/fs/cgroup; its root is the group.
  directories.push_back("/sys/fs/cgroup");
  directories.push_back("/sys/fs/cgroup/memory");
  std::uint64_t available = kUnknown;
  for (const std::string& directory : directories) {
    std::uint64_t limit = readNumber(directory + "/memory.max");
    std::uint64_t usage = readNumber(directory + "/memory.current");
    std::uint64_t cache = readKey(directory + "/memory.stat", "file");
    if (limit == kUnknown) {
      limit = readNumber(directory + "/memory.limit_in_bytes");
      usage = readNumber(directory + "/memory.usage_in_bytes");
      cache = readKey(directory + "/memory.stat", "total_cache");
    }
    // v1 reports "no limit" as a huge number.
    if (limit == kUnknown || usage == kUnknown || limit >= (std::uint64_t{1} << 60)) continue;
    const std::uint64_t used = usage > cache ? usage - cache : 0;
    available = std::min(available, limit > used ? limit - used : 0);
  }
  return available;
}

/// MATCHA_MEMORY_LIMIT in bytes, kUnknown when unset.
std::uint64_t environmentLimit() {
  const char* text = std::getenv("MATCHA_MEMORY_LIMIT");
  if (text == nullptr || *text == '\0') return kUnknown;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  double scale = 1.0;
  if (*end != '\0') {
    const std::string suffix = end;
    const std::string units = "KMGT";
    const std::size_t power = units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0]))));
    if (suffix.size() != 1 || power == std::string::npos) {
      throw InputError(std::string("MATCHA_MEMORY_LIMIT must be a byte count, optionally with K, M, G or T (got '") +
                       text + "')");
    }
    scale = std::pow(1024.0, double(power + 1));
  }
  if (end == text || !(value >= 0.0) || !std::isfinite(value)) {
    throw InputError(std::string("MATCHA_MEMORY_LIMIT must be a byte count, optionally with K, M, G or T (got '") +
                     text + "')");
  }
  return static_cast<std::uint64_t>(std::min(value * scale, 1.8e19));
}

/// --background-output on: the outputs' copy of the bodies (io::BackgroundWriter), kept for the whole run, where
/// the run fits in the available host memory with it; else the outputs are written in place, which needs no copy
/// (the largest runs: at 2^28 bodies the copy is 25.8 GB of the H200 host's 128). Called with every other part added.
void addBackgroundOutput(RunMemory& memory, std::uint64_t numBodies, bool on) {
  memory.backgroundOutput = false;
  if (!on) return;
  const std::uint64_t copy = numBodies * kBytesPerBody;
  const std::uint64_t host = availableHostBytes();
  if (host != 0 && memory.estimate.hostBytes + copy > host) {
    memory.backgroundCopyBytes = copy;
    return;
  }
  memory.backgroundOutput = true;
  memory.estimate.add("outputs written in the background (a copy of the bodies)", copy);
}

}  // namespace

RunMemory estimateRunMemory(const Options& options, const Particles& particles, bool onGpu, bool directPotentials,
                            std::optional<std::uint64_t> numSteps, int meshRanks) {
  RunMemory memory;
  memory.onGpu = onGpu;
  memory.numSteps = numSteps ? *numSteps
                             : integrator::checkedStepCount(options.integrator.tEnd - options.integrator.tStart,
                                                            options.integrator.dt);
  MemoryEstimate& estimate = memory.estimate;
  const std::uint64_t n = particles.size();
  if (options.solver == SolverKind::tree) {
    const bool periodic = options.gravity.periodic.enabled();
    // The periodic solver keeps one tree, built within its call (tree/periodic_tree_solver.hpp): sized as a tree per
    // call, plus what its reuse keeps of the bodies (positions at the build and along their paths, ids, two balls).
    // Its engine holds two list sets when the walk is pipelined (--walk-overlap on), each at most one batch (a quarter
    // of the groups, or kPlanEntries entries): at most half the groups' lists, which the model below of every group's
    // list resident, at the open-boundary lengths the cut lists never exceed, already covers.
    TreeParams sized = options.tree;
    if (periodic) sized.reuse = 1;
    const tree::TreeRunShape shape = tree::treeRunShape(sized, memory.numSteps, options.integrator.dt, onGpu);
    memory.reuseSteps = shape.reachesReuse() ? shape.reuseSteps : 1;
    memory.sizes = tree::estimateTreeSolverMemory(particles, sized, options.gravity, shape, estimate);
    gpu::addEngineTreeMemory(memory.sizes, onGpu, estimate);
    if (options.tree.sortOnDevice) gpu::addEngineKeySortMemory(n, onGpu, estimate);
    if (periodic && options.tree.reuse != 1 && (options.tree.reuse != 0 || onGpu)) {
      estimate.add("periodic tree reuse", n * (6 * sizeof(double) + sizeof(std::uint64_t) + 2 * sizeof(float)));
    }
    if (options.tree.predictOnDevice && options.tree.advanceOnDevice && shape.buildsInBackground(options.tree) &&
        !periodic) {
      gpu::addEngineTreePredictionMemory(n, onGpu, estimate);
    }
  } else {
    // The direct solver sorts the bodies along a Hilbert curve before each sum (run_command.cpp: makeSolver): keys,
    // and for the sort its (key, index) pairs and their scratch, the sorted keys and the order; then the bodies'
    // permutation scratch.
    estimate.numBodies = n;
    estimate.add("bodies", n * kBytesPerBody);
    estimate.add("Hilbert sort", n * (2 * sizeof(std::uint64_t) + 2 * 16 + sizeof(std::uint32_t) + sizeof(double)));
  }
  // Periodic runs: the mesh's grids. The tree's part above is modelled on open-boundary lists, which the short range's
  // (cut at r_cut) never exceed.
  // On the CUDA engine the mesh is cuFFT's (options.cpp: makeSolver): its grids on the device, pinned results and
  // staging on the host.
  if (options.gravity.periodic.enabled()) {
    if (meshRanks > 1 && onGpu) {
      // In slabs over the ranks (distributed_run.cpp: --pm-ranks), each on its rank's GPU.
      const mesh::SlabMeshBytes slab = mesh::gpuSlabMeshMemoryBytes(options.mesh, meshRanks, n);
      estimate.add("particle mesh (cuFFT slabs)", slab.host, slab.device);
    } else if (meshRanks > 1) {
      estimate.add("particle mesh (FFTW slabs)", mesh::slabMeshMemoryBytes(options.mesh, meshRanks, n));
    } else if (onGpu) {
      // Pinned on the host: the results and the bodies' staging, 4 doubles a body each (mesh/cuda/gpu_mesh.cu).
      estimate.add("particle mesh (cuFFT)", n * 8 * sizeof(double), mesh::meshDeviceMemoryBytes(options.mesh, n));
    } else {
      estimate.add("particle mesh", mesh::meshMemoryBytes(options.mesh, n));
    }
  }
  if (options.solver == SolverKind::direct || directPotentials) gpu::addEngineDirectMemory(n, onGpu, estimate);
  // Direct potentials at outputs take the accelerations into scratch arrays (run_command.cpp: DirectPotentials).
  if (directPotentials) estimate.add("direct potentials' scratch", n * 3 * sizeof(double));
  // The run keeps a copy of the last state whose values were all finite (integrator/run_loop.hpp: onNonFinite).
  estimate.add("last good state", n * kBytesPerBody);
  estimate.add("program and libraries", kProgramBytes);
  addBackgroundOutput(memory, n, options.backgroundOutput);
  return memory;
}

RunMemory estimateHermiteRunMemory(std::uint64_t numBodies, bool backgroundOutput) {
  RunMemory memory;
  MemoryEstimate& estimate = memory.estimate;
  const std::uint64_t n = numBodies;
  estimate.numBodies = n;
  estimate.add("bodies", n * kBytesPerBody);
  // Per body: its time, step and next time, its jerk (HermiteIntegrator); for a block of every body (the first call,
  // the outputs' potentials): ids, predicted positions and velocities, new accelerations, jerks and potentials, the
  // criteria, the j-particles handed over, and the block's indices three times over (block, last block, search).
  constexpr std::uint64_t kIntegratorBytes =
      6 * sizeof(double) + sizeof(std::int64_t) + 13 * sizeof(double) + sizeof(JParticle) + 4 * sizeof(std::uint32_t);
  estimate.add("Hermite integrator (per-body state, block scratch)", n * kIntegratorBytes);
  // The CPU engine's j-memory (one JParticle a slot) and its prediction (positions, velocities, mass, id).
  estimate.add("Hermite engine (j-particles and their prediction)", n * (sizeof(JParticle) + 8 * sizeof(double)));
  estimate.add("last good state", n * kBytesPerBody);
  estimate.add("program and libraries", kProgramBytes);
  addBackgroundOutput(memory, n, backgroundOutput);
  return memory;
}

std::uint64_t availableHostBytes() {
  const std::uint64_t available = std::min({memAvailable(), cgroupAvailable(), environmentLimit()});
  return available == kUnknown ? 0 : available;
}

std::uint64_t deviceFreeBytes(int device) {
  const gpu::CudaMemoryInfo info = gpu::queryCudaMemory(device);
  return info.available ? info.freeBytes : 0;
}

void requireBodiesFit(std::uint64_t numBodies, bool measuresTree) {
  if (numBodies > kMaxBodies) {
    throw InputError("at most 2^31 - 1 bodies are supported (got " + std::to_string(numBodies) + ")");
  }
  const std::uint64_t available = availableHostBytes();
  const std::uint64_t perBody = kBytesPerBody + (measuresTree ? kEstimateBytesPerBody : 0);
  const std::uint64_t needed = numBodies * perBody + kProgramBytes;
  if (available != 0 && needed > available) {
    throw InputError(std::to_string(numBodies) + " bodies need more than " + formatBytes(needed) +
                     " of host memory just to hold the bodies" +
                     (measuresTree ? std::string(" and measure their tree") : std::string()) + " (" +
                     formatBytes(available) + " available)");
  }
}

void requireRunFits(const RunMemory& memory) {
  const MemoryEstimate& estimate = memory.estimate;
  const std::uint64_t host = availableHostBytes();
  if (host != 0 && estimate.hostBytes > host) {
    throw InputError("this run needs ~" + formatBytes(estimate.hostBytes) + " of host memory (" + formatBytes(host) +
                     " available); use fewer bodies" +
                     (memory.reuseSteps > 1 ? std::string(", a smaller --reuse") : std::string()) +
                     " (matcha run --dry-run shows where it goes)");
  }
  if (memory.onGpu) {
    const std::uint64_t device = deviceFreeBytes();
    if (device != 0 && estimate.deviceBytes > device) {
      throw InputError("this run needs ~" + formatBytes(estimate.deviceBytes) + " of GPU memory (" +
                       formatBytes(device) +
                       " free); use fewer bodies, a smaller --reuse or --engine cpu (matcha run --dry-run shows where "
                       "it goes)");
    }
  }
}

std::string backgroundOutputDropped(const RunMemory& memory) {
  return "outputs: written in place, not in the background: their copy of the bodies (~" +
         formatBytes(memory.backgroundCopyBytes) + ") would not fit in the host memory available";
}

std::string formatRunMemory(const RunMemory& memory) {
  const MemoryEstimate& estimate = memory.estimate;
  std::ostringstream text;
  char line[160];
  if (memory.sizes.numGroups > 0) {
    const TreeSizes& s = memory.sizes;
    std::snprintf(line, sizeof line,
                  "trees of %llu cells and %llu groups; lists of %.0f cells + %.0f j-bodies (%.0f ranges) per group "
                  "(from %llu groups walked)\n",
                  static_cast<unsigned long long>(s.numCells), static_cast<unsigned long long>(s.numGroups),
                  s.cellsPerGroup(), s.bodiesPerGroup(), s.rangesPerGroup(),
                  static_cast<unsigned long long>(s.numSampledGroups));
    text << line;
    if (memory.reuseSteps > 1) {
      text << "sized for trees that serve " << memory.reuseSteps << " steps each (reuse)\n";
    }
    if (s.residentGroups < s.numGroups) text << "the lists stream: the engine holds one batch at a time\n";
  }
  std::snprintf(line, sizeof line, "  %-36s %12s %12s\n", "memory (MiB)", "host", memory.onGpu ? "device" : "");
  text << line;
  for (const MemoryPart& part : estimate.parts) {
    std::snprintf(line, sizeof line, "  %-36s %12s %12s\n", part.name.c_str(), mib(part.hostBytes).c_str(),
                  mib(part.deviceBytes).c_str());
    text << line;
  }
  std::snprintf(line, sizeof line, "  %-36s %12s %12s\n", "total", mib(estimate.hostBytes).c_str(),
                memory.onGpu ? mib(estimate.deviceBytes).c_str() : "");
  text << line;
  // Per body without the program's fixed share, which would swamp it for small runs.
  const double n = double(std::max<std::uint64_t>(estimate.numBodies, 1));
  std::snprintf(line, sizeof line, "  %-36s %12.0f %12s\n", "bytes per body (less the program)",
                double(estimate.hostBytes - std::min(estimate.hostBytes, kProgramBytes)) / n,
                memory.onGpu ? std::to_string(std::llround(double(estimate.deviceBytes) / n)).c_str() : "");
  text << line;
  const std::uint64_t host = availableHostBytes();
  text << "host: needs ~" << formatBytes(estimate.hostBytes) << ", "
       << (host != 0 ? formatBytes(host) + " available: " + (estimate.hostBytes <= host ? "fits" : "does NOT fit")
                     : std::string("available memory unknown"))
       << "\n";
  if (memory.backgroundCopyBytes > 0) text << backgroundOutputDropped(memory) << "\n";
  if (memory.onGpu) {
    const std::uint64_t device = deviceFreeBytes();
    text << "device: needs ~" << formatBytes(estimate.deviceBytes) << ", "
         << (device != 0 ? formatBytes(device) + " free: " + (estimate.deviceBytes <= device ? "fits" : "does NOT fit")
                         : std::string("free memory unknown"))
         << "\n";
  }
  return text.str();
}

std::string runMemoryJson(const RunMemory& memory) {
  const MemoryEstimate& estimate = memory.estimate;
  nlohmann::json parts = nlohmann::json::array();
  for (const MemoryPart& part : estimate.parts) {
    parts.push_back({{"name", part.name}, {"host_bytes", part.hostBytes}, {"device_bytes", part.deviceBytes}});
  }
  const std::uint64_t host = availableHostBytes();
  nlohmann::json json = {{"dry_run", true},
                         {"bodies", estimate.numBodies},
                         {"steps", memory.numSteps},
                         {"engine_on_gpu", memory.onGpu},
                         {"host_bytes", estimate.hostBytes},
                         {"device_bytes", estimate.deviceBytes},
                         {"host_available_bytes", host},
                         {"fits", (host == 0 || estimate.hostBytes <= host)},
                         {"list_entries", estimate.listEntries},
                         {"list_bodies", estimate.listBodies},
                         {"reuse_steps_sized_for", memory.reuseSteps},
                         {"background_output", memory.backgroundOutput},
                         {"parts", parts}};
  if (memory.sizes.numGroups > 0) {
    json["tree"] = {{"cells", memory.sizes.numCells},
                    {"groups", memory.sizes.numGroups},
                    {"sampled_groups", memory.sizes.numSampledGroups},
                    {"list_cells", memory.sizes.listCells},
                    {"list_ranges", memory.sizes.listRanges},
                    {"list_bodies", memory.sizes.listBodies}};
  }
  if (memory.onGpu) {
    const std::uint64_t device = deviceFreeBytes();
    json["device_free_bytes"] = device;
    json["fits"] = json["fits"].get<bool>() && (device == 0 || estimate.deviceBytes <= device);
  }
  return json.dump(2);
}

}  // namespace matcha::app
