// Floors of the small ops of issue 20 against a memmove of their bytes, on one core:
//   dpoLoss, 65,536 pairs: its memory pattern alone (4 f32 streams read, 4 written) with
//     the arithmetic replaced by subtractions;
//   groupAdvantages, 65,536 rewards in groups of 8: the divider alone (per group
//     sqrt(ss / 7) + eps and its reciprocal in double, as group_scale computes them, four
//     groups a vector), against a memmove of the op's 8 B/reward;
//   groupAdvantages by random ids: what sorting the rewards by group first would cost
//     (the positions of a stable counting sort, then the scatter of the rewards into group
//     order), against one scatter-add sweep, the unit of the three sweeps the op does
//     (scatter_floor.c).
//   cc -O3 -mavx2 benchmarks/native/small_op_floors.c -o /tmp/floors && /tmp/floors
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

__attribute__((noinline)) static void dpo_streams(const float* restrict a, const float* restrict b,
                                                  const float* restrict c, const float* restrict d,
                                                  float* restrict w, float* restrict x,
                                                  float* restrict y, float* restrict z) {
  for (int i = 0; i < N; ++i) {
    const float p = a[i] - c[i], q = b[i] - d[i];
    w[i] = p - q;
    x[i] = q - p;
    y[i] = p;
    z[i] = q;
  }
}

__attribute__((noinline)) static void divider(void) {
  for (int g = 0; g < G; g += 4) {
    const __m256d s = _mm256_div_pd(_mm256_loadu_pd(ss + g), _mm256_set1_pd(7.0));
    const __m256d d = _mm256_add_pd(_mm256_sqrt_pd(s), _mm256_set1_pd(1e-6));
    _mm256_storeu_pd(inverse + g, _mm256_div_pd(_mm256_set1_pd(1.0), d));
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
  BEST(dpo, dpo_streams(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]));
  BEST(copy_dpo, memmove(target, copy_buffer, 16 * N));
  BEST(divide, divider());
  BEST(copy_group, memmove(target, copy_buffer, 4 * N));
  BEST(sort, sort_by_group());
  BEST(sweep, scatter_add());
  printf("dpoLoss memory pattern, no arithmetic: %6.1f us; memmove of its 2 MiB %5.1f us (%.0f%%)\n",
         dpo * 1e6, copy_dpo * 1e6, 100 * copy_dpo / dpo);
  printf("groupAdvantages divider alone:          %6.1f us; memmove of its 512 KiB %5.1f us (%.0f%%)\n",
         divide * 1e6, copy_group * 1e6, 100 * copy_group / divide);
  printf("random ids, stable counting sort:       %6.1f us; one scatter-add sweep %5.1f us\n",
         sort * 1e6, sweep * 1e6);
  printf("(checks: %g %g %g)\n", inverse[7], sorted[9], sums[11]);
  return 0;
}
