// GPU checks of dpoLoss: the CUDA kernel against the CPU kernel, and its timings.
#include "harness.h"

namespace tirl::gpu_check {

void check_dpo_loss(Random& rng) {
  const char* op = "dpoLoss";
  const std::pair<const char*, tirl_dpo_variant> variants[] = {
      {"sigmoid", TIRL_DPO_SIGMOID}, {"hinge", TIRL_DPO_HINGE}, {"ipo", TIRL_DPO_IPO}, {"robust", TIRL_DPO_ROBUST}};
  for (auto [name, variant] : variants) {
    for (int64_t n : {1, 100, 65536}) {
      auto pc = rng.normals(n, -50, 10), pr = rng.normals(n, -55, 10), rc = rng.normals(n, -50, 10),
           rr = rng.normals(n, -55, 10);
      tirl_dpo_options o = tirl_dpo_options_default();
      o.label_smoothing = variant == TIRL_DPO_SIGMOID || variant == TIRL_DPO_ROBUST ? 0.1 : 0;
      std::vector<float> gc(n), gr(n), cr(n), rrw(n);
      tirl_dpo_result cpu{}, gpu{}, again{};
      expect_ok(tirl_dpo_loss(pc.data(), pr.data(), rc.data(), rr.data(), n, &o, gc.data(), gr.data(),
                              cr.data(), rrw.data(), &cpu, kCpu), "cpu dpo_loss");
      Device<float> d_pc(pc), d_pr(pr), d_rc(rc), d_rr(rr), d_gc(n), d_gr(n), d_cr(n), d_rrw(n);
      Comparison c{op, std::string(name) + " P=" + std::to_string(n), 1e-5, 1e-6};
      tirl_status s = tirl_dpo_loss(d_pc.get(), d_pr.get(), d_rc.get(), d_rr.get(), n, &o, d_gc.get(),
                                    d_gr.get(), d_cr.get(), d_rrw.get(), &gpu, kGpu);
      if (!supported(s, op)) return;
      c.status(s, "gpu");
      c.arrays("gradChosen", d_gc.download(), gc);
      c.arrays("gradRejected", d_gr.download(), gr);
      c.arrays("chosenRewards", d_cr.download(), cr);
      c.arrays("rejectedRewards", d_rrw.download(), rrw);
      c.scalar("loss", gpu.loss, cpu.loss);
      c.scalar("rewardAccuracy", gpu.reward_accuracy, cpu.reward_accuracy);
      c.status(tirl_dpo_loss(d_pc.get(), d_pr.get(), d_rc.get(), d_rr.get(), n, &o, d_gc.get(),
                             d_gr.get(), d_cr.get(), d_rrw.get(), &again, kGpu), "again");
      if (std::memcmp(&gpu, &again, sizeof gpu) != 0) c.fail("result differs between two GPU runs");
    }
  }
}

void bench_dpo_loss(Random& rng) {
  const int64_t n = kDpoPairs;
  Device<float> d_pc(rng.normals(n, -50, 10)), d_pr(rng.normals(n, -55, 10)), d_rc(rng.normals(n, -50, 10)),
      d_rr(rng.normals(n, -55, 10)), d_gc(n), d_gr(n), d_cr(n), d_rrw(n);
  tirl_dpo_options o = tirl_dpo_options_default();
  tirl_dpo_result r{};
  if (!supported(tirl_dpo_loss(d_pc.get(), d_pr.get(), d_rc.get(), d_rr.get(), n, &o, d_gc.get(),
                               d_gr.get(), d_cr.get(), d_rrw.get(), &r, kGpu), "dpoLoss")) return;
  bench("dpoLoss", "P=65536 sigmoid", 32.0 * n, [&] {
    tirl_dpo_loss(d_pc.get(), d_pr.get(), d_rc.get(), d_rr.get(), n, &o, d_gc.get(), d_gr.get(),
                  d_cr.get(), d_rrw.get(), &r, kGpu);
  });
}

}  // namespace tirl::gpu_check
