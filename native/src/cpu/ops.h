// The CPU backend: one function per op of ops.def, with the signature of its C ABI function
// (host pointers; `device` is the CPU). Called by the front door (api/<op>.cc) after its
// checks, with host index arrays already copied and checked; they validate nothing.
#pragma once

#include "common/cuda_backend.h"
#include "tirl/tirl.h"

namespace tirl::cpu {

#define TIRL_OP(name, public_name, params, args) \
  tirl_status name(TIRL_EXPAND params, tirl_device device);
#include "ops.def"
#undef TIRL_OP

// The table of the functions above (cpu/backend.cc).
const tirl_op_table& backend();

}  // namespace tirl::cpu
