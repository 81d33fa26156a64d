// sequenceLogprobs's and sequenceLogprobsBackward's C ABI entries: their checks, then their
// backend.
#include <vector>

#include "api/dispatch.h"
#include "common/validate.h"

namespace tirl {
namespace {

tirl_status check_common(const uint8_t* mask, int64_t num_tokens, const int32_t*& seq_offsets,
                         int64_t num_seqs, const float* per_token, const char* per_token_name,
                         const float* per_seq, const char* per_seq_name, tirl_device device,
                         const char* op, std::vector<int32_t>& private_offsets) {
  tirl_status s;
  if ((s = check_count(num_tokens, op, "num_tokens")) || (s = check_count(num_seqs, op, "num_seqs")) ||
      (s = check_pointer(mask, num_tokens, op, "mask")) ||
      (s = check_pointer(per_token, num_tokens, op, per_token_name)) ||
      (s = check_pointer(per_seq, num_seqs, op, per_seq_name)) ||
      (s = check_device(device, op))) {
    return s;
  }
  // On CUDA the offsets are in device memory: the kernel checks them.
  if (device.type == TIRL_DEVICE_CUDA) {
    if ((s = check_offset_range(num_tokens, op))) return s;
    return check_pointer(seq_offsets, 1, op, "seq_offsets");
  }
  use_private_copy(seq_offsets, num_seqs + 1, private_offsets);
  return check_seq_offsets(seq_offsets, num_seqs, num_tokens, op);
}

}  // namespace
}  // namespace tirl

extern "C" tirl_status tirl_sequence_logprobs(const float* logp, const uint8_t* mask,
                                              int64_t num_tokens, const int32_t* seq_offsets,
                                              int64_t num_seqs, int32_t average, float* out,
                                              tirl_device device) {
  using namespace tirl;
  constexpr const char* kOp = op_name::sequence_logprobs;
  return guarded([&]() -> tirl_status {
    std::vector<int32_t> private_offsets;
    if (tirl_status s = check_common(mask, num_tokens, seq_offsets, num_seqs, logp, "logp", out,
                                     "out", device, kOp, private_offsets)) {
      return s;
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.sequence_logprobs(logp, mask, num_tokens, seq_offsets, num_seqs, average, out,
                                       device);
    });
  });
}

extern "C" tirl_status tirl_sequence_logprobs_backward(const float* grad_seq, const uint8_t* mask,
                                                       int64_t num_tokens,
                                                       const int32_t* seq_offsets,
                                                       int64_t num_seqs, int32_t average,
                                                       float* grad_logp, tirl_device device) {
  using namespace tirl;
  constexpr const char* kOp = op_name::sequence_logprobs_backward;
  return guarded([&]() -> tirl_status {
    std::vector<int32_t> private_offsets;
    if (tirl_status s = check_common(mask, num_tokens, seq_offsets, num_seqs, grad_logp,
                                     "grad_logp", grad_seq, "grad_seq", device, kOp,
                                     private_offsets)) {
      return s;
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.sequence_logprobs_backward(grad_seq, mask, num_tokens, seq_offsets, num_seqs,
                                                average, grad_logp, device);
    });
  });
}
