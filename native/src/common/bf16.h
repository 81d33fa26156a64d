// bfloat16 is the top half of an IEEE float32: widening is a 16-bit shift, exactly.
#pragma once

#include <cstdint>
#include <cstring>

#include "math/common.h"

namespace tirl {

TIRL_HD inline float bf16_to_f32(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

}  // namespace tirl
