#include <string>
#include <string_view>
#include <vector>

#include "common.h"

namespace tirl::binding {
namespace {

// verl's registry keys, in tirl_policy_loss_kind order.
constexpr std::initializer_list<const char*> kPolicyLosses = {
    "vanilla", "gspo",     "dppo_tv", "dppo_kl", "sapo",      "gpg",        "clip_cov",
    "kl_cov",  "geo_mean", "dro",     "cispo",   "reinforce", "bypass_mode"};

// The options a loss reads beyond the shared ones (the arrays, aggregation, normalisers,
// dpSize, the KL term): verl's config keys in camelCase.
std::vector<const char*> make_own_options(tirl_policy_loss_kind loss, bool bypass_reinforce) {
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

// Every loss-specific option name.
constexpr const char* kLossOptions[] = {
    "clipLow",      "clipHigh",  "dualClip",  "ratioLevel", "weights",    "clipRatioC",
    "tauPos",       "tauNeg",    "clipCovRatio", "clipCovLb", "clipCovUb", "seed",
    "klCovRatio",   "ppoKlCoef", "droBeta",   "lossType",   "rolloutIs",  "rolloutIsThreshold",
    "rolloutIsThresholdLower", "rolloutIsBatchNormalize"};
constexpr size_t kLossOptionCount = sizeof kLossOptions / sizeof kLossOptions[0];
static_assert(kLossOptionCount <= 32, "a loss's options are a 32-bit set");

// The index of `name` in kLossOptions (kLossOptionCount if it is none).
constexpr size_t loss_option(std::string_view name) {
  for (size_t i = 0; i < kLossOptionCount; ++i) {
    if (name == kLossOptions[i]) return i;
  }
  return kLossOptionCount;
}
// The indices options_before and options_after ask for, found when compiled.
constexpr size_t kClipLow = loss_option("clipLow"), kDualClip = loss_option("dualClip"),
                 kRatioLevel = loss_option("ratioLevel"), kWeights = loss_option("weights");

// make_own_options as a set of kLossOptions indices, made once for every loss: asked ~25
// times a call, comparing names cost more than the kernel's own setup.
uint32_t own_option_set(tirl_policy_loss_kind loss, bool bypass_reinforce) {
  static const std::vector<uint32_t> sets = [] {
    const auto set_of = [](const std::vector<const char*>& names) {
      uint32_t set = 0;
      for (const char* name : names) set |= uint32_t{1} << loss_option(name);
      return set;
    };
    std::vector<uint32_t> t;
    for (int k = 0; k <= TIRL_POLICY_BYPASS_MODE; ++k) {
      t.push_back(set_of(make_own_options(static_cast<tirl_policy_loss_kind>(k), false)));
    }
    t.push_back(set_of(make_own_options(TIRL_POLICY_BYPASS_MODE, true)));
    return t;
  }();
  return sets[bypass_reinforce ? TIRL_POLICY_BYPASS_MODE + 1 : loss];
}

// The options the loss (and bypass_mode's lossType) chosen in `q` reads: bit i stands for
// kLossOptions[i] (loss_option(name) is the index of a name; in_set asks for one).
uint32_t loss_reads(const tirl_policy_loss_options& q) {
  const bool bypass_reinforce = q.policy_loss == TIRL_POLICY_BYPASS_MODE && q.loss_type == TIRL_BYPASS_REINFORCE;
  return own_option_set(q.policy_loss, bypass_reinforce);
}
constexpr bool in_set(uint32_t set, size_t option) { return (set >> option & 1) != 0; }

// What a call's options decide, read once by preparePpoLoss.
struct PpoLossSettings {
  tirl_policy_loss_options options = tirl_policy_loss_options_default();
  bool reads_weights = false;
};

// Why an option of another loss is refused: "not read by policyLoss 'x'".
std::string not_read_by(const tirl_policy_loss_options& q) {
  std::string label = std::string("not read by policyLoss '") + kPolicyLosses.begin()[q.policy_loss] + "'";
  if (q.policy_loss == TIRL_POLICY_BYPASS_MODE) {
    label += q.loss_type == TIRL_BYPASS_REINFORCE ? " with lossType 'reinforce'" : " with lossType 'ppo_clip'";
  }
  return label;
}

struct PpoLossCall {
  using Settings = PpoLossSettings;
  // The keys that go to a prepared call, not to preparePpoLoss.
  static constexpr const char* kArrays[] = {"logp",    "oldLogp",    "advantages", "mask",
                                            "refLogp", "weights",    "seqOffsets", "out"};

  tirl_device device = tirl_cpu();  // where the arrays are (set by define_op)
  ArrayView<float> logp, old_logp, advantages, ref_logp, weights, grad;
  ArrayView<uint8_t> mask;
  ArrayView<int32_t> seq_offsets;
  Settings settings;
  tirl_policy_loss_result stats{};
  OutputRef grad_ref;

  // The options read before the arrays: the loss, and the refusal of other losses' options.
  static void options_before(Options& o, Settings& s) {
    tirl_policy_loss_options& q = s.options;
    q.policy_loss =
        static_cast<tirl_policy_loss_kind>(o.choice("policyLoss", kPolicyLosses, q.policy_loss));
    const tirl_policy_loss_kind loss = q.policy_loss;
    if (loss == TIRL_POLICY_BYPASS_MODE) {
      q.loss_type = static_cast<tirl_bypass_loss_type>(
          o.choice("lossType", {"ppo_clip", "reinforce"}, q.loss_type));
    }
    // An option this loss does not read is a TypeError naming it and the loss.
    const uint32_t reads = loss_reads(q);
    for (size_t i = 0; i < kLossOptionCount; ++i) {
      if (!in_set(reads, i)) o.refuse(kLossOptions[i], [&] { return not_read_by(q); });
    }
    s.reads_weights = in_set(reads, kWeights);
  }

  // The arrays and the output, for options already read.
  static PpoLossCall arrays(Options& o, const Settings& s) {
    PpoLossCall c;
    c.settings = s;
    c.stats.struct_size = sizeof c.stats;
    c.logp = o.array<float>("logp", true);
    const int64_t n = c.logp.length;
    static const std::string per_token = "one per token: logp.length";
    c.old_logp = o.array<float>("oldLogp", true);
    o.require_length(c.old_logp, "oldLogp", n, per_token);
    c.advantages = o.array<float>("advantages", true);
    o.require_length(c.advantages, "advantages", n, per_token);
    c.mask = o.array<uint8_t>("mask", true);
    o.require_length(c.mask, "mask", n, per_token);
    c.ref_logp = o.array<float>("refLogp", false);
    o.require_length(c.ref_logp, "refLogp", n, per_token);
    if (s.reads_weights) {
      c.weights = o.array<float>("weights", false);
      o.require_length(c.weights, "weights", n, per_token);
    } else {
      o.refuse("weights", [&] { return not_read_by(s.options); });
    }
    c.seq_offsets = o.array<int32_t>("seqOffsets", false);
    if (c.seq_offsets.present && c.seq_offsets.length < 1) {
      o.range_error(std::string(o.op()) +
                    ": Expected seqOffsets to have at least 1 element (B + 1) but received length 0");
    }
    c.grad = o.output<float>("grad", n, c.grad_ref);
    return c;
  }

  // The options read after the arrays: every number and choice, passed through.
  static void options_after(Options& o, Settings& s) {
    tirl_policy_loss_options& q = s.options;
    const tirl_policy_loss_kind loss = q.policy_loss;
    const uint32_t read_set = loss_reads(q);
    const auto reads = [&](size_t option) { return in_set(read_set, option); };
    // Values pass through: the C call checks their ranges (and which arrays they need).
    tirl_ppo_options& p = q.ppo;
    if (reads(kClipLow)) {
      p.clip_low = o.number("clipLow", p.clip_low);
      // From JavaScript, clipHigh defaults to clipLow (a symmetric clip).
      p.clip_high = o.number("clipHigh", p.clip_low);
    }
    if (reads(kDualClip)) p.dual_clip = o.unless_zero("dualClip", p.dual_clip);
    // verl's GSPO and SAPO aggregate with seq-mean-token-mean whatever loss_agg_mode says:
    // that is their default here.
    const bool sequence_mean = loss == TIRL_POLICY_GSPO || loss == TIRL_POLICY_SAPO;
    p.aggregation = static_cast<tirl_aggregation>(
        o.choice("aggregation",
                 {"token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm"},
                 sequence_mean ? TIRL_AGG_SEQ_MEAN_TOKEN_MEAN : p.aggregation));
    p.token_normalizer = o.unless_zero("tokenNormalizer", p.token_normalizer);
    p.seq_normalizer = o.unless_zero("seqNormalizer", p.seq_normalizer);
    p.horizon = o.unless_zero("horizon", p.horizon);
    p.dp_size = o.number("dpSize", p.dp_size);
    p.kl_coef = o.number("klCoef", p.kl_coef);
    // 'low_var_kl' is verl's name of k3, 'mse' of k2; a '+' is the straight-through form.
    static const tirl_kl_estimator kEstimators[] = {
        TIRL_KL_K1, TIRL_KL_K2,      TIRL_KL_K3,      TIRL_KL_ABS,     TIRL_KL_K3,
        TIRL_KL_K2, TIRL_KL_K1_PLUS, TIRL_KL_K3_PLUS, TIRL_KL_K3_PLUS, TIRL_KL_ABS_PLUS};
    p.kl_estimator = kEstimators[o.choice(
        "klEstimator",
        {"k1", "k2", "k3", "abs", "low_var_kl", "mse", "k1+", "k3+", "low_var_kl+", "abs+"}, 2)];
    if (reads(kRatioLevel)) {
      p.ratio_level = static_cast<tirl_ratio_level>(
          o.choice("ratioLevel", {"token", "sequence"}, p.ratio_level));
    }
    q.clip_ratio_c = o.number("clipRatioC", q.clip_ratio_c);
    q.tau_pos = o.number("tauPos", q.tau_pos);
    q.tau_neg = o.number("tauNeg", q.tau_neg);
    q.clip_cov_ratio = o.number("clipCovRatio", q.clip_cov_ratio);
    q.clip_cov_lb = o.number("clipCovLb", q.clip_cov_lb);
    q.clip_cov_ub = o.number("clipCovUb", q.clip_cov_ub);
    q.kl_cov_ratio = o.number("klCovRatio", q.kl_cov_ratio);
    q.ppo_kl_coef = o.number("ppoKlCoef", q.ppo_kl_coef);
    if (loss == TIRL_POLICY_DRO && !o.has("droBeta")) {
      o.type_error("a number > 0 (policyLoss 'dro' needs it)", "droBeta", o.env().Undefined());
    }
    q.dro_beta = o.unless_zero("droBeta", q.dro_beta);
    q.seed = static_cast<uint64_t>(o.integer("seed", 0, 0, 9007199254740991LL));
    q.rollout_is = static_cast<tirl_rollout_is_level>(
        o.choice("rolloutIs", {"none", "token", "sequence"}, q.rollout_is));
    q.rollout_is_threshold = o.number("rolloutIsThreshold", q.rollout_is_threshold);
    q.rollout_is_threshold_lower =
        o.unless_zero("rolloutIsThresholdLower", q.rollout_is_threshold_lower);
    q.rollout_is_batch_normalize = o.boolean("rolloutIsBatchNormalize", false) ? 1 : 0;
    // The core's messages name the C fields.
    o.name_as("policy_loss", "policyLoss");
  }

  static PpoLossCall parse(Options& o) {
    Settings s;
    options_before(o, s);
    PpoLossCall c = arrays(o, s);
    options_after(o, c.settings);
    return c;
  }

  tirl_status run() {
    return tirl_policy_loss(logp.data, old_logp.data, advantages.data, mask.data, logp.length,
                            seq_offsets.present ? seq_offsets.data : nullptr,
                            seq_offsets.present ? seq_offsets.length - 1 : 0,
                            ref_logp.present ? ref_logp.data : nullptr,
                            weights.present ? weights.data : nullptr, &settings.options, grad.data, &stats,
                            device);
  }

  Napi::Value result(Napi::Env env) {
    const tirl_ppo_result& s = stats.ppo;
    ResultObject r(env);
    r.add("loss", s.loss);
    r.add("pgLoss", s.pg_loss);
    if (ref_logp.present) r.add("klLoss", s.kl_loss);
    r.add("grad", grad_ref.Value());
    r.add("clipFraction", s.clip_fraction);
    r.add("clipFractionLower", s.clip_fraction_lower);
    r.add("approxKl", s.approx_kl);
    r.add("nonFinite", static_cast<double>(s.non_finite));
    r.add("maskedTokens", static_cast<double>(s.masked_tokens));
    const tirl_policy_loss_options& options = settings.options;
    if (options.policy_loss == TIRL_POLICY_CLIP_COV || options.policy_loss == TIRL_POLICY_KL_COV) {
      r.add("selectedTokens", static_cast<double>(stats.selected_tokens));
    }
    if (options.rollout_is_batch_normalize != 0) {
      r.add("rolloutIsBatchNormFactor", stats.rollout_is_batch_norm_factor);
    }
    return r.done();
  }
};

}  // namespace

TIRL_BINDING(policy_loss, PpoLossCall)

}  // namespace tirl::binding
