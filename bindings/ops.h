// Each op's binding file defines one register function; addon.cc calls them all.
#pragma once

#include <napi.h>

namespace tirl::binding {

void register_library(Napi::Env env, Napi::Object exports);
// CUDA availability and the DeviceArray class; must run before any op reads arguments.
void register_cuda(Napi::Env env, Napi::Object exports);
// { available, reason? } as tirl.info().cuda and cuda.available() report it.
Napi::Object cuda_status_object(Napi::Env env);
void register_ppo_loss(Napi::Env env, Napi::Object exports);
void register_group_advantages(Napi::Env env, Napi::Object exports);
void register_advantages(Napi::Env env, Napi::Object exports);
void register_dpo_loss(Napi::Env env, Napi::Object exports);
void register_feedback_mask(Napi::Env env, Napi::Object exports);
void register_sequence_logprobs(Napi::Env env, Napi::Object exports);
void register_token_logprobs(Napi::Env env, Napi::Object exports);

}  // namespace tirl::binding
