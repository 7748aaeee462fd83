// SPDX-License-Identifier: MIT
#include "matcha/core/particles.hpp"

#include <cmath>
#include <string>

#include "matcha/core/errors.hpp"

namespace matcha {

void Particles::resize(std::size_t count) {
  for (auto* array : {&x, &y, &z, &vx, &vy, &vz, &mass, &ax, &ay, &az, &pot}) array->resize(count, 0.0);
  id.resize(count, 0);
}

void Particles::resizeWithRoom(std::size_t count) {
  const std::size_t room = count + count / 8;
  for (auto* array : {&x, &y, &z, &vx, &vy, &vz, &mass, &ax, &ay, &az, &pot}) {
    if (count > array->capacity()) array->reserve(room);
  }
  if (count > id.capacity()) id.reserve(room);
  resize(count);
}

namespace {
template <class T>
void permuteArray(std::vector<T>& values, std::span<const std::uint32_t> order, std::vector<T>& scratch) {
  scratch.resize(values.size());
  for (std::size_t i = 0; i < order.size(); ++i) scratch[i] = values[order[i]];
  values.swap(scratch);
}
}  // namespace

void Particles::permute(std::span<const std::uint32_t> order) {
  MATCHA_ASSERT(order.size() == size(), "permutation length differs from particle count");
  std::vector<double> scratch;
  for (auto* array : {&x, &y, &z, &vx, &vy, &vz, &mass, &ax, &ay, &az, &pot}) permuteArray(*array, order, scratch);
  std::vector<std::uint64_t> idScratch;
  permuteArray(id, order, idScratch);
  if (timeBin.size() == size()) {
    std::vector<std::uint8_t> binScratch;
    permuteArray(timeBin, order, binScratch);
  }
}

void Particles::validate() const {
  for (std::size_t i = 0; i < size(); ++i) {
    const bool finite = std::isfinite(x[i]) && std::isfinite(y[i]) && std::isfinite(z[i]) && std::isfinite(vx[i]) &&
                        std::isfinite(vy[i]) && std::isfinite(vz[i]) && std::isfinite(mass[i]);
    if (!finite)
      throw InputError("body " + std::to_string(i) + " (id " + std::to_string(id[i]) +
                       ") has a NaN or infinite position, velocity or mass");
    if (mass[i] <= 0.0)
      throw InputError("body " + std::to_string(i) + " (id " + std::to_string(id[i]) + ") has mass <= 0");
  }
}

double wrapIntoBox(double x, double boxSize) {
  if (x >= 0.0 && x < boxSize) return x + 0.0;  // + 0.0: -0.0 becomes +0.0, every other value stays
  if (!std::isfinite(x)) return x;
  const double wrapped = x - boxSize * std::floor(x / boxSize);
  // floor of a quotient that rounded up leaves a tiny negative remainder; one that rounded down leaves L itself.
  return wrapped >= 0.0 && wrapped < boxSize ? wrapped + 0.0 : 0.0;
}

double driftedCoordinate(double x, double v, const BodyDrift& drift) {
  // This file is built with -ffp-contract=off, as the integrator: no fused multiply-add.
  x += v * drift.drift;
  x += 0.0;
  return x >= 0.0 && x < drift.boxSize ? x : wrapIntoBox(x, drift.boxSize);
}

void wrapIntoBox(Particles& particles, double boxSize) {
  for (std::size_t i = 0; i < particles.size(); ++i) {
    particles.x[i] = wrapIntoBox(particles.x[i], boxSize);
    particles.y[i] = wrapIntoBox(particles.y[i], boxSize);
    particles.z[i] = wrapIntoBox(particles.z[i], boxSize);
  }
}

}  // namespace matcha
