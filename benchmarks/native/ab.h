// What the interleaved A/B harnesses of benchmarks/native (ab_*.c) share: two builds of
// libtirl.so loaded in one process, rounds that alternate A, B and a memmove of the op's
// bytes (A, B, copy; then B, A, copy, so that both builds see the same machine state), and
// the inputs `tirl bench` builds (benchmarks/data.ts). Each harness sets up its op and
// prints its results; see its header for the command line.
#pragma once

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t ab_state = 88172645463325252ull;
static inline double ab_uniform(void) {  // xorshift64, [0, 1)
  ab_state ^= ab_state << 13;
  ab_state ^= ab_state >> 7;
  ab_state ^= ab_state << 17;
  return (double)(ab_state >> 11) * (1.0 / 9007199254740992.0);
}
static inline double ab_normal(void) {  // Box-Muller
  const double u1 = ab_uniform() + 1e-12, u2 = ab_uniform();
  return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}
static inline double ab_seconds(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static inline int ab_by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// benchmarks/data.ts's toolUseBatch mask over `seqs` sequences of `len` tokens (mask zeroed
// by the caller): a 10% prompt, action spans of 40-200 tokens between 10-90 tool tokens,
// up to 10% padding.
static inline void ab_tool_use_mask(uint8_t* mask, int64_t seqs, int64_t len) {
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t padding = (int64_t)(len * 0.1 * ab_uniform());
    int64_t t = len / 10;
    for (int action = 1; t < len - padding; action = !action) {
      const int64_t span = action ? 40 + (int64_t)(161 * ab_uniform()) : 10 + (int64_t)(81 * ab_uniform());
      const int64_t end = t + span < len - padding ? t + span : len - padding;
      if (action) memset(mask + s * len + t, 1, (size_t)(end - t));
      t = end;
    }
  }
}

// "N" or "A,B": the thread counts of builds A and B.
static inline void ab_threads(const char* arg, int threads[2]) {
  threads[0] = atoi(arg);
  threads[1] = strchr(arg, ',') ? atoi(strchr(arg, ',') + 1) : threads[0];
}

// Opens build `path` (each build its own copy on disk: dlopen shares one mapping per path)
// with `threads` threads (0: the library's default, TIRL_NUM_THREADS or the cores); exits
// on failure.
static inline void* ab_open(const char* path, int threads) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    exit(1);
  }
  if (threads > 0) ((int (*)(int))dlsym(lib, "tirl_set_num_threads"))(threads);
  return lib;
}
static inline void* ab_symbol(void* lib, const char* name) {
  void* symbol = dlsym(lib, name);
  if (symbol == NULL) {
    fprintf(stderr, "%s\n", dlerror());
    exit(1);
  }
  return symbol;
}

// Wall and process CPU seconds of each round of A, B and the copy, sorted once run.
typedef struct {
  int rounds;
  double* wall[3];
  double* cpu[3];
} AbTimes;

// One warm-up round, then `rounds` timed ones of call(0, context), call(1, context) and a
// memmove of `copy_bytes` (half the op's bytes read, half written). call returns 0 on
// success; a failure is reported and ends the process. With AB_EVICT_MB=n in the
// environment, an untimed sweep of n MB before each call and copy starts every one from
// evicted caches (600 evicts this VM's 300 MB L3): one load a cache line, read-only as
// `tirl bench`'s cold cases sweep (benchmarks/README.md, "Cache state"), so that no dirty
// line is left for the timed call to write back. The buffer is written once, at allocation
// (untouched pages would all read the one zero page). The sweep runs on this one thread,
// enough for this one-thread A/B; the bench sweeps on every core.
static inline AbTimes ab_run(int rounds, int (*call)(int build, void* context), void* context,
                      size_t copy_bytes) {
  AbTimes times = {rounds, {0}, {0}};
  for (int k = 0; k < 3; ++k) {
    times.wall[k] = malloc(sizeof(double) * (size_t)rounds);
    times.cpu[k] = malloc(sizeof(double) * (size_t)rounds);
  }
  char* copy_from = malloc(copy_bytes);
  char* copy_to = malloc(copy_bytes);
  memset(copy_from, 1, copy_bytes);
  memmove(copy_to, copy_from, copy_bytes);
  const char* evict_mb = getenv("AB_EVICT_MB");
  const size_t sweep_bytes = evict_mb != NULL ? (size_t)atol(evict_mb) << 20 : 0;
  unsigned char* sweep = sweep_bytes > 0 ? malloc(sweep_bytes) : NULL;
  if (sweep != NULL) memset(sweep, 1, sweep_bytes);
  volatile unsigned sweep_sink = 0;  // keeps the sweep's loads
  for (int r = -1; r < rounds; ++r) {
    for (int i = 0; i < 3; ++i) {
      const int k = (r & 1) && i < 2 ? 1 - i : i;  // A, B, copy; B, A, copy
      unsigned sweep_sum = 0;
      for (size_t b = 0; b < sweep_bytes; b += 64) sweep_sum += sweep[b];
      sweep_sink = sweep_sink + sweep_sum;
      const double start = ab_seconds(CLOCK_MONOTONIC), cpu_start = ab_seconds(CLOCK_PROCESS_CPUTIME_ID);
      if (k == 2) {
        memmove(copy_to, copy_from, copy_bytes);
      } else if (call(k, context) != 0) {
        fprintf(stderr, "%s failed\n", k == 0 ? "A" : "B");
        exit(1);
      }
      if (r >= 0) {
        times.wall[k][r] = ab_seconds(CLOCK_MONOTONIC) - start;
        times.cpu[k][r] = ab_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
      }
    }
  }
  for (int k = 0; k < 3; ++k) {
    qsort(times.wall[k], (size_t)rounds, sizeof(double), ab_by_value);
    qsort(times.cpu[k], (size_t)rounds, sizeof(double), ab_by_value);
  }
  free(copy_from);
  free(copy_to);
  free(sweep);
  return times;
}

// Prints min and median milliseconds of wall and CPU time of A, B and the copy, and each
// build's median as a percentage of the copy's.
static inline void ab_print(const AbTimes* t) {
  static const char* const names[3] = {"A", "B", "copy"};
  const double copy = t->wall[2][t->rounds / 2];
  for (int k = 0; k < 3; ++k) {
    printf("%-4s wall min %.3f median %.3f ms (%.0f%% of copy), cpu min %.3f median %.3f ms\n",
           names[k], 1e3 * t->wall[k][0], 1e3 * t->wall[k][t->rounds / 2],
           100 * copy / t->wall[k][t->rounds / 2], 1e3 * t->cpu[k][0], 1e3 * t->cpu[k][t->rounds / 2]);
  }
}
