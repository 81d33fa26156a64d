// A float's IEEE-754 bits and back, and a select built on them: the building blocks of the
// branch-free per-element formulas (compiled for the host and, by nvcc, for the device).
#pragma once

#include <cstdint>
#include <cstring>

#include "math/common.h"

namespace tirl {

TIRL_HD inline uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

TIRL_HD inline float bits_float(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// The same for a double.
TIRL_HD inline uint64_t double_bits(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

TIRL_HD inline double bits_double(uint64_t bits) {
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// c ? a : b as bit operations: a ?: chain lets the compiler join branches into PHIs that
// its if-conversion gives up on, and then the token loop does not vectorise.
TIRL_HD inline float select(bool c, float a, float b) {
  const uint32_t all = 0u - static_cast<uint32_t>(c);
  return bits_float((float_bits(a) & all) | (float_bits(b) & ~all));
}

}  // namespace tirl
