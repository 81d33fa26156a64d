// GPU checks of feedbackMask: the CUDA kernel against the CPU kernel, and its timings.
#include "harness.h"

namespace tirl::gpu_check {

void check_feedback_mask(Random& rng) {
  const char* op = "feedbackMask";
  for (auto [b, lo, hi] : {std::tuple<int64_t, int64_t, int64_t>{1, 0, 0}, {1, 1, 1}, {7, 0, 40},
                           {1000, 0, 300}, {3, 100000, 300000}, {20000, 0, 3}}) {
    auto offsets = rng.offsets(b, lo, hi);
    const int64_t n = offsets[b];
    std::vector<uint8_t> roles(n);
    for (auto& r : roles) r = static_cast<uint8_t>(rng.integer(0, 4));
    auto keep = rng.mask(b, 0.7);
    std::vector<uint8_t> mask(n);
    std::vector<int32_t> counts(b);
    expect_ok(tirl_feedback_mask(roles.data(), n, offsets.data(), b, keep.data(), mask.data(),
                                 counts.data(), kCpu), "cpu feedback_mask");
    Device<uint8_t> d_roles(roles), d_keep(keep), d_mask(n);
    Device<int32_t> d_offsets(offsets), d_counts(b);
    Comparison c{op, "B=" + std::to_string(b) + " N=" + std::to_string(n), 0, 0};
    tirl_status s = tirl_feedback_mask(d_roles.get(), n, d_offsets.get(), b, d_keep.get(),
                                       d_mask.get(), d_counts.get(), kGpu);
    if (!supported(s, op)) return;
    c.status(s, "gpu");
    c.exact("mask", d_mask.download(), mask);
    c.exact("actionTokens", d_counts.download(), counts);
  }
  {
    Comparison c{op, "invalid role is reported", 0, 0};
    std::vector<uint8_t> roles = {0, 1, 9, 1};
    std::vector<int32_t> offsets = {0, 4};
    Device<uint8_t> d_roles(roles), d_mask(4);
    Device<int32_t> d_offsets(offsets);
    tirl_status s = tirl_feedback_mask(d_roles.get(), 4, d_offsets.get(), 1, nullptr, d_mask.get(),
                                       nullptr, kGpu);
    if (s != TIRL_ERROR_INVALID_ARGUMENT || !std::strstr(tirl_last_error(), "roles[2] = 9")) {
      c.fail(std::string("got: ") + tirl_last_error());
    }
  }
}

void bench_feedback_mask(Random& rng) {
  const int64_t n = kPpoTokens, b = n / kSequenceLength;
  auto offsets = uniform_offsets(b, kSequenceLength);
  std::vector<uint8_t> roles(n);
  for (auto& r : roles) r = static_cast<uint8_t>(rng.integer(0, 4));
  Device<uint8_t> d_roles(roles), d_keep(rng.mask(b, 0.9)), d_mask(n);
  Device<int32_t> d_offsets(offsets), d_counts(b);
  if (!supported(tirl_feedback_mask(d_roles.get(), n, d_offsets.get(), b, d_keep.get(), d_mask.get(),
                                    d_counts.get(), kGpu), "feedbackMask")) return;
  bench("feedbackMask", "N=1048576 B=1024", 2.0 * n + 9.0 * b, [&] {
    tirl_feedback_mask(d_roles.get(), n, d_offsets.get(), b, d_keep.get(), d_mask.get(),
                       d_counts.get(), kGpu);
  });
}

}  // namespace tirl::gpu_check
