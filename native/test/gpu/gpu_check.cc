// The GPU checks: every op's CUDA kernel against its CPU kernel (native/test/gpu/<op>.cc),
// then, unless --no-bench, their timings next to a device-to-device copy.
//
//   tirl_gpu_check [--json PATH] [--quick] [--op NAME] [--no-bench]
//
// --op runs one op's checks (ctest runs one test per op). Exit status: 0 when every check
// passed, 1 when one failed, 77 (ctest's "skipped") when there is no usable GPU, with the
// reason, 2 on a CUDA error of this program.
#include "harness.h"

namespace tirl::gpu_check {

struct Op {
  const char* name;
  void (*check)(Random&);
  void (*bench)(Random&);
};

const Op kOps[] = {
    {"feedbackMask", check_feedback_mask, bench_feedback_mask},
    {"sequenceLogprobs", check_sequence_logprobs, bench_sequence_logprobs},
    {"ppoLoss", check_ppo_loss, bench_ppo_loss},
    {"groupAdvantages", check_group_advantages, bench_group_advantages},
    {"dpoLoss", check_dpo_loss, bench_dpo_loss},
    {"tokenLogprobs", check_token_logprobs, bench_token_logprobs},
    {"rolloutCorrection", check_rollout_correction, bench_rollout_correction},
    {"advantages", check_advantages, bench_advantages},
};

// ------------------------------------------------------------------ output

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out;
}

}  // namespace

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

}  // namespace tirl::gpu_check

int main(int argc, char** argv) {
  using namespace tirl::gpu_check;
  const char* only = nullptr;
  bool no_bench = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    else if (std::strcmp(argv[i], "--quick") == 0) iterations = 5;
    else if (std::strcmp(argv[i], "--op") == 0 && i + 1 < argc) only = argv[++i];
    else if (std::strcmp(argv[i], "--no-bench") == 0) no_bench = true;
    else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--quick] [--op NAME] [--no-bench]\n", argv[0]);
      return 64;
    }
  }
  if (only != nullptr && std::none_of(std::begin(kOps), std::end(kOps),
                                      [&](const Op& op) { return std::strcmp(op.name, only) == 0; })) {
    std::fprintf(stderr, "unknown op %s\n", only);
    return 64;
  }
  std::printf("tirl %s; CUDA: %s\n", tirl_version(),
              tirl_cuda_available() ? "available" : tirl_cuda_status());
  if (!tirl_cuda_available()) {
    std::printf("skipped: no GPU to check on (%s)\n", tirl_cuda_status());
    return 77;
  }
  CUDA_OK(cudaGetDeviceProperties(&device_properties, 0));
  const cudaDeviceProp& prop = device_properties;
  std::printf("GPU: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

  Random rng(20261130);
  for (const Op& op : kOps) {
    if (only == nullptr || std::strcmp(op.name, only) == 0) op.check(rng);
  }

  // Copy bandwidth at a large size: the ceiling each op is compared with.
  const size_t big = size_t{1} << 30;
  if (!no_bench) {
    Device<uint8_t> a(static_cast<int64_t>(big)), b(static_cast<int64_t>(big));
    const double ms = median_ms([&] { CUDA_OK(cudaMemcpyAsync(b.get(), a.get(), big, cudaMemcpyDeviceToDevice)); },
                                iterations);
    copy_bandwidth_gbs = 2.0 * big / ms / 1e6;
    std::printf("device-to-device copy of 1 GiB: %.3f ms, %.1f GB/s (read + write)\n", ms,
                copy_bandwidth_gbs);
  }
  for (const Op& op : kOps) {
    if (!no_bench && (only == nullptr || std::strcmp(op.name, only) == 0)) op.bench(rng);
  }

  if (json_path != nullptr) write_json(json_path, prop, copy_bandwidth_gbs, "");
  int failed = 0;
  for (const auto& c : checks) failed += !c.passed;
  std::printf("%zu checks, %d failed; no CUDA kernel: %zu ops\n", checks.size(), failed, missing.size());
  return failed == 0 ? 0 : 1;
}
