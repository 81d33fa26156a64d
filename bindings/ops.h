// Each op's binding file defines one register function; addon.cc calls them all.
#pragma once

#include <napi.h>

namespace tirl::binding {

void register_library(Napi::Env env, Napi::Object exports);
void register_ppo_loss(Napi::Env env, Napi::Object exports);
void register_group_advantages(Napi::Env env, Napi::Object exports);
void register_dpo_loss(Napi::Env env, Napi::Object exports);
void register_feedback_mask(Napi::Env env, Napi::Object exports);
void register_sequence_logprobs(Napi::Env env, Napi::Object exports);
void register_token_logprobs(Napi::Env env, Napi::Object exports);

}  // namespace tirl::binding
