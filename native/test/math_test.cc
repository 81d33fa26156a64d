// The vectorisable elementary functions of native/src/math/ against double-precision libm,
// over the whole float range: every 251st bit pattern of the positive floats (251 is prime, so
// every mantissa low-bit pattern and every exponent is visited), every subnormal below 2^16
// ulp, and the special values. The kernels' own tests cover them inside each op; this one
// pins the accuracy each function claims in its header.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <initializer_list>
#include <limits>

#include "math/exp.h"
#include "math/log.h"

namespace {

int failures = 0;

float from_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// The distance in ulp of float `got` from the double `want` (the ulp of the float nearest
// to `want`; for subnormal results, the subnormal spacing 2^-149).
double ulp_error(float got, double want) {
  const double nearest = static_cast<float>(want);
  int exponent = 0;
  std::frexp(nearest == 0 ? std::ldexp(1.0, -126) : nearest, &exponent);
  const double ulp = std::ldexp(1.0, std::max(exponent - 24, -149));
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

void expect(bool ok, const char* what, float x, float got) {
  if (ok) return;
  if (++failures <= 20) std::printf("FAIL %s at x = %a (%g): got %a (%g)\n", what, x, x, got, got);
}

void check_log() {
  double worst = 0;
  float worst_x = 0;
  auto check = [&](float x) {
    const float got = tirl::log_any(x);
    const double want = std::log(static_cast<double>(x));
    const double error = ulp_error(got, want);
    if (error > worst) {
      worst = error;
      worst_x = x;
    }
    expect(error <= 2.0, "log_any within 2 ulp", x, got);
  };
  for (uint64_t bits = 1; bits < 0x7f800000u; bits += 251) check(from_bits(static_cast<uint32_t>(bits)));
  for (uint32_t bits = 1; bits < (1u << 16); ++bits) check(from_bits(bits));  // subnormals
  for (float x : {1.0f, 2.0f, 0.5f, 1.17549435e-38f, 1.4e-45f, 3.40282347e38f, 0.70710677f, 1.4142135f,
                  1.0000001f, 0.99999994f, 2.7182817f}) {
    check(x);
  }
  expect(tirl::log_any(1.0f) == 0.0f, "log_any(1) == 0", 1.0f, tirl::log_any(1.0f));
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect(tirl::log_any(0.0f) == -inf, "log_any(0) == -Inf", 0.0f, tirl::log_any(0.0f));
  expect(tirl::log_any(-0.0f) == -inf, "log_any(-0) == -Inf", -0.0f, tirl::log_any(-0.0f));
  expect(tirl::log_any(inf) == inf, "log_any(Inf) == Inf", inf, tirl::log_any(inf));
  for (float x : {-1.0f, -1.4e-45f, -inf, nan, -nan, from_bits(0x7f800001u), from_bits(0xffc00000u)}) {
    expect(std::isnan(tirl::log_any(x)), "log_any is NaN", x, tirl::log_any(x));
  }
  std::printf("log_any: worst %.3f ulp at %a\n", worst, worst_x);
}

void check_exp() {
  double worst = 0;
  float worst_x = 0;
  // exp_any over its whole domain: -104 .. 88.72 (below, 0; above, +Inf).
  auto check = [&](float x) {
    const float got = tirl::exp_any(x);
    if (std::fabs(x) <= 80.0f) {
      const float bounded = tirl::exp_bounded(x);
      expect(std::memcmp(&got, &bounded, sizeof got) == 0, "exp_any == exp_bounded bitwise", x, got);
    }
    const double want = std::exp(static_cast<double>(x));
    if (want < std::ldexp(1.0, -126)) {  // subnormal results: one rounding, within 1 subnormal ulp
      expect(std::fabs(static_cast<double>(got) - want) <= std::ldexp(1.0, -149), "exp_any subnormal", x, got);
      return;
    }
    const double error = ulp_error(got, want);
    if (error > worst) {
      worst = error;
      worst_x = x;
    }
    expect(error <= 3.0, "exp_any within 3 ulp", x, got);
  };
  for (uint64_t bits = 0; bits < 0x42b17218u; bits += 251) {  // [0, 88.72)
    check(from_bits(static_cast<uint32_t>(bits)));
    check(-from_bits(static_cast<uint32_t>(bits)));
  }
  const float inf = std::numeric_limits<float>::infinity();
  expect(tirl::exp_any(89.0f) == inf, "exp_any(89) == Inf", 89.0f, tirl::exp_any(89.0f));
  expect(tirl::exp_any(inf) == inf, "exp_any(Inf) == Inf", inf, tirl::exp_any(inf));
  expect(tirl::exp_any(-inf) == 0.0f, "exp_any(-Inf) == 0", -inf, tirl::exp_any(-inf));
  expect(std::isnan(tirl::exp_any(std::numeric_limits<float>::quiet_NaN())), "exp_any(NaN) is NaN", 0, 0);
  std::printf("exp_any: worst %.3f ulp at %a\n", worst, worst_x);
}

// exp_double_bounded against long double expl (64-bit mantissa on x86, an independent and
// more precise reference): 2^20 evenly spaced points of [-20, 20] (the range rolloutCorrection
// uses) and 2^16 of [-700, 700]; e^0 = 1 exactly; NaN in, NaN out.
void check_exp_double() {
  double worst = 0, worst_x = 0;
  auto check = [&](double x) {
    const double got = tirl::exp_double_bounded(x);
    const long double want = expl(static_cast<long double>(x));
    int exponent = 0;
    std::frexp(static_cast<double>(want), &exponent);
    const long double ulp = std::ldexp(1.0L, exponent - 53);
    const double error = static_cast<double>(fabsl(static_cast<long double>(got) - want) / ulp);
    if (error > worst) {
      worst = error;
      worst_x = x;
    }
    if (!(error <= 2.0) && ++failures <= 20) {
      std::printf("FAIL exp_double_bounded within 2 ulp at x = %a: got %a (%.3f ulp)\n", x, got, error);
    }
  };
  for (int i = 0; i <= (1 << 20); ++i) check(-20.0 + 40.0 * i / (1 << 20));
  for (int i = 0; i <= (1 << 16); ++i) check(-700.0 + 1400.0 * i / (1 << 16));
  if (tirl::exp_double_bounded(0.0) != 1.0 && ++failures <= 20) std::printf("FAIL exp_double_bounded(0) != 1\n");
  if (!std::isnan(tirl::exp_double_bounded(std::numeric_limits<double>::quiet_NaN())) && ++failures <= 20) {
    std::printf("FAIL exp_double_bounded(NaN) is not NaN\n");
  }
  std::printf("exp_double_bounded: worst %.3f ulp at %a\n", worst, worst_x);
}

// log_normal has log_any's bits for the floats it takes: every 251st normal bit pattern of
// either sign, and +-0.
void check_log_normal() {
  auto same = [](float x) {
    const float a = tirl::log_any(x), b = tirl::log_normal(x);
    uint32_t bits_a, bits_b;
    std::memcpy(&bits_a, &a, sizeof a);
    std::memcpy(&bits_b, &b, sizeof b);
    expect(bits_a == bits_b, "log_normal has log_any's bits", x, b);
  };
  for (uint32_t bits = 0x00800000u; bits < 0x7f800000u; bits += 251) {
    same(from_bits(bits));
    same(from_bits(bits | 0x80000000u));
  }
  same(0.0f);
  same(-0.0f);
}

}  // namespace

int main() {
  check_log();
  check_log_normal();
  check_exp();
  check_exp_double();
  if (failures > 0) {
    std::printf("%d failures\n", failures);
    return 1;
  }
  std::printf("ok\n");
  return 0;
}
