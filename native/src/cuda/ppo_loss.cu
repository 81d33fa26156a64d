// ppoLoss on the GPU (formulas in math/ppo_loss.h), the CPU kernel's passes on the device:
// (1) only where the math needs them before a gradient can be written: the masked token
// count (token-mean with its default normaliser: a 1-byte-per-token pass), or per
// sequence its masked count and, for GSPO, its masked log-ratio sum (one group of threads
// per sequence), then each sequence's constants; (2) one fused pass, one tile of tokens
// per block, reading each input once and writing each gradient once.
//
// Determinism: floating sums are per thread in a fixed token order, then a fixed shuffle
// tree, then the blocks' partials in block order (by the last block to finish); the grid
// depends only on the sizes. Integer counts use atomics (order-free).
#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/policy_pick.h"
#include "cuda/reduce.cuh"
#include "math/policy_loss.h"
#include "math/ppo_loss.h"

namespace tirl::cuda {
namespace {

constexpr const char* kOp = "ppoLoss";
constexpr int kThreads = 256;
constexpr int kTokensPerThread = 8;
constexpr int64_t kTokensPerTile = kThreads * kTokensPerThread;

// Batch-wide counts from the pre-passes (integer atomics).
struct Summary {
  unsigned long long masked;     // masked tokens
  unsigned long long non_empty;  // sequences with a masked token
  unsigned long long longest;    // longest sequence, in tokens
};

struct SequenceConstants {
  float scale;  // the aggregation's factor for the sequence's tokens
  Ratio ratio;  // GSPO's sequence ratio
};

struct PpoTotals {
  double pg_loss, kl_loss, neg_log_ratio;
  unsigned long long clipped, dual_clipped, non_finite, masked;
};

struct AddTotals {
  __device__ PpoTotals operator()(const PpoTotals& a, const PpoTotals& b) const {
    return {a.pg_loss + b.pg_loss,       a.kl_loss + b.kl_loss,
            a.neg_log_ratio + b.neg_log_ratio, a.clipped + b.clipped,
            a.dual_clipped + b.dual_clipped,   a.non_finite + b.non_finite,
            a.masked + b.masked};
  }
};

struct SequenceSum {
  double log_ratio;
  long long masked;
};

struct AddSequenceSums {
  __device__ SequenceSum operator()(const SequenceSum& a, const SequenceSum& b) const {
    return {a.log_ratio + b.log_ratio, a.masked + b.masked};
  }
};

// What the host reads back after the launches: one copy.
struct Report {
  OffsetsReport offsets;
  PpoTotals total;
  PpoTotals sequences;             // geo_mean: the per-sequence part (pg loss and statistics)
  unsigned long long selected;     // clip_cov / kl_cov: tokens picked
  double is_mean;                  // bypass_mode, batch-normalised: the weights' mean
};

// Device scratch of one call, carved from one allocation.
struct Workspace {
  Report* report;
  OffsetsReport* offsets;  // &report->offsets
  PpoTotals* total;        // &report->total
  Summary* summary;
  unsigned* ticket;
  PpoTotals* partials;             // one per tile
  SequenceSum* sequence_sums;      // one per sequence, when per-sequence
  SequenceConstants* constants;    // one per sequence, when per-sequence
  uint8_t* selected;               // clip_cov / kl_cov: the pick, one per token
  float* is_weights;               // bypass_mode's own weights, one per token
  float* coefficients;             // geo_mean: the gradient's factor of each sequence
};

// ------------------------------------------------------------------ pre-passes

__global__ void offsets_kernel(const int32_t* seq_offsets, int64_t num_seqs, OffsetsReport* report) {
  check_offsets(seq_offsets, num_seqs, report);
}

__global__ void __launch_bounds__(kThreads)
count_masked_kernel(const uint8_t* __restrict__ mask, int64_t num_tokens, Summary* summary) {
  unsigned long long count = 0;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    count += mask[t] != 0;
  }
  count = block_reduce(count, 0ull, [](unsigned long long a, unsigned long long b) { return a + b; });
  if (threadIdx.x == 0 && count != 0) atomicAdd(&summary->masked, count);
}

// A sequence's sums for the aggregation's constants, and its part of the batch summary
// (one thread of the sequence's group).
__device__ inline void record_sequence(const Workspace& w, int64_t s, SequenceSum sum, int64_t length) {
  w.sequence_sums[s] = sum;
  if (sum.masked > 0) {
    atomicAdd(&w.summary->masked, static_cast<unsigned long long>(sum.masked));
    atomicAdd(&w.summary->non_empty, 1ull);
  }
  atomicMax(&w.summary->longest, static_cast<unsigned long long>(length));
}

template <int kGroup>
__global__ void __launch_bounds__(kThreads)
sequence_pass_kernel(const float* __restrict__ logp, const float* __restrict__ old_logp,
                     const uint8_t* __restrict__ mask, int64_t num_tokens,
                     const int32_t* __restrict__ seq_offsets, int64_t num_seqs, bool log_ratio,
                     bool is_weights, float lower, float upper, Workspace w) {
  check_offsets(seq_offsets, num_seqs, w.offsets);
  // s is the same in the whole group, which so loops (and shuffles, and syncs) together.
  for (int64_t s = group_sequence<kGroup>(); s < num_seqs; s += grid_groups<kGroup>()) {
    const TokenRange r = sequence_tokens(seq_offsets, s, num_tokens);
    SequenceSum part{0.0, 0};
    for (int64_t t = r.begin + threadIdx.x % kGroup; t < r.end; t += kGroup) {
      const bool in = mask[t] != 0;
      part.masked += in;
      // A select, so that a NaN under the mask cannot leak in.
      if (log_ratio) part.log_ratio += in ? static_cast<double>(logp[t] - old_logp[t]) : 0.0;
    }
    const SequenceSum total = group_reduce<kGroup>(part, SequenceSum{0.0, 0}, AddSequenceSums{});
    if (is_weights) {
      // bypass_mode's sequence-level weights (the CPU's sequence_is_weight_of, in
      // cpu/policy_loss_kernels.inc): one per sequence, from its masked log-ratio sum, on
      // its masked-in tokens.
      const float weight = rollout_is_weight(static_cast<float>(total.log_ratio), lower, upper);
      for (int64_t t = r.begin + threadIdx.x % kGroup; t < r.end; t += kGroup) {
        w.is_weights[t] = mask[t] != 0 ? weight : 0.0f;
      }
    }
    if (threadIdx.x % kGroup == 0) record_sequence(w, s, total, r.end - r.begin);
  }
}

__global__ void constants_kernel(int64_t num_seqs, tirl_ppo_options o, bool sequence_ratio,
                                 Workspace w) {
  const Summary sum = *w.summary;
  const PpoNormalizers normalizers =
      ppo_normalizers(o, static_cast<double>(sum.masked), static_cast<double>(sum.non_empty),
                      static_cast<double>(sum.longest));
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < num_seqs;
       s += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const SequenceSum own = w.sequence_sums[s];
    const double scale = aggregation_scale(o, normalizers, static_cast<int64_t>(own.masked));
    w.constants[s] = {static_cast<float>(scale),
                      sequence_ratio ? sequence_level_ratio(own.log_ratio, own.masked) : Ratio{1.0f, 0.0f}};
  }
}

// ------------------------------------------------------------------ the fused pass

struct MainArgs {
  const float* logp;
  const float* old_logp;
  const float* advantages;
  const uint8_t* mask;
  const float* ref_logp;
  const float* weights;
  float* grad;
  int64_t num_tokens;
  const int32_t* seq_offsets;  // null when the batch has none
  int64_t num_seqs;
  bool per_sequence;           // constants per sequence (else `scale` for every token)
  bool count_normaliser;       // scale = dp_size / the masked count of the pre-pass
  double dp_size;
  float scale;
  PpoConstants constants;
  // The other token-local policy losses (policy_kernel).
  PolicyConstants policy;
  tirl_kl_estimator kl_estimator;
  bool bypass_weights;         // bypass_mode's token IS weights (computed here, not an input)
  float is_lower, is_upper;    // their band (rollout_is_weight)
  const uint8_t* selected;     // clip_cov / kl_cov: the pick (policy_pick.cu), or null
  bool weights_are_input;      // false for bypass_mode's precomputed weights: not probed
  const double* is_mean;       // batch-normalised bypass weights: divided by float(mean) > 1e-8
};

template <bool kKl, tirl_kl_estimator Estimator, bool kWeights, bool kSequenceRatio>
__global__ void __launch_bounds__(kThreads) ppo_kernel(MainArgs a, Workspace w) {
  if (a.seq_offsets != nullptr && !a.per_sequence) check_offsets(a.seq_offsets, a.num_seqs, w.offsets);
  const int64_t tile_begin = static_cast<int64_t>(blockIdx.x) * kTokensPerTile;
  const int64_t tile_end = min(tile_begin + kTokensPerTile, a.num_tokens);
  // The sequences this tile touches, found once for the block.
  __shared__ int64_t first_seq, last_seq;
  if (a.per_sequence && threadIdx.x == 0) {
    first_seq = find_sequence(a.seq_offsets, 0, a.num_seqs - 1, tile_begin);
    last_seq = find_sequence(a.seq_offsets, first_seq, a.num_seqs - 1, tile_end - 1);
  }
  __syncthreads();
  const float shared_scale =
      a.count_normaliser ? static_cast<float>(aggregation_factor(a.dp_size, static_cast<double>(w.summary->masked)))
                         : a.scale;

  PpoTotals mine{0.0, 0.0, 0.0, 0, 0, 0, 0};
#pragma unroll 4
  for (int k = 0; k < kTokensPerThread; ++k) {
    const int64_t t = tile_begin + k * kThreads + threadIdx.x;
    if (t >= tile_end) break;
    float scale = shared_scale;
    Ratio ratio{1.0f, 0.0f};
    if (a.per_sequence) {
      const SequenceConstants c = w.constants[find_sequence(a.seq_offsets, first_seq, last_seq, t)];
      scale = c.scale;
      ratio = c.ratio;
    }
    // Dual clip stays a run-time value here (0 = off): the GPU loop is bandwidth-bound.
    const PpoToken token = ppo_token<kKl, Estimator, kWeights, kSequenceRatio, true>(
        a.logp[t], a.old_logp[t], a.advantages[t], a.mask[t], kKl ? a.ref_logp[t] : 0.0f,
        kWeights ? a.weights[t] : 1.0f, scale, ratio, a.constants);
    if (a.grad != nullptr) a.grad[t] = token.grad;
    mine.pg_loss += token.pg_loss;
    if (kKl) mine.kl_loss += token.kl_loss;
    mine.neg_log_ratio += token.neg_log_ratio;
    mine.clipped += token.clipped != 0.0f;
    mine.dual_clipped += token.dual_clipped != 0.0f;
    mine.non_finite += token.non_finite != 0.0f;
    mine.masked += token.masked != 0.0f;
  }
  const PpoTotals zero{0.0, 0.0, 0.0, 0, 0, 0, 0};
  const PpoTotals block = block_reduce(mine, zero, AddTotals{});
  grid_reduce(block, zero, AddTotals{}, w.partials, w.ticket, w.total);
}

// The KL term of one token, the estimator picked at run time (uniform across the grid).
__device__ inline KlTerm kl_any(tirl_kl_estimator e, float logp, float ref_logp) {
  switch (e) {
    case TIRL_KL_K1: return kl_term<TIRL_KL_K1>(logp, ref_logp);
    case TIRL_KL_K2: return kl_term<TIRL_KL_K2>(logp, ref_logp);
    case TIRL_KL_ABS: return kl_term<TIRL_KL_ABS>(logp, ref_logp);
    case TIRL_KL_K1_PLUS: return kl_term<TIRL_KL_K1_PLUS>(logp, ref_logp);
    case TIRL_KL_K3_PLUS: return kl_term<TIRL_KL_K3_PLUS>(logp, ref_logp);
    case TIRL_KL_ABS_PLUS: return kl_term<TIRL_KL_ABS_PLUS>(logp, ref_logp);
    case TIRL_KL_K3: break;
  }
  return kl_term<TIRL_KL_K3>(logp, ref_logp);
}

// Token t's KL term at the aggregation's `scale`: into its gradient, the KL loss and the
// non-finite flag (the reference's log-prob is probed too).
__device__ inline void add_kl(const MainArgs& a, int64_t t, float logp, bool token_in, float scale,
                              float& grad, double& kl_loss, bool& bad) {
  const float ref_logp = a.ref_logp[t];
  const KlTerm k2 = kl_any(a.kl_estimator, logp, ref_logp);
  grad += token_in ? scale * (a.constants.kl_coef * k2.dvalue_dlogp) : 0.0f;
  kl_loss += token_in ? scale * k2.value : 0.0f;
  bad |= token_in & !(finite_probe(ref_logp) == 0.0f);
}

// The token-local policy losses (policy_term, math/policy_loss.h), token for token as the
// CPU's run_block (cpu/policy_loss_kernels.inc): the same products in the same order.
// Totals: clipped = clipFraction's count, dual_clipped = clipFractionLower's,
// neg_log_ratio = the approxKl statistic.
template <tirl_policy_loss_kind Loss, bool kWeights>
__global__ void __launch_bounds__(kThreads) policy_kernel(MainArgs a, Workspace w) {
  if (a.seq_offsets != nullptr && !a.per_sequence) check_offsets(a.seq_offsets, a.num_seqs, w.offsets);
  const int64_t tile_begin = static_cast<int64_t>(blockIdx.x) * kTokensPerTile;
  const int64_t tile_end = min(tile_begin + kTokensPerTile, a.num_tokens);
  __shared__ int64_t first_seq, last_seq;
  if (a.per_sequence && threadIdx.x == 0) {
    first_seq = find_sequence(a.seq_offsets, 0, a.num_seqs - 1, tile_begin);
    last_seq = find_sequence(a.seq_offsets, first_seq, a.num_seqs - 1, tile_end - 1);
  }
  __syncthreads();
  const float shared_scale =
      a.count_normaliser ? static_cast<float>(aggregation_factor(a.dp_size, static_cast<double>(w.summary->masked)))
                         : a.scale;
  const bool kl = a.ref_logp != nullptr;
  PpoTotals mine{0.0, 0.0, 0.0, 0, 0, 0, 0};
  for (int k = 0; k < kTokensPerThread; ++k) {
    const int64_t t = tile_begin + k * kThreads + threadIdx.x;
    if (t >= tile_end) break;
    const float scale =
        a.per_sequence ? w.constants[find_sequence(a.seq_offsets, first_seq, last_seq, t)].scale : shared_scale;
    const float logp = a.logp[t], old_logp = a.old_logp[t], advantage = a.advantages[t];
    const bool token_in = a.mask[t] != 0;
    const float selected = a.selected != nullptr ? static_cast<float>(a.selected[t]) : 0.0f;
    const PolicyTerm term = policy_term<Loss>(logp, old_logp, advantage, selected, a.policy);
    float pg = term.loss;
    float dpg = term.dloss_dlogp;
    float probe = finite_probe(logp) + finite_probe(old_logp) + finite_probe(advantage);
    if (kWeights) {
      float weight;
      if (a.bypass_weights) {
        weight = token_in ? rollout_is_weight(logp - old_logp, a.is_lower, a.is_upper) : 0.0f;
      } else {
        weight = a.weights[t];
        if (a.weights_are_input) probe += finite_probe(weight);
        if (a.is_mean != nullptr) {
          const double mean = *a.is_mean;
          if (mean > 1e-8) weight /= static_cast<float>(mean);
        }
      }
      pg *= weight;
      dpg *= weight;
    }
    float grad = token_in ? scale * dpg : 0.0f;
    bool bad = token_in & !(probe == 0.0f);
    if (kl) {
      add_kl(a, t, logp, token_in, scale, grad, mine.kl_loss, bad);
    }
    if (a.grad != nullptr) a.grad[t] = grad;
    mine.pg_loss += token_in ? scale * pg : 0.0f;
    mine.neg_log_ratio += token_in ? term.kl_stat : 0.0f;
    mine.clipped += static_cast<unsigned long long>(term.clipped & static_cast<int32_t>(token_in));
    mine.dual_clipped += static_cast<unsigned long long>(term.clipped_lower & static_cast<int32_t>(token_in));
    mine.non_finite += bad;
    mine.masked += token_in;
  }
  const PpoTotals zero{0.0, 0.0, 0.0, 0, 0, 0, 0};
  const PpoTotals block = block_reduce(mine, zero, AddTotals{});
  grid_reduce(block, zero, AddTotals{}, w.partials, w.ticket, w.total);
}

// ------------------------------------------------------------------ bypass_mode's own weights

// verl's compute_rollout_correction_weights with old_log_prob = logp and rollout_log_prob =
// old_logp, as the CPU's token pass computes them (run_block_as's kIsToken, in
// cpu/policy_loss_kernels.inc): 0 on masked-out tokens.
__global__ void __launch_bounds__(kThreads)
token_is_weights_kernel(const float* __restrict__ logp, const float* __restrict__ old_logp,
                        const uint8_t* __restrict__ mask, int64_t num_tokens, float lower, float upper,
                        float* __restrict__ weights) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    weights[t] = mask[t] != 0 ? rollout_is_weight(logp[t] - old_logp[t], lower, upper) : 0.0f;
  }
}

// The weights' mean (one block, a fixed order): over the non-empty sequences of each one's
// weight (sequence level), or over the masked-in tokens (token level).
__global__ void __launch_bounds__(kThreads)
is_mean_kernel(const uint8_t* __restrict__ mask, int64_t num_tokens, const int32_t* __restrict__ seq_offsets,
               int64_t num_seqs, bool sequence, Workspace w) {
  double sum = 0;
  unsigned long long count = 0;
  if (sequence) {
    for (int64_t s = threadIdx.x; s < num_seqs; s += blockDim.x) {
      if (w.sequence_sums[s].masked == 0) continue;
      // A non-empty sequence's weight sits on each of its masked-in tokens: take the first.
      const TokenRange r = sequence_tokens(seq_offsets, s, num_tokens);
      for (int64_t t = r.begin; t < r.end; ++t) {
        if (mask[t] != 0) {
          sum += w.is_weights[t];
          break;
        }
      }
      ++count;
    }
  } else {
    for (int64_t t = threadIdx.x; t < num_tokens; t += blockDim.x) {
      sum += w.is_weights[t];
      count += mask[t] != 0;
    }
  }
  sum = block_reduce(sum, 0.0, [](double a, double b) { return a + b; });
  count = block_reduce(count, 0ull, [](unsigned long long a, unsigned long long b) { return a + b; });
  if (threadIdx.x == 0) w.report->is_mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
}

// ------------------------------------------------------------------ geo_mean (GMPO)

struct GeoSequence {
  double log_ratio, advantage, log_weight, kl_stat;
  long long masked, clipped_upper, clipped_lower;
};

struct AddGeo {
  __device__ GeoSequence operator()(const GeoSequence& a, const GeoSequence& b) const {
    return {a.log_ratio + b.log_ratio, a.advantage + b.advantage, a.log_weight + b.log_weight,
            a.kl_stat + b.kl_stat,     a.masked + b.masked,       a.clipped_upper + b.clipped_upper,
            a.clipped_lower + b.clipped_lower};
  }
};

// Per sequence, the CPU's geo_mean_cpu sums (the sums in double, over a group of threads),
// and the pre-pass of the KL term's per-sequence aggregation (sums, summary).
template <int kGroup>
__global__ void __launch_bounds__(kThreads)
geo_sequence_kernel(MainArgs a, GeoSequence* __restrict__ out, Workspace w) {
  check_offsets(a.seq_offsets, a.num_seqs, w.offsets);
  const GeoSequence zero{0.0, 0.0, 0.0, 0.0, 0, 0, 0};
  for (int64_t s = group_sequence<kGroup>(); s < a.num_seqs; s += grid_groups<kGroup>()) {
    const TokenRange r = sequence_tokens(a.seq_offsets, s, a.num_tokens);
    GeoSequence part = zero;
    for (int64_t t = r.begin + threadIdx.x % kGroup; t < r.end; t += kGroup) {
      if (a.mask[t] == 0) continue;
      const GeoMeanToken g = geo_mean_token(a.logp[t], a.old_logp[t], a.advantages[t], a.policy);
      part.log_ratio += g.log_ratio;
      part.advantage += a.advantages[t];
      if (a.weights != nullptr) part.log_weight += ::logf(a.weights[t] + 1e-10f);
      part.kl_stat += -(a.logp[t] - a.old_logp[t]);
      part.masked += 1;
      part.clipped_upper += g.clipped_upper;
      part.clipped_lower += g.clipped_lower;
    }
    const GeoSequence total = group_reduce<kGroup>(part, zero, AddGeo{});
    if (threadIdx.x % kGroup == 0) {
      out[s] = total;
      record_sequence(w, s, {0.0, total.masked}, r.end - r.begin);
    }
  }
}

// pg = Σ_i -Ā_i exp(Σ_t m l_t / n_i) w_i / seqNormalizer · D (verl's torch.mean over the
// sequences by default), and each sequence's gradient factor: one block, a fixed order.
__global__ void __launch_bounds__(kThreads)
geo_finish_kernel(int64_t num_seqs, double seq_normalizer, double dp_size, bool weights,
                  const GeoSequence* __restrict__ seqs, Workspace w) {
  const double normaliser = seq_normalizer > 0 ? seq_normalizer : static_cast<double>(num_seqs);
  const double scale = normaliser > 0 ? dp_size / normaliser : 0.0;
  PpoTotals mine{0.0, 0.0, 0.0, 0, 0, 0, 0};
  for (int64_t s = threadIdx.x; s < num_seqs; s += blockDim.x) {
    const GeoSequence q = seqs[s];
    const double n = static_cast<double>(q.masked);
    const double loss = geo_mean_sequence_loss(q.log_ratio, q.advantage, q.log_weight, q.masked, weights);
    mine.pg_loss += scale * loss;
    w.coefficients[s] = static_cast<float>(n > 0 ? scale * loss / n : 0.0);
    mine.neg_log_ratio += q.kl_stat;
    mine.masked += static_cast<unsigned long long>(q.masked);
    mine.clipped += static_cast<unsigned long long>(q.clipped_upper);
    mine.dual_clipped += static_cast<unsigned long long>(q.clipped_lower);
  }
  const PpoTotals zero{0.0, 0.0, 0.0, 0, 0, 0, 0};
  const PpoTotals total = block_reduce(mine, zero, AddTotals{});
  if (threadIdx.x == 0) w.report->sequences = total;
}

// The gradient: each token's sequence factor times its clipped log-ratio's derivative, plus
// the KL term aggregated by `aggregation`; the KL loss and the non-finite count.
__global__ void __launch_bounds__(kThreads) geo_grad_kernel(MainArgs a, Workspace w) {
  const int64_t tile_begin = static_cast<int64_t>(blockIdx.x) * kTokensPerTile;
  const int64_t tile_end = min(tile_begin + kTokensPerTile, a.num_tokens);
  __shared__ int64_t first_seq, last_seq;
  if (threadIdx.x == 0) {
    first_seq = find_sequence(a.seq_offsets, 0, a.num_seqs - 1, tile_begin);
    last_seq = find_sequence(a.seq_offsets, first_seq, a.num_seqs - 1, tile_end - 1);
  }
  __syncthreads();
  const bool kl = a.ref_logp != nullptr;
  const float shared_scale =
      a.count_normaliser ? static_cast<float>(aggregation_factor(a.dp_size, static_cast<double>(w.summary->masked)))
                         : a.scale;
  PpoTotals mine{0.0, 0.0, 0.0, 0, 0, 0, 0};
  for (int k = 0; k < kTokensPerThread; ++k) {
    const int64_t t = tile_begin + k * kThreads + threadIdx.x;
    if (t >= tile_end) break;
    const int64_t s = find_sequence(a.seq_offsets, first_seq, last_seq, t);
    const float logp = a.logp[t], old_logp = a.old_logp[t], advantage = a.advantages[t];
    const bool token_in = a.mask[t] != 0;
    const GeoMeanToken g = geo_mean_token(logp, old_logp, advantage, a.policy);
    float probe = finite_probe(logp) + finite_probe(old_logp) + finite_probe(advantage);
    if (a.weights != nullptr) probe += finite_probe(a.weights[t]);
    float grad = token_in ? w.coefficients[s] * g.dlog_ratio : 0.0f;
    bool bad = token_in & !(probe == 0.0f);
    if (kl) {
      const float scale = a.per_sequence ? w.constants[s].scale : shared_scale;
      add_kl(a, t, logp, token_in, scale, grad, mine.kl_loss, bad);
    }
    if (a.grad != nullptr) a.grad[t] = grad;
    mine.non_finite += bad;
  }
  const PpoTotals zero{0.0, 0.0, 0.0, 0, 0, 0, 0};
  const PpoTotals block = block_reduce(mine, zero, AddTotals{});
  grid_reduce(block, zero, AddTotals{}, w.partials, w.ticket, w.total);
}

using PpoKernel = void (*)(MainArgs, Workspace);

template <bool kKl, tirl_kl_estimator Estimator>
PpoKernel pick_kernel(bool weights, bool sequence_ratio) {
  if (weights) {
    return sequence_ratio ? ppo_kernel<kKl, Estimator, true, true> : ppo_kernel<kKl, Estimator, true, false>;
  }
  return sequence_ratio ? ppo_kernel<kKl, Estimator, false, true> : ppo_kernel<kKl, Estimator, false, false>;
}

PpoKernel pick_kernel(bool kl, tirl_kl_estimator estimator, bool weights, bool sequence_ratio) {
  if (!kl) return pick_kernel<false, TIRL_KL_K3>(weights, sequence_ratio);
  switch (estimator) {
    case TIRL_KL_K1: return pick_kernel<true, TIRL_KL_K1>(weights, sequence_ratio);
    case TIRL_KL_K2: return pick_kernel<true, TIRL_KL_K2>(weights, sequence_ratio);
    case TIRL_KL_ABS: return pick_kernel<true, TIRL_KL_ABS>(weights, sequence_ratio);
    case TIRL_KL_K1_PLUS: return pick_kernel<true, TIRL_KL_K1_PLUS>(weights, sequence_ratio);
    case TIRL_KL_K3_PLUS: return pick_kernel<true, TIRL_KL_K3_PLUS>(weights, sequence_ratio);
    case TIRL_KL_ABS_PLUS: return pick_kernel<true, TIRL_KL_ABS_PLUS>(weights, sequence_ratio);
    case TIRL_KL_K3: break;
  }
  return pick_kernel<true, TIRL_KL_K3>(weights, sequence_ratio);
}

template <tirl_policy_loss_kind Loss>
PpoKernel pick_policy(bool weights) {
  return weights ? policy_kernel<Loss, true> : policy_kernel<Loss, false>;
}

// The kernel of a token-local loss, or null for one without a CUDA kernel.
PpoKernel pick_policy_kernel(tirl_policy_loss_kind loss, bool weights) {
  switch (loss) {
    case TIRL_POLICY_DPPO_TV: return pick_policy<TIRL_POLICY_DPPO_TV>(weights);
    case TIRL_POLICY_DPPO_KL: return pick_policy<TIRL_POLICY_DPPO_KL>(weights);
    case TIRL_POLICY_SAPO: return pick_policy<TIRL_POLICY_SAPO>(weights);
    case TIRL_POLICY_CISPO: return pick_policy<TIRL_POLICY_CISPO>(weights);
    case TIRL_POLICY_DRO: return pick_policy<TIRL_POLICY_DRO>(weights);
    case TIRL_POLICY_GPG: return pick_policy<TIRL_POLICY_GPG>(weights);
    case TIRL_POLICY_REINFORCE: return pick_policy<TIRL_POLICY_REINFORCE>(weights);
    case TIRL_POLICY_CLIP_COV: return pick_policy<TIRL_POLICY_CLIP_COV>(weights);
    case TIRL_POLICY_KL_COV: return pick_policy<TIRL_POLICY_KL_COV>(weights);
    default: return nullptr;
  }
}

// Bytes of `count` items of T, rounded up to keep the next carve 16-byte aligned.
template <class T>
size_t carve_bytes(int64_t count) {
  return (static_cast<size_t>(count) * sizeof(T) + 15) / 16 * 16;
}

// Every loss: the clipped surrogate (vanilla, GSPO through ratio_level; `policy` null), the
// token-local losses of pick_policy_kernel (`loss` already bypass_mode's REINFORCE, with its
// own weights when `bypass_weights`), clip_cov / kl_cov after their pick (policy_pick.cu),
// and geo_mean's per-sequence loss. `full` receives selectedTokens and the IS weights' batch
// normalisation factor when `policy` is given.
tirl_status run_loss(const float* logp, const float* old_logp, const float* advantages,
                     const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                     int64_t num_seqs, const float* ref_logp, const float* weights,
                     const tirl_ppo_options* options, const tirl_policy_loss_options* policy,
                     tirl_policy_loss_kind loss, bool bypass_weights, float* grad,
                     tirl_ppo_result* result, tirl_policy_loss_result* full, tirl_device device) {
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    cudaStream_t stream = stream_of(device);
    const tirl_ppo_options& o = *options;
    const bool kl = ref_logp != nullptr;
    const bool sequence_ratio = o.ratio_level == TIRL_RATIO_SEQUENCE;
    const bool geo = policy != nullptr && loss == TIRL_POLICY_GEO_MEAN;
    const bool pick = policy != nullptr && (loss == TIRL_POLICY_CLIP_COV || loss == TIRL_POLICY_KL_COV);
    // bypass_mode's weights the token kernel cannot compute on the fly: sequence level (a
    // sum per sequence first) or batch-normalised (a mean first).
    const bool own_weights = bypass_weights && (policy->rollout_is == TIRL_ROLLOUT_IS_SEQUENCE ||
                                                policy->rollout_is_batch_normalize != 0);
    const bool sequence_weights = own_weights && policy->rollout_is == TIRL_ROLLOUT_IS_SEQUENCE;
    const bool per_sequence = per_sequence_aggregation(o.aggregation) || sequence_ratio;
    const int64_t seqs = seq_offsets != nullptr ? num_seqs : 0;
    const int64_t tiles = (num_tokens + kTokensPerTile - 1) / kTokensPerTile;
    const int64_t per_seq = per_sequence || geo || sequence_weights ? seqs : 0;

    Scratch scratch(stream);
    const size_t bytes = carve_bytes<Report>(1) + carve_bytes<Summary>(1) + carve_bytes<unsigned>(1) +
                         carve_bytes<PpoTotals>(tiles) + carve_bytes<SequenceSum>(per_seq) +
                         carve_bytes<SequenceConstants>(per_seq) + carve_bytes<uint8_t>(pick ? num_tokens : 0) +
                         carve_bytes<float>(own_weights ? num_tokens : 0) +
                         carve_bytes<float>(geo ? seqs : 0) + carve_bytes<GeoSequence>(geo ? seqs : 0);
    TIRL_CUDA_TRY(kOp, scratch.allocate(bytes));
    char* next = scratch.as<char>();
    auto carve = [&](auto* type, int64_t count) {
      using T = std::remove_pointer_t<decltype(type)>;
      T* p = reinterpret_cast<T*>(next);
      next += carve_bytes<T>(count);
      return p;
    };
    Workspace w;
    w.report = carve(static_cast<Report*>(nullptr), 1);
    w.offsets = &w.report->offsets;
    w.total = &w.report->total;
    w.summary = carve(static_cast<Summary*>(nullptr), 1);
    w.ticket = carve(static_cast<unsigned*>(nullptr), 1);
    w.partials = carve(static_cast<PpoTotals*>(nullptr), tiles);
    w.sequence_sums = carve(static_cast<SequenceSum*>(nullptr), per_seq);
    w.constants = carve(static_cast<SequenceConstants*>(nullptr), per_seq);
    w.selected = carve(static_cast<uint8_t*>(nullptr), pick ? num_tokens : 0);
    w.is_weights = carve(static_cast<float*>(nullptr), own_weights ? num_tokens : 0);
    w.coefficients = carve(static_cast<float*>(nullptr), geo ? seqs : 0);
    GeoSequence* geo_sums = carve(static_cast<GeoSequence*>(nullptr), geo ? seqs : 0);
    TIRL_CUDA_TRY(kOp, cudaMemsetAsync(w.offsets, 0xff, sizeof(OffsetsReport), stream));
    // The report past the offsets, summary and ticket are adjacent: one memset zeroes them
    // (no token, no total).
    TIRL_CUDA_TRY(kOp, cudaMemsetAsync(w.total, 0, reinterpret_cast<char*>(w.partials) -
                                                       reinterpret_cast<char*>(w.total), stream));

    MainArgs a{logp, old_logp, advantages, mask, ref_logp, weights, grad, num_tokens, seq_offsets,
               seqs, per_sequence, false, o.dp_size, 0.0f, ppo_constants(o), PolicyConstants{},
               o.kl_estimator, bypass_weights, 0.0f, 0.0f, nullptr, true, nullptr};
    if (policy != nullptr) {
      a.policy = policy_constants(*policy);
      a.is_lower = static_cast<float>(policy->rollout_is_threshold_lower);
      a.is_upper = static_cast<float>(policy->rollout_is_threshold);
    }
    // Per-sequence pre-passes: each also gives the masked counts and summary the
    // aggregation's constants need.
    const bool block_groups = block_per_sequence(num_tokens, seqs);
    const unsigned group_blocks = block_groups ? blocks_for(seqs, 1) : blocks_for(seqs, kThreads / kWarp);
    bool counted = false;  // summary->masked holds the masked count
    if (geo || sequence_weights || per_sequence) {
      if (geo) {
        if (block_groups) geo_sequence_kernel<kThreads><<<group_blocks, kThreads, 0, stream>>>(a, geo_sums, w);
        else geo_sequence_kernel<kWarp><<<group_blocks, kThreads, 0, stream>>>(a, geo_sums, w);
      } else if (block_groups) {
        sequence_pass_kernel<kThreads><<<group_blocks, kThreads, 0, stream>>>(
            logp, old_logp, mask, num_tokens, seq_offsets, seqs, sequence_ratio || sequence_weights,
            sequence_weights, a.is_lower, a.is_upper, w);
      } else {
        sequence_pass_kernel<kWarp><<<group_blocks, kThreads, 0, stream>>>(
            logp, old_logp, mask, num_tokens, seq_offsets, seqs, sequence_ratio || sequence_weights,
            sequence_weights, a.is_lower, a.is_upper, w);
      }
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
      counted = true;
      if (per_sequence && seqs > 0) {
        constants_kernel<<<blocks_for(seqs, kThreads), kThreads, 0, stream>>>(seqs, o, sequence_ratio, w);
        TIRL_CUDA_TRY(kOp, cudaGetLastError());
      }
    }
    if (!per_sequence) {
      if (o.aggregation == TIRL_AGG_TOKEN_SUM) {
        a.scale = static_cast<float>(o.dp_size);
      } else if (o.token_normalizer > 0) {
        a.scale = static_cast<float>(aggregation_factor(o.dp_size, o.token_normalizer));
      } else {
        a.count_normaliser = true;
        if (!counted) {
          const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(blocks_for(num_tokens, kThreads * 16), 4096));
          count_masked_kernel<<<blocks, kThreads, 0, stream>>>(mask, num_tokens, w.summary);
          TIRL_CUDA_TRY(kOp, cudaGetLastError());
        }
      }
    }
    if (own_weights) {
      if (!sequence_weights) {
        const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(blocks_for(num_tokens, kThreads * 8), 4096));
        token_is_weights_kernel<<<blocks, kThreads, 0, stream>>>(logp, old_logp, mask, num_tokens, a.is_lower,
                                                                  a.is_upper, w.is_weights);
        TIRL_CUDA_TRY(kOp, cudaGetLastError());
      }
      if (policy->rollout_is_batch_normalize != 0) {
        is_mean_kernel<<<1, kThreads, 0, stream>>>(mask, num_tokens, seq_offsets, seqs, sequence_weights, w);
        TIRL_CUDA_TRY(kOp, cudaGetLastError());
        a.is_mean = &w.report->is_mean;
      }
      a.weights = w.is_weights;
      a.weights_are_input = false;
      a.bypass_weights = false;
    }
    if (pick) {
      if (tirl_status s = pick_policy_tokens(kOp, logp, old_logp, advantages, mask, num_tokens, *policy,
                                             w.selected, &w.report->selected, stream)) {
        return s;
      }
      a.selected = w.selected;
    }
    if (geo && seqs > 0) {
      geo_finish_kernel<<<1, kThreads, 0, stream>>>(seqs, o.seq_normalizer, o.dp_size, weights != nullptr, geo_sums, w);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
    }
    // With per-sequence constants but no sequence, only the offsets check (which fails
    // for any token) has anything to do.
    const bool needs_sequences = per_sequence || geo || sequence_weights;
    if (tiles > 0 && !(needs_sequences && seqs == 0)) {
      if (tiles > INT_MAX) return fail(TIRL_ERROR_UNSUPPORTED, std::string(kOp) + ": too many tokens for one call on CUDA");
      const PpoKernel kernel =
          geo ? geo_grad_kernel
          : policy == nullptr ? pick_kernel(kl, o.kl_estimator, weights != nullptr, sequence_ratio)
                              : pick_policy_kernel(loss, a.weights != nullptr || a.bypass_weights);
      kernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(a, w);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
    } else if (seq_offsets != nullptr && !needs_sequences) {
      // No tokens: the offsets still have to be checked.
      offsets_kernel<<<blocks_for(seqs, kThreads), kThreads, 0, stream>>>(seq_offsets, seqs, w.offsets);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
    }

    Report host;
    TIRL_CUDA_TRY(kOp, cudaMemcpyAsync(&host, w.report, sizeof host, cudaMemcpyDeviceToHost, stream));
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));
    if (seq_offsets != nullptr) {
      if (tirl_status s = offsets_error(kOp, host.offsets, seq_offsets, num_tokens)) return s;
    }

    PpoTotals total = host.total;
    if (geo) {
      // The per-sequence part, and from the token pass the KL loss and the non-finite count.
      const PpoTotals& q = host.sequences;
      total = {q.pg_loss, total.kl_loss, q.neg_log_ratio, q.clipped, q.dual_clipped, total.non_finite, q.masked};
    }
    fill_ppo_result(total.pg_loss, total.kl_loss, kl, o.kl_coef, static_cast<double>(total.clipped),
                    static_cast<double>(total.dual_clipped), total.neg_log_ratio,
                    static_cast<int64_t>(total.non_finite), static_cast<int64_t>(total.masked), result);
    if (full != nullptr) {
      full->selected_tokens = pick ? static_cast<int64_t>(host.selected) : 0;
      full->rollout_is_batch_norm_factor =
          own_weights && policy->rollout_is_batch_normalize != 0 && host.is_mean > 1e-8 ? host.is_mean : 1.0;
    }
    return ok();
  });
}

}  // namespace

// ppoLoss's table entry: every policy loss. The front door has turned 'gspo' and
// bypass_mode's 'ppo_clip' into 'vanilla' (with the sequence ratio for GSPO).
tirl_status policy_loss(const float* logp, const float* old_logp, const float* advantages,
                        const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                        int64_t num_seqs, const float* ref_logp, const float* weights,
                        const tirl_policy_loss_options* options, float* grad,
                        tirl_policy_loss_result* result, tirl_device device) {
  const tirl_policy_loss_options& o = *options;
  result->selected_tokens = 0;
  result->rollout_is_batch_norm_factor = 1.0;
  if (o.policy_loss == TIRL_POLICY_VANILLA) {
    return run_loss(logp, old_logp, advantages, mask, num_tokens, seq_offsets, num_seqs, ref_logp,
                    weights, &o.ppo, nullptr, TIRL_POLICY_VANILLA, false, grad, &result->ppo, nullptr,
                    device);
  }
  tirl_policy_loss_kind loss = o.policy_loss;
  bool bypass_weights = false;
  if (loss == TIRL_POLICY_BYPASS_MODE) {
    loss = TIRL_POLICY_REINFORCE;
    bypass_weights = o.rollout_is != TIRL_ROLLOUT_IS_NONE;
  }
  if (loss != TIRL_POLICY_GEO_MEAN && pick_policy_kernel(loss, false) == nullptr) {
    return fail(TIRL_ERROR_UNSUPPORTED, std::string(kOp) + ": policy_loss " + std::to_string(loss) +
                                            " has no CUDA kernel");
  }
  return run_loss(logp, old_logp, advantages, mask, num_tokens, seq_offsets, num_seqs, ref_logp,
                  weights, &o.ppo, &o, loss, bypass_weights, grad, &result->ppo, result, device);
}

}  // namespace tirl::cuda
