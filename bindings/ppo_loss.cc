#include "common.h"

namespace tirl::binding {
namespace {

struct PpoLossCall {
  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  ArrayView<float> logp, old_logp, advantages, ref_logp, weights, grad;
  ArrayView<uint8_t> mask;
  ArrayView<int32_t> seq_offsets;
  tirl_ppo_options options = tirl_ppo_options_default();
  tirl_ppo_result stats{};
  Napi::ObjectReference grad_ref;

  static PpoLossCall parse(Options& o) {
    PpoLossCall c;
    c.logp = o.array<float>("logp", true);
    const int64_t n = c.logp.length;
    const std::string per_token = "one per token: logp.length";
    c.old_logp = o.array<float>("oldLogp", true);
    o.require_length(c.old_logp, "oldLogp", n, per_token);
    c.advantages = o.array<float>("advantages", true);
    o.require_length(c.advantages, "advantages", n, per_token);
    c.mask = o.array<uint8_t>("mask", true);
    o.require_length(c.mask, "mask", n, per_token);
    c.ref_logp = o.array<float>("refLogp", false);
    o.require_length(c.ref_logp, "refLogp", n, per_token);
    c.weights = o.array<float>("weights", false);
    o.require_length(c.weights, "weights", n, per_token);

    // Values pass through: the C call checks their ranges (and which arrays they need).
    tirl_ppo_options& p = c.options;
    p.clip_low = o.number("clipLow", p.clip_low);
    // From JavaScript, clipHigh defaults to clipLow (a symmetric clip).
    p.clip_high = o.number("clipHigh", p.clip_low);
    p.dual_clip = o.unless_zero("dualClip", p.dual_clip);
    p.aggregation = static_cast<tirl_aggregation>(
        o.choice("aggregation",
                 {"token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm"},
                 p.aggregation));
    p.token_normalizer = o.unless_zero("tokenNormalizer", p.token_normalizer);
    p.seq_normalizer = o.unless_zero("seqNormalizer", p.seq_normalizer);
    p.horizon = o.unless_zero("horizon", p.horizon);
    p.dp_size = o.number("dpSize", p.dp_size);
    p.kl_coef = o.number("klCoef", p.kl_coef);
    p.kl_estimator = static_cast<tirl_kl_estimator>(
        o.choice("klEstimator", {"k1", "k2", "k3", "abs"}, p.kl_estimator));
    p.ratio_level =
        static_cast<tirl_ratio_level>(o.choice("ratioLevel", {"token", "sequence"}, p.ratio_level));
    c.seq_offsets = o.array<int32_t>("seqOffsets", false);
    if (c.seq_offsets.present && c.seq_offsets.length < 1) {
      o.range_error(std::string(o.op()) +
                    ": Expected seqOffsets to have at least 1 element (B + 1) but received length 0");
    }
    c.grad = o.output<float>("grad", n, c.grad_ref);
    return c;
  }

  tirl_status run() {
    return tirl_ppo_loss(logp.data, old_logp.data, advantages.data, mask.data, logp.length,
                         seq_offsets.present ? seq_offsets.data : nullptr,
                         seq_offsets.present ? seq_offsets.length - 1 : 0,
                         ref_logp.present ? ref_logp.data : nullptr,
                         weights.present ? weights.data : nullptr, &options, grad.data, &stats,
                         device);
  }

  Napi::Value result(Napi::Env env) {
    Napi::Object r = Napi::Object::New(env);
    r.Set("loss", Napi::Number::New(env, stats.loss));
    r.Set("pgLoss", Napi::Number::New(env, stats.pg_loss));
    if (ref_logp.present) r.Set("klLoss", Napi::Number::New(env, stats.kl_loss));
    r.Set("grad", grad_ref.Value());
    r.Set("clipFraction", Napi::Number::New(env, stats.clip_fraction));
    r.Set("clipFractionLower", Napi::Number::New(env, stats.clip_fraction_lower));
    r.Set("approxKl", Napi::Number::New(env, stats.approx_kl));
    r.Set("nonFinite", Napi::Number::New(env, static_cast<double>(stats.non_finite)));
    r.Set("maskedTokens", Napi::Number::New(env, static_cast<double>(stats.masked_tokens)));
    return r;
  }
};

}  // namespace

TIRL_BINDING(ppo_loss, PpoLossCall)

}  // namespace tirl::binding
