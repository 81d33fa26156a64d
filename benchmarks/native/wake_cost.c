// What waking a sleeping thread costs the thread that wakes it, as common/parallel.cc's
// pool does at each parallel_for: a helper sleeps on a condition variable, the caller
// signals it and times the signal (the futex wake system call), after a gap in which the
// caller either slept (both CPUs idle: a VM's idle vCPU halts, and waking it takes an
// inter-processor interrupt through the hypervisor) or spun (the caller's CPU busy, the
// helper's idle). Then the same with work: `passes` passes of `pass_us` of arithmetic split
// in 32 chunks claimed by both threads, against the caller alone; median of the rounds.
// It also counts the passes in which the woken helper ran on the caller's own CPU: then the
// two threads share one CPU and a second thread can only cost time. (The EPYC VM of
// 2026-12-06 runs a kernel with a `kernel.sched_vcpu_pack` sysctl, printed when present,
// that packs a wake-up onto the waker's vCPU: 94% of the passes after both threads slept.)
// With steer = 1 the caller first allows the helper every CPU of its own but the one it runs
// on, as the pool does (common/parallel.cc, steer_helpers); on that VM, 2026-12-07, after
// both slept: 3 passes of 100 us 0.91x -> 1.16x, 1 pass of 300 us 0.93x -> 1.55x, the helper
// on the caller's CPU in 292 of 303 passes -> 0.
//   cc -O2 -pthread benchmarks/native/wake_cost.c -o /tmp/wake_cost && /tmp/wake_cost [rounds=101] [passes=3] [pass_us=100] [gap_us=3000] [steer=0]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// Arithmetic that no memory limits: two independent multiply-add chains.
static volatile double sink;
static double iterations_per_us;
static void work(double us) {
  const long n = (long)(us * iterations_per_us);
  double x = 1, y = 1;
  for (long i = 0; i < n; ++i) {
    x = x * 0.9999999 + 1e-9;
    y = y * 0.9999998 + 1e-9;
  }
  sink = x + y;
}

enum { kChunks = 32 };
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, finished = PTHREAD_COND_INITIALIZER;
static int posted, helper_done;          // under mutex
static atomic_int next_chunk;
static double chunk_us;
static atomic_int caller_cpu, passes_on_caller_cpu;
static int steer;  // allow the helper every CPU of the caller's but its own before the signal
static pthread_t helper_thread;
static cpu_set_t allowed;

static void run_chunks(void) {
  while (atomic_fetch_add(&next_chunk, 1) < kChunks) work(chunk_us);
}

static void* helper(void* unused) {
  (void)unused;
  int seen = 0;
  pthread_mutex_lock(&mutex);
  for (;;) {
    while (posted == seen) pthread_cond_wait(&wake, &mutex);
    seen = posted;
    pthread_mutex_unlock(&mutex);
    if (sched_getcpu() == atomic_load(&caller_cpu)) atomic_fetch_add(&passes_on_caller_cpu, 1);
    run_chunks();
    pthread_mutex_lock(&mutex);
    helper_done = seen;
    pthread_cond_signal(&finished);
  }
  return NULL;
}

static void gap(int busy, double us) {
  if (busy) {
    const double end = now_us() + us;
    while (now_us() < end) {
    }
  } else {
    struct timespec t = {0, (long)(us * 1e3)};
    nanosleep(&t, NULL);
  }
}

// One pass on two threads; returns the microseconds the signal took.
static double two_thread_pass(void) {
  atomic_store(&next_chunk, 0);
  pthread_mutex_lock(&mutex);
  const int job = ++posted;
  pthread_mutex_unlock(&mutex);
  atomic_store(&caller_cpu, sched_getcpu());
  const double t0 = now_us();
  if (steer) {  // timed with the signal: the caller pays for it
    cpu_set_t others = allowed;
    CPU_CLR(atomic_load(&caller_cpu), &others);
    if (CPU_COUNT(&others) > 0) pthread_setaffinity_np(helper_thread, sizeof others, &others);
  }
  pthread_cond_signal(&wake);
  const double signal_us = now_us() - t0;
  run_chunks();
  pthread_mutex_lock(&mutex);
  while (helper_done != job) pthread_cond_wait(&finished, &mutex);
  pthread_mutex_unlock(&mutex);
  return signal_us;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 101;
  const int passes = argc > 2 ? atoi(argv[2]) : 3;
  const double pass_us = argc > 3 ? atof(argv[3]) : 100;
  const double gap_us = argc > 4 ? atof(argv[4]) : 3000;
  const double t0 = now_us();
  iterations_per_us = 1;
  work(2e7);  // 20 M iterations to calibrate
  iterations_per_us = 2e7 / (now_us() - t0);
  chunk_us = pass_us / kChunks;
  FILE* pack = fopen("/proc/sys/kernel/sched_vcpu_pack", "r");
  if (pack) {
    int value;
    if (fscanf(pack, "%d", &value) == 1) printf("kernel.sched_vcpu_pack = %d\n", value);
    fclose(pack);
  }
  steer = argc > 5 ? atoi(argv[5]) : 0;
  sched_getaffinity(0, sizeof allowed, &allowed);
  pthread_create(&helper_thread, NULL, helper, NULL);
  double* one = malloc(sizeof(double) * rounds);
  double* two = malloc(sizeof(double) * rounds);
  double* signal = malloc(sizeof(double) * rounds);
  for (int busy = 0; busy <= 1; ++busy) {
    atomic_store(&passes_on_caller_cpu, 0);
    for (int r = 0; r < rounds; ++r) {
      gap(busy, gap_us);
      double start = now_us();
      for (int p = 0; p < passes; ++p) work(pass_us);
      one[r] = now_us() - start;
      gap(busy, gap_us);
      start = now_us();
      signal[r] = 0;
      for (int p = 0; p < passes; ++p) signal[r] += two_thread_pass() / passes;
      two[r] = now_us() - start;
    }
    qsort(one, rounds, sizeof(double), by_value);
    qsort(two, rounds, sizeof(double), by_value);
    qsort(signal, rounds, sizeof(double), by_value);
    printf("%safter %.0f us %s: %d passes of %.0f us, 1 thread %.1f us, 2 threads %.1f us (%.2fx); the signal %.1f us a pass (medians of %d); the helper on the caller's CPU in %d of %d passes\n",
           steer ? "steered, " : "", gap_us, busy ? "of the caller spinning" : "of both threads sleeping", passes, pass_us, one[rounds / 2],
           two[rounds / 2], one[rounds / 2] / two[rounds / 2], signal[rounds / 2], rounds,
           atomic_load(&passes_on_caller_cpu), rounds * passes);
  }
  return 0;
}
