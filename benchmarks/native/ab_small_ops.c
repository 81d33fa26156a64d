// Interleaved A/B of two builds of libtirl.so in one process, on the small ops of issue 20
// (groupAdvantages by group size 8 and by random ids, dpoLoss), each against a memmove of
// the op's bytes as `tirl bench` has it (half of them read, half written, the target half a
// page and a line past the source; copied once untimed first, so that it runs warm):
// rounds alternate A, B, copy, so that both builds see the same machine state (what the
// harnesses share is benchmarks/native/ab.h).
//   cc -O2 -Inative/include benchmarks/native/ab_small_ops.c -o /tmp/ab_small_ops -ldl
//   cp build/Release/libtirl.so /tmp/a.so   (before the change; the build after it as b.so)
//   /tmp/ab_small_ops /tmp/a.so /tmp/b.so [rounds]
// Each library is its own copy on disk (dlopen shares one mapping per path). Threads:
// TIRL_NUM_THREADS, as for every tirl call. Prints min and median microseconds a call.
#include "ab.h"
#include "tirl/tirl.h"

typedef __typeof__(tirl_group_advantages)* group_fn;
typedef __typeof__(tirl_dpo_loss)* dpo_fn;

enum { N = 65536, CASES = 3 };
static float in[4][N], out[4][N];
static int32_t ids[N];
static char copy_buffer[32 * N + 4096];

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s a.so b.so [rounds]\n", argv[0]);
    return 2;
  }
  const int rounds = argc > 3 ? atoi(argv[3]) : 400;
  group_fn group[2];
  dpo_fn dpo[2];
  for (int lib = 0; lib < 2; ++lib) {
    void* handle = ab_open(argv[1 + lib], 0);
    group[lib] = (group_fn)ab_symbol(handle, "tirl_group_advantages");
    dpo[lib] = (dpo_fn)ab_symbol(handle, "tirl_dpo_loss");
  }
  // Binary rewards (as the bench: zero-variance groups included), random log-probs.
  for (int i = 0; i < N; ++i) in[0][i] = ab_uniform() < 0.5 ? 0.0f : 1.0f;
  for (int k = 1; k < 4; ++k)
    for (int i = 0; i < N; ++i) in[k][i] = (float)(-50.0 * ab_uniform());
  for (int i = 0; i < N; ++i) ids[i] = i / 8;
  for (int i = N - 1; i > 0; --i) {
    const int j = (int)(ab_uniform() * (i + 1)), t = ids[i];
    ids[i] = ids[j];
    ids[j] = t;
  }
  tirl_group_advantages_options gopt;
  gopt.scale_by_std = 1;
  gopt.epsilon = 1e-6;
  tirl_dpo_options dopt;
  dopt.beta = 0.1;
  dopt.label_smoothing = 0.0;
  dopt.variant = TIRL_DPO_SIGMOID;
  tirl_device cpu;
  memset(&cpu, 0, sizeof cpu);
  cpu.type = TIRL_DEVICE_CPU;
  tirl_dpo_result result;
  static const char* names[CASES] = {"groupAdvantages/65536 (groups of 8)",
                                     "groupAdvantages/65536/random-ids", "dpoLoss/65536"};
  static const size_t bytes[CASES] = {8 * N, 12 * N, 32 * N};
  double* t[CASES][3];
  for (int c = 0; c < CASES; ++c)
    for (int v = 0; v < 3; ++v) t[c][v] = malloc(sizeof(double) * rounds);
  memset(copy_buffer, 1, sizeof copy_buffer);
  char* targets[CASES];
  for (int c = 0; c < CASES; ++c) targets[c] = copy_buffer + bytes[c] / 2 + 2048 + 64;
  for (int r = -20; r < rounds; ++r) {
    for (int c = 0; c < CASES; ++c) {
      for (int v = 0; v < 3; ++v) {
        const int lib = (r & 1) ? 1 - v : v;  // which build goes first alternates (v < 2)
        if (v == 2) memmove(targets[c], copy_buffer, bytes[c] / 2);  // warm, as the op's data
        tirl_status status = TIRL_OK;
        const double t0 = 1e6 * ab_seconds(CLOCK_MONOTONIC);
        if (v == 2) {
          memmove(targets[c], copy_buffer, bytes[c] / 2);
        } else if (c == 0) {
          status = group[lib](in[0], N, NULL, 8, &gopt, out[0], cpu);
        } else if (c == 1) {
          status = group[lib](in[0], N, ids, 0, &gopt, out[0], cpu);
        } else {
          status = dpo[lib](in[0], in[1], in[2], in[3], N, &dopt, out[0], out[1], out[2], out[3],
                            &result, cpu);
        }
        __asm__ volatile("" ::: "memory");
        const double dt = 1e6 * ab_seconds(CLOCK_MONOTONIC) - t0;
        if (status != TIRL_OK) {
          fprintf(stderr, "%s failed (status %d)\n", names[c], (int)status);
          return 1;
        }
        if (r >= 0) t[c][v == 2 ? 2 : lib][r] = dt;
      }
    }
  }
  printf("%-38s %9s %9s %9s %9s %9s %9s\n", "case (us a call)", "A min", "A med", "B min",
         "B med", "copy min", "B %copy");
  for (int c = 0; c < CASES; ++c) {
    double mins[3], meds[3];
    for (int v = 0; v < 3; ++v) {
      qsort(t[c][v], rounds, sizeof(double), ab_by_value);
      mins[v] = t[c][v][0];
      meds[v] = t[c][v][rounds / 2];
    }
    printf("%-38s %9.1f %9.1f %9.1f %9.1f %9.1f %8.0f%%\n", names[c], mins[0], meds[0], mins[1],
           meds[1], mins[2], 100 * meds[2] / meds[1]);
  }
  return 0;
}
