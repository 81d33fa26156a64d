// tokenLogprobs's and tokenLogprobsBackward's C ABI entries: their checks, then their backend.
#include <limits>
#include <string>
#include <vector>

#include "api/dispatch.h"
#include "common/validate.h"

namespace tirl {
namespace {

// The checks both entry points share: sizes, pointers, dtype, temperature, labels.
tirl_status check_common(const char* op, const void* logits, tirl_dtype dtype, int64_t num_tokens,
                         int64_t vocab_size, const int32_t*& labels, double temperature,
                         tirl_device device, std::vector<int32_t>& private_labels) {
  tirl_status s;
  if ((s = check_count(num_tokens, op, "num_tokens"))) return s;
  if (vocab_size < 1) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(op) +
                                                 ": Expected a number >= 1 for vocab_size but received " +
                                                 std::to_string(vocab_size));
  }
  if (num_tokens > std::numeric_limits<int64_t>::max() / 4 / vocab_size) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": Expected num_tokens * vocab_size below 2^61 (more overflows the byte count) but received " +
                    std::to_string(num_tokens) + " * " + std::to_string(vocab_size));
  }
  if (dtype != TIRL_DTYPE_F32 && dtype != TIRL_DTYPE_BF16) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": Expected a tirl_dtype for dtype but received " +
                    std::to_string(static_cast<int>(dtype)));
  }
  // log2(e) / temperature is an f32 factor: beyond these limits it is no longer a normal
  // float, and Inf * 0 or 0 * -Inf (a -Infinity logit) would make whole rows NaN.
  if (!(temperature >= TIRL_MIN_TEMPERATURE && temperature <= TIRL_MAX_TEMPERATURE)) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": Expected a number in [" +
                    format_double(TIRL_MIN_TEMPERATURE) + ", " +
                    format_double(TIRL_MAX_TEMPERATURE) + "] for temperature but received " +
                    format_double(temperature));
  }
  if ((s = check_pointer(logits, num_tokens * vocab_size, op, "logits")) ||
      (s = check_pointer(labels, num_tokens, op, "labels")) || (s = check_device(device, op))) {
    return s;
  }
  // On CUDA the labels are in device memory: the kernel checks them.
  if (device.type == TIRL_DEVICE_CUDA) return TIRL_OK;
  use_private_copy(labels, num_tokens, private_labels);
  // Checked up front (N reads), so a bad label leaves every output untouched.
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (labels[t] < 0 || labels[t] >= vocab_size) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(op) + ": Expected labels in [0, vocab_size = " +
                      std::to_string(vocab_size) + ") but received labels[" + std::to_string(t) +
                      "] = " + std::to_string(labels[t]));
    }
  }
  return TIRL_OK;
}

}  // namespace
}  // namespace tirl

extern "C" tirl_status tirl_token_logprobs(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                                           int64_t vocab_size, const int32_t* labels,
                                           double temperature, float* logp, float* entropy,
                                           tirl_device device) {
  using namespace tirl;
  constexpr const char* kOp = op_name::token_logprobs;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    std::vector<int32_t> private_labels;
    if ((s = check_common(kOp, logits, dtype, num_tokens, vocab_size, labels, temperature, device,
                          private_labels)) ||
        (s = check_pointer(logp, num_tokens, kOp, "logp"))) {
      return s;
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.token_logprobs(logits, dtype, num_tokens, vocab_size, labels, temperature,
                                    logp, entropy, device);
    });
  });
}

extern "C" tirl_status tirl_token_logprobs_backward(const void* logits, tirl_dtype dtype,
                                                    int64_t num_tokens, int64_t vocab_size,
                                                    const int32_t* labels, double temperature,
                                                    const float* grad_logp,
                                                    const float* grad_entropy,
                                                    float* grad_logits, tirl_device device) {
  using namespace tirl;
  constexpr const char* kOp = op_name::token_logprobs_backward;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    std::vector<int32_t> private_labels;
    if ((s = check_common(kOp, logits, dtype, num_tokens, vocab_size, labels, temperature, device,
                          private_labels)) ||
        (s = check_pointer(grad_logp, num_tokens, kOp, "grad_logp")) ||
        (s = check_pointer(grad_logits, num_tokens * vocab_size, kOp, "grad_logits"))) {
      return s;
    }
    const bool bf16 = dtype == TIRL_DTYPE_BF16;
    // In place is allowed only as the exact same f32 buffer; a partial overlap would read
    // logits already overwritten by another row's gradient.
    const int64_t count = num_tokens * vocab_size;
    const auto* in_begin = static_cast<const char*>(logits);
    const auto* in_end = in_begin + count * (bf16 ? 2 : 4);
    const auto* out_begin = reinterpret_cast<const char*>(grad_logits);
    const auto* out_end = out_begin + count * 4;
    const bool in_place = !bf16 && in_begin == out_begin;
    if (count > 0 && !in_place && in_begin < out_end && out_begin < in_end) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) +
                      ": Expected grad_logits to be the f32 logits array itself or not to "
                      "overlap it but received one that overlaps it partially");
    }
    return dispatch(kOp, device, [&](const tirl_op_table& backend) {
      return backend.token_logprobs_backward(logits, dtype, num_tokens, vocab_size, labels,
                                             temperature, grad_logp, grad_entropy, grad_logits,
                                             device);
    });
  });
}
