// groupAdvantages on the GPU (formulas in math/group_advantages.h). One warp per group:
// the mean, then the squared deviations from it (two passes, in double, in a fixed
// order), then the advantages. Contiguous groups (group_size) are found by index;
// arbitrary group ids by a stable radix sort of (id, index) pairs, so each group's
// members keep their input order and the result does not depend on the run.
#include <cub/device/device_radix_sort.cuh>

#include <string>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/reduce.cuh"
#include "math/group_advantages.h"

namespace tirl::cuda {
namespace {

constexpr const char* kOp = "groupAdvantages";
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;

struct Add {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Normalises one group whose k-th member is rewards[member(k)], k in [0, count); the
// whole warp calls it.
template <class Member>
__device__ void normalize_group(const float* rewards, int64_t count, Member member,
                                bool scale_by_std, double epsilon, float* advantages) {
  const int lane = threadIdx.x % kWarp;
  double sum = 0.0;
  for (int64_t k = lane; k < count; k += kWarp) sum += rewards[member(k)];
  const double mean = group_reduce<kWarp>(sum, 0.0, Add{}) / static_cast<double>(count);
  double squared_deviations = 0.0;
  for (int64_t k = lane; k < count; k += kWarp) {
    const double deviation = static_cast<double>(rewards[member(k)]) - mean;
    squared_deviations += deviation * deviation;
  }
  squared_deviations = group_reduce<kWarp>(squared_deviations, 0.0, Add{});
  const GroupScale scale = group_scale(count, mean, squared_deviations, scale_by_std, epsilon);
  for (int64_t k = lane; k < count; k += kWarp) {
    advantages[member(k)] = group_advantage(rewards[member(k)], scale);
  }
}

__global__ void __launch_bounds__(kThreads)
contiguous_kernel(const float* __restrict__ rewards, int64_t num_groups, int64_t group_size,
                  bool scale_by_std, double epsilon, float* __restrict__ advantages) {
  // g is the same in the whole warp, which so loops (and shuffles) together.
  for (int64_t g = group_sequence<kWarp>(); g < num_groups; g += grid_groups<kWarp>()) {
    const int64_t first = g * group_size;
    normalize_group(rewards, group_size, [=](int64_t k) { return first + k; }, scale_by_std, epsilon,
                    advantages);
  }
}

// One warp per position of the sorted ids; the warp at the first position of a run of
// equal ids normalises that group. num_rewards < 2^31 (the core's cap with ids): the grid
// covers them all without striding.
__global__ void __launch_bounds__(kThreads)
sorted_kernel(const float* __restrict__ rewards, int64_t num_rewards, const int32_t* __restrict__ ids,
              const int32_t* __restrict__ order, bool scale_by_std, double epsilon,
              float* __restrict__ advantages) {
  const int64_t i = group_sequence<kWarp>();
  if (i >= num_rewards || (i > 0 && ids[i] == ids[i - 1])) return;  // whole warps
  const int32_t id = ids[i];
  int64_t end = num_rewards;
  for (int64_t base = i + 1; base < num_rewards; base += kWarp) {
    const int64_t j = base + threadIdx.x % kWarp;
    const unsigned other = __ballot_sync(0xffffffffu, j < num_rewards && ids[j] != id);
    if (other != 0) {
      end = base + __ffs(other) - 1;
      break;
    }
  }
  const int32_t* members = order + i;
  normalize_group(rewards, end - i, [=](int64_t k) { return static_cast<int64_t>(members[k]); },
                  scale_by_std, epsilon, advantages);
}

// n < 2^31, as for sorted_kernel.
__global__ void iota_kernel(int32_t* values, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) values[i] = static_cast<int32_t>(i);
}

}  // namespace

tirl_status group_advantages(const float* rewards, int64_t num_rewards, const int32_t* group_ids,
                             int64_t group_size, const tirl_group_advantages_options* options,
                             float* advantages, tirl_device device) {
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    if (num_rewards == 0) return ok();
    cudaStream_t stream = stream_of(device);
    const bool scale_by_std = options->scale_by_std != 0;
    const double epsilon = options->epsilon;
    if (group_ids == nullptr) {
      const int64_t groups = num_rewards / group_size;
      contiguous_kernel<<<blocks_for(groups, kWarpsPerBlock), kThreads, 0, stream>>>(
          rewards, groups, group_size, scale_by_std, epsilon, advantages);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
      return ok();
    }
    const int n = static_cast<int>(num_rewards);  // the core caps id'd batches at 2^31 - 1
    size_t sort_bytes = 0;
    TIRL_CUDA_TRY(kOp, cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, group_ids,
                                                       static_cast<int32_t*>(nullptr),
                                                       static_cast<const int32_t*>(nullptr),
                                                       static_cast<int32_t*>(nullptr), n, 0, 32, stream));
    const size_t array_bytes = (static_cast<size_t>(n) * sizeof(int32_t) + 255) / 256 * 256;
    Scratch scratch(stream);
    TIRL_CUDA_TRY(kOp, scratch.allocate(3 * array_bytes + sort_bytes));
    char* base = scratch.as<char>();
    auto* index = reinterpret_cast<int32_t*>(base);
    auto* sorted_ids = reinterpret_cast<int32_t*>(base + array_bytes);
    auto* order = reinterpret_cast<int32_t*>(base + 2 * array_bytes);
    void* sort_storage = base + 3 * array_bytes;
    iota_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(index, n);
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    TIRL_CUDA_TRY(kOp, cub::DeviceRadixSort::SortPairs(sort_storage, sort_bytes, group_ids, sorted_ids,
                                                       index, order, n, 0, 32, stream));
    sorted_kernel<<<blocks_for(n, kWarpsPerBlock), kThreads, 0, stream>>>(
        rewards, n, sorted_ids, order, scale_by_std, epsilon, advantages);
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    // The scratch is freed in stream order; waiting keeps the call's errors in this call.
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));
    return ok();
  });
}

}  // namespace tirl::cuda
