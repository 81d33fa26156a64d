// Argument checks shared by every op's C entry point. Each returns TIRL_OK or records a
// message naming the argument, what was expected and what came.
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
