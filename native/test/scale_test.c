/* Inputs beyond 2^31 elements and 2^32 bytes through the C ABI: the logits of 16,384 tokens
 * over a 151,936-entry vocabulary in bf16 (2.49e9 elements, 5 GB), ppoLoss and dpoLoss over
 * 2^31 + 4096 tokens or pairs. The inputs are anonymous mappings that are only read, so
 * almost all of them stay the kernel's zero page and cost no resident memory; the few
 * entries set to known values sit beyond index 2^31 and byte 2^32, where a 32-bit index
 * or byte count would wrap. The backward of the logits writes 10 GB (2.49e9 f32 gradients)
 * and runs only with TIRL_SCALE_BACKWARD=1 and enough available memory. Linux only.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "tirl/tirl.h"
#include "check.h"

#define TWO_TO_31 2147483648LL

/* Zeroed memory that reads as the zero page until written. Huge pages where the kernel
 * allows them on request (madvise mode): reads then map the huge zero page, which stays in
 * cache, instead of faulting 4 KiB at a time. */
static void* zeroed(size_t bytes) {
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, "scale_test: could not map %zu bytes\n", bytes);
    exit(1);
  }
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint16_t to_bf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return (uint16_t)(bits >> 16); /* the values used here are exact in bf16 */
}

static int close_to(double got, double want, double rtol) {
  return fabs(got - want) <= rtol * fabs(want) + 1e-7;
}

/* A row of V logits, all 0 but one equal to x at the label: log-prob and entropy. */
static void one_hot_row(double x, double v, double* logp, double* entropy) {
  const double sum = exp(x) + (v - 1);
  *logp = x - log(sum);
  const double p = exp(x) / sum, q = 1 / sum;
  *entropy = -(p * log(p) + (v - 1) * q * log(q));
}

enum { N = 16384, V = 151936 };

static void test_token_logprobs(void) {
  const int64_t count = (int64_t)N * V;
  CHECK(count > TWO_TO_31 && count * 2 > 2 * TWO_TO_31, "the case is not beyond 2^31");
  uint16_t* logits = zeroed((size_t)count * sizeof(uint16_t));
  int32_t* labels = malloc(sizeof(int32_t) * N);
  float* logp = malloc(sizeof(float) * N);
  float* entropy = malloc(sizeof(float) * N);
  for (int64_t t = 0; t < N; ++t) labels[t] = (int32_t)((t * 7919) % V);
  /* Known rows: the first, the one holding element 2^31, and the last (beyond byte 2^32). */
  const int64_t rows[3] = {0, TWO_TO_31 / V, N - 1};
  const int64_t columns[3] = {7, TWO_TO_31 % V, V - 1};
  const float values[3] = {10.0f, 3.0f, -2.0f};
  for (int k = 0; k < 3; ++k) {
    labels[rows[k]] = (int32_t)columns[k];
    logits[rows[k] * V + columns[k]] = to_bf16(values[k]);
  }

  const double start = seconds();
  tirl_status s = tirl_token_logprobs(logits, TIRL_DTYPE_BF16, N, V, labels, 1.0, logp, entropy,
                                      tirl_cpu());
  const double elapsed = seconds() - start;
  CHECK(s == TIRL_OK, "token_logprobs: %s", tirl_last_error());
  printf("tokenLogprobs bf16 %d x %d (%lld elements) with entropy: %.2f s\n", N, V,
         (long long)count, elapsed);
  int bad = 0;
  for (int64_t t = 0; t < N; ++t) {
    double want_logp = -log((double)V), want_entropy = log((double)V);
    for (int k = 0; k < 3; ++k) {
      if (t == rows[k]) one_hot_row(values[k], V, &want_logp, &want_entropy);
    }
    if (!close_to(logp[t], want_logp, 1e-5) || !close_to(entropy[t], want_entropy, 1e-5)) {
      if (bad++ < 5) {
        CHECK(0, "row %lld: logp %.9g entropy %.9g, expected %.9g %.9g", (long long)t, logp[t],
              entropy[t], want_logp, want_entropy);
      }
    }
  }
  CHECK(bad == 0, "%d rows wrong", bad);

  /* Without entropy, at another temperature: the zero rows are still uniform. */
  s = tirl_token_logprobs(logits, TIRL_DTYPE_BF16, N, V, labels, 2.0, logp, NULL, tirl_cpu());
  CHECK(s == TIRL_OK, "token_logprobs T=2: %s", tirl_last_error());
  CHECK(close_to(logp[N / 2], -log((double)V), 1e-5), "T=2 zero row %.9g", logp[N / 2]);
  double want_entropy;
  double want_last;
  one_hot_row(-1.0, V, &want_last, &want_entropy); /* x / T = -2 / 2 */
  CHECK(close_to(logp[N - 1], want_last, 1e-5), "T=2 last row %.9g vs %.9g", logp[N - 1], want_last);

  /* N * V overflowing 64 bits, or the logits' bytes overflowing: refused, never wrapped. */
  s = tirl_token_logprobs(logits, TIRL_DTYPE_BF16, (int64_t)1 << 40, (int64_t)1 << 40, labels, 1.0,
                          logp, NULL, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT && strstr(tirl_last_error(), "overflows") != NULL,
        "2^40 x 2^40: %d %s", (int)s, tirl_last_error());

  if (getenv("TIRL_SCALE_BACKWARD") != NULL && atoi(getenv("TIRL_SCALE_BACKWARD")) == 1) {
    /* 10 GB of gradients, all written. grad = g (1[v = label] - p_v). */
    float* grad = zeroed((size_t)count * sizeof(float));
    float* grad_logp = malloc(sizeof(float) * N);
    for (int64_t t = 0; t < N; ++t) grad_logp[t] = t == N - 1 ? -1.0f : 1.0f;
    const double back_start = seconds();
    s = tirl_token_logprobs_backward(logits, TIRL_DTYPE_BF16, N, V, labels, 1.0, grad_logp, NULL,
                                     grad, tirl_cpu());
    printf("tokenLogprobsBackward bf16 %d x %d (writes %.1f GB): %.2f s\n", N, V,
           (double)count * 4 / 1e9, seconds() - back_start);
    CHECK(s == TIRL_OK, "token_logprobs_backward: %s", tirl_last_error());
    const double uniform = 1.0 / V;
    int wrong = 0;
    for (int64_t t = 0; t < N && wrong < 5; ++t) {
      const int special = t == rows[0] || t == rows[1] || t == rows[2];
      if (special) continue;
      const float* g = grad + t * V;
      for (int64_t v = 0; v < V; ++v) {
        const double want = v == labels[t] ? 1 - uniform : -uniform;
        if (!close_to(g[v], want, 1e-5)) {
          CHECK(0, "grad[%lld][%lld] = %.9g, expected %.9g", (long long)t, (long long)v, g[v], want);
          ++wrong;
          break;
        }
      }
    }
    /* The last row, beyond byte 2^32 of the logits and 2^33 of the gradients: g = -1. */
    const double sum = exp(-2.0) + (V - 1);
    const float* last = grad + (int64_t)(N - 1) * V;
    CHECK(close_to(last[V - 1], -(1 - exp(-2.0) / sum), 1e-5), "last label grad %.9g", last[V - 1]);
    CHECK(close_to(last[0], 1 / sum, 1e-5), "last row grad %.9g", last[0]);
    munmap(grad, (size_t)count * sizeof(float));
    free(grad_logp);
  } else {
    printf("tokenLogprobsBackward beyond 2^31 outputs: skipped (TIRL_SCALE_BACKWARD=1 runs it; "
           "it writes 10 GB)\n");
  }
  munmap(logits, (size_t)count * sizeof(uint16_t));
  free(labels);
  free(logp);
  free(entropy);
}

/* 2^31 + 4096 tokens, all masked out and zero but three beyond index 2^31: the loss, the
 * counts and the gradient must see exactly those three. */
static void test_ppo_loss(void) {
  const int64_t n = TWO_TO_31 + 4096;
  float* logp = zeroed((size_t)n * sizeof(float));
  float* old_logp = zeroed((size_t)n * sizeof(float));
  float* advantages = zeroed((size_t)n * sizeof(float));
  uint8_t* mask = zeroed((size_t)n);
  const int64_t at[3] = {TWO_TO_31, TWO_TO_31 + 1000, n - 1};
  for (int k = 0; k < 3; ++k) {
    mask[at[k]] = 1;
    advantages[at[k]] = (float)(k + 1); /* ratio 1: L = -A */
  }
  logp[at[2]] = NAN; /* a non-finite input, counted */
  tirl_ppo_options options = tirl_ppo_options_default();
  options.aggregation = TIRL_AGG_TOKEN_SUM;
  tirl_ppo_result result;
  const double start = seconds();
  tirl_status s = tirl_ppo_loss(logp, old_logp, advantages, mask, n, NULL, 0, NULL, NULL, &options,
                                NULL, &result, tirl_cpu());
  printf("ppoLoss over %lld tokens: %.2f s\n", (long long)n, seconds() - start);
  CHECK(s == TIRL_OK, "ppo_loss: %s", tirl_last_error());
  CHECK(result.masked_tokens == 3 && result.non_finite == 1, "ppo counts %lld %lld",
        (long long)result.masked_tokens, (long long)result.non_finite);
  CHECK(isnan(result.loss), "ppo loss with a NaN token %g", result.loss);
  logp[at[2]] = 0.0f;
  s = tirl_ppo_loss(logp, old_logp, advantages, mask, n, NULL, 0, NULL, NULL, &options, NULL,
                    &result, tirl_cpu());
  CHECK(s == TIRL_OK && result.loss == -6.0 && result.non_finite == 0, "ppo loss %g", result.loss);

  /* int32 seq_offsets cannot describe more than 2^31 - 1 tokens: refused by name. */
  const int32_t offsets[2] = {0, 2147483647};
  options.aggregation = TIRL_AGG_SEQ_MEAN_TOKEN_MEAN;
  s = tirl_ppo_loss(logp, old_logp, advantages, mask, n, offsets, 1, NULL, NULL, &options, NULL,
                    &result, tirl_cpu());
  CHECK(s == TIRL_ERROR_INVALID_ARGUMENT && strstr(tirl_last_error(), "2^31 - 1 tokens") != NULL,
        "ppo with offsets over 2^31 tokens: %d %s", (int)s, tirl_last_error());
  munmap(logp, (size_t)n * sizeof(float));
  munmap(old_logp, (size_t)n * sizeof(float));
  munmap(advantages, (size_t)n * sizeof(float));
  munmap(mask, (size_t)n);
}

/* 2^31 + 4096 pairs, outputs skipped: the accuracy count and the mean run in 64 bits. */
static void test_dpo_loss(void) {
  const int64_t n = TWO_TO_31 + 4096;
  float* policy_chosen = zeroed((size_t)n * sizeof(float));
  float* zero = zeroed((size_t)n * sizeof(float));
  policy_chosen[n - 1] = 1000.0f; /* beta delta = 100: loss 0, a correct pair */
  tirl_dpo_options options = tirl_dpo_options_default();
  tirl_dpo_result result;
  const double start = seconds();
  tirl_status s = tirl_dpo_loss(policy_chosen, zero, zero, zero, n, &options, NULL, NULL, NULL,
                                NULL, &result, tirl_cpu());
  printf("dpoLoss over %lld pairs: %.2f s\n", (long long)n, seconds() - start);
  CHECK(s == TIRL_OK, "dpo_loss: %s", tirl_last_error());
  /* Every other pair has delta 0: loss log 2 (as the f32 kernel rounds it). */
  const double log2_f32 = (double)(float)log(2.0);
  CHECK(close_to(result.loss, log2_f32 * (double)(n - 1) / (double)n, 1e-6), "dpo loss %.12g",
        result.loss);
  CHECK(result.reward_accuracy == 1.0 / (double)n, "dpo accuracy %.12g", result.reward_accuracy);
  munmap(policy_chosen, (size_t)n * sizeof(float));
  munmap(zero, (size_t)n * sizeof(float));
}

/* Every op with int32 seq_offsets refuses more than 2^31 - 1 tokens before reading any
 * array, on either device (on CUDA the check needs no device data, nor the CUDA library). */
static void test_offset_limit(void) {
  const int64_t n = TWO_TO_31;
  float values[1] = {0.0f};
  uint8_t bytes[1] = {0};
  int32_t counts[1] = {0};
  const int32_t offsets[2] = {0, 2147483647};
  const tirl_device cuda = {TIRL_DEVICE_CUDA, 0, NULL};
  const tirl_device devices[2] = {tirl_cpu(), cuda};
  for (int d = 0; d < 2; ++d) {
    tirl_ppo_options options = tirl_ppo_options_default();
    tirl_ppo_result result;
    for (int op = 0; op < 4; ++op) {
      tirl_status s =
          op == 0 ? tirl_sequence_logprobs(values, bytes, n, offsets, 1, 0, values, devices[d])
          : op == 1 ? tirl_sequence_logprobs_backward(values, bytes, n, offsets, 1, 0, values,
                                                      devices[d])
          : op == 2 ? tirl_feedback_mask(bytes, n, offsets, 1, NULL, bytes, counts, devices[d])
                    : tirl_ppo_loss(values, values, values, bytes, n, offsets, 1, NULL, NULL,
                                    &options, NULL, &result, devices[d]);
      CHECK(s == TIRL_ERROR_INVALID_ARGUMENT &&
                strstr(tirl_last_error(), "at most 2^31 - 1 tokens with int32 seq_offsets") != NULL,
            "device %d op %d: status %d, %s", d, op, (int)s, tirl_last_error());
    }
  }
}

int main(void) {
  test_offset_limit();
  test_token_logprobs();
  test_ppo_loss();
  test_dpo_loss();
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("scale_test: all passed\n");
  return 0;
}
