#include "common/validate.h"

#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tirl {

std::string format_double(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

tirl_status check_value(bool valid, const char* op, const char* name, const char* expected,
                        double value) {
  if (valid) return TIRL_OK;
  return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(op) + ": Expected " + expected + " for " +
                                               name + " but received " + format_double(value));
}

tirl_status missing(const char* op, const char* name, const char* because) {
  return fail(TIRL_ERROR_INVALID_ARGUMENT,
              std::string(op) + ": Expected " + name + " with " + because + " but received NULL");
}

tirl_status check_pointer(const void* pointer, int64_t count, const char* op, const char* name) {
  if (pointer == nullptr && count > 0) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": Expected a non-null pointer (" + std::to_string(count) +
                    " elements) for " + name + " but received NULL");
  }
  return TIRL_OK;
}

tirl_status check_count(int64_t count, const char* op, const char* name) {
  // Arrays hold elements of up to 4 bytes: a larger count has no buffer, and would
  // overflow the kernels' size arithmetic.
  constexpr int64_t kMaxCount = INT64_MAX / 4;
  if (count < 0 || count > kMaxCount) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": Expected a size in [0, " + std::to_string(kMaxCount) +
                    "] for " + name + " but received " + std::to_string(count));
  }
  return TIRL_OK;
}

tirl_status check_offset_range(int64_t num_tokens, const char* op) {
  if (num_tokens > INT32_MAX) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) +
                    ": Expected at most 2^31 - 1 tokens with int32 seq_offsets but received " + std::to_string(num_tokens) + " tokens (num_tokens)");
  }
  return TIRL_OK;
}

tirl_status check_seq_offsets(const int32_t* seq_offsets, int64_t num_seqs, int64_t num_tokens,
                              const char* op) {
  if (seq_offsets == nullptr) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": Expected a non-null pointer for seq_offsets but received NULL");
  }
  if (tirl_status s = check_offset_range(num_tokens, op)) return s;
  if (seq_offsets[0] != 0) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(op) +
                                                 ": Expected seq_offsets[0] to be 0 but received " +
                                                 std::to_string(seq_offsets[0]));
  }
  for (int64_t i = 0; i < num_seqs; ++i) {
    if (seq_offsets[i + 1] < seq_offsets[i]) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(op) + ": Expected non-decreasing seq_offsets but received seq_offsets[" +
                      std::to_string(i + 1) + "] = " + std::to_string(seq_offsets[i + 1]) +
                      " < seq_offsets[" + std::to_string(i) + "] = " + std::to_string(seq_offsets[i]));
    }
  }
  if (seq_offsets[num_seqs] != num_tokens) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": Expected seq_offsets to end at the token count " +
                    std::to_string(num_tokens) + " but received one ending at " +
                    std::to_string(seq_offsets[num_seqs]));
  }
  return TIRL_OK;
}

tirl_status check_device(tirl_device device, const char* op) {
  if (device.type == TIRL_DEVICE_CPU) return TIRL_OK;
  if (device.type == TIRL_DEVICE_CUDA) {
    if (device.index < 0) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT,
                  std::string(op) + ": Expected a CUDA device index >= 0 for device.index but received " +
                      std::to_string(device.index));
    }
    return TIRL_OK;
  }
  return fail(TIRL_ERROR_INVALID_ARGUMENT,
              std::string(op) + ": Expected TIRL_DEVICE_CPU or TIRL_DEVICE_CUDA for device.type but received " +
                  std::to_string(device.type));
}

}  // namespace tirl
