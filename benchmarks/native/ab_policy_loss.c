// Interleaved A/B of two builds of libtirl.so in one process on tirl_policy_loss at the
// bench's size (512 x 2048 tokens, tool-use-like mask: a 10% prompt, spans of 40-200
// action tokens between 10-90 tool tokens, up to 10% padding; logp uniform in [-5, 0],
// old_logp = logp + N(0, 0.1), advantages N(0, 1)) with benchmarks/ppo_loss.ts's options
// for each loss, each beside a memmove of the bench's 17 B/token (half read, half written,
// as `tirl bench` has it): rounds alternate A, B, copy.
//   cc -O2 -Inative/include benchmarks/native/ab_policy_loss.c -o /tmp/ab_pl -ldl -lm
//   cp build/Release/libtirl.so /tmp/a.so   (before the change; the build after it as b.so)
//   /tmp/ab_pl /tmp/a.so /tmp/b.so [threads A[,threads B]] [loss] [rounds]
// loss: clip_cov (default), kl_cov, dppo_kl, dppo_tv, sapo, geo_mean, gpg, gspo, cispo, reinforce,
// dro, vanilla (dual clip 3),
// bypass_mode (REINFORCE with sequence-level truncated weights, threshold 2, as the bench),
// bypass_token (token-level). AB_EVICT_MB=600: every call from evicted caches (ab.h). Threads "1,2" runs A
// on one thread and B on two (give the same file twice, as two copies on disk). Prints min
// and median milliseconds a call, the % of the copy's median, the process CPU time a call
// (min and median: steadier than the clock on a shared machine), and the loss and
// statistics of each (which agree to rounding).
#include "ab.h"
#include "tirl/tirl.h"

typedef __typeof__(tirl_policy_loss)* loss_fn;
typedef __typeof__(tirl_policy_loss_options_default)* default_fn;

// benchmarks/ppo_loss.ts's LOSS_OPTIONS.
static void set_loss(tirl_policy_loss_options* o, const char* loss) {
  o->ppo.clip_low = 0.2;
  o->ppo.clip_high = 0.2;
  if (strcmp(loss, "clip_cov") == 0) {
    o->policy_loss = TIRL_POLICY_CLIP_COV;
    o->clip_cov_ratio = 0.0002;
    o->clip_cov_lb = 1;
    o->clip_cov_ub = 5;
    o->seed = 0;
  } else if (strcmp(loss, "kl_cov") == 0) {
    o->policy_loss = TIRL_POLICY_KL_COV;
    o->kl_cov_ratio = 0.0002;
    o->ppo_kl_coef = 0.1;
  } else if (strcmp(loss, "dppo_kl") == 0 || strcmp(loss, "dppo_tv") == 0) {
    o->policy_loss = loss[5] == 'k' ? TIRL_POLICY_DPPO_KL : TIRL_POLICY_DPPO_TV;
    o->clip_ratio_c = 3;
  } else if (strcmp(loss, "sapo") == 0) {
    o->policy_loss = TIRL_POLICY_SAPO;
    o->tau_pos = 1;
    o->tau_neg = 1.05;
  } else if (strcmp(loss, "gpg") == 0) {
    o->policy_loss = TIRL_POLICY_GPG;
  } else if (strcmp(loss, "gspo") == 0) {
    o->policy_loss = TIRL_POLICY_GSPO;
  } else if (strcmp(loss, "cispo") == 0) {
    o->policy_loss = TIRL_POLICY_CISPO;
  } else if (strcmp(loss, "reinforce") == 0) {
    o->policy_loss = TIRL_POLICY_REINFORCE;
  } else if (strcmp(loss, "dro") == 0) {
    o->policy_loss = TIRL_POLICY_DRO;
    o->dro_beta = 1;
  } else if (strcmp(loss, "vanilla") == 0) {
    o->policy_loss = TIRL_POLICY_VANILLA;
    o->ppo.dual_clip = 3;
  } else if (strcmp(loss, "bypass_mode") == 0) {  // REINFORCE, sequence-level truncated weights
    o->policy_loss = TIRL_POLICY_BYPASS_MODE;
    o->loss_type = TIRL_BYPASS_REINFORCE;
    o->rollout_is = TIRL_ROLLOUT_IS_SEQUENCE;
    o->rollout_is_threshold = 2;
  } else if (strcmp(loss, "bypass_token") == 0) {  // the same, token-level weights
    o->policy_loss = TIRL_POLICY_BYPASS_MODE;
    o->loss_type = TIRL_BYPASS_REINFORCE;
    o->rollout_is = TIRL_ROLLOUT_IS_TOKEN;
    o->rollout_is_threshold = 2;
  } else if (strcmp(loss, "geo_mean") == 0) {
    o->policy_loss = TIRL_POLICY_GEO_MEAN;
  } else {
    fprintf(stderr, "unknown loss %s\n", loss);
    exit(2);
  }
}

enum { B = 512, L = 2048, N = B * L };

typedef struct {
  loss_fn call[2];
  tirl_policy_loss_options options[2];
  tirl_policy_loss_result result[2];
  const float* logp;
  const float* old_logp;
  const float* advantages;
  const uint8_t* mask;
  const int32_t* offsets;
  float* grad;
} Case;

static int run(int k, void* context) {
  Case* c = (Case*)context;
  const tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
  c->result[k].struct_size = sizeof(tirl_policy_loss_result);
  return c->call[k](c->logp, c->old_logp, c->advantages, c->mask, N, c->offsets, B, NULL, NULL,
                    &c->options[k], c->grad, &c->result[k], cpu) != TIRL_OK;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s a.so b.so [threads[,threads]] [loss] [rounds]\n", argv[0]);
    return 2;
  }
  const char* loss = argc > 4 ? argv[4] : "clip_cov";
  const int rounds = argc > 5 ? atoi(argv[5]) : 20;
  int threads[2];
  ab_threads(argc > 3 ? argv[3] : "1", threads);
  float* logp = malloc(sizeof(float) * N);
  float* old_logp = malloc(sizeof(float) * N);
  float* advantages = malloc(sizeof(float) * N);
  uint8_t* mask = calloc(N, 1);
  int32_t* offsets = malloc(sizeof(int32_t) * (B + 1));
  for (int64_t i = 0; i < N; ++i) {
    logp[i] = (float)(-5 * ab_uniform());
    old_logp[i] = (float)(logp[i] + 0.1 * ab_normal());
    advantages[i] = (float)ab_normal();
  }
  for (int64_t s = 0; s <= B; ++s) offsets[s] = (int32_t)(s * L);
  ab_tool_use_mask(mask, B, L);
  Case c = {.logp = logp, .old_logp = old_logp, .advantages = advantages, .mask = mask,
            .offsets = offsets, .grad = calloc(N, sizeof(float))};
  for (int k = 0; k < 2; ++k) {
    void* lib = ab_open(argv[1 + k], threads[k]);
    c.call[k] = (loss_fn)ab_symbol(lib, "tirl_policy_loss");
    c.options[k] = ((default_fn)ab_symbol(lib, "tirl_policy_loss_options_default"))();
    set_loss(&c.options[k], loss);
  }
  const AbTimes times = ab_run(rounds, run, &c, (size_t)17 * N / 2);
  ab_print(&times);
  for (int k = 0; k < 2; ++k) {
    printf("%s: loss %.12g, clipFraction %.9g, approxKl %.9g, selected %lld\n", k == 0 ? "A" : "B",
           c.result[k].ppo.loss, c.result[k].ppo.clip_fraction, c.result[k].ppo.approx_kl,
           (long long)c.result[k].selected_tokens);
  }
  return 0;
}
