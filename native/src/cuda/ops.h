// The CUDA implementations the backend table points at; one per op file, each with the
// signature of its C ABI function (pointers are device pointers).
#pragma once

#include "tirl/tirl.h"

namespace tirl::cuda {

tirl_status feedback_mask(const uint8_t* roles, int64_t num_tokens, const int32_t* seq_offsets,
                          int64_t num_seqs, const uint8_t* keep, uint8_t* mask,
                          int32_t* action_tokens, tirl_device device);

}  // namespace tirl::cuda
