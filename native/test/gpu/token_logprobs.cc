// GPU checks of tokenLogprobs and its backward: the CUDA kernel against the CPU kernel, and its timings.
#include <thread>

#include "harness.h"

namespace tirl::gpu_check {

void check_token_logprobs(Random& rng) {
  const char* op = "tokenLogprobs";
  struct Shape { int64_t n, v; };
  for (Shape shape : {Shape{1, 1}, Shape{3, 7}, Shape{64, 32000}, Shape{5, 151936}, Shape{300, 1000}}) {
    for (tirl_dtype dtype : {TIRL_DTYPE_F32, TIRL_DTYPE_BF16}) {
      for (double temperature : {1.0, 0.7}) {
        const int64_t n = shape.n, v = shape.v;
        auto logits = rng.normals(n * v, 0, 3);
        if (n > 2 && v > 5) {
          logits[1 * v + 2] = 80;                  // one dominant logit
          logits[2 * v + 0] = -INFINITY;          // an impossible token
        }
        std::vector<uint16_t> bf16(n * v);
        for (int64_t i = 0; i < n * v; ++i) bf16[i] = to_bf16(logits[i]);
        std::vector<int32_t> labels(n);
        for (auto& l : labels) l = static_cast<int32_t>(rng.integer(0, v));
        auto grad_logp = rng.normals(n, 0, 1), grad_entropy = rng.normals(n, 0, 0.1);
        const void* host_logits = dtype == TIRL_DTYPE_F32 ? static_cast<const void*>(logits.data())
                                                          : static_cast<const void*>(bf16.data());
        std::vector<float> logp(n), entropy(n), dlogits(n * v);
        expect_ok(tirl_token_logprobs(host_logits, dtype, n, v, labels.data(), temperature, logp.data(),
                                      entropy.data(), kCpu), "cpu token_logprobs");
        expect_ok(tirl_token_logprobs_backward(host_logits, dtype, n, v, labels.data(), temperature,
                                               grad_logp.data(), grad_entropy.data(), dlogits.data(),
                                               kCpu), "cpu backward");
        Device<float> d_f32(logits), d_logp(n), d_entropy(n), d_gl(grad_logp), d_ge(grad_entropy),
            d_dlogits(n * v);
        Device<uint16_t> d_bf16(bf16);
        Device<int32_t> d_labels(labels);
        const void* device_logits = dtype == TIRL_DTYPE_F32 ? static_cast<const void*>(d_f32.get())
                                                            : static_cast<const void*>(d_bf16.get());
        const double rtol = dtype == TIRL_DTYPE_F32 ? 1e-5 : 2e-2;
        char name[96];
        std::snprintf(name, sizeof name, "%s N=%lld V=%lld T=%.1f", dtype == TIRL_DTYPE_F32 ? "f32" : "bf16",
                      static_cast<long long>(n), static_cast<long long>(v), temperature);
        Comparison c{op, name, rtol, 1e-6};
        tirl_status s = tirl_token_logprobs(device_logits, dtype, n, v, d_labels.get(), temperature,
                                            d_logp.get(), d_entropy.get(), kGpu);
        if (!supported(s, op)) return;
        c.status(s, "forward");
        auto first = d_logp.download();
        c.arrays("logp", first, logp);
        c.arrays("entropy", d_entropy.download(), entropy);
        c.status(tirl_token_logprobs(device_logits, dtype, n, v, d_labels.get(), temperature,
                                     d_logp.get(), d_entropy.get(), kGpu), "again");
        c.deterministic("logp", d_logp.download(), first);
        c.status(tirl_token_logprobs_backward(device_logits, dtype, n, v, d_labels.get(), temperature,
                                              d_gl.get(), d_ge.get(), d_dlogits.get(), kGpu), "backward");
        c.arrays("dlogits", d_dlogits.download(), dlogits);
        if (dtype == TIRL_DTYPE_F32) {  // in place over the logits
          c.status(tirl_token_logprobs_backward(d_f32.get(), dtype, n, v, d_labels.get(), temperature,
                                                d_gl.get(), d_ge.get(), d_f32.get(), kGpu), "in place");
          c.arrays("dlogits in place", d_f32.download(), dlogits);
        }
      }
    }
  }
  {
    // The backward's shared-memory limit belongs to the kernel, not the call: threads
    // launching it at once with rows cached (V = 32000) and not (V = 7) must all succeed
    // (the limit was once set to each call's own need, so a call without a cache lowered
    // it under another's launch).
    Comparison c{op, "backward from two threads at once", 0, 0};
    auto worker = [](int64_t v, tirl_status* status) {
      const int64_t n = 4;
      Device<float> d_logits(std::vector<float>(n * v, 0.5f)), d_gl(std::vector<float>(n, 1.0f)),
          d_dlogits(n * v);
      Device<int32_t> d_labels(std::vector<int32_t>(n, 0));
      for (int i = 0; i < 200 && *status == TIRL_OK; ++i) {
        *status = tirl_token_logprobs_backward(d_logits.get(), TIRL_DTYPE_F32, n, v, d_labels.get(), 1.0,
                                               d_gl.get(), nullptr, d_dlogits.get(), kGpu);
      }
    };
    tirl_status cached = TIRL_OK, uncached = TIRL_OK;
    std::thread a(worker, 32000, &cached), b(worker, 7, &uncached);
    a.join();
    b.join();
    if (cached != TIRL_OK || uncached != TIRL_OK) c.fail("a call failed with the other running");
  }
  {
    Comparison c{op, "label out of range is reported", 0, 0};
    Device<float> d_logits(std::vector<float>(8, 0)), d_logp(2);
    Device<int32_t> d_labels(std::vector<int32_t>{1, 4});
    tirl_status s = tirl_token_logprobs(d_logits.get(), TIRL_DTYPE_F32, 2, 4, d_labels.get(), 1.0,
                                        d_logp.get(), nullptr, kGpu);
    if (s != TIRL_ERROR_INVALID_ARGUMENT) c.fail(std::string("got: ") + tirl_last_error());
  }
}

void bench_token_logprobs(Random& rng) {
  for (LogitsShape shape : kLogitsShapes) {
    const int64_t n = shape.tokens, v = shape.vocab;
    std::vector<float> logits(n * v);
    for (auto& x : logits) x = static_cast<float>(rng.uniform(-8, 8));
    std::vector<uint16_t> bf16(n * v);
    for (int64_t i = 0; i < n * v; ++i) bf16[i] = to_bf16(logits[i]);
    std::vector<int32_t> labels(n);
    for (auto& l : labels) l = static_cast<int32_t>(rng.integer(0, v));
    Device<float> d_f32(logits), d_logp(n), d_entropy(n), d_gl(rng.normals(n, 0, 1)), d_dlogits(n * v);
    Device<uint16_t> d_bf16(bf16);
    Device<int32_t> d_labels(labels);
    logits.clear();
    logits.shrink_to_fit();
    if (!supported(tirl_token_logprobs(d_f32.get(), TIRL_DTYPE_F32, n, v, d_labels.get(), 1.0,
                                       d_logp.get(), nullptr, kGpu), "tokenLogprobs")) return;
    const std::string s = std::to_string(n) + "x" + std::to_string(v);
    for (tirl_dtype dtype : {TIRL_DTYPE_F32, TIRL_DTYPE_BF16}) {
      const void* in = dtype == TIRL_DTYPE_F32 ? static_cast<const void*>(d_f32.get())
                                               : static_cast<const void*>(d_bf16.get());
      const double elem = dtype == TIRL_DTYPE_F32 ? 4 : 2;
      const std::string tag = s + (dtype == TIRL_DTYPE_F32 ? " f32" : " bf16");
      bench("tokenLogprobs", tag, elem * n * v + 8.0 * n, [&] {
        tirl_token_logprobs(in, dtype, n, v, d_labels.get(), 1.0, d_logp.get(), nullptr, kGpu);
      });
      bench("tokenLogprobs+entropy", tag, elem * n * v + 12.0 * n, [&] {
        tirl_token_logprobs(in, dtype, n, v, d_labels.get(), 1.0, d_logp.get(), d_entropy.get(), kGpu);
      });
      bench("tokenLogprobsBackward", tag, (elem + 4) * n * v + 8.0 * n, [&] {
        tirl_token_logprobs_backward(in, dtype, n, v, d_labels.get(), 1.0, d_gl.get(), nullptr,
                                     d_dlogits.get(), kGpu);
      });
    }
  }
}

}  // namespace tirl::gpu_check
