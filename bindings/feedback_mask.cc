#include "common.h"

namespace tirl::binding {
namespace {

struct FeedbackMaskCall {
  ArrayView<uint8_t> roles, keep, mask;
  ArrayView<int32_t> seq_offsets, action_tokens;
  OutputRef mask_ref, action_tokens_ref;
  tirl_device device = tirl_cpu();

  static FeedbackMaskCall parse(Options& o) {
    FeedbackMaskCall c;
    c.roles = o.array<uint8_t>("roles", true);
    c.seq_offsets = o.array<int32_t>("seqOffsets", true);
    if (c.seq_offsets.length < 1) {
      o.range_error(std::string(o.op()) +
                    ": Expected seqOffsets to have at least 1 element (B + 1) but received length 0");
    }
    const int64_t num_seqs = c.seq_offsets.length - 1;
    c.keep = o.array<uint8_t>("keep", false);
    o.require_length(c.keep, "keep", num_seqs, "one per sequence: seqOffsets.length - 1");
    c.mask = o.output<uint8_t>("mask", c.roles.length, c.mask_ref);
    c.action_tokens = o.output<int32_t>("actionTokens", num_seqs, c.action_tokens_ref);
    return c;
  }

  tirl_status run() {
    return tirl_feedback_mask(roles.data, roles.length, seq_offsets.data, seq_offsets.length - 1,
                              keep.present ? keep.data : nullptr, mask.data, action_tokens.data,
                              device);
  }

  Napi::Value result(Napi::Env env) {
    ResultObject r(env);
    r.add("mask", mask_ref.Value());
    r.add("actionTokens", action_tokens_ref.Value());
    return r.done();
  }
};

}  // namespace

TIRL_BINDING(feedback_mask, FeedbackMaskCall)

}  // namespace tirl::binding
