// rolloutCorrection on the CPU (formulas in math/rollout_correction.h).
//
// Work is handed out by sequences, grouped by where they start: chunk c owns the
// sequences starting in tokens [c * kTokensPerChunk, (c + 1) * kTokensPerChunk) (the last
// chunk also those starting at num_tokens, which are empty) and walks each of them whole,
// in order, into its own partial sums. The partial sums are merged in chunk order. Chunk
// boundaries depend on the sizes only, so results are bitwise identical for any thread
// count. A sequence longer than a chunk is walked by one thread: the walk is a few
// nanoseconds per token, and splitting a sequence would need a second merge per value.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/cuda.h"
#include "common/parallel.h"
#include "common/validate.h"
#include "math/rollout_correction.h"

namespace tirl {
namespace {

constexpr const char* kOp = "rolloutCorrection";
constexpr int64_t kTokensPerChunk = 16384;

const char* const kOptionNames[kRolloutOptions] = {
    "token_k1",    "token_k2",    "token_k3",    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3"};

tirl_status check_option(bool valid, const std::string& js_name, const std::string& c_name,
                         const char* expected, double value) {
  if (valid) return TIRL_OK;
  return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(kOp) + ": Expected " + expected + " for " +
                                               js_name + " (" + c_name + ") but received " +
                                               format_double(value));
}

// Written as `!(valid)` tests so that NaN fails every one of them.
tirl_status check_options(const tirl_rollout_correction_options& o) {
  tirl_status s;
  if ((s = check_option(o.rollout_is >= TIRL_ROLLOUT_IS_NONE && o.rollout_is <= TIRL_ROLLOUT_IS_SEQUENCE,
                        "rolloutIs", "rollout_is", "a tirl_rollout_is_level", o.rollout_is)) ||
      (s = check_option(o.rollout_is_threshold > 0 && o.rollout_is_threshold < 1e300,
                        "rolloutIsThreshold", "rollout_is_threshold", "a finite number > 0",
                        o.rollout_is_threshold)) ||
      (s = check_option(o.rollout_is_threshold_lower == 0 ||
                            (o.rollout_is_threshold_lower > 0 &&
                             o.rollout_is_threshold_lower <= o.rollout_is_threshold),
                        "rolloutIsThresholdLower", "rollout_is_threshold_lower",
                        "a number in (0, rolloutIsThreshold] (or 0 for TIS)",
                        o.rollout_is_threshold_lower)) ||
      (s = check_option(o.rollout_is_batch_normalize == 0 || o.rollout_is_batch_normalize == 1,
                        "rolloutIsBatchNormalize", "rollout_is_batch_normalize", "0 or 1",
                        o.rollout_is_batch_normalize)) ||
      (s = check_option(o.rollout_rs < (1u << kRolloutOptions), "rolloutRs", "rollout_rs",
                        "a set of tirl_rollout_rs_option bits (below 1 << 11)", o.rollout_rs))) {
    return s;
  }
  for (int option = 0; option < kRolloutOptions; ++option) {
    if ((o.rollout_rs & (1u << option)) == 0) continue;
    const std::string js = std::string("rolloutRsThreshold of '") + kOptionNames[option] + "'";
    const std::string js_lower =
        std::string("rolloutRsThresholdLower of '") + kOptionNames[option] + "'";
    const std::string index = std::string("[") + std::to_string(option) + "]";
    const double upper = o.rollout_rs_threshold[option];
    const double lower = o.rollout_rs_threshold_lower[option];
    const bool k1 = rollout_rs_estimator(option) == 1;
    // k1 bounds are ratios whose logs must be finite; k2 / k3 bounds only need to be finite.
    if ((s = check_option(upper > 0 && upper < 1e300 && (!k1 || upper >= 1e-300), js,
                          "rollout_rs_threshold" + index,
                          k1 ? "a number in [1e-300, 1e300)" : "a finite number > 0", upper))) {
      return s;
    }
    if (k1 && lower == 0) {
      // verl: the default lower bound 1 / upper must not exceed upper.
      if ((s = check_option(upper >= 1, js, "rollout_rs_threshold" + index,
                            "a number >= 1 (the lower bound defaults to 1 / upper)", upper))) {
        return s;
      }
    } else if (k1) {
      if ((s = check_option(lower >= 1e-300 && lower <= upper, js_lower,
                            "rollout_rs_threshold_lower" + index,
                            "a number in [1e-300, upper] (or 0 for 1 / upper)", lower))) {
        return s;
      }
    } else if ((s = check_option(lower == 0, js_lower, "rollout_rs_threshold_lower" + index,
                                 "0 (only k1 options take a lower bound)", lower))) {
      return s;
    }
  }
  return TIRL_OK;
}

tirl_status rollout_correction_cpu(const float* logp, const float* rollout_logp,
                                   const uint8_t* mask, int64_t num_tokens,
                                   const int32_t* seq_offsets, int64_t num_seqs,
                                   const tirl_rollout_correction_options& options, float* weights,
                                   uint8_t* mask_out, tirl_rollout_correction_result* result) {
  const RolloutSetup setup = rollout_setup(options);
  const int slots = setup.num_slots;
  const int64_t num_chunks = chunk_count(num_tokens, kTokensPerChunk);
  std::vector<double> partial(static_cast<size_t>(std::max<int64_t>(num_chunks, 1) * slots));
  for (int64_t chunk = 0; chunk < std::max<int64_t>(num_chunks, 1); ++chunk) {
    rollout_init(partial.data() + chunk * slots, slots);
  }
  auto body = [&](int64_t chunk) {
    const int64_t first = chunk * kTokensPerChunk;
    const int64_t last = std::min(num_tokens, first + kTokensPerChunk);
    const bool last_chunk = chunk == num_chunks - 1;
    double* acc = partial.data() + chunk * slots;
    int64_t s = std::lower_bound(seq_offsets, seq_offsets + num_seqs, first) - seq_offsets;
    for (; s < num_seqs && (seq_offsets[s] < last || (last_chunk && seq_offsets[s] == last)); ++s) {
      rollout_sequence(logp, rollout_logp, mask, seq_offsets[s], seq_offsets[s + 1], setup,
                       weights, mask_out, acc);
    }
  };
  parallel_for(num_chunks, body);
  for (int64_t chunk = 1; chunk < num_chunks; ++chunk) {
    rollout_merge(partial.data(), partial.data() + chunk * slots, slots);
  }
  const bool normalize = options.rollout_is_batch_normalize != 0;
  const double norm_mean = rollout_batch_norm_mean(setup, normalize, partial.data());
  if (norm_mean > 0) {
    auto divide = [&](int64_t chunk) {
      const int64_t first = chunk * kTokensPerChunk;
      const int64_t last = std::min(num_tokens, first + kTokensPerChunk);
      for (int64_t t = first; t < last; ++t) weights[t] = rollout_normalized_weight(weights[t], norm_mean);
    };
    parallel_for(num_chunks, divide);
  }
  rollout_finalize(setup, normalize, partial.data(), norm_mean, result);
  return ok();
}

}  // namespace
}  // namespace tirl

extern "C" tirl_rollout_correction_options tirl_rollout_correction_options_default(void) {
  tirl_rollout_correction_options o{};
  o.rollout_is = TIRL_ROLLOUT_IS_SEQUENCE;
  o.rollout_is_threshold = 2.0;
  o.rollout_is_threshold_lower = 0;
  o.rollout_is_batch_normalize = 0;
  o.rollout_rs = 0;
  for (int i = 0; i < TIRL_ROLLOUT_RS_COUNT; ++i) {
    o.rollout_rs_threshold[i] = 0;
    o.rollout_rs_threshold_lower[i] = 0;
  }
  return o;
}

extern "C" tirl_status tirl_rollout_correction(const float* logp, const float* rollout_logp,
                                               const uint8_t* mask, int64_t num_tokens,
                                               const int32_t* seq_offsets, int64_t num_seqs,
                                               const tirl_rollout_correction_options* options,
                                               float* weights, uint8_t* mask_out,
                                               tirl_rollout_correction_result* result,
                                               tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    tirl_status s;
    if ((s = check_count(num_tokens, kOp, "num_tokens")) ||
        (s = check_count(num_seqs, kOp, "num_seqs")) ||
        (s = check_pointer(logp, num_tokens, kOp, "logp")) ||
        (s = check_pointer(rollout_logp, num_tokens, kOp, "rollout_logp")) ||
        (s = check_pointer(mask, num_tokens, kOp, "mask")) ||
        (s = check_pointer(seq_offsets, 1, kOp, "seq_offsets")) ||
        (s = check_pointer(weights, num_tokens, kOp, "weights")) ||
        (s = check_pointer(mask_out, num_tokens, kOp, "mask_out")) ||
        (s = check_pointer(options, 1, kOp, "options")) ||
        (s = check_pointer(result, 1, kOp, "result")) ||
        (s = check_device(device, kOp))) {
      return s;
    }
    // A private copy: the caller may change its options while the kernel runs.
    const tirl_rollout_correction_options o = *options;
    if ((s = check_options(o))) return s;
    if (device.type == TIRL_DEVICE_CUDA) {
      // seq_offsets are in device memory: the CUDA kernel checks them.
      if ((s = check_offset_range(num_tokens, kOp))) return s;
      return run_on_cuda(kOp, [&](const tirl_cuda_backend& cuda) {
        return cuda.rollout_correction(logp, rollout_logp, mask, num_tokens, seq_offsets, num_seqs,
                                       &o, weights, mask_out, result, device);
      });
    }
    std::vector<int32_t> private_offsets;
    use_private_copy(seq_offsets, num_seqs + 1, private_offsets);
    if ((s = check_seq_offsets(seq_offsets, num_seqs, num_tokens, kOp))) return s;
    return rollout_correction_cpu(logp, rollout_logp, mask, num_tokens, seq_offsets, num_seqs,
                                  o, weights, mask_out, result);
  });
}
