#include <algorithm>
#include <string>
#include <vector>

#include "common/cuda.h"
#include "common/parallel.h"
#include "common/validate.h"
#include "math/feedback_mask.h"

namespace tirl {
namespace {

constexpr const char* kOp = "feedbackMask";

// Sequences are independent, so they are the chunks; each writes only its own tokens.
constexpr int64_t kSequencesPerChunk = 64;

tirl_status feedback_mask_cpu(const uint8_t* roles, const int32_t* seq_offsets, int64_t num_seqs,
                              const uint8_t* keep, uint8_t* mask, int32_t* action_tokens) {
  const int64_t num_chunks = chunk_count(num_seqs, kSequencesPerChunk);
  std::vector<int64_t> first_bad_token(static_cast<size_t>(num_chunks), -1);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kSequencesPerChunk;
    const int64_t last = std::min(num_seqs, first + kSequencesPerChunk);
    for (int64_t s = first; s < last; ++s) {
      const bool keep_sequence = keep == nullptr || keep[s] != 0;
      int32_t count = 0;
      bool all_valid = true;
      for (int64_t t = seq_offsets[s]; t < seq_offsets[s + 1]; ++t) {
        const uint8_t role = roles[t];
        all_valid &= valid_role(role);
        const uint8_t m = feedback_mask_value(role, keep_sequence);
        mask[t] = m;
        count += m;
      }
      if (action_tokens != nullptr) action_tokens[s] = count;
      if (!all_valid && first_bad_token[chunk] < 0) {
        for (int64_t t = seq_offsets[s]; t < seq_offsets[s + 1]; ++t) {
          if (!valid_role(roles[t])) {
            first_bad_token[chunk] = t;
            break;
          }
        }
      }
    }
  };
  parallel_for(num_chunks, body);
  for (int64_t bad : first_bad_token) {
    if (bad >= 0) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": expected roles in 0..3 (prompt, action, feedback, padding) "
                  "but roles[" + std::to_string(bad) + "] = " + std::to_string(roles[bad]));
    }
  }
  return ok();
}

}  // namespace
}  // namespace tirl

extern "C" tirl_status tirl_feedback_mask(const uint8_t* roles, int64_t num_tokens,
                                          const int32_t* seq_offsets, int64_t num_seqs,
                                          const uint8_t* keep, uint8_t* mask,
                                          int32_t* action_tokens, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_count(num_tokens, kOp, "num_tokens")) ||
        (s = check_count(num_seqs, kOp, "num_seqs")) ||
        (s = check_pointer(roles, num_tokens, kOp, "roles")) ||
        (s = check_pointer(mask, num_tokens, kOp, "mask")) ||
        (s = check_device(device, kOp))) {
      return s;
    }
    if (device.type == TIRL_DEVICE_CUDA) {
      // seq_offsets and roles are in device memory: the CUDA kernel validates them.
      if ((s = check_pointer(seq_offsets, 1, kOp, "seq_offsets"))) return s;
      return run_on_cuda(kOp, [&](const tirl_cuda_backend& cuda) {
        return cuda.feedback_mask(roles, num_tokens, seq_offsets, num_seqs, keep, mask,
                                  action_tokens, device);
      });
    }
    if ((s = check_seq_offsets(seq_offsets, num_seqs, num_tokens, kOp))) return s;
    return feedback_mask_cpu(roles, seq_offsets, num_seqs, keep, mask, action_tokens);
  });
}
