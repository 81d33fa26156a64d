#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "cpu/ops.h"
#include "math/dpo_loss.h"

namespace tirl::cpu {
namespace {

// Pairs per chunk: fixed, so the per-chunk partial sums (combined in chunk order) do not
// depend on the thread count.
constexpr int64_t kPairsPerChunk = 2048;
// Below this much work per thread a call stays on fewer threads (common/parallel.h;
// measured with `tirl bench --scaling-only`).
constexpr int64_t kMinPairsPerThread = 16384;
// Pairs per block inside a chunk: the vectorized loop writes a block's losses to the stack
// and block_loss_sum adds them (to doubles, four f32 losses at a time).
constexpr int64_t kPairsPerBlock = 256;

struct ChunkTotals {
  double loss = 0.0;
  int64_t correct = 0;
};

struct DpoArrays {
  const float* policy_chosen;
  const float* policy_rejected;
  const float* ref_chosen;
  const float* ref_rejected;
  float* grad_chosen;
  float* grad_rejected;
  float* chosen_rewards;
  float* rejected_rewards;
};

// The pair loops, compiled once per SIMD path (common/simd.h).
#define TIRL_SIMD_KERNELS "cpu/dpo_loss_kernels.inc"
#include "common/simd_kernels.h"

void dpo_loss_cpu(const DpoArrays& arrays, int64_t num_pairs, const tirl_dpo_options& options,
                  tirl_dpo_result* result) {
  const int64_t num_chunks = chunk_count(num_pairs, kPairsPerChunk);
  std::vector<ChunkTotals> totals(static_cast<size_t>(num_chunks));
  const DpoParams params = dpo_params(options.beta, options.label_smoothing, options.variant);
  const double inverse_pairs = num_pairs > 0 ? 1.0 / static_cast<double>(num_pairs) : 0.0;
  const float inverse_pairs_f32 = static_cast<float>(inverse_pairs);
  const auto run_chunk = TIRL_SIMD_SELECT(chunk_kernel)(options.variant);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kPairsPerChunk;
    const int64_t last = std::min(num_pairs, first + kPairsPerChunk);
    totals[chunk] = run_chunk(arrays, first, last, params, inverse_pairs_f32);
  };
  parallel_for(num_chunks, body, min_chunks(kMinPairsPerThread, kPairsPerChunk), Scaling::kMemory);
  double loss = 0.0;
  int64_t correct = 0;
  for (const ChunkTotals& t : totals) {
    loss += t.loss;
    correct += t.correct;
  }
  result->loss = loss * inverse_pairs;
  result->reward_accuracy = static_cast<double>(correct) * inverse_pairs;
}

}  // namespace


tirl_status dpo_loss(const float* policy_chosen, const float* policy_rejected,
                     const float* ref_chosen, const float* ref_rejected, int64_t num_pairs,
                     const tirl_dpo_options* options, float* grad_chosen, float* grad_rejected,
                     float* chosen_rewards, float* rejected_rewards, tirl_dpo_result* result,
                     tirl_device) {
  dpo_loss_cpu({policy_chosen, policy_rejected, ref_chosen, ref_rejected, grad_chosen,
                grad_rejected, chosen_rewards, rejected_rewards},
               num_pairs, *options, result);
  return ok();
}

}  // namespace tirl::cpu
