// The token picks of 'clip_cov' and 'kl_cov' on the GPU: the same tokens as the CPU's
// pick_clip_cov / pick_kl_cov (cpu/policy_loss.cc) for the same data and seed, by the
// same arithmetic in the same order, so that a loss computed on either device zeroes (or
// penalises) the same tokens.
//
// (1) The batch means of the advantages and log-probs: double sums over the CPU's chunks
//     of kPolicyChunkTokens tokens, each chunk summed in token order by one thread, then
//     the chunks in chunk order by one thread, rounded to float as the CPU does.
// (2) Each masked-in token gets its eligibility (clip_cov: clip_cov_candidate) and a 64-bit
//     rank key (clip_cov: pick_key(seed, t); kl_cov: kl_cov_rank_key(cov, t)); smaller keys
//     are picked first, every key is distinct.
// (3) A radix select over the keys, 8 bits a pass, finds the `wanted`-th smallest key of
//     the eligible tokens; the tokens with keys up to it are the pick: exactly the set the
//     CPU's nth_element leaves in front.
//
// This file is compiled with --fmad=false: the candidate test evaluates the ratio's
// polynomial (math/exp.h) without fused multiply-adds, as the CPU's baseline code does,
// so that a ratio at the clip boundary falls on the same side on both.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common.cuh"
#include "cuda/policy_pick.h"
#include "cuda/reduce.cuh"
#include "math/policy_loss.h"

namespace tirl::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRadixBits = 8;
constexpr int kBins = 1 << kRadixBits;
constexpr int kPasses = 64 / kRadixBits;

struct ChunkSum {
  double advantage, logp;
  unsigned long long masked;
};

// The state of one pick, in device memory (zeroed before the launches).
struct PickState {
  float mean_advantage, mean_logp;
  unsigned long long masked;
  unsigned long long eligible;
  unsigned long long wanted;     // how many to pick (0: none)
  unsigned long long remaining;  // of the wanted, still to place below the prefix
  unsigned long long prefix;     // the high bits of the threshold key found so far
  unsigned long long threshold;  // keys <= this are picked
  int all;                       // every eligible token is picked (no select needed)
  unsigned long long histogram[kPasses][kBins];
};

// (1) One thread per CPU chunk: its masked sums, in token order.
__global__ void __launch_bounds__(kThreads)
chunk_sums_kernel(const float* __restrict__ logp, const float* __restrict__ advantages,
                  const uint8_t* __restrict__ mask, int64_t num_tokens, int64_t num_chunks,
                  ChunkSum* sums) {
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (chunk >= num_chunks) return;
  const int64_t begin = chunk * kPolicyChunkTokens;
  const int64_t end = min(num_tokens, begin + kPolicyChunkTokens);
  double a = 0, l = 0;
  unsigned long long masked = 0;
#pragma unroll 8
  for (int64_t t = begin; t < end; ++t) {
    const bool in = mask[t] != 0;
    a += in ? static_cast<double>(advantages[t]) : 0.0;
    l += in ? static_cast<double>(logp[t]) : 0.0;
    masked += in;
  }
  sums[chunk] = {a, l, masked};
}

// The chunks in chunk order, the means and how many tokens to pick (one thread).
__global__ void means_kernel(const ChunkSum* sums, int64_t num_chunks, bool kl_cov, double ratio,
                             PickState* state) {
  double a = 0, l = 0;
  unsigned long long masked = 0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    a += sums[c].advantage;
    l += sums[c].logp;
    masked += sums[c].masked;
  }
  const double n = masked > 0 ? static_cast<double>(masked) : 1.0;
  state->mean_advantage = static_cast<float>(a / n);
  state->mean_logp = static_cast<float>(l / n);
  state->masked = masked;
  const long long wanted = pick_count(static_cast<int64_t>(masked), ratio, kl_cov);
  state->wanted = static_cast<unsigned long long>(wanted);
}

// (2) Eligibility and rank key of every token.
__global__ void __launch_bounds__(kThreads)
keys_kernel(const float* __restrict__ logp, const float* __restrict__ old_logp,
            const float* __restrict__ advantages, const uint8_t* __restrict__ mask, int64_t num_tokens,
            bool kl_cov, PolicyConstants c, float lb, float ub, uint64_t seed_key,
            unsigned long long* __restrict__ keys, uint8_t* __restrict__ eligible, PickState* state) {
  const float mean_a = state->mean_advantage, mean_l = state->mean_logp;
  unsigned long long count = 0;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    bool ok = mask[t] != 0;
    unsigned long long key = 0;
    if (ok) {
      const float cov = covariance_term(logp[t], advantages[t], mean_l, mean_a);
      if (kl_cov) {
        key = kl_cov_rank_key(cov, static_cast<uint64_t>(t));
      } else {
        ok = clip_cov_candidate(logp[t], old_logp[t], advantages[t], cov, c, lb, ub);
        key = pick_key(seed_key, static_cast<uint64_t>(t));
      }
    }
    keys[t] = key;
    eligible[t] = ok;
    count += ok;
  }
  count = block_reduce(count, 0ull, [](unsigned long long x, unsigned long long y) { return x + y; });
  if (threadIdx.x == 0 && count != 0) atomicAdd(&state->eligible, count);
}

// After the keys: whether every eligible token is picked (then no select runs).
__global__ void start_select_kernel(PickState* state) {
  state->all = state->eligible <= state->wanted;
  state->remaining = state->wanted;
  state->prefix = 0;
  state->threshold = state->all ? ~0ull : 0ull;
}

// (3) One pass of the radix select: a histogram of the next 8 bits of the keys that share
// the prefix found so far.
__global__ void __launch_bounds__(kThreads)
histogram_kernel(const unsigned long long* __restrict__ keys, const uint8_t* __restrict__ eligible,
                 int64_t num_tokens, int pass, PickState* state) {
  if (state->all || state->wanted == 0) return;
  __shared__ unsigned long long bins[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) bins[b] = 0;
  __syncthreads();
  const int shift = 64 - kRadixBits * (pass + 1);
  const unsigned long long prefix = state->prefix;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!eligible[t]) continue;
    const unsigned long long key = keys[t];
    // The bits above this pass's must equal the prefix's (none on the first pass).
    if (pass > 0 && (key >> (shift + kRadixBits)) != (prefix >> (shift + kRadixBits))) continue;
    atomicAdd(&bins[(key >> shift) & (kBins - 1)], 1ull);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
    if (bins[b] != 0) atomicAdd(&state->histogram[pass][b], bins[b]);
  }
}

// The bin that holds the remaining-th smallest key: its bits join the prefix (one thread).
__global__ void choose_bin_kernel(int pass, PickState* state) {
  if (state->all || state->wanted == 0) return;
  const int shift = 64 - kRadixBits * (pass + 1);
  unsigned long long below = 0;
  for (int b = 0; b < kBins; ++b) {
    const unsigned long long count = state->histogram[pass][b];
    if (below + count >= state->remaining) {
      state->prefix |= static_cast<unsigned long long>(b) << shift;
      state->remaining -= below;
      break;
    }
    below += count;
  }
  if (pass == kPasses - 1) state->threshold = state->prefix;
}

__global__ void __launch_bounds__(kThreads)
mark_kernel(const unsigned long long* __restrict__ keys, const uint8_t* __restrict__ eligible,
            int64_t num_tokens, const PickState* state, uint8_t* __restrict__ selected,
            unsigned long long* selected_count) {
  const bool none = state->wanted == 0;
  const unsigned long long threshold = state->threshold;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    selected[t] = !none && eligible[t] && keys[t] <= threshold;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *selected_count = none ? 0 : (state->eligible < state->wanted ? state->eligible : state->wanted);
  }
}

size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

tirl_status pick_policy_tokens(const char* op, const float* logp, const float* old_logp,
                               const float* advantages, const uint8_t* mask, int64_t num_tokens,
                               const tirl_policy_loss_options& o, uint8_t* selected,
                               unsigned long long* selected_count, cudaStream_t stream) {
  const bool kl_cov = o.policy_loss == TIRL_POLICY_KL_COV;
  if (kl_cov && num_tokens > static_cast<int64_t>(UINT32_MAX)) {
    return fail(TIRL_ERROR_UNSUPPORTED, std::string(op) + ": kl_cov on CUDA takes at most 2^32 - 1 tokens a call");
  }
  const int64_t num_chunks = (num_tokens + kPolicyChunkTokens - 1) / kPolicyChunkTokens;
  Scratch scratch(stream);
  const size_t state_bytes = align16(sizeof(PickState));
  const size_t chunk_bytes = align16(static_cast<size_t>(num_chunks) * sizeof(ChunkSum));
  const size_t key_bytes = align16(static_cast<size_t>(num_tokens) * sizeof(unsigned long long));
  TIRL_CUDA_TRY(op, scratch.allocate(state_bytes + chunk_bytes + key_bytes + static_cast<size_t>(num_tokens) + 16));
  char* base = scratch.as<char>();
  PickState* state = reinterpret_cast<PickState*>(base);
  ChunkSum* sums = reinterpret_cast<ChunkSum*>(base + state_bytes);
  unsigned long long* keys = reinterpret_cast<unsigned long long*>(base + state_bytes + chunk_bytes);
  uint8_t* eligible = reinterpret_cast<uint8_t*>(base + state_bytes + chunk_bytes + key_bytes);
  TIRL_CUDA_TRY(op, cudaMemsetAsync(state, 0, sizeof(PickState), stream));

  const double ratio = kl_cov ? o.kl_cov_ratio : o.clip_cov_ratio;
  if (num_chunks > 0) {
    chunk_sums_kernel<<<blocks_for(num_chunks, kThreads), kThreads, 0, stream>>>(
        logp, advantages, mask, num_tokens, num_chunks, sums);
    TIRL_CUDA_TRY(op, cudaGetLastError());
  }
  means_kernel<<<1, 1, 0, stream>>>(sums, num_chunks, kl_cov, ratio, state);
  TIRL_CUDA_TRY(op, cudaGetLastError());
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(blocks_for(num_tokens, kThreads * 8), 4096));
  keys_kernel<<<blocks, kThreads, 0, stream>>>(
      logp, old_logp, advantages, mask, num_tokens, kl_cov, policy_constants(o),
      static_cast<float>(o.clip_cov_lb), static_cast<float>(o.clip_cov_ub), pick_key_seed(o.seed), keys,
      eligible, state);
  TIRL_CUDA_TRY(op, cudaGetLastError());
  start_select_kernel<<<1, 1, 0, stream>>>(state);
  TIRL_CUDA_TRY(op, cudaGetLastError());
  for (int pass = 0; pass < kPasses; ++pass) {
    histogram_kernel<<<blocks, kThreads, 0, stream>>>(keys, eligible, num_tokens, pass, state);
    TIRL_CUDA_TRY(op, cudaGetLastError());
    choose_bin_kernel<<<1, 1, 0, stream>>>(pass, state);
    TIRL_CUDA_TRY(op, cudaGetLastError());
  }
  mark_kernel<<<blocks, kThreads, 0, stream>>>(keys, eligible, num_tokens, state, selected, selected_count);
  TIRL_CUDA_TRY(op, cudaGetLastError());
  return ok();
}

}  // namespace tirl::cuda
