// sequenceLogprobs and its backward on the GPU (formulas in math/sequence_logprobs.h).
//
// One group of threads per sequence: a warp when sequences are short on average, a whole
// block when they are long, chosen from the sizes only. A group sums its sequence in a
// fixed order (strided per thread, then a fixed shuffle tree) in double, so results are
// the same run after run. Masked-out tokens are skipped by a select: NaN there cannot
// leak in. seq_offsets are checked on the device in the same launch.
#include <string>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/reduce.cuh"
#include "math/sequence_logprobs.h"

namespace tirl::cuda {
namespace {

constexpr const char* kForwardOp = "sequenceLogprobs";
constexpr const char* kBackwardOp = "sequenceLogprobsBackward";
constexpr int kThreads = 256;

struct MaskedSum {
  double sum;
  long long count;
};

struct AddMaskedSums {
  __device__ MaskedSum operator()(const MaskedSum& a, const MaskedSum& b) const {
    return {a.sum + b.sum, a.count + b.count};
  }
};

template <int kGroup, bool kValues>
__device__ MaskedSum sequence_sum(const float* logp, const uint8_t* mask, TokenRange r) {
  const int rank = threadIdx.x % kGroup;
  MaskedSum part{0.0, 0};
  for (int64_t t = r.begin + rank; t < r.end; t += kGroup) {
    const bool in = mask[t] != 0;
    if (kValues) part.sum += in ? static_cast<double>(logp[t]) : 0.0;
    part.count += in;
  }
  return group_reduce<kGroup>(part, MaskedSum{0.0, 0}, AddMaskedSums{});
}

template <int kGroup>
__global__ void __launch_bounds__(kThreads)
forward_kernel(const float* __restrict__ logp, const uint8_t* __restrict__ mask, int64_t num_tokens,
               const int32_t* __restrict__ seq_offsets, int64_t num_seqs, bool average,
               float* __restrict__ out, OffsetsReport* report) {
  check_offsets(seq_offsets, num_seqs, report);
  // s is the same in the whole group, which so loops (and shuffles, and syncs) together.
  for (int64_t s = group_sequence<kGroup>(); s < num_seqs; s += grid_groups<kGroup>()) {
    const TokenRange r = sequence_tokens(seq_offsets, s, num_tokens);
    const MaskedSum total = sequence_sum<kGroup, true>(logp, mask, r);
    if (threadIdx.x % kGroup == 0) out[s] = sequence_logprob(total.sum, total.count, average);
  }
}

template <int kGroup>
__global__ void __launch_bounds__(kThreads)
backward_kernel(const float* __restrict__ grad_seq, const uint8_t* __restrict__ mask,
                int64_t num_tokens, const int32_t* __restrict__ seq_offsets, int64_t num_seqs,
                bool average, float* __restrict__ grad_logp, OffsetsReport* report) {
  check_offsets(seq_offsets, num_seqs, report);
  for (int64_t s = group_sequence<kGroup>(); s < num_seqs; s += grid_groups<kGroup>()) {
    const TokenRange r = sequence_tokens(seq_offsets, s, num_tokens);
    // The mean needs the sequence's count first: a pass over its mask (then in cache).
    const long long count = average ? sequence_sum<kGroup, false>(nullptr, mask, r).count : 0;
    const float g = sequence_logprob_token_grad(grad_seq[s], count, average);
    for (int64_t t = r.begin + threadIdx.x % kGroup; t < r.end; t += kGroup) {
      grad_logp[t] = mask[t] != 0 ? g : 0.0f;
    }
  }
}

// Launches the warp or block flavour of `Kernel` and reports bad offsets like the CPU.
template <class Launch>
tirl_status run_sequences(const char* op, int64_t num_tokens, const int32_t* seq_offsets,
                          int64_t num_seqs, tirl_device device, Launch launch) {
  DeviceScope scope(device);
  TIRL_CUDA_TRY(op, scope.enter());
  cudaStream_t stream = stream_of(device);
  Scratch scratch(stream);
  TIRL_CUDA_TRY(op, scratch.allocate(sizeof(OffsetsReport)));
  OffsetsReport* report = scratch.as<OffsetsReport>();
  TIRL_CUDA_TRY(op, cudaMemsetAsync(report, 0xff, sizeof(OffsetsReport), stream));
  const bool block = block_per_sequence(num_tokens, num_seqs);
  launch(block, blocks_for(num_seqs, block ? 1 : kThreads / kWarp), stream, report);
  TIRL_CUDA_TRY(op, cudaGetLastError());
  OffsetsReport host;
  TIRL_CUDA_TRY(op, cudaMemcpyAsync(&host, report, sizeof host, cudaMemcpyDeviceToHost, stream));
  TIRL_CUDA_TRY(op, cudaStreamSynchronize(stream));
  if (tirl_status s = offsets_error(op, host, seq_offsets, num_tokens)) return s;
  return ok();
}

}  // namespace

tirl_status sequence_logprobs(const float* logp, const uint8_t* mask, int64_t num_tokens,
                              const int32_t* seq_offsets, int64_t num_seqs, int32_t average,
                              float* out, tirl_device device) {
  return guarded([&]() -> tirl_status {
    return run_sequences(kForwardOp, num_tokens, seq_offsets, num_seqs, device,
                         [&](bool block, unsigned blocks, cudaStream_t stream, OffsetsReport* report) {
      if (block) {
        forward_kernel<kThreads><<<blocks, kThreads, 0, stream>>>(logp, mask, num_tokens, seq_offsets,
                                                                  num_seqs, average != 0, out, report);
      } else {
        forward_kernel<kWarp><<<blocks, kThreads, 0, stream>>>(logp, mask, num_tokens, seq_offsets,
                                                               num_seqs, average != 0, out, report);
      }
    });
  });
}

tirl_status sequence_logprobs_backward(const float* grad_seq, const uint8_t* mask,
                                       int64_t num_tokens, const int32_t* seq_offsets,
                                       int64_t num_seqs, int32_t average, float* grad_logp,
                                       tirl_device device) {
  return guarded([&]() -> tirl_status {
    return run_sequences(kBackwardOp, num_tokens, seq_offsets, num_seqs, device,
                         [&](bool block, unsigned blocks, cudaStream_t stream, OffsetsReport* report) {
      if (block) {
        backward_kernel<kThreads><<<blocks, kThreads, 0, stream>>>(
            grad_seq, mask, num_tokens, seq_offsets, num_seqs, average != 0, grad_logp, report);
      } else {
        backward_kernel<kWarp><<<blocks, kThreads, 0, stream>>>(
            grad_seq, mask, num_tokens, seq_offsets, num_seqs, average != 0, grad_logp, report);
      }
    });
  });
}

}  // namespace tirl::cuda
