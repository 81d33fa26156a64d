#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/validate.h"
#include "math/dpo_loss.h"

namespace tirl {
namespace {

constexpr const char* kOp = "dpoLoss";

// Pairs per chunk: fixed, so the per-chunk partial sums (combined in chunk order) do not
// depend on the thread count.
constexpr int64_t kPairsPerChunk = 2048;

struct ChunkTotals {
  double loss = 0.0;
  int64_t correct = 0;
};

// One fused pass: each pair's inputs are read once and all four outputs written.
void dpo_loss_cpu(const float* policy_chosen, const float* policy_rejected,
                  const float* ref_chosen, const float* ref_rejected, int64_t num_pairs,
                  const tirl_dpo_options& options, float* grad_chosen, float* grad_rejected,
                  float* chosen_rewards, float* rejected_rewards, tirl_dpo_result* result) {
  const int64_t num_chunks = chunk_count(num_pairs, kPairsPerChunk);
  std::vector<ChunkTotals> totals(static_cast<size_t>(num_chunks));
  const double beta = options.beta;
  const double label_smoothing = options.label_smoothing;
  const tirl_dpo_variant variant = options.variant;
  const double inverse_pairs = num_pairs > 0 ? 1.0 / static_cast<double>(num_pairs) : 0.0;
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kPairsPerChunk;
    const int64_t last = std::min(num_pairs, first + kPairsPerChunk);
    ChunkTotals t;
    for (int64_t i = first; i < last; ++i) {
      const double chosen_logratio = static_cast<double>(policy_chosen[i]) - ref_chosen[i];
      const double rejected_logratio = static_cast<double>(policy_rejected[i]) - ref_rejected[i];
      const DpoPairTerm term =
          dpo_pair_term(chosen_logratio - rejected_logratio, beta, label_smoothing, variant);
      t.loss += term.loss;
      // d(mean loss)/d policy_chosen = dloss/ddelta / P; policy_rejected enters delta negated.
      const double grad = term.dloss_ddelta * inverse_pairs;
      if (grad_chosen != nullptr) grad_chosen[i] = static_cast<float>(grad);
      if (grad_rejected != nullptr) grad_rejected[i] = static_cast<float>(-grad);
      // The accuracy compares the rewards as returned (f32), as TRL compares its tensors.
      const float chosen_reward = static_cast<float>(beta * chosen_logratio);
      const float rejected_reward = static_cast<float>(beta * rejected_logratio);
      if (chosen_rewards != nullptr) chosen_rewards[i] = chosen_reward;
      if (rejected_rewards != nullptr) rejected_rewards[i] = rejected_reward;
      t.correct += chosen_reward > rejected_reward ? 1 : 0;
    }
    totals[chunk] = t;
  };
  parallel_for(num_chunks, body);
  double loss = 0.0;
  int64_t correct = 0;
  for (const ChunkTotals& t : totals) {
    loss += t.loss;
    correct += t.correct;
  }
  result->loss = loss * inverse_pairs;
  result->reward_accuracy = static_cast<double>(correct) * inverse_pairs;
}

}  // namespace
}  // namespace tirl

extern "C" tirl_dpo_options tirl_dpo_options_default(void) {
  tirl_dpo_options options;
  options.beta = 0.1;
  options.label_smoothing = 0.0;
  options.variant = TIRL_DPO_SIGMOID;
  return options;
}

extern "C" tirl_status tirl_dpo_loss(const float* policy_chosen, const float* policy_rejected,
                                     const float* ref_chosen, const float* ref_rejected,
                                     int64_t num_pairs, const tirl_dpo_options* options,
                                     float* grad_chosen, float* grad_rejected,
                                     float* chosen_rewards, float* rejected_rewards,
                                     tirl_dpo_result* result, tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_count(num_pairs, kOp, "num_pairs")) ||
        (s = check_pointer(policy_chosen, num_pairs, kOp, "policy_chosen")) ||
        (s = check_pointer(policy_rejected, num_pairs, kOp, "policy_rejected")) ||
        (s = check_pointer(ref_chosen, num_pairs, kOp, "ref_chosen")) ||
        (s = check_pointer(ref_rejected, num_pairs, kOp, "ref_rejected")) ||
        (s = check_cpu_device(device, kOp))) {
      return s;
    }
    if (options == nullptr || result == nullptr) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(kOp) + ": expected options and result");
    }
    if (!(options->beta > 0.0) || !std::isfinite(options->beta)) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(kOp) +
                                                   ": expected a finite beta > 0 but received " +
                                                   format_double(options->beta));
    }
    if (!(options->label_smoothing >= 0.0 && options->label_smoothing < 0.5)) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": expected label_smoothing in [0, 0.5) but received " +
                      format_double(options->label_smoothing));
    }
    if (options->variant < TIRL_DPO_SIGMOID || options->variant > TIRL_DPO_ROBUST) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(kOp) + ": unknown variant " +
                                                   std::to_string(options->variant));
    }
    dpo_loss_cpu(policy_chosen, policy_rejected, ref_chosen, ref_rejected, num_pairs, *options,
                 grad_chosen, grad_rejected, chosen_rewards, rejected_rewards, result);
    return ok();
  });
}
