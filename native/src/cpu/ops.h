// The CPU backend: one function per op of ops.def, with the signature of its C ABI function
// (host pointers; `device` is the CPU). Called by the front door (api/<op>.cc) after its
// checks, with host index arrays already copied and checked; they validate nothing.
#pragma once

#include "common/cuda_backend.h"
#include "tirl/tirl.h"

namespace tirl::cpu {

#define TIRL_OP(name, public_name, params, args) \
  tirl_status name(TIRL_EXPAND params, tirl_device device);
#include "ops.def"
#undef TIRL_OP

// The table of the functions above (cpu/backend.cc).
const tirl_op_table& backend();

// ppoLoss's clipped surrogate (cpu/ppo_loss.cc), which policy_loss runs for 'vanilla'.
tirl_status clipped_surrogate(const float* logp, const float* old_logp, const float* advantages,
                              const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                              int64_t num_seqs, const float* ref_logp, const float* weights,
                              const tirl_ppo_options* options, float* grad, tirl_ppo_result* result,
                              tirl_device device);

}  // namespace tirl::cpu
