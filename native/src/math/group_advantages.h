// Group-normalized advantages (MATH.md, GRPO / Dr.GRPO, as verl computes them).
#pragma once

#include <cmath>
#include <cstdint>

#include "math/common.h"

namespace tirl {

// The statistics that normalize one group's rewards.
struct GroupScale {
  double mean;
  double denominator;  // std + epsilon, or 1 without scaling
};

// From the group's size, its sum and its sum of squared deviations from the mean (two
// passes, not the cancellation-prone sum of squares). The std is unbiased (n - 1); a
// group of one has mean 0 and std 1, as in verl.
TIRL_HD inline GroupScale group_scale(int64_t count, double mean, double squared_deviations,
                                      bool scale_by_std, double epsilon) {
  if (count == 1) return {0.0, scale_by_std ? 1.0 + epsilon : 1.0};
  const double std_dev = sqrt(squared_deviations / static_cast<double>(count - 1));
  return {mean, scale_by_std ? std_dev + epsilon : 1.0};
}

// A = (r - mean) / (std + epsilon). A zero-variance group has r - mean == 0 exactly, so it
// gets 0 even with epsilon 0 (no 0/0); NaN and Inf still propagate through the division.
TIRL_HD inline float group_advantage(float reward, GroupScale scale) {
  const double centered = static_cast<double>(reward) - scale.mean;
  return static_cast<float>(scale.denominator == 0.0 ? centered : centered / scale.denominator);
}

}  // namespace tirl
