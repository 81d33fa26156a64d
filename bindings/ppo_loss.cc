#include <algorithm>
#include <string>
#include <vector>

#include "common.h"

namespace tirl::binding {
namespace {

// verl's registry keys, in tirl_policy_loss_kind order.
constexpr std::initializer_list<const char*> kPolicyLosses = {
    "vanilla", "gspo",     "dppo_tv", "dppo_kl", "sapo",      "gpg",        "clip_cov",
    "kl_cov",  "geo_mean", "dro",     "cispo",   "reinforce", "bypass_mode"};

// The options every loss reads.
const std::vector<std::string> kSharedOptions = {
    "logp",    "oldLogp",     "advantages",     "mask",          "seqOffsets",
    "out",     "policyLoss",  "aggregation",    "tokenNormalizer", "seqNormalizer",
    "horizon", "dpSize",      "refLogp",        "klCoef",        "klEstimator"};

// The options a loss reads beyond the shared ones (verl's config keys in camelCase).
std::vector<std::string> own_options(tirl_policy_loss_kind loss, bool bypass_reinforce) {
  switch (loss) {
    case TIRL_POLICY_VANILLA: return {"clipLow", "clipHigh", "dualClip", "ratioLevel", "weights"};
    case TIRL_POLICY_GSPO: return {"clipLow", "clipHigh", "weights"};
    case TIRL_POLICY_DPPO_TV:
    case TIRL_POLICY_DPPO_KL: return {"clipLow", "clipHigh", "clipRatioC", "weights"};
    case TIRL_POLICY_SAPO: return {"tauPos", "tauNeg", "weights"};
    case TIRL_POLICY_CLIP_COV:
      return {"clipLow", "clipHigh", "clipCovRatio", "clipCovLb", "clipCovUb", "seed", "weights"};
    case TIRL_POLICY_KL_COV: return {"klCovRatio", "ppoKlCoef", "weights"};
    case TIRL_POLICY_GEO_MEAN: return {"clipLow", "clipHigh", "weights"};
    case TIRL_POLICY_DRO: return {"droBeta", "weights"};
    case TIRL_POLICY_CISPO: return {"clipLow", "clipHigh", "weights"};
    case TIRL_POLICY_BYPASS_MODE:
      if (bypass_reinforce) {
        return {"lossType", "rolloutIs", "rolloutIsThreshold", "rolloutIsThresholdLower",
                "rolloutIsBatchNormalize"};
      }
      return {"lossType", "clipLow", "clipHigh", "dualClip"};
    default: return {"weights"};  // gpg, reinforce
  }
}

// Every option name some loss reads.
const std::vector<std::string>& all_options() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> names = kSharedOptions;
    for (int l = TIRL_POLICY_VANILLA; l <= TIRL_POLICY_BYPASS_MODE; ++l) {
      for (bool r : {false, true}) {
        for (auto& n : own_options(static_cast<tirl_policy_loss_kind>(l), r)) {
          if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
        }
      }
    }
    return names;
  }();
  return all;
}

std::string loss_label(tirl_policy_loss_kind loss, bool bypass_reinforce) {
  std::string label = std::string("policyLoss '") + kPolicyLosses.begin()[loss] + "'";
  if (loss == TIRL_POLICY_BYPASS_MODE) {
    label += bypass_reinforce ? " with lossType 'reinforce'" : " with lossType 'ppo_clip'";
  }
  return label;
}

// TypeError for a misspelt option, or one the chosen loss does not read: a typo must not
// change an experiment without a word.
void check_option_names(Options& o, tirl_policy_loss_kind loss, bool bypass_reinforce) {
  const std::vector<std::string> own = own_options(loss, bypass_reinforce);
  for (const std::string& name : o.present_names()) {
    const bool shared = std::find(kSharedOptions.begin(), kSharedOptions.end(), name) !=
                        kSharedOptions.end();
    if (shared || std::find(own.begin(), own.end(), name) != own.end()) continue;
    const bool known =
        std::find(all_options().begin(), all_options().end(), name) != all_options().end();
    std::string reads;
    for (const std::string& n : own) reads += (reads.empty() ? "" : ", ") + n;
    if (reads.empty()) reads = "none";
    const std::string label = loss_label(loss, bypass_reinforce);
    throw Napi::TypeError::New(
        o.env(), std::string(o.op()) + ": Expected no " + name + " with " + label + " (" +
                     (known ? "it does not read it" : "not an option of " + std::string(o.op())) +
                     "; its own options: " + reads +
                     "; shared: logp, oldLogp, advantages, mask, seqOffsets, aggregation, "
                     "tokenNormalizer, seqNormalizer, horizon, dpSize, refLogp, klCoef, "
                     "klEstimator, out) but received " + describe(o.raw(name)));
  }
}

struct PpoLossCall {
  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  ArrayView<float> logp, old_logp, advantages, ref_logp, weights, grad;
  ArrayView<uint8_t> mask;
  ArrayView<int32_t> seq_offsets;
  tirl_policy_loss_options options = tirl_policy_loss_options_default();
  tirl_policy_loss_result stats{};
  Napi::ObjectReference grad_ref;

  static PpoLossCall parse(Options& o) {
    o.track_reads();
    PpoLossCall c;
    c.stats.struct_size = sizeof c.stats;
    tirl_policy_loss_options& q = c.options;
    q.policy_loss = static_cast<tirl_policy_loss_kind>(o.choice("policyLoss", kPolicyLosses, q.policy_loss));
    const tirl_policy_loss_kind loss = q.policy_loss;
    if (loss == TIRL_POLICY_BYPASS_MODE) {
      q.loss_type = static_cast<tirl_bypass_loss_type>(
          o.choice("lossType", {"ppo_clip", "reinforce"}, q.loss_type));
    }
    const bool bypass_reinforce = loss == TIRL_POLICY_BYPASS_MODE && q.loss_type == TIRL_BYPASS_REINFORCE;

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

    tirl_ppo_options& p = q.ppo;
    p.clip_low = o.number("clipLow", p.clip_low);
    o.require(p.clip_low >= 0 && p.clip_low < 1, "clipLow", "a number in [0, 1)", p.clip_low);
    p.clip_high = o.number("clipHigh", p.clip_low);
    o.require(p.clip_high >= 0, "clipHigh", "a number >= 0", p.clip_high);
    if (o.has("dualClip")) {
      p.dual_clip = o.number("dualClip", 0);
      o.require(p.dual_clip > 1, "dualClip", "a number > 1", p.dual_clip);
    }
    // verl's GSPO and SAPO aggregate with seq-mean-token-mean whatever loss_agg_mode says:
    // that is their default here.
    const bool sequence_mean_default = loss == TIRL_POLICY_GSPO || loss == TIRL_POLICY_SAPO;
    p.aggregation = static_cast<tirl_aggregation>(
        o.choice("aggregation",
                 {"token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm"},
                 sequence_mean_default ? TIRL_AGG_SEQ_MEAN_TOKEN_MEAN : p.aggregation));
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
    // 'low_var_kl' is verl's name of k3, 'mse' of k2; a '+' is the straight-through form.
    static const tirl_kl_estimator kEstimators[] = {
        TIRL_KL_K1,      TIRL_KL_K2,      TIRL_KL_K3,       TIRL_KL_ABS,     TIRL_KL_K3,
        TIRL_KL_K2,      TIRL_KL_K1_PLUS, TIRL_KL_K3_PLUS,  TIRL_KL_K3_PLUS, TIRL_KL_ABS_PLUS};
    const int estimator = o.choice(
        "klEstimator",
        {"k1", "k2", "k3", "abs", "low_var_kl", "mse", "k1+", "k3+", "low_var_kl+", "abs+"}, 2);
    p.kl_estimator = kEstimators[estimator];
    p.ratio_level =
        static_cast<tirl_ratio_level>(o.choice("ratioLevel", {"token", "sequence"}, p.ratio_level));
    if (p.kl_coef > 0 && !c.ref_logp.present) {
      o.type_error("a Float32Array (klCoef > 0 needs the reference log-probs)", "refLogp",
                   o.env().Undefined());
    }

    q.clip_ratio_c = positive("clipRatioC", q.clip_ratio_c);
    q.tau_pos = positive("tauPos", q.tau_pos);
    q.tau_neg = positive("tauNeg", q.tau_neg);
    q.clip_cov_ratio = positive("clipCovRatio", q.clip_cov_ratio);
    o.require(q.clip_cov_ratio <= 1, "clipCovRatio", "a number in (0, 1]", q.clip_cov_ratio);
    q.clip_cov_lb = o.number("clipCovLb", q.clip_cov_lb);
    q.clip_cov_ub = o.number("clipCovUb", q.clip_cov_ub);
    o.require(q.clip_cov_ub > q.clip_cov_lb, "clipCovUb", "a number > clipCovLb", q.clip_cov_ub);
    q.kl_cov_ratio = positive("klCovRatio", q.kl_cov_ratio);
    o.require(q.kl_cov_ratio <= 1, "klCovRatio", "a number in (0, 1]", q.kl_cov_ratio);
    q.ppo_kl_coef = o.number("ppoKlCoef", q.ppo_kl_coef);
    o.require(q.ppo_kl_coef >= 0, "ppoKlCoef", "a number >= 0", q.ppo_kl_coef);
    if (loss == TIRL_POLICY_DRO && !o.has("droBeta")) {
      o.type_error("a number > 0 (policyLoss 'dro' needs it)", "droBeta", o.env().Undefined());
    }
    q.dro_beta = positive("droBeta", q.dro_beta);
    q.seed = static_cast<uint64_t>(o.integer("seed", 0, 0, 9007199254740991LL));
    q.rollout_is = static_cast<tirl_rollout_is_level>(
        o.choice("rolloutIs", {"none", "token", "sequence"}, q.rollout_is));
    q.rollout_is_threshold = positive("rolloutIsThreshold", q.rollout_is_threshold);
    q.rollout_is_threshold_lower = positive("rolloutIsThresholdLower", q.rollout_is_threshold_lower);
    o.require(q.rollout_is_threshold_lower <= q.rollout_is_threshold, "rolloutIsThresholdLower",
              "a number <= rolloutIsThreshold", q.rollout_is_threshold_lower);
    q.rollout_is_batch_normalize = o.boolean("rolloutIsBatchNormalize", false) ? 1 : 0;

    const bool needs_sequences =
        (p.aggregation != TIRL_AGG_TOKEN_MEAN && p.aggregation != TIRL_AGG_TOKEN_SUM) ||
        p.ratio_level == TIRL_RATIO_SEQUENCE || loss == TIRL_POLICY_GSPO ||
        loss == TIRL_POLICY_GEO_MEAN || q.rollout_is == TIRL_ROLLOUT_IS_SEQUENCE;
    if (needs_sequences && !o.has("seqOffsets")) {
      const char* why = p.ratio_level == TIRL_RATIO_SEQUENCE ? "ratioLevel 'sequence'"
                        : loss == TIRL_POLICY_GSPO           ? "policyLoss 'gspo'"
                        : loss == TIRL_POLICY_GEO_MEAN       ? "policyLoss 'geo_mean'"
                        : q.rollout_is == TIRL_ROLLOUT_IS_SEQUENCE ? "rolloutIs 'sequence'"
                                                              : "a seq-* aggregation";
      o.type_error(std::string("an Int32Array (needed by ") + why + ")", "seqOffsets",
                   o.env().Undefined());
    }
    c.seq_offsets = o.array<int32_t>("seqOffsets", false);
    if (c.seq_offsets.present && c.seq_offsets.length < 1) {
      o.range_error(std::string(o.op()) +
                    ": Expected seqOffsets to have at least 1 element (B + 1) but received length 0");
    }
    c.grad = o.output<float>("grad", n, c.grad_ref);
    // Last, when every option has been read once (getters run once, in reading order).
    check_option_names(o, loss, bypass_reinforce);
    return c;
  }

  tirl_status run() {
    return tirl_policy_loss(logp.data, old_logp.data, advantages.data, mask.data, logp.length,
                         seq_offsets.present ? seq_offsets.data : nullptr,
                         seq_offsets.present ? seq_offsets.length - 1 : 0,
                         ref_logp.present ? ref_logp.data : nullptr,
                         weights.present ? weights.data : nullptr, &options, grad.data, &stats,
                         device);
  }

  Napi::Value result(Napi::Env env) {
    const tirl_ppo_result& stats = this->stats.ppo;
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
    if (options.policy_loss == TIRL_POLICY_CLIP_COV || options.policy_loss == TIRL_POLICY_KL_COV) {
      r.Set("selectedTokens", Napi::Number::New(env, static_cast<double>(this->stats.selected_tokens)));
    }
    if (options.rollout_is_batch_normalize != 0) {
      r.Set("rolloutIsBatchNormFactor", Napi::Number::New(env, this->stats.rollout_is_batch_norm_factor));
    }
    return r;
  }
};

}  // namespace

void register_ppo_loss(Napi::Env env, Napi::Object exports) {
  define_op<PpoLossCall>(env, exports, "ppoLoss");
}

}  // namespace tirl::binding
