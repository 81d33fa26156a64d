// Rollout correction (docs/math.md): the engine that sampled (vLLM, SGLang) is not the
// trainer, so their log-probs differ. From the log-ratio d = logp - rollout_logp of each
// masked-in token this computes importance weights (token or sequence level; truncated,
// TIS, or zeroed outside a band, IcePop), rejection masks (token_k*, seq_sum_k*,
// seq_mean_k*, seq_max_k*) and verl's off-policy diagnostics, following verl's
// verl/trainer/ppo/rollout_corr_helper.py.
//
// Both backends walk a sequence with rollout_sequence() below and merge the per-sequence
// contributions with rollout_merge(); they differ only in how sequences are handed out
// and in which fixed order the partial sums are merged. rollout_finalize() turns the
// merged sums into the result on the host.
#pragma once

#include <math.h>

#include <cmath>
#include <cstdint>

#include "math/common.h"
#include "math/exp.h"
#include "tirl/tirl.h"

namespace tirl {

// verl's SAFETY_BOUND: log-ratios are clamped to [-20, 20] before exponentiating.
constexpr double kRolloutSafetyBound = 20.0;
constexpr int kRolloutOptions = TIRL_ROLLOUT_RS_COUNT;

// ---------------------------------------------------------------- per-token formulas

// Neither NaN nor infinite (without <cmath>'s isfinite, which device code lacks).
TIRL_HD inline bool rollout_finite(double x) { return x - x == 0.0; }

// c ? a : b into `out`: for doubles (c a bool), and for vectors of doubles (c a vector
// compare's mask, all bits or none per lane, M its type), on the bits. The per-token
// formulas below are templates on T over it, so that the CPU's token loop
// (cpu/rollout_correction_kernels.inc) takes them on whole registers of tokens; by
// reference, as rollout_k_as is.
TIRL_HD inline void rollout_select_as(bool c, const double& a, const double& b, double& out) { out = c ? a : b; }
template <class M, class T>
TIRL_HD inline void rollout_select_as(const M& c, const T& a, const T& b, T& out) {
  M a_bits, b_bits;
  bits_as(a, a_bits);
  bits_as(b, b_bits);
  const M chosen = (c & a_bits) | (~c & b_bits);
  bits_as(chosen, out);
}

// clamp(d, -20, 20); NaN stays NaN.
template <class T>
TIRL_HD inline void rollout_safe_log_ratio_as(const T& d, T& out) {
  const T upper = T{} + kRolloutSafetyBound, lower = T{} - kRolloutSafetyBound;
  T high;
  rollout_select_as(d > kRolloutSafetyBound, upper, d, high);
  rollout_select_as(d < -kRolloutSafetyBound, lower, high, out);
}
TIRL_HD inline double rollout_safe_log_ratio(double d) {
  double out;
  rollout_safe_log_ratio_as(d, out);
  return out;
}

// Maximum and minimum that let NaN win, as torch.max / torch.min do.
TIRL_HD inline double rollout_max(double a, double b) { return (a != a || a > b) ? a : (b != b || b > a ? b : a); }
TIRL_HD inline double rollout_min(double a, double b) { return (a != a || a < b) ? a : (b != b || b < a ? b : a); }

// torch.clamp(x, lo, hi): NaN stays NaN.
TIRL_HD inline double rollout_clamp(double x, double lo, double hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

// The three divergence estimators of a rejection option, from the clamped log-ratio c
// and rho = exp(c): k1 = -c, k2 = c^2 / 2, k3 = rho - 1 - c.
// A template so that the CPU's statistics lanes (cpu/rollout_correction_kernels.inc) take
// it on whole vectors of tokens; by reference and into an out-parameter, because Clang
// refuses to pass a vector wider than the baseline's registers by value to a function
// compiled without its ISA (this header is, outside the kernels' target regions).
template <class T>
TIRL_HD inline void rollout_k_as(int k, const T& c, const T& rho, T& out) {
  out = k == 1 ? -c : (k == 2 ? 0.5 * c * c : (rho - 1.0) - c);
}
TIRL_HD inline double rollout_k(int k, double c, double rho) {
  double out;
  rollout_k_as(k, c, rho, out);
  return out;
}

// ---------------------------------------------------------------- rejection options

enum RolloutAggregate : int { kAggToken = 0, kAggSeqSum = 1, kAggSeqMean = 2, kAggSeqMax = 3 };

// The options run token_k1..3, seq_sum_k1..3, seq_mean_k1..3, seq_max_k2..3 (tirl.h).
TIRL_HD inline int rollout_rs_estimator(int option) {  // 1, 2 or 3
  return option < 9 ? option % 3 + 1 : option - 7;
}
TIRL_HD inline int rollout_rs_aggregate(int option) {  // a RolloutAggregate
  return option < 9 ? option / 3 : kAggSeqMax;
}

// ---------------------------------------------------------------- per-call setup

// Per-option slots of the partial sums (each option enabled gets one block of these).
enum RolloutOptionSlot : int {
  kRsStatSum = 0,   // sum over masked tokens of the statistic (a sequence value per token)
  kRsStdCount,      // moments of the statistic clamped to [lower, upper] (std), per token
  kRsStdMean,
  kRsStdM2,
  kRsTokenMax,      // token options: max / min of the statistic over masked tokens
  kRsTokenMin,
  kRsTokenHigh,     // token options: masked tokens above the upper / below the lower bound
  kRsTokenLow,
  kRsRejectedTokens,  // masked tokens this option rejects
  kRsRejectedSeqs,    // valid sequences with a masked token it rejects
  kRsSeqSum,          // over valid sequences of the sequence value v
  kRsSeqStdCount,     // moments of v (seq_std)
  kRsSeqStdMean,
  kRsSeqStdM2,
  kRsSeqMax,
  kRsSeqMin,
  kRsSeqAbsMax,       // max |v| (verl's seq_max_deviation from the ideal 0)
  kRsSeqHigh,         // sequences with v above the upper / below the lower bound
  kRsSeqLow,
  kRsSlots
};

// Slots shared by every call. Counts are kept as doubles: exact below 2^53.
enum RolloutSlot : int {
  kTokens = 0,     // masked-in tokens
  kValidSeqs,      // sequences with at least one
  kNonFinite,      // masked-in tokens with a non-finite logp or rollout_logp
  kKlSum,          // sum of rollout_logp - logp
  kK3KlSum,        // sum of exp(d) - d - 1 (unclamped, as verl's k3_kl)
  kRho2Sum,        // sum of exp(2 clamp(d))
  kTrainLogPplSum,  // over valid sequences: -mean logp
  kTrainPplSum,     // exp(-mean logp)
  kRolloutLogPplSum,
  kRolloutPplSum,
  kLogPplDiffSum,   // mean rollout_logp - mean logp
  kLogPplAbsDiffSum,
  kLogPplDiffMax,
  kLogPplDiffMin,
  kPplRatioSum,     // exp(log_ppl_diff)
  kChi2SeqSum,      // exp(2 clamp(sum d))
  kIsWeightSum,     // over masked tokens: applied weight w
  kIsWeightMax,     // token level: max / min of w
  kIsWeightMin,
  kIsClampSum,      // c = clamp(w, 0, upper): sums of c and c^2 (ESS), moments of c (std)
  kIsClamp2Sum,
  kIsStdCount,
  kIsStdMean,
  kIsStdM2,
  kIsHigh,          // token level: tokens with raw weight > upper; sequence level: sequences
  kIsLow,           // ... < lower
  kIsOutOfBand,     // IcePop: masked tokens whose raw weight lies outside [lower, upper]
  kIsLogMax,        // sequence level: max / min over sequences of sum d
  kIsLogMin,
  kIsSeqSum,        // over valid sequences of the mean applied weight sw
  kIsSeqStdCount,   // moments of sw (seq_std)
  kIsSeqStdMean,
  kIsSeqStdM2,
  kIsSeqMax,
  kIsSeqMin,
  kIsSeqDeviation,  // max |sw - 1|
  kIsSeqHigh,       // sequences whose mean raw weight is > upper / < lower
  kIsSeqLow,
  kRsRejectedTokensAll,  // masked tokens rejected by any option
  kRsRejectedSeqsAll,    // valid sequences with a rejected token
  kRolloutBaseSlots
};

// A moments slot is the first of three, (count, mean, M2 = sum of squared deviations),
// merged together with Chan et al.'s formula: a std from them does not cancel the way
// E[x^2] - E[x]^2 does. kSlotMomentsPart marks the other two.
enum RolloutSlotKind : int { kSlotSum = 0, kSlotMax = 1, kSlotMin = 2, kSlotMoments = 3, kSlotMomentsPart = 4 };

TIRL_HD inline int rollout_base_slot_kind(int slot) {
  switch (slot) {
    case kLogPplDiffMax: case kIsWeightMax: case kIsLogMax: case kIsSeqMax: case kIsSeqDeviation:
      return kSlotMax;
    case kLogPplDiffMin: case kIsWeightMin: case kIsLogMin: case kIsSeqMin:
      return kSlotMin;
    case kIsStdCount: case kIsSeqStdCount:
      return kSlotMoments;
    case kIsStdMean: case kIsStdM2: case kIsSeqStdMean: case kIsSeqStdM2:
      return kSlotMomentsPart;
    default:
      return kSlotSum;
  }
}

TIRL_HD inline int rollout_option_slot_kind(int slot) {
  switch (slot) {
    case kRsTokenMax: case kRsSeqMax: case kRsSeqAbsMax: return kSlotMax;
    case kRsTokenMin: case kRsSeqMin: return kSlotMin;
    case kRsStdCount: case kRsSeqStdCount: return kSlotMoments;
    case kRsStdMean: case kRsStdM2: case kRsSeqStdMean: case kRsSeqStdM2: return kSlotMomentsPart;
    default: return kSlotSum;
  }
}

// What every sequence walk needs, derived once per call from validated options.
struct RolloutSetup {
  int is_level;       // TIRL_ROLLOUT_IS_NONE / TOKEN / SEQUENCE
  bool icepop;        // a lower bound was given: zero weights outside [is_lower, is_upper]
  double is_upper;    // rollout_is_threshold
  double is_lower;    // the lower bound, or 1 / upper for TIS (diagnostics only)
  double is_log_upper, is_log_lower;
  int num_options;              // enabled rejection options, in enum order
  int option[kRolloutOptions];  // their enum values
  // Bounds in the statistic's units: log(ratio bounds) for k1, the upper bound else;
  // rs_lower is 0 (the clamp floor for std) for k2 / k3.
  double rs_upper[kRolloutOptions], rs_lower[kRolloutOptions];
  bool any_token_option, any_seq_option;
  int num_slots;  // kRolloutBaseSlots + kRsSlots * num_options
};

TIRL_HD inline int rollout_slot_kind(int slot) {
  return slot < kRolloutBaseSlots ? rollout_base_slot_kind(slot)
                                  : rollout_option_slot_kind((slot - kRolloutBaseSlots) % kRsSlots);
}

// Index of option slot `slot` of the j-th enabled option.
TIRL_HD inline int rollout_option_slot(int j, int slot) { return kRolloutBaseSlots + kRsSlots * j + slot; }

// The empty value of a slot: 0 for sums and moments, -inf / +inf for max / min.
TIRL_HD inline double rollout_identity(int kind) {
  return kind == kSlotMax ? -INFINITY : (kind == kSlotMin ? INFINITY : 0.0);
}

TIRL_HD inline void rollout_init(double* acc, int num_slots) {
  for (int i = 0; i < num_slots; ++i) acc[i] = rollout_identity(rollout_slot_kind(i));
}

// A sum, max or min slot merged with another.
TIRL_HD inline double rollout_merge_one(int kind, double a, double b) {
  return kind == kSlotSum ? a + b : (kind == kSlotMax ? rollout_max(a, b) : rollout_min(a, b));
}

// Moments (count, mean, M2) at m += (count_b, mean_b, m2_b) (Chan, Golub and LeVeque).
TIRL_HD inline void rollout_moments_add(double* m, double count_b, double mean_b, double m2_b) {
  if (count_b == 0) return;
  if (m[0] == 0) {
    m[0] = count_b;
    m[1] = mean_b;
    m[2] = m2_b + (mean_b - mean_b);  // NaN (or Inf) items make the std NaN, as torch's
    return;
  }
  const double count = m[0] + count_b;
  const double delta = mean_b - m[1];
  m[1] += delta * (count_b / count);
  m[2] += m2_b + delta * delta * (m[0] * count_b / count);
  m[0] = count;
}

// acc += other, slot by slot (a moments slot with the two after it).
TIRL_HD inline void rollout_merge(double* acc, const double* other, int num_slots) {
  for (int i = 0; i < num_slots; ++i) {
    const int kind = rollout_slot_kind(i);
    if (kind == kSlotMoments) {
      rollout_moments_add(acc + i, other[i], other[i + 1], other[i + 2]);
      i += 2;
    } else {
      acc[i] = rollout_merge_one(kind, acc[i], other[i]);
    }
  }
}

inline RolloutSetup rollout_setup(const tirl_rollout_correction_options& o) {
  RolloutSetup s{};
  s.is_level = o.rollout_is;
  s.icepop = o.rollout_is_threshold_lower > 0;
  s.is_upper = o.rollout_is_threshold;
  s.is_lower = s.icepop ? o.rollout_is_threshold_lower : 1.0 / o.rollout_is_threshold;
  s.is_log_upper = std::log(s.is_upper);
  s.is_log_lower = std::log(s.is_lower);
  s.num_options = 0;
  for (int option = 0; option < kRolloutOptions; ++option) {
    if ((o.rollout_rs & (1u << option)) == 0) continue;
    const int j = s.num_options++;
    s.option[j] = option;
    const double upper = o.rollout_rs_threshold[option];
    if (rollout_rs_estimator(option) == 1) {
      // verl: a k1 bound is a ratio bound; a missing lower one is 1 / upper.
      const double lower = o.rollout_rs_threshold_lower[option] > 0
                               ? o.rollout_rs_threshold_lower[option] : 1.0 / upper;
      s.rs_upper[j] = std::log(upper);
      s.rs_lower[j] = std::log(lower);
    } else {
      s.rs_upper[j] = upper;
      s.rs_lower[j] = 0.0;
    }
    if (rollout_rs_aggregate(option) == kAggToken) {
      s.any_token_option = true;
    } else {
      s.any_seq_option = true;
    }
  }
  s.num_slots = kRolloutBaseSlots + kRsSlots * s.num_options;
  return s;
}

// Whether statistic `value` of estimator k passes the bounds [lower, upper] (k1) or
// <= upper (k2, k3). NaN fails.
TIRL_HD inline bool rollout_rs_pass(int k, double value, double lower, double upper) {
  return k == 1 ? (value >= lower && value <= upper) : value <= upper;
}

// Whether statistic `value` passes option j.
TIRL_HD inline bool rollout_rs_keep(const RolloutSetup& s, int j, double value) {
  return rollout_rs_pass(rollout_rs_estimator(s.option[j]), value, s.rs_lower[j], s.rs_upper[j]);
}

// The applied weight from a raw one: min(raw, upper) for TIS, raw inside [lower, upper]
// and 0 outside for IcePop. Always in [0, upper] (or NaN), so clamp(w, 0, upper) = w.
template <class T>
TIRL_HD inline void rollout_applied_weight_as(bool icepop, double lower, double upper, const T& raw, T& out) {
  if (!icepop) {
    rollout_select_as(raw > upper, T{} + upper, raw, out);
    return;
  }
  T in_band;
  rollout_select_as(raw <= upper, raw, T{}, in_band);
  rollout_select_as(raw >= lower, in_band, T{}, out);
}
TIRL_HD inline double rollout_applied_weight(bool icepop, double lower, double upper, double raw) {
  double out;
  rollout_applied_weight_as(icepop, lower, upper, raw, out);
  return out;
}
TIRL_HD inline double rollout_applied_weight(const RolloutSetup& s, double raw) {
  return rollout_applied_weight(s.icepop, s.is_lower, s.is_upper, raw);
}

// ---------------------------------------------------------------- one token

// A token's log-ratio d = logp - rollout_logp (exact in double), its clamp c to [-20, 20]
// and rho = e^c (the raw token weight), by the branch-free polynomial of math/exp.h so
// that the CPU's token loop vectorises.
// On T as the templates above, from logp and rollout_logp widened to T (U: T's bits, as
// exp_double_bounded_as takes them).
template <class T, class U>
TIRL_HD inline void rollout_ratio_as(const T& logp, const T& rollout_logp, T& d, T& c, T& rho) {
  d = logp - rollout_logp;
  rollout_safe_log_ratio_as(d, c);
  exp_double_bounded_as<T, U>(c, rho);
}
struct RolloutRatio {
  double d, c, rho;
};
TIRL_HD inline RolloutRatio rollout_ratio(float logp, float rollout_logp) {
  RolloutRatio r;
  rollout_ratio_as<double, uint64_t>(static_cast<double>(logp), static_cast<double>(rollout_logp), r.d, r.c, r.rho);
  return r;
}

// verl's k3_kl term e^d - d - 1 of one token, from d and e^d (unclamped: e^d is rho where
// c = d, else ::exp(d)): k3 of the unclamped log-ratio, (e^d - 1) - d, where e^d - 1 is
// exact for e^d in [0.5, 2]. Where c = d it is rollout_k(3, c, rho) itself, which the CPU's
// lanes take once for both. On vectors as rollout_k_as is.
template <class T>
TIRL_HD inline void rollout_k3_kl_as(const T& d, const T& exp_d, T& out) { rollout_k_as(3, d, exp_d, out); }
TIRL_HD inline double rollout_k3_kl(double d, double exp_d) {
  double out;
  rollout_k3_kl_as(d, exp_d, out);
  return out;
}

// ---------------------------------------------------------------- one sequence

// What the masked-in tokens of one sequence add up to, in whatever order a backend walks
// them (the scalar walk below, or the CPU's lanes in cpu/rollout_correction_kernels.inc);
// rollout_sequence_close() turns it into the sequence's contributions to the partial sums.
struct RolloutTokenOptionSums {  // one token option (token_k1..3) over the sequence
  double moments[3];  // (count, mean, M2) of the statistic clamped to the option's bounds
  double max, min;    // of the statistic
  double high, low;   // tokens above the upper / below the lower bound (k1)
  double rejected;    // tokens it rejects
};
struct RolloutSeqSums {
  double n;               // masked-in tokens
  double sum_d, sum_lp, sum_rlp;
  double non_finite;      // tokens with a non-finite logp or rollout_logp
  double k3_kl;           // sum of e^d - d - 1
  double rho2;            // sum of rho^2
  double sum_k[4], max_k[4];  // per estimator k = 1..3 (index 0 unused)
  // Token-level importance weights: applied w (= its clamp to [0, upper]) and raw rho.
  double sum_w, sum_w2, sum_raw, max_w, min_w;
  double w_moments[3];
  double is_high, is_low, out_of_band;
  double token_rejected;  // masked-in tokens rejected by a token option
  RolloutTokenOptionSums option[3];  // token_k1..3 by estimator - 1, where enabled
};

TIRL_HD inline void rollout_seq_sums_init(RolloutSeqSums& q) {
  q = RolloutSeqSums{};
  for (int k = 0; k < 4; ++k) q.max_k[k] = -INFINITY;
  q.max_w = -INFINITY;
  q.min_w = INFINITY;
  for (int k = 0; k < 3; ++k) {
    q.option[k].max = -INFINITY;
    q.option[k].min = INFINITY;
  }
}

// The token option of estimator k (1..3), as the index j of the enabled options, or -1.
TIRL_HD inline int rollout_token_option(const RolloutSetup& s, int k) {
  for (int j = 0; j < s.num_options; ++j) {
    if (s.option[j] == k - 1) return j;  // TIRL_ROLLOUT_RS_TOKEN_K1 + k - 1
  }
  return -1;
}

// Adds one sequence to `acc`: its token sums, its sequence statistics and its rejection
// decisions. Returns whether every sequence option keeps it; *seq_weight is its weight
// (sequence-level IS) or 1.
TIRL_HD inline bool rollout_sequence_close(const RolloutSeqSums& q, const RolloutSetup& s,
                                           double* acc, float* seq_weight) {
  *seq_weight = 1.0f;
  const double n = q.n;
  if (n == 0) return true;  // nothing masked in: no statistic changes

  acc[kTokens] += n;
  acc[kValidSeqs] += 1;
  acc[kNonFinite] += q.non_finite;
  acc[kKlSum] += -q.sum_d;  // sum of rollout_logp - logp
  acc[kK3KlSum] += q.k3_kl;
  acc[kRho2Sum] += q.rho2;
  const double train_mean = q.sum_lp / n, rollout_mean = q.sum_rlp / n;
  const double log_ppl_diff = rollout_mean - train_mean;
  acc[kTrainLogPplSum] += -train_mean;
  acc[kTrainPplSum] += ::exp(-train_mean);
  acc[kRolloutLogPplSum] += -rollout_mean;
  acc[kRolloutPplSum] += ::exp(-rollout_mean);
  acc[kLogPplDiffSum] += log_ppl_diff;
  acc[kLogPplAbsDiffSum] += ::fabs(log_ppl_diff);
  acc[kLogPplDiffMax] = rollout_max(acc[kLogPplDiffMax], log_ppl_diff);
  acc[kLogPplDiffMin] = rollout_min(acc[kLogPplDiffMin], log_ppl_diff);
  acc[kPplRatioSum] += ::exp(log_ppl_diff);
  const double seq_c = rollout_safe_log_ratio(q.sum_d);
  acc[kChi2SeqSum] += ::exp(2.0 * seq_c);

  // Importance weights: token sums, then per-sequence statistics (sw = mean applied weight).
  if (s.is_level != TIRL_ROLLOUT_IS_NONE) {
    double sw, raw_mean;
    if (s.is_level == TIRL_ROLLOUT_IS_TOKEN) {
      acc[kIsWeightSum] += q.sum_w;
      acc[kIsWeightMax] = rollout_max(acc[kIsWeightMax], q.max_w);
      acc[kIsWeightMin] = rollout_min(acc[kIsWeightMin], q.min_w);
      acc[kIsClampSum] += q.sum_w;
      acc[kIsClamp2Sum] += q.sum_w2;
      rollout_moments_add(acc + kIsStdCount, q.w_moments[0], q.w_moments[1], q.w_moments[2]);
      acc[kIsHigh] += q.is_high;
      acc[kIsLow] += q.is_low;
      acc[kIsOutOfBand] += q.out_of_band;
      sw = q.sum_w / n;
      raw_mean = q.sum_raw / n;
    } else {
      raw_mean = ::exp(seq_c);
      sw = rollout_applied_weight(s, raw_mean);
      *seq_weight = static_cast<float>(sw);
      const double clamped = rollout_clamp(sw, 0.0, s.is_upper);
      acc[kIsWeightSum] += n * sw;
      acc[kIsClampSum] += n * clamped;
      acc[kIsClamp2Sum] += n * clamped * clamped;
      rollout_moments_add(acc + kIsStdCount, n, clamped, 0.0);
      acc[kIsHigh] += q.sum_d > s.is_log_upper ? 1.0 : 0.0;
      acc[kIsLow] += q.sum_d < s.is_log_lower ? 1.0 : 0.0;
      if (s.icepop) acc[kIsOutOfBand] += (raw_mean < s.is_lower || raw_mean > s.is_upper) ? n : 0.0;
      acc[kIsLogMax] = rollout_max(acc[kIsLogMax], q.sum_d);
      acc[kIsLogMin] = rollout_min(acc[kIsLogMin], q.sum_d);
    }
    acc[kIsSeqSum] += sw;
    rollout_moments_add(acc + kIsSeqStdCount, 1.0, sw, 0.0);
    acc[kIsSeqMax] = rollout_max(acc[kIsSeqMax], sw);
    acc[kIsSeqMin] = rollout_min(acc[kIsSeqMin], sw);
    acc[kIsSeqDeviation] = rollout_max(acc[kIsSeqDeviation], ::fabs(sw - 1.0));
    acc[kIsSeqHigh] += raw_mean > s.is_upper ? 1.0 : 0.0;
    acc[kIsSeqLow] += raw_mean < s.is_lower ? 1.0 : 0.0;
  }

  // Rejection: token options' sums, sequence values of every option, decisions of the
  // sequence options.
  bool seq_keep = true;
  for (int j = 0; j < s.num_options; ++j) {
    const int option = s.option[j];
    const int k = rollout_rs_estimator(option);
    const int aggregate = rollout_rs_aggregate(option);
    double* o = acc + rollout_option_slot(j, 0);
    const double v = aggregate == kAggSeqSum ? q.sum_k[k]
                     : aggregate == kAggSeqMax ? q.max_k[k]
                                              : q.sum_k[k] / n;  // token options: the mean too
    if (aggregate == kAggToken) {
      const RolloutTokenOptionSums& t = q.option[k - 1];
      o[kRsStatSum] += q.sum_k[k];
      rollout_moments_add(o + kRsStdCount, t.moments[0], t.moments[1], t.moments[2]);
      o[kRsTokenMax] = rollout_max(o[kRsTokenMax], t.max);
      o[kRsTokenMin] = rollout_min(o[kRsTokenMin], t.min);
      o[kRsTokenHigh] += t.high;
      o[kRsTokenLow] += t.low;
      o[kRsRejectedTokens] += t.rejected;
      o[kRsRejectedSeqs] += t.rejected > 0 ? 1.0 : 0.0;
    } else {
      const bool pass = rollout_rs_keep(s, j, v);
      const double clamped = rollout_clamp(v, s.rs_lower[j], s.rs_upper[j]);
      o[kRsStatSum] += n * v;
      rollout_moments_add(o + kRsStdCount, n, clamped, 0.0);
      o[kRsRejectedTokens] += pass ? 0.0 : n;
      o[kRsRejectedSeqs] += pass ? 0.0 : 1.0;
      seq_keep = seq_keep && pass;
    }
    o[kRsSeqSum] += v;
    rollout_moments_add(o + kRsSeqStdCount, 1.0, v, 0.0);
    o[kRsSeqMax] = rollout_max(o[kRsSeqMax], v);
    o[kRsSeqMin] = rollout_min(o[kRsSeqMin], v);
    o[kRsSeqAbsMax] = rollout_max(o[kRsSeqAbsMax], ::fabs(v));
    o[kRsSeqHigh] += v > s.rs_upper[j] ? 1.0 : 0.0;
    if (k == 1) o[kRsSeqLow] += v < s.rs_lower[j] ? 1.0 : 0.0;
  }
  const double rejected = seq_keep ? q.token_rejected : n;
  acc[kRsRejectedTokensAll] += rejected;
  acc[kRsRejectedSeqsAll] += rejected > 0 ? 1.0 : 0.0;
  return seq_keep;
}

// The scalar walk of tokens [begin, end) of one sequence (the GPU's, one thread per
// sequence): writes its weights (0 where masked out; 1 on masked-in tokens when importance
// weights are off) and its output mask (the input mask with rejected tokens cleared), and
// adds its contributions to `acc` (which may be shared by the sequences of one record,
// walked in order).
TIRL_HD inline void rollout_sequence(const float* logp, const float* rollout_logp,
                                     const uint8_t* mask, int64_t begin, int64_t end,
                                     const RolloutSetup& s, float* weights, uint8_t* mask_out,
                                     double* acc) {
  RolloutSeqSums q;
  rollout_seq_sums_init(q);
  int token_option[4] = {-1, -1, -1, -1};  // by estimator
  for (int k = 1; k <= 3; ++k) token_option[k] = rollout_token_option(s, k);
  const bool token_is = s.is_level == TIRL_ROLLOUT_IS_TOKEN;
  for (int64_t t = begin; t < end; ++t) {
    if (mask[t] == 0) {
      weights[t] = 0.0f;
      mask_out[t] = 0;
      continue;
    }
    const float lp = logp[t], rlp = rollout_logp[t];
    const RolloutRatio r = rollout_ratio(lp, rlp);
    q.n += 1;
    q.sum_d += r.d;
    q.sum_lp += lp;
    q.sum_rlp += rlp;
    q.non_finite += rollout_finite(r.d) ? 0.0 : 1.0;  // d is finite iff both inputs are
    q.k3_kl += rollout_k3_kl(r.d, r.c == r.d ? r.rho : ::exp(r.d));
    q.rho2 += r.rho * r.rho;
    for (int k = 1; k <= 3; ++k) {
      const double value = rollout_k(k, r.c, r.rho);
      q.sum_k[k] += value;
      q.max_k[k] = rollout_max(q.max_k[k], value);
    }
    float w_out = 1.0f;
    if (token_is) {
      const double w = rollout_applied_weight(s, r.rho);
      w_out = static_cast<float>(w);
      q.sum_w += w;
      q.sum_w2 += w * w;
      q.sum_raw += r.rho;
      q.max_w = rollout_max(q.max_w, w);
      q.min_w = rollout_min(q.min_w, w);
      rollout_moments_add(q.w_moments, 1.0, w, 0.0);
      q.is_high += r.rho > s.is_upper ? 1.0 : 0.0;
      q.is_low += r.rho < s.is_lower ? 1.0 : 0.0;
      if (s.icepop) q.out_of_band += (r.rho < s.is_lower || r.rho > s.is_upper) ? 1.0 : 0.0;
    }
    weights[t] = w_out;
    bool keep = true;
    for (int k = 1; k <= 3; ++k) {
      const int j = token_option[k];
      if (j < 0) continue;
      const double value = rollout_k(k, r.c, r.rho);
      const bool pass = rollout_rs_pass(k, value, s.rs_lower[j], s.rs_upper[j]);
      RolloutTokenOptionSums& o = q.option[k - 1];
      rollout_moments_add(o.moments, 1.0, rollout_clamp(value, s.rs_lower[j], s.rs_upper[j]), 0.0);
      o.max = rollout_max(o.max, value);
      o.min = rollout_min(o.min, value);
      o.high += value > s.rs_upper[j] ? 1.0 : 0.0;
      if (k == 1) o.low += value < s.rs_lower[j] ? 1.0 : 0.0;
      o.rejected += pass ? 0.0 : 1.0;
      keep = keep && pass;
    }
    q.token_rejected += keep ? 0.0 : 1.0;
    mask_out[t] = keep ? 1 : 0;
  }
  float seq_weight;
  const bool seq_keep = rollout_sequence_close(q, s, acc, &seq_weight);

  // Second pass, only where the sequence decides for all its tokens. It does not read the
  // mask again (mask_out may be the mask itself): the first pass left weight 1 exactly on
  // the masked-in tokens.
  const bool write_weight = s.is_level == TIRL_ROLLOUT_IS_SEQUENCE;
  if (write_weight || !seq_keep) {
    for (int64_t t = begin; t < end; ++t) {
      if (write_weight && weights[t] != 0.0f) weights[t] = seq_weight;
      if (!seq_keep) mask_out[t] = 0;
    }
  }
}

// The batch-normalisation divisor (verl: the masked mean of the applied weights at token
// level, the mean sequence weight at sequence level), or 0 when it is off or not > 1e-8
// (weights are then left as they are).
TIRL_HD inline double rollout_batch_norm_mean(const RolloutSetup& s, bool batch_normalize,
                                              const double* acc) {
  if (!batch_normalize || s.is_level == TIRL_ROLLOUT_IS_NONE) return 0.0;
  const double mean = s.is_level == TIRL_ROLLOUT_IS_TOKEN
                          ? (acc[kTokens] > 0 ? acc[kIsWeightSum] / acc[kTokens] : 0.0)
                          : (acc[kValidSeqs] > 0 ? acc[kIsSeqSum] / acc[kValidSeqs] : 0.0);
  return mean > 1e-8 ? mean : 0.0;
}

// A weight after batch normalisation by `mean` (from rollout_batch_norm_mean, > 0).
TIRL_HD inline float rollout_normalized_weight(float w, double mean) {
  return static_cast<float>(static_cast<double>(w) / mean);
}

// ---------------------------------------------------------------- the result

namespace rollout_detail {
inline double mean_of(double sum, double count) { return count > 0 ? sum / count : 0.0; }
inline double extreme_or_zero(double value, double count) { return count > 0 ? value : 0.0; }
// From moments (count, mean, M2): the population std sqrt(M2 / count), verl's
// sqrt(E[x^2] - E[x]^2) of a statistic, or the unbiased sqrt(M2 / (count - 1)), torch.std;
// 0 for fewer than two items. NaN stays NaN.
inline double moments_std(const double* m, bool unbiased) {
  if (!(m[0] > 1)) return 0.0;
  return std::sqrt(m[2] / (unbiased ? m[0] - 1 : m[0]));
}
}  // namespace rollout_detail

// Every statistic of the result from the merged sums. `norm_mean` is what
// rollout_batch_norm_mean returned.
inline void rollout_finalize(const RolloutSetup& s, bool batch_normalize, const double* acc,
                             double norm_mean, tirl_rollout_correction_result* r) {
  using namespace rollout_detail;
  *r = tirl_rollout_correction_result{};
  const double tokens = acc[kTokens], seqs = acc[kValidSeqs];
  r->masked_tokens = static_cast<int64_t>(tokens);
  r->valid_seqs = static_cast<int64_t>(seqs);
  r->non_finite = static_cast<int64_t>(acc[kNonFinite]);

  // Off-policy diagnostics.
  r->training_ppl = mean_of(acc[kTrainPplSum], seqs);
  r->training_log_ppl = mean_of(acc[kTrainLogPplSum], seqs);
  r->kl = mean_of(acc[kKlSum], tokens);
  r->k3_kl = mean_of(acc[kK3KlSum], tokens);
  r->rollout_ppl = mean_of(acc[kRolloutPplSum], seqs);
  r->rollout_log_ppl = mean_of(acc[kRolloutLogPplSum], seqs);
  r->log_ppl_diff = mean_of(acc[kLogPplDiffSum], seqs);
  r->log_ppl_abs_diff = mean_of(acc[kLogPplAbsDiffSum], seqs);
  r->log_ppl_diff_max = extreme_or_zero(acc[kLogPplDiffMax], seqs);
  r->log_ppl_diff_min = extreme_or_zero(acc[kLogPplDiffMin], seqs);
  r->ppl_ratio = mean_of(acc[kPplRatioSum], seqs);
  r->chi2_token = tokens > 0 ? acc[kRho2Sum] / tokens - 1.0 : 0.0;
  r->chi2_seq = seqs > 0 ? acc[kChi2SeqSum] / seqs - 1.0 : 0.0;

  // Importance weights.
  if (s.is_level != TIRL_ROLLOUT_IS_NONE) {
    const bool token = s.is_level == TIRL_ROLLOUT_IS_TOKEN;
    r->rollout_is_mean = mean_of(acc[kIsWeightSum], tokens);
    if (token) {
      r->rollout_is_max = extreme_or_zero(acc[kIsWeightMax], tokens);
      r->rollout_is_min = extreme_or_zero(acc[kIsWeightMin], tokens);
      r->rollout_is_ratio_fraction_high = mean_of(acc[kIsHigh], tokens);
      r->rollout_is_ratio_fraction_low = mean_of(acc[kIsLow], tokens);
    } else {
      r->rollout_is_max = seqs > 0 ? std::exp(rollout_min(acc[kIsLogMax], kRolloutSafetyBound)) : 0.0;
      r->rollout_is_min = seqs > 0 ? std::exp(acc[kIsLogMin]) : 0.0;
      r->rollout_is_ratio_fraction_high = mean_of(acc[kIsHigh], seqs);
      r->rollout_is_ratio_fraction_low = mean_of(acc[kIsLow], seqs);
    }
    r->rollout_is_std = moments_std(acc + kIsStdCount, false);
    if (tokens > 0) {
      const double mean_clamped = acc[kIsClampSum] / tokens;
      const double normalized2 =
          acc[kIsClamp2Sum] / tokens / ((mean_clamped + 1e-8) * (mean_clamped + 1e-8));
      // verl divides by it; no weight at all (every one zeroed by IcePop) reads as 0.
      r->rollout_is_eff_sample_size = normalized2 == 0 ? 0.0 : 1.0 / normalized2;
    }
    r->rollout_is_seq_mean = mean_of(acc[kIsSeqSum], seqs);
    r->rollout_is_seq_std = moments_std(acc + kIsSeqStdCount, true);
    r->rollout_is_seq_max = extreme_or_zero(acc[kIsSeqMax], seqs);
    r->rollout_is_seq_min = extreme_or_zero(acc[kIsSeqMin], seqs);
    r->rollout_is_seq_max_deviation = extreme_or_zero(acc[kIsSeqDeviation], seqs);
    r->rollout_is_seq_fraction_high = mean_of(acc[kIsSeqHigh], seqs);
    r->rollout_is_seq_fraction_low = mean_of(acc[kIsSeqLow], seqs);
    r->rollout_is_oob_ratio = s.icepop ? mean_of(acc[kIsOutOfBand], tokens) : 0.0;
    r->rollout_is_batch_norm_factor = batch_normalize ? (norm_mean > 0 ? norm_mean : 1.0) : 1.0;
  }

  // Rejection.
  r->rollout_rs_masked_fraction = mean_of(acc[kRsRejectedTokensAll], tokens);
  r->rollout_rs_seq_masked_fraction = mean_of(acc[kRsRejectedSeqsAll], seqs);
  for (int j = 0; j < s.num_options; ++j) {
    const int option = s.option[j];
    const double* o = acc + rollout_option_slot(j, 0);
    tirl_rollout_rs_stats& m = r->rollout_rs[option];
    const bool token = rollout_rs_aggregate(option) == kAggToken;
    m.masked_fraction = mean_of(o[kRsRejectedTokens], tokens);
    m.seq_masked_fraction = mean_of(o[kRsRejectedSeqs], seqs);
    m.mean = mean_of(o[kRsStatSum], tokens);
    m.max = extreme_or_zero(token ? o[kRsTokenMax] : o[kRsSeqMax], token ? tokens : seqs);
    m.min = extreme_or_zero(token ? o[kRsTokenMin] : o[kRsSeqMin], token ? tokens : seqs);
    m.fraction_high = token ? mean_of(o[kRsTokenHigh], tokens) : mean_of(o[kRsSeqHigh], seqs);
    m.fraction_low = token ? mean_of(o[kRsTokenLow], tokens) : mean_of(o[kRsSeqLow], seqs);
    m.std = moments_std(o + kRsStdCount, false);
    m.seq_mean = mean_of(o[kRsSeqSum], seqs);
    m.seq_std = moments_std(o + kRsSeqStdCount, true);
    m.seq_max = extreme_or_zero(o[kRsSeqMax], seqs);
    m.seq_min = extreme_or_zero(o[kRsSeqMin], seqs);
    m.seq_max_deviation = extreme_or_zero(o[kRsSeqAbsMax], seqs);
    m.seq_fraction_high = mean_of(o[kRsSeqHigh], seqs);
    m.seq_fraction_low = mean_of(o[kRsSeqLow], seqs);
  }
}

}  // namespace tirl
