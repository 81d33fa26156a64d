#include "common/simd.h"

#include <cstdlib>
#include <cstring>

namespace tirl {
namespace {

SimdPath widest_supported() {
#if TIRL_SIMD_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return SimdPath::avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdPath::avx2;
#endif
  return SimdPath::baseline;
}

// TIRL_SIMD asks for a path; one the CPU lacks (or an unknown name) falls back to the
// widest it has, so a setting can never make the process crash on an illegal instruction.
SimdPath choose() {
  const SimdPath widest = widest_supported();
  const char* requested = std::getenv("TIRL_SIMD");
  if (requested == nullptr) return widest;
  SimdPath path = widest;
  if (std::strcmp(requested, "baseline") == 0 || std::strcmp(requested, "sse2") == 0) {
    path = SimdPath::baseline;
  } else if (std::strcmp(requested, "avx2") == 0) {
    path = SimdPath::avx2;
  } else if (std::strcmp(requested, "avx512") == 0) {
    path = SimdPath::avx512;
  }
  return path < widest ? path : widest;
}

}  // namespace

SimdPath simd_path() {
  static const SimdPath path = choose();
  return path;
}

const char* simd_path_name(SimdPath path) {
  switch (path) {
    case SimdPath::avx512: return "avx512";
    case SimdPath::avx2: return "avx2";
    case SimdPath::baseline: break;
  }
#if defined(__x86_64__)
  return "sse2";
#elif defined(__ARM_NEON)
  return "neon";
#else
  return "scalar";
#endif
}

}  // namespace tirl
