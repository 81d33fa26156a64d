// Lazy loading of libtirl_cuda.so and the C ABI's device-memory helpers.
#include "common/cuda.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace tirl {

namespace {

struct CudaState {
  const tirl_cuda_backend* backend = nullptr;
  std::string reason;
};

// The directory of the object this function was compiled into: libtirl.so or tirl.node.
std::string core_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&core_directory), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

std::string dl_error() {
  const char* message = dlerror();
  return message != nullptr ? message : "unknown dlopen error";
}

CudaState load() {
  CudaState state;
  // TIRL_CUDA_LIBRARY names another backend library (the tests' host emulation, or a
  // build kept elsewhere); by default it sits beside the core.
  const char* override_path = std::getenv("TIRL_CUDA_LIBRARY");
  const std::string path = override_path != nullptr && *override_path != '\0'
                               ? std::string(override_path)
                               : core_directory() + TIRL_CUDA_LIBRARY_NAME;
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
#if defined(TIRL_CUDA_BUILT)
    state.reason = "the CUDA library could not be loaded: " + dl_error();
#else
    state.reason = "this build has no CUDA library (" + std::string(TIRL_CUDA_LIBRARY_NAME) +
                   " was not built: nvcc was not found or TIRL_CUDA=OFF; " + dl_error() + ")";
#endif
    return state;
  }
  auto entry = reinterpret_cast<tirl_cuda_backend_entry>(dlsym(library, TIRL_CUDA_BACKEND_SYMBOL));
  if (entry == nullptr) {
    state.reason = path + " has no entry point " + TIRL_CUDA_BACKEND_SYMBOL + ": " + dl_error();
    return state;
  }
  const tirl_cuda_backend* backend = entry();
  if (backend == nullptr || backend->version != TIRL_CUDA_BACKEND_VERSION ||
      backend->size != sizeof(tirl_cuda_backend)) {
    state.reason = path + " is from another version of tirl (backend version " +
                   std::to_string(backend != nullptr ? backend->version : 0) + ", expected " +
                   std::to_string(TIRL_CUDA_BACKEND_VERSION) + "): rebuild it with this tree";
    return state;
  }
  int32_t count = 0;
  if (backend->device_count(&count) != TIRL_OK) {
    state.reason = backend->last_error();
    return state;
  }
  if (count == 0) {
    state.reason = "the NVIDIA driver reports no CUDA device";
    return state;
  }
  state.backend = backend;
  return state;
}

const CudaState& state() {
  static std::once_flag once;
  static CudaState* loaded = nullptr;
  std::call_once(once, [] { loaded = new CudaState(load()); });
  return *loaded;
}

}  // namespace

const tirl_cuda_backend* cuda_backend() { return state().backend; }

const std::string& cuda_unavailable_reason() { return state().reason; }

}  // namespace tirl

namespace tirl {
namespace {

tirl_status copy(const char* name, tirl_device device, void* destination, const void* source,
                 size_t bytes, tirl_copy_direction direction) {
  return guarded([&]() -> tirl_status {
    if (bytes == 0) return ok();
    if (destination == nullptr || source == nullptr) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT, std::string(name) + ": NULL pointer");
    }
    return run_on_cuda(name, [&](const tirl_cuda_backend& cuda) {
      return cuda.memcpy(device, destination, source, bytes, direction);
    });
  });
}

}  // namespace
}  // namespace tirl

extern "C" {

int32_t tirl_cuda_available(void) { return tirl::cuda_backend() != nullptr ? 1 : 0; }

const char* tirl_cuda_status(void) { return tirl::cuda_unavailable_reason().c_str(); }

tirl_status tirl_cuda_malloc(tirl_device device, size_t bytes, void** pointer) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    if (pointer == nullptr) return fail(TIRL_ERROR_INVALID_ARGUMENT, "tirl_cuda_malloc: pointer is NULL");
    *pointer = nullptr;
    if (device.type != TIRL_DEVICE_CUDA || device.index < 0) {
      return fail(TIRL_ERROR_INVALID_ARGUMENT, "tirl_cuda_malloc: expected a CUDA device");
    }
    return run_on_cuda("tirl_cuda_malloc", [&](const tirl_cuda_backend& cuda) {
      return cuda.malloc(device, bytes, pointer);
    });
  });
}

tirl_status tirl_cuda_free(tirl_device device, void* pointer) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    if (pointer == nullptr) return ok();
    return run_on_cuda("tirl_cuda_free", [&](const tirl_cuda_backend& cuda) {
      return cuda.free(device, pointer);
    });
  });
}

tirl_status tirl_cuda_memcpy_h2d(tirl_device device, void* device_destination,
                                 const void* host_source, size_t bytes) {
  return tirl::copy("tirl_cuda_memcpy_h2d", device, device_destination, host_source, bytes,
              TIRL_COPY_HOST_TO_DEVICE);
}

tirl_status tirl_cuda_memcpy_d2h(tirl_device device, void* host_destination,
                                 const void* device_source, size_t bytes) {
  return tirl::copy("tirl_cuda_memcpy_d2h", device, host_destination, device_source, bytes,
              TIRL_COPY_DEVICE_TO_HOST);
}

tirl_status tirl_cuda_synchronize(tirl_device device) {
  using namespace tirl;
  return guarded([&]() -> tirl_status {
    return run_on_cuda("tirl_cuda_synchronize",
                       [&](const tirl_cuda_backend& cuda) { return cuda.synchronize(device); });
  });
}

}  // extern "C"
