// Sequence log-probs (MATH.md): the sum, or the mean, of a sequence's masked token log-probs.
#pragma once

#include <cstdint>

#include "math/common.h"

namespace tirl {

// A sequence's value from its masked sum and count: the mean gives a sequence with no
// masked tokens 0 (not 0/0).
TIRL_HD inline float sequence_logprob(double masked_sum, int64_t masked_count, bool average) {
  if (!average) return static_cast<float>(masked_sum);
  return masked_count > 0 ? static_cast<float>(masked_sum / static_cast<double>(masked_count)) : 0.0f;
}

// d sequence_logprob / d logp of each of its masked tokens, times the incoming gradient.
TIRL_HD inline float sequence_logprob_token_grad(float grad_seq, int64_t masked_count, bool average) {
  if (!average) return grad_seq;
  return masked_count > 0 ? static_cast<float>(static_cast<double>(grad_seq) / static_cast<double>(masked_count))
                          : 0.0f;
}

}  // namespace tirl
