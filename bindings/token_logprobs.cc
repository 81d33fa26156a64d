#include "common.h"

namespace tirl::binding {
namespace {

// The logits, vocabulary and labels both ops read, checked the same way.
struct LogitsInput {
  const void* data = nullptr;
  tirl_dtype dtype = TIRL_DTYPE_F32;
  int64_t vocab_size = 0;
  ArrayView<int32_t> labels;
  double temperature = 1;

  int64_t num_tokens() const { return labels.length; }

  static LogitsInput parse(Options& o) {
    LogitsInput in;
    in.dtype = o.choice("dtype", {"f32", "bf16"}, 0) == 0 ? TIRL_DTYPE_F32 : TIRL_DTYPE_BF16;
    // The array type must match dtype: bf16 logits come as their raw 16-bit patterns.
    int64_t length = 0;
    if (in.dtype == TIRL_DTYPE_F32) {
      ArrayView<float> logits = o.array<float>("logits", true);
      in.data = logits.data;
      length = logits.length;
    } else {
      ArrayView<uint16_t> logits = o.array<uint16_t>("logits", true);
      in.data = logits.data;
      length = logits.length;
    }
    if (!o.has("vocabSize")) o.type_error("an integer >= 1", "vocabSize", o.env().Undefined());
    // 2^53 - 1: the largest integer a JavaScript number holds exactly.
    in.vocab_size = o.integer("vocabSize", 1, 1, (int64_t{1} << 53) - 1);
    in.labels = o.array<int32_t>("labels", true);
    if (length % in.vocab_size != 0 || length / in.vocab_size != in.num_tokens()) {
      o.range_error(std::string(o.op()) + ": Expected logits to have length " +
                    std::to_string(in.num_tokens()) + " * " + std::to_string(in.vocab_size) +
                    " (labels.length * vocabSize) but received length " + std::to_string(length));
    }
    in.temperature = o.number("temperature", 1);
    return in;
  }
};

struct TokenLogprobsCall {
  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  LogitsInput in;
  bool with_entropy = false;
  ArrayView<float> logp, entropy;
  OutputRef logp_ref, entropy_ref;

  static TokenLogprobsCall parse(Options& o) {
    TokenLogprobsCall c;
    c.in = LogitsInput::parse(o);
    c.with_entropy = o.boolean("withEntropy", false);
    c.logp = o.output<float>("logp", c.in.num_tokens(), c.logp_ref);
    if (c.with_entropy) c.entropy = o.output<float>("entropy", c.in.num_tokens(), c.entropy_ref);
    return c;
  }

  tirl_status run() {
    return tirl_token_logprobs(in.data, in.dtype, in.num_tokens(), in.vocab_size, in.labels.data,
                               in.temperature, logp.data, with_entropy ? entropy.data : nullptr,
                               device);
  }

  Napi::Value result(Napi::Env env) {
    ResultObject r(env);
    r.add("logp", logp_ref.Value());
    if (with_entropy) r.add("entropy", entropy_ref.Value());
    return r.done();
  }
};

struct TokenLogprobsBackwardCall {
  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  LogitsInput in;
  ArrayView<float> grad_logp, grad_entropy, grad_logits;
  OutputRef grad_logits_ref;

  static TokenLogprobsBackwardCall parse(Options& o) {
    TokenLogprobsBackwardCall c;
    c.in = LogitsInput::parse(o);
    c.grad_logp = o.array<float>("gradLogp", true);
    o.require_length(c.grad_logp, "gradLogp", c.in.num_tokens(), "one per token: labels.length");
    c.grad_entropy = o.array<float>("gradEntropy", false);
    o.require_length(c.grad_entropy, "gradEntropy", c.in.num_tokens(),
                     "one per token: labels.length");
    // `out` may be the f32 logits array itself (an in-place backward); the C kernel refuses
    // a partial overlap.
    c.grad_logits = o.output<float>(nullptr, c.in.num_tokens() * c.in.vocab_size,
                                    c.grad_logits_ref);
    o.name_as("grad_logits", "out");
    return c;
  }

  tirl_status run() {
    return tirl_token_logprobs_backward(in.data, in.dtype, in.num_tokens(), in.vocab_size,
                                        in.labels.data, in.temperature, grad_logp.data,
                                        grad_entropy.present ? grad_entropy.data : nullptr,
                                        grad_logits.data, device);
  }

  Napi::Value result(Napi::Env) { return grad_logits_ref.Value(); }
};

}  // namespace

TIRL_BINDING(token_logprobs, TokenLogprobsCall)
TIRL_BINDING(token_logprobs_backward, TokenLogprobsBackwardCall)

}  // namespace tirl::binding
