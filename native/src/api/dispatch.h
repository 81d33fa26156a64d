// The front door's last step: a call that passed its checks goes to the backend of its
// device, the CPU kernels or the CUDA library, through the one table type of ops.def.
#pragma once

#include "common/cuda.h"
#include "common/cuda_backend.h"
#include "api/op_names.h"
#include "cpu/ops.h"
#include "tirl/tirl.h"

namespace tirl {

// Runs `call(table)` on the backend of `device` (checked by check_device): the CPU table,
// or the CUDA library's, loaded on first use ("<op>: CUDA is unavailable: ..." without it).
template <class Call>
tirl_status dispatch(const char* op, tirl_device device, Call&& call) {
  if (device.type == TIRL_DEVICE_CUDA) {
    return run_on_cuda(op, [&](const tirl_cuda_backend& cuda) { return call(cuda.ops); });
  }
  return call(cpu::backend());
}

}  // namespace tirl
