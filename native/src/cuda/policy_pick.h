// The token picks of 'clip_cov' and 'kl_cov' on the GPU (cuda/policy_pick.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tirl/tirl.h"

namespace tirl::cuda {

// Writes selected[t] = 1 for the tokens o.policy_loss (TIRL_POLICY_CLIP_COV or
// TIRL_POLICY_KL_COV) picks, 0 elsewhere, and their number to the device word
// *selected_count, ordered on `stream`: the CPU's pick for the same data and seed.
tirl_status pick_policy_tokens(const char* op, const float* logp, const float* old_logp,
                               const float* advantages, const uint8_t* mask, int64_t num_tokens,
                               const tirl_policy_loss_options& o, uint8_t* selected,
                               unsigned long long* selected_count, cudaStream_t stream);

}  // namespace tirl::cuda
