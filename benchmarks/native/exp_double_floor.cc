// The floor under rolloutCorrection's token loop: one double exp per token (math/exp.h's
// exp_double_bounded, the weight e^clamp(logp - rollout_logp, -20, 20) that every mode
// needs) against a copy of the op's 14 B/token, 1M tokens, one thread, min of 50 rounds.
//   g++ -O3 -std=c++17 -march=native -mprefer-vector-width=512 -fno-math-errno
//     -fno-trapping-math -Inative/src benchmarks/native/exp_double_floor.cc -o /tmp/exp_floor
// (-mavx2 -mfma for the AVX2 path). With two threads the copy is bandwidth-bound and the
// exp is not, so the exp alone costs (exp ms / 2) / (copy ms at two threads) of the copy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "math/exp.h"

int main() {
  const int n = 1 << 20;
  std::vector<float> logp(n), rollout_logp(n), weights(n), scratch(n);
  float checksum = 0;
  std::vector<unsigned char> mask(n), mask_out(n);
  for (int i = 0; i < n; ++i) {
    logp[i] = -5.0f * static_cast<float>(i % 1000) / 1000;
    rollout_logp[i] = logp[i] + 0.01f * static_cast<float>(static_cast<int>((i * 7919L) % 200) - 100) / 100;
    mask[i] = static_cast<unsigned char>((i / 100) % 2);
  }
  const auto best_ms = [](auto f) {
    double best = 1e9;
    for (int r = 0; r < 50; ++r) {
      const auto start = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best * 1e3;
  };
  const double exp_ms = best_ms([&] {
    for (int i = 0; i < n; ++i) {
      const double d = static_cast<double>(logp[i]) - static_cast<double>(rollout_logp[i]);
      const double c = d < -20 ? -20 : (d > 20 ? 20 : d);
      weights[i] = static_cast<float>(tirl::exp_double_bounded(c));
    }
    checksum += weights[n / 2];
  });
  const double copy_ms = best_ms([&] {  // 14 B a token moved: 7 read, 7 written
    std::memcpy(weights.data(), logp.data(), sizeof(float) * n);
    std::memcpy(scratch.data(), rollout_logp.data(), sizeof(float) * n / 2);
    std::memcpy(mask_out.data(), mask.data(), n);
  });
  std::printf("1M tokens, one thread: log-ratio, clamp, double exp, f32 store %.3f ms; "
              "a copy of 14 B/token %.3f ms\n", exp_ms, copy_ms);
  return checksum > 0 ? 0 : 1;
}
