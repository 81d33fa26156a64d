// The floor of groupAdvantages by random group ids (issue 20): one scatter-add sweep
// (sum[id[i]] += r[i]) over 65,536 rewards into 8,192 groups, beside the same sweep with
// contiguous ids and a memcpy of the op's bytes (12 B/reward: reward and id read, advantage
// written; half copied into the other half, as `tirl bench` counts them). The op needs three
// such sweeps (sum, squared deviations, advantage: two-pass variance in input order, the
// same bits as contiguous groups), so one sweep's time against the copy's bounds its share.
// Also the op's own record (sum and count, 16 B a group, one 16-byte add and store a
// reward) into the 8,192 groups (128 KiB: L2, as the op), into 1,024 groups (16 KiB: L1,
// what the sweep costs when the table fits; the load/store ports' floor), and the third
// sweep's read-only gather of each reward's group record.
//   cc -O2 benchmarks/native/scatter_floor.c -o /tmp/scatter_floor && /tmp/scatter_floor
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
  enum { N = 65536, G = 8192, REPS = 500 };
  typedef struct { double first, second; } Record;
static float r[N], out[N]; static int id[N], id_l1[N]; static double sum[G]; static Record record[G]; char* a = malloc(12 * N / 2); char* volatile b = malloc(12 * N / 2); memset(a, 1, 12 * N / 2);
  for (int i = 0; i < N; ++i) { r[i] = (float)(i & 1); id[i] = i / 8; }
  srand(4); for (int i = N - 1; i > 0; --i) { int j = rand() % (i + 1); int t = id[i]; id[i] = id[j]; id[j] = t; }
  for (int i = 0; i < N; ++i) id_l1[i] = id[i] & 1023;
  double best_scatter = 1e9, best_copy = 1e9, best_seq = 1e9, best_record = 1e9, best_record_l1 = 1e9, best_gather = 1e9;
  for (int rep = 0; rep < 9; ++rep) {
    double t0 = now();
    for (int k = 0; k < REPS; ++k) { memset(sum, 0, sizeof sum); for (int i = 0; i < N; ++i) sum[id[i]] += r[i]; __asm__ volatile("" ::: "memory"); }
    double t1 = now();
    for (int k = 0; k < REPS; ++k) { memcpy(b, a, 12 * N / 2); __asm__ volatile("" ::: "memory"); }
    double t2 = now();
    for (int k = 0; k < REPS; ++k) { memset(sum, 0, sizeof sum); for (int i = 0; i < N; ++i) sum[i / 8] += r[i]; __asm__ volatile("" ::: "memory"); }
    double t3 = now();
    for (int k = 0; k < REPS; ++k) { memset(record, 0, sizeof record); for (int i = 0; i < N; ++i) { record[id[i]].first += r[i]; record[id[i]].second += 1.0; } __asm__ volatile("" ::: "memory"); }
    double t4 = now();
    for (int k = 0; k < REPS; ++k) { memset(record, 0, sizeof record); for (int i = 0; i < N; ++i) { record[id_l1[i]].first += r[i]; record[id_l1[i]].second += 1.0; } __asm__ volatile("" ::: "memory"); }
    double t5 = now();
    for (int k = 0; k < REPS; ++k) { for (int i = 0; i < N; ++i) out[i] = (float)((r[i] - record[id[i]].first) * record[id[i]].second); __asm__ volatile("" ::: "memory"); }
    double t6 = now();
    if (t4 - t3 < best_record) best_record = t4 - t3;
    if (t5 - t4 < best_record_l1) best_record_l1 = t5 - t4;
    if (t6 - t5 < best_gather) best_gather = t6 - t5;
    if (t1 - t0 < best_scatter) best_scatter = t1 - t0;
    if (t2 - t1 < best_copy) best_copy = t2 - t1;
    if (t3 - t2 < best_seq) best_seq = t3 - t2;
  }
  printf("one scatter-add sweep, random ids: %.1f us (%.2f ns/reward)\n", best_scatter / REPS * 1e6, best_scatter / REPS / N * 1e9);
  printf("same sweep, contiguous ids:        %.1f us\n", best_seq / REPS * 1e6);
  printf("memcpy of the op's 12 B/reward:    %.1f us\n", best_copy / REPS * 1e6);
  printf("16 B records (sum, count), 8,192 groups (L2): %.1f us (%.2f ns/reward)\n", best_record / REPS * 1e6, best_record / REPS / N * 1e9);
  printf("16 B records, 1,024 groups (L1):              %.1f us (%.2f ns/reward)\n", best_record_l1 / REPS * 1e6, best_record_l1 / REPS / N * 1e9);
  printf("gather of the records (third sweep):          %.1f us (%.2f ns/reward)\n", best_gather / REPS * 1e6, best_gather / REPS / N * 1e9);
  printf("(checks: %g %d %g %g)\n", sum[5], b[7], record[3].second, out[9]);
  return 0;
}
