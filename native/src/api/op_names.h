// The public name of each op of ops.def ("ppoLoss"): the prefix of its messages in the core
// and its name in JavaScript. op_name::dpo_loss is "dpoLoss".
#pragma once

namespace tirl::op_name {
#define TIRL_OP(name, public_name, params, args) inline constexpr const char name[] = public_name;
#include "ops.def"
#undef TIRL_OP
}  // namespace tirl::op_name
