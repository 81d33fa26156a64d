// bfloat16 is the top half of an IEEE float32: widening is a 16-bit shift, exactly.
#pragma once

#include <cstdint>

#include "math/common.h"
#include "math/float_bits.h"

namespace tirl {

TIRL_HD inline float bf16_to_f32(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

}  // namespace tirl
