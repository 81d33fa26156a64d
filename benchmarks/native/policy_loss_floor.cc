// The floors under ppoLoss's policy losses on one core: per 1M tokens, one thread, min of
// 30 rounds, each loop storing its results (so none is optimised away):
//   - the loss's transcendental functions alone (math/exp.h, math/log.h: the exps and the
//     log each token needs, nothing else);
//   - the whole token term of math/policy_loss.h (policy_term<Loss>: loss, gradient,
//     statistics), without the kernel's mask, probes, aggregation or sums;
//   - clip_cov / kl_cov's batch means (the ordered double sums, 8 chains as
//     cpu/policy_loss_kernels.inc runs them) and clip_cov's pick key per token;
//   - a copy of the bench's 17 B/token.
//   g++ -O3 -std=c++17 -march=native -mprefer-vector-width=512 -fno-math-errno
//     -fno-trapping-math -Inative/include -Inative/src benchmarks/native/policy_loss_floor.cc -o /tmp/floor
// With two threads the copy is bandwidth-bound and these
// loops are not: a loop of t ms here costs (t / 2) / (copy ms at two threads) of the copy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "math/policy_loss.h"

namespace {

constexpr int kTokens = 1 << 20;

template <class F>
double best_ms(F f) {
  double best = 1e9;
  for (int r = 0; r < 30; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best * 1e3;
}

}  // namespace

int main() {
  std::vector<float> logp(kTokens), old_logp(kTokens), advantages(kTokens), out(kTokens), out2(kTokens);
  std::vector<unsigned char> mask(kTokens), mask_out(kTokens);
  for (int i = 0; i < kTokens; ++i) {  // logp in [-5, 0), log-ratios in +-0.1, advantages in +-2
    logp[i] = -5.0f * static_cast<float>(i % 1000) / 1000;
    old_logp[i] = logp[i] + 0.1f * static_cast<float>(static_cast<int>((i * 7919L) % 200) - 100) / 100;
    advantages[i] = 2.0f * static_cast<float>(static_cast<int>((i * 104729L) % 2000) - 1000) / 1000;
    mask[i] = static_cast<unsigned char>((i / 100) % 5 != 0);
  }
  tirl_policy_loss_options o{};
  o.ppo.clip_low = o.ppo.clip_high = 0.2;
  o.clip_ratio_c = 3;
  o.tau_pos = 1;
  o.tau_neg = 1.05;
  o.ppo_kl_coef = 0.1;
  const tirl::PolicyConstants c = tirl::policy_constants(o);
  float* __restrict y = out.data();
  float* __restrict z = out2.data();
  const float* __restrict l = logp.data();
  const float* __restrict ol = old_logp.data();
  const float* __restrict a = advantages.data();

  const double exp1 = best_ms([&] {
    for (int i = 0; i < kTokens; ++i) y[i] = tirl::exp_bounded(tirl::clamped_log_ratio(l[i], ol[i]));
  });
  const double sapo_core = best_ms([&] {  // the ratio's exp, the gate's exp and its division
    for (int i = 0; i < kTokens; ++i) {
      const float r = tirl::exp_bounded(tirl::clamped_log_ratio(l[i], ol[i]));
      y[i] = 1.0f / (1.0f + tirl::exp_bounded(-(c.tau_pos * (r - 1.0f))));
    }
  });
  const double dppo_kl_core = best_ms([&] {  // three exps, a log of a quotient
    for (int i = 0; i < kTokens; ++i) {
      const float r = tirl::exp_bounded(tirl::clamped_log_ratio(l[i], ol[i]));
      const float p = tirl::exp_bounded(l[i]), q = tirl::exp_bounded(ol[i]);
      y[i] = r + tirl::log_any((1.0f - q + 1e-8f) / (1.0f - p + 1e-8f));
    }
  });
  auto term_ms = [&](auto loss) {
    constexpr tirl_policy_loss_kind kLoss = decltype(loss)::value;
    return best_ms([&] {
      for (int i = 0; i < kTokens; ++i) {
        const tirl::PolicyTerm t = tirl::policy_term<kLoss, true>(l[i], ol[i], a[i], 0.0f, c);
        y[i] = t.loss + t.kl_stat;
        z[i] = t.dloss_dlogp;
      }
    });
  };
  const double sapo = term_ms(std::integral_constant<tirl_policy_loss_kind, TIRL_POLICY_SAPO>{});
  const double dppo_kl = term_ms(std::integral_constant<tirl_policy_loss_kind, TIRL_POLICY_DPPO_KL>{});
  const double clip_cov = term_ms(std::integral_constant<tirl_policy_loss_kind, TIRL_POLICY_CLIP_COV>{});
  const double kl_cov = term_ms(std::integral_constant<tirl_policy_loss_kind, TIRL_POLICY_KL_COV>{});
  double sums[2] = {};
  const double means = best_ms([&] {  // 4 chunks of 16,384 tokens at once, two sums each
    constexpr int kChunk = 16384, kChains = 4;
    for (int first = 0; first < kTokens; first += kChunk * kChains) {
      double s[kChains] = {}, t[kChains] = {};
      for (int j = 0; j < kChunk; ++j) {
        for (int k = 0; k < kChains; ++k) {
          const int i = first + k * kChunk + j;
          const bool on = mask[i] != 0;
          s[k] += static_cast<double>(on ? a[i] : 0.0f);
          t[k] += static_cast<double>(on ? l[i] : 0.0f);
        }
      }
      for (int k = 0; k < kChains; ++k) {
        sums[0] += s[k];
        sums[1] += t[k];
      }
    }
  });
  uint64_t key_sum = 0;
  const double keys = best_ms([&] {
    const uint64_t seed = tirl::pick_key_seed(0);
    uint64_t below = 0;
    for (int i = 0; i < kTokens; ++i) below += tirl::pick_key(seed, static_cast<uint64_t>(i)) < (uint64_t{1} << 54);
    key_sum += below;
  });
  const double copy = best_ms([&] {  // 17 B a token: 13 read, 4 written, as `tirl bench` counts
    std::memcpy(out.data(), logp.data(), sizeof(float) * kTokens);
    std::memcpy(out2.data(), old_logp.data(), sizeof(float) * kTokens * 9 / 8);
    std::memcpy(mask_out.data(), mask.data(), kTokens / 2);
  });
  std::printf("1M tokens, one thread, ms (min of 30):\n");
  std::printf("  exps and logs alone: 1 exp (clip_cov, kl_cov, vanilla) %.3f; sapo's 2 exps + division %.3f; "
              "dppo_kl's 3 exps + log + division %.3f\n", exp1, sapo_core, dppo_kl_core);
  std::printf("  policy_term: sapo %.3f, dppo_kl %.3f, clip_cov %.3f, kl_cov %.3f\n", sapo, dppo_kl,
              clip_cov, kl_cov);
  std::printf("  clip_cov / kl_cov means (ordered double sums) %.3f; clip_cov pick keys %.3f\n", means, keys);
  std::printf("  copy of 17 B/token %.3f\n", copy);
  return (sums[0] + static_cast<double>(key_sum) + y[kTokens / 2] + z[7]) != 12345.0 ? 0 : 1;
}
