// CUDA from JavaScript: availability, and DeviceArray, a typed block of device memory that
// ops accept in place of typed arrays. The memory is released by free() or, failing that,
// when the object is garbage-collected.
#include <string>

#include "common.h"
#include "device_array.h"
#include "ops.h"

namespace tirl::binding {

namespace {

struct DtypeInfo {
  DeviceDtype dtype;
  const char* name;
  size_t bytes;
  napi_typedarray_type kind;
  const char* kind_name;
};

constexpr DtypeInfo kDtypes[] = {
    {DeviceDtype::f32, "f32", 4, napi_float32_array, "Float32Array"},
    {DeviceDtype::u8, "u8", 1, napi_uint8_array, "Uint8Array"},
    {DeviceDtype::i32, "i32", 4, napi_int32_array, "Int32Array"},
    {DeviceDtype::u16, "u16", 2, napi_uint16_array, "Uint16Array"},
    {DeviceDtype::bf16, "bf16", 2, napi_uint16_array, "Uint16Array"},
};

const DtypeInfo& info_of(DeviceDtype dtype) { return kDtypes[static_cast<int>(dtype)]; }

const char* kDtypeList = "'f32', 'u8', 'i32', 'u16' or 'bf16'";

// The largest length a typed array can have, so every DeviceArray can be downloaded.
constexpr double kMaxLength = 4294967295.0;

class DeviceArray : public Napi::ObjectWrap<DeviceArray> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(
        env, "DeviceArray",
        {
            StaticMethod<&DeviceArray::from>("from"),
            InstanceMethod<&DeviceArray::upload>("upload"),
            InstanceMethod<&DeviceArray::download>("download"),
            InstanceMethod<&DeviceArray::free>("free"),
            InstanceAccessor<&DeviceArray::get_dtype>("dtype"),
            InstanceAccessor<&DeviceArray::get_length>("length"),
            InstanceAccessor<&DeviceArray::get_byte_length>("byteLength"),
            InstanceAccessor<&DeviceArray::get_device>("device"),
            InstanceAccessor<&DeviceArray::get_freed>("freed"),
        });
  }

  // new DeviceArray(dtype, length, { device = 0 })
  explicit DeviceArray(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DeviceArray>(info) {
    Napi::Env env = info.Env();
    Napi::Value dtype = info[0];
    Napi::Value length = info[1];
    Napi::Value options = info[2];
    if (!dtype.IsString() || !parse_dtype(dtype.As<Napi::String>().Utf8Value(), &dtype_)) {
      throw Napi::TypeError::New(env, std::string("DeviceArray: Expected one of ") + kDtypeList +
                                          " for dtype but received " + describe(dtype));
    }
    if (!length.IsNumber()) {
      throw Napi::TypeError::New(env, "DeviceArray: Expected an integer in [0, 4294967295] for "
                                      "length but received " + describe(length));
    }
    const double n = length.As<Napi::Number>().DoubleValue();
    if (!(n >= 0 && n <= kMaxLength) || n != static_cast<double>(static_cast<int64_t>(n))) {
      throw Napi::RangeError::New(env, "DeviceArray: Expected an integer in [0, 4294967295] for "
                                       "length but received " + describe(length));
    }
    length_ = static_cast<int64_t>(n);
    if (!options.IsUndefined()) {
      if (!options.IsObject()) {
        throw Napi::TypeError::New(env, "DeviceArray: Expected an options object for options but "
                                        "received " + describe(options));
      }
      Napi::Value device = options.As<Napi::Object>().Get("device");
      if (!device.IsUndefined()) {
        if (!device.IsNumber()) {
          throw Napi::TypeError::New(env, "DeviceArray: Expected a CUDA device index for device "
                                          "but received " + describe(device));
        }
        const double d = device.As<Napi::Number>().DoubleValue();
        if (!(d >= 0 && d <= 1024) || d != static_cast<double>(static_cast<int32_t>(d))) {
          throw Napi::RangeError::New(env, "DeviceArray: Expected an integer in [0, 1024] for "
                                           "device but received " + describe(device));
        }
        device_ = static_cast<int32_t>(d);
      }
    }
    if (!tirl_cuda_available()) {
      throw Napi::Error::New(env, std::string("DeviceArray: CUDA is unavailable: ") +
                                      tirl_cuda_status());
    }
    tirl_status status = tirl_cuda_malloc(cuda_device(), byte_length(), &data_);
    if (status != TIRL_OK) throw status_error(env, status, tirl_last_error());
  }

  ~DeviceArray() override { release(); }

  DeviceArrayInfo describe_self() const {
    DeviceArrayInfo info;
    info.data = data_;
    info.length = length_;
    info.dtype = dtype_;
    info.device = cuda_device();
    info.freed = freed_;
    return info;
  }

  void lease(int delta) { leases_ += delta; }

 private:
  static bool parse_dtype(const std::string& text, DeviceDtype* dtype) {
    for (const DtypeInfo& d : kDtypes) {
      if (text == d.name) {
        *dtype = d.dtype;
        return true;
      }
    }
    return false;
  }

  tirl_device cuda_device() const { return tirl_device{TIRL_DEVICE_CUDA, device_, nullptr}; }
  size_t byte_length() const { return static_cast<size_t>(length_) * info_of(dtype_).bytes; }

  void release() {
    if (data_ != nullptr) tirl_cuda_free(cuda_device(), data_);
    data_ = nullptr;
    freed_ = true;
  }

  void require_live(Napi::Env env, const char* method) const {
    if (freed_) {
      throw Napi::Error::New(env, std::string("DeviceArray.") + method +
                                      ": the array has been freed");
    }
  }

  // A typed array matching this array's dtype and length, for upload or download.
  void* host_view(const Napi::CallbackInfo& info, Napi::Value value, const char* method,
                  const char* name) const {
    const DtypeInfo& d = info_of(dtype_);
    const std::string expected = std::string("a ") + d.kind_name + " of length " +
                                 std::to_string(length_) + " (dtype " + d.name + ")";
    const std::string message = std::string("DeviceArray.") + method + ": Expected " + expected +
                                " for " + name + " but received " + describe(value);
    if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != d.kind) {
      throw Napi::TypeError::New(info.Env(), message);
    }
    Napi::TypedArray array = value.As<Napi::TypedArray>();
    bool detached = false;
    if (napi_is_detached_arraybuffer(info.Env(), array.ArrayBuffer(), &detached) != napi_ok ||
        detached) {
      throw Napi::TypeError::New(info.Env(), std::string("DeviceArray.") + method + ": Expected " +
                                                 expected + " for " + name +
                                                 " but received one whose buffer is detached");
    }
    if (array.ElementLength() != static_cast<size_t>(length_)) {
      throw Napi::RangeError::New(info.Env(), message);
    }
    return static_cast<uint8_t*>(array.ArrayBuffer().Data()) + array.ByteOffset();
  }

  // DeviceArray.from(source, dtype?, options?): a new array holding a copy of `source`.
  static Napi::Value from(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Value source = info[0];
    std::string dtype;
    if (!info[1].IsUndefined()) {
      if (!info[1].IsString()) {
        throw Napi::TypeError::New(env, std::string("DeviceArray.from: Expected one of ") +
                                            kDtypeList + " for dtype but received " +
                                            describe(info[1]));
      }
      dtype = info[1].As<Napi::String>().Utf8Value();
    } else if (source.IsTypedArray()) {
      for (const DtypeInfo& d : kDtypes) {
        if (d.kind == source.As<Napi::TypedArray>().TypedArrayType()) {
          dtype = d.name;  // Uint16Array defaults to u16: bf16 is asked for by name
          break;
        }
      }
    }
    if (dtype.empty()) {
      throw Napi::TypeError::New(env, "DeviceArray.from: Expected a Float32Array, Uint8Array, "
                                      "Int32Array or Uint16Array for source but received " +
                                          describe(source));
    }
    const double length =
        source.IsTypedArray() ? static_cast<double>(source.As<Napi::TypedArray>().ElementLength()) : 0;
    Napi::Object array = constructor(env).New(
        {Napi::String::New(env, dtype), Napi::Number::New(env, length),
         info[2].IsUndefined() ? env.Undefined() : info[2]});
    DeviceArray* self = Unwrap(array);
    self->copy_in(info, source);
    return array;
  }

  void copy_in(const Napi::CallbackInfo& info, Napi::Value source) {
    require_live(info.Env(), "upload");
    void* host = host_view(info, source, "upload", "source");
    tirl_status status = tirl_cuda_memcpy_h2d(cuda_device(), data_, host, byte_length());
    if (status != TIRL_OK) throw status_error(info.Env(), status, tirl_last_error());
  }

  Napi::Value upload(const Napi::CallbackInfo& info) {
    copy_in(info, info[0]);
    return info.This();
  }

  // download(out?): copies the device memory into `out`, or a new typed array.
  Napi::Value download(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    require_live(env, "download");
    Napi::Value out = info[0];
    if (out.IsUndefined()) {
      out = new_typed_array(env, info_of(dtype_).kind_name, length_, "DeviceArray.download", "its result");
    }
    void* host = host_view(info, out, "download", "out");
    tirl_status status = tirl_cuda_memcpy_d2h(cuda_device(), host, data_, byte_length());
    if (status != TIRL_OK) throw status_error(env, status, tirl_last_error());
    return out;
  }

  Napi::Value free(const Napi::CallbackInfo& info) {
    if (leases_ > 0) {
      throw Napi::Error::New(info.Env(), "DeviceArray.free: the array is in use by a pending "
                                         "async op; free it after the Promise settles");
    }
    release();
    return info.Env().Undefined();
  }

  Napi::Value get_dtype(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), info_of(dtype_).name);
  }
  Napi::Value get_length(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(length_));
  }
  Napi::Value get_byte_length(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(byte_length()));
  }
  Napi::Value get_device(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), device_);
  }
  Napi::Value get_freed(const Napi::CallbackInfo& info) {
    return Napi::Boolean::New(info.Env(), freed_);
  }

 public:
  static Napi::Function constructor(Napi::Env env);

 private:
  void* data_ = nullptr;
  int64_t length_ = 0;
  DeviceDtype dtype_ = DeviceDtype::f32;
  int32_t device_ = 0;
  bool freed_ = false;
  int leases_ = 0;
};

// Per-environment state (worker threads each have their own class).
struct CudaData {
  Napi::FunctionReference device_array;
};

Napi::Function DeviceArray::constructor(Napi::Env env) {
  return env.GetInstanceData<CudaData>()->device_array.Value();
}

DeviceArray* unwrap_if_device_array(Napi::Env env, Napi::Value value) {
  CudaData* data = env.GetInstanceData<CudaData>();
  if (data == nullptr || !value.IsObject() || value.IsTypedArray()) return nullptr;
  if (!value.As<Napi::Object>().InstanceOf(data->device_array.Value())) return nullptr;
  return DeviceArray::Unwrap(value.As<Napi::Object>());
}

}  // namespace

const char* dtype_name(DeviceDtype dtype) { return info_of(dtype).name; }

bool read_device_array(Napi::Env env, Napi::Value value, DeviceArrayInfo* info) {
  DeviceArray* array = unwrap_if_device_array(env, value);
  if (array == nullptr) return false;
  *info = array->describe_self();
  return true;
}

Napi::Object new_device_array(Napi::Env env, DeviceDtype dtype, int64_t length, int32_t device) {
  Napi::Object options = Napi::Object::New(env);
  options.Set("device", device);
  return DeviceArray::constructor(env).New({Napi::String::New(env, dtype_name(dtype)),
                                            Napi::Number::New(env, static_cast<double>(length)),
                                            options});
}

void* begin_device_array_lease(Napi::Env env, Napi::Value value) {
  DeviceArray* array = unwrap_if_device_array(env, value);
  if (array != nullptr) array->lease(+1);
  return array;
}

void end_device_array_lease(void* lease) {
  if (lease != nullptr) static_cast<DeviceArray*>(lease)->lease(-1);
}

void register_cuda(Napi::Env env, Napi::Object exports) {
  Napi::Function device_array = DeviceArray::define(env);
  env.SetInstanceData(new CudaData{Napi::Persistent(device_array)});
  exports.Set("DeviceArray", device_array);
  exports.Set("cudaStatus", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
                return cuda_status_object(info.Env());
              }));
}

Napi::Object cuda_status_object(Napi::Env env) {
  Napi::Object status = Napi::Object::New(env);
  const bool available = tirl_cuda_available() != 0;
  status.Set("available", available);
  if (!available) status.Set("reason", tirl_cuda_status());
  return status;
}

}  // namespace tirl::binding
