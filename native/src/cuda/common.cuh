// Helpers shared by the CUDA kernels of libtirl_cuda.so: error reporting (the library has
// its own per-thread message, read by the core through the backend table), the current
// device and stream of a call, stream-ordered scratch memory, and deterministic reductions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

#include "common/guard_exceptions.h"
#include "tirl/tirl.h"

namespace tirl::cuda {

// Records `message` as this thread's last error and returns `status`.
tirl_status fail(tirl_status status, const std::string& message);
// Clears this thread's last error and returns TIRL_OK.
tirl_status ok();
const char* last_error();

// "<op>: CUDA error <name> (<description>) in <what>", as TIRL_ERROR_CUDA.
tirl_status cuda_failure(cudaError_t error, const char* op, const char* what);

// Returns from the enclosing function with a TIRL_ERROR_CUDA status when `call` fails.
#define TIRL_CUDA_TRY(op, call)                                               \
  do {                                                                        \
    cudaError_t tirl_cuda_error_ = (call);                                    \
    if (tirl_cuda_error_ != cudaSuccess) {                                    \
      return ::tirl::cuda::cuda_failure(tirl_cuda_error_, op, #call);         \
    }                                                                         \
  } while (0)

// Runs `body` (returning tirl_status) and turns C++ exceptions into statuses: none
// crosses the library boundary.
template <class Body>
tirl_status guarded(Body&& body) noexcept {
  return guard_exceptions([](tirl_status s, const char* m) { return fail(s, m); }, body);
}

inline cudaStream_t stream_of(tirl_device device) {
  return static_cast<cudaStream_t>(device.stream);
}

// Makes device.index current for the scope of a call and restores the caller's device.
class DeviceScope {
 public:
  explicit DeviceScope(tirl_device device) : target_(device.index) {}
  // Separate from the constructor so that a failure becomes a status.
  cudaError_t enter() {
    cudaError_t e = cudaGetDevice(&previous_);
    if (e != cudaSuccess) return e;
    if (previous_ == target_) return cudaSuccess;
    e = cudaSetDevice(target_);
    if (e == cudaSuccess) switched_ = true;
    return e;
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int target_;
  int previous_ = 0;
  bool switched_ = false;
};

// Device scratch memory ordered on a stream (cudaMallocAsync): freed on the same stream
// when the scope ends, so it is reused without a device-wide synchronisation.
class Scratch {
 public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  cudaError_t allocate(size_t bytes) {
    keep_pool_warm();
    return cudaMallocAsync(&data_, bytes, stream_);
  }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  ~Scratch() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

 private:
  // The current device's default pool returns its memory to the driver at every
  // synchronisation unless told to keep some: scratch would then be mapped anew on each
  // call. It keeps up to 64 MiB (set once per device; other users of the pool benefit too).
  static void keep_pool_warm();

  cudaStream_t stream_;
  void* data_ = nullptr;
};

// The most blocks a grid's x dimension takes (2^31 - 1).
constexpr int64_t kMaxGridBlocks = 2147483647;

// Blocks for `items` work items of `per_block` each: at least 1, at most kMaxGridBlocks.
// A kernel launched with it strides over the grid, so the cap never drops an item.
inline unsigned blocks_for(int64_t items, int64_t per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxGridBlocks ? kMaxGridBlocks : blocks);
}

}  // namespace tirl::cuda

namespace tirl::cuda {

struct OffsetsReport;

// After the stream was synchronised: the CPU's message for the first problem the device
// found in seq_offsets (checked in check_seq_offsets' order), or TIRL_OK.
tirl_status offsets_error(const char* op, const OffsetsReport& report, const int32_t* seq_offsets,
                          int64_t num_tokens);

}  // namespace tirl::cuda
