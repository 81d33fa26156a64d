// GPU proof for tirl: every op's CUDA kernel against its CPU kernel through the C ABI
// (same tolerances as the CPU tests: 1e-5 relative for f32 inputs, 2e-2 for bf16), run
// twice to check it is deterministic, then timed at the harness sizes next to a
// device-to-device copy of the same number of bytes.
//
// The buffers come from this program's own CUDA runtime (like a trainer's tensors from
// PyTorch's): tirl's kernels see foreign device pointers and the default stream.
//
// Usage: tirl_gpu_check [--json PATH] [--quick]   (exit status 1 when a check fails)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sizes.h"
#include "tirl/tirl.h"

namespace {

using namespace tirl::gpu_check;

const tirl_device kCpu = {TIRL_DEVICE_CPU, 0, nullptr};
const tirl_device kGpu = {TIRL_DEVICE_CUDA, 0, nullptr};

// ------------------------------------------------------------------ plumbing

// A failed CUDA call of this program (not of tirl) ends the run; the results so far are
// written first, since an error such as an illegal address leaves the context unusable.
void write_results_and_exit(const std::string& fatal);

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    const std::string message = std::string("CUDA error ") + cudaGetErrorString(e) + " in " + what;
    std::fprintf(stderr, "%s\n", message.c_str());
    write_results_and_exit(message);
  }
}
#define CUDA_OK(call) cuda_check((call), #call)

class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t bits() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * (bits() >> 11) * 0x1.0p-53; }
  int64_t integer(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(bits() % (hi - lo)); }
  double normal() {
    double u = 1.0 - uniform(0, 1), v = uniform(0, 1);
    return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
  std::vector<float> normals(int64_t n, double mean, double scale) {
    std::vector<float> a(n);
    for (auto& x : a) x = static_cast<float>(mean + scale * normal());
    return a;
  }
  std::vector<uint8_t> mask(int64_t n, double p) {
    std::vector<uint8_t> a(n);
    for (auto& x : a) x = uniform(0, 1) < p;
    return a;
  }
  // Ragged offsets of b sequences with lengths in [lo, hi].
  std::vector<int32_t> offsets(int64_t b, int64_t lo, int64_t hi) {
    std::vector<int32_t> o(b + 1, 0);
    for (int64_t i = 0; i < b; ++i) o[i + 1] = o[i] + static_cast<int32_t>(integer(lo, hi + 1));
    return o;
  }

 private:
  uint64_t state_;
};

std::vector<int32_t> uniform_offsets(int64_t b, int64_t length) {
  std::vector<int32_t> o(b + 1);
  for (int64_t i = 0; i <= b; ++i) o[i] = static_cast<int32_t>(i * length);
  return o;
}

uint16_t to_bf16(float x) {  // round to nearest even, as torch does
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if (std::isnan(x)) return 0x7fc0;
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// A device copy of a host vector, freed at scope end; empty -> null pointer.
template <class T>
class Device {
 public:
  Device() = default;
  explicit Device(int64_t n) : n_(n) {
    if (n > 0) CUDA_OK(cudaMalloc(&p_, n * sizeof(T)));
    if (n > 0) CUDA_OK(cudaMemset(p_, 0, n * sizeof(T)));
  }
  explicit Device(const std::vector<T>& host) : Device(static_cast<int64_t>(host.size())) {
    if (n_ > 0) CUDA_OK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Device() {
    if (p_ != nullptr) cudaFree(p_);
  }
  Device(Device&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; }
  Device& operator=(Device&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  T* get() const { return p_; }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (n_ > 0) CUDA_OK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  int64_t n_ = 0;
};

// ------------------------------------------------------------------ results

struct CheckRecord {
  std::string op, name;
  bool passed;
  std::string detail;
};

struct BenchRecord {
  std::string op, shape;
  double bytes;      // minimum traffic: every input read once, every output written once
  double tirl_ms;    // median of the timed runs
  double copy_ms;    // a device-to-device copy moving the same traffic (bytes / 2 copied)
};

std::vector<CheckRecord> checks;
std::vector<BenchRecord> benches;
std::vector<std::string> missing;  // ops without a CUDA kernel

bool supported(tirl_status s, const char* op) {
  if (s == TIRL_ERROR_UNSUPPORTED) {  // this build has no CUDA kernel for the op
    if (std::find(missing.begin(), missing.end(), op) == missing.end()) missing.push_back(op);
    return false;
  }
  return true;
}

void record(const std::string& op, const std::string& name, bool passed, const std::string& detail) {
  checks.push_back({op, name, passed, detail});
  std::printf("%-4s %-26s %-44s %s\n", passed ? "ok" : "FAIL", op.c_str(), name.c_str(), detail.c_str());
}

// Worst |a - e| / (atol + rtol |e|) over the arrays (<= 1 passes); non-finite must match.
double violation(const float* actual, const float* expected, int64_t n, double rtol, double atol,
                 int64_t* where) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double a = actual[i], e = expected[i], v;
    if (!std::isfinite(a) || !std::isfinite(e)) {
      v = (std::isnan(a) && std::isnan(e)) || a == e ? 0 : INFINITY;
    } else {
      v = std::fabs(a - e) / (atol + rtol * std::fabs(e));
    }
    if (v > worst) {
      worst = v;
      *where = i;
    }
  }
  return worst;
}

// Compares named outputs; records one line for the case.
struct Comparison {
  Comparison(std::string op_name, std::string case_name, double relative, double absolute)
      : op(std::move(op_name)), name(std::move(case_name)), rtol(relative), atol(absolute) {}
  std::string op, name;
  double rtol, atol;
  bool passed = true;
  std::string detail;

  void arrays(const char* what, const std::vector<float>& gpu, const std::vector<float>& cpu) {
    if (gpu.size() != cpu.size()) {
      fail(std::string(what) + " sizes differ");
      return;
    }
    int64_t at = 0;
    double v = violation(gpu.data(), cpu.data(), static_cast<int64_t>(gpu.size()), rtol, atol, &at);
    if (v > 1) {
      char b[200];
      std::snprintf(b, sizeof b, "%s[%lld]: gpu %.9g cpu %.9g", what, static_cast<long long>(at),
                    gpu[at], cpu[at]);
      fail(b);
    }
  }
  void scalar(const char* what, double gpu, double cpu) {
    float g = static_cast<float>(gpu), c = static_cast<float>(cpu);
    int64_t at = 0;
    if (violation(&g, &c, 1, rtol, atol, &at) > 1) {
      char b[200];
      std::snprintf(b, sizeof b, "%s: gpu %.12g cpu %.12g", what, gpu, cpu);
      fail(b);
    }
  }
  template <class T>
  void exact(const char* what, const std::vector<T>& gpu, const std::vector<T>& cpu) {
    if (gpu.size() != cpu.size() || std::memcmp(gpu.data(), cpu.data(), gpu.size() * sizeof(T)) != 0) {
      fail(std::string(what) + " differs");
    }
  }
  template <class T>
  void deterministic(const char* what, const std::vector<T>& first, const std::vector<T>& second) {
    if (std::memcmp(first.data(), second.data(), first.size() * sizeof(T)) != 0) {
      fail(std::string(what) + " differs between two GPU runs");
    }
  }
  void status(tirl_status s, const char* where) {
    if (s != TIRL_OK) fail(std::string(where) + ": " + tirl_last_error());
  }
  void fail(const std::string& why) {
    passed = false;
    if (detail.empty()) detail = why;
  }
  ~Comparison() { record(op, name, passed, passed ? "" : detail); }
};

// ------------------------------------------------------------------ timing

double median_ms(const std::function<void()>& run, int iterations) {
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) run();
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> times;
  for (int i = 0; i < iterations; ++i) {
    CUDA_OK(cudaEventRecord(start));
    run();
    CUDA_OK(cudaEventRecord(stop));
    CUDA_OK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int iterations = 20;

// Times `run` and a device-to-device copy moving the same traffic.
void bench(const std::string& op, const std::string& shape, double bytes,
           const std::function<void()>& run) {
  const double tirl_ms = median_ms(run, iterations);
  const size_t half = static_cast<size_t>(bytes / 2);
  Device<uint8_t> from(static_cast<int64_t>(half)), to(static_cast<int64_t>(half));
  const double copy_ms = median_ms(
      [&] { CUDA_OK(cudaMemcpyAsync(to.get(), from.get(), half, cudaMemcpyDeviceToDevice)); },
      iterations);
  benches.push_back({op, shape, bytes, tirl_ms, copy_ms});
  std::printf("bench %-30s %-22s %9.4f ms  %7.1f GB/s  copy %9.4f ms  (%5.1f%% of copy bandwidth)\n",
              op.c_str(), shape.c_str(), tirl_ms, bytes / tirl_ms / 1e6, copy_ms,
              100.0 * copy_ms / tirl_ms);
}

void expect_ok(tirl_status s, const char* what) {
  if (s != TIRL_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, tirl_last_error());
    std::exit(2);
  }
}

// ------------------------------------------------------------------ feedbackMask

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

// ------------------------------------------------------------------ sequenceLogprobs

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

// ------------------------------------------------------------------ ppoLoss

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

// ------------------------------------------------------------------ groupAdvantages

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

// ------------------------------------------------------------------ advantages

// Every estimator on a ragged batch with masked-out prompts and feedback, fully masked
// sequences, scattered ids with groups of one; the GPU must give the CPU's bits (both run
// math/advantages.h in the same order), checked with the usual tolerance.
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
      c.arrays("advantages", first, out);
      c.arrays("returns", d_returns.download(), returns);
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

// ------------------------------------------------------------------ dpoLoss

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

// ------------------------------------------------------------------ tokenLogprobs

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

// ------------------------------------------------------------------ output

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out;
}

const char* json_path = nullptr;
cudaDeviceProp device_properties{};
double copy_bandwidth_gbs = 0;

void write_json(const char* path, const cudaDeviceProp& prop, double copy_gbs, const std::string& fatal) {
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::perror(path);
    return;
  }
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::fprintf(f, "{\n  \"gpu\": \"%s\",\n  \"computeCapability\": \"%d.%d\",\n", escape(prop.name).c_str(),
               prop.major, prop.minor);
  std::fprintf(f, "  \"driverVersion\": %d,\n  \"runtimeVersion\": %d,\n  \"tirlVersion\": \"%s\",\n", driver,
               runtime, tirl_version());
  std::fprintf(f, "  \"fatal\": \"%s\",\n", escape(fatal).c_str());
  std::fprintf(f, "  \"copyBandwidthGBs\": %.1f,\n  \"noCudaKernel\": [", copy_gbs);
  for (size_t i = 0; i < missing.size(); ++i) std::fprintf(f, "%s\"%s\"", i ? ", " : "", missing[i].c_str());
  std::fprintf(f, "],\n  \"checks\": [\n");
  for (size_t i = 0; i < checks.size(); ++i) {
    const auto& c = checks[i];
    std::fprintf(f, "    {\"op\": \"%s\", \"case\": \"%s\", \"passed\": %s, \"detail\": \"%s\"}%s\n", c.op.c_str(),
                 escape(c.name).c_str(), c.passed ? "true" : "false", escape(c.detail).c_str(),
                 i + 1 < checks.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"benchmarks\": [\n");
  for (size_t i = 0; i < benches.size(); ++i) {
    const auto& b = benches[i];
    std::fprintf(f,
                 "    {\"op\": \"%s\", \"shape\": \"%s\", \"bytes\": %.0f, \"tirlMs\": %.6f, \"copyMs\": %.6f, "
                 "\"tirlGBs\": %.1f, \"fractionOfCopyBandwidth\": %.4f}%s\n",
                 b.op.c_str(), b.shape.c_str(), b.bytes, b.tirl_ms, b.copy_ms, b.bytes / b.tirl_ms / 1e6,
                 b.copy_ms / b.tirl_ms, i + 1 < benches.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
}

void write_results_and_exit(const std::string& fatal) {
  if (json_path != nullptr) write_json(json_path, device_properties, copy_bandwidth_gbs, fatal);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    else if (std::strcmp(argv[i], "--quick") == 0) iterations = 5;
  }
  std::printf("tirl %s; CUDA: %s\n", tirl_version(),
              tirl_cuda_available() ? "available" : tirl_cuda_status());
  if (!tirl_cuda_available()) return 2;
  CUDA_OK(cudaGetDeviceProperties(&device_properties, 0));
  const cudaDeviceProp& prop = device_properties;
  std::printf("GPU: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

  Random rng(20261130);
  check_feedback_mask(rng);
  check_sequence_logprobs(rng);
  check_ppo_loss(rng);
  check_group_advantages(rng);
  check_advantages(rng);
  check_dpo_loss(rng);
  check_token_logprobs(rng);

  // Copy bandwidth at a large size: the ceiling each op is compared with.
  const size_t big = size_t{1} << 30;
  {
    Device<uint8_t> a(static_cast<int64_t>(big)), b(static_cast<int64_t>(big));
    const double ms = median_ms([&] { CUDA_OK(cudaMemcpyAsync(b.get(), a.get(), big, cudaMemcpyDeviceToDevice)); },
                                iterations);
    copy_bandwidth_gbs = 2.0 * big / ms / 1e6;
    std::printf("device-to-device copy of 1 GiB: %.3f ms, %.1f GB/s (read + write)\n", ms,
                copy_bandwidth_gbs);
  }
  bench_feedback_mask(rng);
  bench_sequence_logprobs(rng);
  bench_ppo_loss(rng);
  bench_group_advantages(rng);
  bench_advantages(rng);
  bench_dpo_loss(rng);
  bench_token_logprobs(rng);

  if (json_path != nullptr) write_json(json_path, prop, copy_bandwidth_gbs, "");
  int failed = 0;
  for (const auto& c : checks) failed += !c.passed;
  std::printf("%zu checks, %d failed; no CUDA kernel: %zu ops\n", checks.size(), failed, missing.size());
  return failed == 0 ? 0 : 1;
}
