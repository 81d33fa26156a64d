// GPU checks of sequenceLogprobs and its backward: the CUDA kernel against the CPU kernel, and its timings.
#include "harness.h"

namespace tirl::gpu_check {

void check_sequence_logprobs(Random& rng) {
  const char* op = "sequenceLogprobs";
  for (auto [b, lo, hi] : {std::tuple<int64_t, int64_t, int64_t>{1, 0, 0}, {5, 0, 30}, {300, 0, 3000},
                           {2, 200000, 400000}, {50000, 0, 4}}) {
    for (int average = 0; average <= 1; ++average) {
      auto offsets = rng.offsets(b, lo, hi);
      const int64_t n = offsets[b];
      auto logp = rng.normals(n, -2, 1);
      auto mask = rng.mask(n, 0.7);
      if (n > 3) logp[n / 2] = NAN;
      std::vector<float> out(b), grad_seq = rng.normals(b, 0, 1), grad(n);
      expect_ok(tirl_sequence_logprobs(logp.data(), mask.data(), n, offsets.data(), b, average,
                                       out.data(), kCpu), "cpu sequence_logprobs");
      expect_ok(tirl_sequence_logprobs_backward(grad_seq.data(), mask.data(), n, offsets.data(), b,
                                                average, grad.data(), kCpu), "cpu backward");
      Device<float> d_logp(logp), d_out(b), d_grad_seq(grad_seq), d_grad(n);
      Device<uint8_t> d_mask(mask);
      Device<int32_t> d_offsets(offsets);
      Comparison c{op, "B=" + std::to_string(b) + " N=" + std::to_string(n) + (average ? " mean" : " sum"),
                   1e-5, 1e-6};
      tirl_status s = tirl_sequence_logprobs(d_logp.get(), d_mask.get(), n, d_offsets.get(), b,
                                             average, d_out.get(), kGpu);
      if (!supported(s, op)) return;
      c.status(s, "forward");
      auto first = d_out.download();
      c.arrays("out", first, out);
      c.status(tirl_sequence_logprobs(d_logp.get(), d_mask.get(), n, d_offsets.get(), b, average,
                                      d_out.get(), kGpu), "forward again");
      c.deterministic("out", d_out.download(), first);
      c.status(tirl_sequence_logprobs_backward(d_grad_seq.get(), d_mask.get(), n, d_offsets.get(), b,
                                               average, d_grad.get(), kGpu), "backward");
      c.arrays("gradLogp", d_grad.download(), grad);
    }
  }
}

void bench_sequence_logprobs(Random& rng) {
  const int64_t n = kPpoTokens, b = n / kSequenceLength;
  Device<float> d_logp(rng.normals(n, -2, 1)), d_out(b), d_grad_seq(rng.normals(b, 0, 1)), d_grad(n);
  Device<uint8_t> d_mask(rng.mask(n, 0.7));
  Device<int32_t> d_offsets(uniform_offsets(b, kSequenceLength));
  if (!supported(tirl_sequence_logprobs(d_logp.get(), d_mask.get(), n, d_offsets.get(), b, 0,
                                        d_out.get(), kGpu), "sequenceLogprobs")) return;
  bench("sequenceLogprobs", "N=1048576 B=1024", 5.0 * n + 8.0 * b, [&] {
    tirl_sequence_logprobs(d_logp.get(), d_mask.get(), n, d_offsets.get(), b, 0, d_out.get(), kGpu);
  });
  bench("sequenceLogprobsBackward", "N=1048576 B=1024", 5.0 * n + 8.0 * b, [&] {
    tirl_sequence_logprobs_backward(d_grad_seq.get(), d_mask.get(), n, d_offsets.get(), b, 0,
                                    d_grad.get(), kGpu);
  });
}

}  // namespace tirl::gpu_check
