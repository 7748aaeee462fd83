// SPDX-License-Identifier: MIT
// Run parameters, one plain struct per module. Every default is written here and nowhere else (STYLE.md habit 7);
// the CLI, the parameter file and the snapshot /Parameters group all read these defaults.
#pragma once

#include <cstdint>
#include <string>

namespace matcha {

/// The short range of periodic TreePM gravity (GravityParams::periodic). In a cube of side boxSize > 0 every pair is
/// taken at its nearest image and pulls with the erfc-truncated law of split radius r_s, nothing at all beyond r_cut
/// (pair_interaction.hpp: accumulateTruncatedPairInteraction); a particle mesh adds the long range
/// (mesh/treepm_solver.hpp, which derives these three numbers from its MeshParams so that mesh and tree agree).
/// boxSize 0, the default, is open-boundary gravity: every other field is then ignored.
struct PeriodicSplit {
  double boxSize = 0.0;       ///< L (length units); 0: open boundaries
  double splitRadius = 0.0;   ///< r_s (length units)
  double cutoffRadius = 0.0;  ///< r_cut (length units)

  bool enabled() const { return boxSize != 0.0; }
  /// Throws InputError, one line, unless boxSize is 0, or finite and > 0 with 0 < r_s <= r_cut < L/2: only one image
  /// of a source may lie within r_cut of a body, since the short range takes the nearest image alone.
  void validate() const;
};

/// Gravity and softening, shared by every solver and engine.
struct GravityParams {
  double G = 1.0;            ///< gravitational constant; 1 in N-body units
  double eps = 1.0 / 256.0;  ///< Plummer softening length (length units); 0 allowed
  /// Periodic TreePM short range instead of the Newtonian pull (engines that support it: NearFieldEngine::periodic);
  /// off by default.
  PeriodicSplit periodic;

  double eps2() const { return eps * eps; }
  /// Throws InputError on eps < 0, NaN or inf, or G <= 0, or an invalid periodic split.
  void validate() const;
  /// A copy with softening `softening` (ForceSolver::setSoftening), validated.
  GravityParams withSoftening(double softening) const;
};

/// Order of the cells' multipole expansion: monopole (centre of mass) or monopole plus the traceless quadrupole.
enum class MultipoleOrder { monopole, quadrupole };

/// Tree construction and walk.
struct TreeParams {
  double theta = 0.5;  ///< opening angle of the Barnes-Hut criterion, in (0, 1.5]
  // ncrit 256 since groups pack consecutive small siblings (tree/groups.hpp: 173 bodies per group on a Plummer
  // sphere): against ncrit 64 (44 per group), on Plummer 2^20 at theta 0.5, quad, alpha 1e-3 (bench/RESULTS.md), the
  // p99 error falls from 2.6e-4 to 2.1e-4 for 29% more interactions, at the same CPU engine time (2 cores) and the
  // same GPU kernel time (H200: 34.6 and 35.0 ms at 2^22), with 4x fewer groups to walk (the walk 2.5x faster on the
  // H200's host). With ncrit 64 before packing, nleaf 4 or 8 was fastest on the CPU engine; nleaf 16 5-10% slower.
  std::uint32_t ncrit = 256;  ///< most bodies in one group (one interaction list per group); >= 1
  std::uint32_t nleaf = 8;    ///< most bodies in one leaf cell (a leaf holds more only at the deepest level); >= 1
  /// Cells act as monopoles or as monopole + traceless quadrupole. The quadrupole costs ~2x per body-cell interaction
  /// and reaches a given force error with far fewer interactions (README "Accuracy").
  MultipoleOrder multipole = MultipoleOrder::quadrupole;
  /// Relative opening tolerance (GADGET's ErrTolForceAcc, on top of theta): a cell that passes the theta test is
  /// still opened while its leading truncated term, G M b^p / d^(p+2) (p = 2 for monopole cells, 3 for quadrupole),
  /// exceeds alpha times the smallest previous |a| in the group. 0 turns the test off (theta alone). At 1e-3 it cuts
  /// the p99 error of a Plummer sphere (2^20, theta 0.5, quad) from 5.1e-4 to 3.0e-4 for 2.5% more interactions: the
  /// theta test accepts massive cells (the core, seen from the halo) as readily as light ones (bench/RESULTS.md).
  double alpha = 1e-3;
  /// Calls one tree and its interaction lists serve (DESIGN.md §4): 1 builds a tree for every force call; K > 1 builds
  /// each tree for the positions predicted over the next K calls, every cell accepted with room for the predicted
  /// motion, and the engine refits it to each call's positions in between; 0 (the default) chooses K from measured
  /// costs (tree/tree_solver.hpp). Lists are checked against the opening criterion at every call whatever K is.
  std::uint32_t reuse = 0;
  /// With reuse, build each next tree in the background, on the CPU cores, while the engine evaluates the calls
  /// before it is due (false: every tree is built within the call that needs it). With reuse 1 on an engine that keeps
  /// its own copy of the bodies (the CUDA engine, with advanceOnDevice), each call's own tree is built so, during the
  /// call before (tree/tree_solver.hpp: buildsFreshTreesAhead).
  bool pipeline = true;
  /// With reuse and an engine that keeps its own copy of the bodies (the CUDA engine): when the integrator says how it
  /// moves the bodies between calls (ForceSolver::expectAdvance), the engine advances its copy itself instead of
  /// receiving the positions every call, and the next call's evaluation is launched as this call ends, so that the
  /// GPU works while the host kicks and drifts (false: positions are uploaded at every call, after the drift).
  bool advanceOnDevice = true;
  /// Sort each tree's space-filling-curve keys on the engine's device where it offers that (NearFieldEngine::sortKeys:
  /// the CUDA engine, from 2^16 bodies) instead of on the host's cores; the same order either way, so the same forces.
  bool sortOnDevice = true;
  /// With advanceOnDevice: an engine that keeps its own copy of the bodies predicts each background-built tree's inputs
  /// on its device (NearFieldEngine::predictsTrees: the balls, lowest |a|, keys, their sort and the gather into the
  /// tree's order) within the launch of the tree's first call, instead of the host's passes over the bodies; the same
  /// bits either way, so the same trees and forces (false: the host predicts, as with the CPU engine).
  bool predictOnDevice = true;
  /// With advanceOnDevice: at a tree's last call, wait for the next tree's background build and launch the next call
  /// on it ahead (true), rather than do so only when the build is already done (false). Waiting there puts the host's
  /// integration after the build instead of beside it, which at reuse 2 (the CPU building all the time) made the step
  /// 10-30% slower on the H200 host; the results are the same bits either way. Tests set it to see every tree's
  /// first call launched ahead, whatever the timing.
  bool adoptAheadWaits = false;
  /// The periodic tree solver (tree/periodic_tree_solver.hpp) walks its groups in batches and has the engine evaluate
  /// each batch while it walks the next: an engine on a device (NearFieldEngine::evaluatesOnDevice) evaluates on a
  /// second host thread, beside the walk on the cores; others evaluate each batch after walking it. The forces are
  /// those of one plan of all groups, bit for bit (NearFieldEngine::evaluatePlanBatch). false: every group walked into
  /// one plan, then evaluated (the sequential call; an engine on a device takes the bodies and cells during the walk).
  /// The open-boundary solver always overlaps. On by default since the CUDA engine runs a call's batches in a
  /// pipeline (each batch's lists go over while the batch before's kernels run, and the call waits only at its last
  /// batch): a fresh 2^24 call on the H200 (`matcha ic clumps`, compare's call) 315-320 ms against 351-367
  /// sequential; a 256^3 comoving box's first steps 714 against 812 ms a step (bench/RESULTS.md, 2026-12-02). Before
  /// the pipeline the batches' downloads and the GPU idle between them cost more than the overlap hid.
  bool overlapWalk = true;
  /// Upper bound on the list entries (cells + j-bodies) the engine keeps at once: 4 bytes each on the GPU, in two
  /// arenas indexed in 32 bits. Repairs add to a tree's entries up to 5/4 of the bound (3.75 * 2^30 < 2^32 at most);
  /// a repair beyond is evaluated on its own and the next call builds anew. Beyond the bound (N ~ 2^25 and up at the
  /// defaults) the lists stream: walked, evaluated and dropped batch by batch, every call.
  std::uint64_t maxBatchEntries = std::uint64_t{3} << 30;

  /// Throws InputError when a value is out of range.
  void validate() const;
};

/// Fixed-step leapfrog and output cadence.
struct IntegratorParams {
  double dt = 1.0 / 128.0;       ///< time step (N-body time units), > 0
  double tEnd = 1.0;             ///< end time of the run (absolute: not counted from tStart), >= tStart
  double outputInterval = 0.25;  ///< time between snapshots and diagnostics lines, > 0
  double tStart = 0.0;           ///< time of the initial conditions (an IC snapshot's Header Time), finite
  /// Wall-clock seconds between checkpoints (`matcha run --restart`), >= 0; 0: at every step where the solver can
  /// save its state. Checkpoints also follow an output when the last is a minute old (or the interval is shorter).
  double checkpointInterval = 900.0;
  /// Side L of a periodic box, whose drift folds every body back into [0, L)^3; 0: open boundaries, finite and >= 0.
  double boxSize = 0.0;

  void validate() const;
};

enum class SolverKind { tree, direct };
enum class EngineKind { automatic, cpu, cuda };

std::string toString(SolverKind kind);
std::string toString(EngineKind kind);
std::string toString(MultipoleOrder order);  ///< "mono" or "quad", the CLI's spelling

/// Throws InputError unless `value` is finite; `name` is the option name for the message.
void requireFinite(double value, const std::string& name);

}  // namespace matcha
