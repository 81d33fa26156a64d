// Library-wide queries: version, threads, SIMD path, build flags.
#include "common/error.h"
#include "common/parallel.h"
#include "tirl/tirl.h"

#ifndef TIRL_BUILD_INFO
#define TIRL_BUILD_INFO "unknown"
#endif

extern "C" {

const char* tirl_version(void) { return TIRL_VERSION_STRING; }

int32_t tirl_num_threads(void) { return tirl::num_threads(); }

tirl_status tirl_set_num_threads(int32_t n) {
  if (!tirl::set_num_threads(n)) {
    return tirl::fail(TIRL_ERROR_INVALID_ARGUMENT,
                      "tirl_set_num_threads: expected an integer in [1, 1024] but received " +
                          std::to_string(n));
  }
  return tirl::ok();
}

const char* tirl_build_info(void) { return TIRL_BUILD_INFO; }

tirl_device tirl_cpu(void) { return tirl_device{TIRL_DEVICE_CPU, 0, nullptr}; }

}  // extern "C"

// The kernels are compiled for the baseline of the target architecture; this names it.
extern "C" const char* tirl_simd_level(void) {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#elif defined(__SSE2__)
  return "sse2";
#elif defined(__ARM_NEON)
  return "neon";
#else
  return "scalar";
#endif
}
