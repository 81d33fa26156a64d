// Turns C++ exceptions into tirl statuses at a library boundary. Header-only, so the core
// and the separately built CUDA library share it, each with its own error recorder.
#pragma once

#include <exception>
#include <new>

#include "tirl/tirl.h"

namespace tirl {

// Runs `body` (returning tirl_status); an exception becomes a status recorded by
// `fail(status, message)`, so none crosses the C ABI.
template <class Fail, class Body>
tirl_status guard_exceptions(Fail&& fail, Body&& body) noexcept {
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
