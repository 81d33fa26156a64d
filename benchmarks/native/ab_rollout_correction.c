// Interleaved A/B of two builds of libtirl.so in one process on rolloutCorrection at the
// bench's size (512 x 2048 tokens, tool-use-like mask: a 10% prompt, spans of 40-200
// action tokens between 10-90 tool tokens, up to 10% padding; logp uniform in [-5, 0],
// rollout_logp = logp + N(0, 0.1)), each beside a memmove of the op's 14 B/token (half read,
// half written, as `tirl bench` has it): rounds alternate A, B, copy.
//   cc -O2 -Inative/include benchmarks/native/ab_rollout_correction.c -o /tmp/ab_rc -ldl -lm
//   cp build/Release/libtirl.so /tmp/a.so   (before the change; the build after it as b.so)
//   /tmp/ab_rc /tmp/a.so /tmp/b.so [threads A[,threads B]] [mode] [rounds]
// mode: bench (token TIS + seq_mean_k3, the bench case; default), seq (sequence IS),
// geo (seq_mean_k1, the geometric mean ratio, no IS), seqrs (sequence IS + seq_sum_k2 +
// seq_max_k3), tokrs (IcePop token IS + token_k1 + token_k3). Threads "1,2" runs A on one
// thread and B on two (give the same file twice, as two copies on disk: dlopen shares one
// mapping per path). Prints min and median milliseconds a call, and a few statistics of
// each (which agree to rounding).
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tirl/tirl.h"

typedef __typeof__(tirl_rollout_correction)* rc_fn;
typedef __typeof__(tirl_rollout_correction_options_default)* default_fn;
typedef __typeof__(tirl_set_num_threads)* threads_fn;

static uint64_t state = 88172645463325252ull;
static double uniform(void) {  // xorshift64, [0, 1)
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return (double)(state >> 11) * (1.0 / 9007199254740992.0);
}
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void set_mode(tirl_rollout_correction_options* o, const char* mode) {
  if (strcmp(mode, "bench") == 0) {
    o->rollout_is = TIRL_ROLLOUT_IS_TOKEN;
    o->rollout_rs = 1u << TIRL_ROLLOUT_RS_SEQ_MEAN_K3;
    o->rollout_rs_threshold[TIRL_ROLLOUT_RS_SEQ_MEAN_K3] = 0.01;
  } else if (strcmp(mode, "seq") == 0) {
    o->rollout_is = TIRL_ROLLOUT_IS_SEQUENCE;
  } else if (strcmp(mode, "geo") == 0) {
    o->rollout_is = TIRL_ROLLOUT_IS_NONE;
    o->rollout_rs = 1u << TIRL_ROLLOUT_RS_SEQ_MEAN_K1;
    o->rollout_rs_threshold[TIRL_ROLLOUT_RS_SEQ_MEAN_K1] = 1.05;
  } else if (strcmp(mode, "seqrs") == 0) {
    o->rollout_is = TIRL_ROLLOUT_IS_SEQUENCE;
    o->rollout_rs = (1u << TIRL_ROLLOUT_RS_SEQ_SUM_K2) | (1u << TIRL_ROLLOUT_RS_SEQ_MAX_K3);
    o->rollout_rs_threshold[TIRL_ROLLOUT_RS_SEQ_SUM_K2] = 5;
    o->rollout_rs_threshold[TIRL_ROLLOUT_RS_SEQ_MAX_K3] = 0.05;
  } else if (strcmp(mode, "tokrs") == 0) {
    o->rollout_is = TIRL_ROLLOUT_IS_TOKEN;
    o->rollout_is_threshold_lower = 0.5;
    o->rollout_rs = (1u << TIRL_ROLLOUT_RS_TOKEN_K1) | (1u << TIRL_ROLLOUT_RS_TOKEN_K3);
    o->rollout_rs_threshold[TIRL_ROLLOUT_RS_TOKEN_K1] = 1.5;
    o->rollout_rs_threshold[TIRL_ROLLOUT_RS_TOKEN_K3] = 0.02;
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    exit(2);
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s a.so b.so [threads[,threads]] [mode] [rounds]\n", argv[0]);
    return 2;
  }
  const char* threads_arg = argc > 3 ? argv[3] : "1";
  const char* mode = argc > 4 ? argv[4] : "bench";
  const int rounds = argc > 5 ? atoi(argv[5]) : 20;
  int threads[2];
  threads[0] = atoi(threads_arg);
  threads[1] = strchr(threads_arg, ',') ? atoi(strchr(threads_arg, ',') + 1) : threads[0];
  enum { B = 512, L = 2048, N = B * L };
  float* logp = malloc(sizeof(float) * N);
  float* rollout_logp = malloc(sizeof(float) * N);
  uint8_t* mask = calloc(N, 1);
  int32_t* offsets = malloc(sizeof(int32_t) * (B + 1));
  float* weights = malloc(sizeof(float) * N);
  uint8_t* mask_out = malloc(N);
  const size_t copy_bytes = (size_t)14 * N / 2;
  char* copy_from = malloc(copy_bytes);
  char* copy_to = malloc(copy_bytes);
  double* times[3];
  for (int k = 0; k < 3; ++k) times[k] = malloc(sizeof(double) * (size_t)rounds);
  for (int64_t i = 0; i < N; ++i) {
    logp[i] = (float)(-5 * uniform());
    const double u1 = uniform() + 1e-12, u2 = uniform();
    rollout_logp[i] = (float)(logp[i] + 0.1 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
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
  rc_fn call[2];
  tirl_rollout_correction_options options[2];
  for (int k = 0; k < 2; ++k) {
    void* lib = dlopen(argv[1 + k], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    call[k] = (rc_fn)dlsym(lib, "tirl_rollout_correction");
    options[k] = ((default_fn)dlsym(lib, "tirl_rollout_correction_options_default"))();
    set_mode(&options[k], mode);
    ((threads_fn)dlsym(lib, "tirl_set_num_threads"))(threads[k]);
  }
  const tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
  const char* names[3] = {"A", "B", "copy"};
  tirl_rollout_correction_result result[2];
  for (int k = 0; k < 2; ++k) {  // warm up
    call[k](logp, rollout_logp, mask, N, offsets, B, &options[k], weights, mask_out, &result[k], cpu);
  }
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < 3; ++i) {
      const int k = (r & 1) && i < 2 ? 1 - i : i;  // A, B, copy; B, A, copy
      const double start = now();
      if (k == 2) {
        memmove(copy_to, copy_from, copy_bytes);
      } else {
        const tirl_status status = call[k](logp, rollout_logp, mask, N, offsets, B, &options[k],
                                           weights, mask_out, &result[k], cpu);
        if (status != TIRL_OK) {
          fprintf(stderr, "%s: status %d\n", names[k], (int)status);
          return 1;
        }
      }
      times[k][r] = now() - start;
    }
  }
  for (int k = 0; k < 3; ++k) {
    qsort(times[k], (size_t)rounds, sizeof(double), by_value);
    printf("%-4s min %.3f ms, median %.3f ms", names[k], 1e3 * times[k][0], 1e3 * times[k][rounds / 2]);
    if (k < 2) {
      printf("  (kl %.12g, k3_kl %.12g, is_mean %.12g, is_std %.12g)", result[k].kl,
             result[k].k3_kl, result[k].rollout_is_mean, result[k].rollout_is_std);
    }
    printf("\n");
  }
  return 0;
}
