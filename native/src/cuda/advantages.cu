// advantages on the GPU: the passes of math/advantages.h, each call run by one thread (a
// sequence, a group, a chunk of tokens or of sequences), in the CPU backend's order. Groups come from a
// stable radix sort of (id, index) pairs: groups by id, members in input order, as the CPU
// orders them, so the two backends give the same bits (compiled with --fmad=false: nvcc
// otherwise fuses the double multiply-adds of GAE's recursion and of the group moments, and
// a few float advantages in a million come out one ulp from the CPU's; the exception is in
// math/advantages.h). The offsets are checked on the device first; the call then
// synchronises once more at the end (its scratch is freed in stream order, and waiting
// keeps its errors in this call).
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <string>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/reduce.cuh"
#include "math/advantages.h"

namespace tirl::cuda {
namespace {

using advantages::Problem;
using advantages::SequenceSummary;

constexpr const char* kOp = "advantages";
constexpr int kThreads = 256;

// Strides over [0, n) with the whole grid.
#define TIRL_GRID_LOOP(i, n)                                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);      \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void iota_kernel(int32_t* values, int64_t n) {
  TIRL_GRID_LOOP(i, n) values[i] = static_cast<int32_t>(i);
}

__global__ void check_kernel(const int32_t* seq_offsets, int64_t num_seqs, OffsetsReport* report) {
  check_offsets(seq_offsets, num_seqs, report);
}

__global__ void summarize_kernel(Problem p, const int32_t* __restrict__ seq_offsets,
                                 SequenceSummary* __restrict__ summary,
                                 unsigned long long* __restrict__ nonzero) {
  TIRL_GRID_LOOP(s, p.num_seqs) {
    const TokenRange r = sequence_tokens(seq_offsets, s, p.num_tokens);
    summary[s] = advantages::summarize(p, s, r.begin, r.end);
    if (summary[s].score != 0.0) atomicAdd(nonzero, 1ull);  // gpg's count: exact in any order
  }
}

// The group starting at position i of the ordering, if one does: its member count.
// ids: sorted ids (null: contiguous groups of group_size).
__device__ int64_t group_at(const int32_t* ids, int64_t num_seqs, int64_t group_size, int64_t i) {
  if (ids == nullptr) return i % group_size == 0 ? group_size : 0;
  if (i > 0 && ids[i] == ids[i - 1]) return 0;
  int64_t end = i + 1;
  while (end < num_seqs && ids[end] == ids[i]) ++end;
  return end - i;
}

__global__ void outcome_kernel(Problem p, const SequenceSummary* __restrict__ summary,
                               const int32_t* __restrict__ ids, const int32_t* __restrict__ order,
                               int64_t group_size, const unsigned long long* __restrict__ nonzero,
                               double* __restrict__ seq_adv) {
  const double alpha = advantages::gpg_alpha(p.num_seqs, static_cast<int64_t>(*nonzero));
  TIRL_GRID_LOOP(i, p.num_seqs) {
    const int64_t count = group_at(ids, p.num_seqs, group_size, i);
    if (count == 0) continue;
    auto member = [=](int64_t j) { return order != nullptr ? static_cast<int64_t>(order[i + j]) : i + j; };
    advantages::outcome_group(p, summary, member, count, alpha, seq_adv);
  }
}

__global__ void token_kernel(Problem p, const SequenceSummary* __restrict__ summary,
                             const double* __restrict__ seq_adv) {
  TIRL_GRID_LOOP(s, p.num_seqs) advantages::token_pass(p, summary[s], s, seq_adv);
}

__global__ void token_baseline_kernel(Problem p, const SequenceSummary* __restrict__ summary,
                                      const int32_t* __restrict__ ids,
                                      const int32_t* __restrict__ order, int64_t group_size,
                                      advantages::ColumnSums* column_sums) {
  TIRL_GRID_LOOP(i, p.num_seqs) {
    const int64_t count = group_at(ids, p.num_seqs, group_size, i);
    if (count == 0) continue;
    auto member = [=](int64_t j) { return order != nullptr ? static_cast<int64_t>(order[i + j]) : i + j; };
    advantages::token_baseline_group(p, summary, member, count,
                                     advantages::direct_scratch(column_sums),
                                     advantages::direct_path_variances(p));
  }
}

// Whitening: each chunk's moments (advantages::Moments: of token chunks, or of chunks of
// sequences where the values are one per sequence), combined in chunk order by one thread,
// as on the CPU. stats[0] = mean, stats[1] = inverse std.
__global__ void moments_kernel(Problem p, const SequenceSummary* __restrict__ summary,
                               const double* __restrict__ seq_adv, bool from_sequences,
                               int64_t chunks, advantages::Moments* __restrict__ moments) {
  TIRL_GRID_LOOP(c, chunks) {
    if (from_sequences) {
      constexpr int64_t kChunk = advantages::kSeqsPerWhitenChunk;
      const int64_t last = (c + 1) * kChunk < p.num_seqs ? (c + 1) * kChunk : p.num_seqs;
      moments[c] = advantages::sequence_values_moments(p, summary, seq_adv, c * kChunk, last);
    } else {
      constexpr int64_t kChunk = advantages::kTokensPerChunk;
      const int64_t last = (c + 1) * kChunk < p.num_tokens ? (c + 1) * kChunk : p.num_tokens;
      moments[c] = advantages::masked_moments(p, c * kChunk, last);
    }
  }
}

__global__ void combine_kernel(int64_t chunks, const advantages::Moments* moments, double* stats) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const advantages::Whitening w = advantages::whitening_of(moments, chunks);
  stats[0] = w.mean;
  stats[1] = w.inverse_std;
}

__global__ void whiten_kernel(Problem p, const double* __restrict__ stats) {
  TIRL_GRID_LOOP(t, p.num_tokens) advantages::whiten(p, t, t + 1, stats[0], stats[1]);
}

// Byte offsets of the call's scratch arrays, each 256-byte aligned.
struct Layout {
  size_t bytes = 0;
  size_t add(size_t size) {
    const size_t at = bytes;
    bytes += (size + 255) / 256 * 256;
    return at;
  }
};

}  // namespace

tirl_status advantages(const tirl_advantages_inputs* inputs, int64_t num_tokens, int64_t num_seqs,
                       const tirl_advantages_options* options, float* advantages_out,
                       float* returns, tirl_device device) {
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    cudaStream_t stream = stream_of(device);
    const tirl_advantages_inputs& in = *inputs;
    const tirl_advantages_options& o = *options;
    const tirl_advantage_estimator e = o.estimator;
    const Problem p = advantages::make_problem(in, num_tokens, num_seqs, o, advantages_out, returns);
    const bool grouped = advantages::is_grouped(e) && num_seqs > 0;
    const bool sorted = grouped && in.group_ids != nullptr;
    const int n = static_cast<int>(num_seqs);  // the core caps num_seqs below 2^31 - 1
    size_t sort_bytes = 0;
    if (sorted) {
      TIRL_CUDA_TRY(kOp, cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, in.group_ids,
                                                         static_cast<int32_t*>(nullptr),
                                                         static_cast<const int32_t*>(nullptr),
                                                         static_cast<int32_t*>(nullptr), n, 0, 32,
                                                         stream));
    }
    const int64_t chunks = (num_tokens + advantages::kTokensPerChunk - 1) / advantages::kTokensPerChunk;
    // The whitening's partial sums: per chunk of tokens, or of sequences.
    const bool from_sequences = advantages::whitens_sequence_values(p);
    const int64_t sum_chunks =
        from_sequences ? (num_seqs + advantages::kSeqsPerWhitenChunk - 1) / advantages::kSeqsPerWhitenChunk
                       : chunks;
    const bool token_baseline = advantages::is_token_baseline(e);
    Layout layout;
    const size_t at_report = layout.add(sizeof(OffsetsReport));
    const size_t at_nonzero = layout.add(sizeof(unsigned long long));
    const size_t at_summary = layout.add(sizeof(SequenceSummary) * num_seqs);
    const size_t at_seq_adv = layout.add(sizeof(double) * num_seqs);
    const size_t at_index = layout.add(sorted ? sizeof(int32_t) * num_seqs : 0);
    const size_t at_ids = layout.add(sorted ? sizeof(int32_t) * num_seqs : 0);
    const size_t at_order = layout.add(sorted ? sizeof(int32_t) * num_seqs : 0);
    const size_t at_sort = layout.add(sort_bytes);
    const size_t at_column_sums =
        layout.add(token_baseline ? sizeof(advantages::ColumnSums) * num_tokens : 0);
    const size_t at_moments = layout.add(sizeof(advantages::Moments) * sum_chunks);
    const size_t at_stats = layout.add(2 * sizeof(double));
    Scratch scratch(stream);
    TIRL_CUDA_TRY(kOp, scratch.allocate(layout.bytes));
    char* base = scratch.as<char>();
    auto* report = reinterpret_cast<OffsetsReport*>(base + at_report);
    auto* nonzero = reinterpret_cast<unsigned long long*>(base + at_nonzero);
    auto* summary = reinterpret_cast<SequenceSummary*>(base + at_summary);
    auto* seq_adv = reinterpret_cast<double*>(base + at_seq_adv);
    auto* index = reinterpret_cast<int32_t*>(base + at_index);
    auto* sorted_ids = reinterpret_cast<int32_t*>(base + at_ids);
    auto* order = reinterpret_cast<int32_t*>(base + at_order);
    auto* column_sums = reinterpret_cast<advantages::ColumnSums*>(base + at_column_sums);
    auto* moments = reinterpret_cast<advantages::Moments*>(base + at_moments);
    auto* stats = reinterpret_cast<double*>(base + at_stats);

    // The offsets first: nothing indexes with them before they are known good.
    TIRL_CUDA_TRY(kOp, cudaMemsetAsync(report, 0xff, sizeof(OffsetsReport), stream));
    check_kernel<<<blocks_for(num_seqs, kThreads), kThreads, 0, stream>>>(in.seq_offsets, num_seqs, report);
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    OffsetsReport host;
    TIRL_CUDA_TRY(kOp, cudaMemcpyAsync(&host, report, sizeof host, cudaMemcpyDeviceToHost, stream));
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));
    if (tirl_status s = offsets_error(kOp, host, in.seq_offsets, num_tokens)) return s;

    const unsigned seq_blocks = blocks_for(num_seqs, kThreads);
    TIRL_CUDA_TRY(kOp, cudaMemsetAsync(nonzero, 0, sizeof(unsigned long long), stream));
    summarize_kernel<<<seq_blocks, kThreads, 0, stream>>>(p, in.seq_offsets, summary, nonzero);
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    if (sorted) {
      iota_kernel<<<seq_blocks, kThreads, 0, stream>>>(index, num_seqs);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
      TIRL_CUDA_TRY(kOp, cub::DeviceRadixSort::SortPairs(base + at_sort, sort_bytes, in.group_ids,
                                                         sorted_ids, index, order, n, 0, 32, stream));
    }
    const int32_t* ids = sorted ? sorted_ids : nullptr;
    const int32_t* members = sorted ? order : nullptr;
    if (grouped && advantages::is_outcome(e)) {
      outcome_kernel<<<seq_blocks, kThreads, 0, stream>>>(p, summary, ids, members, o.group_size,
                                                           nonzero, seq_adv);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
    }
    token_kernel<<<seq_blocks, kThreads, 0, stream>>>(p, summary, seq_adv);
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    if (grouped && token_baseline) {
      token_baseline_kernel<<<seq_blocks, kThreads, 0, stream>>>(p, summary, ids, members,
                                                                 o.group_size, column_sums);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
    }
    if (advantages::is_whitened(e) && num_tokens > 0) {
      moments_kernel<<<blocks_for(sum_chunks, kThreads), kThreads, 0, stream>>>(
          p, summary, seq_adv, from_sequences, sum_chunks, moments);
      combine_kernel<<<1, 1, 0, stream>>>(sum_chunks, moments, stats);
      whiten_kernel<<<blocks_for(num_tokens, kThreads), kThreads, 0, stream>>>(p, stats);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
    }
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));
    return ok();
  });
}

}  // namespace tirl::cuda
