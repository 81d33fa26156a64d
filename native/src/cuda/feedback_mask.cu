// feedbackMask on the GPU: one pass over the roles, each thread a run of 16 tokens.
// Per-sequence counts are integer sums (atomics give the same total in any order), and
// the device checks seq_offsets and roles, reporting the first bad index like the CPU.
#include <algorithm>
#include <climits>
#include <string>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/reduce.cuh"
#include "math/feedback_mask.h"

namespace tirl::cuda {
namespace {

constexpr const char* kOp = "feedbackMask";
constexpr int kThreads = 256;
constexpr int kTokensPerThread = 16;

// What the kernel reports back; "none" is ULLONG_MAX (the memset pattern 0xff).
struct Report {
  OffsetsReport offsets;
  unsigned long long first_bad_role;  // token index
};

__device__ void add_count(int32_t* action_tokens, int64_t s, int32_t count) {
  if (action_tokens != nullptr && count != 0) atomicAdd(&action_tokens[s], count);
}

__global__ void feedback_mask_kernel(const uint8_t* __restrict__ roles, int64_t num_tokens,
                                     const int32_t* __restrict__ seq_offsets, int64_t num_seqs,
                                     const uint8_t* __restrict__ keep, uint8_t* __restrict__ mask,
                                     int32_t* __restrict__ action_tokens, Report* report) {
  check_offsets(seq_offsets, num_seqs, &report->offsets);
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t first = thread * kTokensPerThread;
  int64_t s = -1;
  int32_t count = 0;
  if (first < num_tokens && num_seqs > 0) {
    const int64_t last = min(first + kTokensPerThread, num_tokens);
    alignas(16) uint8_t run[kTokensPerThread];  // read and written as one uint4
    const bool vector = last - first == kTokensPerThread &&
                        reinterpret_cast<uintptr_t>(roles + first) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(mask + first) % 16 == 0;
    if (vector) {
      *reinterpret_cast<uint4*>(run) = *reinterpret_cast<const uint4*>(roles + first);
    } else {
      for (int64_t t = first; t < last; ++t) run[t - first] = roles[t];
    }
    s = find_sequence(seq_offsets, 0, num_seqs - 1, first);
    bool keep_sequence = keep == nullptr || keep[s] != 0;
    int64_t next_start = s + 1 < num_seqs ? seq_offsets[s + 1] : LLONG_MAX;
    int64_t bad = -1;
    for (int64_t t = first; t < last; ++t) {
      while (t >= next_start) {  // entering a later (possibly after empty) sequence
        add_count(action_tokens, s, count);
        count = 0;
        ++s;
        keep_sequence = keep == nullptr || keep[s] != 0;
        next_start = s + 1 < num_seqs ? seq_offsets[s + 1] : LLONG_MAX;
      }
      const uint8_t role = run[t - first];
      if (!valid_role(role) && bad < 0) bad = t;
      const uint8_t m = feedback_mask_value(role, keep_sequence);
      run[t - first] = m;
      count += m;
    }
    if (bad >= 0) atomicMin(&report->first_bad_role, static_cast<unsigned long long>(bad));
    if (vector) {
      *reinterpret_cast<uint4*>(mask + first) = *reinterpret_cast<const uint4*>(run);
    } else {
      for (int64_t t = first; t < last; ++t) mask[t] = run[t - first];
    }
  }
  // Long sequences span many threads: lanes of a warp ending in the same sequence add
  // their counts first, so one atomic per warp and sequence reaches memory.
#if __CUDA_ARCH__ >= 800
  const unsigned same = __match_any_sync(0xffffffffu, static_cast<long long>(s));
  const int32_t total = static_cast<int32_t>(__reduce_add_sync(same, static_cast<unsigned>(count)));
  if (s >= 0 && (threadIdx.x % kWarp) == static_cast<unsigned>(__ffs(same) - 1)) {
    add_count(action_tokens, s, total);
  }
#else
  if (s >= 0) add_count(action_tokens, s, count);
#endif
}

}  // namespace

tirl_status feedback_mask(const uint8_t* roles, int64_t num_tokens, const int32_t* seq_offsets,
                          int64_t num_seqs, const uint8_t* keep, uint8_t* mask,
                          int32_t* action_tokens, tirl_device device) {
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    cudaStream_t stream = stream_of(device);
    Scratch scratch(stream);
    TIRL_CUDA_TRY(kOp, scratch.allocate(sizeof(Report)));
    Report* report = scratch.as<Report>();
    TIRL_CUDA_TRY(kOp, cudaMemsetAsync(report, 0xff, sizeof(Report), stream));
    if (action_tokens != nullptr && num_seqs > 0) {
      TIRL_CUDA_TRY(kOp, cudaMemsetAsync(action_tokens, 0, num_seqs * sizeof(int32_t), stream));
    }
    // One thread per run of tokens (fewer than 2^31 tokens, checked by the core, so the grid
    // covers them); the offsets check strides over the grid.
    const unsigned blocks = blocks_for((num_tokens + kTokensPerThread - 1) / kTokensPerThread, kThreads);
    feedback_mask_kernel<<<blocks, kThreads, 0, stream>>>(roles, num_tokens, seq_offsets, num_seqs,
                                                          keep, mask, action_tokens, report);
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    Report host;
    TIRL_CUDA_TRY(kOp, cudaMemcpyAsync(&host, report, sizeof host, cudaMemcpyDeviceToHost, stream));
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));

    // The checks in the CPU kernel's order, with its messages.
    if (tirl_status s = offsets_error(kOp, host.offsets, seq_offsets, num_tokens)) return s;
    if (host.first_bad_role != ULLONG_MAX) {
      const int64_t t = static_cast<int64_t>(host.first_bad_role);
      uint8_t role = 0;
      TIRL_CUDA_TRY(kOp, cudaMemcpy(&role, roles + t, 1, cudaMemcpyDeviceToHost));
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": Expected roles in 0..3 (prompt, action, feedback, padding) "
                  "but received roles[" + std::to_string(t) + "] = " + std::to_string(role));
    }
    return ok();
  });
}

}  // namespace tirl::cuda
