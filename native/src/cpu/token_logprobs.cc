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
// at V = 32,000 and 151,936: on SSE2 these loops are bound by arithmetic, not memory.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "common/bf16.h"
#include "common/parallel.h"
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

// Floats ordered as their bits read as sign-magnitude integers: mapping them to two's
// complement (flip the magnitude of negatives) makes an integer max a float max, which
// vectorises as a plain reduction (a float max reduction would need -ffinite-math-only).
// +NaN orders above +inf, so a row holding one gets a NaN max and a NaN result.
TIRL_HD inline int32_t ordered_bits(float x) {
  const int32_t bits = static_cast<int32_t>(float_bits(x));
  return bits ^ ((bits >> 31) & 0x7fffffff);
}
TIRL_HD inline float from_ordered_bits(int32_t ordered) {
  return bits_float(static_cast<uint32_t>(ordered ^ ((ordered >> 31) & 0x7fffffff)));
}

template <class Logit>
float block_max(const Logit* x, int64_t n) {
  // Independent lanes, so the compare-select chain of one lane does not serialise the loop.
  int32_t lanes[kLanes];
  for (int k = 0; k < kLanes; ++k) lanes[k] = ordered_bits(-INFINITY);
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
#pragma GCC unroll 16
    for (int k = 0; k < kLanes; ++k) {
      const int32_t v = ordered_bits(to_f32(x[i + k]));
      lanes[k] = v > lanes[k] ? v : lanes[k];
    }
  }
  int32_t max = ordered_bits(-INFINITY);
  for (int k = 0; k < kLanes; ++k) max = lanes[k] > max ? lanes[k] : max;
  for (int64_t i = whole; i < n; ++i) {
    const int32_t v = ordered_bits(to_f32(x[i]));
    max = v > max ? v : max;
  }
  return from_ordered_bits(max);
}

// Summary of one block (see math/token_logprobs.h), with `log2e_over_t` = log2(e) / T.
// The exps relative to the block max go to `exps` when WithEntropy or KeepExps. `weighted`
// (only WithEntropy) comes from a second loop over those exps and the exponents the first
// loop keeps in `exponents` (both kBlock floats, in L1): folding both sums into one loop
// makes GCC vectorise it across iterations with in-order scalar sums, 3x slower.
// InPlace (f32 only) keeps the exps over `x` itself, each entry read before it is written;
// writing through the same pointer spares the loop a runtime alias check that would fail.
template <bool WithEntropy, bool KeepExps, bool InPlace = false, class Logit>
SoftmaxStats block_stats(const Logit* x, int64_t n, float log2e_over_t, float* exps_out,
                         float* exponents) {
  static_assert(!InPlace || std::is_same_v<Logit, float>, "in place needs f32 logits");
  float* exps = InPlace ? const_cast<float*>(reinterpret_cast<const float*>(x)) : exps_out;
  const float max = block_max(x, n);
  const float shift = softmax_shift(max);
  const int64_t whole = n - n % kLanes;
  float sums[kLanes] = {};
  for (int64_t i = 0; i < whole; i += kLanes) {
#pragma GCC unroll 16
    for (int k = 0; k < kLanes; ++k) {
      const float y = (to_f32(x[i + k]) - shift) * log2e_over_t;
      const float e = exp2_of_nonpositive(y);
      sums[k] += e;
      if (WithEntropy || KeepExps) exps[i + k] = e;
      if (WithEntropy) exponents[i + k] = y;
    }
  }
  SoftmaxStats s{max, 0.0, 0.0};
  for (int k = 0; k < kLanes; ++k) s.sum += sums[k];
  double weighted_log2 = 0;  // sum e * y, y = d log2 e
  if (WithEntropy) {
    float weighted[kLanes] = {};
    for (int64_t i = 0; i < whole; i += kLanes) {
#pragma GCC unroll 16
      for (int k = 0; k < kLanes; ++k) weighted[k] += entropy_term(exps[i + k], exponents[i + k]);
    }
    for (int k = 0; k < kLanes; ++k) weighted_log2 += weighted[k];
  }
  for (int64_t i = whole; i < n; ++i) {
    const float y = (to_f32(x[i]) - shift) * log2e_over_t;
    const float e = exp2_of_nonpositive(y);
    s.sum += e;
    if (KeepExps) exps[i] = e;
    if (WithEntropy) weighted_log2 += entropy_term(e, y);
  }
  s.weighted = weighted_log2 * kLn2;
  return s;
}

template <bool WithEntropy, class Logit>
SoftmaxStats row_stats(const Logit* row, int64_t vocab_size, float log2e_over_t,
                       double inv_temperature) {
  float exps[WithEntropy ? kBlock : 1];
  float exponents[WithEntropy ? kBlock : 1];
  SoftmaxStats s = empty_softmax_stats();
  for (int64_t start = 0; start < vocab_size; start += kBlock) {
    const int64_t n = std::min(kBlock, vocab_size - start);
    const SoftmaxStats block =
        block_stats<WithEntropy, false>(row + start, n, log2e_over_t, exps, exponents);
    s = merge_softmax_stats(s, block, inv_temperature);
  }
  return s;
}

int64_t rows_per_chunk(int64_t vocab_size) {
  return std::max<int64_t>(1, kLogitsPerChunk / vocab_size);
}

template <bool WithEntropy, class Logit>
void forward_cpu(const Logit* logits, int64_t num_tokens, int64_t vocab_size,
                 const int32_t* labels, double temperature, float* logp, float* entropy) {
  const double inv_t = 1.0 / temperature;
  const float log2e_over_t = static_cast<float>(kLog2E * inv_t);
  const int64_t rows = rows_per_chunk(vocab_size);
  auto body = [&](int64_t chunk) {
    const int64_t last = std::min(num_tokens, (chunk + 1) * rows);
    for (int64_t t = chunk * rows; t < last; ++t) {
      const Logit* row = logits + t * vocab_size;
      const SoftmaxStats s = row_stats<WithEntropy>(row, vocab_size, log2e_over_t, inv_t);
      logp[t] = static_cast<float>(token_logprob(to_f32(row[labels[t]]), s, inv_t));
      if (WithEntropy) entropy[t] = static_cast<float>(token_entropy(s));
    }
  };
  parallel_for(chunk_count(num_tokens, rows), body);
}

// Writes dlogits for one row from its summary. `grad` may be `row` itself (f32 in place):
// each entry is read before it is written and nothing else is read afterwards.
template <bool WithEntropy, class Logit>
void row_backward(const Logit* row, int64_t vocab_size, int32_t label, const SoftmaxStats& s,
                  double inv_t, float log2e_over_t, float grad_logp, float grad_entropy,
                  float* grad) {
  const float label_logit = to_f32(row[label]);
  const float log2_sum = static_cast<float>(::log(s.sum) * kLog2E);
  const float max = s.max;
  const double entropy = WithEntropy ? token_entropy(s) : 0.0;
  const LogitGradCoefficients c = logit_grad_coefficients(grad_logp, grad_entropy, entropy, inv_t);
  for (int64_t v = 0; v < vocab_size; ++v) {
    grad[v] = logit_grad((to_f32(row[v]) - max) * log2e_over_t - log2_sum, c);
  }
  grad[label] = static_cast<float>(label_logit_grad(token_logprob(label_logit, s, inv_t),
                                                    grad_logp, grad_entropy, entropy, inv_t));
}

// Rows of up to this many blocks take the one-exp backward below (kept on the stack).
constexpr int64_t kMaxKeptBlocks = 256;

// The backward for rows of at most kMaxKeptBlocks blocks, with one exp per entry: the
// summing pass keeps each block's exps e_v (relative to the block's max m_b) in `grad`,
// and the second pass turns them into p_v = e_v * exp((m_b - max) / T) / sum. The entropy
// term also needs log p_v, from the logit again, so with it `grad` must not be `row`;
// without it, dlogit_v = -p_v g / T is a plain scaling and `grad` may be `row` itself
// (f32 in place).
template <bool WithEntropy, class Logit>
void row_backward_kept_exps(const Logit* row, int64_t vocab_size, int32_t label, double inv_t,
                            float log2e_over_t, float grad_logp, float grad_entropy,
                            float* grad) {
  const float label_logit = to_f32(row[label]);  // before an in-place pass overwrites it
  float block_maxima[kMaxKeptBlocks];
  float exponents[WithEntropy ? kBlock : 1];
  SoftmaxStats s = empty_softmax_stats();
  const bool in_place = static_cast<const void*>(row) == grad;
  for (int64_t start = 0, b = 0; start < vocab_size; start += kBlock, ++b) {
    const int64_t n = std::min(kBlock, vocab_size - start);
    SoftmaxStats block;
    if constexpr (std::is_same_v<Logit, float> && !WithEntropy) {
      if (in_place) {
        block = block_stats<false, true, true>(row + start, n, log2e_over_t, nullptr, nullptr);
      } else {
        block = block_stats<false, true>(row + start, n, log2e_over_t, grad + start, nullptr);
      }
    } else {
      block = block_stats<WithEntropy, true>(row + start, n, log2e_over_t, grad + start,
                                             exponents);
    }
    block_maxima[b] = block.max;
    s = merge_softmax_stats(s, block, inv_t);
  }
  const double entropy = WithEntropy ? token_entropy(s) : 0.0;
  const LogitGradCoefficients c = logit_grad_coefficients(grad_logp, grad_entropy, entropy, inv_t);
  const double log2_sum = ::log(s.sum) * kLog2E;
  for (int64_t start = 0, b = 0; start < vocab_size; start += kBlock, ++b) {
    const int64_t n = std::min(kBlock, vocab_size - start);
    // exp((m_b - max) / T) / sum: 0 for a block of only -inf logits (their exps are 0);
    // NaN when the sum is 0 (only -inf logits in the row), so every gradient is NaN as in
    // PyTorch.
    const double to_probability =
        ::exp((static_cast<double>(block_maxima[b]) - s.max) * inv_t) / s.sum;
    float* kept = grad + start;
    if (!WithEntropy) {
      const float scale = static_cast<float>(-c.a * to_probability);
      for (int64_t i = 0; i < n; ++i) kept[i] *= scale;
      continue;
    }
    // log2 p_v = (x_v - shift_b) log2(e) / T + (shift_b - max) log2(e) / T - log2(sum).
    const float shift = softmax_shift(block_maxima[b]);
    const float probability_scale = static_cast<float>(to_probability);
    const float log2_offset =
        static_cast<float>((static_cast<double>(shift) - s.max) * inv_t * kLog2E - log2_sum);
    const Logit* x = row + start;
    for (int64_t i = 0; i < n; ++i) {
      const float log2_p = (to_f32(x[i]) - shift) * log2e_over_t + log2_offset;
      kept[i] = logit_grad_from_probability(kept[i] * probability_scale, log2_p, c);
    }
  }
  grad[label] = static_cast<float>(label_logit_grad(token_logprob(label_logit, s, inv_t),
                                                    grad_logp, grad_entropy, entropy, inv_t));
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
  auto body = [&](int64_t chunk) {
    const int64_t last = std::min(num_tokens, (chunk + 1) * rows);
    for (int64_t t = chunk * rows; t < last; ++t) {
      const Logit* row = logits + t * vocab_size;
      float* grad = grad_logits + t * vocab_size;
      const float gh = WithEntropy ? grad_entropy[t] : 0.0f;
      if (keep_exps) {
        row_backward_kept_exps<WithEntropy>(row, vocab_size, labels[t], inv_t, log2e_over_t,
                                            grad_logp[t], gh, grad);
      } else {
        const SoftmaxStats s = row_stats<WithEntropy>(row, vocab_size, log2e_over_t, inv_t);
        row_backward<WithEntropy>(row, vocab_size, labels[t], s, inv_t, log2e_over_t,
                                  grad_logp[t], gh, grad);
      }
    }
  };
  parallel_for(chunk_count(num_tokens, rows), body);
}

// The checks both entry points share: sizes, pointers, dtype, temperature, labels.
tirl_status check_common(const char* op, const void* logits, tirl_dtype dtype, int64_t num_tokens,
                         int64_t vocab_size, const int32_t* labels, double temperature,
                         tirl_device device) {
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
  if (!(temperature > 0 && temperature <= std::numeric_limits<double>::max())) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": expected a finite temperature > 0 but received " +
                    format_double(temperature));
  }
  if ((s = check_pointer(logits, num_tokens * vocab_size, op, "logits")) ||
      (s = check_pointer(labels, num_tokens, op, "labels")) || (s = check_cpu_device(device, op))) {
    return s;
  }
  // Checked up front (N reads), so a bad label leaves every output untouched.
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (labels[t] < 0 || labels[t] >= vocab_size) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(op) + ": expected labels in [0, vocabSize = " +
                      std::to_string(vocab_size) + ") but labels[" + std::to_string(t) +
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
    if ((s = check_common(kForwardOp, logits, dtype, num_tokens, vocab_size, labels, temperature,
                          device)) ||
        (s = check_pointer(logp, num_tokens, kForwardOp, "logp"))) {
      return s;
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
    if ((s = check_common(kBackwardOp, logits, dtype, num_tokens, vocab_size, labels, temperature,
                          device)) ||
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
                      ": expected grad_logits to be the f32 logits buffer itself or not to "
                      "overlap it, but the two overlap partially");
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
