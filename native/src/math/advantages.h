// Advantage estimators (docs/math.md "Advantage estimators"), with verl's conventions
// (verl/trainer/ppo/core_algos.py). Both backends run these functions unchanged: one call
// per sequence, per group or per chunk of tokens, each a sequential loop in a fixed order
// with sums in double, so the results do not depend on the thread count, and the CPU's and
// the CUDA backend's are bitwise identical where both evaluate them unfused (cuda/advantages.cu
// is compiled with --fmad=false; an x86-64 baseline build has no FMA).
// The backends only decide who runs which call.
#pragma once

#include <cmath>
#include <cstdint>

#include "math/common.h"
#include "math/exp.h"
#include "math/group_advantages.h"
#include "tirl/tirl.h"

namespace tirl::advantages {

// One call's arrays (in the memory of its device) and resolved options.
struct Problem {
  const float* rewards;        // [num_reward_keys * num_seqs] or null (token_rewards)
  const float* token_rewards;  // [num_tokens] or null (rewards)
  const uint8_t* mask;
  const float* values;
  const float* reward_baselines;
  const float* old_logp;
  const float* sum_pi_squared;
  const float* rollout_is_weights;
  const float* reward_weights;
  int64_t num_tokens, num_seqs, num_reward_keys;
  tirl_advantage_estimator estimator;
  bool norm_adv_by_std, handle_zero_tail;
  double epsilon, gamma, lam, f_norm;
  float* advantages;
  float* returns;  // or null
};

// Tokens at or past this many per chunk are whitened chunk by chunk (fixed boundaries).
constexpr int64_t kTokensPerChunk = 4096;
// verl's masked_whiten adds this to the variance.
constexpr double kWhitenEpsilon = 1e-8;

TIRL_HD inline double default_epsilon(tirl_advantage_estimator e) {
  return e == TIRL_ADV_OPTIMAL_TOKEN_BASELINE || e == TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE ? 1e-8
                                                                                          : 1e-6;
}

// A scalar advantage per sequence, broadcast to its masked-in tokens.
TIRL_HD inline bool is_outcome(tirl_advantage_estimator e) {
  return e == TIRL_ADV_GRPO || e == TIRL_ADV_GRPO_PASSK || e == TIRL_ADV_GDPO ||
         e == TIRL_ADV_RLOO || e == TIRL_ADV_REINFORCE_PLUS_PLUS_BASELINE || e == TIRL_ADV_OPO ||
         e == TIRL_ADV_GPG;
}
TIRL_HD inline bool is_token_baseline(tirl_advantage_estimator e) {
  return e == TIRL_ADV_OPTIMAL_TOKEN_BASELINE || e == TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE;
}
TIRL_HD inline bool is_grouped(tirl_advantage_estimator e) {
  return is_outcome(e) || is_token_baseline(e);
}
// Whitened over all masked-in tokens of the batch at the end (verl's masked_whiten).
TIRL_HD inline bool is_whitened(tirl_advantage_estimator e) {
  return e == TIRL_ADV_GAE || e == TIRL_ADV_REINFORCE_PLUS_PLUS ||
         e == TIRL_ADV_REINFORCE_PLUS_PLUS_BASELINE || e == TIRL_ADV_GDPO;
}

// What the group and token passes need to know of a sequence.
struct SequenceSummary {
  int64_t begin, end;  // its tokens
  double score;        // its rewards entry, or the sum of its token rewards (all tokens)
  // Left 0, -1, -1 where reads_mask_summary is false:
  int64_t length;      // masked-in tokens
  int64_t first, last; // first and last masked-in token; -1 when there are none
};

// The outcome estimators other than opo and the whitened ones (gdpo,
// reinforce_plus_plus_baseline: their whitening counts masked-in tokens per sequence,
// sequence_values_sum) read no mask statistics: their pass skips the scan.
TIRL_HD inline bool reads_mask_summary(tirl_advantage_estimator e) {
  return !is_outcome(e) || e == TIRL_ADV_OPO || is_whitened(e);
}

// A sequence's score alone (the mask statistics left 0, -1, -1).
TIRL_HD inline SequenceSummary summarize_score(const Problem& p, int64_t s, int64_t begin,
                                               int64_t end) {
  SequenceSummary q{begin, end, 0.0, 0, -1, -1};
  if (p.token_rewards != nullptr) {
    for (int64_t t = begin; t < end; ++t) q.score += p.token_rewards[t];
  } else if (p.rewards != nullptr) {
    q.score = p.rewards[s];
  }
  return q;
}

// The mask statistics of q's tokens: masked-in count, first and last masked-in token.
TIRL_HD inline void mask_extent(const uint8_t* mask, SequenceSummary* q) {
  for (int64_t t = q->begin; t < q->end; ++t) {
    if (mask[t] == 0) continue;
    if (q->first < 0) q->first = t;
    q->last = t;
    ++q->length;
  }
}

TIRL_HD inline SequenceSummary summarize(const Problem& p, int64_t s, int64_t begin, int64_t end) {
  SequenceSummary q = summarize_score(p, s, begin, end);
  if (reads_mask_summary(p.estimator)) mask_extent(p.mask, &q);
  return q;
}

// The reward of token t of sequence s: its token reward, or the sequence's score on its last
// masked-in token.
TIRL_HD inline double token_reward(const Problem& p, const SequenceSummary& q, int64_t s,
                                   int64_t t) {
  if (p.token_rewards != nullptr) return p.token_rewards[t];
  return t == q.last && p.rewards != nullptr ? static_cast<double>(p.rewards[s]) : 0.0;
}

// Reward component k of sequence s (gdpo); component 0 is the score.
TIRL_HD inline double component(const Problem& p, const SequenceSummary* summary, int64_t k,
                                int64_t s) {
  return k == 0 ? summary[s].score : static_cast<double>(p.rewards[k * p.num_seqs + s]);
}

// gpg's alpha: B / max(number of non-zero scores, 1) (a NaN score counts as non-zero).
TIRL_HD inline double gpg_alpha(int64_t num_seqs, int64_t nonzero) {
  return static_cast<double>(num_seqs) / static_cast<double>(nonzero > 1 ? nonzero : 1);
}

// a > b in torch.topk's order, where NaN is the largest.
TIRL_HD inline bool ranks_above(double a, double b) {
  return (a != a && b == b) || a > b;
}

// The group's mean and sum of squared deviations of component k (two passes, member order).
template <class Member>
TIRL_HD void group_moments(const Problem& p, const SequenceSummary* summary, Member member,
                           int64_t count, int64_t k, double* mean, double* squared_deviations) {
  double sum = 0.0;
  for (int64_t j = 0; j < count; ++j) sum += component(p, summary, k, member(j));
  *mean = sum / static_cast<double>(count);
  double squares = 0.0;
  for (int64_t j = 0; j < count; ++j) {
    const double deviation = component(p, summary, k, member(j)) - *mean;
    squares += deviation * deviation;
  }
  *squared_deviations = squares;
}

// The sequence advantages of one group of an outcome estimator: seq_adv[member(j)] for j
// in [0, count), members in input order. alpha: gpg_alpha of the batch (gpg only).
template <class Member>
TIRL_HD void outcome_group(const Problem& p, const SequenceSummary* summary, Member member,
                           int64_t count, double alpha, double* seq_adv) {
  const tirl_advantage_estimator e = p.estimator;
  double mean = 0.0, squares = 0.0;
  if (e == TIRL_ADV_GDPO) {
    // Each component normalised as grpo normalises the score, then weighted and summed.
    for (int64_t j = 0; j < count; ++j) seq_adv[member(j)] = 0.0;
    for (int64_t k = 0; k < p.num_reward_keys; ++k) {
      group_moments(p, summary, member, count, k, &mean, &squares);
      const GroupScale scale = group_scale(count, mean, squares, p.norm_adv_by_std, p.epsilon);
      const double weight = p.reward_weights != nullptr ? p.reward_weights[k] : 1.0;
      for (int64_t j = 0; j < count; ++j) {
        const int64_t s = member(j);
        seq_adv[s] += weight * ((component(p, summary, k, s) - scale.mean) * scale.inverse_denominator);
      }
    }
    return;
  }
  if (e == TIRL_ADV_GRPO_PASSK) {
    // Only the best member learns: r_max - r_second_max (verl refuses a group of one; it
    // has no second, and gets 0 here).
    for (int64_t j = 0; j < count; ++j) seq_adv[member(j)] = 0.0;
    if (count < 2) return;
    int64_t best = 0;
    for (int64_t j = 1; j < count; ++j) {
      if (ranks_above(summary[member(j)].score, summary[member(best)].score)) best = j;
    }
    int64_t second = best == 0 ? 1 : 0;
    for (int64_t j = 0; j < count; ++j) {
      if (j != best && ranks_above(summary[member(j)].score, summary[member(second)].score)) second = j;
    }
    double advantage = summary[member(best)].score - summary[member(second)].score;
    if (p.norm_adv_by_std) {
      group_moments(p, summary, member, count, 0, &mean, &squares);
      advantage *= group_scale(count, mean, squares, true, p.epsilon).inverse_denominator;
    }
    seq_adv[member(best)] = advantage;
    return;
  }
  if (e == TIRL_ADV_GRPO) {
    group_moments(p, summary, member, count, 0, &mean, &squares);
    const GroupScale scale = group_scale(count, mean, squares, p.norm_adv_by_std, p.epsilon);
    for (int64_t j = 0; j < count; ++j) {
      const int64_t s = member(j);
      seq_adv[s] = (summary[s].score - scale.mean) * scale.inverse_denominator;
    }
    return;
  }
  // rloo, reinforce_plus_plus_baseline, opo, gpg: a baseline, none for a group of one.
  double baseline = 0.0, factor = 1.0;
  if (count > 1) {
    if (e == TIRL_ADV_OPO) {
      // The length-weighted mean score.
      double weighted = 0.0, total_length = 0.0;
      for (int64_t j = 0; j < count; ++j) {
        const SequenceSummary& q = summary[member(j)];
        weighted += static_cast<double>(q.length) * q.score;
        total_length += static_cast<double>(q.length);
      }
      baseline = weighted / total_length;
    } else {
      group_moments(p, summary, member, count, 0, &mean, &squares);
      baseline = mean;
      if (e == TIRL_ADV_RLOO) factor = static_cast<double>(count) / static_cast<double>(count - 1);
    }
  }
  if (e == TIRL_ADV_GPG) factor = alpha / p.f_norm;
  for (int64_t j = 0; j < count; ++j) {
    const int64_t s = member(j);
    seq_adv[s] = (summary[s].score - baseline) * factor;
  }
}

// The per-token weight of the optimal-token baselines: 1 - 2 pi + sum pi^2, times the
// squared rollout importance weight when given. pi = e^old_logp in f32 (exp_any, within 2
// ulp), as verl's torch.exp of the f32 log-probabilities, and the same bits on both
// backends (a double exp would be libm's on the CPU and CUDA's on the GPU).
TIRL_HD inline double path_variance(const Problem& p, int64_t t) {
  const double pi = exp_any(p.old_logp[t]);
  double w = 1.0 - 2.0 * pi + p.sum_pi_squared[t];
  if (p.rollout_is_weights != nullptr) {
    const double rho = p.rollout_is_weights[t];
    w *= rho * rho;
  }
  return w;
}

// The backward recurrences of the token pass: one call per token, t from q.end - 1 down to
// q.begin, `r` starting at {0, 0}. Each writes p.advantages[t] (and p.returns[t]). The CPU
// runs reinforce_step and gae_step on 8 sequences in vector lanes, operation for operation
// (recurrence_lanes in cpu/advantages_kernels.inc: a change here is a change there).
struct Recurrence {
  double running = 0.0;
  double next_value = 0.0;
};
// reinforce_plus_plus: discounted returns over masked-in tokens; masked-out tokens pass the
// running return through unchanged (their own rewards are dropped, as in verl).
TIRL_HD inline void reinforce_step(const Problem& p, const SequenceSummary& q, int64_t s,
                                   int64_t t, Recurrence& r) {
  float value = 0.0f;
  if (p.mask[t] != 0) {
    r.running = token_reward(p, q, s, t) + p.gamma * r.running;
    value = static_cast<float>(r.running);
  }
  p.advantages[t] = value;
  if (p.returns != nullptr) p.returns[t] = value;
}
// reinforce_plus_plus with gamma = 1 and a score per sequence (p.token_rewards null) has a
// closed form: r.running is 0 + score from q.last down (later steps compute 0 + 1 * x,
// which is x for any x but -0, and 0 + score is never -0) and untouched (+0) after q.last,
// where every token is masked out. So each masked-in token's value is
// static_cast<float>(this), masked-out ones 0, as reinforce_step would write.
TIRL_HD inline bool reinforce_is_constant(const Problem& p) {
  return p.estimator == TIRL_ADV_REINFORCE_PLUS_PLUS && p.gamma == 1.0 &&
         p.token_rewards == nullptr && p.rewards != nullptr;
}
TIRL_HD inline double reinforce_constant(const Problem& p, int64_t s) {
  return 0.0 + static_cast<double>(p.rewards[s]);
}
// gae: TD errors and their lambda-return; masked-out tokens carry next value and running
// advantage through (verl's "skip values and TD-error on observation tokens").
TIRL_HD inline void gae_step(const Problem& p, const SequenceSummary& q, int64_t s, int64_t t,
                             Recurrence& r) {
  const double value = p.values[t];
  const double delta = token_reward(p, q, s, t) + p.gamma * r.next_value - value;
  if (p.mask[t] != 0) {
    r.running = delta + p.gamma * p.lam * r.running;
    r.next_value = value;
  }
  p.advantages[t] = p.mask[t] != 0 ? static_cast<float>(r.running) : 0.0f;
  if (p.returns != nullptr) p.returns[t] = static_cast<float>(r.running + value);
}
// remax and the optimal-token baselines: the reward-to-go of masked-in rewards (r.running),
// on every token; remax's advantage subtracts `baseline` (its reward_baselines entry) on
// masked-in tokens, the others' is the reward-to-go itself.
TIRL_HD inline void reward_to_go_step(const Problem& p, const SequenceSummary& q, int64_t s,
                                      int64_t t, double baseline, Recurrence& r) {
  if (p.mask[t] != 0) r.running += token_reward(p, q, s, t);
  const float g = static_cast<float>(r.running);
  if (p.estimator == TIRL_ADV_REMAX) {
    p.advantages[t] = p.mask[t] != 0 ? static_cast<float>(r.running - baseline) : 0.0f;
  } else {
    p.advantages[t] = g;
  }
  if (p.returns != nullptr) p.returns[t] = g;
}
// With a score per sequence (p.token_rewards null) the only reward is on q.last, so the
// recurrence of reward_to_go_step has a closed form: r.running is +0 after q.last (it
// adds nothing there), 0 + score from q.last on (later adds are of +0, which leave a
// value that is not -0 as it is), and 0 everywhere on a fully masked sequence (q.last -1).
TIRL_HD inline double reward_to_go_of_score(const Problem& p, const SequenceSummary& q, int64_t s,
                                            int64_t t) {
  return t <= q.last && p.rewards != nullptr ? 0.0 + static_cast<double>(p.rewards[s]) : 0.0;
}
TIRL_HD inline double reward_to_go_baseline(const Problem& p, int64_t s) {
  return p.estimator == TIRL_ADV_REMAX ? static_cast<double>(p.reward_baselines[s]) : 0.0;
}

// The token pass of sequence s: writes p.advantages (before whitening; for the
// optimal-token baselines the reward-to-go, which their group pass turns into
// advantages) and p.returns where they are not the final advantages.
// seq_adv: the outcome estimators' sequence advantages.
TIRL_HD inline void token_pass(const Problem& p, const SequenceSummary& q, int64_t s,
                               const double* seq_adv) {
  const tirl_advantage_estimator e = p.estimator;
  float* adv = p.advantages;
  float* ret = p.returns;
  if (is_outcome(e)) {
    const float a = static_cast<float>(seq_adv[s]);
    for (int64_t t = q.begin; t < q.end; ++t) {
      adv[t] = p.mask[t] != 0 ? a : 0.0f;
      if (ret != nullptr && !is_whitened(e)) ret[t] = adv[t];
    }
    return;
  }
  Recurrence r;
  if (e == TIRL_ADV_REINFORCE_PLUS_PLUS) {
    for (int64_t t = q.end - 1; t >= q.begin; --t) reinforce_step(p, q, s, t, r);
  } else if (e == TIRL_ADV_GAE) {
    for (int64_t t = q.end - 1; t >= q.begin; --t) gae_step(p, q, s, t, r);
  } else {
    const double baseline = reward_to_go_baseline(p, s);
    for (int64_t t = q.end - 1; t >= q.begin; --t) reward_to_go_step(p, q, s, t, baseline, r);
  }
}

// The optimal-token baseline of one group, given each masked-in token's reward-to-go G
// (to_go): per column k, B_k = sum G W / (sum W + epsilon) over the
// members with a masked-in token at k, W the running sum of path_variance over the
// member's masked-in tokens; A = G - B on masked-in tokens, 0 elsewhere.
// scratch(begin, columns): where the group keeps its `columns` column sums (a ColumnSums
// each), the group's widest member starting at token `begin`; e.g. the range from `begin`
// of an array of num_tokens, which no other group touches (direct_scratch).
// variances(q): what gives path_variance(p, t) for the tokens t of member q, called once
// per member before its tokens (direct_path_variances evaluates it there and then).
// to_go(q, s): what gives G(t) for the masked-in tokens t of member q (sequence s), the
// float the token pass left in p.advantages[t] as a double (stored_to_go), or, with a
// score per sequence, its closed form (score_to_go), so that the token pass need not write
// G for the group pass to read it back.
struct ColumnSums {
  double numerator;    // sum G W
  double denominator;  // sum W
};
struct DirectScratch {
  ColumnSums* sums;
  TIRL_HD ColumnSums* operator()(int64_t begin, int64_t) const { return sums + begin; }
};
TIRL_HD inline DirectScratch direct_scratch(ColumnSums* sums) { return DirectScratch{sums}; }
struct DirectPathVariance {
  const Problem* p;
  TIRL_HD double operator()(int64_t t) const { return path_variance(*p, t); }
};
struct DirectPathVariances {
  const Problem* p;
  TIRL_HD DirectPathVariance operator()(const SequenceSummary&) const { return DirectPathVariance{p}; }
};
TIRL_HD inline DirectPathVariances direct_path_variances(const Problem& p) {
  return DirectPathVariances{&p};
}
struct StoredToGoOf {
  const float* advantages;
  TIRL_HD double operator()(int64_t t) const { return static_cast<double>(advantages[t]); }
};
struct StoredToGo {
  const Problem* p;
  TIRL_HD StoredToGoOf operator()(const SequenceSummary&, int64_t) const {
    return StoredToGoOf{p->advantages};
  }
};
TIRL_HD inline StoredToGo stored_to_go(const Problem& p) { return StoredToGo{&p}; }
// G on every masked-in token (t <= q.last) of a sequence with a score is
// reward_to_go_of_score's at q.last, as a float (what the token pass stores).
struct ScoreToGoOf {
  double g;
  TIRL_HD double operator()(int64_t) const { return g; }
};
struct ScoreToGo {
  const Problem* p;
  TIRL_HD ScoreToGoOf operator()(const SequenceSummary& q, int64_t s) const {
    return ScoreToGoOf{static_cast<double>(static_cast<float>(reward_to_go_of_score(*p, q, s, q.last)))};
  }
};
TIRL_HD inline ScoreToGo score_to_go(const Problem& p) { return ScoreToGo{&p}; }
// A = G - b on the masked-in tokens t of [from, to), 0 on the others; G = to_go(t) (a
// to_go(q, s) of the member's), b = baselines[t - from].numerator (a column's B_k, left
// there by token_baseline_group), or 0 where baselines is null.
template <class ToGoOf>
TIRL_HD void subtract_baseline(const Problem& p, int64_t from, int64_t to,
                               const ColumnSums* baselines, ToGoOf to_go) {
  float* adv = p.advantages;
  for (int64_t t = from; t < to; ++t) {
    const double b = baselines != nullptr ? baselines[t - from].numerator : 0.0;
    adv[t] = p.mask[t] != 0 ? static_cast<float>(to_go(t) - b) : 0.0f;
  }
}
// The first token from t on (before end) that is masked in (in false) or masked out (in
// true), or end. On a little-endian host 8 mask bytes at a time (a byte-by-byte scan cost
// tir_optimal_token_baseline's last pass about 0.4 ms of 3 at 512 x 2048 tokens).
TIRL_HD inline int64_t mask_run_end(const uint8_t* mask, int64_t t, int64_t end, bool in) {
#if !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__)) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  const uint64_t kLow = 0x7f7f7f7f7f7f7f7full, kHigh = 0x8080808080808080ull;
  for (; t + 8 <= end; t += 8) {
    uint64_t word;
    __builtin_memcpy(&word, mask + t, 8);
    // The high bit of each byte that is not 0 (no carry crosses a byte).
    const uint64_t nonzero = (((word & kLow) + kLow) | word) & kHigh;
    const uint64_t stops = in ? ~nonzero & kHigh : nonzero;
    if (stops != 0) return t + __builtin_ctzll(stops) / 8;
  }
#endif
  while (t < end && (mask[t] != 0) == in) ++t;
  return t;
}
// One member's token of column k: its W (`path`, the running sum of path_variance over its
// masked-in tokens) grows by the token's `variance`, and the column takes W and G W.
TIRL_HD inline void add_token(ColumnSums& column, double& path, double variance, double g) {
  path += variance;
  column.numerator += g * path;
  column.denominator += path;
}
// Where a member's walk over its masked-in tokens stands: token t (masked in, or past
// q.last), its column k and W so far.
struct MemberWalk {
  int64_t t;
  int64_t k;
  double path;
};
TIRL_HD inline MemberWalk member_walk(const SequenceSummary& q) { return MemberWalk{q.first, 0, 0.0}; }
// Adds member q's terms from `at` to the end of its span: run by run of masked-in tokens.
// The masked-out runs between them (tool outputs, about a third of a member's span) are
// skipped 8 mask bytes at a time (mask_run_end), not token by token with a load, a test and
// a branch each. A column is token q.first + k, or for tir the member's k-th masked-in token.
template <class Variance, class ToGoOf>
TIRL_HD void add_member_terms(const Problem& p, const SequenceSummary& q, bool tir, Variance variance, ToGoOf g,
                              ColumnSums* sums, MemberWalk at) {
  int64_t k = at.k;
  double path = at.path;
  for (int64_t t = at.t; t <= q.last;) {
    const int64_t stop = mask_run_end(p.mask, t + 1, q.last + 1, true);
    if (!tir) k = t - q.first;
    for (; t < stop; ++t, ++k) add_token(sums[k], path, variance(t), g(t));
    t = mask_run_end(p.mask, t, q.last + 1, false);
  }
}
// token_baseline_group's column sums, member by member in member order: each column takes
// its members' terms in that order. A CPU kernel may walk several members at once in
// another order of operations that keeps each column's (cpu/advantages_kernels.inc's
// PairColumnSums); token_baseline_group_of takes either as `add_columns(sums)`.
template <class Member, class Variances, class ToGo>
struct MemberColumnSums {
  const Problem* problem;
  const SequenceSummary* summary;
  Member member;
  int64_t count;
  Variances variances;
  ToGo to_go;
  TIRL_HD void operator()(ColumnSums* sums) const {
    const bool tir = problem->estimator == TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE;
    for (int64_t j = 0; j < count; ++j) {
      const SequenceSummary& q = summary[member(j)];
      if (q.length == 0) continue;
      add_member_terms(*problem, q, tir, variances(q), to_go(q, member(j)), sums, member_walk(q));
    }
  }
};
template <class Member, class Scratch, class AddColumns, class ToGo>
TIRL_HD void token_baseline_group_of(const Problem& p, const SequenceSummary* summary, Member member,
                                     int64_t count, Scratch scratch, AddColumns add_columns,
                                     ToGo to_go) {
  const bool tir = p.estimator == TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE;
  // tir leaves fully masked members out of the group; the other counts them.
  auto counts = [&](const SequenceSummary& q) { return !tir || q.length > 0; };
  // Columns a member spans: from its first masked-in token to its last, or its masked-in count.
  auto span = [&](const SequenceSummary& q) {
    return q.length == 0 ? int64_t{0} : tir ? q.length : q.last - q.first + 1;
  };
  int64_t members = 0, widest = -1, columns = 0;
  int64_t longest = -1, longest_count = 0, second_length = 0;
  for (int64_t j = 0; j < count; ++j) {
    const SequenceSummary& q = summary[member(j)];
    if (!counts(q)) continue;
    ++members;
    if (span(q) > columns || widest < 0) {
      columns = span(q);
      widest = j;
    }
    // handle_zero_tail's longest and second-longest lengths (masked-in counts).
    if (longest < 0 || q.length > summary[member(longest)].length) {
      if (longest >= 0) second_length = summary[member(longest)].length;
      longest = j;
      longest_count = 1;
    } else if (q.length == summary[member(longest)].length) {
      ++longest_count;
      second_length = q.length;
    } else if (q.length > second_length) {
      second_length = q.length;
    }
  }
  const bool baseline = members > 1;
  ColumnSums* sums = nullptr;
  if (baseline) {
    sums = scratch(summary[member(widest)].begin, columns);
    for (int64_t k = 0; k < columns; ++k) sums[k] = ColumnSums{0.0, 0.0};
    add_columns(sums);
  }
  // B_k once per column, in place of its numerator.
  for (int64_t k = 0; baseline && k < columns; ++k) {
    sums[k].numerator = sums[k].numerator / (sums[k].denominator + p.epsilon);
  }
  const int64_t tail_member =
      baseline && p.handle_zero_tail && longest_count == 1 &&
              summary[member(longest)].length > second_length
          ? longest
          : -1;
  for (int64_t j = 0; j < count; ++j) {
    const SequenceSummary& q = summary[member(j)];
    const auto g = to_go(q, member(j));
    // Columns from `zero_from` on take B = 0: all without a baseline, the zero tail of the
    // tail member.
    const int64_t zero_from = !baseline ? 0 : j == tail_member ? second_length : columns;
    if (!tir) {
      // Column k is token q.first + k: B on [q.first, q.first + min(zero_from, span)), 0
      // on the tokens around (where those before q.first and after q.last are masked out).
      const int64_t from = q.length > 0 ? q.first : q.end;
      const int64_t to = q.length > 0 ? from + (zero_from < span(q) ? zero_from : span(q)) : q.end;
      subtract_baseline(p, q.begin, from, nullptr, g);
      subtract_baseline(p, from, to, sums, g);
      subtract_baseline(p, to, q.end, nullptr, g);
      continue;
    }
    // tir: column k is the member's k-th masked-in token; a run of masked-in tokens takes
    // consecutive columns (B below zero_from, 0 from there), a masked-out run 0.
    int64_t k = 0;
    for (int64_t t = q.begin; t < q.end;) {
      const bool in = p.mask[t] != 0;
      const int64_t stop = mask_run_end(p.mask, t + 1, q.end, in);
      if (!in) {
        subtract_baseline(p, t, stop, nullptr, g);
      } else {
        const int64_t with_b = k >= zero_from ? t : zero_from - k < stop - t ? t + (zero_from - k) : stop;
        subtract_baseline(p, t, with_b, sums + k, g);
        subtract_baseline(p, with_b, stop, nullptr, g);
        k += stop - t;
      }
      t = stop;
    }
  }
}

// token_baseline_group_of with the column sums member by member (MemberColumnSums).
template <class Member, class Scratch, class Variances, class ToGo>
TIRL_HD void token_baseline_group(const Problem& p, const SequenceSummary* summary, Member member,
                                  int64_t count, Scratch scratch, Variances variances,
                                  ToGo to_go) {
  token_baseline_group_of(p, summary, member, count, scratch,
                          MemberColumnSums<Member, Variances, ToGo>{&p, summary, member, count, variances, to_go},
                          to_go);
}

// G as the token pass left it in p.advantages.
template <class Member, class Scratch, class Variances>
TIRL_HD void token_baseline_group(const Problem& p, const SequenceSummary* summary, Member member,
                                  int64_t count, Scratch scratch, Variances variances) {
  token_baseline_group(p, summary, member, count, scratch, variances, stored_to_go(p));
}

// The problem of one call that passed the front door's checks (api/advantages.cc): host
// code, which both backends share.
inline Problem make_problem(const tirl_advantages_inputs& in, int64_t num_tokens, int64_t num_seqs,
                            const tirl_advantages_options& o, float* advantages, float* returns) {
  return Problem{in.rewards,
                 num_tokens > 0 ? in.token_rewards : nullptr,
                 in.mask,
                 in.values,
                 in.reward_baselines,
                 in.old_logp,
                 in.sum_pi_squared,
                 in.rollout_is_weights,
                 in.reward_weights,
                 num_tokens,
                 num_seqs,
                 o.num_reward_keys,
                 o.estimator,
                 o.norm_adv_by_std != 0,
                 o.handle_zero_tail != 0,
                 o.epsilon < 0 ? default_epsilon(o.estimator) : o.epsilon,
                 o.gamma,
                 o.lam,
                 o.f_norm,
                 advantages,
                 returns};
}

// Whitening statistics: partial sums over tokens [first, last), combined in chunk order
// (vector forms: masked_sum and friends in cpu/advantages_kernels.inc).
// Within a chunk, token first + i adds to partial sum i % kWhitenLanes and the partial sums
// are added in lane order at the end (add_lanes), so that a CPU vector of kWhitenLanes
// doubles (cpu/advantages_kernels.inc) computes these very sums, without a dependent add
// per token. The lanes start at +0 and a masked-out token adds nothing.
constexpr int64_t kWhitenLanes = 16;
TIRL_HD inline double add_lanes(const double* lanes) {
  double s = 0.0;
  for (int64_t l = 0; l < kWhitenLanes; ++l) s += lanes[l];
  return s;
}
TIRL_HD inline void masked_sum(const Problem& p, int64_t first, int64_t last, double* sum,
                               int64_t* count) {
  double lanes[kWhitenLanes] = {};
  int64_t n = 0;
  for (int64_t t = first; t < last; ++t) {
    if (p.mask[t] == 0) continue;
    lanes[(t - first) % kWhitenLanes] += p.advantages[t];
    ++n;
  }
  *sum = add_lanes(lanes);
  *count = n;
}
// One token's term of the squared deviations.
TIRL_HD inline double squared_deviation(float a, double mean) {
  const double deviation = static_cast<double>(a) - mean;
  return deviation * deviation;
}
TIRL_HD inline double masked_squared_deviations(const Problem& p, int64_t first, int64_t last,
                                                double mean) {
  double lanes[kWhitenLanes] = {};
  for (int64_t t = first; t < last; ++t) {
    if (p.mask[t] == 0) continue;
    lanes[(t - first) % kWhitenLanes] += squared_deviation(p.advantages[t], mean);
  }
  return add_lanes(lanes);
}
// verl's masked_whiten: (x - mean) / sqrt(unbiased variance + 1e-8). One masked-in token
// (where verl raises) has variance 0.
TIRL_HD inline double whiten_inverse_std(int64_t count, double squared_deviations) {
  const double variance =
      count > 1 ? squared_deviations / static_cast<double>(count - 1) : 0.0;
  return 1.0 / sqrt(variance + kWhitenEpsilon);
}
// Where every masked-in token of a sequence holds one value before whitening (the whitened
// outcome estimators, gdpo and reinforce_plus_plus_baseline, broadcast their sequence
// advantage; reinforce_plus_plus in its closed form holds reinforce_constant), the
// whitening statistics come from the sequences: sum = sum_s n_s v_s and squared deviations
// sum_s n_s (v_s - mean)^2, n_s the masked-in count of s (its summary's length) and v_s
// sequence_value, so no pass over the tokens but the final one. Partial sums over fixed
// chunks of kSeqsPerWhitenChunk sequences, each in sequence order, combined in chunk order
// (sequence_values_moments, whitening_of), on both backends. A sequence without masked-in
// tokens adds nothing (not even a NaN value times 0).
constexpr int64_t kSeqsPerWhitenChunk = 1024;
TIRL_HD inline bool whitens_sequence_values(const Problem& p) {
  return (is_outcome(p.estimator) && is_whitened(p.estimator)) || reinforce_is_constant(p);
}
// The value of sequence s's masked-in tokens before whitening, where
// whitens_sequence_values(p): seq_adv[s] as token_pass broadcasts it, or
// reinforce_constant (seq_adv unread).
TIRL_HD inline float sequence_value(const Problem& p, const double* seq_adv, int64_t s) {
  return static_cast<float>(reinforce_is_constant(p) ? reinforce_constant(p, s) : seq_adv[s]);
}
TIRL_HD inline void sequence_values_sum(const Problem& p, const SequenceSummary* summary,
                                        const double* seq_adv, int64_t first, int64_t last,
                                        double* sum, int64_t* count) {
  double total = 0.0;
  int64_t n = 0;
  for (int64_t s = first; s < last; ++s) {
    const int64_t length = summary[s].length;
    if (length == 0) continue;
    total += static_cast<double>(length) * static_cast<double>(sequence_value(p, seq_adv, s));
    n += length;
  }
  *sum = total;
  *count = n;
}
TIRL_HD inline double sequence_values_squared_deviations(const Problem& p,
                                                         const SequenceSummary* summary,
                                                         const double* seq_adv, int64_t first,
                                                         int64_t last, double mean) {
  double total = 0.0;
  for (int64_t s = first; s < last; ++s) {
    const int64_t length = summary[s].length;
    if (length == 0) continue;
    total += static_cast<double>(length) * squared_deviation(sequence_value(p, seq_adv, s), mean);
  }
  return total;
}
// A chunk's whitening statistics: its masked-in count, their sum and their squared
// deviations about the chunk's own mean (chunk_mean), so that one chunk's two passes run
// while it is in cache (the token pass's output, or a chunk read once into cache) and no
// third pass over the tokens waits for the batch's mean; whitening_of combines the
// chunks in chunk order (Chan, Golub and LeVeque's pairwise update, taken sequentially:
// squares = sum_c [M2_c + n_c (mean_c - mean)^2]), as stable as the two-pass sums.
// moments_of(sum, squares): sum(&sum, &count) and squares(mean) over one chunk (masked_sum
// and masked_squared_deviations, or their CPU vector forms, or the sequence_values ones).
struct Moments {
  double sum = 0.0;
  double squared_deviations = 0.0;
  int64_t count = 0;
};
TIRL_HD inline double chunk_mean(double sum, int64_t count) {
  return count > 0 ? sum / static_cast<double>(count) : 0.0;
}
template <class Sum, class Squares>
TIRL_HD Moments moments_of(Sum sum, Squares squares) {
  Moments m;
  sum(&m.sum, &m.count);
  m.squared_deviations = squares(chunk_mean(m.sum, m.count));
  return m;
}
TIRL_HD inline Moments masked_moments(const Problem& p, int64_t first, int64_t last) {
  return moments_of([&](double* sum, int64_t* count) { masked_sum(p, first, last, sum, count); },
                    [&](double mean) { return masked_squared_deviations(p, first, last, mean); });
}
TIRL_HD inline Moments sequence_values_moments(const Problem& p, const SequenceSummary* summary,
                                               const double* seq_adv, int64_t first,
                                               int64_t last) {
  return moments_of(
      [&](double* sum, int64_t* count) {
        sequence_values_sum(p, summary, seq_adv, first, last, sum, count);
      },
      [&](double mean) {
        return sequence_values_squared_deviations(p, summary, seq_adv, first, last, mean);
      });
}
// The batch's mean and whiten_inverse_std from `chunks` chunks' moments.
struct Whitening {
  double mean;
  double inverse_std;
};
TIRL_HD inline Whitening whitening_of(const Moments* moments, int64_t chunks) {
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    sum += moments[c].sum;
    count += moments[c].count;
  }
  const double mean = chunk_mean(sum, count);
  double squares = 0.0;
  for (int64_t c = 0; c < chunks; ++c) {
    if (moments[c].count == 0) continue;
    const double deviation = chunk_mean(moments[c].sum, moments[c].count) - mean;
    squares += moments[c].squared_deviations +
               static_cast<double>(moments[c].count) * (deviation * deviation);
  }
  return Whitening{mean, whiten_inverse_std(count, squares)};
}
// One masked-in token whitened.
TIRL_HD inline float whitened(float a, double mean, double inverse_std) {
  return static_cast<float>((static_cast<double>(a) - mean) * inverse_std);
}
// Whitens tokens [first, last) in place; masked-out tokens get 0. returns, when the
// estimator's returns are its advantages, receives them too.
TIRL_HD inline void whiten(const Problem& p, int64_t first, int64_t last, double mean,
                           double inverse_std) {
  const bool copy = p.returns != nullptr && is_outcome(p.estimator);
  for (int64_t t = first; t < last; ++t) {
    const float a = p.mask[t] != 0 ? whitened(p.advantages[t], mean, inverse_std) : 0.0f;
    p.advantages[t] = a;
    if (copy) p.returns[t] = a;
  }
}

}  // namespace tirl::advantages
