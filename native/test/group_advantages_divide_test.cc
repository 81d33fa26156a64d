// cpu/group_advantages_divide.h's divide_by_7 (the division by 7 of groupAdvantages' groups
// of eight, done without the divider) against the division it replaces, bit for bit, on
// each SIMD width the CPU has: random bit patterns over the whole double range, quotients
// next to every kind of rounding boundary (just above, at and below the midpoints between
// two doubles, exact quotients), the edges of the fast range (2^-1000, DBL_MAX), subnormals,
// zeros of both signs, Inf, NaN and negative numbers, in vectors that mix fast and
// fallback lanes.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cpu/group_advantages_divide.h"

namespace {

#if defined(__x86_64__) && defined(__GNUC__)

uint64_t bits_of(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

double from_bits(uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// xorshift64*: fixed seed, so every run checks the same values.
uint64_t state = 0x9E3779B97F4A7C15ull;
uint64_t next_random() {
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1Dull;
}

__attribute__((target("avx2,fma"))) void divide_avx2(const double* in, double* out, size_t n) {
  for (size_t i = 0; i + 4 <= n; i += 4) {
    _mm256_storeu_pd(out + i, tirl::cpu::divide_by_7(_mm256_loadu_pd(in + i)));
  }
}

__attribute__((target("avx512f,avx2,fma"))) void divide_avx512(const double* in, double* out,
                                                                size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    _mm512_storeu_pd(out + i, tirl::cpu::divide_by_7(_mm512_loadu_pd(in + i)));
  }
}

// Dividends whose quotient by 7 lies next to a rounding boundary of q's binade: 7 m for the
// midpoint m = q + ulp(q) / 2 and for q itself, rounded to a double, and the dividends up
// to 3 ulp either side. 7 m needs 57 bits: long double (64) holds it exactly.
void add_boundaries(double q, std::vector<double>& values) {
  const long double ulp = static_cast<long double>(std::nextafter(q, HUGE_VAL)) - q;
  for (const long double target : {7.0L * (q + ulp / 2), 7.0L * q, 7.0L * (q - ulp / 2)}) {
    double a = static_cast<double>(target);
    for (int k = 0; k < 3; ++k) a = std::nextafter(a, -HUGE_VAL);
    for (int k = 0; k < 7; ++k, a = std::nextafter(a, HUGE_VAL)) values.push_back(a);
  }
}

std::vector<double> test_values() {
  std::vector<double> values;
  // Random bit patterns: every exponent, sign and payload, NaN and Inf included.
  for (int i = 0; i < (1 << 20); ++i) values.push_back(from_bits(next_random()));
  // Random positive numbers over the range a sum of squared deviations takes.
  for (int i = 0; i < (1 << 20); ++i) {
    const uint64_t mantissa = next_random() >> 12;
    const uint64_t exponent = 1 + next_random() % 2046;
    values.push_back(from_bits(exponent << 52 | mantissa));
  }
  // Quotients next to midpoints and exact ones, in every binade of the fast range.
  for (int e = -995; e <= 1020; ++e) {
    for (int i = 0; i < 24; ++i) {
      const double q = std::ldexp(1.0 + static_cast<double>(next_random() >> 12) * 0x1p-52, e);
      add_boundaries(q, values);
    }
    add_boundaries(std::ldexp(1.0, e), values);                  // a power of two
    add_boundaries(std::ldexp(2.0 - 0x1p-52, e), values);        // all-ones significand
  }
  // The sums of squares of small integers (0/1 rewards and the like), and squares of floats.
  for (int i = 0; i <= 4096; ++i) values.push_back(i / 8.0);
  for (int i = 0; i < 4096; ++i) {
    const float r = static_cast<float>(static_cast<double>(next_random() >> 11) * 0x1p-53 * 100);
    values.push_back(2.0 * static_cast<double>(r) * r);
  }
  // The edges: the fast range's ends and their neighbours, subnormals, zeros, Inf, NaN.
  const double edges[] = {tirl::cpu::kExactSeventhLow, DBL_MAX, DBL_MIN, 7 * DBL_MIN, 0x1p-1022 * 7,
                         4.9e-324, 1.0, 7.0, 0x1p-1000 * 7};
  for (double edge : edges) {
    double a = edge;
    for (int k = 0; k < 4; ++k) a = std::nextafter(a, 0.0);
    for (int k = 0; k < 9; ++k, a = std::nextafter(a, HUGE_VAL)) {
      values.push_back(a);
      values.push_back(-a);
    }
  }
  for (int i = 0; i < 4096; ++i) values.push_back(from_bits(next_random() >> 12));  // subnormal
  const double specials[] = {0.0, -0.0, HUGE_VAL, -HUGE_VAL, std::nan(""), -std::nan("")};
  for (double special : specials) values.push_back(special);
  // Shuffled, so that vectors mix fast lanes with fallback ones; padded to whole vectors.
  for (size_t i = values.size() - 1; i > 0; --i) std::swap(values[i], values[next_random() % (i + 1)]);
  while (values.size() % 8 != 0) values.push_back(1.0);
  return values;
}

int check(const char* path, void (*divide)(const double*, double*, size_t),
          const std::vector<double>& values) {
  std::vector<double> got(values.size());
  divide(values.data(), got.data(), values.size());
  int failures = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const double want = values[i] / 7.0;
    if (bits_of(got[i]) != bits_of(want) && ++failures <= 20) {
      std::printf("FAIL %s: %a / 7 = %a, got %a\n", path, values[i], want, got[i]);
    }
  }
  std::printf("%s: %zu dividends, %d wrong\n", path, values.size(), failures);
  return failures;
}

#endif

}  // namespace

int main() {
#if defined(__x86_64__) && defined(__GNUC__)
  const std::vector<double> values = test_values();
  int failures = 0;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    failures += check("avx2", divide_avx2, values);
  } else {
    std::printf("avx2: not supported by this CPU, skipped\n");
  }
  if (__builtin_cpu_supports("avx512f")) {
    failures += check("avx512", divide_avx512, values);
  } else {
    std::printf("avx512: not supported by this CPU, skipped\n");
  }
  return failures == 0 ? 0 : 1;
#else
  std::printf("no x86-64 SIMD paths on this target: nothing to check\n");
  return 0;
#endif
}
