// advantages on the CPU: the passes of math/advantages.h over fixed chunks of sequences,
// groups and tokens, their per-token loops as AVX2/AVX-512 kernels (cpu/advantages_kernels.inc)
// that compute the same operations in the same order. Chunking depends only on the sizes, so
// the result does not depend on the thread count (and equals the CUDA backend's where both
// evaluate the same formula unfused). The front door (api/advantages.cc) has checked the
// call and copied the index arrays.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <new>
#include <numeric>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
#include "common/thread_kept.h"
#include "cpu/ops.h"
#include "math/advantages.h"

namespace tirl {
namespace {

// The values before whitening where they are one per sequence (seq_adv[s], as
// advantages::sequence_value), for whiten_values of cpu/advantages_kernels.inc.
struct SequenceValues {
  const int32_t* seq_offsets;
  int64_t num_seqs;
  const double* seq_adv;
  // The sequence holding token t, searched from `s` on (the last offset at or before t:
  // empty sequences are skipped).
  int64_t sequence_of(int64_t t, int64_t s) const {
    while (seq_offsets[s + 1] <= t) ++s;
    return s;
  }
  int64_t first_sequence(int64_t t) const {
    return std::upper_bound(seq_offsets, seq_offsets + num_seqs + 1, t) - seq_offsets - 1;
  }
  float value(int64_t s) const { return static_cast<float>(seq_adv[s]); }
};

// What recurrence_lanes (cpu/advantages_kernels.inc) fetches into L2 besides the tokens
// its lanes reach next: tokens [ahead_begin, ahead_end) (the next set of lanes of the same
// chunk, which this thread walks next), a few lines each iteration in token order, so that
// the range is in L2 when its walk starts. `own_fetched`: the walk before fetched this
// set's own tokens so, and its lanes fetch none 256 tokens ahead.
struct WalkPrefetch {
  int64_t ahead_begin = 0;
  int64_t ahead_end = 0;
  bool own_fetched = false;
};

// What the optimal-token baselines' group pass keeps per thread between calls
// (thread_kept): a group's column sums, and the path variances of the two members it walks
// at once, each a sequence long.
struct TokenBaselineSums {};
struct TokenBaselineVariances {};
struct TokenBaselineSecondVariances {};

// The per-token loops run as vectors, compiled once per SIMD path (common/simd.h).
#define TIRL_SIMD_KERNELS "cpu/advantages_kernels.inc"
#include "common/simd_kernels.h"

using advantages::Problem;
using advantages::SequenceSummary;

// A chunk of sequences of the passes over sequences, and one set of lanes of the
// interleaved token pass (whose chunks hold kLaneSetsPerChunk sets).
constexpr int64_t kSeqsPerChunk = simd_baseline::kRecurrenceLanes;
// The backward recurrences' token pass takes chunks of kLaneSetsPerChunk sets of lanes, so
// that each walk but a chunk's first finds its tokens in L2, fetched during the walk before
// (WalkPrefetch): from evicted caches, gae of 512 x 2048 (EPYC VM of 2026-12-07, medians
// of 101-151 cold calls, both builds in one process) took 1.36-1.37 -> 1.22-1.23 ms on one
// thread (with returns 1.70-1.76 -> 1.51-1.52), 0.74 -> 0.70 ms on two (0.95 -> 0.85 in
// a slow spell of the host); with the batch in L2 the same 0.060 ms. A chunk's first walk
// (a chunk may go to the other thread) and a set whose tokens would fill much of the L2
// (kMaxWalkAheadBytes, of the arrays its walk reads and writes) are fetched by their own
// lanes only, 256 tokens ahead (kRecurrencePrefetchTokens).
constexpr int64_t kLaneSetsPerChunk = 4;
constexpr int64_t kSeqsPerWalkChunk = kLaneSetsPerChunk * kSeqsPerChunk;
constexpr int64_t kMaxWalkAheadBytes = 256 * 1024;
constexpr int64_t kGroupsPerChunk = 2;
// Below this much work per thread a call stays on fewer threads (common/parallel.h;
// measured with `tirl bench --scaling-only`): the per-sequence and per-group passes (by
// their mean tokens per chunk: GRPO's only count and broadcast, 2 threads vs 1 measured
// 0.80-0.95x at 65,536 tokens per thread), and the whitening passes that only add or scale.
constexpr int64_t kMinTokensPerThread = 262144;
constexpr int64_t kMinWhitenedPerThread = 262144;
// grpo, grpo_passk, rloo and gpg do a few operations a sequence and then only write each
// token's advantage (5 B a token moved), and so do those whose passes became as light: opo
// (a mask scan, then the broadcast), remax (the reward-to-go of a score in closed form), gdpo
// and reinforce_plus_plus_baseline (whitened from the sequence advantages: the summary's mask
// scan and one write). Bound by memory bandwidth, they take a second thread from 256K tokens
// a thread. On the EPYC VM of 2026-12-06 (median of 21 paired rounds, 2 threads vs 1, at
// sizes between the bench sweep's), the old 128K a thread ran 0.53-1.04x at 128 sequences
// of 2048 tokens for grpo, rloo, opo and gpg (below 0.95x in 17 of 22 measurements over six
// runs), 0.87-1.04x at 192, and 0.97-1.13x at 256; 1.2-1.8x at 1M tokens.
constexpr int64_t kMinBroadcastTokensPerThread = int64_t{1} << 18;

bool broadcast_only(tirl_advantage_estimator e) {
  return e == TIRL_ADV_GRPO || e == TIRL_ADV_GRPO_PASSK || e == TIRL_ADV_RLOO ||
         e == TIRL_ADV_GPG || e == TIRL_ADV_OPO || e == TIRL_ADV_REMAX || e == TIRL_ADV_GDPO ||
         e == TIRL_ADV_REINFORCE_PLUS_PLUS_BASELINE;
}

// min_chunks_per_thread for `chunks` chunks over `tokens` tokens.
int64_t min_chunks_over(int64_t tokens, int64_t chunks, int64_t min_tokens) {
  return min_chunks(min_tokens, std::max<int64_t>(1, tokens / std::max<int64_t>(1, chunks)));
}

// The token pass of the backward recurrences (reinforce_plus_plus, gae, remax, the
// optimal-token baselines) over `count` <= kSeqsPerChunk sequences from `first`: the
// sequences' steps (math/advantages.h's reinforce_step, gae_step, reward_to_go_step)
// interleaved token by token, each sequence's own steps in token_pass's order and with its
// arithmetic, so the bits are token_pass's; but where one sequence is one chain of
// dependent multiply-adds (a latency per token), kSeqsPerChunk independent chains keep
// the core busy. A full chunk runs its sequences' common length interleaved, each
// sequence's remaining head after it on its own.
// `lanes` (recurrence_lanes of cpu/advantages_kernels.inc, or a function that runs none)
// runs the first steps of a full chunk in vector lanes.
static_assert(kSeqsPerChunk == simd_baseline::kRecurrenceLanes, "a chunk of sequences is one set of lanes");
// `fetch`: what the lanes fetch besides (WalkPrefetch). Returns whether they ran, and so
// fetched fetch's tokens ahead.
template <class Step, class Lanes>
bool interleaved_token_pass(const Problem& p, const SequenceSummary* q, int64_t first,
                            int64_t count, Step step, Lanes lanes, const WalkPrefetch& fetch) {
  advantages::Recurrence r[kSeqsPerChunk];
  int64_t common = 0, in_lanes = 0;
  if (count == kSeqsPerChunk) {
    common = q[0].end - q[0].begin;
    for (int64_t j = 1; j < kSeqsPerChunk; ++j) common = std::min(common, q[j].end - q[j].begin);
    in_lanes = lanes(p, q, first, common, r, fetch);
    for (int64_t i = in_lanes; i < common; ++i) {
#pragma GCC unroll 8
      for (int64_t j = 0; j < kSeqsPerChunk; ++j) step(q[j], first + j, q[j].end - 1 - i, r[j]);
    }
  }
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t t = q[j].end - 1 - common; t >= q[j].begin; --t) step(q[j], first + j, t, r[j]);
  }
  return in_lanes > 0;
}

// The token pass of remax and the optimal-token baselines (reward_to_go_step) for sequence
// s with a score per sequence, in its closed form advantages::reward_to_go_of_score: the
// value from q.begin to q.last, 0 after (where every token is masked out). Loops that only
// write, as the outcome estimators' broadcast. The optimal-token baselines' advantages
// are left unwritten: their group pass takes G from the closed form too
// (advantages::score_to_go) and writes every token.
void reward_to_go_of_score(const Problem& p, const SequenceSummary& q, int64_t s) {
  const int64_t split = q.last + 1 > q.begin ? q.last + 1 : q.begin;
  const double g = advantages::reward_to_go_of_score(p, q, s, split - 1);
  const float to_go = static_cast<float>(g);
  float* adv = p.advantages;
  const uint8_t* mask = p.mask;
  if (p.estimator == TIRL_ADV_REMAX) {
    const float a = static_cast<float>(g - advantages::reward_to_go_baseline(p, s));
    for (int64_t t = q.begin; t < split; ++t) adv[t] = mask[t] != 0 ? a : 0.0f;
    std::fill(adv + split, adv + q.end, 0.0f);
  }
  if (p.returns != nullptr) {
    std::fill(p.returns + q.begin, p.returns + split, to_go);
    std::fill(p.returns + split, p.returns + q.end, 0.0f);
  }
}

// Sequence indices ordered by group id (stably: members keep their input order), and the
// start of each group in that order (one past the last at the end). The CUDA backend's
// stable radix sort gives the same order.
void order_groups(const int32_t* group_ids, int64_t group_size, int64_t num_seqs,
                  std::vector<int32_t>& members, std::vector<int64_t>& group_start) {
  members.resize(static_cast<size_t>(num_seqs));
  std::iota(members.begin(), members.end(), 0);
  group_start.clear();
  if (group_ids != nullptr) {
    std::stable_sort(members.begin(), members.end(),
                     [&](int32_t a, int32_t b) { return group_ids[a] < group_ids[b]; });
    for (int64_t i = 0; i < num_seqs; ++i) {
      if (i == 0 || group_ids[members[i]] != group_ids[members[i - 1]]) group_start.push_back(i);
    }
  } else {
    for (int64_t i = 0; i < num_seqs; i += group_size) group_start.push_back(i);
  }
  group_start.push_back(num_seqs);
}

void advantages_cpu(const Problem& p, const int32_t* seq_offsets, const int32_t* group_ids,
                    int64_t group_size) {
  const int64_t num_seqs = p.num_seqs;
  const tirl_advantage_estimator e = p.estimator;
  // reinforce_plus_plus in its closed form (below) is as light as the broadcast estimators.
  const int64_t min_tokens = broadcast_only(e) || advantages::reinforce_is_constant(p)
                                 ? kMinBroadcastTokensPerThread
                                 : kMinTokensPerThread;
  std::vector<SequenceSummary> summary(static_cast<size_t>(num_seqs));
  // A pass over the sequences that does `work` items of work (its tokens, or a few
  // operations a sequence: then `work` is num_seqs, and a batch of a few thousand
  // sequences is not worth waking a thread, which cost the caller 11-70 us on the 2-vCPU
  // EPYC VM, benchmarks/native/wake_cost.c).
  auto over_sequences = [&](auto&& per_sequence, int64_t work) {
    auto body = [&](int64_t chunk) {
      const int64_t last = std::min(num_seqs, (chunk + 1) * kSeqsPerChunk);
      for (int64_t s = chunk * kSeqsPerChunk; s < last; ++s) per_sequence(s);
    };
    const int64_t chunks = chunk_count(num_seqs, kSeqsPerChunk);
    parallel_for(chunks, body, min_chunks_over(work, chunks, min_tokens), Scaling::kMemory);
  };
  const bool extent = advantages::reads_mask_summary(e);
  const auto mask_extent = TIRL_SIMD_SELECT(mask_extent);
  auto summarize = [&](int64_t s) {
    // advantages::summarize, its mask scan vectorised.
    summary[s] = advantages::summarize_score(p, s, seq_offsets[s], seq_offsets[s + 1]);
    if (extent) mask_extent(p.mask, &summary[s]);
  };
  const bool whiten_from_sequences = advantages::whitens_sequence_values(p);
  // The backward recurrences read a sequence's summary only in its own chunk of the token
  // pass (and the token baselines' group pass after it): there each chunk summarises its
  // sequences first, so their masks (and token rewards) come from memory once, not once
  // for a pass of summaries and again for the token pass, and the call makes one parallel
  // pass fewer. Every other estimator needs all summaries before its token pass.
  const bool summary_in_token_pass = !whiten_from_sequences && !advantages::is_outcome(e);
  if (!summary_in_token_pass) {
    over_sequences(summarize, extent || p.token_rewards != nullptr ? p.num_tokens : num_seqs);
  }

  std::vector<int32_t> members;
  std::vector<int64_t> group_start;
  // The outcome groups: a few operations a member (sequence), no token.
  auto over_groups = [&](auto&& per_group) {
    const int64_t num_groups = static_cast<int64_t>(group_start.size()) - 1;
    auto body = [&](int64_t chunk) {
      const int64_t last = std::min(num_groups, (chunk + 1) * kGroupsPerChunk);
      for (int64_t g = chunk * kGroupsPerChunk; g < last; ++g) {
        const int32_t* first = members.data() + group_start[g];
        per_group([first](int64_t j) { return static_cast<int64_t>(first[j]); },
                  group_start[g + 1] - group_start[g]);
      }
    };
    const int64_t chunks = chunk_count(num_groups, kGroupsPerChunk);
    parallel_for(chunks, body, min_chunks_over(num_seqs, chunks, min_tokens));
  };
  if (advantages::is_grouped(e)) order_groups(group_ids, group_size, num_seqs, members, group_start);

  std::vector<double> seq_adv;
  if (advantages::is_outcome(e)) {
    double alpha = 1.0;
    if (e == TIRL_ADV_GPG) {
      int64_t nonzero = 0;
      for (const SequenceSummary& q : summary) nonzero += q.score != 0.0;
      alpha = advantages::gpg_alpha(num_seqs, nonzero);
    }
    seq_adv.resize(static_cast<size_t>(num_seqs));
    over_groups([&](auto member, int64_t count) {
      advantages::outcome_group(p, summary.data(), member, count, alpha, seq_adv.data());
    });
  }
  // gdpo and reinforce_plus_plus_baseline: before whitening a masked-in token holds its
  // sequence's advantage (token_pass's broadcast), and so does reinforce_plus_plus at gamma
  // 1 with sequence scores (advantages::reinforce_constant): the whitening statistics come
  // from the sequences and their masked-in counts (advantages::sequence_values_sum, from the
  // summary's mask scan), and one pass writes each token once (whiten_values), instead of
  // one pass writing every token and two reading them back.
  const bool reinforce_constant = advantages::reinforce_is_constant(p);
  if (reinforce_constant) {
    seq_adv.resize(static_cast<size_t>(num_seqs));
    for (int64_t s = 0; s < num_seqs; ++s) seq_adv[s] = advantages::reinforce_constant(p, s);
  }
  // The whitening statistics (advantages::Moments), per chunk of kChunk tokens, or of
  // advantages::kSeqsPerWhitenChunk sequences where whiten_from_sequences. gae and
  // reinforce_plus_plus take those of a token chunk that lies within one chunk of sequences
  // right after their token pass wrote it, while it is in cache (summed[c]); the whitening
  // takes the others. Which chunk is taken where depends on the sizes only, and each is the
  // same masked_moments.
  constexpr int64_t kChunk = advantages::kTokensPerChunk;
  const int64_t token_chunks = chunk_count(p.num_tokens, kChunk);
  const auto masked_moments = TIRL_SIMD_SELECT(masked_moments);
  const bool sums_in_token_pass = e == TIRL_ADV_REINFORCE_PLUS_PLUS || e == TIRL_ADV_GAE;
  std::vector<advantages::Moments> moments;
  std::vector<uint8_t> summed;
  if (advantages::is_whitened(e)) {
    moments.resize(static_cast<size_t>(
        whiten_from_sequences ? chunk_count(num_seqs, advantages::kSeqsPerWhitenChunk) : token_chunks));
    summed.assign(static_cast<size_t>(token_chunks), 0);
  }
  // The moments of the token chunks within tokens [begin, end) (those starting at or after begin).
  auto sum_chunks_within = [&](int64_t begin, int64_t end) {
    for (int64_t c = begin / kChunk + (begin % kChunk != 0); c * kChunk < end; ++c) {
      const int64_t last = std::min(p.num_tokens, (c + 1) * kChunk);
      if (last > end) break;
      moments[c] = masked_moments(p, c * kChunk, last);
      summed[c] = 1;
    }
  };

  if (whiten_from_sequences) {
    // No token pass; reinforce_plus_plus's returns are its values before whitening.
    if (reinforce_constant && p.returns != nullptr) {
      over_sequences([&](int64_t s) {
        const float a = static_cast<float>(seq_adv[s]);
        for (int64_t t = summary[s].begin; t < summary[s].end; ++t) p.returns[t] = p.mask[t] != 0 ? a : 0.0f;
      }, p.num_tokens);
    }
  } else if (advantages::is_outcome(e)) {
    over_sequences([&](int64_t s) { advantages::token_pass(p, summary[s], s, seq_adv.data()); }, p.num_tokens);
  } else {
    using advantages::Recurrence;
    const auto lanes = TIRL_SIMD_SELECT(recurrence_lanes);
    auto no_lanes = [](const Problem&, const SequenceSummary*, int64_t, int64_t, Recurrence*,
                       const WalkPrefetch&) { return int64_t{0}; };
    // The bytes a token of the walk reads and writes (mask, advantage; values, token
    // rewards, returns where it has them).
    const int64_t walk_token_bytes = 1 + 4 + (e == TIRL_ADV_GAE ? 4 : 0) +
                                     (p.token_rewards != nullptr ? 4 : 0) + (p.returns != nullptr ? 4 : 0);
    // The sequences [first, first + count) of a chunk, one set of lanes; `fetch` as
    // interleaved_token_pass's. Returns whether its lanes fetched fetch's tokens.
    auto lane_set = [&](int64_t first, int64_t count, const WalkPrefetch& fetch) {
      const SequenceSummary* q = summary.data() + first;
      for (int64_t s = first; s < first + count; ++s) summarize(s);
      bool fetched = false;
      if (e == TIRL_ADV_REINFORCE_PLUS_PLUS) {
        fetched = interleaved_token_pass(p, q, first, count, [&p](const SequenceSummary& sq, int64_t s, int64_t t, Recurrence& r) {
          advantages::reinforce_step(p, sq, s, t, r);
        }, lanes, fetch);
      } else if (e == TIRL_ADV_GAE) {
        fetched = interleaved_token_pass(p, q, first, count, [&p](const SequenceSummary& sq, int64_t s, int64_t t, Recurrence& r) {
          advantages::gae_step(p, sq, s, t, r);
        }, lanes, fetch);
      } else if (p.token_rewards == nullptr) {
        for (int64_t s = first; s < first + count; ++s) reward_to_go_of_score(p, summary[s], s);
      } else {
        double baselines[kSeqsPerChunk];
        for (int64_t j = 0; j < count; ++j) baselines[j] = advantages::reward_to_go_baseline(p, first + j);
        interleaved_token_pass(p, q, first, count, [&p, &baselines, first](const SequenceSummary& sq, int64_t s, int64_t t, Recurrence& r) {
          advantages::reward_to_go_step(p, sq, s, t, baselines[s - first], r);
        }, no_lanes, fetch);
      }
      if (sums_in_token_pass) sum_chunks_within(seq_offsets[first], seq_offsets[first + count]);
      return fetched;
    };
    auto body = [&](int64_t chunk) {
      const int64_t chunk_last = std::min(num_seqs, (chunk + 1) * kSeqsPerWalkChunk);
      bool own_fetched = false;
      for (int64_t first = chunk * kSeqsPerWalkChunk; first < chunk_last; first += kSeqsPerChunk) {
        const int64_t next = std::min(chunk_last, first + kSeqsPerChunk);
        const int64_t next_last = std::min(chunk_last, next + kSeqsPerChunk);
        WalkPrefetch fetch;
        fetch.own_fetched = own_fetched;
        if ((seq_offsets[next_last] - seq_offsets[next]) * walk_token_bytes <= kMaxWalkAheadBytes) {
          fetch.ahead_begin = seq_offsets[next];
          fetch.ahead_end = seq_offsets[next_last];
        }
        own_fetched = lane_set(first, next - first, fetch) && fetch.ahead_end > fetch.ahead_begin;
      }
    };
    const int64_t chunks = chunk_count(num_seqs, kSeqsPerWalkChunk);
    parallel_for(chunks, body, min_chunks_over(p.num_tokens, chunks, min_tokens));
  }

  if (advantages::is_token_baseline(e)) {
    const auto group = TIRL_SIMD_SELECT(token_baseline_group);
    const int64_t num_groups = static_cast<int64_t>(group_start.size()) - 1;
    std::atomic<bool> out_of_memory{false};
    auto body = [&](int64_t chunk) {
      try {  // parallel_for's bodies must not throw (thread_kept may): rethrown below
        const int64_t last = std::min(num_groups, (chunk + 1) * kGroupsPerChunk);
        for (int64_t g = chunk * kGroupsPerChunk; g < last; ++g) {
          // The next group's lines are fetched during this one where this thread takes it
          // next (its chunk's): another chunk may go to another thread.
          const bool has_next = g + 1 < last;
          group(p, summary.data(), members.data() + group_start[g], group_start[g + 1] - group_start[g],
                members.data() + group_start[g + 1], has_next ? group_start[g + 2] - group_start[g + 1] : 0);
        }
      } catch (const std::bad_alloc&) {
        out_of_memory.store(true, std::memory_order_relaxed);
      }
    };
    const int64_t chunks = chunk_count(num_groups, kGroupsPerChunk);
    parallel_for(chunks, body, min_chunks_over(p.num_tokens, chunks, min_tokens));
    if (out_of_memory.load(std::memory_order_relaxed)) throw std::bad_alloc();
  }

  if (advantages::is_whitened(e)) {
    const int64_t chunks = token_chunks;
    const auto whiten = TIRL_SIMD_SELECT(whiten);
    const auto whiten_values = TIRL_SIMD_SELECT(whiten_values);
    const SequenceValues values{seq_offsets, num_seqs, seq_adv.data()};
    // whiten_values copies into returns where they are the advantages (an outcome estimator's).
    Problem whitened_problem = p;
    if (!advantages::is_outcome(e)) whitened_problem.returns = nullptr;
    const int64_t whiten_min =
        min_chunks(whiten_from_sequences ? kMinBroadcastTokensPerThread : kMinWhitenedPerThread, kChunk);
    if (whiten_from_sequences) {
      // A few operations a sequence: on the calling thread.
      constexpr int64_t kSeqChunk = advantages::kSeqsPerWhitenChunk;
      for (size_t c = 0; c < moments.size(); ++c) {
        const int64_t first = static_cast<int64_t>(c) * kSeqChunk;
        moments[c] = advantages::sequence_values_moments(p, summary.data(), seq_adv.data(), first,
                                                         std::min(num_seqs, first + kSeqChunk));
      }
    } else {
      auto moments_body = [&](int64_t c) {
        if (summed[c] == 0) moments[c] = masked_moments(p, c * kChunk, std::min(p.num_tokens, (c + 1) * kChunk));
      };
      parallel_for(chunks, moments_body, whiten_min, Scaling::kMemory);
    }
    const advantages::Whitening w =
        advantages::whitening_of(moments.data(), static_cast<int64_t>(moments.size()));
    const double mean = w.mean, inverse_std = w.inverse_std;
    auto whiten_body = [&](int64_t c) {
      const int64_t first = c * kChunk, last = std::min(p.num_tokens, first + kChunk);
      if (whiten_from_sequences) {
        whiten_values(whitened_problem, values, first, last, mean, inverse_std);
        return;
      }
      whiten(p, first, last, mean, inverse_std);
    };
    parallel_for(chunks, whiten_body, whiten_min, Scaling::kMemory);
  }
}

}  // namespace
}  // namespace tirl

namespace tirl::cpu {

tirl_status advantages(const tirl_advantages_inputs* inputs, int64_t num_tokens, int64_t num_seqs,
                       const tirl_advantages_options* options, float* advantages_out,
                       float* returns, tirl_device) {
  advantages_cpu(advantages::make_problem(*inputs, num_tokens, num_seqs, *options, advantages_out,
                                          returns),
                 inputs->seq_offsets, inputs->group_ids, options->group_size);
  return ok();
}

}  // namespace tirl::cpu
