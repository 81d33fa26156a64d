#include <algorithm>
#include <iterator>

#include "common.h"

namespace tirl::binding {
namespace {

// verl's rollout_rs names, in tirl_rollout_rs_option order.
const char* const kRsNames[TIRL_ROLLOUT_RS_COUNT] = {
    "token_k1",    "token_k2",    "token_k3",    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3"};

const char* const kRsEnums[TIRL_ROLLOUT_RS_COUNT] = {
    "TIRL_ROLLOUT_RS_TOKEN_K1",    "TIRL_ROLLOUT_RS_TOKEN_K2",    "TIRL_ROLLOUT_RS_TOKEN_K3",
    "TIRL_ROLLOUT_RS_SEQ_SUM_K1",  "TIRL_ROLLOUT_RS_SEQ_SUM_K2",  "TIRL_ROLLOUT_RS_SEQ_SUM_K3",
    "TIRL_ROLLOUT_RS_SEQ_MEAN_K1", "TIRL_ROLLOUT_RS_SEQ_MEAN_K2", "TIRL_ROLLOUT_RS_SEQ_MEAN_K3",
    "TIRL_ROLLOUT_RS_SEQ_MAX_K2",  "TIRL_ROLLOUT_RS_SEQ_MAX_K3"};

// The metrics of one rollout_rs option, in verl's order, as it names them after
// "rollout_rs_<option>_".
struct RsMetric {
  const char* name;
  double tirl_rollout_rs_stats::*value;
};
constexpr RsMetric kRsMetrics[] = {
    {"mean", &tirl_rollout_rs_stats::mean},
    {"max", &tirl_rollout_rs_stats::max},
    {"min", &tirl_rollout_rs_stats::min},
    {"fraction_high", &tirl_rollout_rs_stats::fraction_high},
    {"fraction_low", &tirl_rollout_rs_stats::fraction_low},
    {"std", &tirl_rollout_rs_stats::std},
    {"seq_mean", &tirl_rollout_rs_stats::seq_mean},
    {"seq_std", &tirl_rollout_rs_stats::seq_std},
    {"seq_max", &tirl_rollout_rs_stats::seq_max},
    {"seq_min", &tirl_rollout_rs_stats::seq_min},
    {"seq_max_deviation", &tirl_rollout_rs_stats::seq_max_deviation},
    {"seq_fraction_high", &tirl_rollout_rs_stats::seq_fraction_high},
    {"seq_fraction_low", &tirl_rollout_rs_stats::seq_fraction_low},
    {"masked_fraction", &tirl_rollout_rs_stats::masked_fraction},
    {"seq_masked_fraction", &tirl_rollout_rs_stats::seq_masked_fraction},
};
constexpr size_t kRsMetricCount = std::size(kRsMetrics);
constexpr size_t kSeqFractionLow = 12;
static_assert(kRsMetrics[kSeqFractionLow].value == &tirl_rollout_rs_stats::seq_fraction_low,
              "kSeqFractionLow is seq_fraction_low's place in kRsMetrics");

// The most metrics a call returns: 16 of the importance weights, those of every rejection
// option, 2 of the rejection as a whole and 13 of the mismatch.
constexpr size_t kMostMetrics = 16 + TIRL_ROLLOUT_RS_COUNT * kRsMetricCount + 2 + 13;

// "rollout_rs_<option>_<metric>", made once: a result's names must be stable pointers.
const char* rs_key(int option, size_t metric) {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> all;
    for (const char* name : kRsNames) {
      for (const RsMetric& m : kRsMetrics) all.push_back(std::string("rollout_rs_") + name + "_" + m.name);
    }
    return all;
  }();
  return keys[static_cast<size_t>(option) * kRsMetricCount + metric].c_str();
}

struct RolloutCorrectionCall {
  tirl_device device = tirl_cpu();
  ArrayView<float> logp, rollout_logp, weights;
  ArrayView<uint8_t> mask, mask_out;
  ArrayView<int32_t> seq_offsets;
  tirl_rollout_correction_options options = tirl_rollout_correction_options_default();
  tirl_rollout_correction_result stats{};
  OutputRef weights_ref, mask_ref;

  static RolloutCorrectionCall parse(Options& o) {
    RolloutCorrectionCall c;
    c.logp = o.array<float>("logp", true);
    const int64_t n = c.logp.length;
    const std::string per_token = "one per token: logp.length";
    c.rollout_logp = o.array<float>("rolloutLogp", true);
    o.require_length(c.rollout_logp, "rolloutLogp", n, per_token);
    c.mask = o.array<uint8_t>("mask", true);
    o.require_length(c.mask, "mask", n, per_token);
    c.seq_offsets = o.array<int32_t>("seqOffsets", true);
    if (c.seq_offsets.length < 1) {
      o.range_error(std::string(o.op()) +
                    ": Expected seqOffsets to have at least 1 element (B + 1) but received length 0");
    }

    // Values pass through: the C call checks their ranges.
    tirl_rollout_correction_options& p = c.options;
    p.rollout_is = static_cast<tirl_rollout_is_level>(
        o.choice("rolloutIs", {"none", "token", "sequence"}, p.rollout_is));
    p.rollout_is_threshold = o.number("rolloutIsThreshold", p.rollout_is_threshold);
    // 0 means TIS in the C options; from JavaScript TIS is an absent field.
    p.rollout_is_threshold_lower =
        o.unless_zero("rolloutIsThresholdLower", p.rollout_is_threshold_lower);
    p.rollout_is_batch_normalize = o.boolean("rolloutIsBatchNormalize", false) ? 1 : 0;
    if (p.rollout_is == TIRL_ROLLOUT_IS_NONE) {
      for (const char* name : {"rolloutIsThreshold", "rolloutIsThresholdLower", "rolloutIsBatchNormalize"}) {
        o.refuse(name, "not read with rolloutIs 'none'");
      }
    }

    const std::vector<std::string> names = o.string_list("rolloutRs");
    std::vector<int> chosen;
    for (size_t i = 0; i < names.size(); ++i) {
      int option = 0;
      while (option < TIRL_ROLLOUT_RS_COUNT && names[i] != kRsNames[option]) ++option;
      if (option == TIRL_ROLLOUT_RS_COUNT) {
        std::string list;
        for (const char* name : kRsNames) list += (list.empty() ? "'" : ", '") + std::string(name) + "'";
        o.range_error(std::string(o.op()) + ": Expected one of " + list + " for rolloutRs[" +
                      std::to_string(i) + "] but received '" + names[i] + "'");
      }
      if (p.rollout_rs & (1u << option)) {
        o.range_error(std::string(o.op()) + ": Expected each option once in rolloutRs but received '" +
                      names[i] + "' twice");
      }
      p.rollout_rs |= 1u << option;
      chosen.push_back(option);
      // The core names a per-option bound by its enum: rollout_rs_threshold[TIRL_ROLLOUT_RS_TOKEN_K1].
      o.name_as(kRsEnums[option], std::string("'") + kRsNames[option] + "'");
    }
    // One value shared by every option, or one per option in rolloutRs order.
    const auto per_option = [&](const char* name, const std::vector<double>& values) {
      if (values.size() > 1 && values.size() != chosen.size()) {
        o.range_error(std::string(o.op()) + ": Expected " + name +
                      " to hold one number or one per rolloutRs option (" +
                      std::to_string(chosen.size()) + ") but received " +
                      std::to_string(values.size()));
      }
    };
    if (chosen.empty()) {
      o.refuse("rolloutRsThreshold", "not read without rolloutRs");
      o.refuse("rolloutRsThresholdLower", "not read without rolloutRs");
    }
    const auto is_k1 = [](int option) { return option % 3 == 0 && option < 9; };
    if (std::none_of(chosen.begin(), chosen.end(), is_k1)) {
      o.refuse("rolloutRsThresholdLower", "read by k1 options only, and rolloutRs has none");
    }
    const std::vector<double> upper = o.number_list("rolloutRsThreshold");
    per_option("rolloutRsThreshold", upper);
    const std::vector<double> lower = o.number_list("rolloutRsThresholdLower");
    per_option("rolloutRsThresholdLower", lower);
    for (size_t i = 0; i < chosen.size(); ++i) {
      const int option = chosen[i];
      if (!upper.empty()) p.rollout_rs_threshold[option] = upper[upper.size() == 1 ? 0 : i];
      // A shared lower bound is that of every k1 option (only they take one).
      if (lower.size() == 1 ? is_k1(option) : !lower.empty()) p.rollout_rs_threshold_lower[option] = lower[lower.size() == 1 ? 0 : i];
    }

    c.weights = o.output<float>("weights", n, c.weights_ref);
    c.mask_out = o.output<uint8_t>("mask", n, c.mask_ref);
    return c;
  }

  tirl_status run() {
    return tirl_rollout_correction(logp.data, rollout_logp.data, mask.data, logp.length,
                                   seq_offsets.data, seq_offsets.length - 1, &options,
                                   weights.data, mask_out.data, &stats, device);
  }

  Napi::Value result(Napi::Env env) {
    ResultObject<kMostMetrics> metrics(env);
    const tirl_rollout_correction_result& r = stats;
    if (options.rollout_is != TIRL_ROLLOUT_IS_NONE) {
      metrics.add("rollout_is_mean", r.rollout_is_mean);
      metrics.add("rollout_is_max", r.rollout_is_max);
      metrics.add("rollout_is_min", r.rollout_is_min);
      metrics.add("rollout_is_std", r.rollout_is_std);
      metrics.add("rollout_is_eff_sample_size", r.rollout_is_eff_sample_size);
      metrics.add("rollout_is_ratio_fraction_high", r.rollout_is_ratio_fraction_high);
      metrics.add("rollout_is_ratio_fraction_low", r.rollout_is_ratio_fraction_low);
      metrics.add("rollout_is_seq_mean", r.rollout_is_seq_mean);
      metrics.add("rollout_is_seq_std", r.rollout_is_seq_std);
      metrics.add("rollout_is_seq_max", r.rollout_is_seq_max);
      metrics.add("rollout_is_seq_min", r.rollout_is_seq_min);
      metrics.add("rollout_is_seq_max_deviation", r.rollout_is_seq_max_deviation);
      metrics.add("rollout_is_seq_fraction_high", r.rollout_is_seq_fraction_high);
      metrics.add("rollout_is_seq_fraction_low", r.rollout_is_seq_fraction_low);
      if (options.rollout_is_threshold_lower > 0) metrics.add("rollout_is_oob_ratio", r.rollout_is_oob_ratio);
      if (options.rollout_is_batch_normalize) {
        metrics.add("rollout_is_batch_norm_factor", r.rollout_is_batch_norm_factor);
      }
    }
    for (int option = 0; option < TIRL_ROLLOUT_RS_COUNT; ++option) {
      if ((options.rollout_rs & (1u << option)) == 0) continue;
      const tirl_rollout_rs_stats& m = r.rollout_rs[option];
      // verl logs seq_fraction_low for the ratio bounds (k1) only.
      const bool k1 = option % 3 == 0 && option < 9;
      for (size_t i = 0; i < kRsMetricCount; ++i) {
        if (i != kSeqFractionLow || k1) metrics.add(rs_key(option, i), m.*kRsMetrics[i].value);
      }
    }
    if (options.rollout_rs != 0) {
      metrics.add("rollout_rs_masked_fraction", r.rollout_rs_masked_fraction);
      metrics.add("rollout_rs_seq_masked_fraction", r.rollout_rs_seq_masked_fraction);
    }
    metrics.add("training_ppl", r.training_ppl);
    metrics.add("training_log_ppl", r.training_log_ppl);
    metrics.add("kl", r.kl);
    metrics.add("k3_kl", r.k3_kl);
    metrics.add("rollout_ppl", r.rollout_ppl);
    metrics.add("rollout_log_ppl", r.rollout_log_ppl);
    metrics.add("log_ppl_diff", r.log_ppl_diff);
    metrics.add("log_ppl_abs_diff", r.log_ppl_abs_diff);
    metrics.add("log_ppl_diff_max", r.log_ppl_diff_max);
    metrics.add("log_ppl_diff_min", r.log_ppl_diff_min);
    metrics.add("ppl_ratio", r.ppl_ratio);
    metrics.add("chi2_token", r.chi2_token);
    metrics.add("chi2_seq", r.chi2_seq);

    ResultObject out(env);
    out.add("weights", weights_ref.Value());
    out.add("mask", mask_ref.Value());
    out.add("stats", metrics.done());
    out.add("maskedTokens", static_cast<double>(r.masked_tokens));
    out.add("validSeqs", static_cast<double>(r.valid_seqs));
    out.add("nonFinite", static_cast<double>(r.non_finite));
    return out.done();
  }
};

}  // namespace

TIRL_BINDING(rollout_correction, RolloutCorrectionCall)

}  // namespace tirl::binding
