// advantages: verl's advantage estimators (formulas in math/advantages.h). The C entry point
// validates the call, then the CPU backend runs the passes of math/advantages.h over fixed
// chunks of sequences, groups and tokens; each call is a sequential loop in a fixed order,
// so the result does not depend on the thread count and equals the CUDA backend's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "common/cuda.h"
#include "common/parallel.h"
#include "common/validate.h"
#include "math/advantages.h"

namespace tirl {
namespace {

using advantages::Problem;
using advantages::SequenceSummary;

constexpr const char* kOp = "advantages";
constexpr int64_t kSeqsPerChunk = 4;
constexpr int64_t kGroupsPerChunk = 2;

const char* estimator_name(tirl_advantage_estimator e) {
  switch (e) {
    case TIRL_ADV_GRPO: return "grpo";
    case TIRL_ADV_GRPO_PASSK: return "grpo_passk";
    case TIRL_ADV_GDPO: return "gdpo";
    case TIRL_ADV_RLOO: return "rloo";
    case TIRL_ADV_REINFORCE_PLUS_PLUS: return "reinforce_plus_plus";
    case TIRL_ADV_REINFORCE_PLUS_PLUS_BASELINE: return "reinforce_plus_plus_baseline";
    case TIRL_ADV_REMAX: return "remax";
    case TIRL_ADV_OPO: return "opo";
    case TIRL_ADV_GPG: return "gpg";
    case TIRL_ADV_GAE: return "gae";
    case TIRL_ADV_OPTIMAL_TOKEN_BASELINE: return "optimal_token_baseline";
    case TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE: return "tir_optimal_token_baseline";
  }
  return nullptr;
}

tirl_status invalid(const std::string& message) {
  return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(kOp) + ": " + message);
}

// An array the estimator reads (`needed`, then of `count` elements) or must not be given.
// `name` is "jsName (c_name)".
tirl_status check_input(const void* pointer, bool needed, int64_t count, const char* name,
                        const char* estimator) {
  if (needed && pointer == nullptr && count > 0) {
    return invalid(std::string("Expected ") + name + " (" + std::to_string(count) +
                   " elements, read by estimator '" + estimator + "') but received NULL");
  }
  if (!needed && pointer != nullptr) {
    return invalid(std::string("Expected NULL for ") + name + " (estimator '" + estimator +
                   "' does not read it) but received a pointer");
  }
  return TIRL_OK;
}

tirl_status check_options(const tirl_advantages_options& o, const char** name) {
  *name = estimator_name(o.estimator);
  if (*name == nullptr) {
    return invalid("Expected an estimator in [0, 11] (tirl_advantage_estimator) for estimator "
                   "but received " + std::to_string(static_cast<int>(o.estimator)));
  }
  const auto bad = [](const char* option, const char* expected, double value) {
    return invalid(std::string("Expected ") + expected + " for " + option + " but received " +
                   format_double(value));
  };
  if (!(o.epsilon == -1.0 || (o.epsilon >= 0.0 && std::isfinite(o.epsilon)))) {
    return bad("epsilon", "-1 (the default) or a finite number >= 0", o.epsilon);
  }
  if (!(o.gamma >= 0.0 && o.gamma <= 1.0)) return bad("gamma", "a number in [0, 1]", o.gamma);
  if (!(o.lam >= 0.0 && o.lam <= 1.0)) return bad("lam", "a number in [0, 1]", o.lam);
  if (!(o.f_norm > 0.0 && std::isfinite(o.f_norm))) return bad("fNorm (f_norm)", "a finite number > 0", o.f_norm);
  if (o.norm_adv_by_std != 0 && o.norm_adv_by_std != 1) {
    return bad("normAdvByStdInGrpo (norm_adv_by_std)", "0 or 1", o.norm_adv_by_std);
  }
  if (o.handle_zero_tail != 0 && o.handle_zero_tail != 1) {
    return bad("handleZeroTail (handle_zero_tail)", "0 or 1", o.handle_zero_tail);
  }
  const bool gdpo = o.estimator == TIRL_ADV_GDPO;
  if (gdpo ? !(o.num_reward_keys >= 1 && o.num_reward_keys <= INT32_MAX) : o.num_reward_keys != 1) {
    return bad("num_reward_keys", gdpo ? "an integer in [1, 2^31 - 1]" : "1 (only gdpo reads several)",
               static_cast<double>(o.num_reward_keys));
  }
  if (o.group_size < 0) return bad("groupSize (group_size)", "an integer >= 0", static_cast<double>(o.group_size));
  return TIRL_OK;
}

// The validation of one call; on CPU also checks the offsets (copied: see use_private_copy).
tirl_status check_call(const tirl_advantages_inputs& in, int64_t num_tokens, int64_t num_seqs,
                       const tirl_advantages_options& o, const float* advantages,
                       tirl_device device) {
  tirl_status s;
  const char* name = nullptr;
  if ((s = check_count(num_tokens, kOp, "num_tokens")) || (s = check_count(num_seqs, kOp, "num_seqs")) ||
      (s = check_device(device, kOp)) || (s = check_options(o, &name))) {
    return s;
  }
  const tirl_advantage_estimator e = o.estimator;
  if (num_seqs >= INT32_MAX) {
    return invalid("Expected at most 2^31 - 2 sequences (num_seqs) but received " +
                   std::to_string(num_seqs));
  }
  if ((s = check_offset_range(num_tokens, kOp))) return s;
  if (in.rewards != nullptr && in.token_rewards != nullptr) {
    return invalid("Expected one of rewards and tokenRewards (token_rewards) but received both");
  }
  if (in.rewards == nullptr && in.token_rewards == nullptr && num_tokens > 0) {
    return invalid("Expected rewards or tokenRewards (token_rewards) but received neither");
  }
  if (o.num_reward_keys > 1 && in.rewards == nullptr && num_seqs > 0) {
    return invalid("Expected rewards (one per sequence and reward key) with num_reward_keys " +
                   std::to_string(o.num_reward_keys) + " but received tokenRewards (token_rewards)");
  }
  if (in.rewards != nullptr && num_seqs > INT64_MAX / 4 / o.num_reward_keys) {
    return invalid("Expected num_seqs * num_reward_keys <= 2^61 - 1 but received " +
                   std::to_string(num_seqs) + " * " + std::to_string(o.num_reward_keys));
  }
  const bool token_baseline = advantages::is_token_baseline(e);
  const bool grouped = advantages::is_grouped(e);
  if ((s = check_pointer(in.mask, num_tokens, kOp, "mask")) ||
      (s = check_pointer(in.seq_offsets, num_seqs + 1, kOp, "seq_offsets")) ||
      (s = check_pointer(advantages, num_tokens, kOp, "advantages")) ||
      (s = check_input(in.values, e == TIRL_ADV_GAE, num_tokens, "values", name)) ||
      (s = check_input(in.reward_baselines, e == TIRL_ADV_REMAX, num_seqs,
                       "rewardBaselines (reward_baselines)", name)) ||
      (s = check_input(in.old_logp, token_baseline, num_tokens, "oldLogp (old_logp)", name)) ||
      (s = check_input(in.sum_pi_squared, token_baseline, num_tokens,
                       "sumPiSquared (sum_pi_squared)", name))) {
    return s;
  }
  if (!token_baseline &&
      (s = check_input(in.rollout_is_weights, false, 0, "rolloutIsWeights (rollout_is_weights)", name))) {
    return s;
  }
  if (e != TIRL_ADV_GDPO &&
      (s = check_input(in.reward_weights, false, 0, "rewardWeights (reward_weights)", name))) {
    return s;
  }
  if (!grouped) {
    if ((s = check_input(in.group_ids, false, 0, "groupIds (group_ids)", name))) return s;
    if (o.group_size != 0) {
      return invalid(std::string("Expected groupSize (group_size) 0 (estimator '") + name +
                     "' has no groups) but received " + std::to_string(o.group_size));
    }
  } else if (num_seqs > 0) {
    if (in.group_ids != nullptr && o.group_size != 0) {
      return invalid("Expected one of groupIds (group_ids) and groupSize (group_size) but received both");
    }
    if (in.group_ids == nullptr && (o.group_size == 0 || num_seqs % o.group_size != 0)) {
      return invalid(std::string("Expected groupIds (group_ids), or a groupSize (group_size) that divides ") +
                     std::to_string(num_seqs) + " sequences (estimator '" + name +
                     "' needs groups), but received group_size " + std::to_string(o.group_size));
    }
  }
  return TIRL_OK;
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
  std::vector<SequenceSummary> summary(static_cast<size_t>(num_seqs));
  auto over_sequences = [&](auto&& per_sequence) {
    auto body = [&](int64_t chunk) {
      const int64_t last = std::min(num_seqs, (chunk + 1) * kSeqsPerChunk);
      for (int64_t s = chunk * kSeqsPerChunk; s < last; ++s) per_sequence(s);
    };
    parallel_for(chunk_count(num_seqs, kSeqsPerChunk), body);
  };
  over_sequences([&](int64_t s) {
    summary[s] = advantages::summarize(p, s, seq_offsets[s], seq_offsets[s + 1]);
  });

  std::vector<int32_t> members;
  std::vector<int64_t> group_start;
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
    parallel_for(chunk_count(num_groups, kGroupsPerChunk), body);
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
  over_sequences([&](int64_t s) { advantages::token_pass(p, summary[s], s, seq_adv.data()); });

  if (advantages::is_token_baseline(e)) {
    std::vector<double> numerator(static_cast<size_t>(p.num_tokens));
    std::vector<double> denominator(static_cast<size_t>(p.num_tokens));
    over_groups([&](auto member, int64_t count) {
      advantages::token_baseline_group(p, summary.data(), member, count, numerator.data(),
                                       denominator.data());
    });
  }

  if (advantages::is_whitened(e)) {
    constexpr int64_t kChunk = advantages::kTokensPerChunk;
    const int64_t chunks = chunk_count(p.num_tokens, kChunk);
    std::vector<double> sums(static_cast<size_t>(chunks));
    std::vector<int64_t> counts(static_cast<size_t>(chunks));
    auto sum_body = [&](int64_t c) {
      advantages::masked_sum(p, c * kChunk, std::min(p.num_tokens, (c + 1) * kChunk), &sums[c],
                             &counts[c]);
    };
    parallel_for(chunks, sum_body);
    double sum = 0.0;
    int64_t count = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sum += sums[c];
      count += counts[c];
    }
    const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
    auto squares_body = [&](int64_t c) {
      sums[c] = advantages::masked_squared_deviations(p, c * kChunk,
                                                      std::min(p.num_tokens, (c + 1) * kChunk), mean);
    };
    parallel_for(chunks, squares_body);
    double squares = 0.0;
    for (int64_t c = 0; c < chunks; ++c) squares += sums[c];
    const double inverse_std = advantages::whiten_inverse_std(count, squares);
    auto whiten_body = [&](int64_t c) {
      advantages::whiten(p, c * kChunk, std::min(p.num_tokens, (c + 1) * kChunk), mean, inverse_std);
    };
    parallel_for(chunks, whiten_body);
  }
}

}  // namespace
}  // namespace tirl

extern "C" tirl_advantages_options tirl_advantages_options_default(void) {
  tirl_advantages_options o;
  o.estimator = TIRL_ADV_GRPO;
  o.norm_adv_by_std = 1;
  o.epsilon = -1.0;
  o.gamma = 1.0;
  o.lam = 1.0;
  o.f_norm = 1.0;
  o.handle_zero_tail = 1;
  o.num_reward_keys = 1;
  o.group_size = 0;
  return o;
}

extern "C" tirl_status tirl_advantages(const tirl_advantages_inputs* inputs, int64_t num_tokens,
                                       int64_t num_seqs, const tirl_advantages_options* options,
                                       float* advantages, float* returns, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_pointer(inputs, 1, kOp, "inputs")) || (s = check_pointer(options, 1, kOp, "options")) ||
        (s = check_call(*inputs, num_tokens, num_seqs, *options, advantages, device))) {
      return s;
    }
    if (device.type == TIRL_DEVICE_CUDA) {
      return run_on_cuda(kOp, [&](const tirl_cuda_backend& cuda) {
        return cuda.advantages(inputs, num_tokens, num_seqs, options, advantages, returns, device);
      });
    }
    tirl_advantages_inputs in = *inputs;
    std::vector<int32_t> private_offsets, private_ids;
    use_private_copy(in.seq_offsets, num_seqs + 1, private_offsets);
    if ((s = check_seq_offsets(in.seq_offsets, num_seqs, num_tokens, kOp))) return s;
    use_private_copy(in.group_ids, num_seqs, private_ids);
    const tirl_advantages_options& o = *options;
    const Problem p{in.rewards,
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
                    o.epsilon < 0 ? advantages::default_epsilon(o.estimator) : o.epsilon,
                    o.gamma,
                    o.lam,
                    o.f_norm,
                    advantages,
                    returns};
    advantages_cpu(p, in.seq_offsets, in.group_ids, o.group_size);
    return ok();
  });
}
