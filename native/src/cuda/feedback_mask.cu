// feedbackMask on the GPU: one pass over the roles, each thread a run of 16 tokens.
// Per-sequence counts are integer sums (atomics give the same total in any order), and
// the device checks seq_offsets and roles, reporting the first bad index like the CPU.
#include <algorithm>
#include <climits>
#include <string>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "math/feedback_mask.h"

namespace tirl::cuda {
namespace {

constexpr const char* kOp = "feedbackMask";
constexpr int kThreads = 256;
constexpr int kTokensPerThread = 16;

// What the kernel reports back; "none" is ULLONG_MAX (the memset pattern 0xff).
struct Report {
  unsigned long long first_bad_role;       // token index
  unsigned long long first_decreasing;     // i with seq_offsets[i] < seq_offsets[i - 1]
  long long first_offset;                  // seq_offsets[0]
  long long last_offset;                   // seq_offsets[num_seqs]
};

// The sequence holding token t: the last s in [0, num_seqs) with seq_offsets[s] <= t.
// Bounded by num_seqs whatever the offsets hold, so bad offsets cannot fault.
__device__ int64_t sequence_of(const int32_t* seq_offsets, int64_t num_seqs, int64_t t) {
  int64_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (seq_offsets[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__device__ void add_count(int32_t* action_tokens, int64_t s, int32_t count) {
  if (action_tokens != nullptr && count != 0) atomicAdd(&action_tokens[s], count);
}

__global__ void feedback_mask_kernel(const uint8_t* __restrict__ roles, int64_t num_tokens,
                                     const int32_t* __restrict__ seq_offsets, int64_t num_seqs,
                                     const uint8_t* __restrict__ keep, uint8_t* __restrict__ mask,
                                     int32_t* __restrict__ action_tokens, Report* report) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  for (int64_t i = thread + 1; i <= num_seqs; i += stride) {
    if (seq_offsets[i] < seq_offsets[i - 1]) {
      atomicMin(&report->first_decreasing, static_cast<unsigned long long>(i));
    }
  }
  if (thread == 0) {
    report->first_offset = seq_offsets[0];
    report->last_offset = seq_offsets[num_seqs];
  }

  const int64_t first = thread * kTokensPerThread;
  int64_t s = -1;
  int32_t count = 0;
  if (first < num_tokens && num_seqs > 0) {
    const int64_t last = min(first + kTokensPerThread, num_tokens);
    uint8_t run[kTokensPerThread];
    const bool vector = last - first == kTokensPerThread &&
                        reinterpret_cast<uintptr_t>(roles + first) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(mask + first) % 16 == 0;
    if (vector) {
      *reinterpret_cast<uint4*>(run) = *reinterpret_cast<const uint4*>(roles + first);
    } else {
      for (int64_t t = first; t < last; ++t) run[t - first] = roles[t];
    }
    s = sequence_of(seq_offsets, num_seqs, first);
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
  const int32_t total = __reduce_add_sync(same, static_cast<unsigned>(count));
  if (s >= 0 && (threadIdx.x % 32) == static_cast<unsigned>(__ffs(same) - 1)) {
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
    const int64_t threads_needed =
        std::max<int64_t>((num_tokens + kTokensPerThread - 1) / kTokensPerThread, num_seqs);
    // Enough threads for every token run; the offsets check strides over the grid.
    const unsigned blocks = blocks_for(std::min<int64_t>(threads_needed, int64_t{1} << 30), kThreads);
    feedback_mask_kernel<<<blocks, kThreads, 0, stream>>>(roles, num_tokens, seq_offsets, num_seqs,
                                                          keep, mask, action_tokens, report);
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    Report host;
    TIRL_CUDA_TRY(kOp, cudaMemcpyAsync(&host, report, sizeof host, cudaMemcpyDeviceToHost, stream));
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));

    // The checks in the CPU kernel's order, with its messages.
    if (host.first_offset != 0) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(kOp) +
                                                   ": expected seqOffsets[0] to be 0 but received " +
                                                   std::to_string(host.first_offset));
    }
    if (host.first_decreasing != ULLONG_MAX) {
      const int64_t i = static_cast<int64_t>(host.first_decreasing);
      int32_t pair[2];
      TIRL_CUDA_TRY(kOp, cudaMemcpy(pair, seq_offsets + i - 1, sizeof pair, cudaMemcpyDeviceToHost));
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": expected non-decreasing seqOffsets but seqOffsets[" +
                      std::to_string(i) + "] = " + std::to_string(pair[1]) + " < seqOffsets[" +
                      std::to_string(i - 1) + "] = " + std::to_string(pair[0]));
    }
    if (host.last_offset != num_tokens) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": expected seqOffsets to end at the token count " +
                      std::to_string(num_tokens) + " but it ends at " +
                      std::to_string(host.last_offset));
    }
    if (host.first_bad_role != ULLONG_MAX) {
      const int64_t t = static_cast<int64_t>(host.first_bad_role);
      uint8_t role = 0;
      TIRL_CUDA_TRY(kOp, cudaMemcpy(&role, roles + t, 1, cudaMemcpyDeviceToHost));
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(kOp) + ": expected roles in 0..3 (prompt, action, feedback, padding) "
                  "but roles[" + std::to_string(t) + "] = " + std::to_string(role));
    }
    return ok();
  });
}

}  // namespace tirl::cuda
