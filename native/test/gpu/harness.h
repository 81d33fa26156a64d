// The GPU checks' harness: every op's CUDA kernel against its CPU kernel through the C ABI
// (same tolerances as the CPU tests: 1e-5 relative for f32 inputs, 2e-2 for bf16), run
// twice to check it is deterministic, then timed at the harness sizes next to a
// device-to-device copy of the same number of bytes. Each op's checks and timings are in
// native/test/gpu/<op>.cc; gpu_check.cc runs them (one op per ctest test, or all of them
// for benchmarks/gpu/run.sh).
//
// The buffers come from this program's own CUDA runtime (like a trainer's tensors from
// PyTorch's): tirl's kernels see foreign device pointers and the default stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sizes.h"  // benchmarks/gpu/sizes.h: the timed shapes
#include "tirl/tirl.h"

namespace tirl::gpu_check {

inline const tirl_device kCpu = {TIRL_DEVICE_CPU, 0, nullptr};
inline const tirl_device kGpu = {TIRL_DEVICE_CUDA, 0, nullptr};

// ------------------------------------------------------------------ plumbing

// A failed CUDA call of this program (not of tirl) ends the run; the results so far are
// written first, since an error such as an illegal address leaves the context unusable.
[[noreturn]] void write_results_and_exit(const std::string& fatal);

inline void cuda_check(cudaError_t e, const char* what) {
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

inline std::vector<int32_t> uniform_offsets(int64_t b, int64_t length) {
  std::vector<int32_t> o(b + 1);
  for (int64_t i = 0; i <= b; ++i) o[i] = static_cast<int32_t>(i * length);
  return o;
}

inline uint16_t to_bf16(float x) {  // round to nearest even, as torch does
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

inline std::vector<CheckRecord> checks;
inline std::vector<BenchRecord> benches;
inline std::vector<std::string> missing;  // ops without a CUDA kernel

inline bool supported(tirl_status s, const char* op) {
  if (s == TIRL_ERROR_UNSUPPORTED) {  // this build has no CUDA kernel for the op
    if (std::find(missing.begin(), missing.end(), op) == missing.end()) missing.push_back(op);
    return false;
  }
  return true;
}

inline void record(const std::string& op, const std::string& name, bool passed, const std::string& detail) {
  checks.push_back({op, name, passed, detail});
  std::printf("%-4s %-26s %-44s %s\n", passed ? "ok" : "FAIL", op.c_str(), name.c_str(), detail.c_str());
}

// Worst |a - e| / (atol + rtol |e|) over the arrays (<= 1 passes); non-finite must match.
inline double violation(const float* actual, const float* expected, int64_t n, double rtol, double atol,
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

inline double median_ms(const std::function<void()>& run, int iterations) {
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

inline int iterations = 20;

// Times `run` and a device-to-device copy moving the same traffic.
inline void bench(const std::string& op, const std::string& shape, double bytes,
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

inline void expect_ok(tirl_status s, const char* what) {
  if (s != TIRL_OK) {
    std::fprintf(stderr, "%s failed: %s\n", what, tirl_last_error());
    std::exit(2);
  }
}

// One op's checks and timings (native/test/gpu/<op>.cc).
#define TIRL_GPU_CHECK(name) \
  void check_##name(Random& rng); \
  void bench_##name(Random& rng);
TIRL_GPU_CHECK(feedback_mask)
TIRL_GPU_CHECK(sequence_logprobs)
TIRL_GPU_CHECK(ppo_loss)
TIRL_GPU_CHECK(group_advantages)
TIRL_GPU_CHECK(dpo_loss)
TIRL_GPU_CHECK(token_logprobs)
TIRL_GPU_CHECK(rollout_correction)
TIRL_GPU_CHECK(advantages)
#undef TIRL_GPU_CHECK

}  // namespace tirl::gpu_check
