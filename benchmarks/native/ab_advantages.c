// Interleaved A/B of two builds of libtirl.so in one process on tirl_advantages at the
// bench's size (512 x 2048 tokens, the tool-use-like mask of benchmarks/data.ts's
// toolUseBatch: a 10% prompt, action spans of 40-200 tokens between 10-90 tool tokens, up
// to 10% padding; binary rewards; groups of 8), each beside a memmove of the bench's byte
// model (5 B/token, 9 for gae, 13 for the optimal-token baselines; half read, half
// written): rounds alternate A, B, copy. Inputs as benchmarks/advantages.ts builds them
// (gae: values uniform in [-0.5, 0.5), gamma 1, lam 0.95; gdpo: two components, weights 1,
// 0.5; optimal-token baselines: old_logp in [-3, 0], sum_pi_squared = e^(2 old_logp) + U/10).
//   cc -O2 -Inative/include benchmarks/native/ab_advantages.c -o /tmp/ab_adv -ldl -lm
//   cp build/Release/libtirl.so /tmp/a.so   (before the change; the build after it as b.so)
//   /tmp/ab_adv /tmp/a.so /tmp/b.so estimator [threads A[,threads B]] [rounds] [returns]
// estimator: a registry key (grpo, gdpo, reinforce_plus_plus, gae, ...). returns: 1 also
// writes the returns. Prints min and median milliseconds of wall and of the process's CPU
// time a call, and the largest |A - B| of the advantages and how many differ (0: a change
// kept the bits).
// AB_SEQS=n and AB_LEN=n in the environment set the batch (default 512 x 2048). A batch
// that fits the L2 (AB_SEQS=32: 65,536 tokens, 0.6 MB for gae) times the kernels' own
// work: on the 2-core VM shared with other builds its medians moved by 1-2% between runs,
// those of the bench's size evicted (AB_EVICT_MB) by 5-13%. AB_LEN=2064 takes the padded
// batch's 8 KiB stride away from gae's 8 sequence lanes (which then share no L1 set):
// one thread, L3-warm, 0.98 ms against 1.22 ms at 2,048.
#include "ab.h"
#include "tirl/tirl.h"

typedef __typeof__(tirl_advantages)* adv_fn;
typedef __typeof__(tirl_advantages_options_default)* default_fn;

static const char* kNames[] = {"grpo", "grpo_passk", "gdpo", "rloo", "reinforce_plus_plus",
                               "reinforce_plus_plus_baseline", "remax", "opo", "gpg", "gae",
                               "optimal_token_baseline", "tir_optimal_token_baseline"};

enum { G = 8 };
static int64_t B = 512, L = 2048, N = 512 * 2048;

typedef struct {
  adv_fn call[2];
  tirl_advantages_options options[2];
  tirl_advantages_inputs in;
  float* out[2];
  float* ret[2];
  int with_returns;
} Case;

static int run(int k, void* context) {
  Case* c = (Case*)context;
  const tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
  return c->call[k](&c->in, N, B, &c->options[k], c->out[k], c->with_returns ? c->ret[k] : NULL,
                    cpu) != TIRL_OK;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s a.so b.so estimator [threads[,threads]] [rounds] [returns]\n", argv[0]);
    return 2;
  }
  int estimator = -1;
  for (int e = 0; e < 12; ++e) {
    if (strcmp(argv[3], kNames[e]) == 0) estimator = e;
  }
  if (estimator < 0) {
    fprintf(stderr, "unknown estimator %s\n", argv[3]);
    return 2;
  }
  const int rounds = argc > 5 ? atoi(argv[5]) : 30;
  if (getenv("AB_SEQS") != NULL) B = atol(getenv("AB_SEQS"));
  if (getenv("AB_LEN") != NULL) L = atol(getenv("AB_LEN"));
  if (B < 1 || L < 1 || B * L > INT32_MAX) {
    fprintf(stderr, "bad AB_SEQS or AB_LEN\n");
    return 2;
  }
  N = B * L;
  int threads[2];
  ab_threads(argc > 4 ? argv[4] : "1", threads);
  uint8_t* mask = calloc(N, 1);
  int32_t* offsets = malloc(sizeof(int32_t) * (B + 1));
  float* rewards = malloc(sizeof(float) * 2 * B);
  float* values = malloc(sizeof(float) * N);
  float* baselines = malloc(sizeof(float) * B);
  float* old_logp = malloc(sizeof(float) * N);
  float* sum_pi_squared = malloc(sizeof(float) * N);
  static const float weights[2] = {1.0f, 0.5f};
  for (int64_t s = 0; s <= B; ++s) offsets[s] = (int32_t)(s * L);
  ab_tool_use_mask(mask, B, L);
  for (int64_t s = 0; s < B; ++s) rewards[s] = ab_uniform() < 0.5 ? 0.0f : 1.0f;
  for (int64_t s = 0; s < B; ++s) rewards[B + s] = rewards[(s - G + B) % B];
  for (int64_t s = 0; s < B; ++s) baselines[s] = ab_uniform() < 0.5 ? 0.0f : 1.0f;
  for (int64_t i = 0; i < N; ++i) {
    values[i] = (float)(ab_uniform() - 0.5);
    old_logp[i] = (float)(-3 * ab_uniform());
    sum_pi_squared[i] = (float)(exp(2.0 * old_logp[i]) + 0.1 * ab_uniform());
  }
  Case c;
  memset(&c, 0, sizeof c);
  c.with_returns = argc > 6 ? atoi(argv[6]) : 0;
  for (int k = 0; k < 2; ++k) {
    c.out[k] = malloc(sizeof(float) * N);
    c.ret[k] = malloc(sizeof(float) * N);
  }
  c.in.rewards = rewards;
  c.in.mask = mask;
  c.in.seq_offsets = offsets;
  const int grouped = estimator != 4 && estimator != 6 && estimator != 9;
  if (estimator == 9) c.in.values = values;
  if (estimator == 6) c.in.reward_baselines = baselines;
  if (estimator == 10 || estimator == 11) {
    c.in.old_logp = old_logp;
    c.in.sum_pi_squared = sum_pi_squared;
  }
  if (estimator == 2) c.in.reward_weights = weights;
  for (int k = 0; k < 2; ++k) {
    void* lib = ab_open(argv[1 + k], threads[k]);
    c.call[k] = (adv_fn)ab_symbol(lib, "tirl_advantages");
    c.options[k] = ((default_fn)ab_symbol(lib, "tirl_advantages_options_default"))();
    c.options[k].estimator = (tirl_advantage_estimator)estimator;
    if (grouped) c.options[k].group_size = G;
    if (estimator == 2) c.options[k].num_reward_keys = 2;
    if (estimator == 9) c.options[k].lam = 0.95;
  }
  const size_t per_token = estimator == 9 ? 9 : estimator >= 10 ? 13 : 5;
  const AbTimes times = ab_run(rounds, run, &c, (per_token * N + 8 * B + 4) / 2);
  ab_print(&times);
  double diff = 0.0, diff_ret = 0.0;
  int64_t differ = 0;
  for (int64_t i = 0; i < N; ++i) {
    const double d = fabs((double)c.out[0][i] - (double)c.out[1][i]);
    differ += c.out[0][i] != c.out[1][i];
    if (d > diff) diff = d;
    if (c.with_returns && fabs((double)c.ret[0][i] - (double)c.ret[1][i]) > diff_ret) {
      diff_ret = fabs((double)c.ret[0][i] - (double)c.ret[1][i]);
    }
  }
  printf("%s: max |A - B| %.3g (%lld of %lld differ), returns %.3g\n", argv[3], diff,
         (long long)differ, (long long)N, diff_ret);
  return 0;
}
