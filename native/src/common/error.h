// Error reporting behind tirl_last_error(): one thread-local message per calling thread.
#pragma once

#include <string>

#include "common/guard_exceptions.h"
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
  return guard_exceptions([](tirl_status s, const char* m) { return fail(s, m); }, body);
}

}  // namespace tirl
