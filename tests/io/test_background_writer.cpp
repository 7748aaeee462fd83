// SPDX-License-Identifier: MIT
// Tests of io::BackgroundWriter: a write sees the bodies as they were when it was submitted, writes run one at a
// time in order, a write's error shows at the next submit() and at finish(), and the writer waits for its write when
// it goes away. Random bodies print their seed; set MATCHA_TEST_SEED to replay them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "matcha/core/errors.hpp"
#include "matcha/core/stopwatch.hpp"
#include "matcha/io/background_writer.hpp"
#include "matcha/io/snapshot.hpp"
#include "matcha/testing/generators.hpp"
#include "matcha/testing/scratch_dir.hpp"

namespace {

using matcha::IoError;
using matcha::Particles;
using matcha::io::BackgroundWriter;

/// A write that takes a while, so that the test's next steps overlap it.
void pause() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

TEST(BackgroundWriter, WritesTheBodiesAsTheyWereWhenSubmitted) {
  const std::uint64_t seed = matcha::testing::freshSeed();
  SCOPED_TRACE(matcha::testing::seedTrace(seed));
  const matcha::testing::ScratchDir dir("matcha-background");
  Particles bodies = matcha::testing::plummer(3000, seed);
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    bodies.ax[i] = 1.0 + double(i);  // the copy takes forces and potentials too
    bodies.pot[i] = -double(i);
  }
  const Particles submitted = bodies;
  matcha::io::SnapshotMetadata meta;
  meta.time = 0.25;
  BackgroundWriter writer;
  writer.submit(bodies, [path = dir / "a.hdf5", meta](const Particles& copy) {
    pause();
    matcha::io::writeSnapshot(path, copy, meta);
  });
  // The run goes on: the bodies move (and the arrays could even be reallocated) while the write is in flight.
  for (std::size_t i = 0; i < bodies.size(); ++i) bodies.x[i] += 1.0;
  bodies.resize(10);
  writer.finish();

  const matcha::io::Snapshot back = matcha::io::readSnapshot(dir / "a.hdf5");
  ASSERT_EQ(back.particles.size(), submitted.size());
  EXPECT_EQ(back.particles.x, submitted.x);
  EXPECT_EQ(back.particles.y, submitted.y);
  EXPECT_EQ(back.particles.z, submitted.z);
  EXPECT_EQ(back.particles.vx, submitted.vx);
  EXPECT_EQ(back.particles.vy, submitted.vy);
  EXPECT_EQ(back.particles.vz, submitted.vz);
  EXPECT_EQ(back.particles.ax, submitted.ax);
  EXPECT_EQ(back.particles.mass, submitted.mass);
  EXPECT_EQ(back.particles.id, submitted.id);
  EXPECT_EQ(back.particles.pot, submitted.pot);
  EXPECT_GT(writer.writerSeconds(), 0.04);
}

TEST(BackgroundWriter, WritesOneAtATimeInTheOrderSubmitted) {
  const Particles bodies = matcha::testing::plummer(100, 1);
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  BackgroundWriter writer;
  for (int k = 0; k < 4; ++k) {
    writer.submit(bodies, [&, k](const Particles& copy) {
      if (running.fetch_add(1) != 0) overlapped = true;
      pause();
      EXPECT_EQ(copy.size(), bodies.size());
      order.push_back(k);  // the writes run one after another: no lock needed, which the overlap check confirms
      running.fetch_sub(1);
    });
  }
  writer.finish();
  EXPECT_FALSE(overlapped.load());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_GE(writer.writerSeconds(), 4 * 0.04);
  // The first submit did not wait, the next three waited for the write before them.
  EXPECT_GE(writer.callerSeconds(), 3 * 0.04);
}

// A second file of the same state (a checkpoint after its snapshot) is written from the same copy after the first,
// without the caller waiting for the first; should the first fail, the second is not written and the error shows.
TEST(BackgroundWriter, ASecondFileOfTheSameBodiesFollowsTheFirstWithoutAWait) {
  Particles bodies = matcha::testing::plummer(100, 5);
  const Particles submitted = bodies;
  std::vector<int> order;
  BackgroundWriter writer;
  writer.submit(bodies, [&](const Particles&) {
    pause();
    pause();
    order.push_back(1);
  });
  for (std::size_t i = 0; i < bodies.size(); ++i) bodies.x[i] += 1.0;  // the run goes on
  const matcha::Stopwatch clock;
  writer.submitSameBodies([&](const Particles& copy) {
    EXPECT_EQ(copy.x, submitted.x);
    order.push_back(2);
  });
  EXPECT_LT(clock.seconds(), 0.05) << "the second file waited for the first";
  writer.finish();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_GE(writer.writerSeconds(), 0.09);

  bool second = false;
  writer.submit(bodies, [](const Particles&) { throw IoError("cannot write snapshot 'y': disk full"); });
  writer.submitSameBodies([&](const Particles&) { second = true; });
  EXPECT_THROW(writer.finish(), IoError);
  EXPECT_FALSE(second) << "written after the first write of its bodies failed";
}

TEST(BackgroundWriter, AWritesErrorShowsAtTheNextSubmitAndTheWriterGoesOn) {
  const Particles bodies = matcha::testing::plummer(100, 2);
  BackgroundWriter writer;
  writer.submit(bodies, [](const Particles&) { throw IoError("cannot write snapshot 'x': disk full"); });
  bool wrote = false;
  try {
    writer.submit(bodies, [&](const Particles&) { wrote = true; });
    FAIL() << "the first write's error was not thrown";
  } catch (const IoError& error) {
    EXPECT_STREQ(error.what(), "cannot write snapshot 'x': disk full");
  }
  EXPECT_FALSE(wrote) << "a submit that threw started its write";
  writer.submit(bodies, [&](const Particles&) { wrote = true; });
  writer.finish();
  EXPECT_TRUE(wrote);
  writer.finish();  // nothing in flight: returns at once
}

TEST(BackgroundWriter, FinishThrowsTheLastWritesError) {
  const Particles bodies = matcha::testing::plummer(100, 3);
  BackgroundWriter writer;
  writer.submit(bodies, [](const Particles&) {
    pause();
    throw IoError("cannot write checkpoint: no space left on device");
  });
  EXPECT_THROW(writer.finish(), IoError);
  EXPECT_NO_THROW(writer.finish());  // reported once
}

TEST(BackgroundWriter, WaitsForItsWriteWhenItGoesAway) {
  const Particles bodies = matcha::testing::plummer(100, 4);
  std::atomic<bool> done{false};
  {
    BackgroundWriter writer;
    writer.submit(bodies, [&](const Particles& copy) {
      pause();
      done = copy.size() == 100;
    });
  }
  EXPECT_TRUE(done.load());
}

}  // namespace
