// The sums a chunk of a policy loss returns (cpu/ppo_loss.cc's clipped surrogate and
// cpu/policy_loss.cc's other losses): real-valued sums in kLossLanes double lanes, filled
// in a fixed token-to-lane order, and exact integer counts; chunks combine in chunk order.
#pragma once

#include <cstdint>

namespace tirl::cpu {

constexpr int kLossLanes = 16;

// Sums of one chunk (or of all of them).
struct LossTotals {
  double pg_loss = 0;
  double kl_loss = 0;
  double neg_log_ratio = 0;  // masked sum of -(logp - old_logp): the ppoKl statistic
  int64_t clipped = 0;
  int64_t clipped_lower = 0;  // the lower clip: dual clip for vanilla, verl's pg_clipfrac_lower
  int64_t non_finite = 0;
  int64_t masked = 0;

  void add(const LossTotals& o) {
    pg_loss += o.pg_loss;
    kl_loss += o.kl_loss;
    neg_log_ratio += o.neg_log_ratio;
    clipped += o.clipped;
    clipped_lower += o.clipped_lower;
    non_finite += o.non_finite;
    masked += o.masked;
  }
};

// The masked-in tokens of a batch (cpu/ppo_loss.cc): an integer count, in chunks on the
// threads, vectorised.
int64_t count_masked(const uint8_t* mask, int64_t num_tokens);

inline double lane_total(const double* lanes) {
  double total = 0;
  for (int l = 0; l < kLossLanes; ++l) total += lanes[l];
  return total;
}

// Real-valued sums in double lanes; counts are exact in integers, in any order.
struct LossLanes {
  double pg_loss[kLossLanes] = {};
  double kl_loss[kLossLanes] = {};
  double neg_log_ratio[kLossLanes] = {};
  int64_t clipped = 0;
  int64_t clipped_lower = 0;
  int64_t non_finite = 0;
  int64_t masked = 0;

  LossTotals totals() const {
    LossTotals t;
    t.pg_loss = lane_total(pg_loss);
    t.kl_loss = lane_total(kl_loss);
    t.neg_log_ratio = lane_total(neg_log_ratio);
    t.clipped = clipped;
    t.clipped_lower = clipped_lower;
    t.non_finite = non_finite;
    t.masked = masked;
    return t;
  }
};

}  // namespace tirl::cpu
