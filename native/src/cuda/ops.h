// The CUDA backend: one function per op of ops.def, with the signature of its C ABI
// function (pointers are device pointers), in cuda/<op>.cu; cuda/backend.cu puts them in
// the table libtirl_cuda.so hands to the core.
#pragma once

#include "common/cuda_backend.h"
#include "tirl/tirl.h"

namespace tirl::cuda {

#define TIRL_OP(name, public_name, params, args) \
  tirl_status name(TIRL_EXPAND params, tirl_device device);
#include "ops.def"
#undef TIRL_OP

}  // namespace tirl::cuda
