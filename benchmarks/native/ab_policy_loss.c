// Interleaved A/B of two builds of libtirl.so in one process on tirl_policy_loss at the
// bench's size (512 x 2048 tokens, tool-use-like mask: a 10% prompt, spans of 40-200
// action tokens between 10-90 tool tokens, up to 10% padding; logp uniform in [-5, 0],
// old_logp = logp + N(0, 0.1), advantages N(0, 1)) with benchmarks/ppo_loss.ts's options
// for each loss, each beside a memmove of the bench's 17 B/token (half read, half written,
// as `tirl bench` has it): rounds alternate A, B, copy.
//   cc -O2 -Inative/include benchmarks/native/ab_policy_loss.c -o /tmp/ab_pl -ldl -lm
//   cp build/Release/libtirl.so /tmp/a.so   (before the change; the build after it as b.so)
//   /tmp/ab_pl /tmp/a.so /tmp/b.so [threads A[,threads B]] [loss] [rounds]
// loss: clip_cov (default), kl_cov, dppo_kl, dppo_tv, sapo, geo_mean, gpg, vanilla (dual clip 3). Threads "1,2" runs A
// on one thread and B on two (give the same file twice, as two copies on disk). Prints min
// and median milliseconds a call, the % of the copy's median, the process CPU time a call
// (min and median: steadier than the clock on a shared machine), and the loss and
// statistics of each (which agree to rounding).
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tirl/tirl.h"

typedef __typeof__(tirl_policy_loss)* loss_fn;
typedef __typeof__(tirl_policy_loss_options_default)* default_fn;
typedef __typeof__(tirl_set_num_threads)* threads_fn;

static uint64_t state = 88172645463325252ull;
static double uniform(void) {  // xorshift64, [0, 1)
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return (double)(state >> 11) * (1.0 / 9007199254740992.0);
}
static double normal(void) {
  const double u1 = uniform() + 1e-12, u2 = uniform();
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}
static double seconds(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// benchmarks/ppo_loss.ts's LOSS_OPTIONS.
static void set_loss(tirl_policy_loss_options* o, const char* loss) {
  o->ppo.clip_low = 0.2;
  o->ppo.clip_high = 0.2;
  if (strcmp(loss, "clip_cov") == 0) {
    o->policy_loss = TIRL_POLICY_CLIP_COV;
    o->clip_cov_ratio = 0.0002;
    o->clip_cov_lb = 1;
    o->clip_cov_ub = 5;
    o->seed = 0;
  } else if (strcmp(loss, "kl_cov") == 0) {
    o->policy_loss = TIRL_POLICY_KL_COV;
    o->kl_cov_ratio = 0.0002;
    o->ppo_kl_coef = 0.1;
  } else if (strcmp(loss, "dppo_kl") == 0 || strcmp(loss, "dppo_tv") == 0) {
    o->policy_loss = loss[5] == 'k' ? TIRL_POLICY_DPPO_KL : TIRL_POLICY_DPPO_TV;
    o->clip_ratio_c = 3;
  } else if (strcmp(loss, "sapo") == 0) {
    o->policy_loss = TIRL_POLICY_SAPO;
    o->tau_pos = 1;
    o->tau_neg = 1.05;
  } else if (strcmp(loss, "gpg") == 0) {
    o->policy_loss = TIRL_POLICY_GPG;
  } else if (strcmp(loss, "vanilla") == 0) {
    o->policy_loss = TIRL_POLICY_VANILLA;
    o->ppo.dual_clip = 3;
  } else if (strcmp(loss, "geo_mean") == 0) {
    o->policy_loss = TIRL_POLICY_GEO_MEAN;
  } else {
    fprintf(stderr, "unknown loss %s\n", loss);
    exit(2);
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s a.so b.so [threads[,threads]] [loss] [rounds]\n", argv[0]);
    return 2;
  }
  const char* threads_arg = argc > 3 ? argv[3] : "1";
  const char* loss = argc > 4 ? argv[4] : "clip_cov";
  const int rounds = argc > 5 ? atoi(argv[5]) : 20;
  int threads[2];
  threads[0] = atoi(threads_arg);
  threads[1] = strchr(threads_arg, ',') ? atoi(strchr(threads_arg, ',') + 1) : threads[0];
  enum { B = 512, L = 2048, N = B * L };
  float* logp = malloc(sizeof(float) * N);
  float* old_logp = malloc(sizeof(float) * N);
  float* advantages = malloc(sizeof(float) * N);
  uint8_t* mask = calloc(N, 1);
  int32_t* offsets = malloc(sizeof(int32_t) * (B + 1));
  float* grad = malloc(sizeof(float) * N);
  const size_t copy_bytes = (size_t)17 * N / 2;
  char* copy_from = malloc(copy_bytes);
  char* copy_to = malloc(copy_bytes);
  double* times[3];
  double* cpu_times[3];
  for (int k = 0; k < 3; ++k) {
    times[k] = malloc(sizeof(double) * (size_t)rounds);
    cpu_times[k] = malloc(sizeof(double) * (size_t)rounds);
  }
  for (int64_t i = 0; i < N; ++i) {
    logp[i] = (float)(-5 * uniform());
    old_logp[i] = (float)(logp[i] + 0.1 * normal());
    advantages[i] = (float)normal();
  }
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
  memset(copy_from, 1, copy_bytes);
  memmove(copy_to, copy_from, copy_bytes);
  memset(grad, 0, sizeof(float) * N);
  loss_fn call[2];
  tirl_policy_loss_options options[2];
  for (int k = 0; k < 2; ++k) {
    void* lib = dlopen(argv[1 + k], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    call[k] = (loss_fn)dlsym(lib, "tirl_policy_loss");
    options[k] = ((default_fn)dlsym(lib, "tirl_policy_loss_options_default"))();
    set_loss(&options[k], loss);
    ((threads_fn)dlsym(lib, "tirl_set_num_threads"))(threads[k]);
  }
  const tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
  const char* names[3] = {"A", "B", "copy"};
  tirl_policy_loss_result result[2];
  for (int r = -1; r < rounds; ++r) {  // round -1 warms up
    for (int i = 0; i < 3; ++i) {
      const int k = (r & 1) && i < 2 ? 1 - i : i;  // A, B, copy; B, A, copy
      const double start = seconds(CLOCK_MONOTONIC), cpu_start = seconds(CLOCK_PROCESS_CPUTIME_ID);
      if (k == 2) {
        memmove(copy_to, copy_from, copy_bytes);
      } else {
        result[k].struct_size = sizeof(tirl_policy_loss_result);
        const tirl_status status = call[k](logp, old_logp, advantages, mask, N, offsets, B, NULL, NULL,
                                           &options[k], grad, &result[k], cpu);
        if (status != TIRL_OK) {
          fprintf(stderr, "%s: status %d\n", names[k], (int)status);
          return 1;
        }
      }
      if (r >= 0) {
        times[k][r] = seconds(CLOCK_MONOTONIC) - start;
        cpu_times[k][r] = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
      }
    }
  }
  for (int k = 2; k >= 0; --k) {
    qsort(times[k], (size_t)rounds, sizeof(double), by_value);
    qsort(cpu_times[k], (size_t)rounds, sizeof(double), by_value);
  }
  const double copy = times[2][rounds / 2];
  for (int k = 0; k < 3; ++k) {
    printf("%-4s min %.3f ms, median %.3f ms (%.0f%% of copy), CPU min %.3f median %.3f ms", names[k],
           1e3 * times[k][0], 1e3 * times[k][rounds / 2], 100 * copy / times[k][rounds / 2],
           1e3 * cpu_times[k][0], 1e3 * cpu_times[k][rounds / 2]);
    if (k < 2) {
      printf("  (loss %.12g, clipFraction %.9g, approxKl %.9g, selected %lld)", result[k].ppo.loss,
             result[k].ppo.clip_fraction, result[k].ppo.approx_kl, (long long)result[k].selected_tokens);
    }
    printf("\n");
  }
  return 0;
}
