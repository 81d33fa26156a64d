// Device arrays as the op bindings see them: a JS object (class DeviceArray, defined in
// cuda.cc) owning CUDA memory of one dtype. The readers in common.h use these to accept a
// DeviceArray wherever a typed array is accepted, for ops that run on CUDA.
#pragma once

#include <napi.h>

#include <cstdint>

#include "tirl/tirl.h"

namespace tirl::binding {

enum class DeviceDtype { f32, u8, i32, u16, bf16 };

const char* dtype_name(DeviceDtype dtype);

// What an op needs from a DeviceArray. `data` is null for a freed array or length 0.
struct DeviceArrayInfo {
  void* data = nullptr;
  int64_t length = 0;
  DeviceDtype dtype = DeviceDtype::f32;
  tirl_device device{TIRL_DEVICE_CUDA, 0, nullptr};
  bool freed = false;
};

// True when `value` is a DeviceArray of this environment; then fills `info`.
bool read_device_array(Napi::Env env, Napi::Value value, DeviceArrayInfo* info);

// A new zeroed DeviceArray (allocated now, on the calling thread).
Napi::Object new_device_array(Napi::Env env, DeviceDtype dtype, int64_t length, int32_t device);

// Marks a DeviceArray as used by a pending async op: free() refuses to release memory a
// queued kernel may still read or write. Returns the lease to end (null when `value` is not
// a DeviceArray); the caller keeps `value` referenced until then.
void* begin_device_array_lease(Napi::Env env, Napi::Value value);
// Ends a lease without calling into JavaScript, so it also works while a worker's
// environment shuts down.
void end_device_array_lease(void* lease);

}  // namespace tirl::binding
