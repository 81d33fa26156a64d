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
// Pairs per block inside a chunk: the vectorized loop writes a block's losses to the stack
// and a second loop adds them in double.
constexpr int64_t kPairsPerBlock = 256;

struct ChunkTotals {
  double loss = 0.0;
  int64_t correct = 0;
};

struct DpoArrays {
  const float* policy_chosen;
  const float* policy_rejected;
  const float* ref_chosen;
  const float* ref_rejected;
  float* grad_chosen;
  float* grad_rejected;
  float* chosen_rewards;
  float* rejected_rewards;
};

// One block of pairs, fused: each pair's inputs are read once and all four outputs
// written. Branch-free and free of aliasing (restrict), so it vectorizes. Returns the
// number of pairs whose chosen reward beats the rejected one.
template <tirl_dpo_variant kVariant>
int32_t dpo_block(const float* __restrict policy_chosen, const float* __restrict policy_rejected,
                  const float* __restrict ref_chosen, const float* __restrict ref_rejected,
                  int64_t n, DpoParams params, float inverse_pairs, float* __restrict grad_chosen,
                  float* __restrict grad_rejected, float* __restrict chosen_rewards,
                  float* __restrict rejected_rewards, float* __restrict losses) {
  int32_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float chosen_logratio = policy_chosen[i] - ref_chosen[i];
    const float rejected_logratio = policy_rejected[i] - ref_rejected[i];
    const DpoPairTerm term = dpo_pair_term<kVariant>(chosen_logratio - rejected_logratio, params);
    losses[i] = term.loss;
    // d(mean loss)/d policy_chosen = dloss/ddelta / P; policy_rejected enters delta negated.
    const float grad = term.dloss_ddelta * inverse_pairs;
    grad_chosen[i] = grad;
    grad_rejected[i] = -grad;
    // The accuracy compares the rewards as returned (f32), as TRL compares its tensors.
    const float chosen_reward = params.beta * chosen_logratio;
    const float rejected_reward = params.beta * rejected_logratio;
    chosen_rewards[i] = chosen_reward;
    rejected_rewards[i] = rejected_reward;
    correct += chosen_reward > rejected_reward ? 1 : 0;
  }
  return correct;
}

// A chunk, block by block: the block's losses go to the stack and are then added in
// double (eight lanes in a fixed pattern). Outputs the caller skipped (null) go to stack
// scratch, so the block loop needs no branches.
template <tirl_dpo_variant kVariant>
ChunkTotals dpo_chunk(const DpoArrays& a, int64_t first, int64_t last, const DpoParams& params,
                      float inverse_pairs) {
  ChunkTotals totals;
  float losses[kPairsPerBlock];
  float scratch[4][kPairsPerBlock];
  for (int64_t block = first; block < last; block += kPairsPerBlock) {
    const int64_t n = std::min(kPairsPerBlock, last - block);
    totals.correct += dpo_block<kVariant>(
        a.policy_chosen + block, a.policy_rejected + block, a.ref_chosen + block,
        a.ref_rejected + block, n, params, inverse_pairs,
        a.grad_chosen != nullptr ? a.grad_chosen + block : scratch[0],
        a.grad_rejected != nullptr ? a.grad_rejected + block : scratch[1],
        a.chosen_rewards != nullptr ? a.chosen_rewards + block : scratch[2],
        a.rejected_rewards != nullptr ? a.rejected_rewards + block : scratch[3], losses);
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int k = 0; k < 8; ++k) lanes[k] += losses[i + k];
    }
    for (int k = 0; i < n; ++i, ++k) lanes[k] += losses[i];
    totals.loss += ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  }
  return totals;
}

void dpo_loss_cpu(const DpoArrays& arrays, int64_t num_pairs, const tirl_dpo_options& options,
                  tirl_dpo_result* result) {
  const int64_t num_chunks = chunk_count(num_pairs, kPairsPerChunk);
  std::vector<ChunkTotals> totals(static_cast<size_t>(num_chunks));
  const DpoParams params = dpo_params(options.beta, options.label_smoothing, options.variant);
  const double inverse_pairs = num_pairs > 0 ? 1.0 / static_cast<double>(num_pairs) : 0.0;
  const float inverse_pairs_f32 = static_cast<float>(inverse_pairs);
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kPairsPerChunk;
    const int64_t last = std::min(num_pairs, first + kPairsPerChunk);
    switch (options.variant) {
      case TIRL_DPO_HINGE:
        totals[chunk] = dpo_chunk<TIRL_DPO_HINGE>(arrays, first, last, params, inverse_pairs_f32);
        break;
      case TIRL_DPO_IPO:
        totals[chunk] = dpo_chunk<TIRL_DPO_IPO>(arrays, first, last, params, inverse_pairs_f32);
        break;
      case TIRL_DPO_ROBUST:
        totals[chunk] = dpo_chunk<TIRL_DPO_ROBUST>(arrays, first, last, params, inverse_pairs_f32);
        break;
      case TIRL_DPO_SIGMOID:
        totals[chunk] = dpo_chunk<TIRL_DPO_SIGMOID>(arrays, first, last, params, inverse_pairs_f32);
        break;
    }
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
    dpo_loss_cpu({policy_chosen, policy_rejected, ref_chosen, ref_rejected, grad_chosen,
                  grad_rejected, chosen_rewards, rejected_rewards},
                 num_pairs, *options, result);
    return ok();
  });
}
