// ppoLoss on the CPU: the loss, its statistics and its gradient in one pass over the tokens.
//
// Passes: (1) only where the math needs them before any gradient can be written, cheap
// pre-passes: per-sequence masked counts (seq-* aggregations, GSPO), the per-sequence mean
// log-ratio (GSPO), or the masked token count (token-mean with its default normaliser);
// (2) one fused pass that reads each input once and writes each gradient once.
//
// Determinism: tokens are cut into fixed chunks of kTokensPerChunk; inside a chunk the
// sums go to kLanes accumulators in a fixed token-to-lane order; chunks combine in chunk
// order. No result depends on the thread count.
#include <algorithm>
#include <cfloat>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "cpu/loss_totals.h"
#include "cpu/ops.h"
#include "math/ppo_loss.h"

namespace tirl::cpu {
namespace {

constexpr int64_t kTokensPerChunk = 16384;
// Per-token results go through a block of this many tokens on the stack (in L1) so that the
// token loop has no reduction in it and vectorises; the block is then summed into lanes.
constexpr int64_t kTokensPerBlock = 256;
constexpr int kLanes = kLossLanes;
constexpr int64_t kSequencesPerChunk = 32;
// Below this much work per thread a call stays on fewer threads (common/parallel.h;
// measured with `tirl bench --scaling-only`).
// The fused pass (exp, clips, KL) and the pre-passes that only count or add.
constexpr int64_t kMinTokensPerThread = 32768;
constexpr int64_t kMinCountedPerThread = 262144;

struct Inputs {
  const float* logp;
  const float* old_logp;
  const float* advantages;
  const uint8_t* mask;
  const float* ref_logp;  // may be null
  const float* weights;   // may be null
  float* grad;            // may be null
  int64_t num_tokens;
  const int32_t* seq_offsets;  // may be null for token-level aggregation and ratio
  int64_t num_seqs;
};

// What one sequence contributes to every token of it.
struct SequenceConstants {
  float scale;  // the aggregation's factor for its tokens
  Ratio ratio;  // GSPO's sequence ratio (unused with the token ratio)
};

using Totals = LossTotals;
using Lanes = LossLanes;

// The token kernels, compiled once per SIMD path (common/simd.h).
#define TIRL_SIMD_KERNELS "cpu/ppo_loss_kernels.inc"
#include "common/simd_kernels.h"

using ChunkKernel = simd_baseline::ChunkKernel;

ChunkKernel pick_kernel(bool kl, tirl_kl_estimator estimator, bool weights, bool sequence_ratio,
                        bool dual_clip) {
  return TIRL_SIMD_SELECT(select_chunk_kernel)(kl, estimator, weights, sequence_ratio,
                                               dual_clip);
}

// ---------------------------------------------------------------- pre-passes

// Per sequence: masked tokens and, for GSPO, the masked sum of logp - old_logp.
void sequence_sums(const Inputs& in, bool log_ratio, std::vector<int64_t>& masked,
                   std::vector<double>& log_ratio_sum) {
  masked.assign(static_cast<size_t>(in.num_seqs), 0);
  if (log_ratio) log_ratio_sum.assign(static_cast<size_t>(in.num_seqs), 0.0);
  const auto count = TIRL_SIMD_SELECT(count_nonzero);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kSequencesPerChunk;
    const int64_t last = std::min(in.num_seqs, first + kSequencesPerChunk);
    for (int64_t s = first; s < last; ++s) {
      const int64_t begin = in.seq_offsets[s];
      const int64_t end = in.seq_offsets[s + 1];
      masked[static_cast<size_t>(s)] = count(in.mask + begin, end - begin);
      if (!log_ratio) continue;
      double lanes[kLanes] = {};
      float block[kTokensPerBlock];
      const auto add = TIRL_SIMD_SELECT(add_to_lanes);
      for (int64_t b = begin; b < end; b += kTokensPerBlock) {
        const int64_t n = std::min(kTokensPerBlock, end - b);
        for (int64_t j = 0; j < n; ++j) {
          // A select, so that a NaN under the mask cannot leak in.
          block[j] = in.mask[b + j] != 0 ? in.logp[b + j] - in.old_logp[b + j] : 0.0f;
        }
        add(block, n, lanes);
      }
      log_ratio_sum[static_cast<size_t>(s)] = lane_total(lanes);
    }
  };
  const int64_t chunks = chunk_count(in.num_seqs, kSequencesPerChunk);
  parallel_for(chunks, body, min_chunks(kMinCountedPerThread, in.num_tokens / std::max<int64_t>(1, chunks)));
}

// ---------------------------------------------------------------- the op

tirl_status ppo_loss_cpu(const Inputs& in, const tirl_ppo_options& o, tirl_ppo_result* result) {
  const bool kl = in.ref_logp != nullptr;
  const bool sequence_ratio = o.ratio_level == TIRL_RATIO_SEQUENCE;
  const bool per_sequence_scale = per_sequence_aggregation(o.aggregation);

  SequenceConstants shared{0.0f, {1.0f, 0.0f}};
  std::vector<SequenceConstants> per_sequence;
  if (per_sequence_scale || sequence_ratio) {
    std::vector<int64_t> masked;
    std::vector<double> log_ratio_sum;
    sequence_sums(in, sequence_ratio, masked, log_ratio_sum);
    int64_t non_empty = 0;
    int64_t longest = 0;
    int64_t masked_total = 0;
    for (int64_t s = 0; s < in.num_seqs; ++s) {
      non_empty += masked[static_cast<size_t>(s)] > 0;
      masked_total += masked[static_cast<size_t>(s)];
      longest = std::max<int64_t>(longest, in.seq_offsets[s + 1] - in.seq_offsets[s]);
    }
    const PpoNormalizers normalizers =
        ppo_normalizers(o, static_cast<double>(masked_total), static_cast<double>(non_empty),
                        static_cast<double>(longest));
    per_sequence.resize(static_cast<size_t>(in.num_seqs));
    for (int64_t s = 0; s < in.num_seqs; ++s) {
      const int64_t n = masked[static_cast<size_t>(s)];
      per_sequence[static_cast<size_t>(s)] = {
          static_cast<float>(aggregation_scale(o, normalizers, n)),
          sequence_ratio ? sequence_level_ratio(log_ratio_sum[static_cast<size_t>(s)], n)
                         : Ratio{1.0f, 0.0f}};
    }
  } else {
    // The token-mean default normaliser, the masked count, needs its pre-pass.
    const bool count = o.aggregation == TIRL_AGG_TOKEN_MEAN && !(o.token_normalizer > 0);
    const double masked = count ? static_cast<double>(count_masked(in.mask, in.num_tokens)) : 0.0;
    shared.scale = static_cast<float>(aggregation_scale(o, ppo_normalizers(o, masked, 0, 0), 0));
  }

  const PpoConstants constants = ppo_constants(o);
  const ChunkKernel kernel =
      pick_kernel(kl, o.kl_estimator, in.weights != nullptr, sequence_ratio, o.dual_clip > 0);
  const int64_t num_chunks = chunk_count(in.num_tokens, kTokensPerChunk);
  std::vector<Totals> partial(static_cast<size_t>(num_chunks));
  auto body = [&](int64_t chunk) {
    partial[static_cast<size_t>(chunk)] = kernel(in, chunk, shared, per_sequence, constants);
  };
  parallel_for(num_chunks, body, min_chunks(kMinTokensPerThread, kTokensPerChunk));

  Totals total;
  for (const Totals& p : partial) total.add(p);
  fill_ppo_result(total.pg_loss, total.kl_loss, kl, o.kl_coef, static_cast<double>(total.clipped),
                  static_cast<double>(total.clipped_lower), total.neg_log_ratio, total.non_finite,
                  total.masked, result);
  return ok();
}

}  // namespace

int64_t count_masked(const uint8_t* mask, int64_t num_tokens) {
  const int64_t num_chunks = chunk_count(num_tokens, kTokensPerChunk);
  std::vector<int64_t> counts(static_cast<size_t>(num_chunks), 0);
  const auto count = TIRL_SIMD_SELECT(count_nonzero);
  auto body = [&](int64_t chunk) {
    const int64_t begin = chunk * kTokensPerChunk;
    counts[static_cast<size_t>(chunk)] = count(mask + begin, std::min(num_tokens, begin + kTokensPerChunk) - begin);
  };
  parallel_for(num_chunks, body, min_chunks(kMinCountedPerThread, kTokensPerChunk));
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

tirl_status clipped_surrogate(const float* logp, const float* old_logp, const float* advantages,
                     const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                     int64_t num_seqs, const float* ref_logp, const float* weights,
                     const tirl_ppo_options* options, float* grad, tirl_ppo_result* result,
                     tirl_device) {
  const Inputs in{logp,    old_logp, advantages, mask,        ref_logp,
                  weights, grad,     num_tokens, seq_offsets, num_seqs};
  return ppo_loss_cpu(in, *options, result);
}

}  // namespace tirl::cpu
