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

void check_ppo_loss(Random& rng) {
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
  const std::vector<std::vector<int32_t>> layouts = {rng.offsets(1, 0, 0), rng.offsets(9, 0, 50),
                                                     rng.offsets(600, 0, 2000), rng.offsets(3, 100000, 300000)};
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
