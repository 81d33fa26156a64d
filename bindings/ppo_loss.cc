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

    tirl_ppo_options& p = c.options;
    p.clip_low = o.number("clipLow", p.clip_low);
    o.require(p.clip_low >= 0 && p.clip_low < 1, "clipLow", "a number in [0, 1)", p.clip_low);
    p.clip_high = o.number("clipHigh", p.clip_low);
    o.require(p.clip_high >= 0, "clipHigh", "a number >= 0", p.clip_high);
    if (o.has("dualClip")) {
      p.dual_clip = o.number("dualClip", 0);
      o.require(p.dual_clip > 1, "dualClip", "a number > 1", p.dual_clip);
    }
    p.aggregation = static_cast<tirl_aggregation>(
        o.choice("aggregation",
                 {"token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm"},
                 p.aggregation));
    // 0 means "default" in the C options; from JavaScript the default is an absent field.
    const auto positive = [&](const char* name, double fallback) {
      if (!o.has(name)) return fallback;
      const double value = o.number(name, fallback);
      o.require(value > 0, name, "a number > 0", value);
      return value;
    };
    p.token_normalizer = positive("tokenNormalizer", p.token_normalizer);
    p.seq_normalizer = positive("seqNormalizer", p.seq_normalizer);
    p.horizon = positive("horizon", p.horizon);
    p.dp_size = positive("dpSize", p.dp_size);
    p.kl_coef = o.number("klCoef", p.kl_coef);
    o.require(p.kl_coef >= 0, "klCoef", "a number >= 0", p.kl_coef);
    p.kl_estimator = static_cast<tirl_kl_estimator>(
        o.choice("klEstimator", {"k1", "k2", "k3", "abs"}, p.kl_estimator));
    p.ratio_level =
        static_cast<tirl_ratio_level>(o.choice("ratioLevel", {"token", "sequence"}, p.ratio_level));
    if (p.kl_coef > 0 && !c.ref_logp.present) {
      o.type_error("a Float32Array (klCoef > 0 needs the reference log-probs)", "refLogp",
                   o.env().Undefined());
    }

    const bool needs_sequences = p.aggregation != TIRL_AGG_TOKEN_MEAN &&
                                 p.aggregation != TIRL_AGG_TOKEN_SUM;
    const bool sequence_ratio = p.ratio_level == TIRL_RATIO_SEQUENCE;
    if (needs_sequences || sequence_ratio) {
      if (!o.has("seqOffsets")) {
        o.type_error(std::string("an Int32Array (needed by ") +
                         (sequence_ratio ? "ratioLevel 'sequence'" : "a seq-* aggregation") + ")",
                     "seqOffsets", o.env().Undefined());
      }
    }
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

void register_ppo_loss(Napi::Env env, Napi::Object exports) {
  define_op<PpoLossCall>(env, exports, "ppoLoss");
}

}  // namespace tirl::binding
