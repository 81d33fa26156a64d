// Bitwise A/B of two builds of libtirl.so on random problems of the optimal-token
// baselines (optimal_token_baseline and tir_optimal_token_baseline): ragged sequences of
// 0-400 tokens in runs of masked-in and masked-out tokens, groups by size or by ids, a
// score per sequence or token rewards, with and without rollout weights and
// handle_zero_tail, and NaN log-probs here and there. Every advantage and return of the two
// builds is compared bit for bit: a rewrite of the group pass that must keep the bits
// (cpu/advantages_kernels.inc's PairColumnSums against the member-by-member column sums)
// is checked on thousands of shapes where the bench's one batch would miss most.
//   cc -O2 -Inative/include benchmarks/native/ab_bits_token_baselines.c -o /tmp/ab_bits -ldl -lm
//   /tmp/ab_bits /tmp/a.so /tmp/b.so [trials]
// Prints how many trials differ (the first five named); exits 1 if any does. The SIMD
// path is the process's (TIRL_SIMD=baseline|avx2|avx512 picks it, for both builds).
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tirl/tirl.h"
typedef __typeof__(tirl_advantages)* adv_fn;
typedef __typeof__(tirl_advantages_options_default)* def_fn;
static uint64_t st = 88172645463325252ull;
static double U(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (double)(st >> 11) * (1.0 / 9007199254740992.0); }
int main(int argc, char** argv) {
  void* h[2] = {dlopen(argv[1], RTLD_NOW | RTLD_LOCAL), dlopen(argv[2], RTLD_NOW | RTLD_LOCAL)};
  if (!h[0] || !h[1]) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  adv_fn f[2] = {(adv_fn)dlsym(h[0], "tirl_advantages"), (adv_fn)dlsym(h[1], "tirl_advantages")};
  def_fn d = (def_fn)dlsym(h[0], "tirl_advantages_options_default");
  int trials = argc > 3 ? atoi(argv[3]) : 2000, bad = 0;
  for (int trial = 0; trial < trials; ++trial) {
    int S = 1 + (int)(U() * 24), G = 1 + (int)(U() * 6);
    S = (S + G - 1) / G * G;
    int32_t* off = malloc(sizeof(int32_t) * (S + 1));
    off[0] = 0;
    int maxlen = 1 + (int)(U() * (U() < 0.3 ? 400 : 40));
    for (int s = 0; s < S; ++s) off[s + 1] = off[s] + (int)(U() * maxlen);
    int64_t N = off[S];
    float *lp = malloc(4 * N + 4), *spp = malloc(4 * N + 4), *tr = malloc(4 * N + 4), *w = malloc(4 * N + 4), *rw = malloc(4 * S + 4);
    uint8_t* m = malloc(N + 1);
    int32_t* ids = malloc(4 * S + 4);
    double pin = U();
    for (int64_t t = 0; t < N; ++t) {
      lp[t] = (float)(-4 * U()); spp[t] = (float)(0.3 * U()); tr[t] = U() < 0.1 ? (float)U() : 0.f; w[t] = (float)(0.5 + U());
      if (U() < 0.01) lp[t] = NAN;
      m[t] = U() < pin ? (uint8_t)(1 + (int)(U() * 3)) : 0;
      if (t > 0 && U() < 0.8) m[t] = m[t - 1];  // runs
    }
    for (int s = 0; s < S; ++s) { rw[s] = (float)(U() < 0.5); ids[s] = (int32_t)(U() * (S / G + 1)); }
    tirl_advantages_options o = d();
    o.estimator = U() < 0.5 ? TIRL_ADV_OPTIMAL_TOKEN_BASELINE : TIRL_ADV_TIR_OPTIMAL_TOKEN_BASELINE;
    o.handle_zero_tail = U() < 0.5;
    o.group_size = U() < 0.5 ? G : 0;
    tirl_advantages_inputs in = {0};
    int tok = U() < 0.5;
    in.rewards = tok ? NULL : rw; in.token_rewards = tok ? tr : NULL;
    in.mask = m; in.seq_offsets = off; in.group_ids = o.group_size ? NULL : ids;
    in.old_logp = lp; in.sum_pi_squared = spp; in.rollout_is_weights = U() < 0.5 ? w : NULL;
    float *a[2], *r[2];
    int rc[2];
    for (int k = 0; k < 2; ++k) {
      a[k] = malloc(4 * N + 4); r[k] = malloc(4 * N + 4);
      memset(a[k], 0x7f, 4 * N); memset(r[k], 0x7f, 4 * N);
      tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
      rc[k] = f[k](&in, N, S, &o, a[k], r[k], cpu);
    }
    if (rc[0] != rc[1] || memcmp(a[0], a[1], 4 * N) || memcmp(r[0], r[1], 4 * N)) {
      if (bad++ < 5) fprintf(stderr, "trial %d differs: rc %d %d N %ld S %d est %d tok %d\n", trial, rc[0], rc[1], (long)N, S, o.estimator, tok);
    }
    for (int k = 0; k < 2; ++k) { free(a[k]); free(r[k]); }
    free(off); free(lp); free(spp); free(tr); free(w); free(rw); free(m); free(ids);
  }
  printf("%d trials, %d differ\n", trials, bad);
  return bad != 0;
}
