// The entry point of libtirl_cuda.so: the table the core looks up with dlsym, the error
// message of each thread, and device memory management.
#include <dlfcn.h>

#include <cstdio>
#include <mutex>

#include "common/cuda_backend.h"
#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "cuda/reduce.cuh"

namespace tirl::cuda {

namespace {
thread_local std::string last_message;
}

tirl_status fail(tirl_status status, const std::string& message) {
  last_message = message;
  return status;
}

tirl_status ok() {
  last_message.clear();
  return TIRL_OK;
}

const char* last_error() { return last_message.c_str(); }

tirl_status cuda_failure(cudaError_t error, const char* op, const char* what) {
  return fail(TIRL_ERROR_CUDA, std::string(op) + ": CUDA error " + cudaGetErrorName(error) +
                                   " (" + cudaGetErrorString(error) + ") in " + what);
}

void Scratch::keep_pool_warm() {
  constexpr int kDevices = 64;
  static std::once_flag once[kDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return;
  std::call_once(once[device], [device] {
    cudaMemPool_t pool;
    uint64_t keep = uint64_t{64} << 20;
    if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess ||
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
      cudaGetLastError();  // an optimisation only: leave no error for the op to find
    }
  });
}

tirl_status offsets_error(const char* op, const OffsetsReport& report, const int32_t* seq_offsets,
                          int64_t num_tokens) {
  if (report.first != 0) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(op) +
                                                 ": Expected seq_offsets[0] to be 0 but received " +
                                                 std::to_string(report.first));
  }
  if (report.first_decreasing != ~0ull) {
    const int64_t i = static_cast<int64_t>(report.first_decreasing);
    int32_t pair[2] = {0, 0};
    TIRL_CUDA_TRY(op, cudaMemcpy(pair, seq_offsets + i - 1, sizeof pair, cudaMemcpyDeviceToHost));
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": Expected non-decreasing seq_offsets but received seq_offsets[" +
                    std::to_string(i) + "] = " + std::to_string(pair[1]) + " < seq_offsets[" +
                    std::to_string(i - 1) + "] = " + std::to_string(pair[0]));
  }
  if (report.last != num_tokens) {
    return fail(TIRL_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": Expected seq_offsets to end at the token count " +
                    std::to_string(num_tokens) + " but received one ending at " +
                    std::to_string(report.last));
  }
  return TIRL_OK;
}

namespace {

tirl_status device_count(int32_t* count) {
  return guarded([&]() -> tirl_status {
    // The CUDA runtime reports a missing driver as an "insufficient driver"; looking for
    // the driver first names the real cause.
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) == nullptr) {  // stays loaded for the runtime
      const char* why = dlerror();
      return fail(TIRL_ERROR_UNSUPPORTED, std::string("no NVIDIA driver: libcuda.so.1 could not be loaded (") +
                                              (why != nullptr ? why : "unknown error") + ")");
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice) n = 0;
    else if (e != cudaSuccess) {
      return fail(TIRL_ERROR_CUDA, std::string("cudaGetDeviceCount failed: ") +
                                       cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
    }
    *count = n;
    return ok();
  });
}

tirl_status allocate(tirl_device device, size_t bytes, void** pointer) {
  constexpr const char* kOp = "tirl_cuda_malloc";
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    if (bytes == 0) {
      *pointer = nullptr;
      return ok();
    }
    void* memory = nullptr;
    cudaError_t e = cudaMalloc(&memory, bytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so later calls are unaffected
      return fail(TIRL_ERROR_OUT_OF_MEMORY, std::string(kOp) + ": out of device memory (" +
                                                std::to_string(bytes) + " bytes requested on device " +
                                                std::to_string(device.index) + ")");
    }
    TIRL_CUDA_TRY(kOp, e);
    e = cudaMemsetAsync(memory, 0, bytes, stream_of(device));
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_of(device));
    if (e != cudaSuccess) {
      cudaFree(memory);
      return cuda_failure(e, kOp, "zeroing the new allocation");
    }
    *pointer = memory;
    return ok();
  });
}

tirl_status release(tirl_device device, void* pointer) {
  constexpr const char* kOp = "tirl_cuda_free";
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    TIRL_CUDA_TRY(kOp, cudaFree(pointer));
    return ok();
  });
}

tirl_status copy(tirl_device device, void* destination, const void* source, size_t bytes,
                 tirl_copy_direction direction) {
  const char* op = direction == TIRL_COPY_HOST_TO_DEVICE ? "tirl_cuda_memcpy_h2d"
                                                         : "tirl_cuda_memcpy_d2h";
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(op, scope.enter());
    cudaMemcpyKind kind = direction == TIRL_COPY_HOST_TO_DEVICE ? cudaMemcpyHostToDevice
                                                                : cudaMemcpyDeviceToHost;
    TIRL_CUDA_TRY(op, cudaMemcpyAsync(destination, source, bytes, kind, stream_of(device)));
    TIRL_CUDA_TRY(op, cudaStreamSynchronize(stream_of(device)));
    return ok();
  });
}

tirl_status synchronize(tirl_device device) {
  constexpr const char* kOp = "tirl_cuda_synchronize";
  return guarded([&]() -> tirl_status {
    DeviceScope scope(device);
    TIRL_CUDA_TRY(kOp, scope.enter());
    TIRL_CUDA_TRY(kOp, cudaStreamSynchronize(stream_of(device)));
    return ok();
  });
}

const tirl_cuda_backend kBackend = {
    TIRL_CUDA_BACKEND_VERSION,
    sizeof(tirl_cuda_backend),
    &last_error,
    &device_count,
    &allocate,
    &release,
    &copy,
    &synchronize,
    {
#define TIRL_OP(name, public_name, params, args) &cuda::name,
#include "ops.def"
#undef TIRL_OP
    },
};

}  // namespace
}  // namespace tirl::cuda

extern "C" __attribute__((visibility("default"))) const tirl_cuda_backend* tirl_cuda_backend_v1(void) {
  return &tirl::cuda::kBackend;
}
