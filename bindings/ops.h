// The addon's registration: one register function per op of native/src/ops.def, defined
// in that op's binding file (TIRL_BINDING), called by addon.cc.
#pragma once

#include <napi.h>

namespace tirl::binding {

void register_library(Napi::Env env, Napi::Object exports);
// CUDA availability and the DeviceArray class; must run before any op reads arguments.
void register_cuda(Napi::Env env, Napi::Object exports);
// { available, reason? } as tirl.info().cuda and cuda.available() report it.
Napi::Object cuda_status_object(Napi::Env env);

#define TIRL_OP(name, public_name, params, args) \
  void register_##name(Napi::Env env, Napi::Object exports);
#include "ops.def"
#undef TIRL_OP

}  // namespace tirl::binding
