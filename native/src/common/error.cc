#include "common/error.h"

namespace tirl {

namespace {
thread_local std::string last_error;
}

tirl_status fail(tirl_status status, const std::string& message) {
  last_error = message;
  return status;
}

tirl_status ok() {
  last_error.clear();
  return TIRL_OK;
}

}  // namespace tirl

extern "C" const char* tirl_last_error(void) { return tirl::last_error.c_str(); }
