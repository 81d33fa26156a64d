// Interleaved A/B of two builds of libtirl.so in one process on rolloutCorrection at the
// bench's size (512 x 2048 tokens, tool-use-like mask: a 10% prompt, spans of 40-200
// action tokens between 10-90 tool tokens, up to 10% padding; logp uniform in [-5, 0],
// rollout_logp = logp + N(0, 0.1)), each beside a memmove of the op's 14 B/token (half read,
// half written, as `tirl bench` has it): rounds alternate A, B, copy (benchmarks/native/ab.h).
//   cc -O2 -Inative/include benchmarks/native/ab_rollout_correction.c -o /tmp/ab_rc -ldl -lm
//   cp build/Release/libtirl.so /tmp/a.so   (before the change; the build after it as b.so)
//   /tmp/ab_rc /tmp/a.so /tmp/b.so [threads A[,threads B]] [mode] [rounds]
// mode: bench (token TIS + seq_mean_k3, the bench case; default), seq (sequence IS),
// geo (seq_mean_k1, the geometric mean ratio, no IS), seqrs (sequence IS + seq_sum_k2 +
// seq_max_k3), tokrs (IcePop token IS + token_k1 + token_k3). Threads "1,2" runs A on one
// thread and B on two (give the same file twice, as two copies on disk: dlopen shares one
// mapping per path). Prints min and median milliseconds a call (wall and process CPU time),
// and a few statistics of each (which agree to rounding). AB_EVICT_MB=600 in the
// environment starts every timed call (and copy) from DRAM (ab.h). The kernel's limit,
// measured with it: cpu/rollout_correction.cc's header.
#include "ab.h"
#include "tirl/tirl.h"

typedef __typeof__(tirl_rollout_correction)* rc_fn;
typedef __typeof__(tirl_rollout_correction_options_default)* default_fn;

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

enum { B = 512, L = 2048, N = B * L };

typedef struct {
  rc_fn call[2];
  tirl_rollout_correction_options options[2];
  tirl_rollout_correction_result result[2];
  const float* logp;
  const float* rollout_logp;
  const uint8_t* mask;
  const int32_t* offsets;
  float* weights;
  uint8_t* mask_out;
} Case;

static int run(int k, void* context) {
  Case* c = (Case*)context;
  const tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
  return c->call[k](c->logp, c->rollout_logp, c->mask, N, c->offsets, B, &c->options[k], c->weights,
                    c->mask_out, &c->result[k], cpu) != TIRL_OK;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s a.so b.so [threads[,threads]] [mode] [rounds]\n", argv[0]);
    return 2;
  }
  const char* mode = argc > 4 ? argv[4] : "bench";
  const int rounds = argc > 5 ? atoi(argv[5]) : 20;
  int threads[2];
  ab_threads(argc > 3 ? argv[3] : "1", threads);
  float* logp = malloc(sizeof(float) * N);
  float* rollout_logp = malloc(sizeof(float) * N);
  uint8_t* mask = calloc(N, 1);
  int32_t* offsets = malloc(sizeof(int32_t) * (B + 1));
  for (int64_t i = 0; i < N; ++i) {
    logp[i] = (float)(-5 * ab_uniform());
    rollout_logp[i] = (float)(logp[i] + 0.1 * ab_normal());
  }
  for (int64_t s = 0; s <= B; ++s) offsets[s] = (int32_t)(s * L);
  ab_tool_use_mask(mask, B, L);
  Case c = {.logp = logp, .rollout_logp = rollout_logp, .mask = mask, .offsets = offsets,
            .weights = malloc(sizeof(float) * N), .mask_out = malloc(N)};
  for (int k = 0; k < 2; ++k) {
    void* lib = ab_open(argv[1 + k], threads[k]);
    c.call[k] = (rc_fn)ab_symbol(lib, "tirl_rollout_correction");
    c.options[k] = ((default_fn)ab_symbol(lib, "tirl_rollout_correction_options_default"))();
    set_mode(&c.options[k], mode);
  }
  const AbTimes times = ab_run(rounds, run, &c, (size_t)14 * N / 2);
  ab_print(&times);
  for (int k = 0; k < 2; ++k) {
    printf("%s: kl %.12g, k3_kl %.12g, is_mean %.12g, is_std %.12g\n", k == 0 ? "A" : "B",
           c.result[k].kl, c.result[k].k3_kl, c.result[k].rollout_is_mean, c.result[k].rollout_is_std);
  }
  return 0;
}
