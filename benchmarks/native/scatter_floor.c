// The floor of groupAdvantages by random group ids (issue 20): one scatter-add sweep
// (sum[id[i]] += r[i]) over 65,536 rewards into 8,192 groups, beside the same sweep with
// contiguous ids and a memcpy of the op's bytes (12 B/reward: reward and id read, advantage
// written; half copied into the other half, as `tirl bench` counts them). The op needs three
// such sweeps (sum, squared deviations, advantage: two-pass variance in input order, the
// same bits as contiguous groups), so one sweep's time against the copy's bounds its share.
//   cc -O2 benchmarks/native/scatter_floor.c -o /tmp/scatter_floor && /tmp/scatter_floor
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
  enum { N = 65536, G = 8192, REPS = 2000 };
  static float r[N]; static int id[N]; static double sum[G]; char* a = malloc(12 * N / 2); char* volatile b = malloc(12 * N / 2); memset(a, 1, 12 * N / 2);
  for (int i = 0; i < N; ++i) { r[i] = (float)(i & 1); id[i] = i / 8; }
  srand(4); for (int i = N - 1; i > 0; --i) { int j = rand() % (i + 1); int t = id[i]; id[i] = id[j]; id[j] = t; }
  double best_scatter = 1e9, best_copy = 1e9, best_seq = 1e9;
  for (int rep = 0; rep < 9; ++rep) {
    double t0 = now();
    for (int k = 0; k < REPS; ++k) { memset(sum, 0, sizeof sum); for (int i = 0; i < N; ++i) sum[id[i]] += r[i]; __asm__ volatile("" ::: "memory"); }
    double t1 = now();
    for (int k = 0; k < REPS; ++k) { memcpy(b, a, 12 * N / 2); __asm__ volatile("" ::: "memory"); }
    double t2 = now();
    for (int k = 0; k < REPS; ++k) { memset(sum, 0, sizeof sum); for (int i = 0; i < N; ++i) sum[i / 8] += r[i]; __asm__ volatile("" ::: "memory"); }
    double t3 = now();
    if (t1 - t0 < best_scatter) best_scatter = t1 - t0;
    if (t2 - t1 < best_copy) best_copy = t2 - t1;
    if (t3 - t2 < best_seq) best_seq = t3 - t2;
  }
  printf("one scatter-add sweep, random ids: %.1f us (%.2f ns/reward)\n", best_scatter / REPS * 1e6, best_scatter / REPS / N * 1e9);
  printf("same sweep, contiguous ids:        %.1f us\n", best_seq / REPS * 1e6);
  printf("memcpy of the op's 12 B/reward:    %.1f us\n", best_copy / REPS * 1e6);
  printf("(checks: %g %d)\n", sum[5], b[7]);
  return 0;
}
