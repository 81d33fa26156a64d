// rolloutCorrection on the GPU (formulas and the walk of a sequence in
// math/rollout_correction.h, shared with the CPU).
//
// A fixed number of records R = min(num_seqs, 16384), chosen from the sizes only: thread
// r walks the sequences [r B / R, (r + 1) B / R) in order into its own record of partial
// sums (in scratch memory). A second kernel merges the records slot by slot, one block per
// slot, in a fixed order (strided per thread, then a fixed tree), so results are the same
// run after run; they differ from the CPU's by the order of the additions, by nvcc's fused
// multiply-adds and by CUDA's double exp and log against libm's (last bits). The host
// then finishes the statistics with the CPU's code, and a third kernel applies the batch
// normalisation when it is on. seq_offsets are checked on the device in the first launch.
#include <string>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/reduce.cuh"
#include "math/rollout_correction.h"

namespace tirl::cuda {
namespace {

constexpr const char* kOp = "rolloutCorrection";
constexpr int kWalkThreads = 128;
constexpr int kReduceThreads = 256;
constexpr int64_t kMaxRecords = 16384;

__global__ void __launch_bounds__(kWalkThreads)
walk_kernel(const float* __restrict__ logp, const float* __restrict__ rollout_logp,
            const uint8_t* mask, int64_t num_tokens, const int32_t* __restrict__ seq_offsets,
            int64_t num_seqs, int64_t num_records, const RolloutSetup setup, float* weights,
            uint8_t* mask_out, double* __restrict__ records, OffsetsReport* report) {
  check_offsets(seq_offsets, num_seqs, report);
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= num_records) return;
  double* acc = records + r * setup.num_slots;
  rollout_init(acc, setup.num_slots);
  const int64_t first = r * num_seqs / num_records;
  const int64_t last = (r + 1) * num_seqs / num_records;
  for (int64_t s = first; s < last; ++s) {
    const TokenRange range = sequence_tokens(seq_offsets, s, num_tokens);
    rollout_sequence(logp, rollout_logp, mask, range.begin, range.end, setup, weights, mask_out,
                     acc);
  }
}

struct MergeSlot {
  int kind;
  __device__ double operator()(double a, double b) const { return rollout_merge_one(kind, a, b); }
};

struct Moments {
  double count, mean, m2;
};

struct MergeMoments {
  __device__ Moments operator()(Moments a, const Moments& b) const {
    rollout_moments_add(&a.count, b.count, b.mean, b.m2);
    return a;
  }
};

// Block j merges slot j of every record (a moments slot with the two after it; the blocks
// of those two do nothing).
__global__ void __launch_bounds__(kReduceThreads)
reduce_kernel(const double* __restrict__ records, int64_t num_records, int num_slots,
              double* __restrict__ totals) {
  const int slot = blockIdx.x;
  const int kind = rollout_slot_kind(slot);
  if (kind == kSlotMomentsPart) return;
  if (kind == kSlotMoments) {
    Moments value{0.0, 0.0, 0.0};
    for (int64_t r = threadIdx.x; r < num_records; r += blockDim.x) {
      const double* m = records + r * num_slots + slot;
      rollout_moments_add(&value.count, m[0], m[1], m[2]);
    }
    value = block_reduce(value, Moments{0.0, 0.0, 0.0}, MergeMoments{});
    if (threadIdx.x == 0) {
      totals[slot] = value.count;
      totals[slot + 1] = value.mean;
      totals[slot + 2] = value.m2;
    }
    return;
  }
  const MergeSlot merge{kind};
  const double identity = rollout_identity(kind);
  double value = identity;
  for (int64_t r = threadIdx.x; r < num_records; r += blockDim.x) {
    value = merge(value, records[r * num_slots + slot]);
  }
  value = block_reduce(value, identity, merge);
  if (threadIdx.x == 0) totals[slot] = value;
}

__global__ void normalize_kernel(float* weights, int64_t num_tokens, double mean) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < num_tokens;
       t += stride) {
    weights[t] = rollout_normalized_weight(weights[t], mean);
  }
}

}  // namespace

tirl_status rollout_correction(const float* logp, const float* rollout_logp, const uint8_t* mask,
                               int64_t num_tokens, const int32_t* seq_offsets, int64_t num_seqs,
                               const tirl_rollout_correction_options* options, float* weights,
                               uint8_t* mask_out, tirl_rollout_correction_result* result,
                               tirl_device device) {
  return guarded([&]() -> tirl_status {
    const RolloutSetup setup = rollout_setup(*options);
    const bool normalize = options->rollout_is_batch_normalize != 0;
    const int slots = setup.num_slots;
    const int64_t num_records = num_seqs < kMaxRecords ? num_seqs : kMaxRecords;
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    cudaStream_t stream = stream_of(device);
    Scratch scratch(stream);
    const size_t record_bytes = sizeof(double) * static_cast<size_t>(slots) *
                                static_cast<size_t>(num_records);
    const size_t totals_offset = (sizeof(OffsetsReport) + 15) / 16 * 16;
    const size_t records_offset = totals_offset + sizeof(double) * slots;
    TIRL_CUDA_TRY(kOp, scratch.allocate(records_offset + record_bytes));
    unsigned char* base = scratch.as<unsigned char>();
    OffsetsReport* report = reinterpret_cast<OffsetsReport*>(base);
    double* totals = reinterpret_cast<double*>(base + totals_offset);
    double* records = reinterpret_cast<double*>(base + records_offset);
    TIRL_CUDA_TRY(kOp, cudaMemsetAsync(report, 0xff, sizeof(OffsetsReport), stream));
    walk_kernel<<<blocks_for(num_records, kWalkThreads), kWalkThreads, 0, stream>>>(
        logp, rollout_logp, mask, num_tokens, seq_offsets, num_seqs, num_records, setup, weights,
        mask_out, records, report);
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    reduce_kernel<<<slots, kReduceThreads, 0, stream>>>(records, num_records, slots, totals);
    TIRL_CUDA_TRY(kOp, cudaGetLastError());
    OffsetsReport host_report;
    double host_totals[kRolloutBaseSlots + kRsSlots * kRolloutOptions];
    TIRL_CUDA_TRY(kOp, cudaMemcpyAsync(&host_report, report, sizeof host_report,
                                       cudaMemcpyDeviceToHost, stream));
    TIRL_CUDA_TRY(kOp, cudaMemcpyAsync(host_totals, totals, sizeof(double) * slots,
                                       cudaMemcpyDeviceToHost, stream));
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));
    if (tirl_status s = offsets_error(kOp, host_report, seq_offsets, num_tokens)) return s;
    const double norm_mean = rollout_batch_norm_mean(setup, normalize, host_totals);
    if (norm_mean > 0 && num_tokens > 0) {
      normalize_kernel<<<blocks_for(num_tokens, 256), 256, 0, stream>>>(weights, num_tokens,
                                                                         norm_mean);
      TIRL_CUDA_TRY(kOp, cudaGetLastError());
      TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream));
    }
    rollout_finalize(setup, normalize, host_totals, norm_mean, result);
    return ok();
  });
}

}  // namespace tirl::cuda
