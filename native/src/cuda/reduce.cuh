// Deterministic reductions for the CUDA kernels: a fixed shuffle tree inside each warp,
// warps combined in index order, and across the grid per-block partials combined by the
// last block to finish, again in block-index order. With the grid fixed by the input size,
// every result is the same run after run (atomics are used only for integer counts, whose
// sum does not depend on order, and for the ticket that elects the last block).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace tirl::cuda {

constexpr int kWarp = 32;

// __shfl_down_sync of any trivially copyable value, 32 bits at a time.
template <class T>
__device__ T shuffle_down(const T& value, int offset) {
  static_assert(sizeof(T) % 4 == 0, "shuffle_down needs a whole number of 32-bit words");
  T out;
  const unsigned* from = reinterpret_cast<const unsigned*>(&value);
  unsigned* to = reinterpret_cast<unsigned*>(&out);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) {
    to[i] = __shfl_down_sync(0xffffffffu, from[i], offset);
  }
  return out;
}

// Reduces `value` over the warp; lane 0 gets the result. Every lane must take part.
template <class T, class Combine>
__device__ T warp_reduce(T value, Combine combine) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value = combine(value, shuffle_down(value, offset));
  }
  return value;
}

// Reduces `value` over the block (blockDim.x a multiple of 32, at most 1024); thread 0
// gets the result. Every thread must call it; it synchronises the block.
template <class T, class Combine>
__device__ T block_reduce(T value, T identity, Combine combine) {
  __shared__ alignas(16) unsigned char storage[kWarp * sizeof(T)];
  T* per_warp = reinterpret_cast<T*>(storage);
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  value = warp_reduce(value, combine);
  __syncthreads();  // storage may still be read by a previous call
  if (lane == 0) per_warp[warp] = value;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / kWarp;
    value = warp_reduce(lane < warps ? per_warp[lane] : identity, combine);
  }
  return value;
}

// Reduces over a group of kGroup threads (32: each warp; blockDim.x: the block) and
// returns the result in every thread of the group. The whole group must call it.
template <int kGroup, class T, class Combine>
__device__ T group_reduce(T value, T identity, Combine combine) {
  if constexpr (kGroup == kWarp) {
    value = warp_reduce(value, combine);
    T result;
    const unsigned* from = reinterpret_cast<const unsigned*>(&value);
    unsigned* to = reinterpret_cast<unsigned*>(&result);
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) to[i] = __shfl_sync(0xffffffffu, from[i], 0);
    return result;
  } else {
    value = block_reduce(value, identity, combine);
    __shared__ alignas(16) unsigned char storage[sizeof(T)];
    T* shared = reinterpret_cast<T*>(storage);
    if (threadIdx.x == 0) *shared = value;
    __syncthreads();
    return *shared;
  }
}

// One sequence per group of kGroup threads (a warp, or the whole block): this thread's.
template <int kGroup>
__device__ int64_t group_sequence() {
  return static_cast<int64_t>(blockIdx.x) * (blockDim.x / kGroup) + threadIdx.x / kGroup;
}

// Groups in the grid: the stride of a grid-stride loop over sequences (blocks_for caps grids).
template <int kGroup>
__device__ int64_t grid_groups() {
  return static_cast<int64_t>(gridDim.x) * (blockDim.x / kGroup);
}

// Average sequence length from which a whole block, not a warp, takes a sequence: chosen
// from the sizes only, so results stay the same run after run.
constexpr int64_t kBlockPerSequenceFrom = 1024;
inline bool block_per_sequence(int64_t num_tokens, int64_t num_seqs) {
  return num_seqs > 0 && num_tokens / num_seqs >= kBlockPerSequenceFrom;
}

// A load that bypasses L1, for partials written by other blocks.
template <class T>
__device__ T load_coherent(const T* address) {
  static_assert(sizeof(T) % 4 == 0, "load_coherent needs a whole number of 32-bit words");
  T out;
  const unsigned* from = reinterpret_cast<const unsigned*>(address);
  unsigned* to = reinterpret_cast<unsigned*>(&out);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) to[i] = __ldcg(from + i);
  return out;
}

// Grid-wide reduction of one value per block: block b stores its value in partials[b];
// the last block to arrive combines partials[0..gridDim.x) in index order and stores the
// total in *total. `ticket` must be 0 before the launch and is left at 0. Returns true in
// thread 0 of the block that wrote the total (which may then finish the op).
template <class T, class Combine>
__device__ bool grid_reduce(T block_value, T identity, Combine combine, T* partials,
                            unsigned* ticket, T* total) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = block_value;
    __threadfence();
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return false;
  __threadfence();
  T value = identity;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
    value = combine(value, load_coherent(partials + b));
  }
  value = block_reduce(value, identity, combine);
  if (threadIdx.x == 0) {
    *total = value;
    *ticket = 0;
  }
  return threadIdx.x == 0;
}

// ------------------------------------------------------------------ seq_offsets on the device

// What check_offsets() found; "none" for first_decreasing is ULLONG_MAX. Initialise with
// reset_offsets_report (a memset of 0xff) before the kernel runs.
struct OffsetsReport {
  unsigned long long first_decreasing;  // i with seq_offsets[i] < seq_offsets[i - 1]
  long long first;                      // seq_offsets[0]
  long long last;                       // seq_offsets[num_seqs]
};

// Run by every thread of the grid: the checks of check_seq_offsets, in device memory.
__device__ inline void check_offsets(const int32_t* seq_offsets, int64_t num_seqs,
                                     OffsetsReport* report) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = thread + 1; i <= num_seqs; i += stride) {
    if (seq_offsets[i] < seq_offsets[i - 1]) {
      atomicMin(&report->first_decreasing, static_cast<unsigned long long>(i));
    }
  }
  if (thread == 0) {
    report->first = seq_offsets[0];
    report->last = seq_offsets[num_seqs];
  }
}

// The tokens [begin, end) of sequence s, clamped to [0, num_tokens): memory-safe whatever
// the offsets hold (they are validated in the same launch and reported afterwards).
struct TokenRange {
  int64_t begin, end;
};
__device__ inline TokenRange sequence_tokens(const int32_t* seq_offsets, int64_t s,
                                             int64_t num_tokens) {
  int64_t begin = seq_offsets[s], end = seq_offsets[s + 1];
  begin = begin < 0 ? 0 : (begin > num_tokens ? num_tokens : begin);
  end = end < begin ? begin : (end > num_tokens ? num_tokens : end);
  return {begin, end};
}

// The sequence holding token t: the last s in [lo, hi] with seq_offsets[s] <= t (lo if
// none). Bounded by [lo, hi] whatever the offsets hold.
__device__ inline int64_t find_sequence(const int32_t* seq_offsets, int64_t lo, int64_t hi,
                                        int64_t t) {
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (seq_offsets[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace tirl::cuda
