// tokenLogprobs and its backward on the CPU (MATH.md; formulas in math/token_logprobs.h).
//
// Rows (tokens) are independent and each is computed whole by one thread in a fixed order,
// so results are bitwise identical for any thread count. A row is walked in L1-sized
// blocks: the block's max, then the block's exp-sums relative to it (the block is still in
// L1), merged into the row's summary; the forward thus reads the logits from memory once.
// The backward makes the same pass, keeping each block's exps in the output, then a
// second pass turning them into gradients, so each logit costs one exp (rows over 256
// blocks, and an in-place backward with gradEntropy, recompute the exps instead). The
// second pass hits L2 for rows up to ~512 KiB and L3 beyond; per logit it costs the same
// at V = 32,000 and 151,936. These loops are bound by arithmetic, not memory, even with
// AVX2 + FMA (~0.55-0.65 ns per logit forward, f32 and bf16 alike, on a shared 2.45 GHz
// Zen 3 core): ~3.1 instructions per logit with AVX2, of which the block max is 0.3 (one
// load and one maxps per 8) and the exp ~2.75 (round, degree-5 polynomial, scale, sum,
// with two constants reloaded per 16 for want of registers); bf16 adds its widening to both.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "common/bf16.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "common/cuda.h"
#include "common/validate.h"
#include "math/token_logprobs.h"

namespace tirl {
namespace {

constexpr const char* kForwardOp = "tokenLogprobs";
constexpr const char* kBackwardOp = "tokenLogprobsBackward";

// Entries of a row summarised at once: 8 KiB of f32, well inside L1.
constexpr int64_t kBlock = 2048;
// Independent accumulators: a whole number of SIMD registers at any width up to 512 bits,
// and enough of them to hide the latency of the additions.
constexpr int kLanes = 16;
// About this many logits per parallel chunk (whole rows), so small vocabularies still
// give each thread enough work per claim.
constexpr int64_t kLogitsPerChunk = 1 << 16;

TIRL_HD inline float to_f32(float x) { return x; }
TIRL_HD inline float to_f32(uint16_t bits) { return bf16_to_f32(bits); }

// Rows of up to this many blocks take the one-exp backward below (kept on the stack).
constexpr int64_t kMaxKeptBlocks = 256;

// The per-row loops, compiled once per SIMD path (common/simd.h).
#define TIRL_SIMD_KERNELS "cpu/token_logprobs_kernels.inc"
#include "common/simd_kernels.h"

int64_t rows_per_chunk(int64_t vocab_size) {
  return std::max<int64_t>(1, kLogitsPerChunk / vocab_size);
}

template <bool WithEntropy, class Logit>
void forward_cpu(const Logit* logits, int64_t num_tokens, int64_t vocab_size,
                 const int32_t* labels, double temperature, float* logp, float* entropy) {
  const double inv_t = 1.0 / temperature;
  const float log2e_over_t = static_cast<float>(kLog2E * inv_t);
  const int64_t rows = rows_per_chunk(vocab_size);
  const auto forward_rows = TIRL_SIMD_SELECT(forward_rows<WithEntropy, Logit>);
  auto body = [&](int64_t chunk) {
    forward_rows(logits, chunk * rows, std::min(num_tokens, (chunk + 1) * rows), vocab_size,
                 labels, inv_t, log2e_over_t, logp, entropy);
  };
  parallel_for(chunk_count(num_tokens, rows), body);
}

template <bool WithEntropy, class Logit>
void backward_cpu(const Logit* logits, int64_t num_tokens, int64_t vocab_size,
                  const int32_t* labels, double temperature, const float* grad_logp,
                  const float* grad_entropy, float* grad_logits) {
  const double inv_t = 1.0 / temperature;
  const float log2e_over_t = static_cast<float>(kLog2E * inv_t);
  const int64_t rows = rows_per_chunk(vocab_size);
  const bool in_place = static_cast<const void*>(logits) == grad_logits;
  const bool keep_exps =
      chunk_count(vocab_size, kBlock) <= kMaxKeptBlocks && !(WithEntropy && in_place);
  const auto backward_rows = TIRL_SIMD_SELECT(backward_rows<WithEntropy, Logit>);
  auto body = [&](int64_t chunk) {
    backward_rows(logits, chunk * rows, std::min(num_tokens, (chunk + 1) * rows), vocab_size,
                  labels, inv_t, log2e_over_t, grad_logp, grad_entropy, keep_exps, grad_logits);
  };
  parallel_for(chunk_count(num_tokens, rows), body);
}

// The checks both entry points share: sizes, pointers, dtype, temperature, labels.
tirl_status check_common(const char* op, const void* logits, tirl_dtype dtype, int64_t num_tokens,
                         int64_t vocab_size, const int32_t*& labels, double temperature,
                         tirl_device device, std::vector<int32_t>& private_labels) {
  tirl_status s;
  if ((s = check_count(num_tokens, op, "num_tokens"))) return s;
  if (vocab_size < 1) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(op) +
                                                 ": expected vocabSize >= 1 but received " +
                                                 std::to_string(vocab_size));
  }
  if (num_tokens > std::numeric_limits<int64_t>::max() / 4 / vocab_size) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": num_tokens * vocab_size overflows (" +
                    std::to_string(num_tokens) + " * " + std::to_string(vocab_size) + ")");
  }
  if (dtype != TIRL_DTYPE_F32 && dtype != TIRL_DTYPE_BF16) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": unknown dtype " + std::to_string(static_cast<int>(dtype)));
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
                  std::string(op) + ": Expected labels in [0, vocabSize = " +
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
  return guarded([&]() -> tirl_status {
    tirl_status s;
    std::vector<int32_t> private_labels;
    if ((s = check_common(kForwardOp, logits, dtype, num_tokens, vocab_size, labels, temperature,
                          device, private_labels)) ||
        (s = check_pointer(logp, num_tokens, kForwardOp, "logp"))) {
      return s;
    }
    if (device.type == TIRL_DEVICE_CUDA) {
      return run_on_cuda(kForwardOp, [&](const tirl_cuda_backend& cuda) {
        return cuda.token_logprobs(logits, dtype, num_tokens, vocab_size, labels, temperature, logp,
                                   entropy, device);
      });
    }
    const bool bf16 = dtype == TIRL_DTYPE_BF16;
    if (entropy != nullptr) {
      if (bf16) {
        forward_cpu<true>(static_cast<const uint16_t*>(logits), num_tokens, vocab_size, labels,
                          temperature, logp, entropy);
      } else {
        forward_cpu<true>(static_cast<const float*>(logits), num_tokens, vocab_size, labels,
                          temperature, logp, entropy);
      }
    } else if (bf16) {
      forward_cpu<false>(static_cast<const uint16_t*>(logits), num_tokens, vocab_size, labels,
                         temperature, logp, entropy);
    } else {
      forward_cpu<false>(static_cast<const float*>(logits), num_tokens, vocab_size, labels,
                         temperature, logp, entropy);
    }
    return ok();
  });
}

extern "C" tirl_status tirl_token_logprobs_backward(const void* logits, tirl_dtype dtype,
                                                    int64_t num_tokens, int64_t vocab_size,
                                                    const int32_t* labels, double temperature,
                                                    const float* grad_logp,
                                                    const float* grad_entropy,
                                                    float* grad_logits, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    std::vector<int32_t> private_labels;
    if ((s = check_common(kBackwardOp, logits, dtype, num_tokens, vocab_size, labels, temperature,
                          device, private_labels)) ||
        (s = check_pointer(grad_logp, num_tokens, kBackwardOp, "grad_logp")) ||
        (s = check_pointer(grad_logits, num_tokens * vocab_size, kBackwardOp, "grad_logits"))) {
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
                  std::string(kBackwardOp) +
                      ": Expected out (grad_logits) to be the f32 logits array itself or not to "
                      "overlap it but received one that overlaps it partially");
    }
    if (device.type == TIRL_DEVICE_CUDA) {
      return run_on_cuda(kBackwardOp, [&](const tirl_cuda_backend& cuda) {
        return cuda.token_logprobs_backward(logits, dtype, num_tokens, vocab_size, labels,
                                            temperature, grad_logp, grad_entropy, grad_logits,
                                            device);
      });
    }
    if (grad_entropy != nullptr) {
      if (bf16) {
        backward_cpu<true>(static_cast<const uint16_t*>(logits), num_tokens, vocab_size, labels,
                           temperature, grad_logp, grad_entropy, grad_logits);
      } else {
        backward_cpu<true>(static_cast<const float*>(logits), num_tokens, vocab_size, labels,
                           temperature, grad_logp, grad_entropy, grad_logits);
      }
    } else if (bf16) {
      backward_cpu<false>(static_cast<const uint16_t*>(logits), num_tokens, vocab_size, labels,
                          temperature, grad_logp, grad_entropy, grad_logits);
    } else {
      backward_cpu<false>(static_cast<const float*>(logits), num_tokens, vocab_size, labels,
                          temperature, grad_logp, grad_entropy, grad_logits);
    }
    return ok();
  });
}
