// Error reporting behind tirl_last_error(): one thread-local message per calling thread.
#pragma once

#include <string>

#include "tirl/tirl.h"

namespace tirl {

// Records `message` as this thread's last error and returns `status`, so a kernel can
// write `return fail(TIRL_ERROR_INVALID_ARGUMENT, "...")`.
tirl_status fail(tirl_status status, const std::string& message);

// Clears this thread's last error and returns TIRL_OK.
tirl_status ok();

// Runs `body` (returning tirl_status) and turns any C++ exception into a status, so no
// exception ever crosses the C ABI.
template <class Body>
tirl_status guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(TIRL_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(TIRL_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(TIRL_ERROR_INTERNAL, "unknown internal error");
  }
}

}  // namespace tirl
