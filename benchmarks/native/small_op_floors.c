// Floors of the small ops of issue 20 against a memmove of their bytes, on one core:
//   dpoLoss, 65,536 pairs: its memory pattern alone (4 f32 streams read, 4 written) with
//     the arithmetic replaced by subtractions;
//   groupAdvantages, 65,536 rewards in groups of 8: the divider alone (per group
//     sqrt(ss / 7) + eps and its reciprocal in double, as group_scale computes them, four
//     groups a vector), and as the kernel computes it since (ss / 7 as a multiply and two
//     FMAs, cpu/group_advantages_divide.h), against a memmove of the op's 8 B/reward;
//   groupAdvantages in groups of 8, avx512 path (where the CPU has it): the blocked path's
//     data movement alone, per 64 rewards the 16 two-source permutes of the 8x8 transposes
//     (in and out), 4 extracts and 4 inserts of 256-bit halves and the 16 conversions
//     between float and double (two uops each on the two 512-bit ports), no arithmetic;
//   groupAdvantages by random ids: what sorting the rewards by group first would cost
//     (the positions of a stable counting sort, then the scatter of the rewards into group
//     order), against one scatter-add sweep, the unit of the three sweeps the op does
//     (scatter_floor.c).
//   dpoLoss's memory pattern on 2 threads too (each half the pairs; the helper spins on a
//     flag, so no wake-up is timed), by wall clock, against the 1-thread memmove.
//   cc -O3 -mavx2 -mfma benchmarks/native/small_op_floors.c -o /tmp/floors -lpthread && /tmp/floors
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double wall_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { N = 65536, G = N / 8, ROUNDS = 200 };
static float f[8][N];
static double ss[G], inverse[G], sums[G];
static int32_t ids[N], cursor[G], position[N];
static float sorted[N];
static char copy_buffer[32 * N + 4096];

__attribute__((noinline)) static void dpo_streams_range(int first, int last) {
  const float* restrict a = f[0];
  const float* restrict b = f[1];
  const float* restrict c = f[2];
  const float* restrict d = f[3];
  float* restrict w = f[4];
  float* restrict x = f[5];
  float* restrict y = f[6];
  float* restrict z = f[7];
  for (int i = first; i < last; ++i) {
    const float p = a[i] - c[i], q = b[i] - d[i];
    w[i] = p - q;
    x[i] = q - p;
    y[i] = p;
    z[i] = q;
  }
}

static void dpo_streams(void) { dpo_streams_range(0, N); }

// The 2-thread form: the helper takes the second half whenever `round` moves on.
static atomic_int round_posted, round_done;

static void* helper(void* unused) {
  (void)unused;
  int seen = 0;
  for (;;) {
    int posted;
    while ((posted = atomic_load_explicit(&round_posted, memory_order_acquire)) == seen) {
      _mm_pause();
    }
    if (posted < 0) return NULL;
    seen = posted;
    dpo_streams_range(N / 2, N);
    atomic_store_explicit(&round_done, seen, memory_order_release);
  }
}

static void dpo_streams_2(void) {
  const int next = atomic_load(&round_posted) + 1;
  atomic_store_explicit(&round_posted, next, memory_order_release);
  dpo_streams_range(0, N / 2);
  while (atomic_load_explicit(&round_done, memory_order_acquire) != next) _mm_pause();
}

__attribute__((noinline)) static void divider(void) {
  for (int g = 0; g < G; g += 4) {
    const __m256d s = _mm256_div_pd(_mm256_loadu_pd(ss + g), _mm256_set1_pd(7.0));
    const __m256d d = _mm256_add_pd(_mm256_sqrt_pd(s), _mm256_set1_pd(1e-6));
    _mm256_storeu_pd(inverse + g, _mm256_div_pd(_mm256_set1_pd(1.0), d));
  }
}

// divider() as the kernel does it now: ss / 7 by Markstein's correction (the fallback
// division for lanes outside [2^-1000, DBL_MAX] never runs on these values).
__attribute__((noinline)) static void divider_now(void) {
  const __m256d seven = _mm256_set1_pd(7.0), y = _mm256_set1_pd(1.0 / 7.0);
  for (int g = 0; g < G; g += 4) {
    const __m256d a = _mm256_loadu_pd(ss + g);
    const __m256d q = _mm256_mul_pd(a, y);
    const __m256d s = _mm256_fmadd_pd(_mm256_fnmadd_pd(q, seven, a), y, q);
    const __m256d d = _mm256_add_pd(_mm256_sqrt_pd(s), _mm256_set1_pd(1e-6));
    _mm256_storeu_pd(inverse + g, _mm256_div_pd(_mm256_set1_pd(1.0), d));
  }
}

// The permutes' indices do not change their cost: any in-range ones will do.
__attribute__((noinline, target("avx512f"))) static void groups_of_8_movement(void) {
  const __m512i index = _mm512_set_epi32(31, 14, 29, 12, 27, 10, 25, 8, 23, 6, 21, 4, 19, 2, 17, 0);
  for (int b = 0; b < N; b += 64) {
    __m512 z[4], t[4];
    for (int k = 0; k < 4; ++k) z[k] = _mm512_loadu_ps(f[0] + b + 16 * k);
    for (int k = 0; k < 4; ++k) t[k] = _mm512_permutex2var_ps(z[k], index, z[(k + 1) & 3]);
    for (int k = 0; k < 4; ++k) z[k] = _mm512_permutex2var_ps(t[k], index, t[(k + 2) & 3]);
    __m512d d[8];
    for (int k = 0; k < 4; ++k) {
      d[2 * k] = _mm512_cvtps_pd(_mm512_castps512_ps256(z[k]));
      d[2 * k + 1] = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z[k]), 1)));
    }
    for (int k = 0; k < 4; ++k) {
      const __m256 low = _mm512_cvtpd_ps(d[2 * k]), high = _mm512_cvtpd_ps(d[2 * k + 1]);
      z[k] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(low)), _mm256_castps_pd(high), 1));
    }
    for (int k = 0; k < 4; ++k) t[k] = _mm512_permutex2var_ps(z[k], index, z[(k + 1) & 3]);
    for (int k = 0; k < 4; ++k) _mm512_storeu_ps(f[4] + b + 16 * k, _mm512_permutex2var_ps(t[k], index, t[(k + 2) & 3]));
  }
}

__attribute__((noinline)) static void sort_by_group(void) {
  memset(cursor, 0, sizeof cursor);
  for (int i = 0; i < N; ++i) ++cursor[ids[i]];
  int next = 0;
  for (int g = 0; g < G; ++g) {
    const int count = cursor[g];
    cursor[g] = next;
    next += count;
  }
  for (int i = 0; i < N; ++i) position[i] = cursor[ids[i]]++;
  for (int i = 0; i < N; ++i) sorted[position[i]] = f[0][i];
}

__attribute__((noinline)) static void scatter_add(void) {
  memset(sums, 0, sizeof sums);
  for (int i = 0; i < N; ++i) sums[ids[i]] += f[0][i];
}

#define BEST(label, body)                                              \
  double label = 1e9;                                                  \
  for (int round = 0; round < ROUNDS; ++round) {                       \
    const double t0 = cpu_now();                                       \
    body;                                                              \
    __asm__ volatile("" ::: "memory");                                 \
    const double t = cpu_now() - t0;                                   \
    if (t < label) label = t;                                          \
  }

int main(void) {
  srand(4);
  for (int k = 0; k < 8; ++k)
    for (int i = 0; i < N; ++i) f[k][i] = (float)rand() / RAND_MAX;
  for (int g = 0; g < G; ++g) ss[g] = 1.0 + g * 1e-3;
  for (int i = 0; i < N; ++i) ids[i] = i / 8;
  for (int i = N - 1; i > 0; --i) {
    const int j = rand() % (i + 1), t = ids[i];
    ids[i] = ids[j];
    ids[j] = t;
  }
  memset(copy_buffer, 1, sizeof copy_buffer);
  // Source and target in one buffer, half a page plus a cache line apart (as tirl bench).
  char* target = copy_buffer + 16 * N + 2048 + 64;
  BEST(dpo, dpo_streams());
  BEST(copy_dpo, memmove(target, copy_buffer, 16 * N));
  BEST(divide, divider());
  BEST(divide_now, divider_now());
  BEST(copy_group, memmove(target, copy_buffer, 4 * N));
  const int has_avx512 = __builtin_cpu_supports("avx512f");
  double movement = 0;
  if (has_avx512) {
    BEST(moved, groups_of_8_movement());
    movement = moved;
  }
  BEST(sort, sort_by_group());
  BEST(sweep, scatter_add());
  pthread_t thread;
  pthread_create(&thread, NULL, helper, NULL);
#define cpu_now wall_now  // two threads: the wall clock
  BEST(dpo_2, dpo_streams_2());
  BEST(copy_dpo_wall, memmove(target, copy_buffer, 16 * N));
#undef cpu_now
  atomic_store(&round_posted, -1);
  pthread_join(thread, NULL);
  printf("dpoLoss memory pattern, no arithmetic: %6.1f us; memmove of its 2 MiB %5.1f us (%.0f%%)\n",
         dpo * 1e6, copy_dpo * 1e6, 100 * copy_dpo / dpo);
  printf("dpoLoss memory pattern on 2 threads:    %6.1f us (wall); memmove, 1 thread %5.1f us (%.0f%%)\n",
         dpo_2 * 1e6, copy_dpo_wall * 1e6, 100 * copy_dpo_wall / dpo_2);
  printf("groupAdvantages divider alone:          %6.1f us; memmove of its 512 KiB %5.1f us (%.0f%%)\n",
         divide * 1e6, copy_group * 1e6, 100 * copy_group / divide);
  printf("  with ss / 7 as the kernel does it now: %5.1f us\n", divide_now * 1e6);
  if (has_avx512) {
    printf("groups of 8, avx512 data movement only: %6.1f us (%.0f%% of the memmove)\n",
           movement * 1e6, 100 * copy_group / movement);
  }
  printf("random ids, stable counting sort:       %6.1f us; one scatter-add sweep %5.1f us\n",
         sort * 1e6, sweep * 1e6);
  printf("(checks: %g %g %g %g)\n", inverse[7], sorted[9], sums[11], f[4][5]);
  return 0;
}
