// Interleaved A/B of two builds of libtirl.so in one process on tokenLogprobs (the forward,
// or forward + backward), f32 and bf16 logits as `tirl bench` makes them (normal, sd 2,
// four +12 spikes a row), with a memmove of the op's bytes (benchmarks/native/ab.h):
//   cc -O2 -Inative/include benchmarks/native/ab_token_logprobs.c -o /tmp/ab_tlp -ldl -lm
//   cp build/Release/libtirl.so /tmp/a.so   (before the change; the build after it as b.so)
//   /tmp/ab_tlp /tmp/a.so /tmp/b.so threads tokens vocab [rounds=9] [calls=1] [backward=0]
// e.g. 1 16 32000 25 20 (logits in L2: the arithmetic), 2 4096 32000 9 (the bench's shape).
// threads: N, or A,B. Each round times `calls` calls. Prints, per dtype, ab.h's table (ms a
// round) and min / median ns a logit, then bf16's speed-up over f32 for each build.
#include "ab.h"
#include "tirl/tirl.h"

typedef __typeof__(tirl_token_logprobs)* ForwardFn;
typedef __typeof__(tirl_token_logprobs_backward)* BackwardFn;

typedef struct {
  ForwardFn forward[2];
  BackwardFn backward[2];
  const void* logits;
  tirl_dtype dtype;
  int64_t tokens, vocab;
  const int32_t* labels;
  const float* grad_logp;
  float* logp[2];
  float* grad[2];
  int calls, with_backward;
} Case;

static int call(int build, void* context) {
  const Case* c = (const Case*)context;
  const tirl_device cpu = {TIRL_DEVICE_CPU, 0, NULL};
  for (int k = 0; k < c->calls; ++k) {
    if (c->forward[build](c->logits, c->dtype, c->tokens, c->vocab, c->labels, 1.0, c->logp[build],
                          NULL, cpu) != TIRL_OK) {
      return 1;
    }
    if (c->with_backward &&
        c->backward[build](c->logits, c->dtype, c->tokens, c->vocab, c->labels, 1.0, c->grad_logp,
                           NULL, c->grad[build], cpu) != TIRL_OK) {
      return 1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s a.so b.so threads tokens vocab [rounds] [calls] [backward]\n", argv[0]);
    return 2;
  }
  int threads[2];
  ab_threads(argv[3], threads);
  Case c;
  c.tokens = atoll(argv[4]);
  c.vocab = atoll(argv[5]);
  const int rounds = argc > 6 ? atoi(argv[6]) : 9;
  c.calls = argc > 7 ? atoi(argv[7]) : 1;
  c.with_backward = argc > 8 ? atoi(argv[8]) : 0;
  for (int build = 0; build < 2; ++build) {
    void* lib = ab_open(argv[1 + build], threads[build]);
    c.forward[build] = (ForwardFn)ab_symbol(lib, "tirl_token_logprobs");
    c.backward[build] = (BackwardFn)ab_symbol(lib, "tirl_token_logprobs_backward");
  }
  const int64_t n = c.tokens * c.vocab;
  float* f32 = malloc(sizeof(float) * (size_t)n);
  uint16_t* bf16 = malloc(sizeof(uint16_t) * (size_t)n);
  int32_t* labels = malloc(sizeof(int32_t) * (size_t)c.tokens);
  float* grad_logp = malloc(sizeof(float) * (size_t)c.tokens);
  for (int64_t i = 0; i < n; ++i) f32[i] = (float)(2 * ab_normal());
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int k = 0; k < 4; ++k) f32[t * c.vocab + (int64_t)(ab_uniform() * (double)c.vocab)] += 12;
    labels[t] = (int32_t)(ab_uniform() * (double)c.vocab);
    grad_logp[t] = (float)ab_normal();
  }
  for (int64_t i = 0; i < n; ++i) {  // round to nearest even
    uint32_t bits;
    memcpy(&bits, &f32[i], sizeof bits);
    bf16[i] = (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
  }
  c.labels = labels;
  c.grad_logp = grad_logp;
  for (int build = 0; build < 2; ++build) {
    c.logp[build] = malloc(sizeof(float) * (size_t)c.tokens);
    c.grad[build] = c.with_backward ? malloc(sizeof(float) * (size_t)n) : NULL;
  }
  double median_ns[2][2], min_ns[2][2];  // [dtype][build]
  for (int d = 0; d < 2; ++d) {
    c.dtype = d ? TIRL_DTYPE_BF16 : TIRL_DTYPE_F32;
    c.logits = d ? (const void*)bf16 : (const void*)f32;
    const double width = d ? 2 : 4;
    const double bytes = (double)n * (c.with_backward ? 2 * width + 4 : width) * c.calls;
    printf("%lld x %lld %s %s, %d call(s) a round, threads %d,%d\n", (long long)c.tokens,
           (long long)c.vocab, d ? "bf16" : "f32", c.with_backward ? "forward+backward" : "forward",
           c.calls, threads[0], threads[1]);
    const AbTimes t = ab_run(rounds, call, &c, (size_t)(bytes / 2));
    ab_print(&t);
    for (int build = 0; build < 2; ++build) {
      min_ns[d][build] = 1e9 * t.wall[build][0] / ((double)n * c.calls);
      median_ns[d][build] = 1e9 * t.wall[build][rounds / 2] / ((double)n * c.calls);
    }
    printf("ns a logit (wall): A min %.4f median %.4f | B min %.4f median %.4f | B/A median %.3f; logp %s\n",
           min_ns[d][0], median_ns[d][0], min_ns[d][1], median_ns[d][1], median_ns[d][1] / median_ns[d][0],
           memcmp(c.logp[0], c.logp[1], sizeof(float) * (size_t)c.tokens) == 0 ? "same bits" : "differs");
  }
  printf("bf16 over f32 (wall, min / median): A %.3f / %.3f, B %.3f / %.3f\n", min_ns[0][0] / min_ns[1][0],
         median_ns[0][0] / median_ns[1][0], min_ns[0][1] / min_ns[1][1], median_ns[0][1] / median_ns[1][1]);
  return 0;
}
