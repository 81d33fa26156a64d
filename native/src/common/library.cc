// Library-wide queries: version, threads, SIMD path, build flags.
#include "common/error.h"
#include "common/parallel.h"
#include "common/simd.h"
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

// The path the hot loops run with (common/simd.h): chosen at run time from the CPU and
// TIRL_SIMD, whatever the build's baseline.
extern "C" const char* tirl_simd_level(void) { return tirl::simd_path_name(tirl::simd_path()); }
