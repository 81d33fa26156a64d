/* tirl_stream: the hardware reference for `tirl bench`.
 *
 * 1. STREAM-style copy (memcpy) and triad (a[i] = b[i] + s * c[i]) over arrays much larger
 *    than the last-level cache, with 1..T threads (each thread owns one contiguous slice),
 *    best of the repetitions as STREAM reports. Bytes counted as STREAM does: copy moves
 *    2 x 4 B per element, triad 3 x 4 B (write-allocate traffic is not counted).
 * 2. Optionally the time of one 1,024-token ppoLoss called straight through the C ABI
 *    (libtirl.so opened with dlopen, so this program builds before that kernel exists):
 *    the kernel alone, without Node.js or the N-API binding, for the binding-overhead row.
 *
 * Usage: tirl_stream [--threads T] [--mib M] [--reps R] [--libtirl PATH]
 * Prints one JSON object on stdout.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tirl/tirl.h"

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef enum { KERNEL_COPY, KERNEL_TRIAD } kernel_kind;

typedef struct {
  kernel_kind kind;
  float *a, *b, *c;
  size_t begin, end;
  pthread_barrier_t* start;
} slice;

static void run_slice(const slice* s) {
  if (s->kind == KERNEL_COPY) {
    memcpy(s->a + s->begin, s->b + s->begin, (s->end - s->begin) * sizeof(float));
  } else {
    const float scalar = 3.0f;
    float* restrict a = s->a;
    const float* restrict b = s->b;
    const float* restrict c = s->c;
    for (size_t i = s->begin; i < s->end; ++i) a[i] = b[i] + scalar * c[i];
  }
}

static void* slice_thread(void* arg) {
  slice* s = (slice*)arg;
  pthread_barrier_wait(s->start);
  run_slice(s);
  return NULL;
}

/* One timed pass with `threads` threads (the caller is thread 0). Thread start-up is
 * outside the timed region: all threads meet at a barrier first. */
static double timed_pass(kernel_kind kind, float* a, float* b, float* c, size_t n, int threads) {
  pthread_t ids[64];
  slice slices[64];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)threads);
  for (int t = 0; t < threads; ++t) {
    slices[t] = (slice){kind, a, b, c, n * (size_t)t / (size_t)threads,
                        n * (size_t)(t + 1) / (size_t)threads, &start};
    if (t > 0) pthread_create(&ids[t], NULL, slice_thread, &slices[t]);
  }
  pthread_barrier_wait(&start); /* all threads started: the clock starts now */
  double t0 = now_seconds();
  run_slice(&slices[0]);
  for (int t = 1; t < threads; ++t) pthread_join(ids[t], NULL);
  double elapsed = now_seconds() - t0;
  pthread_barrier_destroy(&start);
  return elapsed;
}

static double best_gbps(kernel_kind kind, float* a, float* b, float* c, size_t n, int threads,
                        int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t = timed_pass(kind, a, b, c, n, threads);
    if (t < best) best = t;
  }
  double bytes = (double)n * sizeof(float) * (kind == KERNEL_COPY ? 2.0 : 3.0);
  return bytes / best / 1e9;
}

static int compare_doubles(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return (a > b) - (a < b);
}

typedef tirl_status (*ppo_loss_fn)(const float*, const float*, const float*, const uint8_t*,
                                   int64_t, const int32_t*, int64_t, const float*, const float*,
                                   const tirl_ppo_options*, float*, tirl_ppo_result*, tirl_device);
typedef tirl_ppo_options (*ppo_defaults_fn)(void);
typedef tirl_status (*set_threads_fn)(int32_t);

/* Median microseconds of one 1,024-token ppoLoss (forward + gradient) through the C ABI,
 * with the same inputs and options as the harness's binding-overhead case. */
static int ppo_call_microseconds(const char* path, int threads, double* median_us,
                                 const char** why) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    *why = dlerror();
    return 0;
  }
  ppo_loss_fn ppo = (ppo_loss_fn)dlsym(lib, "tirl_ppo_loss");
  ppo_defaults_fn defaults = (ppo_defaults_fn)dlsym(lib, "tirl_ppo_options_default");
  set_threads_fn set_threads = (set_threads_fn)dlsym(lib, "tirl_set_num_threads");
  if (ppo == NULL || defaults == NULL || set_threads == NULL) {
    *why = "libtirl has no tirl_ppo_loss yet";
    return 0;
  }
  set_threads(threads);
  enum { N = 1024, CALLS = 20000 };
  static float logp[N], old_logp[N], advantages[N], grad[N];
  static uint8_t mask[N];
  for (int i = 0; i < N; ++i) {
    logp[i] = -1.0f - 0.001f * (float)(i % 97);
    old_logp[i] = logp[i] + 0.01f * (float)((i % 13) - 6);
    advantages[i] = (float)((i % 7) - 3);
    mask[i] = (uint8_t)(i % 5 != 0);
  }
  tirl_ppo_options options = defaults();
  tirl_ppo_result result;
  tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
  static double samples[CALLS];
  for (int i = 0; i < 2000; ++i) {
    ppo(logp, old_logp, advantages, mask, N, NULL, 0, NULL, NULL, &options, grad, &result, cpu);
  }
  for (int i = 0; i < CALLS; ++i) {
    double t0 = now_seconds();
    ppo(logp, old_logp, advantages, mask, N, NULL, 0, NULL, NULL, &options, grad, &result, cpu);
    samples[i] = now_seconds() - t0;
  }
  qsort(samples, CALLS, sizeof(double), compare_doubles);
  *median_us = samples[CALLS / 2] * 1e6;
  return 1;
}

int main(int argc, char** argv) {
  int max_threads = 2, reps = 10;
  size_t mib = 256; /* per array: far beyond any last-level cache */
  const char* libtirl = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--threads") == 0) max_threads = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--mib") == 0) mib = (size_t)atol(argv[i + 1]);
    else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--libtirl") == 0) libtirl = argv[i + 1];
    else {
      fprintf(stderr, "tirl_stream: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (max_threads < 1 || max_threads > 64 || reps < 1 || mib < 1) {
    fprintf(stderr, "tirl_stream: expected 1 <= threads <= 64, reps >= 1, mib >= 1\n");
    return 2;
  }
  size_t n = mib * 1024 * 1024 / sizeof(float);
  /* One block, each array half a page and a cache line after the previous one: separate
   * mallocs share a page offset, and 4K-aliased source and target slow memcpy down. */
  const size_t gap = (2048 + 64) / sizeof(float);
  float* block = malloc((3 * n + 2 * gap) * sizeof(float));
  float* a = block;
  float* b = a + n + gap;
  float* c = b + n + gap;
  if (block == NULL) {
    fprintf(stderr, "tirl_stream: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < n; ++i) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; }

  printf("{\"arrayMiB\": %zu, \"reps\": %d, \"copyGBps\": [", mib, reps);
  for (int t = 1; t <= max_threads; ++t) {
    printf("%s%.3f", t > 1 ? ", " : "", best_gbps(KERNEL_COPY, a, b, c, n, t, reps));
  }
  printf("], \"triadGBps\": [");
  for (int t = 1; t <= max_threads; ++t) {
    printf("%s%.3f", t > 1 ? ", " : "", best_gbps(KERNEL_TRIAD, a, b, c, n, t, reps));
  }
  printf("]");
  if (libtirl != NULL) {
    double us = 0;
    const char* why = NULL;
    if (ppo_call_microseconds(libtirl, max_threads, &us, &why)) {
      printf(", \"ppoLoss1024CallUs\": %.3f", us);
    } else {
      printf(", \"ppoLoss1024Skipped\": \"%s\"", why);
    }
  }
  printf("}\n");
  free(block);
  return 0;
}
