// tokenLogprobs and its backward on the GPU (MATH.md; formulas in math/token_logprobs.h).
//
// One block per token row. Forward: each thread keeps an online softmax summary of its
// slice of the row (16-byte loads, the running max raised once per load), the summaries
// merge in a fixed tree: the logits are read once and no probability is stored.
// Backward: the same summary pass, keeping what fits of the row in shared memory, then a
// pass writing dlogits that reads the rest again (see kBackwardThreads). Each thread reads
// an element before writing the same element, so dlogits may be the f32 logits buffer
// (in place).
// Labels are checked on the device; a bad one is reported after the launch, with the
// CPU's message (outputs are then unspecified).
#include <algorithm>
#include <climits>
#include <string>

#include "math/bf16.h"
#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/reduce.cuh"
#include "math/token_logprobs.h"

namespace tirl::cuda {
namespace {

constexpr const char* kForwardOp = "tokenLogprobs";
constexpr const char* kBackwardOp = "tokenLogprobsBackward";
constexpr int kThreads = 256;
// The backward reads each row twice: the first read keeps as much of the row as shared
// memory holds (all of a 128 KiB row; a third of a 600 KiB one), and the second read takes
// the rest from global memory, where large blocks (fewer rows in flight) help it hit L2.
constexpr int kBackwardThreads = 1024;

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(uint16_t bits) { return bf16_to_f32(bits); }

// 16 bytes of logits as floats: 4 f32 or 8 bf16.
template <class Logit>
struct Load16 {
  static constexpr int kCount = 16 / sizeof(Logit);
  // A plain load, not __ldg: the backward may write the same buffer (in place).
  __device__ static uint4 load(const Logit* p) { return *reinterpret_cast<const uint4*>(p); }
  __device__ static void unpack(const uint4& raw, float* out) {
    const Logit* values = reinterpret_cast<const Logit*>(&raw);
#pragma unroll
    for (int k = 0; k < kCount; ++k) out[k] = to_f32(values[k]);
  }
};

// Adds `count` logits to a thread's summary: raise its max first when one of them is
// larger (merge_softmax_stats rescales the sums), then sum 2^y, y = (x - max) log2(e) / T,
// in float (base 2 as on the CPU; the entropy sum is turned back to base e once per call).
template <bool kEntropy, int kCount>
__device__ void accumulate(const float* x, SoftmaxStats& s, float log2e_over_t, double inv_t) {
  float group_max = x[0];
#pragma unroll
  for (int k = 1; k < kCount; ++k) group_max = fmaxf(group_max, x[k]);
  if (group_max > s.max) s = merge_softmax_stats(s, SoftmaxStats{group_max, 0.0, 0.0}, inv_t);
  const float shift = softmax_shift(s.max);
  float sum = 0.0f, weighted = 0.0f;
#pragma unroll
  for (int k = 0; k < kCount; ++k) {
    const float y = (x[k] - shift) * log2e_over_t;
    const float e = exp2_of_nonpositive(y);
    sum += e;
    if (kEntropy) weighted += entropy_term(e, y);
  }
  s.sum += sum;
  if (kEntropy) s.weighted += weighted * kLn2;
}

struct MergeStats {
  double inv_t;
  __device__ SoftmaxStats operator()(const SoftmaxStats& a, const SoftmaxStats& b) const {
    return merge_softmax_stats(a, b, inv_t);
  }
};

// Whether a row can be read in 16-byte loads: aligned base and a whole number of loads.
template <class Logit>
__device__ bool vector_row(const Logit* row, int64_t vocab_size) {
  return reinterpret_cast<uintptr_t>(row) % 16 == 0 && vocab_size % Load16<Logit>::kCount == 0;
}

// The summary of one row, in every thread of the block (broadcast through shared memory).
// With a vector row, 16-byte chunk c (logits [c * kCount, (c + 1) * kCount)) is read by
// thread c % blockDim.x, which also keeps it in cache[c] when c < cache_chunks.
template <bool kEntropy, class Logit>
__device__ SoftmaxStats row_stats(const Logit* row, int64_t vocab_size, float log2e_over_t,
                                  double inv_t, uint4* cache = nullptr, int64_t cache_chunks = 0) {
  SoftmaxStats s = empty_softmax_stats();
  if (vector_row(row, vocab_size)) {
    constexpr int kCount = Load16<Logit>::kCount;
    const int64_t chunks = vocab_size / kCount;
    // Two loads in flight per thread before their sums, which depend on each other.
    int64_t c = threadIdx.x;
    for (; c + blockDim.x < chunks; c += 2 * blockDim.x) {
      const uint4 raw0 = Load16<Logit>::load(row + c * kCount);
      const uint4 raw1 = Load16<Logit>::load(row + (c + blockDim.x) * kCount);
      if (c < cache_chunks) cache[c] = raw0;
      if (c + blockDim.x < cache_chunks) cache[c + blockDim.x] = raw1;
      float x0[kCount], x1[kCount];
      Load16<Logit>::unpack(raw0, x0);
      Load16<Logit>::unpack(raw1, x1);
      accumulate<kEntropy, kCount>(x0, s, log2e_over_t, inv_t);
      accumulate<kEntropy, kCount>(x1, s, log2e_over_t, inv_t);
    }
    if (c < chunks) {
      const uint4 raw = Load16<Logit>::load(row + c * kCount);
      if (c < cache_chunks) cache[c] = raw;
      float x[kCount];
      Load16<Logit>::unpack(raw, x);
      accumulate<kEntropy, kCount>(x, s, log2e_over_t, inv_t);
    }
  } else {
    for (int64_t v = threadIdx.x; v < vocab_size; v += blockDim.x) {
      const float x = to_f32(row[v]);
      accumulate<kEntropy, 1>(&x, s, log2e_over_t, inv_t);
    }
  }
  s = block_reduce(s, empty_softmax_stats(), MergeStats{inv_t});
  __shared__ SoftmaxStats shared;
  if (threadIdx.x == 0) shared = s;
  __syncthreads();
  return shared;
}

// Records the first row with a label outside [0, vocab_size); true when the label is valid.
__device__ bool check_label(int32_t label, int64_t vocab_size, int64_t row,
                            unsigned long long* first_bad_label) {
  if (label >= 0 && label < vocab_size) return true;
  atomicMin(first_bad_label, static_cast<unsigned long long>(row));
  return false;
}

template <bool kEntropy, class Logit>
__global__ void __launch_bounds__(kThreads)
forward_kernel(const Logit* __restrict__ logits, int64_t vocab_size, const int32_t* __restrict__ labels,
               float log2e_over_t, double inv_t, float* __restrict__ logp, float* __restrict__ entropy,
               unsigned long long* first_bad_label) {
  const int64_t t = blockIdx.x;
  const Logit* row = logits + t * vocab_size;
  const SoftmaxStats s = row_stats<kEntropy>(row, vocab_size, log2e_over_t, inv_t);
  if (threadIdx.x == 0) {
    const int32_t label = labels[t];
    const bool valid = check_label(label, vocab_size, t, first_bad_label);
    logp[t] = valid ? static_cast<float>(token_logprob(to_f32(row[label]), s, inv_t)) : NAN;
    if (kEntropy) entropy[t] = static_cast<float>(token_entropy(s));
  }
}

template <bool kEntropy, class Logit>
__global__ void __launch_bounds__(kBackwardThreads)
backward_kernel(const Logit* logits, int64_t vocab_size, const int32_t* __restrict__ labels,
                float log2e_over_t, double inv_t, const float* __restrict__ grad_logp,
                const float* __restrict__ grad_entropy, float* grad_logits,
                unsigned long long* first_bad_label, int64_t cache_chunks) {
  extern __shared__ uint4 row_cache[];  // the row's first cache_chunks chunks
  const int64_t t = blockIdx.x;
  const Logit* row = logits + t * vocab_size;
  float* grad = grad_logits + t * vocab_size;
  // The label's logit is read before any thread writes the row (in place).
  __shared__ float label_logit;
  __shared__ bool label_valid;
  const int32_t label = labels[t];
  if (threadIdx.x == 0) {
    label_valid = check_label(label, vocab_size, t, first_bad_label);
    label_logit = label_valid ? to_f32(row[label]) : 0.0f;
  }
  // Synchronises the block; each thread reads back only the chunks it cached itself.
  const SoftmaxStats s = row_stats<kEntropy>(row, vocab_size, log2e_over_t, inv_t, row_cache, cache_chunks);
  const float g_lp = grad_logp[t];
  const float g_h = kEntropy ? grad_entropy[t] : 0.0f;
  const float log2_sum = static_cast<float>(::log(s.sum) * kLog2E);
  const double h = kEntropy ? token_entropy(s) : 0.0;
  const LogitGradCoefficients c = logit_grad_coefficients(g_lp, g_h, h, inv_t);
  auto grad_of = [&](float x) { return logit_grad((x - s.max) * log2e_over_t - log2_sum, c); };
  if (vector_row(row, vocab_size) && reinterpret_cast<uintptr_t>(grad) % 16 == 0) {
    constexpr int kCount = Load16<Logit>::kCount;
    const int64_t chunks = vocab_size / kCount;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      const int64_t v = c * kCount;
      float x[kCount];
      Load16<Logit>::unpack(c < cache_chunks ? row_cache[c] : Load16<Logit>::load(row + v), x);
#pragma unroll
      for (int k = 0; k < kCount; ++k) x[k] = grad_of(x[k]);
#pragma unroll
      for (int k = 0; k < kCount; k += 4) {
        *reinterpret_cast<float4*>(grad + v + k) = make_float4(x[k], x[k + 1], x[k + 2], x[k + 3]);
      }
    }
  } else {
    for (int64_t v = threadIdx.x; v < vocab_size; v += blockDim.x) grad[v] = grad_of(to_f32(row[v]));
  }
  __syncthreads();
  if (threadIdx.x == 0 && label_valid) {
    grad[label] = static_cast<float>(label_logit_grad(token_logprob(label_logit, s, inv_t), g_lp, g_h, h, inv_t));
  }
}

// Launches a backward kernel with as much of each row cached in shared memory as the
// device allows (vector rows only: every row then has the base pointer's alignment).
template <class Logit>
cudaError_t launch_backward(void (*kernel)(const Logit*, int64_t, const int32_t*, float, double,
                                           const float*, const float*, float*, unsigned long long*,
                                           int64_t),
                            unsigned rows, cudaStream_t stream, const Logit* logits,
                            int64_t vocab_size, const int32_t* labels, float log2e_over_t,
                            double inv_t, const float* grad_logp, const float* grad_entropy,
                            float* grad_logits, unsigned long long* bad) {
  constexpr int kCount = Load16<Logit>::kCount;
  int64_t cache_chunks = 0;
  int64_t room = 0;
  if (reinterpret_cast<uintptr_t>(logits) % 16 == 0 && vocab_size % kCount == 0) {
    int device = 0, optin = 0;
    cudaFuncAttributes attributes{};
    cudaError_t e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&attributes, kernel);
    if (e != cudaSuccess) return e;
    room = static_cast<int64_t>(optin) - static_cast<int64_t>(attributes.sharedSizeBytes);
    cache_chunks = std::max<int64_t>(0, std::min<int64_t>(vocab_size / kCount, room / 16));
  }
  const size_t cache_bytes = static_cast<size_t>(cache_chunks) * 16;
  // The limit is the kernel's, shared by every thread that launches it: set it to the
  // device's whole room (the same value from every caller), never to this call's need, or
  // a concurrent call with a smaller row (or none cached) lowers it under a launch.
  if (cache_bytes > 0) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(room));
    if (e != cudaSuccess) return e;
  }
  kernel<<<rows, kBackwardThreads, cache_bytes, stream>>>(logits, vocab_size, labels, log2e_over_t, inv_t,
                                                         grad_logp, grad_entropy, grad_logits, bad,
                                                         cache_chunks);
  return cudaSuccess;
}

// Launches `launch` on a zeroed error word and reports a bad label like the CPU.
template <class Launch>
tirl_status run_rows(const char* op, int64_t num_tokens, int64_t vocab_size, const int32_t* labels,
                     tirl_device device, Launch launch) {
  DeviceScope scope(device);
  TIRL_CUDA_TRY(op, scope.enter());
  if (num_tokens == 0) return ok();
  if (num_tokens > INT_MAX) {
    return fail(TIRL_ERROR_UNSUPPORTED, std::string(op) + ": more than 2^31 - 1 tokens in one call on CUDA");
  }
  cudaStream_t stream = stream_of(device);
  Scratch scratch(stream);
  TIRL_CUDA_TRY(op, scratch.allocate(sizeof(unsigned long long)));
  unsigned long long* first_bad_label = scratch.as<unsigned long long>();
  TIRL_CUDA_TRY(op, cudaMemsetAsync(first_bad_label, 0xff, sizeof(unsigned long long), stream));
  TIRL_CUDA_TRY(op, launch(static_cast<unsigned>(num_tokens), stream, first_bad_label));
  TIRL_CUDA_TRY(op, cudaGetLastError());
  unsigned long long bad = 0;
  TIRL_CUDA_TRY(op, cudaMemcpyAsync(&bad, first_bad_label, sizeof bad, cudaMemcpyDeviceToHost, stream));
  TIRL_CUDA_TRY(op, cudaStreamSynchronize(stream));
  if (bad != ~0ull) {
    int32_t label = 0;
    TIRL_CUDA_TRY(op, cudaMemcpy(&label, labels + bad, sizeof label, cudaMemcpyDeviceToHost));
    return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(op) + ": Expected labels in [0, vocab_size = " +
                                                 std::to_string(vocab_size) + ") but received labels[" +
                                                 std::to_string(bad) + "] = " + std::to_string(label));
  }
  return ok();
}

}  // namespace

tirl_status token_logprobs(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                           int64_t vocab_size, const int32_t* labels, double temperature,
                           float* logp, float* entropy, tirl_device device) {
  return guarded([&]() -> tirl_status {
    const double inv_t = 1.0 / temperature;
    const float log2e_over_t = static_cast<float>(kLog2E * inv_t);
    return run_rows(kForwardOp, num_tokens, vocab_size, labels, device,
                    [&](unsigned rows, cudaStream_t stream, unsigned long long* bad) {
      const bool bf16 = dtype == TIRL_DTYPE_BF16;
      const auto* f32 = static_cast<const float*>(logits);
      const auto* b16 = static_cast<const uint16_t*>(logits);
      if (entropy != nullptr) {
        if (bf16) forward_kernel<true><<<rows, kThreads, 0, stream>>>(b16, vocab_size, labels, log2e_over_t, inv_t, logp, entropy, bad);
        else forward_kernel<true><<<rows, kThreads, 0, stream>>>(f32, vocab_size, labels, log2e_over_t, inv_t, logp, entropy, bad);
      } else {
        if (bf16) forward_kernel<false><<<rows, kThreads, 0, stream>>>(b16, vocab_size, labels, log2e_over_t, inv_t, logp, entropy, bad);
        else forward_kernel<false><<<rows, kThreads, 0, stream>>>(f32, vocab_size, labels, log2e_over_t, inv_t, logp, entropy, bad);
      }
      return cudaSuccess;
    });
  });
}

tirl_status token_logprobs_backward(const void* logits, tirl_dtype dtype, int64_t num_tokens,
                                    int64_t vocab_size, const int32_t* labels, double temperature,
                                    const float* grad_logp, const float* grad_entropy,
                                    float* grad_logits, tirl_device device) {
  return guarded([&]() -> tirl_status {
    const double inv_t = 1.0 / temperature;
    const float log2e_over_t = static_cast<float>(kLog2E * inv_t);
    return run_rows(kBackwardOp, num_tokens, vocab_size, labels, device,
                    [&](unsigned rows, cudaStream_t stream, unsigned long long* bad) {
      const bool bf16 = dtype == TIRL_DTYPE_BF16;
      const auto* f32 = static_cast<const float*>(logits);
      const auto* b16 = static_cast<const uint16_t*>(logits);
      if (grad_entropy != nullptr) {
        return bf16 ? launch_backward(backward_kernel<true, uint16_t>, rows, stream, b16, vocab_size, labels, log2e_over_t, inv_t, grad_logp, grad_entropy, grad_logits, bad)
                    : launch_backward(backward_kernel<true, float>, rows, stream, f32, vocab_size, labels, log2e_over_t, inv_t, grad_logp, grad_entropy, grad_logits, bad);
      }
      return bf16 ? launch_backward(backward_kernel<false, uint16_t>, rows, stream, b16, vocab_size, labels, log2e_over_t, inv_t, grad_logp, grad_entropy, grad_logits, bad)
                  : launch_backward(backward_kernel<false, float>, rows, stream, f32, vocab_size, labels, log2e_over_t, inv_t, grad_logp, grad_entropy, grad_logits, bad);
    });
  });
}

}  // namespace tirl::cuda
