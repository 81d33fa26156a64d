// GPU checks of ppoLoss: the CUDA kernel against the CPU kernel, and its timings.
#include "harness.h"

namespace tirl::gpu_check {

struct PpoInputs {
  std::vector<float> logp, old_logp, advantages, ref_logp, weights;
  std::vector<uint8_t> mask;
  std::vector<int32_t> offsets;
  int64_t n, b;
};

PpoInputs ppo_inputs(Random& rng, std::vector<int32_t> offsets) {
  PpoInputs in;
  in.offsets = std::move(offsets);
  in.b = static_cast<int64_t>(in.offsets.size()) - 1;
  in.n = in.offsets[in.b];
  in.logp = rng.normals(in.n, -1.5, 0.7);
  in.old_logp = in.logp;
  for (auto& x : in.old_logp) x += static_cast<float>(0.3 * rng.normal());
  in.advantages = rng.normals(in.n, 0, 1);
  in.ref_logp = in.logp;
  for (auto& x : in.ref_logp) x += static_cast<float>(0.2 * rng.normal());
  in.weights = rng.normals(in.n, 1, 0.2);
  in.mask = rng.mask(in.n, 0.8);
  return in;
}

struct PpoCase {
  const char* name;
  tirl_aggregation aggregation;
  tirl_ratio_level ratio_level;
  double dual_clip, kl_coef;
  tirl_kl_estimator kl;
  bool weights, offsets;
};

struct PolicyCase {
  const char* name;
  tirl_policy_loss_kind loss;
  tirl_aggregation aggregation;
  double kl_coef;
  bool weights;
  tirl_rollout_is_level rollout_is;  // bypass_mode only
  double is_lower;
  bool normalize = false;  // bypass_mode: batch-normalised weights
  bool nan = true;         // a NaN log-prob and an Inf advantage in the batch
  bool masked_out = false; // every token masked out (kl_cov picks none, clip_cov's one has no candidate)
};

// Batches at the kernels' edges besides the random ones: no sequence, one token, exactly
// one tile of the fused pass (2048 tokens) and one token past it.
std::vector<std::vector<int32_t>> edge_layouts() {
  return {{0}, {0, 1}, uniform_offsets(2, 1024), {0, 2049}};
}

// Every policy loss of tirl_policy_loss against the CPU: the token-local ones, bypass_mode
// with each kind of IS weights, geo_mean, and clip_cov / kl_cov, whose pick must be the
// CPU's (the same selectedTokens, and the same gradient on every token).
void check_policy_losses(Random& rng) {
  const char* op = "ppoLoss policy_loss";
  const PolicyCase cases[] = {
      {"dppo_tv", TIRL_POLICY_DPPO_TV, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_NONE, 0},
      {"dppo_kl k3 w", TIRL_POLICY_DPPO_KL, TIRL_AGG_SEQ_MEAN_TOKEN_MEAN, 0.1, true, TIRL_ROLLOUT_IS_NONE, 0},
      {"sapo", TIRL_POLICY_SAPO, TIRL_AGG_TOKEN_SUM, 0, false, TIRL_ROLLOUT_IS_NONE, 0},
      {"gpg seq-mean-token-sum", TIRL_POLICY_GPG, TIRL_AGG_SEQ_MEAN_TOKEN_SUM, 0, false, TIRL_ROLLOUT_IS_NONE, 0},
      {"reinforce w", TIRL_POLICY_REINFORCE, TIRL_AGG_TOKEN_MEAN, 0, true, TIRL_ROLLOUT_IS_NONE, 0},
      {"cispo abs", TIRL_POLICY_CISPO, TIRL_AGG_SEQ_MEAN_TOKEN_SUM_NORM, 0.2, false, TIRL_ROLLOUT_IS_NONE, 0},
      {"dro", TIRL_POLICY_DRO, TIRL_AGG_TOKEN_MEAN, 0, true, TIRL_ROLLOUT_IS_NONE, 0},
      {"bypass tis", TIRL_POLICY_BYPASS_MODE, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_TOKEN, 0},
      {"bypass icepop", TIRL_POLICY_BYPASS_MODE, TIRL_AGG_SEQ_MEAN_TOKEN_MEAN, 0.05, false, TIRL_ROLLOUT_IS_TOKEN, 0.5},
      {"bypass none", TIRL_POLICY_BYPASS_MODE, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_NONE, 0},
      {"bypass seq tis", TIRL_POLICY_BYPASS_MODE, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_SEQUENCE, 0},
      {"bypass seq icepop k3", TIRL_POLICY_BYPASS_MODE, TIRL_AGG_SEQ_MEAN_TOKEN_MEAN, 0.05, false, TIRL_ROLLOUT_IS_SEQUENCE, 0.5},
      {"bypass token normalised", TIRL_POLICY_BYPASS_MODE, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_TOKEN, 0, true},
      {"bypass seq normalised", TIRL_POLICY_BYPASS_MODE, TIRL_AGG_SEQ_MEAN_TOKEN_SUM, 0, false, TIRL_ROLLOUT_IS_SEQUENCE, 0, true},
      {"geo_mean", TIRL_POLICY_GEO_MEAN, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_NONE, 0},
      {"geo_mean k3 w seq-mean-token-mean", TIRL_POLICY_GEO_MEAN, TIRL_AGG_SEQ_MEAN_TOKEN_MEAN, 0.1, true, TIRL_ROLLOUT_IS_NONE, 0},
      {"clip_cov", TIRL_POLICY_CLIP_COV, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_NONE, 0, false, false},
      {"clip_cov k3 w seq-mean-token-sum", TIRL_POLICY_CLIP_COV, TIRL_AGG_SEQ_MEAN_TOKEN_SUM, 0.1, true, TIRL_ROLLOUT_IS_NONE, 0, false, false},
      {"clip_cov nan", TIRL_POLICY_CLIP_COV, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_NONE, 0},
      {"kl_cov", TIRL_POLICY_KL_COV, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_NONE, 0, false, false},
      {"kl_cov w seq-mean-token-mean", TIRL_POLICY_KL_COV, TIRL_AGG_SEQ_MEAN_TOKEN_MEAN, 0, true, TIRL_ROLLOUT_IS_NONE, 0, false, false},
      {"kl_cov nan", TIRL_POLICY_KL_COV, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_NONE, 0},
      {"kl_cov masked out", TIRL_POLICY_KL_COV, TIRL_AGG_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_NONE, 0, false, false, true},
      {"clip_cov masked out", TIRL_POLICY_CLIP_COV, TIRL_AGG_SEQ_MEAN_TOKEN_MEAN, 0, false, TIRL_ROLLOUT_IS_NONE, 0, false, false, true},
  };
  std::vector<std::vector<int32_t>> layouts = {rng.offsets(1, 0, 0), rng.offsets(9, 0, 50),
                                               rng.offsets(600, 0, 2000), rng.offsets(3, 100000, 300000)};
  for (auto& edge : edge_layouts()) layouts.push_back(std::move(edge));
  for (const PolicyCase& k : cases) {
    for (const auto& layout : layouts) {
      PpoInputs in = ppo_inputs(rng, layout);
      if (in.n > 10 && k.nan) {
        in.logp[3] = NAN;
        in.mask[3] = 1;
        in.advantages[7] = INFINITY;
        in.mask[7] = 0;
        in.logp[9] = in.old_logp[9] + 30;  // clamped log-ratio
      }
      if (k.masked_out) std::fill(in.mask.begin(), in.mask.end(), 0);
      tirl_policy_loss_options o = tirl_policy_loss_options_default();
      o.policy_loss = k.loss;
      o.ppo.aggregation = k.aggregation;
      o.ppo.kl_coef = k.kl_coef;
      o.ppo.kl_estimator = k.kl_coef == 0.2 ? TIRL_KL_ABS : TIRL_KL_K3;
      if (k.loss == TIRL_POLICY_DRO) o.dro_beta = 0.3;
      if (k.loss == TIRL_POLICY_BYPASS_MODE) {
        o.loss_type = TIRL_BYPASS_REINFORCE;
        o.rollout_is = k.rollout_is;
        o.rollout_is_threshold_lower = k.is_lower;
        o.rollout_is_batch_normalize = k.normalize ? 1 : 0;
      }
      // Picks of many tokens, so that a token picked on one device only shows in the gradient.
      if (k.loss == TIRL_POLICY_CLIP_COV) {
        o.clip_cov_ratio = 0.05;
        o.clip_cov_lb = 0.2;
        o.seed = 12345;
      }
      if (k.loss == TIRL_POLICY_KL_COV) o.kl_cov_ratio = 0.05;
      const float* ref = k.kl_coef > 0 ? in.ref_logp.data() : nullptr;
      const float* w = k.weights ? in.weights.data() : nullptr;
      std::vector<float> grad(in.n);
      tirl_policy_loss_result cpu{}, gpu{}, again{};
      cpu.struct_size = gpu.struct_size = again.struct_size = sizeof(tirl_policy_loss_result);
      expect_ok(tirl_policy_loss(in.logp.data(), in.old_logp.data(), in.advantages.data(), in.mask.data(),
                                 in.n, in.offsets.data(), in.b, ref, w, &o, grad.data(), &cpu, kCpu),
                "cpu policy_loss");
      Device<float> d_logp(in.logp), d_old(in.old_logp), d_adv(in.advantages), d_ref(in.ref_logp),
          d_w(in.weights), d_grad(in.n);
      Device<uint8_t> d_mask(in.mask);
      Device<int32_t> d_offsets(in.offsets);
      Comparison c{op, std::string(k.name) + " N=" + std::to_string(in.n), 1e-5, 1e-6};
      auto run = [&](tirl_policy_loss_result* r) {
        return tirl_policy_loss(d_logp.get(), d_old.get(), d_adv.get(), d_mask.get(), in.n, d_offsets.get(),
                                in.b, ref ? d_ref.get() : nullptr, w ? d_w.get() : nullptr, &o,
                                d_grad.get(), r, kGpu);
      };
      tirl_status s = run(&gpu);
      if (!supported(s, op)) return;
      c.status(s, "gpu");
      auto first = d_grad.download();
      c.arrays("grad", first, grad);
      c.scalar("loss", gpu.ppo.loss, cpu.ppo.loss);
      c.scalar("pgLoss", gpu.ppo.pg_loss, cpu.ppo.pg_loss);
      c.scalar("klLoss", gpu.ppo.kl_loss, cpu.ppo.kl_loss);
      c.scalar("clipFraction", gpu.ppo.clip_fraction, cpu.ppo.clip_fraction);
      c.scalar("clipFractionLower", gpu.ppo.clip_fraction_lower, cpu.ppo.clip_fraction_lower);
      c.scalar("approxKl", gpu.ppo.approx_kl, cpu.ppo.approx_kl);
      if (gpu.ppo.non_finite != cpu.ppo.non_finite) c.fail("nonFinite differs");
      if (gpu.ppo.masked_tokens != cpu.ppo.masked_tokens) c.fail("maskedTokens differs");
      if (gpu.selected_tokens != cpu.selected_tokens) c.fail("selectedTokens differs: not the CPU's pick");
      c.scalar("rolloutIsBatchNormFactor", gpu.rollout_is_batch_norm_factor, cpu.rollout_is_batch_norm_factor);
      c.status(run(&again), "again");
      c.deterministic("grad", d_grad.download(), first);
      if (std::memcmp(&gpu, &again, sizeof gpu) != 0) c.fail("result differs between two GPU runs");
    }
  }
}

void check_ppo_loss(Random& rng) {
  check_policy_losses(rng);
  const char* op = "ppoLoss";
  const PpoCase cases[] = {
      {"token-mean", TIRL_AGG_TOKEN_MEAN, TIRL_RATIO_TOKEN, 0, 0, TIRL_KL_K3, false, false},
      {"token-sum dual-clip 3", TIRL_AGG_TOKEN_SUM, TIRL_RATIO_TOKEN, 3, 0, TIRL_KL_K3, false, true},
      {"seq-mean-token-sum k1", TIRL_AGG_SEQ_MEAN_TOKEN_SUM, TIRL_RATIO_TOKEN, 0, 0.1, TIRL_KL_K1, false, true},
      {"seq-mean-token-mean k2 w", TIRL_AGG_SEQ_MEAN_TOKEN_MEAN, TIRL_RATIO_TOKEN, 0, 0.1, TIRL_KL_K2, true, true},
      {"seq-mean-token-sum-norm k3", TIRL_AGG_SEQ_MEAN_TOKEN_SUM_NORM, TIRL_RATIO_TOKEN, 0, 0.05, TIRL_KL_K3, false, true},
      {"token-mean abs weights", TIRL_AGG_TOKEN_MEAN, TIRL_RATIO_TOKEN, 2, 0.2, TIRL_KL_ABS, true, true},
      {"gspo seq-mean-token-mean", TIRL_AGG_SEQ_MEAN_TOKEN_MEAN, TIRL_RATIO_SEQUENCE, 0, 0, TIRL_KL_K3, false, true},
  };
  std::vector<std::vector<int32_t>> layouts = {rng.offsets(1, 0, 0), rng.offsets(9, 0, 50),
                                               rng.offsets(600, 0, 2000), rng.offsets(3, 100000, 300000)};
  for (auto& edge : edge_layouts()) layouts.push_back(std::move(edge));
  for (const PpoCase& k : cases) {
    for (const auto& layout : layouts) {
      PpoInputs in = ppo_inputs(rng, layout);
      if (in.n > 10) {
        in.logp[3] = NAN;
        in.mask[3] = 1;
        in.advantages[7] = INFINITY;
        in.mask[7] = 0;
        in.logp[9] = in.old_logp[9] + 30;  // clamped log-ratio
      }
      tirl_ppo_options o = tirl_ppo_options_default();
      o.aggregation = k.aggregation;
      o.ratio_level = k.ratio_level;
      o.dual_clip = k.dual_clip;
      o.kl_coef = k.kl_coef;
      o.kl_estimator = k.kl;
      if (k.ratio_level == TIRL_RATIO_SEQUENCE) o.clip_low = 3e-4, o.clip_high = 4e-4;
      const int32_t* offsets = k.offsets ? in.offsets.data() : nullptr;
      const int64_t b = k.offsets ? in.b : 0;
      const float* ref = k.kl_coef > 0 ? in.ref_logp.data() : nullptr;
      const float* w = k.weights ? in.weights.data() : nullptr;
      std::vector<float> grad(in.n);
      tirl_ppo_result cpu{};
      expect_ok(tirl_ppo_loss(in.logp.data(), in.old_logp.data(), in.advantages.data(), in.mask.data(),
                              in.n, offsets, b, ref, w, &o, grad.data(), &cpu, kCpu), "cpu ppo_loss");
      Device<float> d_logp(in.logp), d_old(in.old_logp), d_adv(in.advantages), d_ref(in.ref_logp),
          d_w(in.weights), d_grad(in.n);
      Device<uint8_t> d_mask(in.mask);
      Device<int32_t> d_offsets(in.offsets);
      Comparison c{op, std::string(k.name) + " N=" + std::to_string(in.n), 1e-5, 1e-6};
      tirl_ppo_result gpu{}, again{};
      tirl_status s = tirl_ppo_loss(d_logp.get(), d_old.get(), d_adv.get(), d_mask.get(), in.n,
                                    k.offsets ? d_offsets.get() : nullptr, b, ref ? d_ref.get() : nullptr,
                                    w ? d_w.get() : nullptr, &o, d_grad.get(), &gpu, kGpu);
      if (!supported(s, op)) return;
      c.status(s, "gpu");
      auto first = d_grad.download();
      c.arrays("grad", first, grad);
      c.scalar("loss", gpu.loss, cpu.loss);
      c.scalar("pgLoss", gpu.pg_loss, cpu.pg_loss);
      c.scalar("klLoss", gpu.kl_loss, cpu.kl_loss);
      c.scalar("clipFraction", gpu.clip_fraction, cpu.clip_fraction);
      c.scalar("clipFractionLower", gpu.clip_fraction_lower, cpu.clip_fraction_lower);
      c.scalar("approxKl", gpu.approx_kl, cpu.approx_kl);
      if (gpu.non_finite != cpu.non_finite) c.fail("nonFinite differs");
      if (gpu.masked_tokens != cpu.masked_tokens) c.fail("maskedTokens differs");
      c.status(tirl_ppo_loss(d_logp.get(), d_old.get(), d_adv.get(), d_mask.get(), in.n,
                             k.offsets ? d_offsets.get() : nullptr, b, ref ? d_ref.get() : nullptr,
                             w ? d_w.get() : nullptr, &o, d_grad.get(), &again, kGpu), "again");
      c.deterministic("grad", d_grad.download(), first);
      if (std::memcmp(&gpu, &again, sizeof gpu) != 0) c.fail("result differs between two GPU runs");
    }
  }
}

void bench_ppo_loss(Random& rng) {
  PpoInputs in = ppo_inputs(rng, uniform_offsets(kPpoTokens / kSequenceLength, kSequenceLength));
  Device<float> d_logp(in.logp), d_old(in.old_logp), d_adv(in.advantages), d_ref(in.ref_logp), d_grad(in.n);
  Device<uint8_t> d_mask(in.mask);
  Device<int32_t> d_offsets(in.offsets);
  tirl_ppo_options o = tirl_ppo_options_default();
  tirl_ppo_result r{};
  if (!supported(tirl_ppo_loss(d_logp.get(), d_old.get(), d_adv.get(), d_mask.get(), in.n, nullptr, 0,
                               nullptr, nullptr, &o, d_grad.get(), &r, kGpu), "ppoLoss")) return;
  bench("ppoLoss", "N=1048576 token-mean", 17.0 * in.n, [&] {
    tirl_ppo_loss(d_logp.get(), d_old.get(), d_adv.get(), d_mask.get(), in.n, nullptr, 0, nullptr,
                  nullptr, &o, d_grad.get(), &r, kGpu);
  });
  tirl_ppo_options kl = o;
  kl.aggregation = TIRL_AGG_SEQ_MEAN_TOKEN_MEAN;
  kl.kl_coef = 0.001;
  bench("ppoLoss", "N=1048576 seq-mean k3", 21.0 * in.n, [&] {
    tirl_ppo_loss(d_logp.get(), d_old.get(), d_adv.get(), d_mask.get(), in.n, d_offsets.get(), in.b,
                  d_ref.get(), nullptr, &kl, d_grad.get(), &r, kGpu);
  });
}

}  // namespace tirl::gpu_check
