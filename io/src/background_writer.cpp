// SPDX-License-Identifier: MIT
#include "matcha/io/background_writer.hpp"

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <utility>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"

namespace matcha::io {

namespace {

/// to <- from for the arrays a file takes (positions, velocities, masses, forces, potentials, ids), the arrays and
/// their blocks spread over the cores together (one array alone is bound by one core's share of the bandwidth).
void copyBodies(const Particles& from, Particles& to) {
  const std::size_t n = from.size();
  constexpr std::array members{&Particles::x,  &Particles::y,  &Particles::z,    &Particles::vx,
                               &Particles::vy, &Particles::vz, &Particles::mass, &Particles::ax,
                               &Particles::ay, &Particles::az, &Particles::pot};
  constexpr std::size_t kArrays = members.size() + 1;  // and the ids
  if (to.size() != n) {
    // The first copy allocates: one array a task, so that its pages are first touched (zeroed) on many cores, not one.
    tbb::parallel_for(std::size_t{0}, kArrays, [&](std::size_t array) {
      if (array == members.size()) {
        to.id.resize(n);
      } else {
        (to.*members[array]).resize(n);
      }
    });
  }
  tbb::parallel_for(tbb::blocked_range2d<std::size_t>(0, kArrays, 1, 0, n, std::size_t{1} << 16),
                    [&](const tbb::blocked_range2d<std::size_t>& range) {
                      const auto first = static_cast<std::ptrdiff_t>(range.cols().begin());
                      const auto last = static_cast<std::ptrdiff_t>(range.cols().end());
                      for (std::size_t array = range.rows().begin(); array != range.rows().end(); ++array) {
                        if (array == members.size()) {
                          std::copy(from.id.begin() + first, from.id.begin() + last, to.id.begin() + first);
                        } else {
                          const std::vector<double>& source = from.*members[array];
                          std::copy(source.begin() + first, source.begin() + last,
                                    (to.*members[array]).begin() + first);
                        }
                      }
                    });
}

}  // namespace

BackgroundWriter::~BackgroundWriter() {
  if (inFlight_.valid()) inFlight_.wait();
}

void BackgroundWriter::submit(const Particles& bodies, std::function<void(const Particles&)> write) {
  finish();
  const Stopwatch clock;
  copyBodies(bodies, copy_);
  copied_ = true;
  inFlight_ = std::async(std::launch::async, [this, write = std::move(write)] {
    const Stopwatch writing;
    write(copy_);
    return writing.seconds();
  });
  callerSeconds_ += clock.seconds();
}

void BackgroundWriter::submitSameBodies(std::function<void(const Particles&)> write) {
  MATCHA_ASSERT(copied_, "BackgroundWriter::submitSameBodies before any submit");
  inFlight_ = std::async(std::launch::async, [this, before = std::move(inFlight_), write = std::move(write)]() mutable {
    const double earlier = before.valid() ? before.get() : 0.0;  // its error ends this write
    const Stopwatch writing;
    write(copy_);
    return earlier + writing.seconds();
  });
}

void BackgroundWriter::finish() {
  if (!inFlight_.valid()) return;
  // The wait is the caller's time whether the write succeeded or threw.
  struct Charge {
    double& seconds;
    Stopwatch clock;
    ~Charge() { seconds += clock.seconds(); }
  } charge{callerSeconds_, {}};
  std::future<double> write = std::move(inFlight_);  // invalid from here on, whether get() throws or not
  writerSeconds_ += write.get();
}

}  // namespace matcha::io
