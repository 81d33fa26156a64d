// Group-normalized advantages (MATH.md, GRPO / Dr.GRPO, as verl computes them).
#pragma once

#include <cmath>
#include <cstdint>

#include "math/common.h"

namespace tirl {

// The statistics that normalize one group's rewards.
struct GroupScale {
  double mean;
  double inverse_denominator;  // 1 / (std + epsilon), or 1 without scaling
};

// From the group's size, mean and sum of squared deviations from the mean (two passes,
// not the cancellation-prone sum of squares). The std is unbiased (n - 1); a group of one
// has mean 0 and std 1, as in verl. A zero-variance group has r - mean == 0 exactly; its
// denominator may be 0 (epsilon 0), and then it keeps 0 instead of 0/0. NaN and Inf
// propagate.
TIRL_HD inline GroupScale group_scale(int64_t count, double mean, double squared_deviations,
                                      bool scale_by_std, double epsilon) {
  if (!scale_by_std) return {count == 1 ? 0.0 : mean, 1.0};
  const double std_dev =
      count == 1 ? 1.0 : sqrt(squared_deviations / static_cast<double>(count - 1));
  const double denominator = std_dev + epsilon;
  return {count == 1 ? 0.0 : mean, denominator == 0.0 ? 1.0 : 1.0 / denominator};
}

// A = (r - mean) / (std + epsilon), in double, rounded once to f32.
TIRL_HD inline float group_advantage(float reward, GroupScale scale) {
  return static_cast<float>((static_cast<double>(reward) - scale.mean) * scale.inverse_denominator);
}

}  // namespace tirl
