// Argument checks shared by every op's C entry point (api/<op>.cc). Each returns TIRL_OK or
// records a message of the one shape, naming the C argument:
//   "<op>: Expected <what> for <c_name> but received <value>"
// (the bindings put their own names for the C names: clip_low becomes clipLow in JavaScript).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "tirl/tirl.h"

namespace tirl {

// `pointer` may be null only when `count` is 0.
tirl_status check_pointer(const void* pointer, int64_t count, const char* op, const char* name);

// 0 <= count <= INT64_MAX / 4 (the byte size of 4-byte elements fits in 64 bits).
tirl_status check_count(int64_t count, const char* op, const char* name);

// int32 offsets end at num_tokens: at most 2^31 - 1 tokens (checked on every device).
tirl_status check_offset_range(int64_t num_tokens, const char* op);

// check_offset_range, then seq_offsets[0] == 0, non-decreasing, seq_offsets[num_seqs] == num_tokens (host memory).
tirl_status check_seq_offsets(const int32_t* seq_offsets, int64_t num_seqs, int64_t num_tokens,
                              const char* op);

// A known device type with a non-negative CUDA ordinal. An op with a CUDA kernel checks
// this, then hands a CUDA device to the CUDA library (common/cuda.h: run_on_cuda).
tirl_status check_device(tirl_device device, const char* op);

// Unless `valid`: "<op>: Expected <expected> for <name> but received <value>".
tirl_status check_value(bool valid, const char* op, const char* name, const char* expected,
                        double value);

// "<op>: Expected <name> with <because> but received NULL": an array an option needs.
tirl_status missing(const char* op, const char* name, const char* because);

// The shortest text that reads back as `value` ("0.2", "1e+30"); NaN, Infinity, -Infinity.
std::string format_double(double value);

// Index arrays in host memory (labels, seq_offsets, group ids) are copied before they are
// checked, and the kernel indexes only with the copy: the caller may write to them while
// the kernel runs (another thread, a SharedArrayBuffer), and a value changed after its
// check must never become an out-of-bounds access. Points `data` (unless null) at a copy
// of its `count` elements owned by `copy`.
template <class T>
void use_private_copy(const T*& data, int64_t count, std::vector<T>& copy) {
  if (data == nullptr) return;
  copy.assign(data, data + count);
  data = copy.data();
}

}  // namespace tirl
