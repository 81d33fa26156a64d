// GPU checks of advantages: every estimator's CUDA kernel against the CPU kernel, and timings.
#include "harness.h"

namespace tirl::gpu_check {

// Every estimator on a ragged batch with masked-out prompts and feedback, fully masked
// sequences, scattered ids with groups of one; the GPU must give the CPU's bits (both run
// math/advantages.h in the same order, unfused), checked bit for bit on x86-64 hosts and
// with the usual tolerance everywhere.
void check_advantages(Random& rng) {
  const char* op = "advantages";
  for (int64_t b : {1, 37, 2048}) {
    const std::vector<int32_t> offsets = rng.offsets(b, 0, 300);
    const int64_t n = offsets[b];
    std::vector<uint8_t> mask = rng.mask(n, 0.8);
    std::vector<int32_t> ids(b);
    for (auto& g : ids) g = static_cast<int32_t>(rng.integer(-3, b / 4 + 2)) * 7919;
    std::vector<float> token_rewards = rng.normals(n, 0, 1);
    for (auto& r : token_rewards) r = r > 1.5f ? r : 0.0f;
    const std::vector<float> rewards = rng.normals(2 * b, 0.5, 1), values = rng.normals(n, 0, 1),
                             baselines = rng.normals(b, 0, 1), weights = rng.normals(2, 1, 0.5);
    std::vector<float> old_logp = rng.normals(n, -1.5, 0.7), sum_pi_squared(n), is_weights(n);
    for (int64_t t = 0; t < n; ++t) {
      old_logp[t] = std::min(old_logp[t], 0.0f);
      sum_pi_squared[t] = std::exp(2.0f * old_logp[t]) + 0.1f;
      is_weights[t] = static_cast<float>(rng.uniform(0.5, 1.5));
    }
    Device<float> d_rewards(rewards), d_token_rewards(token_rewards), d_values(values),
        d_baselines(baselines), d_weights(weights), d_old_logp(old_logp), d_sum_pi(sum_pi_squared),
        d_is_weights(is_weights), d_out(n), d_returns(n);
    Device<uint8_t> d_mask(mask);
    Device<int32_t> d_offsets(offsets), d_ids(ids);
    for (int e = TIRL_ADV_GRPO; e <= TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE; ++e) {
      tirl_advantages_options o = tirl_advantages_options_default();
      o.estimator = static_cast<tirl_advantage_estimator>(e);
      const bool grouped = e != TIRL_ADV_REINFORCE_PLUS_PLUS && e != TIRL_ADV_REMAX && e != TIRL_ADV_GAE;
      const bool otb = e == TIRL_ADV_OPTIMAL_TOKEN_BASELINE || e == TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE;
      if (e == TIRL_ADV_GDPO) o.num_reward_keys = 2;
      if (e == TIRL_ADV_GAE || e == TIRL_ADV_REINFORCE_PLUS_PLUS) o.gamma = 0.95;
      if (e == TIRL_ADV_GAE) o.lam = 0.9;
      // Pointers on one side or the other.
      auto inputs = [&](bool gpu) {
        auto pick = [&](const std::vector<float>& host, const Device<float>& device, bool used) {
          return used ? (gpu ? device.get() : host.data()) : nullptr;
        };
        tirl_advantages_inputs in{};
        in.rewards = pick(rewards, d_rewards, e == TIRL_ADV_GDPO);
        in.token_rewards = pick(token_rewards, d_token_rewards, e != TIRL_ADV_GDPO);
        in.mask = gpu ? d_mask.get() : mask.data();
        in.seq_offsets = gpu ? d_offsets.get() : offsets.data();
        in.group_ids = grouped ? (gpu ? d_ids.get() : ids.data()) : nullptr;
        in.values = pick(values, d_values, e == TIRL_ADV_GAE);
        in.reward_baselines = pick(baselines, d_baselines, e == TIRL_ADV_REMAX);
        in.old_logp = pick(old_logp, d_old_logp, otb);
        in.sum_pi_squared = pick(sum_pi_squared, d_sum_pi, otb);
        in.rollout_is_weights = pick(is_weights, d_is_weights, otb);
        in.reward_weights = pick(weights, d_weights, e == TIRL_ADV_GDPO);
        return in;
      };
      const tirl_advantages_inputs cpu_in = inputs(false), gpu_in = inputs(true);
      std::vector<float> out(n), returns(n);
      expect_ok(tirl_advantages(&cpu_in, n, b, &o, out.data(), returns.data(), kCpu), "cpu advantages");
      Comparison c{op, "estimator " + std::to_string(e) + " B=" + std::to_string(b), 1e-5, 1e-6};
      tirl_status s = tirl_advantages(&gpu_in, n, b, &o, d_out.get(), d_returns.get(), kGpu);
      if (!supported(s, op)) return;
      c.status(s, "gpu");
      auto first = d_out.download();
      const auto gpu_returns = d_returns.download();
      c.arrays("advantages", first, out);
      c.arrays("returns", gpu_returns, returns);
#if defined(__x86_64__)
      // Both backends unfused (x86-64's baseline has no FMA; cuda/advantages.cu is built with
      // --fmad=false): the CPU's bits, but for the optimal-token baselines' double exp
      // (math/advantages.h). NaNs match as NaNs (the devices write different payloads).
      auto same_bits = [&](const char* what, const std::vector<float>& gpu, const std::vector<float>& cpu) {
        for (size_t i = 0; i < cpu.size(); ++i) {
          if (std::memcmp(&gpu[i], &cpu[i], sizeof(float)) != 0 && !(std::isnan(gpu[i]) && std::isnan(cpu[i]))) {
            char b[160];
            std::snprintf(b, sizeof b, "%s[%zu]: gpu %a cpu %a (not the CPU's bits)", what, i, gpu[i], cpu[i]);
            c.fail(b);
            return;
          }
        }
      };
      if (!otb) {
        same_bits("advantages", first, out);
        same_bits("returns", gpu_returns, returns);
      }
#endif
      c.status(tirl_advantages(&gpu_in, n, b, &o, d_out.get(), d_returns.get(), kGpu), "again");
      c.deterministic("advantages", d_out.download(), first);
    }
  }
}

// The GRPO shape of bench_group_advantages' sizes, as sequences of 16 tokens, and GAE.
void bench_advantages(Random& rng) {
  const int64_t b = kGroupRewards, n = 16 * b;
  std::vector<int32_t> offsets(b + 1);
  for (int64_t i = 0; i <= b; ++i) offsets[i] = static_cast<int32_t>(16 * i);
  Device<float> d_rewards(rng.normals(b, 0.5, 1)), d_values(rng.normals(n, 0, 1)), d_out(n);
  Device<uint8_t> d_mask(std::vector<uint8_t>(n, 1));
  Device<int32_t> d_offsets(offsets);
  tirl_advantages_inputs in{};
  in.rewards = d_rewards.get();
  in.mask = d_mask.get();
  in.seq_offsets = d_offsets.get();
  tirl_advantages_options o = tirl_advantages_options_default();
  o.group_size = kGroupSize;
  if (!supported(tirl_advantages(&in, n, b, &o, d_out.get(), nullptr, kGpu), "advantages")) return;
  bench("advantages", "grpo B=65536 T=16 groupSize=16", 4.0 * b + 5.0 * n, [&] {
    tirl_advantages(&in, n, b, &o, d_out.get(), nullptr, kGpu);
  });
  o = tirl_advantages_options_default();
  o.estimator = TIRL_ADV_GAE;
  in.values = d_values.get();
  bench("advantages", "gae B=65536 T=16", 4.0 * b + 9.0 * n, [&] {
    tirl_advantages(&in, n, b, &o, d_out.get(), nullptr, kGpu);
  });
}

}  // namespace tirl::gpu_check
