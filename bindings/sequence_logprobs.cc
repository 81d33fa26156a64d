#include "common.h"
#include "ops.h"

namespace tirl::binding {
namespace {

// seqOffsets, read and checked for length; the C call checks its values.
ArrayView<int32_t> read_seq_offsets(Options& o) {
  ArrayView<int32_t> seq_offsets = o.array<int32_t>("seqOffsets", true);
  if (seq_offsets.length < 1) {
    o.range_error(std::string(o.op()) +
                  ": Expected seqOffsets to have at least 1 element (B + 1) but received length 0");
  }
  return seq_offsets;
}

struct SequenceLogprobsCall {
  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  ArrayView<float> logp, out;
  ArrayView<uint8_t> mask;
  ArrayView<int32_t> seq_offsets;
  bool average = false;
  OutputRef out_ref;

  static SequenceLogprobsCall parse(Options& o) {
    SequenceLogprobsCall c;
    c.logp = o.array<float>("logp", true);
    c.mask = o.array<uint8_t>("mask", true);
    o.require_length(c.mask, "mask", c.logp.length, "one per token: logp.length");
    c.seq_offsets = read_seq_offsets(o);
    c.average = o.boolean("average", false);
    c.out = o.output<float>(nullptr, c.seq_offsets.length - 1, c.out_ref);
    return c;
  }

  tirl_status run() {
    return tirl_sequence_logprobs(logp.data, mask.data, logp.length, seq_offsets.data,
                                  seq_offsets.length - 1, average ? 1 : 0, out.data, device);
  }

  Napi::Value result(Napi::Env) { return out_ref.Value(); }
};

struct SequenceLogprobsBackwardCall {
  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  ArrayView<float> grad_seq, out;
  ArrayView<uint8_t> mask;
  ArrayView<int32_t> seq_offsets;
  bool average = false;
  OutputRef out_ref;

  static SequenceLogprobsBackwardCall parse(Options& o) {
    SequenceLogprobsBackwardCall c;
    c.grad_seq = o.array<float>("gradSeq", true);
    c.mask = o.array<uint8_t>("mask", true);
    c.seq_offsets = read_seq_offsets(o);
    o.require_length(c.grad_seq, "gradSeq", c.seq_offsets.length - 1,
                     "one per sequence: seqOffsets.length - 1");
    c.average = o.boolean("average", false);
    c.out = o.output<float>(nullptr, c.mask.length, c.out_ref);
    o.name_as("grad_logp", "out");
    return c;
  }

  tirl_status run() {
    return tirl_sequence_logprobs_backward(grad_seq.data, mask.data, mask.length, seq_offsets.data,
                                           seq_offsets.length - 1, average ? 1 : 0, out.data,
                                           device);
  }

  Napi::Value result(Napi::Env) { return out_ref.Value(); }
};

}  // namespace

TIRL_BINDING(sequence_logprobs, SequenceLogprobsCall)
TIRL_BINDING(sequence_logprobs_backward, SequenceLogprobsBackwardCall)

}  // namespace tirl::binding
