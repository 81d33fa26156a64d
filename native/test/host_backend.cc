// A stand-in for libtirl_cuda.so that keeps "device" memory on the host and runs every op
// on the CPU kernels (through libtirl's C ABI, with the CPU device). Loaded through
// TIRL_CUDA_LIBRARY by test/cuda_emulated.test.ts, it lets machines without a GPU test
// everything between JavaScript and the CUDA library: device arrays, the bindings'
// device paths, and the core's forwarding of CUDA devices. Never shipped (it is built
// outside the addon's directory).
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/cuda_backend.h"

namespace {

thread_local std::string last_message;

const char* last_error() { return last_message.c_str(); }

// The emulated device: one, ordinal 0.
tirl_status check_device(tirl_device device, const char* op) {
  if (device.type == TIRL_DEVICE_CUDA && device.index == 0) return TIRL_OK;
  last_message = std::string(op) + ": the host emulation has only device 0";
  return TIRL_ERROR_INVALID_ARGUMENT;
}

// Runs a CPU kernel and carries its message over as this backend's.
tirl_status carry(tirl_status status) {
  last_message = status == TIRL_OK ? "" : tirl_last_error();
  return status;
}

tirl_status device_count(int32_t* count) {
  *count = 1;
  return TIRL_OK;
}

tirl_status allocate(tirl_device device, size_t bytes, void** pointer) {
  if (tirl_status s = check_device(device, "tirl_cuda_malloc")) return s;
  *pointer = bytes == 0 ? nullptr : std::calloc(bytes, 1);
  if (bytes != 0 && *pointer == nullptr) {
    last_message = "tirl_cuda_malloc: out of (emulated) device memory";
    return TIRL_ERROR_OUT_OF_MEMORY;
  }
  return TIRL_OK;
}

tirl_status release(tirl_device device, void* pointer) {
  if (tirl_status s = check_device(device, "tirl_cuda_free")) return s;
  std::free(pointer);
  return TIRL_OK;
}

tirl_status copy(tirl_device device, void* destination, const void* source, size_t bytes,
                 tirl_copy_direction) {
  if (tirl_status s = check_device(device, "tirl_cuda_memcpy")) return s;
  std::memcpy(destination, source, bytes);
  return TIRL_OK;
}

tirl_status synchronize(tirl_device device) { return check_device(device, "tirl_cuda_synchronize"); }

// Each op of ops.def: the CPU kernels through libtirl's C ABI, on the CPU device.
#define TIRL_OP(name, public_name, params, args)                       \
  tirl_status name(TIRL_EXPAND params, tirl_device device) {          \
    if (tirl_status s = check_device(device, public_name)) return s; \
    return carry(tirl_##name(TIRL_EXPAND args, tirl_cpu()));           \
  }
#include "ops.def"
#undef TIRL_OP

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
#define TIRL_OP(name, public_name, params, args) &name,
#include "ops.def"
#undef TIRL_OP
    },
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const tirl_cuda_backend* tirl_cuda_backend_v1(void) {
  return &kBackend;
}
