// tokenLogprobs and its backward on the CPU (MATH.md; formulas in math/token_logprobs.h).
//
// Rows (tokens) are independent and each is computed whole by one thread in a fixed order,
// so results are bitwise identical for any thread count. A row is walked in L1-sized
// blocks, each summarised (math/token_logprobs.h) and merged into the row's summary; the
// logits are read from memory once. Each block is summed in one pass relative to a
// reference: the row's summary so far, or for its first block (in the forward) the max of
// its first 64 entries; the block's max is found on the way, and the block redone
// relative to it (a max pass, then the exps over the block in L1) only if it lies more
// than 2^kMaxExponent above the reference (rare: a block of far larger logits, or +inf),
// as the backward's first block always is. While a block's exps are
// computed the next kBlock entries (the next row's first block after a row's last) are
// prefetched, so the memory reads overlap the arithmetic (without it they alternated, and
// the f32 forward took the sum of the two). bf16 logits are widened in registers, so they
// cost half the bytes. The backward makes the same pass, keeping the exps in a per-thread
// scratch row (in L2), then a second pass turning them into gradients, so each logit
// costs one exp (rows over 256 blocks recompute the exps instead). A large gradient goes
// out with non-temporal stores, which spare the read for ownership of every line: the
// backward then moves the bytes of its model (logits read, gradient written) and no more.
// Per vector of 16 logits (AVX-512) the forward's exp pass is 13 instructions: for bf16,
// widen (one shift or and, two vectors a load), max, exponent (one FMA), reduce, round, a
// degree-5 polynomial, scalef (zero-masked by a compare) and sum; for f32 (its load folded
// into the max), max, exponent, clamp, round (3), exponent bits, the polynomial, and
// scale and sum as one FMA.
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cstring>
#include <cstdint>
#include <limits>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "common/thread_kept.h"
#include "cpu/ops.h"
#include "math/bf16.h"
#include "math/token_logprobs.h"

namespace tirl::cpu {
namespace {

// Entries of a row summarised at once: 8 KiB of f32, well inside L1.
constexpr int64_t kBlock = 2048;
// A block whose logits exceed the row's summary so far by at most this many powers of two
// (scaled by 1/T) is summed relative to it in one pass (block_stats).
constexpr float kMaxExponent = 64.0f;
// Independent accumulators: a whole number of SIMD registers at any width up to 512 bits,
// and enough of them to hide the latency of the additions.
constexpr int kLanes = 16;
// About this many logits per parallel chunk (whole rows), so small vocabularies still
// give each thread enough work per claim.
constexpr int64_t kLogitsPerChunk = 1 << 16;
// Below this much work per thread a call stays on fewer threads (common/parallel.h;
// measured with `tirl bench --scaling-only`).
constexpr int64_t kMinLogitsPerThread = 1 << 17;

TIRL_HD inline float to_f32(float x) { return x; }
TIRL_HD inline float to_f32(uint16_t bits) { return bf16_to_f32(bits); }

// Rows of up to this many blocks take the one-exp backward (their exps kept in a per-thread
// scratch row).
constexpr int64_t kMaxKeptBlocks = 256;
// A backward gradient of at least this many floats (64 MiB) is written with non-temporal
// stores: far larger than the caches of most CPUs, so a later reader misses anyway, and
// the stores save the read for ownership of each line (a third of the f32 backward's
// traffic). Results are the same either way.
constexpr int64_t kMinStreamedFloats = int64_t{1} << 24;

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
  parallel_for(chunk_count(num_tokens, rows), body, min_chunks(kMinLogitsPerThread, rows * vocab_size));
}

// The calling thread's scratch row for the one-exp backward: the exps of one row, kept in
// L2 between its two passes (at most kMaxKeptBlocks * kBlock floats, 2 MiB, per thread).
struct KeptExps {};
float* kept_exps_scratch(int64_t vocab_size) {
  return thread_kept<KeptExps, float>(static_cast<size_t>(vocab_size));
}

template <bool WithEntropy, class Logit>
void backward_cpu(const Logit* logits, int64_t num_tokens, int64_t vocab_size,
                  const int32_t* labels, double temperature, const float* grad_logp,
                  const float* grad_entropy, float* grad_logits) {
  const double inv_t = 1.0 / temperature;
  const float log2e_over_t = static_cast<float>(kLog2E * inv_t);
  const int64_t rows = rows_per_chunk(vocab_size);
  const bool keep_exps = chunk_count(vocab_size, kBlock) <= kMaxKeptBlocks;
  // A gradient this large is not read back from the cache by anyone: stream it out.
  const bool stream = keep_exps && !WithEntropy &&
                      num_tokens >= kMinStreamedFloats / std::max<int64_t>(1, vocab_size);
  const auto backward_rows = TIRL_SIMD_SELECT(backward_rows<WithEntropy, Logit>);
  std::atomic<bool> out_of_memory{false};
  auto body = [&](int64_t chunk) {
    float* kept = nullptr;
    if (keep_exps) {
      try {  // parallel_for's bodies must not throw (thread_kept may): rethrown below
        kept = kept_exps_scratch(vocab_size);
      } catch (const std::bad_alloc&) {
        out_of_memory.store(true, std::memory_order_relaxed);
        return;
      }
    }
    backward_rows(logits, chunk * rows, std::min(num_tokens, (chunk + 1) * rows), vocab_size,
                  labels, inv_t, log2e_over_t, grad_logp, grad_entropy, kept, stream,
                  grad_logits);
  };
  parallel_for(chunk_count(num_tokens, rows), body, min_chunks(kMinLogitsPerThread, rows * vocab_size));
  if (out_of_memory.load(std::memory_order_relaxed)) throw std::bad_alloc();
}

}  // namespace

tirl_status token_logprobs(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                           int64_t vocab_size, const int32_t* labels, double temperature,
                           float* logp, float* entropy, tirl_device) {
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
}

tirl_status token_logprobs_backward(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                                    int64_t vocab_size, const int32_t* labels, double temperature,
                                    const float* grad_logp, const float* grad_entropy,
                                    float* grad_logits, tirl_device) {
  const bool bf16 = dtype == TIRL_DTYPE_BF16;
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
}

}  // namespace tirl::cpu
