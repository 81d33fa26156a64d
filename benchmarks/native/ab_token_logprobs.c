// Interleaved A/B of two builds of libtirl.so in one process on tokenLogprobs (forward, or
// forward + backward), f32 and bf16 logits like the bench's (normal, sd 2, four +12 spikes a
// row), each round A then B (B then A on odd rounds), both dtypes:
//   cc -O2 -Inative/include benchmarks/native/ab_token_logprobs.c -o /tmp/ab_tlp -ldl -lm
//   cp build/Release/libtirl.so /tmp/a.so   (before the change; the build after it as b.so)
//   TIRL_NUM_THREADS=1 /tmp/ab_tlp /tmp/a.so /tmp/b.so N V rounds reps backward
// e.g. 16 32000 25 20 0 (logits in L2: the arithmetic), 4096 32000 9 1 0 (the bench shape).
// Times are the calling thread's CPU time (with one thread, robust on a loaded machine), or
// wall time with WALL=1 (needed for 2 threads); prints min and median ns a logit, the B/A
// ratios and bf16's speed-up over f32. Each library is its own copy on disk.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tirl/tirl.h"
typedef __typeof__(tirl_token_logprobs)* fwd_fn;
typedef __typeof__(tirl_token_logprobs_backward)* bwd_fn;
static clockid_t clk = CLOCK_THREAD_CPUTIME_ID;
static double now(void) { struct timespec t; clock_gettime(clk, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
static uint64_t st = 88172645463325252ull;
static double unit(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return ((st >> 11) + 0.5) / 9007199254740992.0; }
int main(int argc, char** argv) {
  if (argc < 8) return 2;
  if (getenv("WALL")) clk = CLOCK_MONOTONIC;
  fwd_fn f[2]; bwd_fn b[2];
  for (int l = 0; l < 2; ++l) { void* h = dlopen(argv[1 + l], RTLD_NOW | RTLD_LOCAL); if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    f[l] = (fwd_fn)dlsym(h, "tirl_token_logprobs"); b[l] = (bwd_fn)dlsym(h, "tirl_token_logprobs_backward"); }
  int64_t N = atoll(argv[3]), V = atoll(argv[4]), E = N * V; int rounds = atoi(argv[5]), reps = atoi(argv[6]), bwd = atoi(argv[7]);
  float* x = malloc(E * 4); uint16_t* xb = malloc(E * 2);
  int32_t* lab = malloc(N * 4); float* lp[2] = {malloc(N * 4), malloc(N * 4)}; float* g = malloc(N * 4);
  float* grad[2] = {bwd ? malloc(E * 4) : NULL, bwd ? malloc(E * 4) : NULL};
  for (int64_t i = 0; i < E; i += 2) { double r = sqrt(-2 * log(unit())), t = 6.283185307179586 * unit();
    x[i] = 2 * r * cos(t); if (i + 1 < E) x[i + 1] = 2 * r * sin(t); }
  for (int64_t t = 0; t < N; ++t) { for (int k = 0; k < 4; ++k) x[t * V + (int64_t)(unit() * V)] += 12; lab[t] = (int32_t)(unit() * V); g[t] = unit() - 0.5; }
  for (int64_t i = 0; i < E; ++i) { uint32_t u; memcpy(&u, &x[i], 4); u += 0x7fff + ((u >> 16) & 1); xb[i] = u >> 16; }
  tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
  double* ts[2][2]; for (int d = 0; d < 2; ++d) for (int l = 0; l < 2; ++l) ts[d][l] = malloc(rounds * 8);
  for (int r = -1; r < rounds; ++r) for (int d = 0; d < 2; ++d) for (int l0 = 0; l0 < 2; ++l0) {
    int l = (r & 1) ? 1 - l0 : l0; const void* lg = d ? (const void*)xb : (const void*)x; tirl_dtype dt = d ? TIRL_DTYPE_BF16 : TIRL_DTYPE_F32;
    double t0 = now();
    for (int k = 0; k < reps; ++k) { f[l](lg, dt, N, V, lab, 1.0, lp[l], NULL, cpu); if (bwd) b[l](lg, dt, N, V, lab, 1.0, g, NULL, grad[l], cpu); }
    if (r >= 0) ts[d][l][r] = (now() - t0) / reps / E;
  }
  for (int d = 0; d < 2; ++d) { for (int l = 0; l < 2; ++l) qsort(ts[d][l], rounds, 8, cmp);
    printf("%lldx%lld %s %s: A min %.4f med %.4f | B min %.4f med %.4f ns/logit | B/A min %.3f med %.3f\n", (long long)N, (long long)V, d ? "bf16" : "f32 ",
      bwd ? "fwd+bwd" : "fwd", ts[d][0][0], ts[d][0][rounds / 2], ts[d][1][0], ts[d][1][rounds / 2], ts[d][1][0] / ts[d][0][0], ts[d][1][rounds / 2] / ts[d][0][rounds / 2]); }
  printf("bf16/f32 speed-up: A min %.3f med %.3f | B min %.3f med %.3f\n", ts[0][0][0] / ts[1][0][0], ts[0][0][rounds/2] / ts[1][0][rounds/2], ts[0][1][0] / ts[1][1][0], ts[0][1][rounds/2] / ts[1][1][rounds/2]);
  return 0;
}
