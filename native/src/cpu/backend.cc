// The CPU backend's table, in ops.def's order.
#include "cpu/ops.h"

namespace tirl::cpu {

const tirl_op_table& backend() {
  static const tirl_op_table table = {
#define TIRL_OP(name, public_name, params, args) &cpu::name,
#include "ops.def"
#undef TIRL_OP
  };
  return table;
}

}  // namespace tirl::cpu
