// GPU checks of rolloutCorrection: the CUDA kernel against the CPU kernel, and its timings.
#include "harness.h"

namespace tirl::gpu_check {

void check_rollout_correction(Random& rng) {
  const char* op = "rolloutCorrection";
  for (auto [b, lo, hi] : {std::tuple<int64_t, int64_t, int64_t>{1, 0, 0}, {7, 0, 40},
                           {1000, 0, 300}, {3, 100000, 300000}, {20000, 0, 3}}) {
    for (int level = TIRL_ROLLOUT_IS_NONE; level <= TIRL_ROLLOUT_IS_SEQUENCE; ++level) {
      auto offsets = rng.offsets(b, lo, hi);
      const int64_t n = offsets[b];
      auto logp = rng.normals(n, -2, 1);
      auto rollout = logp;
      for (auto& x : rollout) x += 0.3f * static_cast<float>(rng.normal());
      auto mask = rng.mask(n, 0.8);
      tirl_rollout_correction_options o = tirl_rollout_correction_options_default();
      o.rollout_is = static_cast<tirl_rollout_is_level>(level);
      o.rollout_is_batch_normalize = level == TIRL_ROLLOUT_IS_TOKEN;
      if (level == TIRL_ROLLOUT_IS_SEQUENCE) o.rollout_is_threshold_lower = 0.2;
      o.rollout_rs = 1u << TIRL_ROLLOUT_RS_TOKEN_K1 | 1u << TIRL_ROLLOUT_RS_SEQ_MEAN_K3 |
                     1u << TIRL_ROLLOUT_RS_SEQ_MAX_K2;
      o.rollout_rs_threshold[TIRL_ROLLOUT_RS_TOKEN_K1] = 2;
      o.rollout_rs_threshold[TIRL_ROLLOUT_RS_SEQ_MEAN_K3] = 0.05;
      o.rollout_rs_threshold[TIRL_ROLLOUT_RS_SEQ_MAX_K2] = 0.5;
      std::vector<float> weights(n);
      std::vector<uint8_t> kept(n);
      tirl_rollout_correction_result cpu{}, gpu{};
      expect_ok(tirl_rollout_correction(logp.data(), rollout.data(), mask.data(), n, offsets.data(), b,
                                        &o, weights.data(), kept.data(), &cpu, kCpu),
                "cpu rollout_correction");
      Device<float> d_logp(logp), d_rollout(rollout), d_weights(n);
      Device<uint8_t> d_mask(mask), d_kept(n);
      Device<int32_t> d_offsets(offsets);
      Comparison c{op, "B=" + std::to_string(b) + " N=" + std::to_string(n) + " is=" + std::to_string(level),
                   1e-5, 1e-6};
      tirl_status s = tirl_rollout_correction(d_logp.get(), d_rollout.get(), d_mask.get(), n,
                                              d_offsets.get(), b, &o, d_weights.get(), d_kept.get(),
                                              &gpu, kGpu);
      if (!supported(s, op)) return;
      c.status(s, "forward");
      auto first = d_weights.download();
      c.arrays("weights", first, weights);
      c.exact("mask", d_kept.download(), kept);
      c.scalar("kl", gpu.kl, cpu.kl);
      c.scalar("chi2_token", gpu.chi2_token, cpu.chi2_token);
      c.scalar("rollout_is_eff_sample_size", gpu.rollout_is_eff_sample_size, cpu.rollout_is_eff_sample_size);
      c.scalar("rollout_is_seq_std", gpu.rollout_is_seq_std, cpu.rollout_is_seq_std);
      c.scalar("rollout_rs_masked_fraction", gpu.rollout_rs_masked_fraction, cpu.rollout_rs_masked_fraction);
      c.scalar("seq_mean_k3 std", gpu.rollout_rs[TIRL_ROLLOUT_RS_SEQ_MEAN_K3].std,
               cpu.rollout_rs[TIRL_ROLLOUT_RS_SEQ_MEAN_K3].std);
      c.status(tirl_rollout_correction(d_logp.get(), d_rollout.get(), d_mask.get(), n, d_offsets.get(),
                                       b, &o, d_weights.get(), d_kept.get(), &gpu, kGpu),
               "forward again");
      c.deterministic("weights", d_weights.download(), first);
    }
  }
}

void bench_rollout_correction(Random& rng) {
  const int64_t b = kPpoTokens / kSequenceLength;
  auto offsets = uniform_offsets(b, kSequenceLength);
  const int64_t n = offsets[b];
  auto logp = rng.normals(n, -2, 1);
  auto rollout = rng.normals(n, -2, 1);
  auto mask = rng.mask(n, 0.8);
  Device<float> d_logp(logp), d_rollout(rollout), d_weights(n);
  Device<uint8_t> d_mask(mask), d_kept(n);
  Device<int32_t> d_offsets(offsets);
  tirl_rollout_correction_options o = tirl_rollout_correction_options_default();
  o.rollout_is = TIRL_ROLLOUT_IS_TOKEN;
  o.rollout_rs = 1u << TIRL_ROLLOUT_RS_SEQ_MEAN_K3;
  o.rollout_rs_threshold[TIRL_ROLLOUT_RS_SEQ_MEAN_K3] = 0.01;
  tirl_rollout_correction_result r{};
  const auto run = [&] {
    return tirl_rollout_correction(d_logp.get(), d_rollout.get(), d_mask.get(), n, d_offsets.get(), b,
                                   &o, d_weights.get(), d_kept.get(), &r, kGpu);
  };
  if (!supported(run(), "rolloutCorrection")) return;
  bench("rolloutCorrection", "N=1048576 token seq_mean_k3", 14.0 * n, [&] { run(); });
}

}  // namespace tirl::gpu_check
