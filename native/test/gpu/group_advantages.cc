// GPU checks of groupAdvantages: the CUDA kernel against the CPU kernel, and its timings.
#include "harness.h"

namespace tirl::gpu_check {

void check_group_advantages(Random& rng) {
  const char* op = "groupAdvantages";
  for (int64_t n : {1, 16, 1000, 65536}) {
    for (int by_ids = 0; by_ids <= 1; ++by_ids) {
      for (int scale = 0; scale <= 1; ++scale) {
        auto rewards = rng.normals(n, 0.5, 1);
        std::vector<int32_t> ids(n);
        for (auto& g : ids) g = static_cast<int32_t>(rng.integer(-5, n / 3 + 2)) * 7919;
        const int64_t group_size = n % 16 == 0 ? 16 : 1;
        if (n >= 16) std::fill(rewards.begin(), rewards.begin() + 16, 1.0f);  // zero variance
        tirl_group_advantages_options o = tirl_group_advantages_options_default();
        o.scale_by_std = scale;
        std::vector<float> out(n);
        const int32_t* group_ids = by_ids ? ids.data() : nullptr;
        expect_ok(tirl_group_advantages(rewards.data(), n, group_ids, group_size, &o, out.data(), kCpu),
                  "cpu group_advantages");
        Device<float> d_rewards(rewards), d_out(n);
        Device<int32_t> d_ids(ids);
        Comparison c{op, std::string(by_ids ? "groupIds" : "groupSize") + (scale ? " std" : " no-std") +
                             " N=" + std::to_string(n), 1e-5, 1e-6};
        tirl_status s = tirl_group_advantages(d_rewards.get(), n, by_ids ? d_ids.get() : nullptr,
                                              group_size, &o, d_out.get(), kGpu);
        if (!supported(s, op)) return;
        c.status(s, "gpu");
        auto first = d_out.download();
        c.arrays("advantages", first, out);
        c.status(tirl_group_advantages(d_rewards.get(), n, by_ids ? d_ids.get() : nullptr, group_size,
                                       &o, d_out.get(), kGpu), "again");
        c.deterministic("advantages", d_out.download(), first);
      }
    }
  }
}

void bench_group_advantages(Random& rng) {
  const int64_t n = kGroupRewards;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(i / kGroupSize);
  Device<float> d_rewards(rng.normals(n, 0.5, 1)), d_out(n);
  Device<int32_t> d_ids(ids);
  tirl_group_advantages_options o = tirl_group_advantages_options_default();
  if (!supported(tirl_group_advantages(d_rewards.get(), n, nullptr, kGroupSize, &o, d_out.get(), kGpu),
                 "groupAdvantages")) return;
  bench("groupAdvantages", "N=65536 groupSize=16", 8.0 * n, [&] {
    tirl_group_advantages(d_rewards.get(), n, nullptr, kGroupSize, &o, d_out.get(), kGpu);
  });
  if (tirl_group_advantages(d_rewards.get(), n, d_ids.get(), 0, &o, d_out.get(), kGpu) == TIRL_OK) {
    bench("groupAdvantages", "N=65536 groupIds", 12.0 * n, [&] {
      tirl_group_advantages(d_rewards.get(), n, d_ids.get(), 0, &o, d_out.get(), kGpu);
    });
  }
}

}  // namespace tirl::gpu_check
