// The CUDA library seen from the core: loaded with dlopen on first use, from the directory
// the core itself was loaded from, so the core never links CUDA and loads on machines
// without a GPU, a driver or a toolkit.
#pragma once

#include <string>

#include "common/cuda_backend.h"
#include "common/error.h"
#include "tirl/tirl.h"

namespace tirl {

// The loaded backend with at least one CUDA device, or nullptr; thread-safe, loads once.
const tirl_cuda_backend* cuda_backend();

// Why cuda_backend() is null ("" when it is not): library not built or not found, no
// driver, a CUDA error from cudaGetDeviceCount, or no device.
const std::string& cuda_unavailable_reason();

// Runs `call(backend)` for an op on a CUDA device; when CUDA is unavailable records
// "<op>: CUDA is unavailable: <reason>" as TIRL_ERROR_UNSUPPORTED. A failure of the call
// carries the backend's message into tirl_last_error().
template <class Call>
tirl_status run_on_cuda(const char* op, Call&& call) {
  const tirl_cuda_backend* backend = cuda_backend();
  if (backend == nullptr) {
    return fail(TIRL_ERROR_UNSUPPORTED,
                std::string(op) + ": CUDA is unavailable: " + cuda_unavailable_reason());
  }
  tirl_status status = call(*backend);
  if (status != TIRL_OK) return fail(status, backend->last_error());
  return ok();
}

}  // namespace tirl
