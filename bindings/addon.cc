// The addon's entry point. It holds no state of its own (every function is a pure
// translation to the C ABI), so it is safe in any number of worker threads.
#include <napi.h>

#include "ops.h"

namespace {

Napi::Object init(Napi::Env env, Napi::Object exports) {
  using namespace tirl::binding;
  register_library(env, exports);
  register_cuda(env, exports);
#define TIRL_OP(name, public_name, params, args) register_##name(env, exports);
#include "ops.def"
#undef TIRL_OP
  return exports;
}

}  // namespace

NODE_API_MODULE(tirl, init)
