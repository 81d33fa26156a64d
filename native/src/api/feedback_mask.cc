// feedbackMask's C ABI entry: its checks, then its backend.
#include <vector>

#include "api/dispatch.h"
#include "common/validate.h"

namespace {
constexpr const char* kOp = tirl::op_name::feedback_mask;
}

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
        (s = check_pointer(mask, num_tokens, kOp, "mask")) || (s = check_device(device, kOp))) {
      return s;
    }
    std::vector<int32_t> private_offsets;
    if (device.type == TIRL_DEVICE_CUDA) {
      // seq_offsets and roles are in device memory: the CUDA kernel validates them.
      if ((s = check_pointer(seq_offsets, 1, kOp, "seq_offsets")) ||
          (s = check_offset_range(num_tokens, kOp))) {
        return s;
      }
    } else {
      // The roles are checked by the CPU kernel as it reads them.
      use_private_copy(seq_offsets, num_seqs + 1, private_offsets);
      if ((s = check_seq_offsets(seq_offsets, num_seqs, num_tokens, kOp))) return s;
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.feedback_mask(roles, num_tokens, seq_offsets, num_seqs, keep, mask,
                                   action_tokens, device);
    });
  });
}
