// Feedback masking (MATH.md): only action tokens of kept trajectories are trained on.
#pragma once

#include <cstdint>

#include "math/common.h"
#include "tirl/tirl.h"

namespace tirl {

TIRL_HD inline uint8_t feedback_mask_value(uint8_t role, bool keep_sequence) {
  return (keep_sequence && role == TIRL_ROLE_ACTION) ? 1 : 0;
}

TIRL_HD inline bool valid_role(uint8_t role) { return role <= TIRL_ROLE_PADDING; }

}  // namespace tirl
