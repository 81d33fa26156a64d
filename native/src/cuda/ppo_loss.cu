// ppoLoss on the GPU (formulas in math/ppo_loss.h), the CPU kernel's passes on the device:
// (1) only where the math needs them before a gradient can be written: the masked token
// count (token-mean with its default normaliser: a 1-byte-per-token pass), or per
// sequence its masked count and, for GSPO, its masked log-ratio sum (one group of threads
// per sequence), then each sequence's constants; (2) one fused pass, one tile of tokens
// per block, reading each input once and writing each gradient once.
//
// Determinism: floating sums are per thread in a fixed token order, then a fixed shuffle
// tree, then the blocks' partials in block order (by the last block to finish); the grid
// depends only on the sizes. Integer counts use atomics (order-free).
#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/reduce.cuh"
#include "math/ppo_loss.h"

namespace tirl::cuda {
namespace {

constexpr const char* kOp = "ppoLoss";
constexpr int kThreads = 256;
constexpr int kTokensPerThread = 8;
constexpr int64_t kTokensPerTile = kThreads * kTokensPerThread;

// Batch-wide counts from the pre-passes (integer atomics).
struct Summary {
  unsigned long long masked;     // masked tokens
  unsigned long long non_empty;  // sequences with a masked token
  unsigned long long longest;    // longest sequence, in tokens
};

struct SequenceConstants {
  float scale;  // the aggregation's factor for the sequence's tokens
  Ratio ratio;  // GSPO's sequence ratio
};

struct PpoTotals {
  double pg_loss, kl_loss, neg_log_ratio;
  unsigned long long clipped, dual_clipped, non_finite, masked;
};

struct AddTotals {
  __device__ PpoTotals operator()(const PpoTotals& a, const PpoTotals& b) const {
    return {a.pg_loss + b.pg_loss,       a.kl_loss + b.kl_loss,
            a.neg_log_ratio + b.neg_log_ratio, a.clipped + b.clipped,
            a.dual_clipped + b.dual_clipped,   a.non_finite + b.non_finite,
            a.masked + b.masked};
  }
};

struct SequenceSum {
  double log_ratio;
  long long masked;
};

struct AddSequenceSums {
  __device__ SequenceSum operator()(const SequenceSum& a, const SequenceSum& b) const {
    return {a.log_ratio + b.log_ratio, a.masked + b.masked};
  }
};

// What the host reads back after the launches: one copy.
struct Report {
  OffsetsReport offsets;
  PpoTotals total;
};

// Device scratch of one call, carved from one allocation.
struct Workspace {
  Report* report;
  OffsetsReport* offsets;  // &report->offsets
  PpoTotals* total;        // &report->total
  Summary* summary;
  unsigned* ticket;
  PpoTotals* partials;             // one per tile
  SequenceSum* sequence_sums;      // one per sequence, when per-sequence
  SequenceConstants* constants;    // one per sequence, when per-sequence
};

// ------------------------------------------------------------------ pre-passes

__global__ void offsets_kernel(const int32_t* seq_offsets, int64_t num_seqs, OffsetsReport* report) {
  check_offsets(seq_offsets, num_seqs, report);
}

__global__ void __launch_bounds__(kThreads)
count_masked_kernel(const uint8_t* __restrict__ mask, int64_t num_tokens, Summary* summary) {
  unsigned long long count = 0;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < num_tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    count += mask[t] != 0;
  }
  count = block_reduce(count, 0ull, [](unsigned long long a, unsigned long long b) { return a + b; });
  if (threadIdx.x == 0 && count != 0) atomicAdd(&summary->masked, count);
}

template <int kGroup>
__global__ void __launch_bounds__(kThreads)
sequence_pass_kernel(const float* __restrict__ logp, const float* __restrict__ old_logp,
                     const uint8_t* __restrict__ mask, int64_t num_tokens,
                     const int32_t* __restrict__ seq_offsets, int64_t num_seqs, bool log_ratio,
                     Workspace w) {
  check_offsets(seq_offsets, num_seqs, w.offsets);
  // s is the same in the whole group, which so loops (and shuffles, and syncs) together.
  for (int64_t s = group_sequence<kGroup>(); s < num_seqs; s += grid_groups<kGroup>()) {
    const TokenRange r = sequence_tokens(seq_offsets, s, num_tokens);
    SequenceSum part{0.0, 0};
    for (int64_t t = r.begin + threadIdx.x % kGroup; t < r.end; t += kGroup) {
      const bool in = mask[t] != 0;
      part.masked += in;
      // A select, so that a NaN under the mask cannot leak in.
      if (log_ratio) part.log_ratio += in ? static_cast<double>(logp[t] - old_logp[t]) : 0.0;
    }
    const SequenceSum total = group_reduce<kGroup>(part, SequenceSum{0.0, 0}, AddSequenceSums{});
    if (threadIdx.x % kGroup == 0) {
      w.sequence_sums[s] = total;
      if (total.masked > 0) {
        atomicAdd(&w.summary->masked, static_cast<unsigned long long>(total.masked));
        atomicAdd(&w.summary->non_empty, 1ull);
      }
      atomicMax(&w.summary->longest, static_cast<unsigned long long>(r.end - r.begin));
    }
  }
}

__global__ void constants_kernel(int64_t num_seqs, tirl_ppo_options o, bool sequence_ratio,
                                 Workspace w) {
  const Summary sum = *w.summary;
  const PpoNormalizers normalizers =
      ppo_normalizers(o, static_cast<double>(sum.masked), static_cast<double>(sum.non_empty),
                      static_cast<double>(sum.longest));
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < num_seqs;
       s += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const SequenceSum own = w.sequence_sums[s];
    const double scale = aggregation_scale(o, normalizers, static_cast<int64_t>(own.masked));
    w.constants[s] = {static_cast<float>(scale),
                      sequence_ratio ? sequence_level_ratio(own.log_ratio, own.masked) : Ratio{1.0f, 0.0f}};
  }
}

// ------------------------------------------------------------------ the fused pass

struct MainArgs {
  const float* logp;
  const float* old_logp;
  const float* advantages;
  const uint8_t* mask;
  const float* ref_logp;
  const float* weights;
  float* grad;
  int64_t num_tokens;
  const int32_t* seq_offsets;  // null when the batch has none
  int64_t num_seqs;
  bool per_sequence;           // constants per sequence (else `scale` for every token)
  bool count_normaliser;       // scale = dp_size / the masked count of the pre-pass
  double dp_size;
  float scale;
  PpoConstants constants;
};

template <bool kKl, tirl_kl_estimator Estimator, bool kWeights, bool kSequenceRatio>
__global__ void __launch_bounds__(kThreads) ppo_kernel(MainArgs a, Workspace w) {
  if (a.seq_offsets != nullptr && !a.per_sequence) check_offsets(a.seq_offsets, a.num_seqs, w.offsets);
  const int64_t tile_begin = static_cast<int64_t>(blockIdx.x) * kTokensPerTile;
  const int64_t tile_end = min(tile_begin + kTokensPerTile, a.num_tokens);
  // The sequences this tile touches, found once for the block.
  __shared__ int64_t first_seq, last_seq;
  if (a.per_sequence && threadIdx.x == 0) {
    first_seq = find_sequence(a.seq_offsets, 0, a.num_seqs - 1, tile_begin);
    last_seq = find_sequence(a.seq_offsets, first_seq, a.num_seqs - 1, tile_end - 1);
  }
  __syncthreads();
  const float shared_scale =
      a.count_normaliser ? static_cast<float>(aggregation_factor(a.dp_size, static_cast<double>(w.summary->masked)))
                         : a.scale;

  PpoTotals mine{0.0, 0.0, 0.0, 0, 0, 0, 0};
#pragma unroll 4
  for (int k = 0; k < kTokensPerThread; ++k) {
    const int64_t t = tile_begin + k * kThreads + threadIdx.x;
    if (t >= tile_end) break;
    float scale = shared_scale;
    Ratio ratio{1.0f, 0.0f};
    if (a.per_sequence) {
      const SequenceConstants c = w.constants[find_sequence(a.seq_offsets, first_seq, last_seq, t)];
      scale = c.scale;
      ratio = c.ratio;
    }
    // Dual clip stays a run-time value here (0 = off): the GPU loop is bandwidth-bound.
    const PpoToken token = ppo_token<kKl, Estimator, kWeights, kSequenceRatio, true>(
        a.logp[t], a.old_logp[t], a.advantages[t], a.mask[t], kKl ? a.ref_logp[t] : 0.0f,
        kWeights ? a.weights[t] : 1.0f, scale, ratio, a.constants);
    if (a.grad != nullptr) a.grad[t] = token.grad;
    mine.pg_loss += token.pg_loss;
    if (kKl) mine.kl_loss += token.kl_loss;
    mine.neg_log_ratio += token.neg_log_ratio;
    mine.clipped += token.clipped != 0.0f;
    mine.dual_clipped += token.dual_clipped != 0.0f;
    mine.non_finite += token.non_finite != 0.0f;
    mine.masked += token.masked != 0.0f;
  }
  const PpoTotals zero{0.0, 0.0, 0.0, 0, 0, 0, 0};
  const PpoTotals block = block_reduce(mine, zero, AddTotals{});
  grid_reduce(block, zero, AddTotals{}, w.partials, w.ticket, w.total);
}

using PpoKernel = void (*)(MainArgs, Workspace);

template <bool kKl, tirl_kl_estimator Estimator>
PpoKernel pick_kernel(bool weights, bool sequence_ratio) {
  if (weights) {
    return sequence_ratio ? ppo_kernel<kKl, Estimator, true, true> : ppo_kernel<kKl, Estimator, true, false>;
  }
  return sequence_ratio ? ppo_kernel<kKl, Estimator, false, true> : ppo_kernel<kKl, Estimator, false, false>;
}

PpoKernel pick_kernel(bool kl, tirl_kl_estimator estimator, bool weights, bool sequence_ratio) {
  if (!kl) return pick_kernel<false, TIRL_KL_K3>(weights, sequence_ratio);
  switch (estimator) {
    case TIRL_KL_K1: return pick_kernel<true, TIRL_KL_K1>(weights, sequence_ratio);
    case TIRL_KL_K2: return pick_kernel<true, TIRL_KL_K2>(weights, sequence_ratio);
    case TIRL_KL_ABS: return pick_kernel<true, TIRL_KL_ABS>(weights, sequence_ratio);
    case TIRL_KL_K1_PLUS: return pick_kernel<true, TIRL_KL_K1_PLUS>(weights, sequence_ratio);
    case TIRL_KL_K3_PLUS: return pick_kernel<true, TIRL_KL_K3_PLUS>(weights, sequence_ratio);
    case TIRL_KL_ABS_PLUS: return pick_kernel<true, TIRL_KL_ABS_PLUS>(weights, sequence_ratio);
    case TIRL_KL_K3: break;
  }
  return pick_kernel<true, TIRL_KL_K3>(weights, sequence_ratio);
}

// Bytes of `count` items of T, rounded up to keep the next carve 16-byte aligned.
template <class T>
size_t carve_bytes(int64_t count) {
  return (static_cast<size_t>(count) * sizeof(T) + 15) / 16 * 16;
}

// The clipped surrogate (vanilla, GSPO through ratio_level).
tirl_status clipped_surrogate(const float* logp, const float* old_logp, const float* advantages,
                     const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                     int64_t num_seqs, const float* ref_logp, const float* weights,
                     const tirl_ppo_options* options, float* grad, tirl_ppo_result* result,
                     tirl_device device) {
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    cudaStream_t stream = stream_of(device);
    const tirl_ppo_options& o = *options;
    const bool kl = ref_logp != nullptr;
    const bool sequence_ratio = o.ratio_level == TIRL_RATIO_SEQUENCE;
    const bool per_sequence = per_sequence_aggregation(o.aggregation) || sequence_ratio;
    const int64_t seqs = seq_offsets != nullptr ? num_seqs : 0;
    const int64_t tiles = (num_tokens + kTokensPerTile - 1) / kTokensPerTile;
    const int64_t per_seq = per_sequence ? seqs : 0;

    Scratch scratch(stream);
    const size_t bytes = carve_bytes<Report>(1) + carve_bytes<Summary>(1) + carve_bytes<unsigned>(1) +
                         carve_bytes<PpoTotals>(tiles) + carve_bytes<SequenceSum>(per_seq) +
                         carve_bytes<SequenceConstants>(per_seq);
    TIRL_CUDA_TRY(kOp, scratch.allocate(bytes));
    char* next = scratch.as<char>();
    auto carve = [&](auto* type, int64_t count) {
      using T = std::remove_pointer_t<decltype(type)>;
      T* p = reinterpret_cast<T*>(next);
      next += carve_bytes<T>(count);
      return p;
    };
    Workspace w;
    w.report = carve(static_cast<Report*>(nullptr), 1);
    w.offsets = &w.report->offsets;
    w.total = &w.report->total;
    w.summary = carve(static_cast<Summary*>(nullptr), 1);
    w.ticket = carve(static_cast<unsigned*>(nullptr), 1);
    w.partials = carve(static_cast<PpoTotals*>(nullptr), tiles);
    w.sequence_sums = carve(static_cast<SequenceSum*>(nullptr), per_seq);
    w.constants = carve(static_cast<SequenceConstants*>(nullptr), per_seq);
    TIRL_CUDA_TRY(kOp, cudaMemsetAsync(w.offsets, 0xff, sizeof(OffsetsReport), stream));
    // Total, summary and ticket are adjacent: one memset zeroes them (no token, no total).
    TIRL_CUDA_TRY(kOp, cudaMemsetAsync(w.total, 0, reinterpret_cast<char*>(w.partials) -
                                                       reinterpret_cast<char*>(w.total), stream));

    MainArgs a{logp, old_logp, advantages, mask, ref_logp, weights, grad, num_tokens, seq_offsets,
               seqs, per_sequence, false, o.dp_size, 0.0f, ppo_constants(o)};
    if (per_sequence) {
      if (block_per_sequence(num_tokens, seqs)) {
        sequence_pass_kernel<kThreads><<<blocks_for(seqs, 1), kThreads, 0, stream>>>(
            logp, old_logp, mask, num_tokens, seq_offsets, seqs, sequence_ratio, w);
      } else {
        sequence_pass_kernel<kWarp><<<blocks_for(seqs, kThreads / kWarp), kThreads, 0, stream>>>(
            logp, old_logp, mask, num_tokens, seq_offsets, seqs, sequence_ratio, w);
      }
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
      if (seqs > 0) {
        constants_kernel<<<blocks_for(seqs, kThreads), kThreads, 0, stream>>>(seqs, o, sequence_ratio, w);
        TIRL_CUDA_TRY(kOp, cudaGetLastError());
      }
    } else if (o.aggregation == TIRL_AGG_TOKEN_SUM) {
      a.scale = static_cast<float>(o.dp_size);
    } else if (o.token_normalizer > 0) {
      a.scale = static_cast<float>(aggregation_factor(o.dp_size, o.token_normalizer));
    } else {
      a.count_normaliser = true;
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(blocks_for(num_tokens, kThreads * 16), 4096));
      count_masked_kernel<<<blocks, kThreads, 0, stream>>>(mask, num_tokens, w.summary);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
    }
    // With per-sequence constants but no sequence, only the offsets check (which fails
    // for any token) has anything to do.
    if (tiles > 0 && !(per_sequence && seqs == 0)) {
      if (tiles > INT_MAX) return fail(TIRL_ERROR_UNSUPPORTED, std::string(kOp) + ": too many tokens for one call on CUDA");
      pick_kernel(kl, o.kl_estimator, weights != nullptr, sequence_ratio)
          <<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(a, w);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
    } else if (seq_offsets != nullptr && !per_sequence) {
      // No tokens: the offsets still have to be checked.
      offsets_kernel<<<blocks_for(seqs, kThreads), kThreads, 0, stream>>>(seq_offsets, seqs, w.offsets);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
    }

    Report host;
    TIRL_CUDA_TRY(kOp, cudaMemcpyAsync(&host, w.report, sizeof host, cudaMemcpyDeviceToHost, stream));
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));
    if (seq_offsets != nullptr) {
      if (tirl_status s = offsets_error(kOp, host.offsets, seq_offsets, num_tokens)) return s;
    }

    const PpoTotals& total = host.total;
    fill_ppo_result(total.pg_loss, total.kl_loss, kl, o.kl_coef, static_cast<double>(total.clipped),
                    static_cast<double>(total.dual_clipped), total.neg_log_ratio,
                    static_cast<int64_t>(total.non_finite), static_cast<int64_t>(total.masked), result);
    return ok();
  });
}

}  // namespace

// ppoLoss's table entry. The front door has turned 'gspo' and bypass_mode's 'ppo_clip' into
// 'vanilla' (with the sequence ratio for GSPO); the other policy losses have no CUDA kernel
// yet.
tirl_status policy_loss(const float* logp, const float* old_logp, const float* advantages,
                        const uint8_t* mask, int64_t num_tokens, const int32_t* seq_offsets,
                        int64_t num_seqs, const float* ref_logp, const float* weights,
                        const tirl_policy_loss_options* options, float* grad,
                        tirl_policy_loss_result* result, tirl_device device) {
  if (options->policy_loss != TIRL_POLICY_VANILLA) {
    return fail(TIRL_ERROR_UNSUPPORTED,
                std::string(kOp) + ": policy_loss " + std::to_string(options->policy_loss) +
                    " has no CUDA kernel yet (vanilla and gspo do): run it on the CPU");
  }
  return clipped_surrogate(logp, old_logp, advantages, mask, num_tokens, seq_offsets, num_seqs,
                           ref_logp, weights, &options->ppo, grad, &result->ppo, device);
}

}  // namespace tirl::cuda
