// rolloutCorrection's CPU backend (formulas in math/rollout_correction.h; checks in
// api/rollout_correction.cc; the vectorised walk of a sequence in
// cpu/rollout_correction_kernels.inc).
//
// Work is handed out by sequences, grouped by where they start: chunk c owns the
// sequences starting in tokens [c * kTokensPerChunk, (c + 1) * kTokensPerChunk) (the last
// chunk also those starting at num_tokens, which are empty) and walks each of them whole,
// in order, into its own partial sums. The partial sums are merged in chunk order. Chunk
// boundaries depend on the sizes only, and a sequence's lanes on its tokens' positions,
// so results are bitwise identical for any thread count. A sequence longer than a chunk
// is walked by one thread: splitting one would need a second merge per value.
//
// What limits it is arithmetic, not memory (measured 2026-12-02 on the 2-core Xeon VM,
// AVX-512, 512 x 2048 tokens, benchmarks/native/ab_rollout_correction.c, one thread, CPU
// time, min of 31 rounds on the loaded machine): 2.2-2.5 ms warm, 2.6-2.8 ms with every
// call started from DRAM (AB_EVICT_MB=600, then a sweep writing a byte a cache line; it
// is read-only now), against 0.52 ms and 0.98 ms for a memmove of the same 14 B/token. The double exp alone (benchmarks/native/exp_double_floor.cc) is 0.91 ms
// of it (AVX2: 1.83 ms of 4.0-4.3); the statistics passes over the block's arrays in L1
// most of the rest (callgrind, AVX2: 26.6 instructions a token, 44% in the token loop, 46%
// in the sums, weights and moments passes, 7% the mask). Software prefetch of the block
// two ahead: 2-5% slower, not kept; the weights' pass fused into the sums pass: 2% faster
// on AVX-512 and 3% slower on AVX2 (16 registers: spills), not kept; the AVX2 token loop's
// form on AVX-512: no change.
// The kernels pass vectors of doubles between inline functions (and rollout_k of
// math/rollout_correction.h); GCC notes that the ABI of such a call would differ from one
// compiled for the vector's ISA, but every one is inlined into its path's kernel. Before
// the includes: the note is given at the header's lines.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#include <algorithm>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "cpu/ops.h"
#include "math/rollout_correction.h"

namespace tirl::cpu {
namespace {

constexpr int64_t kTokensPerChunk = 16384;
// Below this much work per thread a call stays on fewer threads (common/parallel.h;
// measured with `tirl bench --scaling-only`).
// The statistics pass (exp, logs) and the division by the batch mean.
constexpr int64_t kMinTokensPerThread = 65536;
constexpr int64_t kMinDividedPerThread = 262144;

// What the walk of a sequence reads besides the setup.
struct Walk {
  const float* logp;
  const float* rollout_logp;
  const uint8_t* mask;
  const int32_t* seq_offsets;
  float* weights;
  uint8_t* mask_out;
  const RolloutSetup* setup;
  bool need_sum[4], need_max[4];  // per estimator k: sums (any option of k), maxima (seq_max)
  bool token_option[4];           // token_k1..3 enabled, by estimator
  double rs_lower[4], rs_upper[4];  // their bounds
};

#define TIRL_SIMD_KERNELS "cpu/rollout_correction_kernels.inc"
#include "common/simd_kernels.h"

Walk make_walk(const RolloutSetup& setup) {
  Walk w{};
  w.setup = &setup;
  for (int j = 0; j < setup.num_options; ++j) {
    const int k = rollout_rs_estimator(setup.option[j]);
    const int aggregate = rollout_rs_aggregate(setup.option[j]);
    w.need_sum[k] = true;
    if (aggregate == kAggSeqMax) w.need_max[k] = true;
    if (aggregate == kAggToken) {
      w.token_option[k] = true;
      w.rs_lower[k] = setup.rs_lower[j];
      w.rs_upper[k] = setup.rs_upper[j];
    }
  }
  return w;
}

}  // namespace

tirl_status rollout_correction(const float* logp, const float* rollout_logp, const uint8_t* mask,
                               int64_t num_tokens, const int32_t* seq_offsets, int64_t num_seqs,
                               const tirl_rollout_correction_options* options_pointer,
                               float* weights, uint8_t* mask_out,
                               tirl_rollout_correction_result* result, tirl_device) {
  const tirl_rollout_correction_options& options = *options_pointer;
  const RolloutSetup setup = rollout_setup(options);
  Walk walk = make_walk(setup);
  walk.logp = logp;
  walk.rollout_logp = rollout_logp;
  walk.mask = mask;
  walk.seq_offsets = seq_offsets;
  walk.weights = weights;
  walk.mask_out = mask_out;
  const auto kernel = TIRL_SIMD_SELECT(select_walk_kernel)(setup.is_level, setup.icepop,
                                                           setup.any_token_option);
  const int slots = setup.num_slots;
  const int64_t num_chunks = chunk_count(num_tokens, kTokensPerChunk);
  // Each chunk's slots start on a cache line of their own (stride rounded up to whole
  // lines, base aligned), so two threads on neighbouring chunks never write one line.
  constexpr int64_t kLine = kCacheLineBytes / sizeof(double);
  const int64_t stride = (slots + kLine - 1) / kLine * kLine;
  const int64_t stored_chunks = std::max<int64_t>(num_chunks, 1);
  std::vector<double> storage(static_cast<size_t>(stored_chunks * stride + kLine));
  double* const partial = align_to_cache_line(storage.data());
  for (int64_t chunk = 0; chunk < stored_chunks; ++chunk) {
    rollout_init(partial + chunk * stride, slots);
  }
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kTokensPerChunk;
    const int64_t last = std::min(num_tokens, first + kTokensPerChunk);
    const bool last_chunk = chunk == num_chunks - 1;
    double* acc = partial + chunk * stride;
    const int64_t s = std::lower_bound(seq_offsets, seq_offsets + num_seqs, first) - seq_offsets;
    int64_t e = s;
    while (e < num_seqs && (seq_offsets[e] < last || (last_chunk && seq_offsets[e] == last))) ++e;
    kernel(walk, s, e, acc);
  };
  parallel_for(num_chunks, body, min_chunks(kMinTokensPerThread, kTokensPerChunk));
  for (int64_t chunk = 1; chunk < num_chunks; ++chunk) {
    rollout_merge(partial, partial + chunk * stride, slots);
  }
  const bool normalize = options.rollout_is_batch_normalize != 0;
  const double norm_mean = rollout_batch_norm_mean(setup, normalize, partial);
  if (norm_mean > 0) {
    auto divide = [&](int64_t chunk) {
      const int64_t first = chunk * kTokensPerChunk;
      const int64_t last = std::min(num_tokens, first + kTokensPerChunk);
      for (int64_t t = first; t < last; ++t) weights[t] = rollout_normalized_weight(weights[t], norm_mean);
    };
    parallel_for(num_chunks, divide, min_chunks(kMinDividedPerThread, kTokensPerChunk));
  }
  rollout_finalize(setup, normalize, partial, norm_mean, result);
  return ok();
}

}  // namespace tirl::cpu
