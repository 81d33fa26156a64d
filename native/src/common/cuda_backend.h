// The backend table: the ops of native/src/ops.def as function pointers, each with the
// exact signature of its C ABI function. The core's front door (api/<op>.cc) validates a
// call once, then hands it to the table of the device it runs on: the CPU kernels'
// (cpu/backend.cc) or the CUDA library's (libtirl_cuda.so, cuda/backend.cu), whose pointer
// arguments are device pointers. A backend validates nothing the core could check on the
// host (counts, null pointers, option ranges); only device data (seq_offsets, roles, labels
// in device memory) is checked where it lives.
//
// The core and the CUDA library are built together from one tree, so the CUDA table is
// versioned only to refuse a stale library left beside a newer core. The version is a hash
// of ops.def's names and signatures (so an op added, removed, moved or changed there changes
// it by itself) and of TIRL_CUDA_BACKEND_BASE_VERSION, which goes up when the fields before
// `ops` change.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "tirl/tirl.h"

#define TIRL_CUDA_BACKEND_BASE_VERSION 2
#define TIRL_CUDA_BACKEND_SYMBOL "tirl_cuda_backend_v1"
#define TIRL_CUDA_LIBRARY_NAME "libtirl_cuda.so"

// Strips the parentheses of an ops.def parameter or argument list.
#define TIRL_EXPAND(...) __VA_ARGS__

namespace tirl {

// 32-bit FNV-1a of `text`, folded into `hash`.
constexpr uint32_t fnv1a(const char* text, uint32_t hash = 2166136261u) {
  for (; *text != '\0'; ++text) hash = (hash ^ static_cast<uint8_t>(*text)) * 16777619u;
  return hash;
}

// TIRL_CUDA_BACKEND_VERSION: the table's layout as a number (see the top of the file).
inline constexpr uint32_t kCudaBackendVersion = fnv1a(
#define TIRL_OP(name, public_name, params, args) #name #params ";"
#include "ops.def"
#undef TIRL_OP
    "", TIRL_CUDA_BACKEND_BASE_VERSION);

}  // namespace tirl

#define TIRL_CUDA_BACKEND_VERSION (::tirl::kCudaBackendVersion)

extern "C" {

typedef enum tirl_copy_direction {
  TIRL_COPY_HOST_TO_DEVICE = 0,
  TIRL_COPY_DEVICE_TO_HOST = 1
} tirl_copy_direction;

// One backend's ops, in ops.def's order.
typedef struct tirl_op_table {
#define TIRL_OP(name, public_name, params, args) \
  tirl_status (*name)(TIRL_EXPAND params, tirl_device device);
#include "ops.def"
#undef TIRL_OP
} tirl_op_table;

typedef struct tirl_cuda_backend {
  uint32_t version;  // TIRL_CUDA_BACKEND_VERSION
  uint32_t size;     // sizeof(tirl_cuda_backend)

  // Message of the last failed backend call on this thread.
  const char* (*last_error)(void);
  // Devices the driver reports; a failure's message says why (no driver, a CUDA error).
  tirl_status (*device_count)(int32_t* count);

  tirl_status (*malloc)(tirl_device device, size_t bytes, void** pointer);
  tirl_status (*free)(tirl_device device, void* pointer);
  tirl_status (*memcpy)(tirl_device device, void* destination, const void* source, size_t bytes,
                        tirl_copy_direction direction);
  tirl_status (*synchronize)(tirl_device device);

  tirl_op_table ops;
} tirl_cuda_backend;

typedef const tirl_cuda_backend* (*tirl_cuda_backend_entry)(void);

}  // extern "C"
