// Interleaved A/B of two builds of libtirl.so in one process on tirl_advantages at the
// bench's size (512 x 2048 tokens, the tool-use-like mask of benchmarks/data.ts's
// toolUseBatch: a 10% prompt, action spans of 40-200 tokens between 10-90 tool tokens, up
// to 10% padding; binary rewards; groups of 8), each beside a memmove of the bench's byte
// model (5 B/token, 9 for gae, 13 for the optimal-token baselines; half read, half
// written): rounds alternate A, B, copy. Inputs as benchmarks/advantages.ts builds them
// (gae: values uniform in [-0.5, 0.5), gamma 1, lam 0.95; gdpo: two components, weights 1,
// 0.5; optimal-token baselines: old_logp in [-3, 0], sum_pi_squared = e^(2 old_logp) + U/10).
//   cc -O2 -Inative/include benchmarks/native/ab_advantages.c -o /tmp/ab_adv -ldl -lm
//   cp build/Release/libtirl.so /tmp/a.so   (before the change; the build after it as b.so)
//   /tmp/ab_adv /tmp/a.so /tmp/b.so estimator [threads A[,threads B]] [rounds] [returns]
// estimator: a registry key (grpo, gdpo, reinforce_plus_plus, gae, ...). returns: 1 also
// writes the returns. Prints min and median milliseconds of wall and of the process's CPU
// time a call, and the largest |A - B| of the advantages.
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tirl/tirl.h"

typedef __typeof__(tirl_advantages)* adv_fn;
typedef __typeof__(tirl_advantages_options_default)* default_fn;
typedef __typeof__(tirl_set_num_threads)* threads_fn;

static uint64_t state = 88172645463325252ull;
static double uniform(void) {  // xorshift64, [0, 1)
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return (double)(state >> 11) * (1.0 / 9007199254740992.0);
}
static double clock_of(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static const char* kNames[] = {"grpo", "grpo_passk", "gdpo", "rloo", "reinforce_plus_plus",
                               "reinforce_plus_plus_baseline", "remax", "opo", "gpg", "gae",
                               "optimal_token_baseline", "tir_optimal_token_baseline"};

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s a.so b.so estimator [threads[,threads]] [rounds] [returns]\n", argv[0]);
    return 2;
  }
  int estimator = -1;
  for (int e = 0; e < 12; ++e) {
    if (strcmp(argv[3], kNames[e]) == 0) estimator = e;
  }
  if (estimator < 0) {
    fprintf(stderr, "unknown estimator %s\n", argv[3]);
    return 2;
  }
  const char* threads_arg = argc > 4 ? argv[4] : "1";
  const int rounds = argc > 5 ? atoi(argv[5]) : 30;
  const int with_returns = argc > 6 ? atoi(argv[6]) : 0;
  int threads[2];
  threads[0] = atoi(threads_arg);
  threads[1] = strchr(threads_arg, ',') ? atoi(strchr(threads_arg, ',') + 1) : threads[0];
  enum { B = 512, L = 2048, N = B * L, G = 8 };
  uint8_t* mask = calloc(N, 1);
  int32_t* offsets = malloc(sizeof(int32_t) * (B + 1));
  float* rewards = malloc(sizeof(float) * 2 * B);
  float* values = malloc(sizeof(float) * N);
  float* baselines = malloc(sizeof(float) * B);
  float* old_logp = malloc(sizeof(float) * N);
  float* sum_pi_squared = malloc(sizeof(float) * N);
  float* out[2] = {malloc(sizeof(float) * N), malloc(sizeof(float) * N)};
  float* ret[2] = {malloc(sizeof(float) * N), malloc(sizeof(float) * N)};
  const float weights[2] = {1.0f, 0.5f};
  for (int64_t s = 0; s <= B; ++s) offsets[s] = (int32_t)(s * L);
  for (int64_t s = 0; s < B; ++s) {
    const int64_t padding = (int64_t)(L * 0.1 * uniform());
    int64_t t = L / 10;
    for (int action = 1; t < L - padding; action = !action) {
      const int64_t span = action ? 40 + (int64_t)(161 * uniform()) : 10 + (int64_t)(81 * uniform());
      const int64_t end = t + span < L - padding ? t + span : L - padding;
      if (action) memset(mask + s * L + t, 1, (size_t)(end - t));
      t = end;
    }
  }
  for (int64_t s = 0; s < B; ++s) rewards[s] = uniform() < 0.5 ? 0.0f : 1.0f;
  for (int64_t s = 0; s < B; ++s) rewards[B + s] = rewards[(s - G + B) % B];
  for (int64_t s = 0; s < B; ++s) baselines[s] = uniform() < 0.5 ? 0.0f : 1.0f;
  for (int64_t i = 0; i < N; ++i) {
    values[i] = (float)(uniform() - 0.5);
    old_logp[i] = (float)(-3 * uniform());
    sum_pi_squared[i] = (float)(exp(2.0 * old_logp[i]) + 0.1 * uniform());
  }
  tirl_advantages_inputs in;
  memset(&in, 0, sizeof in);
  in.rewards = rewards;
  in.mask = mask;
  in.seq_offsets = offsets;
  const int grouped = estimator != 4 && estimator != 6 && estimator != 9;
  if (estimator == 9) in.values = values;
  if (estimator == 6) in.reward_baselines = baselines;
  if (estimator == 10 || estimator == 11) {
    in.old_logp = old_logp;
    in.sum_pi_squared = sum_pi_squared;
  }
  if (estimator == 2) in.reward_weights = weights;
  const size_t per_token = estimator == 9 ? 9 : estimator >= 10 ? 13 : 5;
  const size_t copy_bytes = (per_token * N + 8 * B + 4) / 2;
  char* copy_from = malloc(copy_bytes);
  char* copy_to = malloc(copy_bytes);
  memset(copy_from, 1, copy_bytes);
  memmove(copy_to, copy_from, copy_bytes);
  adv_fn call[2];
  tirl_advantages_options options[2];
  for (int k = 0; k < 2; ++k) {
    void* lib = dlopen(argv[1 + k], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    call[k] = (adv_fn)dlsym(lib, "tirl_advantages");
    options[k] = ((default_fn)dlsym(lib, "tirl_advantages_options_default"))();
    options[k].estimator = (tirl_advantage_estimator)estimator;
    if (grouped) options[k].group_size = G;
    if (estimator == 2) options[k].num_reward_keys = 2;
    if (estimator == 9) options[k].lam = 0.95;
    ((threads_fn)dlsym(lib, "tirl_set_num_threads"))(threads[k]);
  }
  const tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
  const char* names[3] = {"A", "B", "copy"};
  double* wall[3];
  double* cpu_time[3];
  for (int k = 0; k < 3; ++k) {
    wall[k] = malloc(sizeof(double) * (size_t)rounds);
    cpu_time[k] = malloc(sizeof(double) * (size_t)rounds);
  }
  for (int k = 0; k < 2; ++k) {  // warm up
    call[k](&in, N, B, &options[k], out[k], with_returns ? ret[k] : NULL, cpu);
  }
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < 3; ++i) {
      const int k = (r & 1) && i < 2 ? 1 - i : i;  // A, B, copy; B, A, copy
      const double start = clock_of(CLOCK_MONOTONIC), start_cpu = clock_of(CLOCK_PROCESS_CPUTIME_ID);
      if (k == 2) {
        memmove(copy_to, copy_from, copy_bytes);
      } else {
        const tirl_status status =
            call[k](&in, N, B, &options[k], out[k], with_returns ? ret[k] : NULL, cpu);
        if (status != TIRL_OK) {
          fprintf(stderr, "%s: status %d\n", names[k], (int)status);
          return 1;
        }
      }
      wall[k][r] = clock_of(CLOCK_MONOTONIC) - start;
      cpu_time[k][r] = clock_of(CLOCK_PROCESS_CPUTIME_ID) - start_cpu;
    }
  }
  double diff = 0.0, diff_ret = 0.0;
  int64_t differ = 0;
  for (int64_t i = 0; i < N; ++i) {
    const double d = fabs((double)out[0][i] - (double)out[1][i]);
    differ += out[0][i] != out[1][i];
    if (d > diff) diff = d;
    if (with_returns && fabs((double)ret[0][i] - (double)ret[1][i]) > diff_ret) {
      diff_ret = fabs((double)ret[0][i] - (double)ret[1][i]);
    }
  }
  for (int k = 0; k < 3; ++k) {
    qsort(wall[k], (size_t)rounds, sizeof(double), by_value);
    qsort(cpu_time[k], (size_t)rounds, sizeof(double), by_value);
    printf("%-4s wall min %.3f median %.3f ms, cpu min %.3f median %.3f ms\n", names[k],
           1e3 * wall[k][0], 1e3 * wall[k][rounds / 2], 1e3 * cpu_time[k][0],
           1e3 * cpu_time[k][rounds / 2]);
  }
  printf("%s: max |A - B| %.3g (%lld of %d differ), returns %.3g\n", argv[3], diff,
         (long long)differ, N, diff_ret);
  return 0;
}
