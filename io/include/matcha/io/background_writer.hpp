// SPDX-License-Identifier: MIT
// A run's snapshots and checkpoints written on a thread of their own while the run's steps go on.
#pragma once

#include <functional>
#include <future>

#include "matcha/core/particles.hpp"

namespace matcha::io {

/// Writes a run's files one at a time on a thread of its own, each from the writer's copy of the bodies, so that the
/// run's next steps go on meanwhile. A write is what the caller would have done in place (writeSnapshot,
/// writeCheckpoint: a temporary file, fsync, an atomic rename), so readers see the old file or the whole new one as
/// before. What changes is when a write's error shows: at the next submit() or at finish().
///
/// Why: at 256^3 bodies a snapshot is 1.6 GB and a checkpoint 2 GB, 1.5-2.5 s each of writing and fsync during which
/// the GPU and the other cores waited: ~5% of a cosmological run's wall time. The copy takes ~0.1 s on 16 cores.
///
/// Debian's HDF5 is not built thread-safe: while a write is in flight nothing else in the process may call HDF5, so a
/// caller that reads or writes HDF5 itself calls finish() first.
class BackgroundWriter {
 public:
  BackgroundWriter() = default;
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;
  /// Waits for the write in flight. Its error is dropped: a caller that ends normally calls finish(), which throws
  /// it; one that ends by an exception reports that exception.
  ~BackgroundWriter();

  /// Waits for the write in flight (throwing its error), copies every array of `bodies` but the time bins into the
  /// writer's buffer on all cores, and starts `write(copy)` on the writer's thread. `write` must own what it reads
  /// besides the copy.
  void submit(const Particles& bodies, std::function<void(const Particles&)> write);

  /// Starts `write(copy)` after the write in flight, from the copy the last submit() made, without waiting: a second
  /// file of that same state (a checkpoint right after its snapshot), which would otherwise wait for the first file
  /// and copy the bodies again. Should the write before fail, this one does not run and the error is thrown as
  /// submit()'s. Needs a submit() before.
  void submitSameBodies(std::function<void(const Particles&)> write);

  /// Waits for the write in flight, if any, and throws its error.
  void finish();

  /// Wall seconds the caller spent in submit() and finish(): the copies and the waits for a write still in flight.
  double callerSeconds() const { return callerSeconds_; }
  /// Wall seconds the finished writes took on the writer's thread, all together.
  double writerSeconds() const { return writerSeconds_; }

 private:
  Particles copy_;                ///< kept between writes: its memory is touched once, not at every output
  std::future<double> inFlight_;  ///< the last write started (it waits for the one before, where it was chained)
  bool copied_ = false;           ///< copy_ holds the bodies of a submit()
  double callerSeconds_ = 0.0;
  double writerSeconds_ = 0.0;
};

}  // namespace matcha::io
