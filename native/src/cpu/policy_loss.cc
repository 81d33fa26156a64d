// ppoLoss's CPU backend entry: every policy loss (math/policy_loss.h); 'vanilla' (and GSPO,
// through its sequence ratio) is cpu/ppo_loss.cc's clipped surrogate. The front door
// (api/ppo_loss.cc) has validated everything.
//
// Passes: (1) where the math needs them: per-sequence masked counts (seq-* aggregations,
// geo_mean), the batch means of clip_cov and kl_cov, bypass_mode's batch-normalised IS
// weights (and the sequence-level weights of sequences that straddle a chunk), geo_mean's
// per-sequence sums; (2) one fused pass that writes each gradient (computing bypass_mode's
// other IS weights as it goes).
// clip_cov and kl_cov pick their tokens during (2), from a sampled threshold: the few tokens
// under it are kept aside and their gradients rewritten once the pick is settled; where the
// sample misled, (2) runs again after an exact pick.
//
// Determinism: fixed chunks of tokens or sequences, partial sums in double in a fixed
// order; the clip_cov / kl_cov picks depend only on the data and the seed. No result
// depends on the thread count.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "cpu/loss_totals.h"
#include "cpu/ops.h"
#include "math/policy_loss.h"

namespace tirl::cpu {
namespace {

constexpr int64_t kTokensPerChunk = kPolicyChunkTokens;  // the picks' means: math/policy_loss.h
constexpr int64_t kTokensPerBlock = 256;
constexpr int64_t kSequencesPerChunk = 32;
// Below this much work per thread a call stays on fewer threads (common/parallel.h;
// measured with `tirl bench --scaling-only`): the token passes with exps and clips, and
// those that only count or add.
constexpr int64_t kMinTokensPerThread = 32768;
constexpr int64_t kMinCountedPerThread = 262144;

// How the token pass weighs each token: by in.weights (or not at all), or by bypass_mode's
// IS weights that it computes.
// kIsTokenNormalized: token-level ones divided by Inputs::is_norm.
enum InlineIs : int { kIsNone = 0, kIsToken = 1, kIsSequence = 2, kIsTokenNormalized = 3 };

struct Inputs {
  const float* logp;
  const float* old_logp;
  const float* advantages;
  const uint8_t* mask;
  const float* ref_logp;   // may be null
  const float* weights;    // may be null
  const uint8_t* selected; // clip_cov / kl_cov: 1 for the picked tokens
  float* grad;             // may be null
  int64_t num_tokens;
  const int32_t* seq_offsets;  // may be null
  int64_t num_seqs;
  bool weights_are_input;  // false for bypass_mode's own weights: not counted in nonFinite
  // bypass_mode's IS weights computed by the token pass itself (weights null): token-level
  // ones a token, sequence-level ones a sequence (sequence_is_weights: those precomputed,
  // see sequence_is_weights_aside).
  InlineIs inline_is = kIsNone;
  float is_lower = 0.0f;
  float is_upper = 0.0f;
  float is_norm = 1.0f;  // kIsTokenNormalized: the weights' mean
  const float* sequence_is_weights = nullptr;
  bool all_sequence_is_weights = false;  // else only the sequences that straddle a chunk
};

// Whether the tokens [first, last) of a sequence (non-empty) lie in two or more chunks of
// the token pass: bypass_mode's sequence-level weight of such a sequence is set aside
// before the pass (sequence_is_weights_aside), that of any other computed by the pass.
constexpr bool straddles_chunk(int64_t first, int64_t last) {
  return first < last && first / kTokensPerChunk != (last - 1) / kTokensPerChunk;
}


// min_chunks_per_thread for a pass over chunks of kSequencesPerChunk sequences: sequences
// vary in length, so their mean stands for a chunk's tokens.
int64_t per_sequence_chunks(const Inputs& in, int64_t min_tokens) {
  const int64_t chunks = chunk_count(in.num_seqs, kSequencesPerChunk);
  return min_chunks(min_tokens, std::max<int64_t>(1, in.num_tokens / std::max<int64_t>(1, chunks)));
}

using Totals = LossTotals;
using Lanes = LossLanes;

using KlBlock = void (*)(const float*, const float*, const uint8_t*, int64_t, float, float, float*,
                         float*);

struct TokenKernelConstants {
  PolicyConstants policy;
  KlBlock kl;  // null without a KL term
  float kl_coef;
};

// What the clip_cov / kl_cov pass that picks while it computes tests (pick_pass_hits in
// cpu/policy_loss_kernels.inc): the batch means, clip_cov's bounds and seed, and the
// threshold of its pick (the one the loss uses).
struct PickPass {
  float mean_logp;
  float mean_advantage;
  float lb;
  float ub;
  uint64_t seed_key;
  uint64_t clip_cov_threshold;  // on pick_key
  uint32_t kl_cov_threshold;    // on kl_cov_order
};

// A token under the pick's threshold: its key, and what it adds unselected and selected
// (loss and gradient with the aggregation's scale; the clip count's change).
struct PickHit {
  uint64_t key;
  int64_t token;
  float pg_loss;
  float picked_pg_loss;
  float picked_grad;
  int32_t picked_clipped;
};

// With a PickPass (and its hits), clip_cov's and kl_cov's chunk picks while it computes.
using ChunkKernel = Totals (*)(const Inputs&, int64_t, float, const std::vector<float>&,
                               const TokenKernelConstants&, const PickPass*, std::vector<PickHit>*);

// GMPO's masked sums over one sequence (geo_mean_cpu).
struct GeoMeanSequence {
  double log_ratio = 0;    // masked sum of the clipped log-ratio
  double advantage = 0;    // masked sum of A
  double log_weight = 0;   // masked sum of log(w + 1e-10)
  double kl_stat = 0;      // masked sum of -(logp - old_logp)
  int64_t masked = 0;
  int64_t clipped_upper = 0;
  int64_t clipped_lower = 0;
  int64_t non_finite = 0;  // masked-in tokens with a non-finite input
};

// The masked sums of one chunk of kTokensPerChunk tokens, in token order (as the CUDA pick
// sums them: cuda/policy_pick.cu): the picks' batch means.
struct ChunkSums {
  double advantage = 0;
  double logp = 0;
  int64_t masked = 0;
};

constexpr int64_t kChunksInterleaved = 8;  // the means' chunk sums: a vector lane each (AVX2, AVX-512)
constexpr int64_t kSumBlock = 128;

#define TIRL_SIMD_KERNELS "cpu/policy_loss_kernels.inc"
#include "common/simd_kernels.h"

// ---------------------------------------------------------------- shared setup

// Per sequence: masked tokens; and the batch's masked total, non-empty sequences and longest
// sequence.
struct SequenceCounts {
  std::vector<int64_t> masked;
  int64_t masked_total = 0;
  int64_t non_empty = 0;
  int64_t longest = 0;
};

SequenceCounts count_sequences(const Inputs& in) {
  SequenceCounts c;
  c.masked.assign(static_cast<size_t>(in.num_seqs), 0);
  const auto count = TIRL_SIMD_SELECT(count_nonzero);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kSequencesPerChunk;
    const int64_t last = std::min(in.num_seqs, first + kSequencesPerChunk);
    for (int64_t s = first; s < last; ++s) {
      c.masked[static_cast<size_t>(s)] =
          count(in.mask + in.seq_offsets[s], in.seq_offsets[s + 1] - in.seq_offsets[s]);
    }
  };
  parallel_for(chunk_count(in.num_seqs, kSequencesPerChunk), body, per_sequence_chunks(in, kMinCountedPerThread));
  for (int64_t s = 0; s < in.num_seqs; ++s) {
    c.masked_total += c.masked[static_cast<size_t>(s)];
    c.non_empty += c.masked[static_cast<size_t>(s)] > 0;
    c.longest = std::max<int64_t>(c.longest, in.seq_offsets[s + 1] - in.seq_offsets[s]);
  }
  return c;
}

// A chunked, ordered sum over the tokens: f(begin, end) (double) a chunk, the chunks' sums
// added in order.
template <class F>
double ordered_token_sum(int64_t num_tokens, F f) {
  const int64_t num_chunks = chunk_count(num_tokens, kTokensPerChunk);
  std::vector<double> partial(static_cast<size_t>(num_chunks), 0.0);
  auto body = [&](int64_t chunk) {
    const int64_t begin = chunk * kTokensPerChunk;
    const int64_t end = std::min(num_tokens, begin + kTokensPerChunk);
    partial[static_cast<size_t>(chunk)] = f(begin, end);
  };
  parallel_for(num_chunks, body, min_chunks(kMinCountedPerThread, kTokensPerChunk));
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

// The aggregation's factor for the tokens of every sequence (MATH.md's table), or one
// shared factor (`scales` left empty) for the token-level aggregations. `masked_total`: the
// batch's masked-in tokens where the caller has counted them (else -1: counted here, or
// taken from `counts`).
struct Scales {
  float shared = 0.0f;
  std::vector<float> per_sequence;
};

Scales aggregation_scales(const Inputs& in, const tirl_ppo_options& o,
                          const SequenceCounts* counts, int64_t masked_total = -1) {
  auto factor = [&](double normaliser) { return normaliser > 0 ? o.dp_size / normaliser : 0.0; };
  Scales s;
  switch (o.aggregation) {
    case TIRL_AGG_TOKEN_SUM: s.shared = static_cast<float>(o.dp_size); return s;
    case TIRL_AGG_TOKEN_MEAN: {
      const double tokens =
          o.token_normalizer > 0 ? o.token_normalizer
          : counts != nullptr    ? static_cast<double>(counts->masked_total)
          : masked_total >= 0    ? static_cast<double>(masked_total)
                                 : static_cast<double>(count_masked(in.mask, in.num_tokens));
      s.shared = static_cast<float>(factor(tokens));
      return s;
    }
    default: break;
  }
  const double seqs = o.seq_normalizer > 0 ? o.seq_normalizer : static_cast<double>(counts->non_empty);
  const double horizon = o.horizon > 0 ? o.horizon : static_cast<double>(counts->longest);
  s.per_sequence.resize(static_cast<size_t>(in.num_seqs));
  for (int64_t q = 0; q < in.num_seqs; ++q) {
    const double n = static_cast<double>(counts->masked[static_cast<size_t>(q)]);
    double scale = 0;
    switch (o.aggregation) {
      case TIRL_AGG_SEQ_MEAN_TOKEN_SUM: scale = factor(seqs); break;
      case TIRL_AGG_SEQ_MEAN_TOKEN_MEAN: scale = factor(seqs * n); break;
      default: scale = factor(seqs * horizon); break;  // seq-mean-token-sum-norm
    }
    s.per_sequence[static_cast<size_t>(q)] = static_cast<float>(scale);
  }
  return s;
}

bool per_sequence_aggregation(tirl_aggregation a) {
  return a != TIRL_AGG_TOKEN_MEAN && a != TIRL_AGG_TOKEN_SUM;
}

void fill_result(const Totals& t, bool kl, double kl_coef, tirl_policy_loss_result* result) {
  fill_ppo_result(t.pg_loss, t.kl_loss, kl, kl_coef, static_cast<double>(t.clipped),
                  static_cast<double>(t.clipped_lower), t.neg_log_ratio, t.non_finite, t.masked,
                  &result->ppo);
}

// ---------------------------------------------------------------- clip_cov / kl_cov picks

// The batch means verl's covariance uses, over the masked-in tokens (verl_F.masked_mean;
// 0 when nothing is masked in).
struct Means {
  float advantage;
  float logp;
  int64_t masked;
};

// The batch means verl's covariance uses, over the masked-in tokens (verl_F.masked_mean;
// 0 when nothing is masked in): the chunks' sums added in chunk order.
Means masked_means(const Inputs& in) {
  const int64_t num_chunks = chunk_count(in.num_tokens, kTokensPerChunk);
  std::vector<ChunkSums> sums(static_cast<size_t>(num_chunks));
  const auto chunk_sums = TIRL_SIMD_SELECT(interleaved_chunk_sums);
  auto body = [&](int64_t group) { chunk_sums(in, group * kChunksInterleaved, num_chunks, sums.data()); };
  parallel_for(chunk_count(num_chunks, kChunksInterleaved), body,
               min_chunks(kMinCountedPerThread, kChunksInterleaved * kTokensPerChunk));
  double a = 0, l = 0;
  int64_t masked = 0;
  for (const ChunkSums& c : sums) {
    a += c.advantage;
    l += c.logp;
    masked += c.masked;
  }
  const double n = masked > 0 ? static_cast<double>(masked) : 1.0;
  return {static_cast<float>(a / n), static_cast<float>(l / n), masked};
}

// The picks find their `wanted` smallest keys among the eligible tokens without ordering all
// of them: a threshold from a sample (kSampleRun tokens in every kSampleSpacing, a cache
// line of each input, not one line for every sampled token; at a Weyl-sequence offset in
// each window, so that it follows no period of the batch, such as its prompts), set so that the keys
// up to it number at least `wanted` but for a negligible chance, then one pass that keeps
// only the keys up to it, then nth_element over those. Should they number fewer than
// `wanted` (and the threshold exclude anything), the pass runs again with every key. The
// set is the same whatever the sample: the `wanted` smallest of distinct keys.
constexpr int64_t kSampleRun = 16;
constexpr int64_t kSampleSpacing = 2048;

// The first token of window w's sampled run: w * kSampleSpacing + (w * 2654435761 mod 2^32)
// mod (kSampleSpacing - kSampleRun) (test/policy_loss.test.ts builds a batch on it).
int64_t sample_run_start(int64_t w) {
  const uint32_t weyl = static_cast<uint32_t>(static_cast<uint64_t>(w) * 2654435761u);
  return w * kSampleSpacing + static_cast<int64_t>(weyl % static_cast<uint32_t>(kSampleSpacing - kSampleRun));
}

// The sample in parts of kSampleRunsPerPart consecutive runs (windows), on the threads
// (parts of at least kMinSampledTokensPerThread tokens a thread): f(part, first, count)
// for every run of the part that lies in the batch, in order. A run's lines lie
// kSampleSpacing tokens from the last run's, no stream that the hardware's prefetcher
// follows, and each run's test waited on them: so each part also fetches, before a run,
// the lines of the run kSampleRunsAhead later (logp, advantages, mask, and old_logp that
// clip_cov's ratio test reads). On the calling thread alone, clip_cov's sample of
// 512 x 2048 tokens took 89-133 us of a cold call (EPYC VM of 2026-12-07; its means pass
// 300-460 us): 4 runs ahead took 54-74 us (8 runs 61 us, 16 runs 83 us).
constexpr int64_t kSampleRunsAhead = 4;
constexpr int64_t kSampleRunsPerPart = 64;
constexpr int64_t kMinSampledTokensPerThread = 262144;
int64_t sample_parts(int64_t num_tokens) {
  return chunk_count(chunk_count(num_tokens, kSampleSpacing), kSampleRunsPerPart);
}
template <class F>
void over_sample_parts(const Inputs& in, F f) {
  const int64_t num_tokens = in.num_tokens;
  const int64_t windows = chunk_count(num_tokens, kSampleSpacing);
  auto body = [&](int64_t part) {
    const int64_t last = std::min(windows, (part + 1) * kSampleRunsPerPart);
    for (int64_t w = part * kSampleRunsPerPart; w < last; ++w) {
      const int64_t later = w + kSampleRunsAhead;
      const int64_t ahead = later < last ? sample_run_start(later) : num_tokens;
      if (ahead < num_tokens) {
        prefetch_to_l2(in.logp + ahead);
        prefetch_to_l2(in.advantages + ahead);
        prefetch_to_l2(in.mask + ahead);
        prefetch_to_l2(in.old_logp + ahead);
      }
      const int64_t first = sample_run_start(w);
      if (first < num_tokens) f(part, first, std::min(kSampleRun, num_tokens - first));
    }
  };
  parallel_for(sample_parts(num_tokens), body,
               min_chunks(kMinSampledTokensPerThread, kSampleRunsPerPart * kSampleSpacing));
}

// Of the sampled eligible tokens, how many must lie at or below the threshold: the expected
// count λ of the `wanted` smallest, 6 standard deviations and 4 more. The sample misleads
// (and the pass runs again) when more than that many of the `wanted` smallest are sampled:
// for a Poisson(λ) count at most 2.2e-9 over every λ (the worst near λ = 10.5; for large λ
// it tends to the normal's 6-sigma tail, 1e-9). With 32 more, as it was, a sampled token
// cost kl_cov ~39 hits at the bench's λ ~ 1: 5,312 hits for 127 picked, 0.2 ms of
// settling at 512 x 2048 tokens.
int64_t sample_rank(int64_t wanted, int64_t eligible, int64_t sampled) {
  const double expected = static_cast<double>(wanted) * static_cast<double>(sampled) /
                          static_cast<double>(std::max<int64_t>(1, eligible));
  return static_cast<int64_t>(std::ceil(expected + 6.0 * std::sqrt(expected) + 4.0));
}

// For every chunk of tokens (on the threads), the hits of hit(b, count, out): the values it
// appends for the block of `count` <= kTokensPerBlock tokens at b; in chunk order.
template <class T, class Hits>
std::vector<T> collect_hits(const Inputs& in, Hits hits) {
  const int64_t num_chunks = chunk_count(in.num_tokens, kTokensPerChunk);
  std::vector<std::vector<T>> parts(static_cast<size_t>(num_chunks));
  auto body = [&](int64_t chunk) {
    const int64_t begin = chunk * kTokensPerChunk;
    const int64_t end = std::min(in.num_tokens, begin + kTokensPerChunk);
    auto& part = parts[static_cast<size_t>(chunk)];
    for (int64_t b = begin; b < end; b += kTokensPerBlock) hits(b, std::min(kTokensPerBlock, end - b), part);
  };
  parallel_for(num_chunks, body, min_chunks(kMinCountedPerThread, kTokensPerChunk));
  std::vector<T> all;
  for (auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// What a pick needs before its passes: the batch means, how many tokens it takes, and the
// threshold drawn from the sample (`pass`); `sampled` when that threshold leaves keys out,
// so that the loss pass can pick as it computes (pick_while_computing).
struct PickPlan {
  Means means;
  int64_t wanted;
  PickPass pass;
  bool sampled;
};

// Clip-Cov: of the candidates (not clipped by the ratio, covariance in (lb, ub)), the
// max(floor(clip_cov_ratio * masked), 1) with the smallest pick_key(seed, t): a uniform
// random subset, as verl's randperm gives, reproducible from the seed. The keys are uniform
// over 64 bits whatever the data, so the threshold is a fraction of 2^64: wanted (with
// margin) over a low estimate of the candidates from the sample. The passes test the cheap
// part first (masked in, covariance inside the bounds), then the key, and the ratio's clip
// only for the few tokens left (clip_cov_candidate_at).
// The tests are baseline code, unfused: they must have the bits of the CUDA pick (built
// --fmad=false).
constexpr uint64_t kEveryPickKey = ~uint64_t{0};

bool clip_cov_candidate_at(const Inputs& in, const PickPlan& plan, const PolicyConstants& c, int64_t t) {
  const PickPass& p = plan.pass;
  const float cov = covariance_term(in.logp[t], in.advantages[t], p.mean_logp, p.mean_advantage);
  return (in.mask[t] != 0) & (cov < p.ub) & (cov > p.lb) &&
         clip_cov_candidate(in.logp[t], in.old_logp[t], in.advantages[t], cov, c, p.lb, p.ub);
}

PickPlan plan_clip_cov(const Inputs& in, const tirl_policy_loss_options& o, const PolicyConstants& c) {
  PickPlan plan;
  plan.means = masked_means(in);
  plan.wanted = pick_count(plan.means.masked, o.clip_cov_ratio, false);
  plan.pass = {plan.means.logp, plan.means.advantage, static_cast<float>(o.clip_cov_lb),
               static_cast<float>(o.clip_cov_ub), pick_key_seed(o.seed), kEveryPickKey, 0};
  // Each part's sampled tokens and candidates, on a cache line of its own.
  struct alignas(kCacheLineBytes) PartCounts {
    int64_t sampled = 0, candidates = 0;
  };
  std::vector<PartCounts> parts(static_cast<size_t>(sample_parts(in.num_tokens)));
  over_sample_parts(in, [&](int64_t part, int64_t first, int64_t count) {
    PartCounts& n = parts[static_cast<size_t>(part)];
    for (int64_t t = first; t < first + count; ++t) n.candidates += clip_cov_candidate_at(in, plan, c, t);
    n.sampled += count;
  });
  int64_t sampled = 0, sampled_candidates = 0;
  for (const PartCounts& n : parts) {
    sampled += n.sampled;
    sampled_candidates += n.candidates;
  }
  // A low estimate of the candidates: the sample's count less 6 standard deviations.
  const double sampled_count = static_cast<double>(sampled_candidates);
  const double low = (sampled_count - 6.0 * std::sqrt(sampled_count)) * static_cast<double>(in.num_tokens) /
                     static_cast<double>(std::max<int64_t>(1, sampled));
  const double margin = static_cast<double>(plan.wanted) + 6.0 * std::sqrt(static_cast<double>(plan.wanted)) + 32.0;
  if (low > 0 && margin < low) {
    plan.pass.clip_cov_threshold = static_cast<uint64_t>(margin / low * 18446744073709551616.0);
  }
  plan.sampled = plan.pass.clip_cov_threshold != kEveryPickKey;
  return plan;
}

// The pick over every candidate (where the sample's threshold passed too few, or left
// nothing out), into `selected`; how many.
int64_t pick_clip_cov(const Inputs& in, const PickPlan& plan, const PolicyConstants& c,
                      std::vector<uint8_t>& selected) {
  using Pick = std::pair<uint64_t, int64_t>;  // (key, token)
  const auto hits = TIRL_SIMD_SELECT(clip_cov_hits);
  const PickPass& p = plan.pass;
  std::vector<Pick> picks = collect_hits<Pick>(in, [&](int64_t b, int64_t count, std::vector<Pick>& out) {
    int32_t index[kTokensPerBlock];
    uint64_t keys[kTokensPerBlock];
    const int64_t n = hits(in.logp + b, in.advantages + b, in.mask + b, b, count, p.mean_logp,
                           p.mean_advantage, p.lb, p.ub, p.seed_key, kEveryPickKey, index, keys);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = b + index[i];
      if (clip_cov_candidate_at(in, plan, c, t)) out.emplace_back(keys[i], t);
    }
  });
  if (static_cast<int64_t>(picks.size()) > plan.wanted) {
    std::nth_element(picks.begin(), picks.begin() + plan.wanted, picks.end());
    picks.resize(static_cast<size_t>(plan.wanted));
  }
  for (const Pick& pick : picks) selected[static_cast<size_t>(pick.second)] = 1;
  return static_cast<int64_t>(picks.size());
}

// KL-Cov: the max(floor(masked * kl_cov_ratio), 1) masked-in tokens with the largest
// covariance (NaN counts as largest, as in torch.topk; ties go to the earlier token): the
// smallest kl_cov_rank_key, the order the CUDA pick uses too. The threshold is on the
// key's high half (kl_cov_order), from the sampled masked-in tokens; ties at it are all kept.
constexpr uint32_t kEveryKlCovOrder = 0xFFFFFFFEu;  // above every masked-in token's order

PickPlan plan_kl_cov(const Inputs& in, const tirl_policy_loss_options& o) {
  PickPlan plan;
  plan.means = masked_means(in);
  plan.wanted = pick_count(plan.means.masked, o.kl_cov_ratio, true);
  plan.pass = {plan.means.logp, plan.means.advantage, 0.0f, 0.0f, 0, 0, kEveryKlCovOrder};
  plan.sampled = false;
  if (plan.means.masked == 0) return plan;
  const auto orders = TIRL_SIMD_SELECT(kl_cov_orders);
  // Each part's sampled orders; the threshold is a rank among them all, whatever their order.
  // Each part's room is reserved here: parallel_for's bodies must not throw (bad_alloc).
  std::vector<std::vector<uint32_t>> parts(static_cast<size_t>(sample_parts(in.num_tokens)));
  for (auto& part : parts) part.reserve(static_cast<size_t>(kSampleRunsPerPart * kSampleRun));
  over_sample_parts(in, [&](int64_t part, int64_t first, int64_t count) {
    uint32_t order[kSampleRun];
    orders(in.logp + first, in.advantages + first, in.mask + first, count, plan.means.logp,
           plan.means.advantage, 0, order);
    for (int64_t j = 0; j < count; ++j) {
      if (order[j] != 0xFFFFFFFFu) parts[static_cast<size_t>(part)].push_back(order[j]);
    }
  });
  std::vector<uint32_t> sample;
  for (const auto& part : parts) sample.insert(sample.end(), part.begin(), part.end());
  const int64_t rank = sample_rank(plan.wanted, plan.means.masked, static_cast<int64_t>(sample.size()));
  if (rank < static_cast<int64_t>(sample.size())) {
    std::nth_element(sample.begin(), sample.begin() + rank, sample.end());
    plan.pass.kl_cov_threshold = sample[static_cast<size_t>(rank)];
  }
  plan.sampled = plan.pass.kl_cov_threshold != kEveryKlCovOrder;
  return plan;
}

// The pick over every masked-in token (as pick_clip_cov), into `selected`; how many.
int64_t pick_kl_cov(const Inputs& in, const PickPlan& plan, std::vector<uint8_t>& selected) {
  if (plan.wanted == 0) return 0;
  const auto orders = TIRL_SIMD_SELECT(kl_cov_orders);
  std::vector<uint64_t> keys = collect_hits<uint64_t>(in, [&](int64_t b, int64_t count, std::vector<uint64_t>& out) {
    uint32_t order[kTokensPerBlock];
    orders(in.logp + b, in.advantages + b, in.mask + b, count, plan.means.logp, plan.means.advantage,
           kEveryKlCovOrder, order);
    for (int64_t j = 0; j < count; ++j) {
      if (order[j] != 0xFFFFFFFFu) out.push_back((static_cast<uint64_t>(order[j]) << 32) | static_cast<uint64_t>(b + j));
    }
  });
  if (static_cast<int64_t>(keys.size()) > plan.wanted) {
    std::nth_element(keys.begin(), keys.begin() + plan.wanted, keys.end());
    keys.resize(static_cast<size_t>(plan.wanted));
  }
  // The token is the key's low 32 bits (the front door keeps kl_cov batches below 2^32).
  for (uint64_t k : keys) selected[static_cast<size_t>(k & 0xFFFFFFFFu)] = 1;
  return static_cast<int64_t>(keys.size());
}

// The loss pass of clip_cov / kl_cov that picks as it computes, when the sample's
// threshold leaves keys out: every token computed unselected, those under the threshold
// (the hits) also selected and kept aside; then the pick among the hits (clip_cov's pass
// the ratio's test), and the hits' losses added in token order after the chunks' sums, the
// picked ones' gradients written. One pass over the batch after the means, not two and a
// byte array; the same tokens picked. False (and nothing to keep) where fewer than `wanted`
// hits are eligible: the caller then picks over every key and runs the loss pass again.
bool pick_while_computing(const Inputs& in, tirl_policy_loss_kind loss, const PickPlan& plan,
                          const PolicyConstants& c, ChunkKernel kernel, const Scales& scales,
                          const TokenKernelConstants& k, Totals* total, int64_t* picked) {
  const int64_t num_chunks = chunk_count(in.num_tokens, kTokensPerChunk);
  std::vector<Totals> partial(static_cast<size_t>(num_chunks));
  std::vector<std::vector<PickHit>> parts(static_cast<size_t>(num_chunks));
  auto body = [&](int64_t chunk) {
    partial[static_cast<size_t>(chunk)] =
        kernel(in, chunk, scales.shared, scales.per_sequence, k, &plan.pass, &parts[static_cast<size_t>(chunk)]);
  };
  parallel_for(num_chunks, body, min_chunks(kMinTokensPerThread, kTokensPerChunk));
  std::vector<PickHit> hits;
  for (auto& p : parts) hits.insert(hits.end(), p.begin(), p.end());
  std::vector<std::pair<uint64_t, size_t>> eligible;  // (key, hit)
  for (size_t i = 0; i < hits.size(); ++i) {
    if (loss != TIRL_POLICY_CLIP_COV || clip_cov_candidate_at(in, plan, c, hits[i].token)) {
      eligible.emplace_back(hits[i].key, i);
    }
  }
  if (static_cast<int64_t>(eligible.size()) < plan.wanted) return false;
  if (static_cast<int64_t>(eligible.size()) > plan.wanted) {
    std::nth_element(eligible.begin(), eligible.begin() + plan.wanted, eligible.end());
    eligible.resize(static_cast<size_t>(plan.wanted));
  }
  std::vector<uint8_t> chosen(hits.size(), 0);
  for (const auto& e : eligible) chosen[e.second] = 1;
  *total = Totals{};
  for (const Totals& t : partial) total->add(t);
  for (size_t i = 0; i < hits.size(); ++i) {
    const PickHit& h = hits[i];
    if (chosen[i] != 0) {
      total->pg_loss += h.picked_pg_loss;
      total->clipped += h.picked_clipped;
      if (in.grad != nullptr) in.grad[h.token] = h.picked_grad;
    } else {
      total->pg_loss += h.pg_loss;
    }
  }
  *picked = static_cast<int64_t>(eligible.size());
  return true;
}

// ---------------------------------------------------------------- bypass_mode's IS weights

// verl's compute_rollout_correction_weights with old_log_prob = logp (detached) and
// rollout_log_prob = old_logp. Token-level weights are computed by the token pass itself
// (kIsToken; kIsTokenNormalized divided by their mean, computed here first);
// sequence-level ones a sequence at a time as the pass reaches it (kIsSequence), those
// here set aside first.

// The mean of the token-level weights over the masked-in tokens (0 without any), summed in
// chunks in token order (token_is_weight_sum, in cpu/policy_loss_kernels.inc with the pass
// that uses it: the weights it sums are the pass's bits); the token pass divides each weight
// by it (kIsTokenNormalized) where it is above 1e-8.
double token_is_weight_mean(const Inputs& in) {
  const int64_t masked = count_masked(in.mask, in.num_tokens);
  const auto chunk_sum = TIRL_SIMD_SELECT(token_is_weight_sum);
  const double sum = ordered_token_sum(in.num_tokens, [&](int64_t begin, int64_t end) { return chunk_sum(in, begin, end); });
  return masked > 0 ? sum / static_cast<double>(masked) : 0.0;
}

// The sequence-level weights the token pass does not compute itself (run_chunk's
// sequence_is_weight): with the batch normalisation every sequence's, divided by the mean
// over the non-empty sequences (those with a masked-in token); else those of the
// sequences that straddle a chunk of the pass (the rest of the vector unset). Each from
// sequence_is_weight_of (cpu/policy_loss_kernels.inc), which the pass calls too.
std::vector<float> sequence_is_weights_aside(const Inputs& in, double* norm_factor) {
  std::vector<float> w(static_cast<size_t>(in.num_seqs), 0.0f);
  const auto weight = TIRL_SIMD_SELECT(sequence_is_weight_of);
  *norm_factor = 1.0;
  if (!in.all_sequence_is_weights) {
    for (int64_t s = 0; s < in.num_seqs; ++s) {
      if (straddles_chunk(in.seq_offsets[s], in.seq_offsets[s + 1])) w[static_cast<size_t>(s)] = weight(in, s);
    }
    return w;
  }
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kSequencesPerChunk;
    const int64_t last = std::min(in.num_seqs, first + kSequencesPerChunk);
    for (int64_t s = first; s < last; ++s) w[static_cast<size_t>(s)] = weight(in, s);
  };
  parallel_for(chunk_count(in.num_seqs, kSequencesPerChunk), body, per_sequence_chunks(in, kMinTokensPerThread));
  double sum = 0;
  int64_t non_empty = 0;
  for (int64_t s = 0; s < in.num_seqs; ++s) {
    for (int64_t t = in.seq_offsets[s]; t < in.seq_offsets[s + 1]; ++t) {
      if (in.mask[t] != 0) {
        sum += w[static_cast<size_t>(s)];
        ++non_empty;
        break;
      }
    }
  }
  const double mean = non_empty > 0 ? sum / static_cast<double>(non_empty) : 0.0;
  if (mean > 1e-8) {
    const float f = static_cast<float>(mean);
    for (float& x : w) x /= f;
    *norm_factor = mean;
  }
  return w;
}

// ---------------------------------------------------------------- the token losses

tirl_status token_loss_cpu(const Inputs& in, const tirl_policy_loss_options& o,
                           tirl_policy_loss_kind loss, tirl_policy_loss_result* result) {
  const tirl_ppo_options& p = o.ppo;
  const bool kl = in.ref_logp != nullptr;
  SequenceCounts counts;
  const bool per_sequence = per_sequence_aggregation(p.aggregation);
  if (per_sequence) counts = count_sequences(in);
  const PolicyConstants c = policy_constants(o);
  // clip_cov's and kl_cov's plan first: its means pass counts the masked-in tokens that a
  // token-level aggregation's scale needs (a pass over the mask fewer).
  const bool picks = loss == TIRL_POLICY_CLIP_COV || loss == TIRL_POLICY_KL_COV;
  PickPlan plan{};
  if (picks) plan = loss == TIRL_POLICY_CLIP_COV ? plan_clip_cov(in, o, c) : plan_kl_cov(in, o);
  const Scales scales = aggregation_scales(in, p, per_sequence ? &counts : nullptr, picks ? plan.means.masked : -1);

  const TokenKernelConstants k{c, kl ? TIRL_SIMD_SELECT(select_kl_block)(p.kl_estimator) : nullptr,
                               static_cast<float>(p.kl_coef)};
  const ChunkKernel kernel = in.inline_is != kIsNone
                                 ? TIRL_SIMD_SELECT(select_bypass_kernel)(in.inline_is)
                                 : TIRL_SIMD_SELECT(select_chunk_kernel)(loss, in.weights != nullptr);
  std::vector<uint8_t> selected;
  Inputs run = in;
  result->selected_tokens = 0;
  if (picks) {
    Totals total;
    if (plan.sampled && pick_while_computing(in, loss, plan, c, kernel, scales, k, &total, &result->selected_tokens)) {
      fill_result(total, kl, p.kl_coef, result);
      return ok();
    }
    selected.assign(static_cast<size_t>(in.num_tokens), 0);
    result->selected_tokens = loss == TIRL_POLICY_CLIP_COV ? pick_clip_cov(in, plan, c, selected)
                                                           : pick_kl_cov(in, plan, selected);
    run.selected = selected.data();
  }

  const int64_t num_chunks = chunk_count(in.num_tokens, kTokensPerChunk);
  std::vector<Totals> partial(static_cast<size_t>(num_chunks));
  auto body = [&](int64_t chunk) {
    partial[static_cast<size_t>(chunk)] =
        kernel(run, chunk, scales.shared, scales.per_sequence, k, nullptr, nullptr);
  };
  parallel_for(num_chunks, body, min_chunks(kMinTokensPerThread, kTokensPerChunk));
  Totals total;
  for (const Totals& t : partial) total.add(t);
  fill_result(total, kl, p.kl_coef, result);
  return ok();
}

// ---------------------------------------------------------------- geo_mean (GMPO)


// pg = Σ_i -Ā_i exp(Σ_t m l_t / n_i) w_i / seqNormalizer · D, with verl's default
// seqNormalizer the number of sequences (torch.mean over the batch).
tirl_status geo_mean_cpu(const Inputs& in, const tirl_policy_loss_options& o,
                         tirl_policy_loss_result* result) {
  const tirl_ppo_options& p = o.ppo;
  const PolicyConstants c = policy_constants(o);
  const double normaliser =
      p.seq_normalizer > 0 ? p.seq_normalizer : static_cast<double>(in.num_seqs);
  const double scale = normaliser > 0 ? p.dp_size / normaliser : 0.0;
  // The KL term, aggregated by `aggregation`.
  const bool kl = in.ref_logp != nullptr;
  SequenceCounts counts;
  Scales kl_scales;
  if (kl) {
    if (per_sequence_aggregation(p.aggregation)) counts = count_sequences(in);
    kl_scales = aggregation_scales(in, p, per_sequence_aggregation(p.aggregation) ? &counts : nullptr);
  }
  const TokenKernelConstants k{c, kl ? TIRL_SIMD_SELECT(select_kl_block)(p.kl_estimator) : nullptr,
                               static_cast<float>(p.kl_coef)};
  const auto sequence_sums = TIRL_SIMD_SELECT(geo_mean_sums);
  const auto gradient = TIRL_SIMD_SELECT(geo_mean_gradient);
  // Each sequence's sums and its tokens' d(clipped log-ratio)/dlogp, then at once its
  // gradient from those (still in cache): one read of the batch from memory, one token term
  // a token.
  std::vector<GeoMeanSequence> seqs(static_cast<size_t>(in.num_seqs));
  std::vector<double> losses(static_cast<size_t>(in.num_seqs));
  std::vector<Totals> partial(static_cast<size_t>(chunk_count(in.num_seqs, kSequencesPerChunk)));
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kSequencesPerChunk;
    const int64_t last = std::min(in.num_seqs, first + kSequencesPerChunk);
    Lanes lanes;
    std::vector<float> dlog_ratio;
    for (int64_t s = first; s < last; ++s) {
      const int64_t begin = in.seq_offsets[s], end = in.seq_offsets[s + 1];
      dlog_ratio.resize(static_cast<size_t>(std::max<int64_t>(end - begin, static_cast<int64_t>(dlog_ratio.size()))));
      const GeoMeanSequence q = sequence_sums(in, begin, end, c, dlog_ratio.data());
      seqs[static_cast<size_t>(s)] = q;
      const double loss =
          geo_mean_sequence_loss(q.log_ratio, q.advantage, q.log_weight, q.masked, in.weights != nullptr);
      losses[static_cast<size_t>(s)] = loss;
      const double n = static_cast<double>(q.masked);
      const float coefficient = static_cast<float>(n > 0 ? scale * loss / n : 0.0);
      const float kl_scale =
          !kl ? 0.0f
              : kl_scales.per_sequence.empty() ? kl_scales.shared
                                               : kl_scales.per_sequence[static_cast<size_t>(s)];
      // coefficient * dl/dlogp: dl/dlogp is 1 or 0 (or 0.5 + 0.5), so the product is exact.
      gradient(in, begin, end, coefficient, kl_scale, k, dlog_ratio.data(), lanes);
    }
    partial[static_cast<size_t>(chunk)] = lanes.totals();
  };
  parallel_for(chunk_count(in.num_seqs, kSequencesPerChunk), body, per_sequence_chunks(in, kMinTokensPerThread));
  Totals total;
  for (int64_t s = 0; s < in.num_seqs; ++s) {
    const GeoMeanSequence& q = seqs[static_cast<size_t>(s)];
    total.pg_loss += scale * losses[static_cast<size_t>(s)];
    total.neg_log_ratio += q.kl_stat;
    total.masked += q.masked;
    total.clipped += q.clipped_upper;
    total.clipped_lower += q.clipped_lower;
    total.non_finite += q.non_finite;
  }
  for (const Totals& t : partial) total.kl_loss += t.kl_loss;
  fill_result(total, kl, p.kl_coef, result);
  result->selected_tokens = 0;
  return ok();
}

}  // namespace

tirl_status policy_loss(const float* logp, const float* old_logp, const float* advantages,
                        const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                        int64_t num_seqs, const float* ref_logp, const float* weights,
                        const tirl_policy_loss_options* options, float* grad,
                        tirl_policy_loss_result* result, tirl_device device) {
  return guarded([&]() -> tirl_status {
    const tirl_policy_loss_options& o = *options;
    result->selected_tokens = 0;
    result->rollout_is_batch_norm_factor = 1.0;
    // The front door has turned 'gspo' and bypass_mode's 'ppo_clip' into 'vanilla'.
    if (o.policy_loss == TIRL_POLICY_VANILLA) {
      return clipped_surrogate(logp, old_logp, advantages, mask, num_tokens, seq_offsets,
                               num_seqs, ref_logp, weights, &o.ppo, grad, &result->ppo, device);
    }
    Inputs in{logp,    old_logp, advantages, mask,        ref_logp, weights,
              nullptr, grad,     num_tokens, seq_offsets, seq_offsets ? num_seqs : 0, true};
    if (o.policy_loss == TIRL_POLICY_GEO_MEAN) return geo_mean_cpu(in, o, result);
    tirl_policy_loss_kind loss = o.policy_loss;
    std::vector<float> is_weights;
    if (loss == TIRL_POLICY_BYPASS_MODE) {
      loss = TIRL_POLICY_REINFORCE;
      in.weights_are_input = false;
      in.is_lower = static_cast<float>(o.rollout_is_threshold_lower);
      in.is_upper = static_cast<float>(o.rollout_is_threshold);
      if (o.rollout_is == TIRL_ROLLOUT_IS_SEQUENCE) {
        in.all_sequence_is_weights = o.rollout_is_batch_normalize != 0;
        is_weights = sequence_is_weights_aside(in, &result->rollout_is_batch_norm_factor);
        in.sequence_is_weights = is_weights.data();
        in.inline_is = kIsSequence;
      } else if (o.rollout_is == TIRL_ROLLOUT_IS_TOKEN) {
        in.inline_is = kIsToken;
        const double mean = o.rollout_is_batch_normalize != 0 ? token_is_weight_mean(in) : 0.0;
        if (mean > 1e-8) {
          in.is_norm = static_cast<float>(mean);
          in.inline_is = kIsTokenNormalized;
          result->rollout_is_batch_norm_factor = mean;
        }
      }
    }
    return token_loss_cpu(in, o, loss, result);
  });
}

}  // namespace tirl::cpu
