// dpoLoss on the GPU (formulas in math/dpo_loss.h): one thread per pair (a grid-stride
// loop beyond 2^31 - 1 blocks) writes its four outputs; the losses and the accuracy count
// are reduced in a fixed order (per block, then by the last block in block order), so the
// loss is the same run after run.
#include <string>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/reduce.cuh"
#include "math/dpo_loss.h"

namespace tirl::cuda {
namespace {

constexpr const char* kOp = "dpoLoss";
constexpr int kThreads = 256;

struct DpoTotals {
  double loss;
  unsigned long long correct;
};

struct AddTotals {
  __device__ DpoTotals operator()(const DpoTotals& a, const DpoTotals& b) const {
    return {a.loss + b.loss, a.correct + b.correct};
  }
};

template <tirl_dpo_variant kVariant>
__global__ void __launch_bounds__(kThreads)
dpo_kernel(const float* __restrict__ policy_chosen, const float* __restrict__ policy_rejected,
           const float* __restrict__ ref_chosen, const float* __restrict__ ref_rejected,
           int64_t num_pairs, DpoParams params, float inverse_pairs, float* __restrict__ grad_chosen,
           float* __restrict__ grad_rejected, float* __restrict__ chosen_rewards,
           float* __restrict__ rejected_rewards, DpoTotals* partials, unsigned* ticket,
           DpoTotals* total) {
  DpoTotals mine{0.0, 0};
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < num_pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float chosen_logratio = policy_chosen[i] - ref_chosen[i];
    const float rejected_logratio = policy_rejected[i] - ref_rejected[i];
    const DpoPairTerm term = dpo_pair_term<kVariant>(chosen_logratio - rejected_logratio, params);
    // d(mean loss)/d policy_chosen = dloss/ddelta / P; policy_rejected enters delta negated.
    const float grad = term.dloss_ddelta * inverse_pairs;
    if (grad_chosen != nullptr) grad_chosen[i] = grad;
    if (grad_rejected != nullptr) grad_rejected[i] = -grad;
    // The accuracy compares the rewards as returned (f32), as TRL compares its tensors.
    const float chosen_reward = params.beta * chosen_logratio;
    const float rejected_reward = params.beta * rejected_logratio;
    if (chosen_rewards != nullptr) chosen_rewards[i] = chosen_reward;
    if (rejected_rewards != nullptr) rejected_rewards[i] = rejected_reward;
    mine.loss += static_cast<double>(term.loss);
    mine.correct += chosen_reward > rejected_reward ? 1ull : 0ull;
  }
  const DpoTotals block = block_reduce(mine, DpoTotals{0.0, 0}, AddTotals{});
  grid_reduce(block, DpoTotals{0.0, 0}, AddTotals{}, partials, ticket, total);
}

}  // namespace

tirl_status dpo_loss(const float* policy_chosen, const float* policy_rejected,
                     const float* ref_chosen, const float* ref_rejected, int64_t num_pairs,
                     const tirl_dpo_options* options, float* grad_chosen, float* grad_rejected,
                     float* chosen_rewards, float* rejected_rewards, tirl_dpo_result* result,
                     tirl_device device) {
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    if (num_pairs == 0) {
      result->loss = 0;
      result->reward_accuracy = 0;
      return ok();
    }
    cudaStream_t stream = stream_of(device);
    const unsigned blocks = blocks_for(num_pairs, kThreads);
    // [total][ticket, padded][partials per block]
    Scratch scratch(stream);
    TIRL_CUDA_TRY(kOp, scratch.allocate(sizeof(DpoTotals) * (2 + blocks)));
    DpoTotals* total = scratch.as<DpoTotals>();
    unsigned* ticket = reinterpret_cast<unsigned*>(total + 1);
    DpoTotals* partials = total + 2;
    TIRL_CUDA_TRY(kOp, cudaMemsetAsync(ticket, 0, sizeof(unsigned), stream));
    const DpoParams params = dpo_params(options->beta, options->label_smoothing, options->variant);
    const double inverse_pairs = 1.0 / static_cast<double>(num_pairs);
    const float inverse_pairs_f32 = static_cast<float>(inverse_pairs);
    auto launch = [&](auto kernel) {
      kernel<<<blocks, kThreads, 0, stream>>>(policy_chosen, policy_rejected, ref_chosen, ref_rejected,
                                              num_pairs, params, inverse_pairs_f32, grad_chosen,
                                              grad_rejected, chosen_rewards, rejected_rewards, partials,
                                              ticket, total);
    };
    switch (options->variant) {
      case TIRL_DPO_HINGE: launch(dpo_kernel<TIRL_DPO_HINGE>); break;
      case TIRL_DPO_IPO: launch(dpo_kernel<TIRL_DPO_IPO>); break;
      case TIRL_DPO_ROBUST: launch(dpo_kernel<TIRL_DPO_ROBUST>); break;
      case TIRL_DPO_SIGMOID: launch(dpo_kernel<TIRL_DPO_SIGMOID>); break;
    }
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    DpoTotals host;
    TIRL_CUDA_TRY(kOp, cudaMemcpyAsync(&host, total, sizeof host, cudaMemcpyDeviceToHost, stream));
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));
    result->loss = host.loss * inverse_pairs;
    result->reward_accuracy = static_cast<double>(host.correct) * inverse_pairs;
    return ok();
  });
}

}  // namespace tirl::cuda
