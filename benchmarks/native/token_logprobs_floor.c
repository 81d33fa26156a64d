// The memory floor of tokenLogprobs forward + backward, f32 vs bf16: the op's bytes and
// access pattern with no arithmetic, so that bf16's speed-up over f32 has a measured cap.
// Per logit the forward reads it (w B: 4 for f32, 2 for bf16) and the backward reads it
// again and writes the f32 gradient (4 B, non-temporal stores as the kernel's large
// gradients): 12 B vs 8 B, so 1.5x where one bandwidth serves both. Logits that fit the
// last-level cache can be re-read from it by the second pass (e.g. the 262 MB of bf16 at
// 4096 x 32,000 on a 300 MB L3), which this measures too. Each round runs both dtypes
// (order alternating), each pass split over T threads in contiguous slices.
//   cc -O2 -mavx2 -pthread benchmarks/native/token_logprobs_floor.c -o /tmp/tlp_floor
//   /tmp/tlp_floor [threads=2] [rounds=9] [tokens=4096] [vocab=32000]
// Prints min and median ms of the forward floor and the forward + backward floor per dtype,
// and their f32 / bf16 ratios.
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int compare(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static float* logits32;
static uint16_t* logits16;
static float* grad;
static int64_t elements;
static volatile float sink;

typedef struct {
  int64_t first, last;  // multiples of 16
  int bf16, backward;
} Slice;

// Forward: read the logits (a max, so the loads cannot be dropped). Backward: read them
// again, widen bf16 and stream an f32 out per logit.
static void* run_slice(void* arg) {
  const Slice* s = (const Slice*)arg;
  __m256 m = _mm256_setzero_ps();
  for (int64_t i = s->first; i < s->last; i += 16) {
    __m256 a, b;
    if (s->bf16) {
      const __m256i words = _mm256_load_si256((const __m256i*)(logits16 + i));
      a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(words)), 16));
      b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(words, 1)), 16));
    } else {
      a = _mm256_load_ps(logits32 + i);
      b = _mm256_load_ps(logits32 + i + 8);
    }
    if (s->backward) {
      _mm256_stream_ps(grad + i, a);
      _mm256_stream_ps(grad + i + 8, b);
    } else {
      m = _mm256_max_ps(m, _mm256_max_ps(a, b));
    }
  }
  _mm_sfence();
  float out[8];
  _mm256_storeu_ps(out, m);
  sink = out[0];
  return NULL;
}

static void run_pass(int threads, int bf16, int backward) {
  pthread_t ids[64];
  Slice slices[64];
  const int64_t per = (elements / threads) & ~(int64_t)15;
  for (int k = 0; k < threads; ++k) {
    slices[k].first = k * per;
    slices[k].last = k + 1 == threads ? elements : (k + 1) * per;
    slices[k].bf16 = bf16;
    slices[k].backward = backward;
    pthread_create(&ids[k], NULL, run_slice, &slices[k]);
  }
  for (int k = 0; k < threads; ++k) pthread_join(ids[k], NULL);
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? atoi(argv[2]) : 9;
  const int64_t tokens = argc > 3 ? atoll(argv[3]) : 4096;
  const int64_t vocab = argc > 4 ? atoll(argv[4]) : 32000;
  if (threads < 1 || threads > 64 || rounds < 1) return 2;
  elements = (tokens * vocab) & ~(int64_t)15;
  logits32 = aligned_alloc(64, (size_t)elements * 4);
  logits16 = aligned_alloc(64, (size_t)elements * 2);
  grad = aligned_alloc(64, (size_t)elements * 4);
  if (!logits32 || !logits16 || !grad) return 1;
  for (int64_t i = 0; i < elements; ++i) {  // every page touched before timing
    logits32[i] = (float)(i % 1000) * 0.01f;
    logits16[i] = (uint16_t)(0x3f80 + (i & 0x7f));
    grad[i] = 0.0f;
  }
  double* times[2][2];  // [dtype][forward, forward + backward]
  for (int d = 0; d < 2; ++d)
    for (int p = 0; p < 2; ++p) times[d][p] = malloc(sizeof(double) * rounds);
  for (int r = -1; r < rounds; ++r) {  // round -1 warms up
    for (int k = 0; k < 2; ++k) {
      const int bf16 = (r & 1) ? 1 - k : k;
      const double t0 = now_ms();
      run_pass(threads, bf16, 0);
      const double t1 = now_ms();
      run_pass(threads, bf16, 1);
      const double t2 = now_ms();
      if (r >= 0) {
        times[bf16][0][r] = t1 - t0;
        times[bf16][1][r] = t2 - t0;
      }
    }
  }
  for (int d = 0; d < 2; ++d)
    for (int p = 0; p < 2; ++p) qsort(times[d][p], rounds, sizeof(double), compare);
  const char* names[2] = {"forward (read)", "forward + backward (read, read + write f32)"};
  printf("%lld x %lld logits, %d threads, %d rounds\n", (long long)tokens, (long long)vocab, threads, rounds);
  for (int p = 0; p < 2; ++p) {
    printf("%s: f32 min %.2f med %.2f ms | bf16 min %.2f med %.2f ms | f32/bf16 min %.3f med %.3f\n",
           names[p], times[0][p][0], times[0][p][rounds / 2], times[1][p][0], times[1][p][rounds / 2],
           times[0][p][0] / times[1][p][0], times[0][p][rounds / 2] / times[1][p][rounds / 2]);
  }
  return 0;
}
