// The addon's entry point. It holds no state of its own (every function is a pure
// translation to the C ABI), so it is safe in any number of worker threads.
#include <napi.h>

#include "ops.h"

namespace {

Napi::Object init(Napi::Env env, Napi::Object exports) {
  using namespace tirl::binding;
  register_library(env, exports);
  register_cuda(env, exports);
  register_group_advantages(env, exports);
  register_advantages(env, exports);
  register_dpo_loss(env, exports);
  register_ppo_loss(env, exports);
  register_feedback_mask(env, exports);
  register_sequence_logprobs(env, exports);
  register_token_logprobs(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(tirl, init)
